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

import json
import time

from . import official as official_evaluation
from .archive import WorkflowArchive
from .assessment import trivial_or_error
from .budget import Budget
from .bundle import write_champion_bundle
from .control import NoControl
from .errors import ModelUnavailable
from .hindsight import hindsight
from .official import official_baselines, official_metric, saved_predictions
from .official_gap import Gap, describe_gaps, official_gaps
from .protocol.events import Archive, Hindsight, OfficialEvaluation, SearchFinished
from .runner import RunConfig, RunResult, run_workflow
from .sandbox import Executor
from .search.base import Endpoint, SearchContext, SearchOutcome
from .search.registry import search_class
from .selection import better, same
from .synthesis import single_agent_workflow
from .task import Task
from .tools.allocation import allocate
from .tools.registry import use

FINAL_PREDICTIONS = "final-predictions.csv"  # the final workflow's delivered predictions, in run_dir


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
    baselines: dict = field(default_factory=dict)  # official scores: trivial baselines and the single agent
    single_agent: dict | None = None  # engine.ending.single_agent_baseline(), unless skipped
    hindsight: dict | None = None     # engine.hindsight.Hindsight.to_dict()
    gaps: dict = field(default_factory=dict)  # baseline -> engine.official_gap.Gap.to_dict(): beyond test noise?
    failed: str = ""  # why the run failed although the search ended: its final workflow has no official score
    memory: bool = False  # the probes shared one evidence graph (evidence.sqlite in run_dir)

    def to_dict(self) -> dict:
        return {**self.__dict__, "run_dir": str(self.run_dir)}


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


def describe_baselines(baselines: dict[str, dict], team: dict | None, gaps: dict[str, Gap] | None = None) -> str:
    """One line: each baseline's official score, and whether the team beat it. Where the team's
    lead over a baseline has an interval (``gaps``), its verdict decides: a lead within the test
    set's noise is a tie, not a win."""
    def fmt(d: dict) -> str:
        return f"{d['value']:.6g}" if d.get("ok") else "n/a"

    parts = [f"{name.replace('_', ' ')} {fmt(d)}" for name, d in baselines.items()]
    line = " · ".join(parts)
    if team and team.get("ok"):
        hib = bool(team.get("higher_is_better"))
        known = {name: d["value"] for name, d in baselines.items() if d.get("ok")}
        # float noise is no lead: a team 1.1e-16 above the constant's r2 of 0 ties it
        scale = max((abs(v) for v in (team["value"], *known.values()) if math.isfinite(v)), default=0.0)
        said_of: dict[str, list[str]] = {"better": [], "worse": [], "identical": [], "within noise": []}
        for name, v in known.items():
            gap = (gaps or {}).get(name)
            # without an interval the raw scores decide, up to float noise
            verdict = gap.verdict if gap is not None and gap.verdict else \
                "better" if better(team["value"], v, hib, scale) else \
                "identical" if same(team["value"], v, scale) else "worse"
            said_of[verdict].append(name.replace("_", " "))
        missed, tied, noisy = said_of["worse"], said_of["identical"], said_of["within noise"]
        said = [f"does NOT beat {', '.join(missed)}"] if missed else []
        said += [f"ties {', '.join(tied)}"] if tied else []
        said += [f"ties {', '.join(noisy)} within the test set's noise"] if noisy else []
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


def end_run(task: Task, result: RunResult, *, seed: int, budget: Budget, out: TextIO,
            single_agent_dir: Path | None = None, **single_agent_options) -> tuple[dict, Comparison]:
    """``python -m engine run``'s end, after its one validated run: the held-out score of what it
    delivered (evaluate.py, once; kept in its summary.json as ``official``), then the team beside
    its baselines, in the same lines a search ends with. Returns (official score, comparison)."""
    run_dir = Path(result.trace_path).parent
    official = official_metric(task, run_dir, result.predictions_sha256) if result.predictions_sha256 else \
        {"ok": False, "error": "the run delivered no predictions"}
    summary = run_dir / "summary.json"
    if summary.exists():
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "official": official}, indent=2))
    out.write(official_line(task, official) + "\n")
    out.flush()
    compared = compare_with_baselines(task, official, saved_predictions(run_dir, result.predictions_sha256),
                                      seed=seed, budget=budget, out=out, single_agent_dir=single_agent_dir,
                                      **single_agent_options)
    for line in compared.lines(official):
        out.write(line + "\n")
    return official, compared


def official_line(task: Task, official: dict) -> str:
    """The held-out score, as the run's summary says it."""
    if not official.get("ok"):
        return f"metric     none ({official.get('error') or 'nothing delivered'})"
    direction = "higher" if task.metric.higher_is_better else "lower"
    return (f"metric     {official['metric']} = {official['value']:.6g}  ({direction} is better; computed by "
            f"evaluate.py)\n{'':11}on the held-out data, once, after the run was validated on its training folds")


def comparison_lines(baselines: dict[str, dict], team: dict | None, gaps: list[Gap],
                     single_agent: dict | None) -> list[str]:
    """The run summary's lines about the baselines, the same for a run and for a search."""
    lines = [f"baselines  {describe_baselines(baselines, team, {g.baseline: g for g in gaps})}"] if baselines else []
    lines += [f"{'':10} {line}" for line in describe_gaps(gaps)]
    if single_agent:
        lines.append(f"single     {describe_single_agent(single_agent)}")
    return lines


def end_search(ctx: SearchContext, outcome: SearchOutcome, *, search: str, official: Callable[..., dict] | None,
               archive: WorkflowArchive | None, start_info: dict, trace_path: Path, started: float, memory: bool,
               single_agent: bool) -> EvolveResult:
    """Everything after a search's final commitment, once: the official held-out evaluation of
    both ends, the baselines beside the team (``single_agent``: the single-agent workflow too),
    the hindsight over every probed candidate, the champion bundle of a search that packages
    one, the archive entry (``archive``), the result on disk, ``search_finished`` and the summary."""
    task, run_dir, tracer, out, runner = ctx.task, ctx.run_dir, ctx.tracer, ctx.out, ctx.runner
    seed, budget, models, control, tools = ctx.seed, runner.budget, runner.models, ctx.control, runner.tools
    initial, final = outcome.initial, outcome.final
    initial_d, final_d = initial.describe(), final.describe()
    stopped, n = outcome.stopped, outcome.iterations
    final_workflow = final.workflow
    # Final commitment made: now, once, the official held-out evaluation of both ends.
    initial_d["official"] = _official(task, initial, runner.executor, official)
    final_d["official"] = _official(task, final, runner.executor, official)
    for label, d in (("initial", initial_d), ("final", final_d)):
        tracer.emit(OfficialEvaluation(which=label, workflow_hash=d["workflow_hash"], **d["official"]))
    searched = outcome.searched
    if searched is not None:  # a baseline was handed in: what the search found, scored beside it
        final_d["searched"] = {**searched.describe(),
                               "official": _official(task, searched, runner.executor, official)}
    final_official = final_d["official"]
    delivered = _delivered(final)
    if delivered is not None:  # for people, after the final commitment: the held-out plots
        (run_dir / FINAL_PREDICTIONS).write_bytes(delivered)
    # The baselines, and whether the team's lead over each is beyond the test set's noise: only
    # against evaluate.py's own scores (a stand-in scorer has no held-out rows to resample).
    compared = compare_with_baselines(
        task, final_official, delivered, seed=seed, budget=budget, out=out, score_gaps=official is None,
        single_agent_dir=run_dir / "single-agent" if single_agent else None,
        on_single_agent=lambda solo: tracer.emit(OfficialEvaluation(
            which="single_agent", workflow_hash=solo["workflow_hash"], **solo["official"])),
        executor=runner.executor, models=models, control=control, tools=tools)
    baselines, solo, gaps = compared.baselines, compared.single_agent, compared.gaps
    failed = "" if final_official.get("ok") else \
        f"the final workflow has no official score: {final_official.get('error') or 'nothing delivered'}"
    # the ends' programs were scored just now: the hindsight does not run them again
    ends = [(initial, initial_d), (final, final_d)] + ([(searched, final_d["searched"])] if searched else [])
    known = {e.code: d["official"] for e, d in ends if e.code is not None}
    seen = hindsight(task, run_dir, runner.executor, official, known,
                     programs=search_class(search).programs_probed(run_dir))
    tracer.emit(Hindsight(**seen.to_dict()))
    _champion_bundle(task, run_dir, search, outcome, final_d.get("searched", final_d)["official"], baselines, out)
    result = EvolveResult(task.name, search, run_dir, n, stopped, initial_d, final_d, budget.used.to_dict(),
                          time.perf_counter() - started, start=start_info, trace=str(trace_path),
                          baselines=baselines, single_agent=solo, hindsight=seen.to_dict(), failed=failed,
                          gaps={name: g.to_dict() for name, g in gaps.items()},
                          memory=memory)
    if archive is not None:
        why_not = not_archivable(final, budget) or failed
        if why_not:
            result.archived = {"skipped": why_not}
            tracer.emit(Archive(skipped=why_not, workflow_hash=final_workflow.hash))
        else:
            entry = archive.add(task, final_workflow, final_d["official"], search,
                                note=f"evolved in {run_dir.name}")
            result.archived = {"entry": entry.id}
            tracer.emit(Archive(entry=entry.id, workflow_hash=final_workflow.hash))
    (run_dir / "final_workflow.json").write_text(final_workflow.to_json())
    (run_dir / "evolve.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    tracer.emit(SearchFinished(**{k: v for k, v in result.to_dict().items() if k != "run_dir"}))
    _print_summary(task, result, out)
    return result


def _champion_bundle(task: Task, run_dir: Path, search: str, outcome: SearchOutcome, official: dict,
                     baselines: dict, out: TextIO) -> None:
    """The champion bundle (engine/bundle/) of a search that packages one (its ``champion_of``),
    written now that the official evaluation is done. A bundle that cannot be written is said on
    ``out``; the run's result stands."""
    tree = search_class(search).champion_of(outcome)
    if tree is None:
        return
    # With a baseline handed in, the bundle is still the champion's (its own predictions and
    # official score, ``official`` here), and says the baseline beat it.
    champion = outcome.searched or outcome.final
    notes = "; ".join(x for x in (tree.reason, outcome.final.verdict) if x)
    try:
        bundle = write_champion_bundle(task, run_dir, tree.tree, tree.champion, predictions=champion.predictions,
                                       official=official, baselines=baselines, stopped=tree.stopped, notes=notes)
    except Exception as exc:  # noqa: BLE001 - the search and its official scores are done and kept
        out.write(f"champion bundle not written: {type(exc).__name__}: {exc}\n")
        return
    missing = f"; not included: {', '.join(p for p, _ in bundle.missing)}" if bundle.missing else ""
    out.write(f"champion bundle: {bundle.zip_path} ({len(bundle.files)} files{missing})\n")


def not_archivable(final: Endpoint, budget: Budget) -> str:
    """Why a search's final workflow must not enter the archive ('' when it may): a workflow
    that never called a model, or whose last execution failed, has shown nothing worth starting
    another task from."""
    if budget.used.calls == 0:
        return "the search made no model call"
    if final.baseline is not None:
        return f"the search handed in the {final.baseline.replace('_', ' ')} baseline: no candidate it tried beat it"
    probe = final.probe
    if probe is None:  # a program search: its champion was scored, the team's workflow unchanged
        return ""
    if not probe.result.usage.get("calls"):
        return f"the final workflow's probe made no model call ({probe.result.reason or probe.result.status})"
    if probe.result.status != "completed":
        return f"the final workflow's probe {probe.result.status}: {probe.result.reason}"
    return ""


def _official(task: Task, end: Endpoint, executor: Executor, official: Callable[..., dict] | None) -> dict:
    """The held-out score of one end: a probe's saved predictions, the predictions a program
    wrote at the final commitment, or else the program run on the task's data now."""
    if end.probe is not None:
        return (official or official_metric)(task, end.probe.run_dir, end.probe.result.predictions_sha256)
    if end.predictions is not None:
        return official_evaluation.official_for_predictions(task, end.predictions)
    return official_evaluation.official_for_code(task, end.code, executor)


def _delivered(end: Endpoint) -> bytes | None:
    """The predictions an end delivered, as scored officially: its probe's, or those its program
    wrote at the final commitment."""
    if end.probe is not None:
        return saved_predictions(end.probe.run_dir, end.probe.result.predictions_sha256)
    return end.predictions


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
    ends = [("initial", r.initial), ("final", r.final)] + ([("searched", r.final["searched"])]
                                                           if r.final.get("searched") else [])
    for label, d in ends:
        out.write(f"{label:<10} v{d['version']} {d['workflow_hash'][:10]:<11} {num(d['J']):>7} "
                  f"{num(d['validation']):>12} {official(d):>22}\n")
    out.write(f"({'higher' if task.metric.higher_is_better else 'lower'} is better; official = evaluate.py on "
              f"held-out data, run once after the final commitment)\n")
    if r.final.get("verdict"):
        out.write(f"{'':10} the final: {r.final['verdict']}\n")
    for line in comparison_lines(r.baselines, r.final.get("official"), [Gap(**gap) for gap in r.gaps.values()],
                                 r.single_agent):
        out.write(line + "\n")
    if r.hindsight:
        probed = r.hindsight["candidates"]
        programs = {c.get("program") for c in probed if c.get("program")}
        repeated = len(probed) - len(programs) - sum(1 for c in probed if not c.get("program"))
        out.write(f"hindsight  rank correlations over {len(probed)} probed candidate(s)"
                  + (f" ({repeated} repeating a program already probed, counted once)" if repeated else "")
                  + ", higher = better on every scale:\n")
        for c in r.hindsight["correlations"]:
            out.write(f"           {c['a']:>10} ~ {c['b']:<10} "
                      + (f"ρ {c['rho']:+.2f}  (n={c['n']}" + (f", p={c['p']:.2g})" if c.get("p") is not None else ")")
                         if c.get("rho") is not None else f"n/a: {c['why']}") + "\n")
    out.write(f"cost       {r.usage['calls']} model calls, {r.usage['tokens']} tokens, {r.wall_s:.1f}s\n")
    if r.failed:
        out.write(f"FAILED     {r.failed}\n")
    if r.archived.get("skipped"):
        out.write(f"archive    not archived: {r.archived['skipped']}\n")
    elif r.archived.get("entry"):
        out.write(f"archive    added as {r.archived['entry']}\n")
    out.write(f"trace      {r.trace or r.run_dir / 'search.jsonl'}\n")
