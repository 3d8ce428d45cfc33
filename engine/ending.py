"""What every run does after its final commitment, beside its own official score, and says in
the same words: ``python -m engine run`` and every search (engine/evolve.py) end here.

The trivial baselines scored officially (engine/official.py), the baseline that uses a model (the
single-agent workflow, one agent playing every role, on the team's budget: if a team of agents
cannot beat one agent, its structure adds nothing), the team's lead over each beyond the test
set's noise (engine/official_gap.py), and the lines that say how the team fared against them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from .assessment import trivial_or_error
from .budget import Budget
from .control import NoControl
from .errors import ModelUnavailable
from .official import official_baselines, saved_predictions
from .official_gap import Gap, describe_gaps, official_gaps
from .runner import RunConfig, run_workflow
from .selection import better, same
from .synthesis import single_agent_workflow
from .task import Task
from .tools.allocation import allocate
from .tools.registry import use


def single_agent_baseline(task: Task, run_dir: Path, *, seed: int, budget: Budget, executor=None,
                          model_override: str | None = None, control=None, tools=None, models=None,
                          discover_tools: bool = False, cache_dir: Path | None = None, replay_only: bool = False) -> dict:
    """Run the single-agent workflow on a budget with the team's limits and score it officially.
    It is given the tools the team was given: ``tools`` (a search's discovered MCP tools), or with
    ``discover_tools`` those it discovers itself, each role's allocation to its one agent.
    Returns ``{"workflow_hash", "status", "reason", "official", "usage", "trace", "run_dir",
    "predictions_sha256"}``; a model that
    cannot be called is a failed baseline, never a failed run (the team's result stands)."""
    workflow = single_agent_workflow(task)
    if tools is not None:  # the team's discovered tools: the one agent is given every role's
        with use(tools.registry):
            workflow = allocate(workflow, tools.registry).validate()
    config = RunConfig(run_dir=Path(run_dir), seed=seed, budget=Budget(**budget.limits()), scoring="official",
                       model_override=model_override, models=models, cache_dir=cache_dir, replay_only=replay_only,
                       run_id=Path(run_dir).name, control=control or NoControl(),
                       tools=tools, discover_tools=discover_tools and tools is None, allocate_tools=True)
    try:
        result = run_workflow(task, workflow, config, executor=executor)
    except ModelUnavailable as exc:
        return {"workflow_hash": workflow.hash, "status": "failed", "reason": str(exc),
                "official": {"ok": False, "error": f"the single agent could not call its model: {exc}"},
                "usage": None, "trace": "", "run_dir": str(run_dir), "predictions_sha256": None}
    official = result.metric if result.metric and result.metric.get("ok") else \
        {"ok": False, "error": (result.metric or {}).get("error") or result.reason or f"the single agent {result.status}"}
    return {"workflow_hash": workflow.hash, "status": result.status, "reason": result.reason,
            "official": official, "usage": result.usage, "trace": result.trace_path,
            "run_dir": str(run_dir), "predictions_sha256": result.predictions_sha256}


def baseline_files(trivial: dict[str, bytes] | str, scores: dict[str, dict], solo: dict | None
                   ) -> dict[str, tuple[bytes | None, dict]]:
    """Each baseline's predictions file beside its official score, for the paired comparison with
    the team after the final commitment (engine/official_gap.py)."""
    files = {name: ((trivial.get(name) if isinstance(trivial, dict) else None), score)
             for name, score in scores.items() if name != "single_agent"}
    if solo is not None:
        files["single_agent"] = (saved_predictions(Path(solo["run_dir"]), solo.get("predictions_sha256")),
                                 solo["official"])
    return files


def describe_single_agent(solo: dict) -> str:
    """One line for a single_agent_baseline() result: how it ended, its tokens, its trace."""
    why = f": {solo['reason'][:120]}" if solo["status"] != "completed" and solo.get("reason") else ""
    return (f"{solo['status']}, {(solo.get('usage') or {}).get('tokens', 0)} tokens{why}; "
            f"trace {solo.get('trace') or '-'}")


def describe_baselines(baselines: dict[str, dict], team: dict | None) -> str:
    """One line: each baseline's official score, and whether the team beat it."""
    def fmt(d: dict) -> str:
        return f"{d['value']:.6g}" if d.get("ok") else "n/a"

    parts = [f"{name.replace('_', ' ')} {fmt(d)}" for name, d in baselines.items()]
    line = " · ".join(parts)
    if team and team.get("ok"):
        hib = bool(team.get("higher_is_better"))
        known = {name.replace("_", " "): d["value"] for name, d in baselines.items() if d.get("ok")}
        # float noise is no lead: a team 1.1e-16 above the constant's r2 of 0 ties it
        scale = max((abs(v) for v in (team["value"], *known.values()) if math.isfinite(v)), default=0.0)
        beaten = [n for n, v in known.items() if better(team["value"], v, hib, scale)]
        tied = [n for n, v in known.items() if same(team["value"], v, scale)]
        missed = [n for n in known if n not in beaten and n not in tied]
        said = [f"does NOT beat {', '.join(missed)}"] if missed else []
        said += [f"ties {', '.join(tied)}"] if tied else []
        line += f"   team {fmt(team)}: " + ("; ".join(said) if said else "beats every baseline")
    return line


@dataclass
class Comparison:
    """The team beside its baselines, after the final commitment."""
    baselines: dict[str, dict]   # name -> official score: the trivial ones, and the single agent's
    single_agent: dict | None = None  # single_agent_baseline()'s result, when it ran
    gaps: dict[str, Gap] = field(default_factory=dict)  # name -> the team's lead over it, with its interval

    def lines(self, team: dict | None) -> list[str]:
        return comparison_lines(self.baselines, team, list(self.gaps.values()), self.single_agent)


def compare_with_baselines(task: Task, team: dict, delivered: bytes | None, *, seed: int, budget: Budget,
                           out: TextIO, single_agent_dir: Path | None = None, score_gaps: bool = True,
                           on_single_agent: Callable[[dict], None] | None = None, **single_agent_options) -> Comparison:
    """The trivial baselines' official scores, the single agent's (run in ``single_agent_dir``
    with ``single_agent_options``; none without a folder), and the team's lead over each
    (``team``: its official score; ``delivered``: the predictions it was given for)."""
    trivial = trivial_or_error(task)
    baselines = official_baselines(task, trivial)
    solo = None
    if single_agent_dir is not None:
        out.write("single agent: the single-agent workflow on the team's budget, beside the team\n")
        out.flush()
        solo = single_agent_baseline(task, single_agent_dir, seed=seed, budget=budget, **single_agent_options)
        baselines["single_agent"] = solo["official"]
        if on_single_agent is not None:
            on_single_agent(solo)
    gaps = official_gaps(task, delivered, team, baseline_files(trivial, baselines, solo), seed=seed) \
        if score_gaps else {}
    return Comparison(baselines, solo, gaps)


def comparison_lines(baselines: dict[str, dict], team: dict | None, gaps: list[Gap],
                     single_agent: dict | None) -> list[str]:
    """The run summary's lines about the baselines, the same for a run and for a search."""
    lines = [f"baselines  {describe_baselines(baselines, team)}"] if baselines else []
    lines += [f"{'':10} {line}" for line in describe_gaps(gaps)]
    if single_agent:
        lines.append(f"single     {describe_single_agent(single_agent)}")
    return lines
