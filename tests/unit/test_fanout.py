"""Live fan-out (webapp/runs/fanout.py) and catching up (webapp/runs/live_views.py): one
subscription per run per web process however many watch, bursts in fewer frames and in order,
fragments rendered once per role, studio messages numbered, the sync that reveals a lost last
message, and the missed events fetched again exactly as they were sent. The whole ASGI
application on the in-memory channel layer (no Redis, no Daphne)."""
from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from engine.protocol.events import AgentFinished, AgentStarted, Judgement, ModelCall
from engine.trace import Event as EngineEvent
from tests.studio_harness import add_member, proposed_mutation, running_run
from webapp.runs import bridge, fanout, fragments, live
from webapp.runs.models import Run
from webapp.teams.models import Role

pytestmark = pytest.mark.django_db(transaction=True)
USAGE = {"calls": 1, "prompt_tokens": 90, "completion_tokens": 10, "tokens": 100, "cost_usd": 0.0}


@pytest.fixture(autouse=True)
def channel_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def run(examples) -> Run:
    return running_run(examples / "diabetes-progression", "fan-out")


def person(run: Run, name: str, role: str):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(name, password=f"pw-{name}-1")
    add_member(run.task.project, user, role)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return user, client


def watcher(run: Run, client: Client) -> WebsocketCommunicator:
    from webapp.asgi import application

    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(application, f"/ws/runs/{run.pk}/",
                                 headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")])


async def push(monkeypatch, run: Run, message: dict) -> None:
    """bridge.broadcast as the worker calls it, on this test's loop (the in-memory layer's)."""
    monkeypatch.setattr(bridge._LOOP, "get", lambda loop=asyncio.get_running_loop(): loop)
    monkeypatch.setattr(bridge._LOOP, "quiet_until", 0.0)
    await sync_to_async(bridge.broadcast, thread_sensitive=False)(run, message)


async def messages_of(communicator: WebsocketCommunicator, count: int) -> tuple[list[dict], int]:
    """The next ``count`` messages and how many frames carried them."""
    got, frames = [], 0
    while len(got) < count:
        frame = json.loads(await communicator.receive_from(timeout=10))
        frames += 1
        got += frame if isinstance(frame, list) else [frame]
    return got, frames


def model_call(n: int) -> EngineEvent:
    payload = ModelCall(role="coder", purpose=f"step {n}", model="offline", provider="offline",
                        messages=[{"role": "user", "content": "p" * 3000}], response="r", prompt_tokens=90,
                        completion_tokens=10, cost_usd=0.0, duration_s=0.1, cached=False, request_key="k" * 64,
                        budget_used={**USAGE, "tokens": 100 * n}, budget_remaining={"tokens": 10_000})
    return EngineEvent("probe-1", n, 1700000000.0 + n, "model_call", "coder", 1, payload.to_payload())


def test_many_viewers_of_a_run_are_one_subscription_and_each_gets_every_message(run, monkeypatch):
    _, client = person(run, "vi", "viewer")

    async def scenario():
        sockets = [watcher(run, client) for _ in range(5)]
        for s in sockets:
            assert (await s.connect(timeout=10))[0]
        members = dict(get_channel_layer().groups.get(run.group, {}))
        await push(monkeypatch, run, {"kind": "agent_started", "seq": 1, "agent": "coder", "data": {"state": "running"}})
        got = [await s.receive_json_from(timeout=10) for s in sockets]
        for s in sockets:
            await s.disconnect()
        return len(members), got, dict(get_channel_layer().groups.get(run.group, {})), dict(fanout.feeds())

    members, got, left, feeds = async_to_sync(scenario)()
    assert members == 1  # one channel in the run's group for five sockets
    assert [m["seq"] for m in got] == [1] * 5 and all(m["data"] == {"state": "running"} for m in got)
    assert left == {} and feeds == {}  # the last one out unsubscribed the process


def test_a_burst_comes_in_fewer_frames_in_its_order(run, monkeypatch):
    _, client = person(run, "vi", "viewer")
    texts = [json.dumps({"kind": "agent_started", "seq": n, "agent": f"a{n}", "data": {}}) for n in range(1, 41)]

    async def scenario():
        a, b = watcher(run, client), watcher(run, client)
        assert (await a.connect(timeout=10))[0] and (await b.connect(timeout=10))[0]
        layer = get_channel_layer()
        for text in texts:  # as fast as the layer takes them
            await layer.group_send(run.group, {"type": "run.message", "text": text, "fragments": []})
        out = await messages_of(a, 40), await messages_of(b, 40)
        await a.disconnect()
        await b.disconnect()
        return out

    for messages, frames in async_to_sync(scenario)():
        assert [m["seq"] for m in messages] == list(range(1, 41))
        assert frames < 40 / 2, frames  # arrays of messages, not a frame each


def test_fragments_are_rendered_once_per_role_whatever_the_number_of_viewers(run, monkeypatch):
    _, as_viewer = person(run, "vi", "viewer")
    _, as_reviewer = person(run, "re", "reviewer")
    row = proposed_mutation(run)
    rendered = []
    real = fragments.render
    monkeypatch.setattr(fragments, "render", lambda name, r, role: rendered.append((name, role)) or real(name, r, role))

    async def scenario():
        sockets = [watcher(run, as_viewer) for _ in range(4)] + [watcher(run, as_reviewer) for _ in range(2)]
        for s in sockets:
            assert (await s.connect(timeout=10))[0]
        await push(monkeypatch, run, live.mutation_message("mutation_pending", row.pk, iteration=1))
        got = [await s.receive_json_from(timeout=10) for s in sockets]
        for s in sockets:
            await s.disconnect()
        return got

    got = async_to_sync(scenario)()
    name = f"mutation:{row.pk}"
    assert sorted(rendered) == sorted((n, role) for n in (name, "header") for role in (Role.VIEWER, Role.REVIEWER))
    assert all("Approve" not in m["html"][name] for m in got[:4]) and all("Approve" in m["html"][name] for m in got[4:])


def test_studio_messages_are_numbered_one_after_another_and_events_keep_their_seq(run, monkeypatch):
    _, client = person(run, "vi", "viewer")

    async def scenario():
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        await push(monkeypatch, run, live.status_message("paused"))
        await push(monkeypatch, run, live.event_message(run.pk, 1, model_call(1)))
        await push(monkeypatch, run, live.version_message(2, "user:vi"))
        await push(monkeypatch, run, {"kind": "training_progress", "seq": None, "data": {}})
        got, _ = await messages_of(s, 4)
        await s.disconnect()
        return got

    status, event, version, training = async_to_sync(scenario)()
    assert "sseq" not in event and event["seq"] == 1
    assert version["sseq"] == status["sseq"] + 1 and training["sseq"] == version["sseq"] + 1


def test_the_sync_tells_a_page_the_run_as_it_was_a_tick_before(run, monkeypatch):
    """A page whose last message was lost learns it from the sync; the marks it carries are a tick
    old, so that a message still on its way (frames keep their order) is not taken for lost."""
    _, client = person(run, "vi", "viewer")
    monkeypatch.setattr(fanout, "SYNC_S", 0.1)
    Run.objects.filter(pk=run.pk).update(last_seq=7)

    async def scenario():
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        first = await s.receive_json_from(timeout=5)
        await sync_to_async(Run.objects.filter(pk=run.pk).update)(last_seq=9)
        later = [await s.receive_json_from(timeout=5) for _ in range(3)]
        await s.disconnect()
        return first, later

    first, later = async_to_sync(scenario)()
    assert first["kind"] == "sync" and first["seq"] == 7 and isinstance(first["sseq"], int)
    assert all(m["kind"] == "sync" for m in later) and later[-1]["seq"] == 9


def test_no_sync_goes_while_messages_come_only_once_the_run_is_quiet(run, monkeypatch):
    """While messages come, a page sees a gap in their numbers itself; a sync then could only
    send every page of a busy server to fetch what is on its way."""
    _, client = person(run, "vi", "viewer")
    monkeypatch.setattr(fanout, "SYNC_S", 0.1)

    async def scenario():
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        layer = get_channel_layer()
        for n in range(1, 21):  # 0.6 s of messages, six ticks
            await layer.group_send(run.group, {"type": "run.message", "fragments": [],
                                               "text": json.dumps({"kind": "model_call", "seq": n})})
            await asyncio.sleep(0.03)
        busy, _ = await messages_of(s, 20)
        quiet = await s.receive_json_from(timeout=5)
        await s.disconnect()
        return busy, quiet

    busy, quiet = async_to_sync(scenario)()
    assert [m["kind"] for m in busy] == ["model_call"] * 20
    assert quiet["kind"] == "sync"


def test_a_feed_that_lost_the_layer_joins_again_and_tells_pages_to_catch_up(run, monkeypatch):
    _, client = person(run, "vi", "viewer")
    monkeypatch.setattr(fanout, "RETRY_S", 0.05)

    async def scenario():
        layer = get_channel_layer()
        real, failed = layer.receive, []

        async def flaky(channel):
            if not failed:
                failed.append(channel)
                layer.groups.clear()  # what a restarted Redis knows of the run's group
                raise ConnectionError("redis went away")
            return await real(channel)

        monkeypatch.setattr(layer, "receive", flaky)
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        resync = await s.receive_json_from(timeout=5)
        await push(monkeypatch, run, live.status_message("running"))
        after = await s.receive_json_from(timeout=5)
        await s.disconnect()
        return resync, after

    resync, after = async_to_sync(scenario)()
    assert resync["kind"] == "sync" and resync["resync"] is True
    assert after["kind"] == "status"  # subscribed again


def test_a_page_fetches_exactly_the_events_it_missed_as_they_were_sent(run, monkeypatch):
    sent = []
    monkeypatch.setattr(bridge, "broadcast", lambda r, message: sent.append(json.loads(json.dumps(message, default=str))))
    sink = bridge.RunEventSink(run, "L")
    events = [model_call(1), EngineEvent("probe-1", 2, 1700000002.0, "agent_started", "coder", 1,
                                         AgentStarted(roles=["coder"], inputs=["task"]).to_payload()),
              EngineEvent("probe-1", 3, 1700000003.0, "agent_finished", "coder", 1,
                          AgentFinished(status="SUCCESS", message="ok", outputs={}).to_payload()),
              EngineEvent("probe-1", 4, 1700000004.0, "judgement", "judge", 1,
                          Judgement(iteration_n=1, workflow_hash="h" * 64, ok=True, J=0.7, checks=[]).to_payload()),
              model_call(5)]
    for event in events:
        sink.emit(event)
    live_sent = {m["seq"]: m for m in sent if isinstance(m.get("seq"), int)}
    _, client = person(run, "vi", "viewer")

    answer = client.get(f"/runs/{run.pk}/events.json?after=1&until=4").json()
    assert [m["seq"] for m in answer["messages"]] == [2, 3, 4]
    assert answer["messages"] == [live_sent[n] for n in (2, 3, 4)]  # the same messages, not a summary
    assert answer["last"] == 5 and answer["more"] is False and isinstance(answer["sseq"], int)
    assert answer["messages"][2]["data"]["point"]["index"] == 0  # the series' first point

    page = client.get(f"/runs/{run.pk}/events.json?after=0&limit=2").json()
    assert [m["seq"] for m in page["messages"]] == [1, 2] and page["more"] is True
    for bad in ("after=-1", "after=x", "after=3&until=2", "limit=0", "limit=501"):
        response = client.get(f"/runs/{run.pk}/events.json?{bad}")
        assert response.status_code == 400 and "error" in response.json()
    outsider = Client(HTTP_HOST="localhost")
    from django.contrib.auth import get_user_model

    outsider.force_login(get_user_model().objects.create_user("out", password="pw-out-1"))
    assert outsider.get(f"/runs/{run.pk}/events.json").status_code == 404  # like a run that does not exist


def test_a_studio_message_that_could_not_be_sent_leaves_a_gap_in_the_numbers(run, monkeypatch):
    """Redis away for a moment: pushes are skipped for a while after a failed one. A studio
    message skipped then had no number; the next one counts it, so that a page sees a gap and
    re-reads what it changed instead of showing it stale."""
    _, client = person(run, "vi", "viewer")

    async def scenario():
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        await push(monkeypatch, run, live.status_message("running"))
        first = await s.receive_json_from(timeout=10)
        layer = get_channel_layer()
        real = layer.group_send

        async def away(group, message):
            raise ConnectionError("redis went away")

        monkeypatch.setattr(layer, "group_send", away)
        await push(monkeypatch, run, live.event_message(run.pk, 1, model_call(1)))  # fails: quiet for a while
        monkeypatch.setattr(layer, "group_send", real)
        await sync_to_async(bridge.broadcast, thread_sensitive=False)(run, live.status_message("paused"))  # skipped
        await push(monkeypatch, run, live.status_message("running"))
        second = await s.receive_json_from(timeout=10)
        await s.disconnect()
        return first, second

    first, second = async_to_sync(scenario)()
    assert second["status"] == "running" and second["sseq"] == first["sseq"] + 2  # the skipped one's number


def test_a_page_asks_its_socket_for_a_small_gap_and_the_process_answers_from_memory(run, monkeypatch):
    """No request and no query for what the web process still has; null when it has not got it
    all (the page then asks events.json)."""
    _, client = person(run, "vi", "viewer")

    async def scenario():
        s = watcher(run, client)
        assert (await s.connect(timeout=10))[0]
        layer = get_channel_layer()
        for n in range(1, 6):
            await layer.group_send(run.group, {"type": "run.message", "fragments": [], "seq": n,
                                               "text": json.dumps({"kind": "agent_started", "seq": n})})
        await messages_of(s, 5)
        answers = []
        for ask in ({"type": "missed", "after": 1, "until": 3}, {"type": "missed", "after": 3, "until": 9},
                    {"type": "missed", "after": "1", "until": 3}):
            await s.send_json_to(ask)
            answers.append(await s.receive_json_from(timeout=5))
        await s.disconnect()
        return answers

    covered, beyond, bad = async_to_sync(scenario)()
    assert covered == {"kind": "missed", "after": 1, "until": 3,
                       "messages": [{"kind": "agent_started", "seq": 2}, {"kind": "agent_started", "seq": 3}]}
    assert beyond["messages"] is None  # 6 to 9 never came this way
    assert bad["type"] == "refused"
