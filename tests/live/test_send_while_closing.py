"""A frame a consumer sends to a socket already closing is dropped, not raised (rtvi_monitor/live/consumers.py).

daphne's autobahn raises `Disconnected` ("Attempt to send on a closed protocol") when a socket is
closing but its disconnect has not reached the consumer yet: a browser that left while its
snapshot was being made. That was logged as a crash of the application; the consumer's
`disconnect` follows anyway. Driven here through the consumer's own ASGI interface, with an
ASGI `send` that does what daphne's does for such a socket.
"""

import asyncio

import pytest
from autobahn.exception import Disconnected
from channels.generic.websocket import AsyncWebsocketConsumer

from rtvi_monitor.live.consumers import LeanDispatchMixin

# Channels closes the thread's old database connections when a socket disconnects, as under daphne: a test
# that ran before on this thread may have left one open (pytest-django refuses that without the mark).
pytestmark = pytest.mark.django_db


class Snapshotting(LeanDispatchMixin, AsyncWebsocketConsumer):
    disconnected = False

    async def connect(self):
        await self.accept()
        await self.send(text_data='{"type": "snapshot"}')  # the page is gone by now
        await self.send(text_data='{"type": "batch"}')

    async def disconnect(self, code):
        type(self).disconnected = True


async def test_frames_to_a_socket_already_closing_are_dropped_and_the_disconnect_still_runs():
    inbox = asyncio.Queue()
    for message in ({"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1006}):
        inbox.put_nowait(message)
    sent = []

    async def send(message):
        if message["type"] == "websocket.send":
            raise Disconnected("Attempt to send on a closed protocol")
        sent.append(message["type"])

    app = Snapshotting.as_asgi()
    await asyncio.wait_for(app({"type": "websocket", "path": "/ws/x/"}, inbox.get, send), 5)
    assert sent == ["websocket.accept"]
    assert Snapshotting.disconnected


async def test_other_failures_to_send_still_raise():
    inbox = asyncio.Queue()
    inbox.put_nowait({"type": "websocket.connect"})

    async def send(message):
        if message["type"] == "websocket.send":
            raise ValueError("a bug, not a closed socket")

    app = Snapshotting.as_asgi()
    try:
        await asyncio.wait_for(app({"type": "websocket", "path": "/ws/x/"}, inbox.get, send), 5)
    except ValueError as exc:
        assert "a bug" in str(exc)
    else:
        raise AssertionError("a send that failed for another reason was swallowed")
