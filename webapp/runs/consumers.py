"""WebSocket: a browser watching a run joins the run's group and gets every message the
worker's event sink pushes (events, status changes, decisions, new versions)."""
from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.group = f"run-{int(self.scope['url_route']['kwargs']['run_id'])}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event: dict) -> None:
        await self.send(text_data=event["text"])
