"""What a browser watching a run is sent: each engine event shaped for the page
(webapp/runs/live.py), and studio messages rendered per viewer by the WebSocket consumer
(webapp/runs/consumers.py) on an in-memory channel layer (no Redis, no Daphne)."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from engine.protocol.events import (AgentFinished, AgentStarted, CodeExecution, Handoff, Judgement, ModelCall,
                                    RunStarted, SearchStep, ToolCall)
from engine.replay import dag_state
from engine.trace import Event as EngineEvent
from tests.studio_harness import add_member, proposed_mutation, running_run
from webapp.runs import bridge, live
from webapp.runs.models import Event
from webapp.runs.models import Judgement as JudgementRow
from webapp.runs.models import Run
from webapp.teams.models import Membership

USAGE = {"calls": 3, "prompt_tokens": 2700, "completion_tokens": 300, "tokens": 3000, "cost_usd": 0.01, "failed_calls": 0}


def engine_event(payload, kind: str | None = None, agent: str | None = "coder", iteration: int = 2,
                 source: str = "probe-7", seq: int = 11) -> EngineEvent:
    """An event as the sink receives it (a stored payload: plain JSON, the fields set)."""
    data = payload if isinstance(payload, dict) else payload.to_payload()
    return EngineEvent(source, seq, 1700000000.5, kind or payload.kind, agent, iteration, data)


@pytest.fixture
def run(examples) -> Run:
    return running_run(examples / "diabetes-progression", "live")


# --- engine events -------------------------------------------------------------------------------
def test_every_message_says_which_event_it_is():
    msg = live.event_message(5, 42, engine_event(AgentStarted(roles=["coder"], inputs=["task"])))
    assert {k: v for k, v in msg.items() if k != "data"} == {
        "kind": "agent_started", "seq": 42, "agent": "coder", "iteration": 2, "source": "probe-7",
        "ts": 1700000000.5}
    assert msg["data"] == {"state": "running"}


@pytest.mark.parametrize("status, state", [("SUCCESS", "done"), ("FAILURE", "failed"), ("STOPPED", "failed"),
                                           ("SKIPPED", "skipped"), ("RETRY", "waiting")])
def test_agent_finished_carries_its_state_from_the_one_state_machine(status, state):
    event = engine_event(AgentFinished(status=status, message="m", outputs={"code": "x" * 5000}))
    data = live.event_message(5, 1, event)["data"]
    # The page colours the node with this state and never maps statuses itself.
    assert data == {"status": status, "state": state}
    assert state == dag_state(status)


@pytest.mark.django_db(transaction=True)
def test_run_started_carries_the_probes_graph_and_its_label(run):
    workflow = run.current_version.data
    agents = [a["id"] for a in workflow["agents"]]

    def started(workflow_hash: str, iteration: int) -> dict:
        payload = RunStarted(task="t", task_title="T", task_fingerprint="f", workflow=workflow,
                             workflow_hash=workflow_hash, seed=0, executor="local", budget={}, order=agents)
        return live.event_message(run.pk, 3, engine_event(payload, agent=None, iteration=iteration))["data"]

    data = started(run.current_version.hash, 0)
    graph = data["graph"]
    nodes = [e["data"] for e in graph["elements"] if "source" not in e["data"]]
    edges = [e["data"] for e in graph["elements"] if e["data"].get("kind") == "edge"]
    assert [n["id"] for n in nodes] == agents and {n["state"] for n in nodes} == {"waiting"}
    assert len(edges) == len(workflow["edges"])
    assert graph["source"] == "probe-7"     # agent messages from this probe colour this graph
    assert graph["label"] == "iteration 0: v1" and graph["version"] == 1 and graph["finished"] is False
    assert data["workflow_hash"] == run.current_version.hash
    # A probe of a workflow that is not a version yet is labelled a candidate.
    assert started("d" * 64, 3)["graph"]["label"] == "iteration 3: candidate"


@pytest.mark.django_db(transaction=True)
def test_judgement_is_one_point_of_the_score_charts_with_the_incumbents_J(run):
    # The first probe judged 0.61; iteration 1's 0.74 was vetoed by a person, iteration 2's 0.55
    # approved: the incumbent a later candidate is judged against has J 0.55, not the best 0.74.
    JudgementRow.objects.create(run=run, iteration=0, workflow_hash="a", ok=True, J=0.61)
    JudgementRow.objects.create(run=run, iteration=1, workflow_hash="b", ok=True, J=0.74)
    JudgementRow.objects.create(run=run, iteration=2, workflow_hash="c", ok=True, J=0.55)
    Run.objects.filter(pk=run.pk).update(usage=USAGE)
    def judged(n, wf, j):
        return Judgement(iteration_n=n, workflow_hash=wf, ok=True, J=j, checks=[])

    def settled(n, wf, j, accepted):
        return SearchStep(search="mimosa", n=n, J=j, accepted=accepted, workflow_hash=wf, budget_left={})

    for seq, payload in ((2, judged(0, "a", 0.61)), (3, judged(1, "b", 0.74)), (4, settled(1, "b", 0.74, False)),
                         (5, judged(2, "c", 0.55)), (6, settled(2, "c", 0.55, True))):
        Event.objects.create(run=run, seq=seq, source="s", ts=1.0, kind=payload.kind, payload=payload.to_payload())
    JudgementRow.objects.create(run=run, iteration=3, workflow_hash="e" * 64, ok=True, J=0.7, budget_used=USAGE)
    payload = Judgement(iteration_n=3, workflow_hash="e" * 64, ok=True, J=0.7,
                        scores={"goal_alignment": 0.8, "output_quality": 0.6}, feedback={"goal_alignment": "ok"},
                        checks=[{"name": "exit_ok", "passed": True}, {"name": "values_vary", "passed": False}],
                        validation={"ok": True, "metric": "rmse", "value": 55.2})
    Event.objects.create(run=run, seq=9, source="s", ts=1.0, kind="judgement", payload=payload.to_payload())
    data = live.event_message(run.pk, 9, engine_event(payload, agent="judge"))["data"]
    assert data == {"ok": True, "point": {
        "iteration": 3, "J": 0.7, "incumbent_J": 0.55,
        "criteria": {"goal_alignment": 0.8, "collaboration_efficiency": None, "output_quality": 0.6,
                     "answer_plausibility": None},
        "checks_passed": 1, "checks_total": 2, "validation": 55.2, "tokens": 3000, "calls": 3, "index": 3}}
    # the whole series says the same, point by point
    from webapp.runs.presenters import score_series
    assert score_series(run)["incumbent_J"] == [0.61, 0.61, 0.61, 0.55]

    failed = Judgement(iteration_n=4, workflow_hash="f" * 64, ok=False, error="no answer", checks=[],
                       validation={"ok": False, "error": "no predictions"})
    Event.objects.create(run=run, seq=10, source="s", ts=1.0, kind="judgement", payload=failed.to_payload())
    point = live.event_message(run.pk, 10, engine_event(failed, agent="judge"))["data"]["point"]
    assert point["J"] is None and point["validation"] is None and point["incumbent_J"] == 0.55


def model_call(**fields) -> ModelCall:
    return ModelCall(**{"role": "coder", "purpose": "write the solution", "model": "offline", "provider": "offline",
                        "messages": [{"role": "user", "content": "p" * 4000}], "response": "r" * 4000,
                        "prompt_tokens": 900, "completion_tokens": 100, "cost_usd": 0.0, "duration_s": 0.2,
                        "cached": False, "request_key": "k" * 64, "budget_used": USAGE,
                        "budget_remaining": {"tokens": 7000}, **fields})


def test_model_call_carries_the_budget_used_and_not_the_conversation():
    data = live.event_message(5, 1, engine_event(model_call(purpose="x" * 500)))["data"]
    assert data == {"role": "coder", "purpose": "x" * live.SHORT, "model": "offline", "cached": False,
                    "tokens": 1000, "used": USAGE}


def test_other_kinds_carry_their_small_fields_with_long_strings_cut():
    payload = Handoff(source="coder", target="reviewer", artifact="report", contract="c" * 1000, ok=False,
                      errors=["missing key: rmse"], value_preview={"rows": ["v" * 100] * 50})
    data = live.event_message(5, 1, engine_event(payload))["data"]
    assert data["contract"] == "c" * live.SHORT + "…"
    assert data["errors"] == ["missing key: rmse"] and data["ok"] is False and data["target"] == "reviewer"
    assert "value_preview" not in data   # too big to go live; the trace viewer has it


def test_programs_and_outputs_do_not_go_live():
    code = ToolCall(tool="sandbox.python", executor="local", purpose="fit", code="import numpy\n" * 400, limits={})
    assert "code" not in live.event_message(5, 1, engine_event(code))["data"]
    ran = CodeExecution(purpose="fit", status="ok", exit_code=0, stdout_tail="o" * 2000, stderr_tail="",
                        duration_s=1.0, files={}, violations=[], executor="local", stdout="o" * 20000, stderr="e",
                        workdir="/tmp/w")
    data = live.event_message(5, 2, engine_event(ran))["data"]
    assert data["status"] == "ok" and not {"stdout", "stderr", "stdout_tail"} & set(data)


@pytest.mark.django_db(transaction=True)
def test_a_stored_row_its_model_refuses_is_listed_without_data(run):
    common = dict(run=run, source="probe-3", source_seq=4, ts=1700000001.0, kind="model_call", agent="coder",
                  iteration=2)
    # Written before payloads were typed: a field the model_call model does not know.
    old = Event.objects.create(seq=7, payload={"bench": "steady", "i": 0, "role": "coder"}, **common)
    assert live.stored_message(old) == {"kind": "model_call", "seq": 7, "agent": "coder", "iteration": 2,
                                        "source": "probe-3", "ts": 1700000001.0, "data": {}}
    new = Event.objects.create(seq=8, payload=model_call().to_payload(), **common)
    assert live.stored_message(new)["data"]["used"] == USAGE


# --- the consumer: studio messages rendered per viewer --------------------------------------------
@pytest.fixture
def channel_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def watcher(run: Run, cookie: bytes) -> WebsocketCommunicator:
    """A browser on the run page: the whole ASGI application, with a logged-in session."""
    from webapp.asgi import application

    return WebsocketCommunicator(application, f"/ws/runs/{run.pk}/",
                                 headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")])


async def push(monkeypatch, run: Run, message: dict) -> None:
    """bridge.broadcast as the worker calls it, its loop being this test's (the in-memory layer's
    queues live on one loop); in a thread, since it waits for its send to finish."""
    import asyncio

    monkeypatch.setattr(bridge._LOOP, "get", lambda loop=asyncio.get_running_loop(): loop)
    # Pushes made while setting up (no layer to reach then) must not hold this one back.
    monkeypatch.setattr(bridge._LOOP, "quiet_until", 0.0)
    await sync_to_async(bridge.broadcast, thread_sensitive=False)(run, message)


@pytest.mark.django_db(transaction=True)
def test_each_viewer_gets_the_fragments_rendered_for_their_role(channel_layer, run, monkeypatch):
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    reviewer, viewer = users.create_user("rev", password="pw-rev-1"), users.create_user("vie", password="pw-vie-1")
    add_member(run.task.project, reviewer, "reviewer")
    membership = add_member(run.task.project, viewer, "viewer")
    row = proposed_mutation(run)
    cookies = session_cookie(reviewer), session_cookie(viewer)

    async def scenario() -> tuple[dict, dict, dict, dict]:
        as_reviewer, as_viewer = (watcher(run, cookie) for cookie in cookies)
        assert (await as_reviewer.connect(timeout=10))[0] and (await as_viewer.connect(timeout=10))[0]
        await push(monkeypatch, run, live.mutation_message("mutation_pending", row.pk, iteration=1))
        pending = await as_reviewer.receive_json_from(timeout=10), await as_viewer.receive_json_from(timeout=10)

        await sync_to_async(Membership.objects.filter(pk=membership.pk).delete)()
        await push(monkeypatch, run, live.mutation_message("mutation_decided", row.pk, status="vetoed"))
        decided = await as_reviewer.receive_json_from(timeout=10)
        closed = await as_viewer.receive_output(timeout=10)
        await as_reviewer.disconnect()
        await as_viewer.disconnect()
        return *pending, decided, closed

    for_reviewer, for_viewer, decided, closed = async_to_sync(scenario)()

    name = f"mutation:{row.pk}"
    for msg in (for_reviewer, for_viewer):
        assert msg["kind"] == "mutation_pending" and msg["mutation"] == row.pk and msg["iteration"] == 1
        assert set(msg["html"]) == {name, "header"}
    assert "Approve" in for_reviewer["html"][name] and "Waiting for a reviewer" not in for_reviewer["html"][name]
    assert "Waiting for a reviewer" in for_viewer["html"][name] and "Approve" not in for_viewer["html"][name]
    # Removed from the project meanwhile: the next fragment message closes the viewer's socket.
    assert closed == {"type": "websocket.close", "code": 4403}
    assert decided["kind"] == "mutation_decided" and name in decided["html"]
