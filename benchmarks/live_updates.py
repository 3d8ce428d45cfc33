"""Live updates: latency from an engine event to a watching browser's WebSocket, and throughput.

Starts the studio's real live path in a temporary var dir: the embedded Redis (the channel layer)
and the Daphne web process(es) as ``manage.py studio`` starts them (--web; by default as many as it
would on this machine), no Celery worker. A separate emitter process stands in for the worker:
it sends engine events through the worker's own sink (webapp.runs.bridge.RunEventSink: an Event
row and a Run update in SQLite, then one group_send to ``run-<pk>`` through channels_redis, read
once per web process and fanned out there: webapp/runs/fanout.py). N aiohttp WebSocket clients,
one asyncio process, logged in with a real session cookie, watch the run at /ws/runs/<pk>/. Every
event carries its send time (time.time(), taken just before sink.emit; same machine) and each
client notes its arrival time: latency = arrival - send. The marks (phase, event number, send
time) ride in the model call's ``purpose``, the one free-text field its live message keeps
(``"bench " + JSON``): the protocol refuses fields it does not know. A frame is one message or
an array of them (what the web process coalesced).

For each client count, two phases of --events events each:
- steady: events at --rate per second; latency p50/p95/p99/max over every (event, client) pair;
- burst: events as fast as the sink can write them; events/s = events delivered to all N
  clients / (last arrival - first send), and the latency under that load.
Each client keeps the page's state as static/js/run.js does (``Page``): events applied in seq
order, a gap or a sync that says the run is further on repaired from /runs/<pk>/events.json.
Lost = event messages that never reached a client live; repaired = events clients fetched after a
gap; diverged = clients whose state differs from the run's once they caught up (must be 0);
--drop P makes each client drop that fraction of event messages on purpose, to exercise the
repair. conn err counts WebSocket handshakes the server refused (then retried); closed counts
sockets the server closed while they were being measured.

Then an annotation phase: --viewers (default 10) more clients, signed in as a viewer, watch the
run while an annotator, signed in as another person, annotates its events through the studio's own
view (POST /runs/<pk>/annotations with her session cookie and CSRF token, as the page's htmx form
does: annotating.annotate writes the row and its audit entry, then bridge.broadcast). One
annotation at a time, --annotations of them (after 3 unmeasured); latency = arrival of the
``kind == "annotation"`` message at a viewer - time.time() just before the POST.

The second table says where the time goes: the sink's database part (Event row, Run update,
control check) and its group_send, the hop from group_send to the client, and each process's
CPU during the burst; the last line times group_send alone, through async_to_sync as the sink
calls it and awaited on one event loop.

    python benchmarks/live_updates.py [--clients 1 10 100 300] [--events 200] [--rate 20] [--quick]
                                      [--viewers 10] [--annotations 50] [--drop 0.02] [--web N]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script

from tests.studio_harness import use_studio_environment  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PROMPT = "You are the coder of a scientific workflow. " * 40   # ~1.8 kB, like a real prompt
RESPONSE = "def solve(data):\n    return fit(data)\n" * 25      # ~1 kB, like a real answer
BENCH = "bench "   # a model_call's purpose that starts so carries this benchmark's marks


def bench_mark(message: dict) -> dict | None:
    """{phase, i, sent} of a benchmark event's live message; None for any other message."""
    purpose = (message.get("data") or {}).get("purpose") or ""
    if message.get("kind") != "model_call" or not purpose.startswith(BENCH):
        return None
    return json.loads(purpose[len(BENCH):])


def cpu_seconds(pid: int | list[int]) -> float:
    """User + system CPU time of a process (or of several, summed) so far (Linux /proc)."""
    if isinstance(pid, list):
        return sum(cpu_seconds(p) for p in pid)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile; nan when there is nothing to rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


# --- the emitter: a stand-in for the Celery worker, in its own process -------------------------

def emitter_main(conn, run_pk: int, lease: str) -> None:
    import django

    django.setup()
    from engine.trace import Event as EngineEvent
    from webapp.runs import bridge
    from webapp.runs.models import Run

    sent_s: list[float] = []
    sent_at: list[float] = []
    original = bridge.broadcast

    def timed_broadcast(run, message):  # the sink calls the module's broadcast: time that part
        sent_at.append(time.time())
        t = time.perf_counter()
        original(run, message)
        sent_s.append(time.perf_counter() - t)

    bridge.broadcast = timed_broadcast
    sink = bridge.RunEventSink(Run.objects.get(pk=run_pk), lease)
    source_seq = 0
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd[0] == "stop":
            break
        if cmd[0] == "diag":
            conn.send(group_send_costs(cmd[1]))
            continue
        _, phase, n, rate = cmd
        emit_s: list[float] = []
        first_ts = None
        sent_s.clear()
        sent_at.clear()
        start = time.perf_counter()
        for i in range(n):
            if rate:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            source_seq += 1
            used = {"calls": source_seq, "prompt_tokens": 900 * source_seq, "completion_tokens": 100 * source_seq,
                    "tokens": 1000 * source_seq, "cost_usd": 0.0}
            t0 = time.perf_counter()
            now = time.time()
            first_ts = first_ts or now
            sink.emit(EngineEvent(
                "bench-probe", source_seq, now, "model_call", "coder", 1,
                {"role": "coder", "purpose": BENCH + json.dumps({"phase": phase, "i": i, "sent": now}),
                 "model": "offline", "provider": "offline",
                 "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": PROMPT}],
                 "response": RESPONSE, "prompt_tokens": 900, "completion_tokens": 250, "cost_usd": 0.0,
                 "duration_s": 0.01, "cached": False, "request_key": f"{source_seq:064x}",
                 "budget_used": used, "budget_remaining": {"tokens": 2_000_000 - used["tokens"]}}))
            emit_s.append(time.perf_counter() - t0)
        wall = time.perf_counter() - start
        conn.send({"emit_s": emit_s, "send_s": list(sent_s), "sent_at": list(sent_at), "wall_s": wall,
                   "first_ts": first_ts})
    conn.send("stopped")


def group_send_costs(n: int) -> dict:
    """ms per group_send to a one-member group: as the sink does it (async_to_sync, so a fresh event
    loop, thread and Redis connection per call) and awaited n times on one event loop."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    group = "bench-diag"
    async_to_sync(layer.group_add)(group, "specific.benchdiag!x")  # nobody reads it; expires in 30 s
    message = {"type": "run.message", "fragments": [],
               "text": json.dumps({"kind": "model_call", "seq": 0, "data": {"purpose": BENCH + "{}"}})}

    async def awaited():
        for _ in range(n):
            await layer.group_send(group, message)

    async def nothing():
        pass

    t = time.perf_counter()
    for _ in range(n):
        async_to_sync(layer.group_send)(group, message)
    per_call = (time.perf_counter() - t) / n
    t = time.perf_counter()
    async_to_sync(awaited)()
    one_loop = (time.perf_counter() - t) / n
    t = time.perf_counter()
    for _ in range(n):
        async_to_sync(nothing)()
    bare = (time.perf_counter() - t) / n
    async_to_sync(layer.group_discard)(group, "specific.benchdiag!x")
    return {"async_to_sync_ms": 1000 * per_call, "one_loop_ms": 1000 * one_loop, "bare_ms": 1000 * bare}


# --- the clients -------------------------------------------------------------------------------

class Page:
    """One client's view of the run, kept the way static/js/run.js keeps it: events applied in seq
    order; a gap (a message lost, or dropped here on purpose with --drop) or a sync saying the run
    is further on is repaired from /runs/<pk>/events.json before what came meanwhile is applied.
    Its state: the last seq applied and the budget shown (the last model call's tokens)."""

    def __init__(self, watchers: "Watchers", seq: int):
        self.w = watchers
        self.seq = seq
        self.tokens = None
        self.held: list[dict] = []
        self.catching = False
        self.repaired = 0
        self.ws = None
        self.asked: asyncio.Future | None = None

    def receive(self, message: dict, arrived: float) -> None:
        kind = message.get("kind")
        if kind == "sync":
            self.note_sync(message)
            return
        if kind == "annotation":
            self.w.annotations.setdefault(message.get("annotation"), []).append(arrived)
            self.w.progress.set()
            return
        seq = message.get("seq")
        if not isinstance(seq, int):
            return
        mark = bench_mark(message)
        if mark is not None:  # arrived live (also when a catch-up has brought it already)
            phase = mark["phase"]
            if self.w.drop and self.w.random.random() < self.w.drop:
                self.w.dropped[phase] = self.w.dropped.get(phase, 0) + 1
                return  # as if lost on the way
            self.w.arrivals.setdefault(phase, {}).setdefault(mark["i"], []).append(arrived)
            self.w.latency.setdefault(phase, []).append(arrived - mark["sent"])
            self.w.received[phase] = self.w.received.get(phase, 0) + 1
            self.w.progress.set()
        if self.catching:
            self.held.append(message)
        elif seq == self.seq + 1:
            self.apply(message)
        elif seq > self.seq + 1:
            self.held.append(message)
            self.catch_up(until=seq - 1)

    def apply(self, message: dict) -> None:
        self.seq = message["seq"]
        used = (message.get("data") or {}).get("used")
        if used:
            self.tokens = used.get("tokens")
        self.w.progress.set()

    def note_sync(self, sync: dict) -> None:
        if sync.get("resync") or (sync.get("seq") or 0) > self.seq:
            # as run.js: pages told at once that they are behind do not all ask at once
            asyncio.get_running_loop().call_later(self.w.random.random(), self.catch_up)

    def catch_up(self, until: int | None = None) -> None:
        if not self.catching:
            self.catching = True
            asyncio.ensure_future(self._catch_up(until))

    async def _catch_up(self, until: int | None) -> None:
        try:
            if until is not None and await self._ask_socket(until):
                return
            while True:
                params = {"after": str(self.seq), **({"until": str(until)} if until is not None else {})}
                async with self.w.session.get(f"{self.w.http_url}/runs/{self.w.run_pk}/events.json",
                                              params=params, headers=self.w.headers) as r:
                    answer = await r.json()
                for message in answer["messages"]:
                    if message["seq"] > self.seq:
                        self.apply(message)
                        self.repaired += 1
                if not answer["more"]:
                    break
        except Exception as exc:  # noqa: BLE001 - counted; the phase's divergence shows it
            self.w.catch_up_errors.append(repr(exc))
        finally:
            self.catching = False
            self._release()

    async def _ask_socket(self, until: int) -> bool:
        """As run.js: a gap's events asked of the socket first (its web process keeps recent
        ones); True when that filled it."""
        self.asked = asyncio.get_running_loop().create_future()
        await self.ws.send_str(json.dumps({"type": "missed", "after": self.seq, "until": until}))
        try:
            messages = await asyncio.wait_for(self.asked, 2.0)
        except asyncio.TimeoutError:
            return False
        for message in messages or []:
            if message["seq"] == self.seq + 1:
                self.apply(message)
                self.repaired += 1
                self.w.from_socket += 1
        return self.seq >= until

    def answered(self, frame: dict) -> None:
        if self.asked is not None and not self.asked.done():
            self.asked.set_result(frame.get("messages"))

    def _release(self) -> None:
        held, self.held = self.held, []
        for message in sorted(held, key=lambda m: m["seq"]):
            if message["seq"] == self.seq + 1:
                self.apply(message)
            elif message["seq"] > self.seq + 1:
                self.held.append(message)
        if self.held:
            self.held.sort(key=lambda m: m["seq"])
            self.catch_up(until=self.held[0]["seq"] - 1)


class Watchers:
    """N WebSocket clients on one run; arrivals[phase][i] = arrival times of event i's messages."""

    def __init__(self, url: str, run_pk: int, cookie: str, drop: float = 0.0, seed: int = 1):
        import random

        self.http_url = url
        self.run_pk = run_pk
        self.ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run_pk}/"
        self.headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
        self.session = None
        self.sockets: list = []
        self.pages: list[Page] = []
        self.readers: list[asyncio.Task] = []
        self.arrivals: dict[str, dict[int, list[float]]] = {}
        self.latency: dict[str, list[float]] = {}
        self.received: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.frames = 0
        self.messages = 0
        self.catch_up_errors: list[str] = []
        self.from_socket = 0  # repaired events the socket answered (not events.json)
        self.drop = drop
        self.random = random.Random(seed)
        self.annotations: dict[int, list[float]] = {}  # annotation pk -> arrival times of its message
        self.progress = asyncio.Event()
        self.connect_errors: list[str] = []
        self.server_closed: list[int | None] = []  # close codes of sockets the server closed on us
        self.closing = False

    async def _open(self, gate: asyncio.Semaphore, attempts: int = 6):
        import aiohttp

        for attempt in range(attempts):
            async with gate:
                try:
                    return await self.session.ws_connect(self.ws_url, headers=self.headers, heartbeat=None,
                                                         max_msg_size=0)
                except aiohttp.WSServerHandshakeError as e:  # e.g. a 500 from the consumer's group_add
                    self.connect_errors.append(str(e.status))
            await asyncio.sleep(0.2 * (attempt + 1))
        raise RuntimeError(f"could not connect after {attempts} attempts: {self.connect_errors[-attempts:]}")

    async def connect(self, n: int, concurrency: int, seq: int) -> float:
        import aiohttp

        # No cap on connections (aiohttp's default is 100): the sockets and the catch-up requests share it.
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        gate = asyncio.Semaphore(concurrency or n)
        t = time.perf_counter()
        self.sockets = await asyncio.gather(*(self._open(gate) for _ in range(n)))
        elapsed = time.perf_counter() - t
        self.pages = [Page(self, seq) for _ in self.sockets]
        for page, ws in zip(self.pages, self.sockets):
            page.ws = ws
        self.readers = [asyncio.create_task(self._read(ws, page)) for ws, page in zip(self.sockets, self.pages)]
        return elapsed

    async def _read(self, ws, page: Page) -> None:
        import aiohttp

        async for msg in ws:
            arrived = time.time()
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            frame = json.loads(msg.data)
            if isinstance(frame, dict) and frame.get("kind") == "missed":
                page.answered(frame)
                continue
            self.frames += 1
            for message in frame if isinstance(frame, list) else [frame]:
                self.messages += 1
                page.receive(message, arrived)
        if not self.closing:
            self.server_closed.append(ws.close_code)
            self.progress.set()

    async def wait_for(self, phase: str, expected: int, quiet_s: float) -> None:
        """Until every client has every message of the phase, or nothing arrived for quiet_s."""
        while self.received.get(phase, 0) + self.dropped.get(phase, 0) < expected:
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), quiet_s)
            except asyncio.TimeoutError:
                return

    async def settle(self, last_seq: int, timeout_s: float) -> None:
        """Until every page has caught up to last_seq (its own catch-up, or a sync's), or timeout_s."""
        deadline = time.monotonic() + timeout_s
        while any(p.seq < last_seq or p.catching for p in self.pages) and time.monotonic() < deadline:
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), max(0.05, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                return

    async def wait_for_annotation(self, pk: int, expected: int, quiet_s: float) -> None:
        """Until every client has annotation pk's message, or nothing arrived for quiet_s."""
        while len(self.annotations.get(pk, ())) < expected:
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), quiet_s)
            except asyncio.TimeoutError:
                return

    async def close(self) -> None:
        self.closing = True
        for ws in self.sockets:
            await ws.close()
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        if self.session:
            await self.session.close()
        self.sockets, self.readers = [], []


# --- the benchmark -----------------------------------------------------------------------------

def setup_database() -> tuple[int, str, str]:
    """Migrate, then a user, a task, a running Run with a lease, and that user's session cookie."""
    import uuid

    import django
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    django.setup()
    call_command("migrate", verbosity=0)
    from webapp.runs.models import Run, RunStatus
    from webapp.tasks import registration
    from webapp.teams.models import Membership, Project, Role

    user = get_user_model().objects.create_user("bench", password="bench")
    project = Project.objects.create(name="Live updates benchmark")
    Membership.objects.create(project=project, user=user, role=Role.VIEWER)  # watching needs membership
    task = registration.task_for_folder(project, ROOT / "examples" / "diabetes-progression")
    lease = uuid.uuid4().hex
    run = Run.objects.create(task=task, created_by=user, status=RunStatus.RUNNING, lease=lease)
    client = Client()
    client.force_login(user)
    from django.db import connections

    connections.close_all()
    return run.pk, lease, client.cookies["sessionid"].value


def setup_annotator(run_pk: int) -> dict:
    """A second person, an annotator of the run's project, signed in; a label set to annotate with;
    and the run's events to annotate (those the phases above wrote)."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client

    from webapp.annotations.models import ScoreKind
    from webapp.runs.models import Event, Run
    from webapp.teams.models import Membership, Role

    run = Run.objects.select_related("task__project").get(pk=run_pk)
    project = run.task.project
    user = get_user_model().objects.create_user("bench-annotator", password="bench")
    Membership.objects.create(project=project, user=user, role=Role.ANNOTATOR)
    labels = ["wrong data path", "hallucinated value", "good repair"]
    label_set = annotations.save_label_set(project, user, "Trace review", labels, ScoreKind.SCALE, 1, 5)
    targets = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)[:50])
    if not targets:
        raise RuntimeError(f"run {run_pk} has no events to annotate")
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    connections.close_all()
    return {"cookie": cookie, "label_set": label_set.pk, "labels": labels, "targets": targets}


async def measure_annotations(url: str, run_pk: int, viewer_cookie: str, annotator: dict, n_viewers: int,
                              n_annotations: int, quiet_s: float, concurrency: int) -> dict:
    """n_annotations posted one after another by the annotator; each one's arrival at n_viewers."""
    import aiohttp

    watchers = Watchers(url, run_pk, viewer_cookie)
    post_url = f"{url}/runs/{run_pk}/annotations"
    async with aiohttp.ClientSession() as http:
        try:
            seq, _ = await asyncio.to_thread(run_truth, run_pk)
            connect_s = await watchers.connect(n_viewers, concurrency, seq)
            # The annotator's page: its CSRF cookie, and the token its htmx forms send (base.html).
            async with http.get(f"{url}/runs/{run_pk}/", headers={"Cookie": f"sessionid={annotator['cookie']}"}) as r:
                page = await r.text()
                if r.status != 200 or "csrftoken" not in r.cookies:
                    raise RuntimeError(f"the annotator's run page answered {r.status} without a CSRF cookie")
                csrf_cookie = r.cookies["csrftoken"].value
            token = re.search(r'"X-CSRFToken": "([^"]+)"', page)
            headers = {"Cookie": f"sessionid={annotator['cookie']}; csrftoken={csrf_cookie}", "Origin": url,
                       "X-CSRFToken": token.group(1) if token else csrf_cookie, "HX-Request": "true"}
            sent: dict[int, float] = {}
            post_ms: list[float] = []
            refused: list[str] = []
            warm = 3
            for i in range(warm + n_annotations):
                labels = annotator["labels"]
                form = {"target_kind": "event", "target_ref": str(annotator["targets"][i % len(annotator["targets"])]),
                        "label_set": str(annotator["label_set"]), "labels": labels[i % len(labels)],
                        "score": str(1 + i % 5), "comment": f"benchmark annotation {i}: the retry fixed the range"}
                t0, p0 = time.time(), time.perf_counter()
                async with http.post(post_url, data=form, headers=headers) as r:
                    body = await r.text()
                    failed = r.status != 200 or r.headers.get("X-Annotation-Error")
                took = 1000 * (time.perf_counter() - p0)
                if failed:
                    refused.append(f"{r.status} {r.headers.get('X-Annotation-Error', '')}".strip())
                    continue
                # The new row is the newest in the target's list that the view answers with.
                pk = max(int(x) for x in re.findall(r'id="annotation-(\d+)"', body))
                await watchers.wait_for_annotation(pk, n_viewers, quiet_s)
                if i >= warm:
                    sent[pk] = t0
                    post_ms.append(took)
            lat, last = [], []
            for pk, t0 in sent.items():
                arrivals = watchers.annotations.get(pk, [])
                lat += [1000 * (t - t0) for t in arrivals]
                if len(arrivals) >= n_viewers:
                    last.append(1000 * (max(arrivals) - t0))
            return {"viewers": n_viewers, "annotations": len(sent), "refused": refused,
                    "p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=float("nan")),
                    "all_p95": pct(last, 95), "post_p50": pct(post_ms, 50), "post_p95": pct(post_ms, 95),
                    "lost": len(sent) * n_viewers - len(lat), "connect_s": connect_s,
                    "connect_errors": len(watchers.connect_errors), "server_closed": list(watchers.server_closed)}
        finally:
            await watchers.close()


def print_annotations(a: dict) -> None:
    print(f"\nAn annotation's arrival at {a['viewers']} other viewers: from time.time() just before the annotator's POST "
          f"to\n/runs/<pk>/annotations (row, audit entry, broadcast) to the annotation message's arrival at each viewer;\n"
          f"{a['annotations']} annotations, one after another.")
    header = (f"{'viewers':>7} | {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'all p95 ms':>10} {'lost':>5} | "
              f"{'POST p50 ms':>11} {'POST p95 ms':>11} {'refused':>7} | {'conn s':>6} {'conn err':>8} {'closed':>6}")
    print(header)
    print("-" * len(header))
    print(f"{a['viewers']:>7} | {a['p50']:>7.1f} {a['p95']:>7.1f} {a['max']:>7.1f} {a['all_p95']:>10.1f} "
          f"{a['lost']:>5} | {a['post_p50']:>11.1f} {a['post_p95']:>11.1f} {len(a['refused']):>7} | "
          f"{a['connect_s']:>6.2f} {a['connect_errors']:>8} {len(a['server_closed']):>6}")
    print("p50/p95/max: over every (annotation, viewer) pair; all p95: until the last of the viewers has it;\n"
          "POST: the annotator's request until its answer (the target's list again).")
    if a["refused"]:
        print(f"refused POSTs: {sorted(set(a['refused']))}")


async def emit(conn, phase: str, n: int, rate: float | None) -> dict:
    conn.send(("emit", phase, n, rate))
    return await asyncio.get_running_loop().run_in_executor(None, conn.recv)


def run_truth(run_pk: int) -> tuple[int, int | None]:
    """The run's last event seq and the budget its last model call shows: what every page must show."""
    from django.db import connection

    from webapp.runs.models import Event

    try:
        row = Event.objects.filter(run_id=run_pk).order_by("-seq").values_list("seq", "payload").first()
        return (row[0], ((row[1] or {}).get("budget_used") or {}).get("tokens")) if row else (0, None)
    finally:
        connection.close()


async def measure(conn, url: str, run_pk: int, cookie: str, n_clients: int, events: int, rate: float,
                  quiet_s: float, concurrency: int, pids: dict[str, int], drop: float) -> dict:
    watchers = Watchers(url, run_pk, cookie, drop=drop, seed=n_clients)
    try:
        seq, _ = await asyncio.to_thread(run_truth, run_pk)
        connect_s = await watchers.connect(n_clients, concurrency, seq)
        # Warm up the path (Daphne's receive loop, the emitter's connections) before measuring.
        await emit(conn, f"warm{n_clients}", 5, None)
        await watchers.wait_for(f"warm{n_clients}", 5 * n_clients, quiet_s)
        out = {"clients": n_clients, "connect_s": connect_s, "connect_errors": len(watchers.connect_errors)}
        from_socket0 = watchers.from_socket
        for kind, phase_rate in (("steady", rate), ("burst", None)):
            phase = f"{kind}{n_clients}"
            repaired0 = sum(p.repaired for p in watchers.pages)
            frames0, messages0 = watchers.frames, watchers.messages
            cpu0, wall0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.perf_counter()
            stats = await emit(conn, phase, events, phase_rate)
            await watchers.wait_for(phase, events * n_clients, quiet_s)
            wall = time.perf_counter() - wall0
            cpu = {k: 100 * (cpu_seconds(p) - cpu0[k]) / wall for k, p in pids.items()}
            frames, messages = watchers.frames - frames0, watchers.messages - messages0
            # Every page repairs what it missed (its own catch-up, or the next sync's); then each
            # one's state is compared with the run's.
            truth = await asyncio.to_thread(run_truth, run_pk)
            await watchers.settle(truth[0], quiet_s + 5)
            diverged = sum(1 for p in watchers.pages if (p.seq, p.tokens) != truth)
            delivered = watchers.received.get(phase, 0)
            daphne_ms = 10 * cpu["daphne"] * wall / delivered if delivered else float("nan")
            arrivals = watchers.arrivals.get(phase, {})
            complete = [max(a) for a in arrivals.values() if len(a) >= n_clients]
            lat = [1000 * x for x in watchers.latency.get(phase, [])]
            # From the start of group_send (after the sink's database writes) to each arrival.
            sent_at = stats["sent_at"]
            hop = [1000 * (t - sent_at[i]) for i, ts in arrivals.items() if i < len(sent_at) for t in ts]
            emit_ms = [1000 * x for x in stats["emit_s"]]
            send_ms = [1000 * x for x in stats["send_s"]]
            db_ms = [e - s for e, s in zip(emit_ms, send_ms)]
            dropped = watchers.dropped.get(phase, 0)
            out[kind] = {
                "p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99), "max": max(lat, default=float("nan")),
                "hop_p50": pct(hop, 50), "hop_p99": pct(hop, 99),
                "lost": events * n_clients - delivered - dropped, "dropped": dropped,
                "repaired": sum(p.repaired for p in watchers.pages) - repaired0, "diverged": diverged,
                "per_frame": messages / frames if frames else float("nan"),
                "emit_rate": events / stats["wall_s"],
                "delivered_rate": len(complete) / (max(complete) - stats["first_ts"]) if complete else 0.0,
                "emit_ms": pct(emit_ms, 50), "emit_p99": pct(emit_ms, 99), "db_ms": pct(db_ms, 50),
                "send_ms": pct(send_ms, 50), "send_p99": pct(send_ms, 99), "cpu": cpu,
                "daphne_ms_per_msg": daphne_ms}
        out["server_closed"] = list(watchers.server_closed)
        out["catch_up_errors"] = list(watchers.catch_up_errors)
        out["from_socket"] = watchers.from_socket - from_socket0
        return out
    finally:
        await watchers.close()


def print_table(rows: list[dict], rate: float, events: int, diag: dict | None, drop: float, web: int) -> None:
    print(f"\nLatency from an engine event (time.time() just before RunEventSink.emit) to its arrival in each "
          f"WebSocket client.\n{events} events per phase; steady phase at {rate:g} events/s, burst as fast as the "
          f"sink goes; {web} web process(es)" + (f"; each client dropped {100 * drop:g}% of event messages on purpose"
                                                 if drop else "") + ".")
    header = (f"{'clients':>7} | {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7} {'lost':>5} | "
              f"{'burst ev/s':>10} {'msgs/s':>7} {'p50 ms':>7} {'p99 ms':>8} {'lost':>5} {'msg/frame':>9} | "
              f"{'dropped':>7} {'repaired':>8} {'diverged':>8} | {'conn s':>6} {'conn err':>8} {'closed':>6}")
    print(f"{'':>7} | {'steady':<39} | {'burst (sustained, delivered to every client)':<54} | "
          f"{'catch-up (both phases)':<26} | connections")
    print(header)
    print("-" * len(header))
    for r in rows:
        s, b = r["steady"], r["burst"]
        print(f"{r['clients']:>7} | {s['p50']:>7.1f} {s['p95']:>7.1f} {s['p99']:>7.1f} {s['max']:>7.1f} "
              f"{s['lost']:>5} | {b['delivered_rate']:>10.1f} {b['delivered_rate'] * r['clients']:>7.0f} "
              f"{b['p50']:>7.1f} {b['p99']:>8.1f} {b['lost']:>5} {b['per_frame']:>9.1f} | "
              f"{s['dropped'] + b['dropped']:>7} {s['repaired'] + b['repaired']:>8} "
              f"{max(s['diverged'], b['diverged']):>8} | {r['connect_s']:>6.2f} "
              f"{r['connect_errors']:>8} {len(r['server_closed']):>6}", flush=True)

    print("\nWhere the time goes (medians, p99 in brackets):")
    header = (f"{'clients':>7} | {'sink emit ms':>13} {'db ms':>6} {'group_send ms':>14} | "
              f"{'send->client ms':>16} | {'burst emit ev/s':>15} {'burst send->client':>19} | "
              f"{'burst CPU % daphne/redis/emitter/clients':>40} {'daphne CPU ms/msg':>17}")
    print(header)
    print("-" * len(header))
    for r in rows:
        s, b = r["steady"], r["burst"]
        cpu = "/".join(f"{b['cpu'][k]:.0f}" for k in ("daphne", "redis", "emitter", "clients"))
        print(f"{r['clients']:>7} | {s['emit_ms']:>5.2f} [{s['emit_p99']:>5.1f}] {s['db_ms']:>6.2f} "
              f"{s['send_ms']:>5.2f} [{s['send_p99']:>6.1f}] | {s['hop_p50']:>6.1f} [{s['hop_p99']:>7.1f}] | "
              f"{b['emit_rate']:>15.1f} {b['hop_p50']:>7.1f} [{b['hop_p99']:>9.1f}] | "
              f"{cpu:>40} {b['daphne_ms_per_msg']:>17.3f}")
    print("\nsink emit: RunEventSink.emit; db: its database part (Event row, Run update, control check);\n"
          "group_send: its broadcast (on a long-lived event loop, over channels_redis); send->client: from the start of\n"
          "group_send to the arrival. burst ev/s: burst events that reached every client / (last arrival -\n"
          "first send); msgs/s = that x clients; msg/frame: messages per WebSocket frame in the burst (the web\n"
          "process coalesces what comes faster than it sends). lost: event messages that never arrived live\n"
          "(besides those dropped on purpose); repaired: events the clients fetched after a gap (from the socket, which\n"
          "answers from its web process's recent events, else from events.json) or a sync, as run.js does;\n"
          "diverged: clients whose state (last seq, budget shown) differed from the run's once they had caught up\n"
          "(must be 0). conn err: WebSocket handshakes refused (then retried); closed: sockets the\n"
          "server closed during the measurement. CPU %: of one core, over the burst phase, on a machine with\n"
          f"{os.cpu_count()} cores (daphne: all web processes); daphne CPU ms/msg: web CPU time per message delivered\n"
          "to one client in the burst.")
    if diag:
        print(f"group_send alone, one-member group: {diag['async_to_sync_ms']:.2f} ms per call through async_to_sync "
              f"as the sink does it,\n{diag['one_loop_ms']:.2f} ms awaited on one event loop; an empty async_to_sync "
              f"call costs {diag['bare_ms']:.2f} ms.")
    closed = [c for r in rows for c in r["server_closed"]]
    if closed:
        print(f"server-closed sockets, close codes: {sorted(set(map(str, closed)))}")
    errors = [e for r in rows for e in r["catch_up_errors"]]
    if errors:
        print(f"catch-up errors: {len(errors)}, e.g. {errors[:3]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 10, 100, 300])
    parser.add_argument("--events", type=int, default=200, help="events per phase (default 200)")
    parser.add_argument("--rate", type=float, default=20.0, help="events/s in the steady phase (default 20)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 events per phase")
    parser.add_argument("--viewers", type=int, default=10,
                        help="viewers watching while an annotator annotates (default 10; 0 skips that phase)")
    parser.add_argument("--annotations", type=int, default=50, help="annotations measured (default 50)")
    parser.add_argument("--quiet-s", type=float, default=10.0,
                        help="stop waiting for a phase's messages after this long with none arriving")
    parser.add_argument("--connect-concurrency", type=int, default=0,
                        help="handshakes in flight at once (default 0: all clients at once)")
    parser.add_argument("--drop", type=float, default=0.0,
                        help="fraction of event messages each client drops on purpose, to be repaired (default 0)")
    parser.add_argument("--web", type=int, default=None,
                        help="web processes (default: as manage.py studio would start on this machine)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary var dir (DB, Daphne log)")
    args = parser.parse_args()
    events = 40 if args.quick else args.events

    started = time.perf_counter()
    var_dir = Path(tempfile.mkdtemp(prefix="trellis-live-bench-"))
    os.environ.setdefault("TRELLIS_LIVE_SYNC_S", "3")  # the studio's own (webapp/runs/fanout.py), not the tests' 1 s
    use_studio_environment(var_dir, var_dir / "bench.sqlite3")
    from tests.studio_harness import Studio  # Redis and Daphne exactly as the tests start them

    studio = Studio(var_dir, var_dir / "bench.sqlite3")
    emitter = None
    conn = None

    def terminate(signum, frame):  # a kill still runs the cleanup below
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        run_pk, lease, cookie = setup_database()
        from webapp.runs.management.commands.studio import default_web_processes

        web = args.web or default_web_processes()
        studio.start(web=True, worker=False, web_processes=web)
        url = studio.url
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        emitter = ctx.Process(target=emitter_main, args=(child, run_pk, lease), daemon=True)
        emitter.start()
        if not conn.poll(60) or conn.recv() != "ready":
            raise RuntimeError("the emitter process did not start")
        print(f"studio: redis on {studio.redis.socket}, {web} daphne process(es) on {url}, run {run_pk}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        pids = {"daphne": [w.pid for w in studio.webs], "redis": studio.redis.pid, "emitter": emitter.pid, "clients": os.getpid()}
        rows = []
        for n in args.clients:
            row = asyncio.run(measure(conn, url, run_pk, cookie, n, events, args.rate, args.quiet_s,
                                      args.connect_concurrency, pids, args.drop))
            rows.append(row)
            s, b = row["steady"], row["burst"]
            print(f"  {n} clients: steady p50 {s['p50']:.1f} ms p95 {s['p95']:.1f} ms lost {s['lost']}; "
                  f"burst {b['delivered_rate']:.1f} ev/s p50 {b['p50']:.1f} ms lost {b['lost']}; "
                  f"repaired {s['repaired'] + b['repaired']} ({row['from_socket']} by the socket), "
                  f"diverged {max(s['diverged'], b['diverged'])}", flush=True)
            goal = 50.0 if n <= 100 else 200.0  # issue 29: p95 < 50 ms at 100 viewers, < 200 ms at 300
            record(f"event -> browser at {args.rate:g} events/s, {n} viewers (p95)", s["p95"], "ms", goal,
                   note=f"lost {s['lost'] + b['lost']}, diverged {max(s['diverged'], b['diverged'])}, "
                        f"conn err {row['connect_errors']}, server-closed {len(row['server_closed'])}")
        conn.send(("diag", 100))
        diag = conn.recv() if conn.poll(120) else None
        annotation_row = None
        if args.viewers > 0 and args.annotations > 0:
            annotator = setup_annotator(run_pk)
            annotation_row = asyncio.run(measure_annotations(url, run_pk, cookie, annotator, args.viewers,
                                                             args.annotations, args.quiet_s,
                                                             args.connect_concurrency))
            print(f"  annotations at {args.viewers} viewers: p95 {annotation_row['p95']:.1f} ms "
                  f"lost {annotation_row['lost']}", flush=True)
        print_table(rows, args.rate, events, diag, args.drop, web)
        if annotation_row:
            print_annotations(annotation_row)
    finally:
        if emitter is not None:
            if emitter.is_alive():
                try:
                    conn.send(("stop",))
                except OSError:
                    pass
            emitter.join(10)
            if emitter.is_alive():
                emitter.terminate()
                emitter.join(5)
        studio.stop()
        if args.keep:
            print(f"kept {var_dir}")
        else:
            shutil.rmtree(var_dir, ignore_errors=True)
    print(f"\ntook {time.perf_counter() - started:.1f} s; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
