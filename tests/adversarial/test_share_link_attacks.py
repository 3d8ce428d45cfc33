"""Issue 13.4, attacked: someone holding (or forging) a share link tries to see more than the one
run it shares, or to change anything. A tampered signature, a link made for another run, a
revoked link reused and an expired one open nothing; paths that climb out of the link reach no
other run; and a WebSocket opened through a link has every client message (pause, cancel,
approve, edit, garbage) refused while the run it watches stays exactly as it was, and is closed
the moment the link is revoked or has expired."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core import signing
from django.test import Client
from django.utils import timezone

from engine.synthesis import team_workflow
from engine.task import load_task
from tests.studio_harness import add_member, proposed_mutation
from webapp.runs import consumers, sharing
from webapp.runs.bridge import record_version
from webapp.runs.models import Event, Mutation, Run, RunStatus, ShareLink
from webapp.runs.routing import websocket_urlpatterns
from webapp.tasks.models import Task
from webapp.teams.models import AuditEntry, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_redis(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def _run(examples, tmp_path, name: str) -> Run:
    folder = examples / "diabetes-progression"
    spec = load_task(folder)
    task = Task.objects.create(project=Project.objects.create(name=name), name=spec.name, folder=str(folder))
    run = Run.objects.create(task=task, status=RunStatus.RUNNING, lease="L", search="mimosa",
                             heartbeat=timezone.now(), run_dir=str(tmp_path / name))
    record_version(run, team_workflow(spec).to_dict(), "engine", "initial", 0)
    Event.objects.create(run=run, seq=1, kind="model_call", agent="coder", ts=1.0, payload={"response": f"{name} secret"})
    return run


@pytest.fixture
def two(examples, tmp_path):
    """Two projects' runs, each with its own owner; a live link to the first."""
    owner = get_user_model().objects.create_user("olive")
    shared, other = _run(examples, tmp_path, "Shared"), _run(examples, tmp_path, "Private")
    add_member(shared.task.project, owner, "owner")
    add_member(other.task.project, owner, "owner")
    link = sharing.create(shared, owner, "1d")
    return shared, other, link, owner


def test_a_tampered_signature_opens_nothing(two):
    shared, _, link, _ = two
    signed = sharing.sign(link)
    token_part, signature = signed.rsplit(":", 1)
    for forged in (signed[:-1] + ("A" if signed[-1] != "A" else "B"), token_part + ":" + "x" * len(signature),
                   signing.dumps({"t": link.token, "r": shared.pk}, salt="another purpose"), "nonsense"):
        response = Client().get(f"/share/{forged}/")
        assert response.status_code == 404, forged
        assert b"not a valid share link" in response.content
    # a correct signature over a made-up token
    made_up = signing.dumps({"t": "guessed", "r": shared.pk}, salt=sharing.SALT)
    assert Client().get(f"/share/{made_up}/").status_code == 404


def test_a_link_reaches_its_own_run_only(two):
    shared, other, link, _ = two
    # the same token signed with another run's id: no such link
    swapped = signing.dumps({"t": link.token, "r": other.pk}, salt=sharing.SALT)
    assert Client().get(f"/share/{swapped}/").status_code == 404
    prefix = f"/share/{sharing.sign(link)}/"
    for rest in (f"../../runs/{other.pk}/events/1?field=response", f"..%2F..%2Fruns%2F{other.pk}%2Fgraph.json",
                 f"/runs/{other.pk}/graph.json", "events/1/../../../runs/%d/queue" % other.pk):
        response = Client().get(prefix + rest)
        assert response.status_code == 404, rest
        assert b"Private secret" not in response.content
    assert b"Shared secret" in Client().get(prefix + "events/1", {"field": "response"}).content
    # the other run's pages need an account, link or no link
    assert Client().get(f"/runs/{other.pk}/events/1").status_code == 302


def test_a_revoked_link_reused_opens_nothing(two):
    shared, _, link, owner = two
    path = f"/share/{sharing.sign(link)}/"
    assert Client().get(path).status_code == 200
    assert sharing.revoke(link, owner)
    assert not sharing.revoke(link, owner)  # revoked once, audited once
    assert AuditEntry.objects.filter(action="share_revoked").count() == 1
    for rest in ("", "graph.json", "trace", "events/1"):
        assert Client().get(path + rest).status_code == 410
    # un-expiring it does not bring it back
    ShareLink.objects.filter(pk=link.pk).update(expires=timezone.now() + timedelta(days=30))
    assert Client().get(path).status_code == 410


async def _connect(path: str):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = AnonymousUser()
    return communicator, await communicator.connect()


def _state(run: Run, mutation: Mutation) -> tuple:
    run.refresh_from_db()
    mutation.refresh_from_db()
    return run.status, run.lease, mutation.status, run.versions.count()


def test_a_share_websocket_is_read_only_and_closes_when_revoked(two, monkeypatch):
    shared, other, link, owner = two
    mutation = proposed_mutation(shared)
    signed = sharing.sign(link)
    before = _state(shared, mutation)

    async def attempt():
        # another run's stream, a tampered link and no link at all are refused
        for path in (f"/ws/runs/{other.pk}/?share={signed}", f"/ws/runs/{shared.pk}/?share={signed[:-2]}xx",
                     f"/ws/runs/{shared.pk}/"):
            communicator, (connected, code) = await _connect(path)
            assert not connected and code in (4401, 4403), path
        communicator, (connected, _) = await _connect(f"/ws/runs/{shared.pk}/?share={signed}")
        assert connected
        for message in ({"type": "control", "action": "cancel"}, {"type": "control", "action": "pause"},
                        {"kind": "mutation_decide", "mutation": mutation.pk, "action": "approve"},
                        {"kind": "edit", "procedure": "anything"}):
            await communicator.send_json_to(message)
            assert await communicator.receive_json_from() == {"type": "refused", "error": "a share link is read-only"}
        await communicator.send_to(text_data="not json at all {")
        assert (await communicator.receive_json_from())["type"] == "refused"
        # live messages still arrive; a pushed fragment is rendered for a viewer: no controls
        await get_channel_layer().group_send(shared.group, {"type": "run.message", "text": '{"kind": "status"}',
                                                            "fragments": ["header"]})
        got = await communicator.receive_json_from()
        assert got["kind"] == "status" and "control/pause" not in got["html"]["header"]
        # revoked: closed at once
        await database_sync_to_async(sharing.revoke)(link, owner)
        assert (await communicator.receive_output(timeout=2))["code"] == 4410
        _, (connected, _) = await _connect(f"/ws/runs/{shared.pk}/?share={signed}")
        assert not connected

    async_to_sync(attempt)()
    assert _state(shared, mutation) == before


def test_a_share_websocket_closes_at_the_first_message_after_the_link_expired(two, monkeypatch):
    shared, _, link, _ = two
    monkeypatch.setattr(consumers, "SHARE_RECHECK_S", 0.0)

    async def attempt():
        communicator, (connected, _) = await _connect(f"/ws/runs/{shared.pk}/?share={sharing.sign(link)}")
        assert connected
        await get_channel_layer().group_send(shared.group, {"type": "run.message", "text": '{"kind": "a"}'})
        assert await communicator.receive_json_from() == {"kind": "a"}
        await database_sync_to_async(ShareLink.objects.filter(pk=link.pk).update)(
            expires=timezone.now() - timedelta(seconds=1))
        await get_channel_layer().group_send(shared.group, {"type": "run.message", "text": '{"kind": "b"}'})
        assert (await communicator.receive_output(timeout=2))["code"] == 4410

    async_to_sync(attempt)()


def test_a_share_websocket_asking_for_missed_events_after_the_link_expired_is_closed(two, monkeypatch):
    """A page catching up asks its socket for a gap's events; through a link that has expired,
    the answer is the closed socket, not the events."""
    shared, _, link, _ = two
    monkeypatch.setattr(consumers, "SHARE_RECHECK_S", 0.0)

    async def attempt():
        communicator, (connected, _) = await _connect(f"/ws/runs/{shared.pk}/?share={sharing.sign(link)}")
        assert connected
        await communicator.send_json_to({"type": "missed", "after": 0, "until": 1})
        assert (await communicator.receive_json_from())["kind"] == "missed"  # while the link holds
        await database_sync_to_async(ShareLink.objects.filter(pk=link.pk).update)(
            expires=timezone.now() - timedelta(seconds=1))
        await communicator.send_json_to({"type": "missed", "after": 0, "until": 1})
        assert (await communicator.receive_output(timeout=2))["code"] == 4410

    async_to_sync(attempt)()
