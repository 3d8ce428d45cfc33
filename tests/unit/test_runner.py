"""The runner's orchestration on the fake executor (real offline models, real traces, no program
runs): routing and retries, budgets, handoff contracts, rebuilding a run from its trace, model
choice. Runs that really execute code on the examples are in tests/integration/test_runner.py."""
import json

import pytest

from engine.budget import Budget
from engine.gateway import resolve_model
from engine.llm import get_litellm
from engine.replay import rebuild, rebuild_from_file
from engine.runner import RunConfig, run_workflow
from engine.synthesis import single_agent_workflow, team_workflow, worker_reviewer_workflow
from engine.task import load_task
from engine.trace import ListSink, read_events
from tests.fakes import FakeExecutor, OffTarget, Outcome, fail_first, traceback_of


def _run(task, wf, tmp_path, executor=None, **kw):
    sink = ListSink()
    result = run_workflow(task, wf, RunConfig(run_dir=tmp_path / "run", **kw),
                          executor=executor or FakeExecutor(tmp_path / "sandbox"), sinks=[sink])
    return result, sink.events


@pytest.fixture
def disc(examples):
    return load_task(examples / "discontinuous-1d")


@pytest.fixture
def diabetes(examples):
    return load_task(examples / "diabetes-progression")


def test_grouped_roles_and_single_agent_baseline_also_deliver(disc, tmp_path):
    for i, build in enumerate((worker_reviewer_workflow, single_agent_workflow)):
        result, _ = _run(disc, build(disc), tmp_path / str(i), seed=2)
        assert result.status == "completed", result.reason
        assert result.metric["ok"]


def test_a_failed_execution_is_routed_to_the_debugger_and_the_repaired_code_delivers(disc, tmp_path):
    crash = Outcome("error", stderr=traceback_of("RuntimeError: the fit diverged", line=40))
    executor = FakeExecutor(tmp_path / "sandbox", script=fail_first("PREDICTIONS_FILE", crash))
    result, events = _run(disc, team_workflow(disc), tmp_path, executor=executor, seed=3)
    routes = [e for e in events if e.kind == "route" and e.payload["taken"]]
    assert routes and routes[0].agent == "verifier" and routes[0].payload["target"] == "debugger"
    runs = [e.payload for e in events if e.kind == "code_execution" and e.payload["purpose"] == "candidate solution"]
    assert [r["status"] for r in runs] == ["error", "ok"]
    debugged = [e for e in events if e.kind == "model_call" and e.payload["role"] == "debugger"]
    assert debugged and "the fit diverged" in json.dumps(debugged[0].payload["messages"])  # it saw the traceback
    assert result.status == "completed", result.reason


def test_a_run_that_keeps_failing_stops_at_the_route_cap(disc, tmp_path):
    executor = FakeExecutor(tmp_path / "sandbox", script=fail_first("PREDICTIONS_FILE", Outcome("timeout"), times=99))
    result, events = _run(disc, team_workflow(disc), tmp_path, executor=executor, seed=3)
    taken = [e.payload for e in events if e.kind == "route" and e.agent == "verifier"]
    assert [p["taken"] for p in taken][-1] is False and taken[-1]["reason"] == "loop cap reached"
    assert sum(p["taken"] for p in taken) == taken[-1]["max_loops"]
    assert result.status == "failed" and result.agent_status["finalizer"] == "SKIPPED"


def test_budget_exhaustion_stops_cleanly_with_the_reason(disc, tmp_path):
    result, events = _run(disc, team_workflow(disc), tmp_path, budget=Budget(max_tokens=4000))
    assert result.status == "stopped"
    assert "token budget exhausted" in result.reason
    assert result.usage["tokens"] <= 4000
    assert [e.kind for e in events][-1] == "run_finished"
    assert any(e.kind == "budget_exhausted" for e in events)
    assert "STOPPED" in result.agent_status.values()


def test_call_budget(disc, tmp_path):
    result, _ = _run(disc, team_workflow(disc), tmp_path, budget=Budget(max_calls=2))
    assert result.status == "stopped" and result.usage["calls"] == 2


def test_run_is_rebuilt_from_its_trace_file_alone(diabetes, tmp_path):
    result, events = _run(diabetes, team_workflow(diabetes), tmp_path, seed=4)
    record = rebuild_from_file(tmp_path / "run" / "trace.jsonl")
    assert record.summary() == result.summary()
    assert record.workflow.hash == result.workflow_hash
    assert record.executions == sum(e.kind == "code_execution" for e in events)


def test_a_trace_cut_mid_run_rebuilds_as_interrupted(disc, tmp_path):
    result, events = _run(disc, team_workflow(disc), tmp_path, seed=5)
    lines = (tmp_path / "run" / "trace.jsonl").read_text().splitlines()
    cut = next(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "code_execution")
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:cut]) + "\n" + lines[cut][: len(lines[cut]) // 2])  # torn last line
    record = rebuild_from_file(partial)
    assert record.status == "interrupted" and not record.finished
    assert record.agent_status["analyzer"] == "RUNNING"  # it was mid-execution when the trace ends
    assert record.agent_status["finalizer"] == "WAITING"


def test_trace_is_append_only_json_lines_with_run_agent_and_time(disc, tmp_path):
    result, events = _run(disc, team_workflow(disc), tmp_path, seed=6)
    on_disk = list(read_events(tmp_path / "run" / "trace.jsonl"))
    assert [e.seq for e in on_disk] == list(range(1, len(on_disk) + 1))
    assert all(e.run_id == result.run_id and e.ts > 0 for e in on_disk)
    kinds = {e.kind for e in on_disk}
    assert {"run_started", "agent_started", "model_call", "tool_call", "code_execution", "handoff",
            "check", "agent_finished", "evaluation", "run_finished"} <= kinds


# --- a model that returns garbage --------------------------------------------------------
class _Garbage:
    """A provider whose coder writes code that does not parse and whose planner rambles."""

    def __init__(self):
        from litellm import CustomLLM
        from litellm.types.utils import ModelResponse

        class Handler(CustomLLM):
            def completion(self, model, messages, *a, **k):
                system = messages[0]["content"]
                if "You are the analyzer" in system:
                    text = "```python\nprint('rows: 200')\n```"
                elif "You are the coder" in system:
                    text = "```python\ndef fit(:\n    return\n```"
                else:
                    text = "sure! here is some text"
                return ModelResponse(model=model, choices=[{"index": 0, "message": {"role": "assistant", "content": text}}])

        self.handler = Handler()


@pytest.fixture
def garbage_model():
    litellm = get_litellm()
    litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "garbage", "custom_handler": _Garbage().handler}]
    yield "garbage/model"
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map if p["provider"] != "garbage"]


def test_wrong_typed_artifact_is_caught_at_the_handoff_and_recorded(disc, tmp_path, garbage_model):
    result, events = _run(disc, team_workflow(disc), tmp_path, model_override=garbage_model)
    violations = [e for e in events if e.kind == "handoff" and not e.payload["ok"]]
    assert violations and violations[0].payload["source"] == "coder"
    assert "does not parse" in violations[0].payload["errors"][0]
    assert result.agent_status["debugger"] == "FAILURE"
    assert result.agent_status["finalizer"] == "SKIPPED"
    assert result.status == "failed"
    assert rebuild(events).summary() == result.summary()


def test_model_choice_per_role_from_environment():
    env = {"TRELLIS_MODEL": "openai/gpt-4o-mini", "TRELLIS_MODEL_CODER": "anthropic/claude-sonnet-4-5"}
    assert resolve_model("coder", env=env) == "anthropic/claude-sonnet-4-5"
    assert resolve_model("planner", env=env) == "openai/gpt-4o-mini"
    assert resolve_model("planner", agent_model="ollama/llama3", env=env) == "ollama/llama3"
    assert resolve_model("coder", override="groq/x", env=env) == "groq/x"
    assert resolve_model("coder", env={}) == "trellis/offline-scientist"


def test_a_debugger_that_cannot_repair_says_why_instead_of_repeating_the_code(disc, tmp_path):
    # The data has no column 'y2': no change to the code can fix that.
    missing = Outcome("error", stderr=traceback_of("KeyError: 'y2'", line=12))
    executor = FakeExecutor(tmp_path / "sandbox", script=fail_first("PREDICTIONS_FILE", missing, times=10))
    result, events = _run(disc, team_workflow(disc), tmp_path, executor=executor, seed=3)
    debugged = [e for e in events if e.kind == "model_call" and e.payload["role"] == "debugger"]
    finished = [e.payload for e in events if e.kind == "agent_finished" and e.agent == "debugger"
                and e.payload["status"] == "FAILURE"]
    assert result.status != "completed"
    assert len(debugged) == 1, "one answer saying 'no repair', not three identical repairs"
    assert finished and finished[0]["message"].startswith("debugger: ") and "repair" in finished[0]["message"]


def _trivial_check(events):
    checks = [e.payload for e in events if e.kind == "check" and e.payload["name"] == "beats_trivial"]
    return checks[-1] if checks else None


def test_a_flattering_printed_score_does_not_pass_beats_trivial(diabetes, tmp_path):
    """Issue 27 item 5c: the check is Trellis's validation on its own folds against the trivial
    baselines on those folds; a program printing "validation_r2: 0.99" while predicting two
    standard deviations off is worse than the training mean, and the run says so."""
    executor = OffTarget(tmp_path / "sandbox", shift=2.0, prints="validation_r2: 0.99\n")
    result, events = _run(diabetes, team_workflow(diabetes), tmp_path, executor=executor, seed=3,
                          scoring="validation")
    check = _trivial_check(events)
    assert check is not None and not check["passed"]
    assert "worse than the constant" in check["detail"] and "0.99" not in check["detail"]
    assert "checks failed: beats_trivial" in result.reason


def test_an_honest_program_printing_a_poor_score_passes_beats_trivial(diabetes, tmp_path):
    executor = OffTarget(tmp_path / "sandbox", prints="validation_r2: -968.1\n")
    result, events = _run(diabetes, team_workflow(diabetes), tmp_path, executor=executor, seed=3,
                          scoring="validation")
    check = _trivial_check(events)
    assert check is not None and check["passed"], check
    assert "beats_trivial" not in result.reason
    # the verifier never read the printed number as a score either
    assert not any(e.payload["name"] == "beats_trivial" and not e.payload["passed"]
                   for e in events if e.kind == "check")
