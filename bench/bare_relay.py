"""The baseline for bench/relay.py: a bare Channels relay, as the Channels docs would write it.

Stock AsyncWebsocketConsumer, in-memory layer, one group_send per message,
no validation, no storage, no auth. Same URLs as the dashboard, so the same
load generator drives both:

    daphne -p 8100 bench.bare_relay:application
"""

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=["channels"],
    CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}},
)
django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402


class BotConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        self.group = "s-" + self.scope["url_route"]["kwargs"]["session_id"]
        await self.accept()

    async def receive(self, text_data=None, bytes_data=None):
        await self.channel_layer.group_send(self.group, {"type": "relay", "text": text_data})


class WatcherConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        self.group = "s-" + self.scope["url_route"]["kwargs"]["session_id"]
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def relay(self, event):
        await self.send(text_data=event["text"])


application = ProtocolTypeRouter(
    {
        "websocket": URLRouter(
            [
                path("ws/ingest/<str:session_id>/", BotConsumer.as_asgi()),
                path("ws/sessions/<str:session_id>/", WatcherConsumer.as_asgi()),
            ]
        )
    }
)
