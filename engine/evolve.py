"""`evolve`: run one search procedure on a task, commit to its final workflow, then (and only
then) score the initial and final workflows with the official held-out evaluator."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TextIO

from .budget import Budget
from .errors import ModelUnavailable
from .synthesis import team_workflow
from .task import Task, load_task
from .trace import EventSink, JsonlTraceSink, Tracer, claim_attempt
from .workflow import Workflow
from .search.mimosa import IterationRecord, mimosa_search
from .sandbox import Executor
from .search.probe import Gate, ProbeRunner, search_gateway

SEARCHES = ("mimosa", "scimars", "tree")


@dataclass
class EvolveResult:
    task: str
    search: str
    run_dir: Path
    iterations: int
    stopped: str
    initial: dict          # {"workflow_hash", "validation", "J", "official"}
    final: dict
    usage: dict
    wall_s: float
    start: dict = field(default_factory=dict)  # warm start or de novo
    archived: dict = field(default_factory=dict)  # {"entry": id} or {"skipped": why}
    trace: str = ""  # this attempt's search trace (search.jsonl, then search.2.jsonl after a resume)

    def to_dict(self) -> dict:
        return {**self.__dict__, "run_dir": str(self.run_dir)}


def evolve(task_folder: str | Path, search: str = "mimosa", iterations: int = 5, seed: int = 0,
           budget: Budget | None = None, runs_dir: Path = Path("var/runs"), out: TextIO = sys.stdout,
           gate: Gate | None = None, model_override: str | None = None,
           official: Callable[..., dict] | None = None, archive_dir: Path | None = None,
           sinks: Iterable[EventSink] = (), run_dir: Path | None = None, resume: dict | None = None,
           on_checkpoint: Callable[[dict], None] | None = None, executor: Executor | None = None) -> EvolveResult:
    """Run one search and the official evaluation after it.

    ``sinks`` receive every event, the search's and each probe's (the web app stores and pushes
    them). ``executor`` runs every program (tests pass a fake; default: the sandbox).
    ``on_checkpoint``/``resume`` make a Mimosa or SciMARS search continue after its last
    finished iteration or round in the same ``run_dir``; the tree search starts over on resume.

    A model that cannot be called (ModelUnavailable) stops the search: it is traced as
    ``search_failed``, said in one line on ``out``, and raised; nothing is archived. Nor is a
    final workflow whose probe failed or made no model call."""
    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}; choose one of {', '.join(SEARCHES)}")
    task = load_task(task_folder)
    budget = budget or Budget(max_tokens=2_000_000)
    sinks = list(sinks)
    run_dir = Path(run_dir) if run_dir else Path(runs_dir) / (time.strftime("%Y%m%d-%H%M%S") + f"-{task.name}-{search}")
    # A resumed search writes its own trace file: sequence numbers never restart inside one.
    attempt, trace_path = claim_attempt(run_dir, "search")
    tracer = Tracer(run_dir.name if attempt == 1 else f"{run_dir.name}-attempt{attempt}",
                    [JsonlTraceSink(trace_path), *sinks])
    gateway = search_gateway(budget, tracer, seed, model_override)
    started = time.perf_counter()
    archive = None
    if archive_dir is not None:
        from .archive import WorkflowArchive

        archive = WorkflowArchive(archive_dir)
    if resume and resume.get("start"):  # the start chosen before the interruption, not a new one
        initial_wf, start_info = Workflow.from_dict(resume["start"]["workflow"]), resume["start"]["info"]
    elif archive is not None:
        start = archive.start_for(task)
        initial_wf, start_info = start.workflow, start.to_dict()
    else:
        initial_wf, start_info = team_workflow(task), {"path": "de_novo", "similarity": None,
                                                      "reason": "no archive configured"}
    start_state = {"workflow": initial_wf.to_dict(), "info": start_info}

    def checkpoint(state: dict) -> None:
        if on_checkpoint:
            on_checkpoint({**state, "start": start_state})

    tracer.emit("search_started", None, search=search, task=task.name, iterations=iterations, seed=seed,
                budget=budget.limits(), workflow_hash=initial_wf.hash, start=start_info,
                workflow=initial_wf.to_dict(), resumed_after=resume.get("n") if resume else None)
    out.write(f"evolving {task.name} with {search}, {iterations} iteration(s), seed {seed}\n")
    similarity = start_info.get("similarity")
    out.write(f"start: {start_info['path']}" + (f" (similarity {similarity:.3f})" if similarity is not None else "")
              + (f" from {start_info.get('source')}" if start_info.get("source") else "") + "\n")
    try:
        if search in ("mimosa", "scimars"):
            runner = ProbeRunner(task, budget, run_dir / "probes", seed=seed, model_override=model_override,
                                 sinks=sinks, executor=executor)
            resume_state = resume if resume and resume.get("n") is not None else None
            if search == "mimosa":
                outcome = mimosa_search(initial_wf, runner, gateway, tracer, iterations=iterations, gate=gate,
                                        on_iteration=lambda r: _print_iteration(r, out), resume=resume_state,
                                        on_checkpoint=checkpoint)
            else:
                from .search.scimars import scimars_search

                outcome = scimars_search(initial_wf, runner, gateway, tracer, rounds=iterations,
                                         on_round=lambda r: _print_round(r, out), gate=gate, resume=resume_state,
                                         on_checkpoint=checkpoint)
            initial, final = outcome.initial, outcome.final
            initial_d, final_d = _describe(initial), _describe(final)
            stopped, n = outcome.stopped, len(outcome.iterations)
        else:
            from .sandbox.subprocess_executor import SubprocessExecutor
            from .search.tree import TreeConfig, tree_search

            executor = executor or SubprocessExecutor(root=run_dir / "sandboxes")
            tree = tree_search(task, gateway, executor, tracer, TreeConfig(iterations=iterations, seed=seed),
                               run_dir / "tree")
            root = next((nd for nd in tree.tree.nodes.values() if nd.parent is None), None)
            if root is None or tree.champion is None:
                raise RuntimeError(f"the tree search produced no scored candidate ({tree.stopped}: {tree.reason})")
            initial = final = None
            initial_d = {"workflow_hash": initial_wf.hash, "version": initial_wf.version, "validation": root.score,
                         "J": None, "node": root.id}
            final_d = {"workflow_hash": initial_wf.hash, "version": initial_wf.version,
                       "validation": tree.champion.score, "J": None, "node": tree.champion.id}
            stopped, n = f"{tree.stopped} {tree.reason}".strip(), tree.iterations
            for row in tree.tree.table():
                out.write("  " + "  ".join(f"{k}={v}" for k, v in row.items()) + "\n")
        # The tree evolves candidate programs, not the team's workflow, so its workflow stays.
        final_workflow = final.workflow if final is not None else initial_wf
        # Final commitment made: now, once, the official held-out evaluation of both ends.
        from .official import official_for_code, official_metric

        if search == "tree":
            initial_d["official"] = official_for_code(task, root.code, executor)
            final_d["official"] = official_for_code(task, tree.champion.code, executor)
        else:
            score = official or official_metric
            initial_d["official"] = score(task, initial.run_dir, initial.result.predictions_sha256)
            final_d["official"] = score(task, final.run_dir, final.result.predictions_sha256)
        for label, d in (("initial", initial_d), ("final", final_d)):
            tracer.emit("official_evaluation", None, which=label, workflow_hash=d["workflow_hash"], **d["official"])
        result = EvolveResult(task.name, search, run_dir, n, stopped, initial_d, final_d, budget.used.to_dict(),
                              time.perf_counter() - started, start=start_info, trace=str(trace_path))
        if archive is not None:
            why_not = not_archivable(final, budget)
            if why_not:
                result.archived = {"skipped": why_not}
                tracer.emit("archive", None, skipped=why_not, workflow_hash=final_workflow.hash)
            else:
                entry = archive.add(task, final_workflow, final_d["official"], search,
                                    note=f"evolved in {run_dir.name}")
                result.archived = {"entry": entry.id}
                tracer.emit("archive", None, entry=entry.id, workflow_hash=final_workflow.hash)
        (run_dir / "final_workflow.json").write_text(final_workflow.to_json())
        (run_dir / "evolve.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
        tracer.emit("search_finished", None, **{k: v for k, v in result.to_dict().items() if k != "run_dir"})
        _print_summary(task, result, out)
        return result
    except ModelUnavailable as exc:
        tracer.emit("search_failed", exc.agent, **exc.to_dict(), usage=budget.used.to_dict(),
                    archived=False)
        out.write(f"search stopped: model {exc.model} could not be called; nothing archived; "
                  f"trace {trace_path}\n")
        out.flush()
        raise
    finally:
        tracer.close()


def not_archivable(final, budget: Budget) -> str:
    """Why a search's final workflow must not enter the archive ('' when it may): a workflow
    that never called a model, or whose last execution failed, has shown nothing worth starting
    another task from."""
    if budget.used.calls == 0:
        return "the search made no model call"
    if final is None:  # the tree search: its champion was scored, the team's workflow unchanged
        return ""
    if not final.result.usage.get("calls"):
        return f"the final workflow's probe made no model call ({final.result.reason or final.result.status})"
    if final.result.status != "completed":
        return f"the final workflow's probe {final.result.status}: {final.result.reason}"
    return ""


def _describe(probe) -> dict:
    return {"workflow_hash": probe.workflow.hash, "version": probe.workflow.version,
            "validation": probe.validation, "J": probe.judgement.J if probe.judgement else None}


def _print_iteration(r: IterationRecord, out: TextIO) -> None:
    if not r.valid:
        out.write(f"iter {r.n:>2}  invalid proposal: {r.problems[0][:100]}\n")
        return
    m = r.mutation or {}
    checks = r.probe["checks"] if r.probe else []
    passed = sum(1 for c in checks if c["passed"])
    left = r.budget_left.get("tokens")
    j = "failed" if r.J is None else f"{r.J:.3f}"
    inc = "-" if r.incumbent_J is None else f"{r.incumbent_J:.3f}"
    out.write(f"iter {r.n:>2}  {m.get('kind')} on {m.get('target')}: {m.get('rationale', '')[:60]}\n"
              f"         checks {passed}/{len(checks)}  J {j} vs {inc}  "
              f"{'ACCEPTED' if r.accepted else 'rejected'} ({r.decided_by})  budget left {left} tokens\n")
    out.flush()


def _print_round(r, out: TextIO) -> None:
    """One SciMARS round: each editor's proposal with its probe's checks, then the composer's choice."""
    out.write(f"round {r.n:>2}  reference validation {_num((r.reference or {}).get('validation', {}).get('value'))}\n")
    for p in r.proposals:
        m = p.mutation or {}
        if not p.valid:
            out.write(f"         {p.editor:<20} invalid: {(p.problems or ['?'])[0][:80]}\n")
            continue
        checks = (p.probe or {}).get("checks", [])
        value = ((p.probe or {}).get("validation") or {}).get("value")
        reused = " (reused)" if p.receipt and p.receipt.get("verified") else ""
        out.write(f"         {p.editor:<20} {m.get('kind')} on {m.get('target')}: checks "
                  f"{sum(c['passed'] for c in checks)}/{len(checks)} validation {_num(value)}"
                  f"{' supported' if p.supported else ''}{reused}\n")
    out.write(f"         decision: {r.decision}{' (' + ', '.join(r.chosen) + ')' if r.chosen else ''}  "
              f"budget left {r.budget_left.get('tokens')} tokens\n")
    out.flush()


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _print_summary(task: Task, r: EvolveResult, out: TextIO) -> None:
    def official(d: dict) -> str:
        o = d.get("official") or {}
        return f"{o['value']:.6g}" if o.get("ok") else f"none ({o.get('error', '')[:40]})"

    def num(x) -> str:
        return "-" if x is None else f"{x:.4g}"

    name = task.metric.name
    out.write("\n" + "=" * 72 + "\n")
    out.write(f"search     {r.search}: {r.iterations} iteration(s), stopped: {r.stopped}\n")
    out.write(f"{'':10} {'workflow':<14} {'J':>7} {'validation':>12} {'official ' + name:>22}\n")
    for label, d in (("initial", r.initial), ("final", r.final)):
        out.write(f"{label:<10} v{d['version']} {d['workflow_hash'][:10]:<11} {num(d['J']):>7} "
                  f"{num(d['validation']):>12} {official(d):>22}\n")
    out.write(f"({'higher' if task.metric.higher_is_better else 'lower'} is better; official = evaluate.py on "
              f"held-out data, run once after the final commitment)\n")
    out.write(f"cost       {r.usage['calls']} model calls, {r.usage['tokens']} tokens, {r.wall_s:.1f}s\n")
    if r.archived.get("skipped"):
        out.write(f"archive    not archived: {r.archived['skipped']}\n")
    elif r.archived.get("entry"):
        out.write(f"archive    added as {r.archived['entry']}\n")
    out.write(f"trace      {r.trace or r.run_dir / 'search.jsonl'}\n")
