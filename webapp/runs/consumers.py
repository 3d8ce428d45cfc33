"""WebSocket: a browser watching a run joins the run's group and gets every message the
worker's event sink and the studio push (webapp/runs/live.py).

Only members of the run's project may join: anyone else (or a run that does not exist, so ids
reveal nothing) is refused with close code 4403 before the group is joined. A message that names
fragments gets them rendered here, for this viewer's role; a viewer whose membership was removed
meanwhile is disconnected (4403) instead.

A share link's page connects with ``?share=<signed>`` (webapp/runs/sharing.py) and no account:
it joins only the link's run, sees fragments as a viewer does, never has a client message acted
on, and is closed (4410) once the link is revoked or expires."""
from __future__ import annotations

import json
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import access, fragments, sharing
from .models import Role, Run

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


@database_sync_to_async
def _render(user, run_id: int, names: list[str], share=None) -> dict[str, str] | None:
    """The named fragments for ``user`` (or a share link's viewer), or None when they may no
    longer see the run."""
    run = Run.objects.select_related("task__project").filter(pk=run_id).first()
    if share is not None:
        role = Role.VIEWER if run is not None and share.run_id == run.pk else None
    else:
        role = access.role_of(user, run.task.project_id) if run else None
    if role is None:
        return None
    out = {}
    for name in names:
        html = fragments.render(name, run, role)
        if html is not None:
            out[name] = html
    return out


class RunConsumer(AsyncJsonWebsocketConsumer):
    share = None

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
        self.group = f"run-{self.run_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def _connect_shared(self, signed: str) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        link = await _share_link(signed)
        if link is None or link.run_id != self.run_id:  # a link of another run opens nothing here
            await self.close(code=4403)
            return
        self.share, self.share_checked = link, time.monotonic()
        self.group = f"run-{self.run_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        # Nothing a client sends is acted on here today; through a share link it never will be.
        if self.share is not None:
            await self.send(text_data=json.dumps({"type": "refused", "error": "a share link is read-only"}))
            return
        await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)

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
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event: dict) -> None:
        if await self._share_gone():
            return
        names = event.get("fragments") or []
        if not names:  # the common case: the same encoded message for every viewer
            await self.send(text_data=event["text"])
            return
        html = await _render(self.scope.get("user"), self.run_id, names, share=self.share)
        if html is None:
            await self.close(code=4403)
            return
        await self.send(text_data=json.dumps({**json.loads(event["text"]), "html": html}))
