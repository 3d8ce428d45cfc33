"""WebSocket: a browser watching a run gets every message the worker's event sink and the studio
push (webapp/runs/live.py).

Only members of the run's project may watch: anyone else (or a run that does not exist, so ids
reveal nothing) is refused with close code 4403 before it is subscribed. A message that names
fragments gets them rendered for this viewer's role (once per role, by the feed); a viewer whose
membership was removed meanwhile is disconnected (4403) instead.

A share link's page connects with ``?share=<signed>`` (webapp/runs/sharing.py) and no account:
it joins only the link's run, sees fragments as a viewer does, never has a client message acted
on (it is answered, like any viewer, when it asks for the run's events it missed), and is closed
(4410) once the link is revoked or expires.

A socket is no member of the run's Redis group itself: it joins its web process's feed of the run
(webapp/runs/fanout.py), which holds the one subscription and hands it each frame (``deliver``)."""
from __future__ import annotations

import json
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.teams import access

from . import fanout, sharing
from .models import Run

SHARE_RECHECK_S = 5.0  # how often a share connection re-reads its link (revocation) on messages


@database_sync_to_async
def _share_link(signed: str):
    try:
        return sharing.resolve(signed)
    except sharing.ShareRefused:
        return None


@database_sync_to_async
def _still_usable(link) -> bool:
    link.refresh_from_db(fields=["revoked", "expires"])
    return link.usable


@database_sync_to_async
def _project_of(run_id: int) -> int | None:
    return Run.objects.filter(pk=run_id).values_list("task__project_id", flat=True).first()


class RunConsumer(AsyncJsonWebsocketConsumer):
    # No channel of its own on the layer: the process's feed of the run is subscribed for it.
    channel_layer_alias = "trellis-no-layer-per-socket"
    share = None
    user_id = None
    feed = None

    async def connect(self) -> None:
        signed = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("share")
        if signed:
            await self._connect_shared(signed[0])
            return
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        project_id = await _project_of(self.run_id)
        if project_id is None or await database_sync_to_async(access.role_of)(user, project_id) is None:
            await self.close(code=4403)
            return
        self.user_id = user.pk
        await self._join()

    async def _connect_shared(self, signed: str) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        link = await _share_link(signed)
        if link is None or link.run_id != self.run_id:  # a link of another run opens nothing here
            await self.close(code=4403)
            return
        self.share, self.share_checked = link, time.monotonic()
        await self._join()

    async def _join(self) -> None:
        """Join the feed, then accept: frames the feed hands over before the accept has gone out
        wait for it (what came before, the page asks for on its own: static/js/run.js)."""
        self.early: list[str] | None = []
        self.feed = await fanout.join(self.run_id, self)
        await self.accept()
        early, self.early = self.early, None
        for frame in early:
            await self.send(text_data=frame)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """A page may ask for the events of a gap it saw (``{"type": "missed", "after": N,
        "until": M}``): answered from this process's recent events, ``messages`` null when it has
        not got them all (the page then asks events.json). Nothing else a client sends is acted
        on; through a share link it never will be."""
        try:
            content = json.loads(text_data or "")
        except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
            content = None
        if isinstance(content, dict) and content.get("type") == "missed":
            await self._missed(content)
            return
        if self.share is not None:
            await self.send(text_data=json.dumps({"type": "refused", "error": "a share link is read-only"}))

    async def _missed(self, content: dict) -> None:
        if await self._share_gone():  # an expired link's socket is answered no more
            return
        after, until = content.get("after"), content.get("until")
        if type(after) is not int or type(until) is not int:
            await self.send(text_data=json.dumps({"type": "refused", "error": "after and until must be integers"}))
            return
        texts = self.feed.missed(after, until) if self.feed is not None else None
        await self.send(text_data=f'{{"kind": "missed", "after": {after}, "until": {until}, "messages": '
                                  + ("null" if texts is None else "[" + ",".join(texts) + "]") + "}")

    # --- what the feed calls ------------------------------------------------------------------
    async def deliver(self, frame: str) -> None:
        if await self._share_gone():
            return
        if self.early is not None:
            self.early.append(frame)
            return
        await self.send(text_data=frame)

    async def refuse(self, code: int) -> None:
        await self.close(code=code)

    async def share_revoked(self, event: dict) -> None:
        if self.share is not None and event.get("token") == self.share.token:
            await self.close(code=4410)

    async def _share_gone(self) -> bool:
        """True (and the connection closed) once the link expired or was revoked."""
        if self.share is None:
            return False
        usable = self.share.usable
        if usable and time.monotonic() - self.share_checked > SHARE_RECHECK_S:
            self.share_checked = time.monotonic()
            usable = await _still_usable(self.share)
        if not usable:
            await self.close(code=4410)
        return not usable

    async def disconnect(self, code: int) -> None:
        if self.feed is not None:
            await fanout.leave(self.run_id, self)
