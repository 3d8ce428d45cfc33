"""Several web processes on one listening socket, as ``manage.py studio`` starts them on a machine
with the cores (webapp/runs/management/commands/studio.py), against the session's real Redis and
test database: every socket on a run gets every message, and however many sockets watch, the
run's Redis group holds one member per process, not one per socket (webapp/runs/fanout.py)."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from django.test import Client

from tests.studio_harness import add_member, running_run, wait_for
from webapp.runs import bridge, live
from webapp.runs.management.commands.studio import web_listener, web_servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SOCKETS = 12


@pytest.fixture
def two_web_processes(studio):
    listener = web_listener("127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    children = [c.start() for c in web_servers(studio.env, listener, 2, studio.logs)]

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url + "/login/", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    try:
        wait_for(answers, 60, what=f"the two web processes (see {studio.logs})")
        yield url, children
    finally:
        for child in children:  # nothing of theirs to keep: no need to wait for a graceful stop
            child.kill_group()
            child.proc.wait(10)
        listener.close()


def test_sockets_on_two_web_processes_get_every_message_through_one_subscription_each(two_web_processes, demo_user,
                                                                                     light_task, monkeypatch):
    import aiohttp
    from channels.layers import get_channel_layer

    url, children = two_web_processes
    run = running_run(light_task, "Two web processes")
    add_member(run.task.project, demo_user, "viewer")
    client = Client()
    client.force_login(demo_user)
    headers = {"Cookie": f"sessionid={client.cookies['sessionid'].value}", "Origin": url}
    layer = get_channel_layer()
    monkeypatch.setattr(bridge._LOOP, "quiet_until", 0.0)

    async def members() -> int:
        return await layer.connection(layer.consistent_hash(run.group)).zcard(layer._group_key(run.group))

    async def watch() -> tuple[list[list[int]], int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            sockets = [await http.ws_connect(url.replace("http", "ws") + f"/ws/runs/{run.pk}/", headers=headers)
                       for _ in range(SOCKETS)]
            in_group = await members()
            for n in range(1, 6):
                await asyncio.to_thread(bridge.broadcast, run, live.event_message(run.pk, n, _agent_started(n)))
            got = []
            for ws in sockets:
                seqs = []
                while len(seqs) < 5:
                    frame = json.loads((await ws.receive(timeout=10)).data)
                    seqs += [m["seq"] for m in (frame if isinstance(frame, list) else [frame]) if m.get("kind") != "sync"]
                got.append(seqs)
                await ws.close()
            return got, in_group

    got, in_group = asyncio.run(watch())
    assert got == [[1, 2, 3, 4, 5]] * SOCKETS
    assert 1 <= in_group <= len(children)  # one subscription per process that has sockets on the run
    assert all(child.alive() for child in children)


def _agent_started(n: int):
    from engine.protocol.events import AgentStarted
    from engine.trace import Event as EngineEvent

    return EngineEvent("probe-1", n, 1700000000.0 + n, "agent_started", f"agent{n}", 1,
                       AgentStarted(roles=["coder"], inputs=[]).to_payload())
