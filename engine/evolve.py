"""`evolve`: run one search procedure on a task, commit to its final workflow, then (and only
then) score the initial and final workflows with the official held-out evaluator."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TextIO

from . import official as official_evaluation
from .archive import WorkflowArchive
from .budget import Budget
from .bundle import write_champion_bundle
from .console import cost_line
from .control import Control, NoControl
from .embedding import TaskEmbedder
from .ending import compare_with_baselines, comparison_lines
from .errors import ModelUnavailable
from .evidence.memory import EVIDENCE_FILE, SharedMemory
from .gateway import endpoint_lines
from .hindsight import hindsight
from .models import describe_endpoints, settings
from .official import official_metric, saved_predictions
from .official_gap import Gap
from .preflight import preflight
from .protocol.events import (Archive, Hindsight, OfficialEvaluation, SearchFailed, SearchFinished, SearchStarted,
                              ValidationPlanned)
from .run_spec import RunSpec
from .runner import roles_of
from .sandbox import Executor
from .sandbox.select import executor_for_run
from .search import registry
from .search.base import AutoGate, Endpoint, Gate, SearchContext
from .search.probe import ProbeRunner, search_gateway
from .search.registry import TAKES_MEMORY, search_class
from .search.tree import TreeResult
from .synthesis import team_workflow
from .synthesis.start import choose_start
from .task import Task, load_task
from .tools.allocation import allocate, available_only
from .tools.config import load_config
from .tools.discovery import discover
from .tools.registry import use
from .trace import EventSink, JsonlTraceSink, Tracer, claim_attempt
from .training.jobs import tracing_to
from .workflow import Workflow

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


def evolve(task_folder: str | Path, spec: RunSpec | None = None, *, runs_dir: Path = Path("var/runs"),
           out: TextIO = sys.stdout, gate: Gate | None = None, cache_dir: Path | None = None,
           replay_only: bool = False, official: Callable[..., dict] | None = None, archive_dir: Path | None = None,
           sinks: Iterable[EventSink] = (), run_dir: Path | None = None, resume: dict | None = None,
           on_checkpoint: Callable[[dict], None] | None = None, executor: Executor | None = None,
           control: Control | None = None, library=None, embedder=None) -> EvolveResult:
    """Run one search, as ``spec`` asks (engine/run_spec.py: the search and its settings, the
    budget, the models, the start, the sandbox), and the official evaluation after it. The other
    arguments are what the run is given: where it writes, who decides, what it reports to.

    ``sinks`` receive every event, the search's and each probe's (the web app stores and pushes
    them). ``executor`` runs every program (tests pass a fake; default: the sandbox);
    ``spec.executor`` (auto, docker or subprocess) chooses it otherwise (engine/sandbox/select.py).
    ``on_checkpoint`` receives a typed checkpoint (engine/protocol/checkpoints.py) after every
    step; passing one back as ``resume`` continues the search there, in the same ``run_dir``.
    ``gate`` decides proposals (it may raise AwaitingDecision: the last checkpoint holds the
    proposal, and resuming from it asks again); ``control`` is read at every step boundary.

    After the final commitment, beside the team: the trivial baselines, the single-agent
    workflow on the same budget (``spec.single_agent``; its tokens are not the search's), and the
    hindsight over every probed candidate (engine/hindsight.py), all scored officially.

    ``spec.memory`` shares one evidence graph among the search's probes (SciMARS + Memory; the
    fixed-memory control always does): evidence.sqlite in ``run_dir``, one branch per probe.
    ``spec.warm_start``: start from the archive's most similar workflow; by default every search but
    SciMARS and the fixed-memory control does (SciMARS adapts within the task).
    ``spec.start`` names the starting workflow instead (engine/synthesis/start.py): ``team``,
    ``synthesized`` (from ``library``, ranked by ``embedder``; both default to the real ones),
    ``archive`` (its nearest workflow, else a synthesized one) or a workflow file.
    ``spec.external_agents``: synthesis may give a role to a built external agent (engine/external/).
    ``spec.node_token_cap``: the review (``search="repair"``) repairs a node that spends more tokens in a
    run than this.

    A model that cannot be called (ModelUnavailable) stops the search: it is traced as
    ``search_failed``, said in one line on ``out``, and raised; nothing is archived. Nor is a
    final workflow whose probe failed or made no model call."""
    spec = spec or RunSpec()
    search, iterations, seed, start = spec.search, spec.iterations, spec.seed, spec.start
    search_class(search)  # an unknown name fails here, before anything is written
    memory = spec.shares_memory
    if memory and search not in TAKES_MEMORY:
        raise ValueError(f"a shared evidence graph (--memory) is for {' and '.join(sorted(TAKES_MEMORY))}, "
                         f"not {search}: its probes each keep their own")
    warm_start = spec.warm
    control = control or NoControl()
    if embedder is None:
        embedder = TaskEmbedder()  # loads its model only when synthesis or a review first ranks with it
    task = load_task(task_folder)
    archive = None
    if archive_dir is not None:
        archive = WorkflowArchive(archive_dir)
        restarting = bool(resume and resume.get("start"))
        if not restarting and (start == "archive" if start is not None else warm_start):
            # a task new to the archive is embedded by a process of its own while this one goes on
            archive.prepare_lookup(task)
    # Bad data is a clear error here, before anything is written or any token spent.
    preflight(task, cache_dir=Path(runs_dir) / "preflight-cache")
    load_config()  # and an unusable MCP server configuration (engine/tools/config.py)
    budget = spec.budget()
    models = settings(spec.models, spec.model)
    sinks = list(sinks)
    run_dir = Path(run_dir) if run_dir else Path(runs_dir) / (time.strftime("%Y%m%d-%H%M%S") + f"-{task.name}-{search}")
    choice = None
    if executor is None and spec.executor is not None:
        # an executor asked for that cannot run here (no Docker daemon) fails now, with the fix;
        # a resumed run keeps the one it started with
        choice = executor_for_run(spec.executor, run_dir / "sandboxes", ((resume or {}).get("start") or {}).get("executor"))
        executor = choice.executor
    # A resumed search writes its own trace file: sequence numbers never restart inside one.
    attempt, trace_path = claim_attempt(run_dir, "search")
    tracer = Tracer(run_dir.name if attempt == 1 else f"{run_dir.name}-attempt{attempt}",
                    [JsonlTraceSink(trace_path), *sinks])
    gateway = search_gateway(budget, tracer, seed, control=control, models=models, cache_dir=cache_dir,
                             replay_only=replay_only)
    # The MCP servers, started once for the whole search: every probe's agents call the same ones.
    tools = discover(task, run_dir, tracer, out)
    started = time.perf_counter()
    if resume and resume.get("start"):  # the start chosen before the interruption, not a new one
        initial_wf, start_info = Workflow.from_dict(resume["start"]["workflow"]), resume["start"]["info"]
    elif start is not None:
        initial_wf, start_info = choose_start(task, start, archive=archive, tracer=tracer,
                                              registry=tools.registry if tools else None,
                                              library=library, embedder=embedder,
                                              external_agents=spec.external_agents)
    elif archive is not None and warm_start:
        start = archive.start_for(task)
        initial_wf, start_info = start.workflow, start.to_dict()
    else:
        initial_wf, start_info = team_workflow(task), {
            "path": "de_novo", "similarity": None,
            "reason": "no archive configured" if archive is None else
            f"{search} adapts within the task: no warm start from another task's workflow unless asked"}
    if tools is not None and not (resume and resume.get("start")):
        # a team Trellis built gets the tools the configuration allocates to its roles; an archived
        # one keeps those of its tools this search discovered
        initial_wf = allocate(initial_wf, tools.registry) if start_info.get("path") == "de_novo" else \
            available_only(initial_wf, tools.registry)
    start_state = {"workflow": initial_wf.to_dict(), "info": start_info, "executor": choice.kind if choice else None}

    def checkpoint(state: dict) -> None:
        if on_checkpoint:
            on_checkpoint({**state, "start": start_state})

    # every role that asks a model: the workflow's, then the search's own (judge, mutator, tree roles)
    served = {**roles_of(initial_wf), **{role: (None, None) for role in registry.search_class(search).model_roles}}
    tracer.emit(SearchStarted(search=search, task=task.name, iterations=iterations, seed=seed, memory=memory,
                              budget=budget.limits(), workflow_hash=initial_wf.hash, start=start_info,
                              workflow=initial_wf.to_dict(), resumed_after=resume.get("n") if resume else None,
                              executor=choice.kind if choice else None,
                              executor_reason=choice.reason if choice else None,
                              endpoints=describe_endpoints(models, served)))
    out.write(f"evolving {task.name} with {search}, {iterations} iteration(s), seed {seed}\n")
    for line in endpoint_lines(models, served):
        out.write(line + "\n")
    if choice is not None:
        out.write(choice.describe() + "\n")
    plan = task.assessment().plan()
    tracer.emit(ValidationPlanned(plan=plan.to_dict(), description=plan.describe()))
    out.write(f"validation: {plan.describe()}\n")
    similarity = start_info.get("similarity")
    out.write(f"start: {start_info['path']}" + (f" (similarity {similarity:.3f})" if similarity is not None else "")
              + (f" from {start_info.get('source')}" if start_info.get("source") else "")
              + (f": {start_info.get('reason')}" if start_info.get("path") in ("synthesized", "file") else "") + "\n")
    # One graph for the search: people's notes reach every probe; with memory, the probes'
    # selected records reach the later ones too.
    shared = SharedMemory(run_dir / EVIDENCE_FILE, tracer, share=memory)
    if memory:
        out.write(f"memory: one evidence graph shared by every probe, {run_dir / EVIDENCE_FILE}\n")
    runner = ProbeRunner(task, budget, run_dir / "probes", seed=seed, models=models, cache_dir=cache_dir,
                         replay_only=replay_only,
                         sinks=sinks, executor=executor, control=control, memory=shared,
                         tools=tools)
    ctx = SearchContext(task=task, initial=initial_wf, runner=runner, gateway=gateway, tracer=tracer,
                        executor=runner.executor, run_dir=run_dir, iterations=iterations, seed=seed,
                        gate=gate or AutoGate(), control=control, out=out, on_checkpoint=checkpoint,
                        library=library, embedder=embedder, node_token_cap=spec.node_token_cap)
    training_trace = contextlib.ExitStack()
    try:
        # the tree's programs and the official scoring train as jobs reporting into the search's trace
        training_trace.enter_context(tracing_to(tracer))
        # agents' tools are checked against what was discovered (mutations and edits included)
        training_trace.enter_context(use(tools.registry if tools else None))
        outcome = search_class(search)(ctx).run(resume if resume and resume.get("n") is not None else None)
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
            single_agent_dir=run_dir / "single-agent" if spec.single_agent else None,
            on_single_agent=lambda solo: tracer.emit(OfficialEvaluation(
                which="single_agent", workflow_hash=solo["workflow_hash"], **solo["official"])),
            executor=runner.executor, models=models, control=control, tools=tools)
        baselines, solo, gaps = compared.baselines, compared.single_agent, compared.gaps
        failed = "" if final_official.get("ok") else \
            f"the final workflow has no official score: {final_official.get('error') or 'nothing delivered'}"
        # the ends' programs were scored just now: the hindsight does not run them again
        ends = [(initial, initial_d), (final, final_d)] + ([(searched, final_d["searched"])] if searched else [])
        known = {e.code: d["official"] for e, d in ends if e.code is not None}
        seen = hindsight(task, run_dir, runner.executor, official, known)
        tracer.emit(Hindsight(**seen.to_dict()))
        _champion_bundle(task, run_dir, outcome, final_d.get("searched", final_d)["official"], baselines, out)
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
    except ModelUnavailable as exc:
        tracer.emit(SearchFailed(**exc.to_dict(), usage=budget.used.to_dict(), archived=False), exc.agent)
        used = budget.used.to_dict()
        # the search's summary too, on the console and beside the trace: what it spent before the model failed
        (run_dir / "summary.json").write_text(json.dumps({
            "status": "failed", "reason": f"model {exc.model} is unavailable: {exc.provider_message[:500]}",
            "search": search, "usage": used, "trace_path": str(trace_path), "archived": False}, indent=2))
        out.write(f"search stopped: model {exc.model} could not be called; nothing archived\n"
                  f"status     failed: {exc.provider_message[:300]}\n{cost_line(used)}\n"
                  f"trace      {trace_path}\n")
        out.flush()
        raise
    finally:
        training_trace.close()
        if tools is not None:
            tools.close()
        shared.close()
        tracer.close()
        if choice is not None:  # the executor made here: its warm containers go with the search
            getattr(choice.executor, "close", lambda: None)()


def _champion_bundle(task: Task, run_dir: Path, outcome, official: dict, baselines: dict, out: TextIO) -> None:
    """A tree search's champion bundle (engine/bundle/), written now that the official evaluation
    is done. A bundle that cannot be written is said on ``out``; the run's result stands."""
    tree = next((r for r in outcome.records if isinstance(r, TreeResult)), None)
    if tree is None or tree.champion is None:
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
