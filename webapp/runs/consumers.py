"""WebSocket: a browser watching a run joins the run's group and gets every message the
worker's event sink and the studio push (webapp/runs/live.py).

Only members of the run's project may join: anyone else (or a run that does not exist, so ids
reveal nothing) is refused with close code 4403 before the group is joined. A message that names
fragments gets them rendered here, for this viewer's role; a viewer whose membership was removed
meanwhile is disconnected (4403) instead."""
from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import access, fragments
from .models import Run


@database_sync_to_async
def _project_of(run_id: int) -> int | None:
    return Run.objects.filter(pk=run_id).values_list("task__project_id", flat=True).first()


@database_sync_to_async
def _render(user, run_id: int, names: list[str]) -> dict[str, str] | None:
    """The named fragments for ``user``, or None when they may no longer see the run."""
    run = Run.objects.select_related("task__project").filter(pk=run_id).first()
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
    async def connect(self) -> None:
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

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event: dict) -> None:
        names = event.get("fragments") or []
        if not names:  # the common case: the same encoded message for every viewer
            await self.send(text_data=event["text"])
            return
        html = await _render(self.scope["user"], self.run_id, names)
        if html is None:
            await self.close(code=4403)
            return
        await self.send(text_data=json.dumps({**json.loads(event["text"]), "html": html}))
