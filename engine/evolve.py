"""`evolve`: run one search procedure on a task, commit to its final workflow, then (and only
then) score the initial and final workflows with the official held-out evaluator."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TextIO

from . import places
from .archive import WorkflowArchive
from .console import cost_line
from .control import Control, NoControl
from .embedding import TaskEmbedder
from .ending import EvolveResult, end_search
from .errors import ModelUnavailable
from .evidence.memory import EVIDENCE_FILE, SharedMemory
from .gateway import endpoint_lines
from .models import describe_endpoints, settings
from .preflight import preflight
from .protocol.events import SearchFailed, SearchStarted, ValidationPlanned
from .run_spec import RunSpec
from .runner import roles_of
from .sandbox import Executor
from .sandbox.select import executor_for_run
from .search import registry
from .search.base import AutoGate, Gate, SearchContext
from .search.probe import ProbeRunner, search_gateway
from .search.registry import TAKES_MEMORY, search_class
from .synthesis import team_workflow
from .synthesis.start import choose_start
from .task import load_task
from .tools.allocation import allocate, available_only
from .tools.config import load_config
from .tools.discovery import discover
from .tools.registry import use
from .trace import EventSink, JsonlTraceSink, Tracer, claim_attempt
from .training.jobs import tracing_to
from .workflow import Workflow


def evolve(task_folder: str | Path, spec: RunSpec | None = None, *, runs_dir: Path | None = None,
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
    runs_dir = Path(runs_dir) if runs_dir is not None else places.runs_dir()
    preflight(task, cache_dir=runs_dir / "preflight-cache")
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
        # the final commitment is made: from here on, what every run does (engine/ending.py)
        return end_search(ctx, outcome, search=search, official=official, archive=archive, start_info=start_info,
                          trace_path=trace_path, started=started, memory=memory, single_agent=spec.single_agent)
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
