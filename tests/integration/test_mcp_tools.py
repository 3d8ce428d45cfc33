"""MCP tools against real servers over stdio: the shipped science server discovered and called, a
server that crashes mid-run, and the done-when of issue 14: a run's agents call a discovered tool
and Mimosa proposes removing it, probes the change and the studio's queue shows it.

Programs run on the fake executor (the sandbox is not what these tests are about); the MCP
servers are real processes started by the engine's ToolHost."""
from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.tools.allocation import allocate
from engine.tools.config import ServerConfig, load_config
from engine.tools.host import ToolHost
from engine.trace import ListSink
from tests.fakes import FakeExecutor

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "discontinuous-1d"
FLAKY = ROOT / "tests" / "mcp_flaky_server.py"


def _flaky(crash_on: int) -> ServerConfig:
    return ServerConfig("flaky", sys.executable, (str(FLAKY), str(crash_on)), allocate={"analyzer": ("summarize",)},
                        timeout_s=30)


@pytest.fixture(scope="module")
def science(tmp_path_factory):
    """The shipped server, started as a run starts it (mcp_servers.json), for the whole module."""
    task = load_task(TASK)
    [server] = load_config(ROOT / "mcp_servers.json")
    out = tmp_path_factory.mktemp("science")
    host = ToolHost([server], {"data": str((TASK / "data" / "train.csv").resolve()), "base": str(TASK),
                               "output": str(out / "tool-outputs")}, out / "logs")
    host.start()
    yield host, task
    host.close()


def test_the_shipped_server_is_discovered_over_stdio_with_each_tools_schema(science):
    host, _ = science
    [status] = host.status
    assert status["ok"] and set(status["tools"]) == {"profile_data", "fit_curve", "convert_units", "plot"}
    fit = host.registry.spec("mcp.science.fit_curve")
    assert {"model", "x", "y", "path", "x_column", "y_column"} <= set(fit.input_schema["properties"])
    assert "standard error" in fit.description


def test_a_real_call_returns_a_fit_with_uncertainties_and_a_refused_path_is_the_calls_error(science):
    host, _ = science
    done = host.call("mcp.science.fit_curve", {"model": "linear", "path": "data/train.csv", "x_column": "x",
                                               "y_column": "y"})
    fit = json.loads(done.text)
    assert done.ok and fit["n"] == 200 and fit["parameters"]["a"]["stderr"] > 0 and 0 < fit["r2"] < 1
    refused = host.call("mcp.science.profile_data", {"path": "../heldout/test_targets.csv"})
    assert not refused.ok and "outside the data this run may read" in refused.error


def _run(task, host, workflow, tmp_path, name):
    sink = ListSink()
    result = run_workflow(task, workflow, RunConfig(run_dir=tmp_path / name, seed=1, tools=host, run_id=name),
                          executor=FakeExecutor(tmp_path / "sandbox"), sinks=[sink])
    return result, sink.events


def test_a_server_that_crashes_mid_run_gives_the_call_a_traced_error_and_the_run_completes(tmp_path):
    task = load_task(TASK)
    with ToolHost([_flaky(crash_on=2)], log_dir=tmp_path / "logs") as host:
        workflow = allocate(team_workflow(task), host.registry)
        assert "mcp.flaky.summarize" in workflow.agent("analyzer").tools
        first, events = _run(task, host, workflow, tmp_path, "first")
        [ok] = [e.payload for e in events if e.kind == "mcp_tool_result"]
        assert ok["ok"] and first.status == "completed"
        second, events = _run(task, host, workflow, tmp_path, "second")  # the server dies during this call
        [crashed] = [e.payload for e in events if e.kind == "mcp_tool_result"]
        assert not crashed["ok"] and "closed the connection during the call" in crashed["error"]
        assert second.status == "completed" and second.agent_status["analyzer"] == "SUCCESS"
        answered = [e for e in events if e.kind == "model_call" and e.agent == "analyzer"][-1]
        assert any(m.get("role") == "tool" and m["content"].startswith("ERROR: ") for m in answered.payload["messages"])
        assert host.call("mcp.flaky.summarize", {"path": "x"}).ok  # the next call starts it again


def test_the_single_agent_baseline_is_given_the_teams_tools_and_calls_them(tmp_path):
    """A baseline on the same budget has the same tools: its one agent plays every role, so it is
    given every role's allocation."""
    from engine.ending import single_agent_baseline
    from engine.budget import Budget

    task = load_task(TASK)
    with ToolHost([_flaky(crash_on=99)], log_dir=tmp_path / "logs") as host:
        solo = single_agent_baseline(task, tmp_path / "solo", seed=1, budget=Budget(max_tokens=500_000),
                                     executor=FakeExecutor(tmp_path / "sandbox"), tools=host)
    [agent] = json.loads((tmp_path / "solo" / "workflow.json").read_text())["agents"]
    assert "mcp.flaky.summarize" in agent["tools"]
    calls = [json.loads(line) for line in Path(solo["trace"]).read_text().splitlines()]
    assert any(e["kind"] == "mcp_tool_result" and e["payload"]["ok"] for e in calls), "the solo agent used the tool"
    assert solo["status"] == "completed"


def test_a_server_that_cannot_start_is_reported_and_the_run_goes_on_without_it(tmp_path):
    task = load_task(TASK)
    missing = ServerConfig("gone", str(tmp_path / "no-such-program"), allocate={"analyzer": ("x",)})
    with ToolHost([missing]) as host:
        assert host.status[0]["ok"] is False and "FileNotFoundError" in host.status[0]["error"]
        wf = team_workflow(task)
        wf = wf.derive(agents=tuple(replace(a, tools=a.tools + ("mcp.gone.x",)) if a.id == "analyzer" else a
                                    for a in wf.agents))
        result, events = _run(task, host, wf, tmp_path, "run")
    assert result.status == "completed" and not [e for e in events if e.kind == "mcp_tool_call"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_mimosa_proposes_removing_a_tool_that_only_failed_probes_it_and_the_queue_shows_it(
        tmp_path, monkeypatch, demo_user):
    """Done when (issue 14): the analyzer calls a discovered tool, every call of which crashes its
    server; Mimosa's mutator proposes taking the tool away, the candidate is probed, and the run
    page's queue shows the proposal, worded, waiting for a person."""
    from django.test import Client

    from engine.errors import AwaitingDecision
    from engine.evolve import evolve
    from engine.run_spec import RunSpec
    from tests.studio_harness import add_member, running_run
    from webapp.runs.bridge import DatabaseGate, RunEventSink, moot_reason
    from webapp.runs.models import GatePolicy, Mutation, Run

    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"servers": [{"name": "flaky", "command": sys.executable, "args": [str(FLAKY), "1"],
                                               "allocate": {"analyzer": ["summarize"]}}]}))
    monkeypatch.setenv("TRELLIS_MCP_CONFIG", str(config))
    run = running_run(TASK, "mcp")
    Run.objects.filter(pk=run.pk).update(gate_policy=GatePolicy.MANUAL)
    run.refresh_from_db()
    sink = RunEventSink(run, "L")
    with pytest.raises(AwaitingDecision):
        evolve(TASK, RunSpec(search="mimosa", iterations=1, seed=1, single_agent=False), runs_dir=tmp_path,
               run_dir=tmp_path / "run", out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"), sinks=[sink],
               gate=DatabaseGate(run, "L", moot_reason(run)),
               official=lambda *a, **k: {"ok": True, "metric": "relative_l2", "value": 0.1})
    kinds = list(run.events.values_list("kind", flat=True))
    assert "tools_discovered" in kinds and "mcp_tool_call" in kinds
    failed = run.events.filter(kind="mcp_tool_result").first()
    assert failed.agent == "analyzer" and failed.payload["ok"] is False
    mutation = Mutation.objects.get(run=run)
    assert (mutation.kind, mutation.target) == ("tool_allocation", "analyzer")
    assert mutation.proposal["change"]["params"] == {"remove": "mcp.flaky.summarize"}
    # probed: the child's probe ran without the tool (no call), and was judged
    assert mutation.proposal["evidence"]["J"] is not None
    probe_sources = list(run.events.filter(kind="run_started").values_list("source", flat=True))
    assert len(probe_sources) == 2 and not run.events.filter(kind="mcp_tool_call", source=probe_sources[1]).exists()
    add_member(run.task.project, demo_user, "reviewer")
    client = Client()
    client.force_login(demo_user)
    assert 'id="queue"' in client.get(f"/runs/{run.pk}/").content.decode()
    queue = client.get(f"/runs/{run.pk}/queue", HTTP_HX_REQUEST="true").content.decode()  # the run page's queue
    assert "removes tool mcp.flaky.summarize from analyzer" in queue and "tool allocation" in queue
    assert "every one of the 1 call(s) of mcp.flaky.summarize by analyzer failed" in queue and "Approve" in queue
    trace = client.get(f"/runs/{run.pk}/trace", {"kind": "mcp_tool_result"}, HTTP_HX_REQUEST="true").content.decode()
    assert "mcp.flaky.summarize · ERROR" in trace
