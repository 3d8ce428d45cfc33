"""What each role does when its agent runs: prompt the model, use tools, hand on artifacts."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from . import answers
from .answers import Answer, AnswerContract
from .artifacts import ArtifactStore
from .checks import Check, execution_checks, hash_preserved
from .evidence.graph import Record
from .evidence.memory import TeamMemory
from .evidence.memory import render as render_memory
from .gateway import ModelGateway
from .plausibility import claims_match, measured_in
from .prompt_format import extract_strategy, find_code, strategy_line, syntax_problem
from .prompts import build_messages
from .protocol.events import Check as CheckEvent
from .protocol.events import CodeExecution, ToolCall
from .sandbox import ExecutionRequest, ExecutionResult, Executor, UnsafeOutput, open_output
from .task import Task
from .tool_calls import CallRecord, complete_with_tools
from .tools.host import ToolHost
from .trace import Tracer
from .training.jobs import labelled
from .workflow import Agent, Workflow

T = TypeVar("T")


@dataclass
class RunContext:
    task: Task
    workflow: Workflow
    gateway: ModelGateway
    executor: Executor
    store: ArtifactStore
    tracer: Tracer
    execution_seconds: float = 0.0
    memory: TeamMemory | None = None
    recalled: list[Record] = field(default_factory=list)  # what the current role step was given
    last_execution: int | None = None   # seq of the latest code_execution event
    last_execution_record: int | None = None  # and its evidence record, when one was written
    tools: ToolHost | None = None  # the run's MCP servers (engine/tools/host.py), None without any
    tool_calls: list[CallRecord] = field(default_factory=list)  # the tool calls of the latest model answer


@dataclass
class StepOutcome:
    status: str  # SUCCESS / RETRY / FALLBACK / FAILURE
    produced: dict = field(default_factory=dict)
    message: str = ""


def _ask(ctx: RunContext, agent: Agent, role: str, inputs: dict, contract: AnswerContract[T],
         feedback: dict | None = None, temperature: float = 0.7) -> Answer[T]:
    """The role's answer read by its contract (engine/answers.py): after any tool calls, and
    re-asked once, with what was wrong named, when it cannot be used."""
    if ctx.recalled:  # what the memory policy gave this step (runner.recall), after the artifacts
        inputs = {**inputs, "memory": render_memory(ctx.recalled)}
    messages = build_messages(role, agent, ctx.workflow.harness, ctx.task, inputs, feedback)
    ctx.tool_calls = []
    first = complete_with_tools(ctx, agent, role, messages, temperature, contract.schema)
    return answers.ask(ctx.gateway, agent.id, role, messages, contract, temperature=temperature,
                       agent_model=agent.model, agent_options=agent.endpoint_options(), first=first)


def execute(ctx: RunContext, agent: Agent, code: str, purpose: str) -> ExecutionResult:
    """Run code in the sandbox, keep every file it wrote, and trace both the call and result."""
    request = ExecutionRequest(code=code, input_files=ctx.task.input_files(), limits=ctx.task.resources.limits)
    ctx.tracer.emit(ToolCall(tool="sandbox.python", executor=ctx.executor.name, purpose=purpose, code=code,
                             limits=vars(request.limits)), agent.id)
    started = time.perf_counter()
    with labelled(f"{agent.id}: {purpose}"):  # a training program's curves say whose step they are
        result = ctx.executor.run(request)
    ctx.execution_seconds += time.perf_counter() - started
    for rel in list(result.files):
        try:
            with open_output(result.workdir, rel) as handle:
                result.files[rel] = ctx.store.put_stream(handle)
        except (UnsafeOutput, OSError) as exc:  # swapped for a link after the run: not an output
            del result.files[rel]
            result.violations.append(f"output {rel!r} not kept: {exc}")
    trace_execution(ctx, agent, purpose, result)
    return result


def trace_execution(ctx: RunContext, agent: Agent, purpose: str, result: ExecutionResult) -> None:
    """A finished execution on the trace (its evidence and output tails), as the run's latest."""
    event = ctx.tracer.emit(CodeExecution(purpose=purpose, **result.evidence(), stdout=result.stdout[-20000:],
                                          stderr=result.stderr[-20000:], workdir=str(result.workdir)), agent.id)
    ctx.last_execution = event.seq


def _emit_checks(ctx: RunContext, agent: Agent, checks: list[Check]) -> dict[str, int]:
    """Trace each check; returns the event seq of each by name (the provenance of its record)."""
    return {c.name: ctx.tracer.emit(CheckEvent(**c.to_dict()), agent.id).seq for c in checks}


# --- recording duties (the memory policy says which of these a role writes) ----------------------
def _strategy(code: str | None) -> tuple[str, str | None]:
    """`` — strategy: <key> <params>`` for a program that names its strategy, and the key."""
    named = extract_strategy(code)
    return (f" — {strategy_line(*named)}", named[0]) if named else ("", None)


def _remember(ctx: RunContext, agent: Agent, role: str, kind: str, text: str, **kw) -> Record | None:
    """Record per the role's duties; the provenance event is, unless named, the latest one traced
    (the model call or check the record comes from)."""
    if ctx.memory is None:
        return None
    kw.setdefault("event_seq", None)
    if kw["event_seq"] is None:
        kw["event_seq"] = ctx.tracer.last_seq or None
    return ctx.memory.record(agent.id, role, kind, text, **kw)


def _cited(ctx: RunContext) -> tuple[tuple[str, int], ...]:
    """Links from what a role writes to the records it was given: what led to it."""
    return tuple(("derived_from", r.id) for r in ctx.recalled[:10])


def _record_execution(ctx: RunContext, agent: Agent, code: str, evidence: dict, predictions: dict | None,
                      checks: list[Check], seqs: dict[str, int]) -> None:
    """The verifier's duties: the execution, then its failed checks (or one record that all
    passed), each linked to the execution it judged."""
    said, key = _strategy(code)
    code_sha = hashlib.sha256(code.encode("utf-8")).hexdigest()
    files = f"; wrote {predictions['path']} ({predictions['sha256'][:12]})" if predictions else "; wrote no predictions"
    exe = _remember(ctx, agent, "verifier", "execution",
                    f"candidate solution ran: status {evidence.get('status')}, exit code {evidence.get('exit_code')}, "
                    f"{float(evidence.get('duration_s') or 0):.1f} s{files}{said}",
                    tags=("execution", str(evidence.get("status")), *(k for k in [key] if k)),
                    event_seq=ctx.last_execution, execution_sha256=code_sha,
                    artifact_sha256=predictions["sha256"] if predictions else None)
    ctx.last_execution_record = exe.id if exe else None
    to_exe = (("derived_from", exe.id),) if exe else ()
    failed = [c for c in checks if not c.passed]
    for c in failed[:10]:
        _remember(ctx, agent, "verifier", "check_result", f"FAIL {c.name}: {c.detail}{said}",
                  tags=(c.name, "fail", *(k for k in [key] if k)), links=to_exe, event_seq=seqs.get(c.name),
                  execution_sha256=code_sha)
    if checks and not failed:
        _remember(ctx, agent, "verifier", "check_result",
                  f"PASS all {len(checks)} checks ({', '.join(c.name for c in checks)}){said}",
                  tags=("pass", *(k for k in [key] if k)), links=to_exe, execution_sha256=code_sha)


def analyzer(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    answer = _ask(ctx, agent, "analyzer", {}, answers.ANALYSIS_CODE, feedback)
    block = answer.value
    if block is None:
        # no analysis is a weaker team, not a halted one: the planner is told there is no report
        report = f"(no data report: the analyzer's answer could not be run: {answer.problem})"
        _remember(ctx, agent, "analyzer", "observation", report, tags=("data-report", "no-script"), links=_cited(ctx))
        return StepOutcome("SUCCESS", {"report": report}, f"no analysis: {answer.problem}")
    code = block.code
    notes = answer.text.split("```", 1)[0].strip() if any(c.ok for c in ctx.tool_calls) else ""
    result = execute(ctx, agent, code, "exploratory analysis")
    if result.ok:
        report = result.stdout.strip() or "(the analysis script printed nothing)"
    else:
        report = (f"The exploratory script failed ({result.status}); the team works without it.\n\n"
                  f"```\n{result.stderr[-1500:]}\n```")
    if notes:  # what the analyzer took from its tools heads the report the team reads
        report = f"{notes[:4000]}\n\n{report}"
    _remember(ctx, agent, "analyzer", "observation", report[:4000], tags=("data-report", result.status),
              links=_cited(ctx), event_seq=ctx.last_execution)
    return StepOutcome("SUCCESS", {"report": report}, f"analysis {result.status}")


def planner(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    answer = _ask(ctx, agent, "planner", {"report": bag["report"]}, answers.PLAN, feedback)
    if answer.value is None:
        return StepOutcome("FAILURE", message=f"the planner's answer could not be used: {answer.problem}")
    plan = answer.value
    named = extract_strategy(plan)
    _remember(ctx, agent, "planner", "plan", plan[:4000], tags=(named[0],) if named else (), links=_cited(ctx))
    return StepOutcome("SUCCESS", {"plan": plan})


def coder(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    inputs = {k: bag[k] for k in ("plan", "report") if k in bag}
    answer = _ask(ctx, agent, "coder", inputs, answers.CODE, feedback, temperature=0.2)
    if answer.value is not None:
        return StepOutcome("SUCCESS", {"code": answer.value.code})
    block = find_code(answer.text)
    if block is not None:
        # code that does not compile is still the coder's program: the debugger repairs it
        # from the syntax error (see debugger), rather than the team halting here
        return StepOutcome("SUCCESS", {"code": block.code}, f"handed to the debugger: {answer.problem}")
    return StepOutcome("FAILURE", message=f"the coder's answer could not be used: {answer.problem}")


def debugger(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    broken = syntax_problem(bag["code"]) if isinstance(bag.get("code"), str) else ""
    if feedback is None and broken:  # the coder's program does not compile: that is the failure
        feedback = {"from": "compiler", "status": "RETRY",
                    "detail": {"message": f"the program does not compile: {broken}", "code": bag["code"]}}
    if feedback is None:  # nothing has failed yet: hand the code on without spending a call
        return StepOutcome("SUCCESS", {"code": bag["code"]}, "no failure to debug; code handed on unchanged")
    failing = feedback.get("detail", {}).get("code") or bag["code"]  # fix what actually ran, not the first draft
    detail = {k: v for k, v in feedback.get("detail", {}).items() if k != "code"}
    answer = _ask(ctx, agent, "debugger", {"code": failing}, answers.DEBUG, {**feedback, "detail": detail},
                  temperature=0.2)
    if isinstance(answer.value, str):
        # A debugger that says it cannot repair this (e.g. the data lacks a column) is heard in its own words.
        _remember(ctx, agent, "debugger", "finding", f"no repair: {answer.value[:1000]}", tags=("no-repair",),
                  links=_cited(ctx))
        return StepOutcome("FAILURE", message=f"debugger: {answer.value[:300]}")
    block = answer.value or find_code(answer.text)
    if block is None:
        return StepOutcome("FAILURE", message=f"the debugger's answer could not be used: {answer.problem}")
    code = block.code
    cause = next((ln.strip() for ln in answer.text.splitlines() if ln.strip() and not ln.lstrip().startswith(("```", "~~~"))), "")
    _remember(ctx, agent, "debugger", "finding", f"repair: {cause[:1000]}{_strategy(code)[0]}",
              tags=("repair", *(k for k in [_strategy(code)[1]] if k)), links=_cited(ctx))
    # a repair that still does not compile runs anyway: its traceback brings the next repair
    return StepOutcome("SUCCESS", {"code": code}, "code repaired" + (f" (still: {answer.problem})" if answer.problem else ""))


def verifier(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    result = execute(ctx, agent, bag["code"], "candidate solution")
    evidence = result.evidence()
    r = ctx.task.resources
    predictions = None
    if r.predictions_file in result.files:
        predictions = {"path": r.predictions_file, "sha256": result.files[r.predictions_file]}
    assessment = ctx.task.assessment()
    checks = execution_checks(evidence, predictions, r.prediction_contract(), assessment.varying_column(),
                              ctx.store.read)
    if predictions is not None and all(c.passed for c in checks if c.name in {"output_exists", "output_schema"}):
        # Facts about the numbers themselves, once the file is known to be well formed.
        checks += assessment.checks(ctx.store.read(predictions["sha256"]) or b"", result.stdout)
    seqs = _emit_checks(ctx, agent, checks)
    evidence["checks"] = [c.to_dict() for c in checks]
    _record_execution(ctx, agent, bag["code"], evidence, predictions, checks, seqs)
    said = _ask_status(ctx, agent, "verifier", {"code": bag["code"], "execution_evidence": _brief(evidence),
                                                "checks": "\n".join(c.line() for c in checks)}, answers.VERIFIER_STATUS)
    decided = ""
    if said is None:
        # no STATUS in the answer: the checks decide (they are facts; a default RETRY would send
        # a working program to the debugger to be replaced)
        said = "SUCCESS" if checks and all(c.passed for c in checks) else "RETRY"
        decided = f"; the verifier named no status, decided from the checks: {said}"
    status = said
    if status == "SUCCESS" and not all(c.passed for c in checks):
        # A verifier that waves through a failed check is overruled: checks are facts, and
        # the plausibility checks among them are facts about the numbers it would ship.
        status = "RETRY"
    produced = {"execution_evidence": evidence}
    if predictions:
        produced["predictions"] = predictions
    failed = [c.name for c in checks if not c.passed]
    return StepOutcome(status, produced,
                       (f"checks failed: {', '.join(failed)}" if failed else "all checks passed") + decided)


def router(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    evidence = bag["execution_evidence"]
    status = _ask_status(ctx, agent, "router", {"execution_evidence": _brief(evidence)}, answers.ROUTER_STATUS)
    how = "routed"
    if status is None:  # no STATUS even when re-asked: the evidence decides
        checks = evidence.get("checks") or []
        clean = evidence.get("status") == "ok" and all(c.get("passed") for c in checks)
        status, how = ("SUCCESS" if clean else "RETRY"), "the router named no status; decided from the evidence:"
    return StepOutcome(status, {"execution_evidence": evidence}, f"{how} {status}")


def finalizer(ctx: RunContext, agent: Agent, bag: dict, feedback: dict | None) -> StepOutcome:
    evidence, predictions = bag["execution_evidence"], bag["predictions"]
    check = hash_preserved(evidence.get("files", {}).get(predictions.get("path")), predictions.get("sha256"))
    _emit_checks(ctx, agent, [check])
    if not check.passed:
        return StepOutcome("FAILURE", message=f"predictions changed between verifier and finalizer: {check.detail}")
    inputs = {"execution_evidence": _brief(evidence)}
    if "code" in bag:
        inputs["code"] = bag["code"]
    measured = measured_in(str(evidence.get("stdout_tail", "")), "the program printed", [ctx.task.metric.name])
    first = _ask(ctx, agent, "finalizer", inputs, answers.REPORT, temperature=0.2)
    if first.value is None:
        return StepOutcome("FAILURE", message=f"the finalizer's answer could not be used: {first.problem}")
    report = first.value
    claims = claims_match(report, measured, metrics=[ctx.task.metric.name])
    if claims is not None and not claims.passed:
        # One more try with the mismatch named; a report that still states scores nobody
        # measured does not go out under the team's name.
        _emit_checks(ctx, agent, [claims])
        feedback = {"from": agent.id, "status": "RETRY",
                    "detail": {"message": "state only scores the program printed", "checks": [claims.to_dict()]}}
        report = (_ask(ctx, agent, "finalizer", inputs, answers.REPORT, feedback, temperature=0.2).value or "").strip()
        claims = claims_match(report, measured, metrics=[ctx.task.metric.name])
    if claims is not None:
        _emit_checks(ctx, agent, [claims])
        if not claims.passed:
            return StepOutcome("FAILURE", {"final_report": report}, f"checks failed: claims_match ({claims.detail})")
    _remember(ctx, agent, "finalizer", "finding", report[:4000], tags=("final-report",),
              links=(("derived_from", ctx.last_execution_record),) if ctx.last_execution_record else (),
              artifact_sha256=predictions.get("sha256"))
    return StepOutcome("SUCCESS", {"predictions": predictions, "final_report": report})


def _ask_status(ctx: RunContext, agent: Agent, role: str, inputs: dict, contract: AnswerContract[str]) -> str | None:
    """The STATUS a verifier or router answered (re-asked once), or None when it named none."""
    return _ask(ctx, agent, role, inputs, contract, temperature=0.0).value


def _brief(evidence: dict) -> dict:
    """Evidence as shown to a model: enough to judge, without megabytes of output."""
    # no duration: the same evidence must make the same prompt, so a recorded run replays (cassettes)
    keep = ("status", "exit_code", "stdout_tail", "stderr_tail", "files", "violations")
    out = {k: evidence[k] for k in keep if k in evidence}
    out["stdout_tail"] = str(out.get("stdout_tail", ""))[-1500:]
    out["stderr_tail"] = str(out.get("stderr_tail", ""))[-1500:]
    return out


RoleStep = Callable[[RunContext, Agent, dict, "dict | None"], StepOutcome]
ROLE_STEPS: dict[str, RoleStep] = {
    "analyzer": analyzer, "planner": planner, "coder": coder, "debugger": debugger,
    "verifier": verifier, "router": router, "finalizer": finalizer,
}
