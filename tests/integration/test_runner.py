"""End-to-end runs of the engine: real sandboxed code, real evaluate.py, real traces. The
runner's orchestration logic on the fake executor is in tests/unit/test_runner.py."""
import math

import pytest

from engine.llm import OFFLINE_PROVIDER_LABEL
from engine.offline import scientist
from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink

pytestmark = pytest.mark.slow


def _run(task, wf, tmp_path, **kw):
    sink = ListSink()
    result = run_workflow(task, wf, RunConfig(run_dir=tmp_path / "run", **kw), sinks=[sink])
    return result, sink.events


@pytest.fixture
def disc(examples):
    return load_task(examples / "discontinuous-1d")


@pytest.mark.parametrize("name", ["discontinuous-1d", "diabetes-progression"])
def test_team_solves_each_example_with_really_executed_code(examples, tmp_path, name):
    task = load_task(examples / name)
    result, events = _run(task, team_workflow(task), tmp_path, seed=1)
    assert result.status == "completed", result.reason
    assert result.metric["ok"] and math.isfinite(result.metric["value"])
    assert result.metric["metric"] == task.metric.name
    executions = [e for e in events if e.kind == "code_execution"]
    assert any(e.payload["purpose"] == "candidate solution" and e.payload["status"] == "ok" for e in executions)
    assert "predictions.csv" in executions[-1].payload["files"]
    calls = [e for e in events if e.kind == "model_call"]
    assert calls and all(e.payload["provider"] == OFFLINE_PROVIDER_LABEL for e in calls)
    assert result.usage["tokens"] == sum(e.payload["prompt_tokens"] + e.payload["completion_tokens"] for e in calls)


def test_a_buggy_first_draft_is_routed_to_the_debugger_and_fixed(disc, tmp_path, monkeypatch):
    monkeypatch.setattr(scientist, "BUG_RATE", 1.0)  # every first draft has a mistake
    result, events = _run(disc, team_workflow(disc), tmp_path, seed=3)
    routes = [e for e in events if e.kind == "route" and e.payload["taken"]]
    assert routes and routes[0].agent == "verifier" and routes[0].payload["target"] == "debugger"
    failed_runs = [e for e in events if e.kind == "code_execution" and e.payload["status"] != "ok"]
    assert failed_runs, "the injected bug should have made one execution fail"
    assert result.status == "completed", result.reason
