"""One subscription to a run per web process, fanned out in memory to the process's sockets on
that run (the way Zulip's Tornado event queues serve many clients from one process).

Every socket used to be a member of the run's Redis group: an event was written to Redis once
per viewer, read back once per viewer, and dispatched through Channels once per viewer (0.35 ms
of Daphne's CPU per message per viewer; at 100 viewers a burst came 3.6 s late and channels_redis
dropped what overflowed). Now a ``RunFeed`` per run and process holds the one channel in the run's
group and hands each message to its sockets directly (``RunConsumer.deliver``):

- frames: what arrives while frames go out faster than a short gap allows is sent as one frame,
  a JSON array of messages, instead of one frame per message (``Pacer``: a few frames at once
  while they are rare, then at most one per gap; the gap grows with what a frame costs to hand
  to every socket, so that sending takes at most half of the process);
- fragments (a studio message that names some) are rendered once per role, not once per viewer,
  with every viewer's role read in one query; a viewer no longer a member is closed (4403);
- sync: after a quiet ``SYNC_S`` the feed tells its sockets the run's last event seq and studio
  number (as they were a tick earlier), so that a page whose last message was lost notices (an
  earlier one shows as a gap in the numbers of the next); after Redis went away (the group is
  lost with it) the feed joins again and tells every page to catch up (``resync``).

The messages themselves are encoded once by the sender (webapp/runs/bridge.py) and carry their
sequence numbers; static/js/run.js does the catching up: a small gap it asks of its socket, which
answers from the feed's last ``RECENT`` events (``missed``) when it has them all, without a
request or a query; anything else from runs/<id>/events.json.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import weakref
from typing import Protocol

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from webapp.teams import access
from webapp.teams.models import Role

from . import fragments, studio_seq
from .models import Run

log = logging.getLogger(__name__)

SYNC_S = float(os.environ.get("TRELLIS_LIVE_SYNC_S", "3"))  # how long a lost last message can go unnoticed
MIN_GAP_S = 0.025      # at most 40 frames a second per socket once frames stop being rare
BURST = 4              # frames that go at once after a quiet moment
DUTY = 2.0             # the gap is at least twice what handing one frame to every socket took
REGROUP_S = 600.0      # channels_redis forgets a group member after its group_expiry (a day): renew
RETRY_S = 1.0
RECENT = 1000          # event messages a feed keeps, to answer a page's small gap without the database
RECENT_CHARS = 4_000_000


class Viewer(Protocol):
    """What the feed needs of a socket (webapp/runs/consumers.py RunConsumer)."""

    user_id: int | None   # None for a share link's viewer
    share: object | None

    async def deliver(self, frame: str) -> None: ...

    async def refuse(self, code: int) -> None: ...

    async def share_revoked(self, message: dict) -> None: ...


class Pacer:
    """When a run's next frame may go: at once while frames are rare (``BURST`` of them in hand),
    then one per gap, everything that arrived meanwhile in it."""

    def __init__(self) -> None:
        self.tokens = float(BURST)
        self.at = time.monotonic()
        self.cost = 0.0  # seconds one frame took to hand to every socket (moving average)

    def gap(self) -> float:
        return max(MIN_GAP_S, DUTY * self.cost)

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(float(BURST), self.tokens + (now - self.at) / self.gap())
        self.at = now

    def delay(self) -> float:
        self._refill()
        return max(0.0, (1.0 - self.tokens) * self.gap())

    def spent(self, cost: float) -> None:
        self._refill()
        self.tokens -= 1.0
        self.cost = cost if not self.cost else 0.7 * self.cost + 0.3 * cost


def frame_of(texts: list[str]) -> str:
    """One message as itself, several as a JSON array (already encoded: joined, not re-encoded)."""
    return texts[0] if len(texts) == 1 else "[" + ",".join(texts) + "]"


@database_sync_to_async
def _roles_and_fragments(run_id: int, names: list[list[str]], user_ids: set[int],
                         shared: bool) -> tuple[dict[int, Role], dict[Role, list[dict[str, str]]]]:
    """Each viewer's role now, and each message's fragments rendered once per role present."""
    run = Run.objects.select_related("task__project").filter(pk=run_id).first()
    if run is None:
        return {}, {}
    roles = access.roles_of(user_ids, run.task.project_id)
    present = set(roles.values()) | ({Role.VIEWER} if shared else set())
    rendered = {}
    for role in present:
        per_message = []
        for wanted in names:
            html = {}
            for name in wanted:
                markup = fragments.render(name, run, role)
                if markup is not None:
                    html[name] = markup
            per_message.append(html)
        rendered[role] = per_message
    return roles, rendered


@database_sync_to_async
def _last_seq(run_id: int) -> int | None:
    return Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).first()


class RunFeed:
    """One run's messages in one web process: one channel in the run's group, many sockets."""

    def __init__(self, run_id: int, layer) -> None:
        self.run_id = run_id
        self.group = f"run-{run_id}"
        self.layer = layer
        self.viewers: set[Viewer] = set()
        self.joining = 0
        self.pending: list[dict] = []
        self.wake = asyncio.Event()
        self.pacer = Pacer()
        self.channel = ""
        self.tasks: list[asyncio.Task] = []
        self.ready: asyncio.Future | None = None
        self.heard = 0.0  # when the last message came from the layer
        self.recent: dict[int, str] = {}  # the latest RECENT event messages by seq, oldest first
        self.recent_chars = 0

    async def start(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)
        self.grouped_at = time.monotonic()
        self.tasks = [asyncio.ensure_future(coro) for coro in (self._read(), self._flush(), self._sync())]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        try:
            await self.layer.group_discard(self.group, self.channel)
        except Exception:  # noqa: BLE001 - gone with Redis anyway; expires in any case
            pass

    def push(self, message: dict) -> None:
        self.pending.append(message)
        self.wake.set()

    def _keep(self, message: dict) -> None:
        seq = message.get("seq")
        if isinstance(seq, int) and not message.get("fragments"):
            self.recent_chars -= len(self.recent.pop(seq, ""))
            self.recent[seq] = message["text"]
            self.recent_chars += len(message["text"])
            # a tree event carries the whole tree: bounded in characters too
            while len(self.recent) > RECENT or self.recent_chars > RECENT_CHARS:
                self.recent_chars -= len(self.recent.pop(next(iter(self.recent))))

    def missed(self, after: int, until: int) -> list[str] | None:
        """The event messages ``after`` < seq <= ``until`` as they were sent, if this process has
        every one of them still; else None (the page asks the database: events.json)."""
        if not 0 < until - after <= RECENT:
            return None
        texts = [self.recent.get(seq) for seq in range(after + 1, until + 1)]
        return None if None in texts else texts

    # --- the three tasks ------------------------------------------------------------------
    async def _read(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis went away: its groups went with it
                log.warning("live feed of run %s lost the channel layer; joining again", self.run_id,
                            exc_info=log.isEnabledFor(logging.DEBUG))
                await self._join_again()
                continue
            kind = message.get("type")
            if kind == "run.message":
                self.heard = time.monotonic()
                self._keep(message)
                self.push(message)
            elif kind == "share.revoked":
                for viewer in list(self.viewers):
                    await viewer.share_revoked(message)

    async def _join_again(self) -> None:
        while True:
            await asyncio.sleep(RETRY_S)
            try:
                await self.layer.group_add(self.group, self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - still away
                continue
            self.grouped_at = time.monotonic()
            # What was sent meanwhile never reached this process: every page catches up.
            self.push({"text": json.dumps({"kind": "sync", "resync": True}), "fragments": []})
            return

    async def _flush(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            delay = self.pacer.delay()
            if delay > 0:
                await asyncio.sleep(delay)
            batch, self.pending = self.pending, []
            if batch and self.viewers:
                try:
                    await self._deliver(batch)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - one bad frame must not end the run's feed
                    log.exception("live feed of run %s could not deliver %d message(s)", self.run_id, len(batch))
            if self.pending:
                self.wake.set()

    async def _sync(self) -> None:
        """For a lost *last* message: while messages come, a page sees a gap in their numbers
        itself. So a tick sends the marks read at the tick before, and only when nothing came
        since: a message counted then has had a whole quiet tick to reach this feed, so a page
        that has not got it by this sync (frames keep their order) missed it; and a busy server
        never sends every page to fetch what is only on its way."""
        earlier, read_at = None, 0.0
        while True:
            await asyncio.sleep(SYNC_S)
            try:
                if time.monotonic() - self.grouped_at > REGROUP_S:
                    await self.layer.group_add(self.group, self.channel)
                    self.grouped_at = time.monotonic()
                if earlier is not None and self.viewers and self.heard < read_at:
                    self.push({"text": json.dumps(earlier), "fragments": []})
                earlier, read_at = await self.marks(), time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next one will do
                earlier = None
                log.debug("live feed of run %s: no sync this time", self.run_id, exc_info=True)

    async def marks(self) -> dict:
        """The run's last event seq and studio number now, as a ``sync`` message."""
        seq = await _last_seq(self.run_id)
        sseq = await studio_seq.current_sseq(self.run_id, self.layer)
        return {"kind": "sync", "seq": seq or 0, "sseq": sseq}

    # --- one frame to every socket --------------------------------------------------------
    async def _deliver(self, batch: list[dict]) -> None:
        viewers = list(self.viewers)
        names = [list(m.get("fragments") or ()) for m in batch]
        texts = [m["text"] for m in batch]
        by_role: dict[Role, str] = {}
        roles: dict[int, Role] = {}
        if any(names):
            user_ids = {v.user_id for v in viewers if v.user_id is not None}
            roles, rendered = await _roles_and_fragments(self.run_id, names, user_ids,
                                                         any(v.share is not None for v in viewers))
            for role, htmls in rendered.items():
                by_role[role] = frame_of([json.dumps({**json.loads(text), "html": html}) if wanted else text
                                          for text, wanted, html in zip(texts, names, htmls)])
        plain = frame_of(texts)
        started = time.perf_counter()
        for viewer in viewers:
            if viewer not in self.viewers:  # left while the fragments were rendered
                continue
            try:
                if not by_role:
                    await viewer.deliver(plain)
                    continue
                role = Role.VIEWER if viewer.share is not None else roles.get(viewer.user_id)
                if role is None or role not in by_role:  # no longer a member (or the run is gone)
                    await viewer.refuse(4403)
                    continue
                await viewer.deliver(by_role[role])
            except Exception:  # noqa: BLE001 - one broken socket must not keep the frame from the others
                log.debug("live feed of run %s: a socket refused a frame", self.run_id, exc_info=True)
        self.pacer.spent(time.perf_counter() - started)


# --- the process's feeds ----------------------------------------------------------------------
# Per event loop: one web process runs one, but the tests start a loop per test.
_FEEDS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, RunFeed]]" = weakref.WeakKeyDictionary()


def feeds() -> dict[int, RunFeed]:
    """This process's feeds by run id (on the running loop)."""
    return _FEEDS.setdefault(asyncio.get_running_loop(), {})


async def join(run_id: int, viewer: Viewer) -> RunFeed:
    """Subscribe ``viewer`` to the run's messages, starting the process's feed of the run if it
    has none. Raises what the channel layer raised when the feed could not start."""
    running = feeds()
    feed = running.get(run_id)
    if feed is None:
        feed = running[run_id] = RunFeed(run_id, get_channel_layer())
        feed.ready = asyncio.ensure_future(feed.start())
    feed.joining += 1
    try:
        await asyncio.shield(feed.ready)
    except Exception:
        if running.get(run_id) is feed:
            del running[run_id]  # the next viewer tries afresh
        raise
    finally:
        feed.joining -= 1
    feed.viewers.add(viewer)
    return feed


async def leave(run_id: int, viewer: Viewer) -> None:
    """Unsubscribe ``viewer``; the last one out stops the process's feed of the run."""
    running = feeds()
    feed = running.get(run_id)
    if feed is None:
        return
    feed.viewers.discard(viewer)
    if not feed.viewers and not feed.joining and feed.ready is not None and feed.ready.done():
        del running[run_id]  # a viewer coming now starts a new feed; this one goes quietly
        await feed.stop()
