"""Runs one workflow on one task: agents in DAG order, contracts checked at every handoff,
status routes followed with their loop caps, the result scored by the task's evaluate.py."""
from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from .artifacts import ArtifactStore
from .budget import Budget
from .checks import Check, placeholder_check
from .contracts import check_value, parse_type
from .control import Control, NoControl
from .errors import BudgetExhausted, ModelCallError, ModelUnavailable
from .evidence.memory import EVIDENCE_FILE, MemoryScope, TeamMemory
from .external_step import external_for, external_step
from .gateway import ModelGateway, refuse_unpriced_cost_budget
from .models import ModelSettings, settings
from .plausibility import Reference, beats_trivial, claims_match, measured_in
from .prompt_format import extract_strategy, strategy_line
from .protocol.events import AgentFinished, AgentStarted
from .protocol.events import BudgetExhausted as BudgetExhaustedEvent
from .protocol.events import Check as CheckEvent
from .protocol.events import Evaluation, Handoff, Route, RunFailed, RunFinished, RunStarted
from .roles import ROLE_STEPS, RunContext, StepOutcome
from .sandbox import Executor
from .sandbox.subprocess_executor import SubprocessExecutor
from .task import Task
from .tools.allocation import allocate
from .tools.discovery import discover
from .tools.host import ToolHost
from .tools.registry import use
from .trace import EventSink, JsonlTraceSink, Tracer, claim_attempt, encode_json
from .training.jobs import labelled, tracing_to, training_executor
from .workflow import Workflow


@dataclass
class RunConfig:
    run_dir: Path
    seed: int = 0
    model_override: str | None = None
    # which model serves each role and how to reach it (engine/models.py); beside --model alone
    models: ModelSettings | None = None
    # a cassette that only replays: a call not recorded in cache_dir fails instead of reaching a provider
    replay_only: bool = False
    budget: Budget = field(default_factory=Budget)
    cache_dir: Path | None = None
    run_id: str | None = None
    # "official": the task's evaluate.py scores the deliverable (a plain run_task).
    # "validation": a search probe; the final code is scored on a split of the training
    # data and the official evaluator is never called.
    scoring: str = "official"
    iteration: int = 0
    control: Control = field(default_factory=NoControl)
    # The evidence graph the team remembers in: a search's shared one (with the probe's branch),
    # or None for one of the run's own (evidence.sqlite in run_dir, one file per attempt).
    memory: MemoryScope | None = None
    # The MCP servers discovered at the start of the search or run (engine/tools/discovery.py);
    # its tools are what agents' tool allocations are checked against and call.
    tools: ToolHost | None = None
    # With no ``tools`` given: start the configured MCP servers for this run alone (run_task),
    # and give the agents of a team Trellis built the tools the configuration allocates.
    discover_tools: bool = False
    # Who walks the agents: None for the engine's loop; engine/langgraph_runtime.py passes one that
    # runs an exported LangGraph graph whose nodes call the scheduler's ``step``.
    driver: Callable[["_Scheduler"], tuple] | None = None
    allocate_tools: bool = False
    # Why the executor is the one it is (engine/sandbox/select.py), for the run_started event.
    executor_reason: str | None = None


@dataclass
class RunResult:
    run_id: str
    status: str            # completed / failed / stopped
    reason: str
    workflow_hash: str
    agent_status: dict[str, str]
    usage: dict
    per_agent_usage: dict[str, dict]
    metric: dict | None
    trace_path: str
    duration_s: float
    model_seconds: float
    execution_seconds: float
    evaluation_seconds: float
    final_code: str | None = None
    predictions_sha256: str | None = None

    @property
    def overhead_seconds(self) -> float:
        return max(0.0, self.duration_s - self.model_seconds - self.execution_seconds - self.evaluation_seconds)

    def summary(self) -> dict:
        """The parts of a run that its trace alone must reproduce."""
        return {"run_id": self.run_id, "status": self.status, "reason": self.reason,
                "workflow_hash": self.workflow_hash, "agent_status": dict(self.agent_status),
                "usage": dict(self.usage), "metric": self.metric}

    def to_dict(self) -> dict:
        return {**asdict(self), "overhead_seconds": self.overhead_seconds}


def default_executor(root: Path) -> Executor:
    return SubprocessExecutor(root=root)


def run_workflow(task: Task, workflow: Workflow, config: RunConfig, executor: Executor | None = None,
                 sinks: Iterable[EventSink] = ()) -> RunResult:
    """Run ``workflow`` on ``task``. Raises ModelUnavailable (after tracing ``run_failed``) when
    a model cannot be called at all: such a run has nothing to show and must not look finished.

    A second run in the same ``run_dir`` (a probe re-run after a resume) is another *attempt*:
    it writes its own trace file and its run id gains an ``-attempt<n>`` suffix, so its events
    never mix with the first attempt's (engine/trace.py)."""
    with use(config.tools.registry if config.tools else None):
        workflow.validate()
    models = settings(config.models, config.model_override)
    refuse_unpriced_cost_budget(models, config.budget, roles_of(workflow))  # before any file or call
    run_dir = Path(config.run_dir)
    attempt, trace_path = claim_attempt(run_dir, "trace")
    run_id = config.run_id or uuid.uuid4().hex[:12]
    if attempt > 1:
        run_id = f"{run_id}-attempt{attempt}"
    tracer = Tracer(run_id, [JsonlTraceSink(trace_path), *sinks])
    tracer.iteration = config.iteration
    tools = config.tools
    own_tools = None
    if tools is None and config.discover_tools:
        tools = own_tools = discover(task, run_dir, tracer)
        if tools is not None and config.allocate_tools:
            with use(tools.registry):
                workflow = allocate(workflow, tools.registry).validate()
    (run_dir / "workflow.json").write_text(workflow.to_json())
    gateway = ModelGateway(config.budget, tracer, seed=config.seed, models=models,
                           cache_dir=config.cache_dir, control=config.control, replay_only=config.replay_only)
    ctx = RunContext(task, workflow, gateway,
                     training_executor(executor or default_executor(run_dir / "sandboxes"), run_dir),
                     ArtifactStore(run_dir / "artifacts"), tracer)
    ctx.tools = tools
    training_trace = contextlib.ExitStack()
    scope = config.memory or MemoryScope.own(run_dir / (EVIDENCE_FILE if attempt == 1 else
                                                        f"evidence.{attempt}.sqlite"))
    if config.memory is not None and config.memory.branch and attempt > 1:
        # a probe run again after a resume writes on a branch of its own (its run id), and does
        # not read what its interrupted attempt left
        was = config.memory.branch
        scope = replace(scope, branch=run_id,
                        visible=None if scope.visible is None else (*(b for b in scope.visible if b != was), run_id))
    ctx.memory = TeamMemory(scope, workflow.harness.memory, tracer, run_id, config.iteration)
    started = time.perf_counter()
    tracer.emit(RunStarted(task=task.name, task_title=task.title, task_fingerprint=task.fingerprint(),
                           workflow=workflow.to_dict(), workflow_hash=workflow.hash, seed=config.seed,
                           model_override=models.model, executor=ctx.executor.name,
                           endpoints=endpoints_of(workflow, gateway),
                           executor_reason=config.executor_reason,
                           budget=config.budget.limits(), order=workflow.order(), attempt=attempt))
    try:
        training_trace.enter_context(tracing_to(tracer))  # this run's training jobs report into its trace
        scheduler = _Scheduler(ctx)
        # the engine's own loop, or another that calls scheduler.step (an exported LangGraph graph)
        status, reason, statuses, outputs = config.driver(scheduler) if config.driver else scheduler.run()
        delivered = _deliverable(ctx, outputs, statuses)
        final_code = scheduler.bags.get(delivered, {}).get("code") if delivered else None
        metric, eval_s = (None, 0.0) if status == "stopped" else \
            _evaluate(ctx, delivered, outputs, final_code, config)
        if status == "completed" and (metric is None or not metric.get("ok")):
            status, reason = "failed", reason or (metric or {}).get("error", "no predictions were produced")
        claims = _claims_against_validation(ctx, scheduler, outputs, statuses, metric) \
            if config.scoring == "validation" else None
        if claims is not None and not claims.passed:
            # The report goes out with the run: one whose scores Trellis did not measure is said
            # in the run's reason, beside the failed public check the judge and selection see.
            reason = "; ".join(x for x in (reason, f"checks failed: claims_match ({claims.detail})") if x)
        trivial = _beats_trivial(ctx, delivered, metric) if config.scoring == "validation" else None
        if trivial is not None and not trivial.passed:
            reason = "; ".join(x for x in (reason, f"checks failed: beats_trivial ({trivial.detail})") if x)
        duration = time.perf_counter() - started
        result = RunResult(
            run_id=run_id, status=status, reason=reason, workflow_hash=workflow.hash, agent_status=statuses,
            usage=config.budget.used.to_dict(),
            per_agent_usage={k: v.to_dict() for k, v in sorted(config.budget.per_agent.items())},
            metric=metric, trace_path=str(trace_path), duration_s=duration, model_seconds=gateway.model_seconds,
            execution_seconds=ctx.execution_seconds, evaluation_seconds=eval_s, final_code=final_code,
            predictions_sha256=outputs[delivered]["predictions"]["sha256"] if delivered else None,
        )
        tracer.emit(RunFinished(**result.summary(), per_agent_usage=result.per_agent_usage,
                                duration_s=round(duration, 3), overhead_s=round(result.overhead_seconds, 4)))
        (run_dir / "summary.json").write_text(json.dumps(result.to_dict(), indent=2))
        return result
    except ModelUnavailable as exc:
        duration = time.perf_counter() - started
        tracer.emit(RunFailed(**exc.to_dict(), usage=config.budget.used.to_dict(),
                              duration_s=round(duration, 3)), exc.agent)
        # a run the model ended still has its summary, on disk and (exc.result) for the console
        statuses = dict(scheduler.statuses) if "scheduler" in locals() else {}
        exc.result = RunResult(
            run_id=run_id, status="failed", reason=f"model {exc.model} is unavailable: {exc.provider_message[:500]}",
            workflow_hash=workflow.hash, agent_status=statuses, usage=config.budget.used.to_dict(),
            per_agent_usage={k: v.to_dict() for k, v in sorted(config.budget.per_agent.items())}, metric=None,
            trace_path=str(trace_path), duration_s=duration, model_seconds=gateway.model_seconds,
            execution_seconds=ctx.execution_seconds, evaluation_seconds=0.0)
        (run_dir / "summary.json").write_text(json.dumps(exc.result.to_dict(), indent=2))
        raise
    finally:
        training_trace.close()
        if own_tools is not None:
            own_tools.close()
        scope.close()
        tracer.close()


def roles_of(workflow: Workflow) -> dict[str, tuple[str | None, object]]:
    """Each role of the workflow -> the model and model options of the first agent playing it."""
    out: dict = {}
    for agent in workflow.agents:
        for role in agent.roles:
            out.setdefault(role, (agent.model, agent.endpoint_options()))
    return out


def endpoints_of(workflow: Workflow, gateway: ModelGateway) -> dict[str, dict]:
    """Each role of the workflow -> the model and endpoint that serves it (no secrets)."""
    return {role: gateway.endpoint(role, model, options).describe()
            for role, (model, options) in roles_of(workflow).items()}


class Stopped(Exception):
    """The run's budget ran out during an agent's step (already traced)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Scheduler:
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.wf = ctx.workflow
        self.order = self.wf.order()
        self.statuses: dict[str, str] = {a: "WAITING" for a in self.order}
        self.outputs: dict[str, dict] = {}
        self.feedback: dict[str, dict] = {}
        self.loops: dict[tuple[str, str], int] = {}
        self.bags: dict[str, dict] = {}  # what each agent last worked with, for repairs

    def run(self) -> tuple[str, str, dict[str, str], dict[str, dict]]:
        """Every agent in order, following routes back; (status, reason, statuses, outputs)."""
        i = 0
        try:
            while i < len(self.order):
                agent_id = self.order[i]
                if self.statuses[agent_id] != "WAITING":  # settled, and not on the way back of a route
                    i += 1
                    continue
                jump = self.step(agent_id)
                i = self.order.index(jump) if jump else i + 1
        except Stopped as stop:
            return "stopped", stop.reason, self.statuses, self.outputs
        return self.finished()

    def step(self, agent_id: str) -> str | None:
        """Run one agent and follow its route: the agent to go back to, or None to go on.
        Raises Stopped when the budget ran out (traced), ModelUnavailable when no model answers."""
        try:
            outcome = self._run_agent(agent_id)
        except BudgetExhausted as exc:
            self.statuses[agent_id] = "STOPPED"
            self.ctx.tracer.emit(BudgetExhaustedEvent(reason=exc.reason,
                                                      used=self.ctx.gateway.budget.used.to_dict(),
                                                      limits=self.ctx.gateway.budget.limits()), agent_id)
            self.ctx.tracer.emit(AgentFinished(status="STOPPED", message=exc.reason, outputs={}), agent_id)
            raise Stopped(exc.reason) from exc
        except ModelUnavailable as exc:  # no later call can succeed either: stop the run
            self.statuses[agent_id] = "FAILURE"
            self.ctx.tracer.emit(AgentFinished(
                status="FAILURE", outputs={},
                message=f"stopped: model {exc.model} is unavailable (run_failed says why)"), agent_id)
            raise
        return self._route(agent_id, outcome)

    def finished(self) -> tuple[str, str, dict[str, str], dict[str, dict]]:
        failed = [a for a, s in self.statuses.items() if s in {"FAILURE", "SKIPPED"}]
        return "completed", (f"agents did not finish: {', '.join(failed)}" if failed else ""), self.statuses, self.outputs

    def _inputs(self, agent_id: str) -> tuple[dict, str | None]:
        """Gather and check the artifacts handed to an agent. Returns (bag, reason-not-to-run)."""
        bag: dict = {"task": self.ctx.task.description()}
        coordination = self.wf.harness.coordination
        for edge in self.wf.incoming(agent_id):
            if self.statuses.get(edge.source) != "SUCCESS" or edge.artifact not in self.outputs.get(edge.source, {}):
                return bag, f"upstream agent {edge.source!r} did not deliver {edge.artifact!r}"
            value = self.outputs[edge.source][edge.artifact]
            errors = check_value(value, parse_type(edge.contract), self.ctx.store.read, where=edge.artifact) \
                if coordination.check_handoffs else []
            placeholder = placeholder_check(edge.artifact, value) if coordination.flag_placeholders else None
            if placeholder and not placeholder.passed and edge.artifact != "code":
                errors.append(placeholder.detail)
            self.ctx.tracer.emit(Handoff(source=edge.source, target=edge.target, artifact=edge.artifact,
                                         contract=edge.contract, ok=not errors, errors=errors,
                                         value_preview=_preview(value)), agent_id)
            repairable = edge.contract.strip() == "python" and "debugger" in self.wf.agent(agent_id).roles
            if errors and coordination.halt_on_contract_violation and not repairable:
                # (a program that does not compile, handed to an agent that debugs, is its to repair)
                return bag, f"{edge.artifact!r} from {edge.source!r} breaks its contract {edge.contract}: {errors[0]}"
            bag[edge.artifact] = value
        return bag, None

    def _run_agent(self, agent_id: str) -> StepOutcome:
        agent = self.wf.agent(agent_id)
        tracer = self.ctx.tracer
        bag, blocked = self._inputs(agent_id)
        feedback = self.feedback.pop(agent_id, None)
        tracer.emit(AgentStarted(roles=list(agent.roles), inputs=sorted(k for k in bag if k != "task"),
                                 retry_of=feedback.get("from") if feedback else None), agent_id)
        if blocked:
            status = "SKIPPED" if "did not deliver" in blocked else "FAILURE"
            outcome = StepOutcome(status, message=blocked)
        else:
            outcome = self._play_roles(agent, bag, feedback)
        if outcome.status == "SUCCESS":
            missing = [o for o in agent.outputs if o not in outcome.produced]
            if missing:
                outcome = StepOutcome("FAILURE", outcome.produced, f"did not produce {', '.join(missing)}")
        delivered = {k: v for k, v in outcome.produced.items() if k in agent.outputs}
        self.outputs[agent_id] = delivered
        self.statuses[agent_id] = outcome.status
        tracer.emit(AgentFinished(status=outcome.status, message=outcome.message,
                                  outputs={k: _preview(v) for k, v in delivered.items()}), agent_id)
        return outcome

    def _play_roles(self, agent, bag: dict, feedback: dict | None) -> StepOutcome:
        produced: dict = {}
        messages = []
        roles = list(agent.roles)
        if feedback and "debugger" in roles and roles[0] != "debugger":
            # A repair re-enters a grouped agent at its debugger, keeping what it made before.
            bag = {**self.bags.get(agent.id, {}), **bag}
            roles = roles[roles.index("debugger"):]
        self.bags[agent.id] = bag
        for role in roles:
            # What the memory policy gives this step; a debugger with nothing to repair asks no
            # model, and an external agent reads no prompt, so they are given nothing.
            external = external_for(agent, role)
            quiet = (role == "debugger" and feedback is None) or external is not None
            self.ctx.recalled = [] if quiet or self.ctx.memory is None else self.ctx.memory.recall(agent.id, role)
            try:
                # an external agent attached for this role plays it in its own container (engine/external/)
                step = external_step(self.ctx, agent, external, role, bag) if external is not None else \
                    ROLE_STEPS[role](self.ctx, agent, bag, feedback)
            except ModelCallError as exc:
                step = StepOutcome("FAILURE", message=f"{role}: {exc}")
            feedback = None  # feedback is for the first role the route lands on
            bag.update(step.produced)
            produced.update(step.produced)
            if step.message:
                messages.append(f"{role}: {step.message}")
            if step.status != "SUCCESS":
                return StepOutcome(step.status, produced, "; ".join(messages))
        return StepOutcome("SUCCESS", produced, "; ".join(messages))

    def _route(self, agent_id: str, outcome: StepOutcome) -> str | None:
        """Follow a status route if there is one with loops left; else settle the status."""
        if outcome.status in {"SUCCESS", "SKIPPED"}:
            return None
        route = self.wf.route_for(agent_id, outcome.status)
        key = (agent_id, outcome.status)
        used = self.loops.get(key, 0)
        if route is None or used >= route.max_loops:
            self.statuses[agent_id] = "FAILURE"
            self.ctx.tracer.emit(Route(on=outcome.status, target=route.target if route else None, taken=False,
                                       loop=used, max_loops=route.max_loops if route else 0,
                                       reason="loop cap reached" if route else f"no route on {outcome.status}"),
                                 agent_id)
            return None
        self.loops[key] = used + 1
        self.feedback[route.target] = {"from": agent_id, "status": outcome.status, "detail": {
            "message": outcome.message, **_feedback_detail(outcome.produced, self.bags.get(agent_id, {}))}}
        self.ctx.tracer.emit(Route(on=outcome.status, target=route.target, taken=True, loop=used + 1,
                                   max_loops=route.max_loops, reason=outcome.message), agent_id)
        for node in self.wf.between(route.target, agent_id):
            self.statuses[node] = "WAITING"
        return route.target


def _feedback_detail(produced: dict, bag: dict) -> dict:
    """What the agent a route lands on needs to act: the failing code and its evidence."""
    detail = {"code": bag["code"]} if isinstance(bag.get("code"), str) else {}
    evidence = produced.get("execution_evidence")
    if isinstance(evidence, dict):
        detail.update({k: evidence.get(k) for k in
                       ("status", "exit_code", "stderr_tail", "stdout_tail", "checks", "violations")})
    return detail


def _preview(value: object, limit: int = 400) -> object:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"... [{len(value)} chars]"
    if isinstance(value, dict):
        text = encode_json(value)
        return value if len(text) <= 4 * limit else {"preview": text[: 4 * limit] + "..."}
    return value


def _deliverable(ctx: RunContext, outputs: dict[str, dict], statuses: dict[str, str]) -> str | None:
    """The last agent (in order) that delivered predictions: the team's answer."""
    return next((a for a in reversed(ctx.workflow.order())
                 if "predictions" in outputs.get(a, {}) and statuses.get(a) == "SUCCESS"), None)


def _evaluate(ctx: RunContext, delivered: str | None, outputs: dict[str, dict], final_code: str | None,
              config: RunConfig) -> tuple[dict, float]:
    if delivered is None:
        ctx.tracer.emit(Evaluation(ok=False, error="no agent delivered predictions"))
        return {"ok": False, "error": "no agent delivered predictions"}, 0.0
    ref = outputs[delivered]["predictions"]
    started = time.perf_counter()
    assessment = ctx.task.assessment()
    if config.scoring == "validation":
        if final_code is None:
            metric = {"ok": False, "error": f"{delivered!r} delivered predictions without the code that made them"}
        else:
            with labelled("in-loop validation"):
                metric, _ = assessment.validate(final_code, ctx.executor, seed=config.seed)
        evaluator = "in-loop validation split"
    else:
        metric = assessment.score(ctx.store.read(ref["sha256"]) or b"")
        evaluator = "evaluate.py"
    seconds = time.perf_counter() - started
    event = ctx.tracer.emit(Evaluation(predictions_sha256=ref["sha256"], evaluator=evaluator, **metric), delivered)
    if ctx.memory is not None:
        _record_score(ctx, metric, evaluator, final_code, ref["sha256"], event.seq)
    return metric, seconds


def _record_score(ctx: RunContext, metric: dict, evaluator: str, code: str | None, predictions_sha256: str,
                  seq: int) -> None:
    """Trellis's score of the delivered program, as a check result the team can retrieve (the
    planner of a later attempt sees which approach scored what)."""
    named = extract_strategy(code)
    said = f" — {strategy_line(*named)}" if named else ""
    name = ctx.task.metric.name
    if metric.get("ok"):
        direction = "higher" if ctx.task.metric.higher_is_better else "lower"
        text = f"SCORE {name} = {metric['value']:.6g} measured by {evaluator} ({direction} is better){said}"
    else:
        text = f"FAIL scoring: {str(metric.get('error'))[:500]} ({evaluator}){said}"
    ctx.memory.measure("check_result", text, tags=("score" if metric.get("ok") else "fail", name,
                                                    *(named[:1] if named else ())),
                       links=(("derived_from", ctx.last_execution_record),) if ctx.last_execution_record else (),
                       event_seq=seq, artifact_sha256=predictions_sha256)


def _beats_trivial(ctx: RunContext, delivered: str | None, metric: dict | None) -> Check | None:
    """Whether the delivered program beats the trivial baselines on Trellis's own validation
    folds (the baselines were scored on the same folds, in the same batch), traced as a public
    check of the agent that delivered: what the judge, the selection and the next mutation see.
    None when nothing validated (the failed evaluation says why)."""
    if delivered is None or not (metric or {}).get("ok"):
        return None
    check = beats_trivial(metric, ctx.task.metric.name, ctx.task.metric.higher_is_better)
    ctx.tracer.emit(CheckEvent(**check.to_dict()), delivered)
    return check


def _claims_against_validation(ctx: RunContext, scheduler: _Scheduler, outputs: dict[str, dict],
                               statuses: dict[str, str], metric: dict | None) -> Check | None:
    """The fabrication detector against what Trellis measured: the scores the delivered final
    report states, compared with the in-loop validation metric (the task's evaluate.py on
    Trellis's folds) and with what the program printed. The finalizer compared the report with
    the printed numbers only; a program that prints a flattering number its predictions do not
    earn is caught here. Traced as a public check (it supersedes the finalizer's)."""
    reference = Reference.from_validation(metric, ctx.task.metric.name)
    reporter = next((a for a in reversed(ctx.workflow.order()) if statuses.get(a) == "SUCCESS"
                     and isinstance(outputs.get(a, {}).get("final_report"), str)), None)
    if reference is None or reporter is None:
        return None
    evidence = scheduler.bags.get(reporter, {}).get("execution_evidence") or {}
    printed = measured_in(str(evidence.get("stdout_tail", "")), "the program printed", [ctx.task.metric.name])
    check = claims_match(outputs[reporter]["final_report"], printed, metrics=[ctx.task.metric.name],
                         reference=reference)
    if check is not None:
        ctx.tracer.emit(CheckEvent(**check.to_dict()), reporter)
    return check
