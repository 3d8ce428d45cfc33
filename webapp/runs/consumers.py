"""WebSocket: a browser watching a run joins the run's group and gets every message the
worker's event sink pushes (events, status changes, decisions, new versions).

Only members of the run's project may join: anyone else (or a run that does not exist, so ids
reveal nothing) is refused with close code 4403 before the group is joined."""
from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import access
from .models import Run


@database_sync_to_async
def _may_view(user, run_id: int) -> bool:
    project_id = Run.objects.filter(pk=run_id).values_list("task__project_id", flat=True).first()
    return project_id is not None and access.role_of(user, project_id) is not None


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await _may_view(user, run_id):
            await self.close(code=4403)
            return
        self.group = f"run-{run_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event: dict) -> None:
        await self.send(text_data=event["text"])
