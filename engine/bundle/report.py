"""The champion bundle's words: the analysis report (markdown) and the README of the zip."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..search.tree import Node, Tree
from ..task import Task
from .parts import Job, Pairs

MAX_REPORT_CHARS = 6000   # one analyst report in the bundle's report; the tree keeps it whole


@dataclass
class Contents:
    """What a bundle holds, for its report and README: (file name, what it is), and what it
    could not hold with the reason."""

    files: list[tuple[str, str]] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)

    def add(self, name: str, what: str) -> None:
        self.files.append((name, what))

    def lack(self, part: str, why: str) -> None:
        self.missing.append((part, why))


def _num(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _official(d: dict | None) -> str:
    if not d:
        return "not evaluated"
    return _num(d.get("value")) if d.get("ok") else f"none ({d.get('error') or 'nothing delivered'})"


def _beats(value: float, other: float, higher_is_better: bool) -> bool:
    return value > other if higher_is_better else value < other


def _fit_summary(pairs: Pairs | None) -> str:
    if pairs is None:
        return "not available"
    nums = pairs.numeric()
    if nums is None:
        right = sum(t == p for t, p in zip(pairs.truth, pairs.prediction))
        return f"{right} of {len(pairs.ids)} rows predicted right ({right / len(pairs.ids):.1%})"
    res = [p - t for t, p in zip(*nums)]
    rms = math.sqrt(sum(r * r for r in res) / len(res))
    return f"{len(res)} rows, RMS residual {rms:.4g}, max |residual| {max(abs(r) for r in res):.4g}"


def analysis_report(task: Task, tree: Tree, champion: Node, *, official: dict, baselines: dict,
                    validation: Pairs | None, heldout: Pairs | None, job: Job | None, stopped: str,
                    notes: str, contents: Contents) -> str:
    """The task, the champion's strategy and lineage, its validation and official scores, the
    baselines, the result analysts' notes and the checks, in markdown."""
    hib, metric = tree.higher_is_better, tree.metric
    direction = "higher is better" if hib else "lower is better"
    lines = [f"# Champion bundle: {task.title}", "",
             f"Task `{task.name}`; metric `{metric}` ({direction}). The AgenticSciML tree search "
             f"explored {len(tree.nodes)} candidate program(s) and stopped: {stopped or 'done'}.", "",
             "## The task", "", task.goal.strip(), "",
             "## The champion", "",
             f"- node **{champion.id}** (iteration {champion.iteration}), `{champion.strategy_line()}`",
             f"- debugger repairs before it ran: {champion.debug_attempts}; knowledge used: "
             f"{', '.join(champion.knowledge) or 'none'}; passed the gate: {champion.decided_by or 'root'}"]
    if champion.proposal:
        lines += ["", "The proposal it was built from:", "", "> " + champion.proposal.strip()[:2000].replace("\n", "\n> ")]
    lines += ["", "## Lineage (root first)", "", "| node | iteration | strategy | validation | verdict |",
              "| --- | --- | --- | --- | --- |"]
    for n in reversed(tree.lineage(champion)):
        lines.append(f"| {n.id} | {n.iteration} | {n.strategy_line()} | {_num(n.score)} | {n.verdict or 'root'} |")
    v = champion.validation or {}
    plan = v.get("validation") or {}
    lines += ["", "## Scores", "",
              f"- **validation (in-loop)**: {_num(champion.score)} {metric}, mean of {v.get('splits', '?')} fold(s) "
              f"{v.get('split_values', [])}; split: {plan.get('split', '?')} ({plan.get('reason', '')})",
              f"- **official (held-out)**: {_official(official)}: evaluate.py on the held-out answer key, "
              "once, after the final commitment",
              f"- fit on the validation folds: {_fit_summary(validation)}",
              f"- fit on the held-out rows (official): {_fit_summary(heldout)}", "",
              "### Baselines", "", "| baseline | official | validation folds | the champion beats it |",
              "| --- | --- | --- | --- |"]
    fold_baselines = v.get("baselines") or {}
    for name in sorted(set(baselines) | set(fold_baselines)):
        off = baselines.get(name) or {}
        beat = "n/a"
        if off.get("ok") and official.get("ok"):
            beat = "yes" if _beats(official["value"], off["value"], hib) else "**no**"
        lines.append(f"| {name.replace('_', ' ')} | {_official(off) if off else 'n/a'} | "
                     f"{_num(fold_baselines.get(name))} | {beat} |")
    lines += ["", "## What the result analysts said", ""]
    for n in reversed(tree.lineage(champion)):
        who = "data analyst (root)" if n.parent is None else f"result analyst, {n.id} vs {n.parent}"
        text = n.report.strip()
        if len(text) > MAX_REPORT_CHARS:
            text = text[:MAX_REPORT_CHARS] + f"\n[... {len(n.report) - MAX_REPORT_CHARS} more characters in tree.json]"
        # the analyst's own headings sit below this section's
        text = "\n".join("###" + line if line.startswith("#") else line for line in text.splitlines())
        lines += [f"### {who}", "", text, ""]
    lines += ["## Checks", "", "Plausibility of the champion's predictions on the validation folds:", ""]
    lines += [f"- {'passed' if c.get('passed') else '**FAILED**'} `{c.get('name')}`: {c.get('detail', '')}"
              for c in champion.checks] or ["- none recorded"]
    lines += ["", "At the final commitment (the champion on the task's own data): "
              + (notes or "its predictions passed every check.")]
    if job is not None:
        s = job.state
        ck = s.checkpoint or {}
        lines += ["", "## Training", "",
                  f"The champion's program is a training job: `{job.key}` (found by {job.found_by}), status "
                  f"{s.status}, device {s.device}, {s.epoch + 1 if s.epoch is not None else '?'} of {s.epochs or '?'} "
                  f"epoch(s), best validation loss {_num(s.best_val)}, {s.runs} start(s); last checkpoint "
                  f"{str(ck.get('sha256', 'none'))[:12]} at epoch {ck.get('epoch', '?')}."]
    lines += ["", "## Files", ""] + [f"- `{name}`: {what}" for name, what in contents.files]
    if contents.missing:
        lines += ["", "Not in this bundle:", ""] + [f"- {part}: {why}" for part, why in contents.missing]
    return "\n".join(lines) + "\n"


def readme(task: Task, champion: Node, contents: Contents, official: dict) -> str:
    """README.txt: what each file of the zip is."""
    width = max([len(n) for n, _ in contents.files] + [len("README.txt")])
    lines = [f"Trellis champion bundle: task {task.name}, champion {champion.id} "
             f"({champion.strategy or 'strategy unknown'}), official {task.metric.name} {_official(official)}.",
             "",
             "The in-loop validation folds are splits of the training rows only; the held-out (official)",
             "files use the answer key, read once after the search committed to its champion.",
             "", "Files:", ""]
    lines += [f"  {name.ljust(width)}  {what}" for name, what in contents.files]
    lines.append(f"  {'README.txt'.ljust(width)}  this file")
    if contents.missing:
        lines += ["", "Not included:", ""] + [f"  {part}: {why}" for part, why in contents.missing]
    return "\n".join(lines) + "\n"


def manifest(task: Task, champion: Node, entries: list[dict], missing: list[tuple[str, str]], official: dict) -> str:
    return json.dumps({"version": 1, "task": task.name, "champion": champion.id, "strategy": champion.strategy,
                       "validation": champion.score, "official": official, "files": entries,
                       "missing": [{"part": p, "why": w} for p, w in missing]}, indent=2, default=str)
