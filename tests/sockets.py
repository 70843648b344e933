"""Helpers for driving the WebSocket routes through the real router (dashboard.asgi)."""

import json

from channels.testing import WebsocketCommunicator

from dashboard.asgi import application

ORIGIN = b"http://127.0.0.1"


def rtvi(type_: str, data=None, **envelope) -> dict:
    message = {"label": "rtvi-ai", "type": type_, **envelope}
    if data is not None:
        message["data"] = data
    return message


def wrap(seq: int, message: dict, direction: str = "to-client", sent_at: float = 1_750_000_000.0) -> dict:
    return {"seq": seq, "direction": direction, "sent_at": sent_at, "message": message}


def bot_socket(
    session_id: str, token: str | None, agent: str | None = None, acks: str | None = None
) -> WebsocketCommunicator:
    """A bot's socket; acks="ranges" asks for ranged acks, as the bot package does."""
    query = "&".join(f"{k}={v}" for k, v in (("agent", agent), ("acks", acks)) if v)
    path = f"/ws/ingest/{session_id}/" + (f"?{query}" if query else "")
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return WebsocketCommunicator(application, path, headers=headers)


def browser_socket(path: str, cookie: str | None, origin: bytes | None = ORIGIN) -> WebsocketCommunicator:
    headers = [(b"host", b"127.0.0.1")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    if origin:
        headers.append((b"origin", origin))
    return WebsocketCommunicator(application, path, headers=headers)


async def send(socket: WebsocketCommunicator, frame) -> None:
    await socket.send_to(text_data=frame if isinstance(frame, str) else json.dumps(frame))


async def receive(socket: WebsocketCommunicator, timeout: float = 3) -> dict:
    return json.loads(await socket.receive_from(timeout))


async def receive_until(
    socket: WebsocketCommunicator, predicate, timeout: float = 5, limit: int = 10_000
) -> list[dict]:
    """Frames up to and including the first one for which predicate(frame) is true."""
    frames = []
    for _ in range(limit):
        frame = await receive(socket, timeout)
        frames.append(frame)
        if predicate(frame):
            return frames
    raise AssertionError("predicate never matched")


class Page:
    """What a session page keeps: the server's derived state, patched batch by batch, and the log's seqs."""

    def __init__(self):
        self.state: dict | None = None
        self.bases: dict = {}
        self.seqs: list[int] = []

    @property
    def version(self) -> int:
        return self.state["version"] if self.state else -1

    def take(self, frame: dict) -> str:
        """Fold one frame in; returns "snapshot", "apply", "skip", "gap" or the frame's type."""
        from rtvi_monitor.core.patches import apply_changes

        kind = frame.get("type")
        if kind == "snapshot":
            self.state, self.bases = frame["state"], frame["bases"]
            self.seqs = sorted({*self.seqs, *(e["seq"] for e in frame["events"])})
            return kind
        if kind != "batch":
            return kind
        if frame["to"] <= self.version:
            return "skip"
        if frame["from"] != self.version:
            return "gap"
        apply_changes(self.state, self.bases, frame["changes"])
        self.seqs += [e["seq"] for e in frame["events"]]
        return "apply"


async def follow(socket: WebsocketCommunicator, page: Page, until, timeout: float = 5) -> list[dict]:
    """Frames into `page` until until(page, frame); a gap asks for a snapshot, as the page does."""
    frames = []
    for _ in range(100_000):
        frame = await receive(socket, timeout)
        frames.append(frame)
        if page.take(frame) == "gap":
            await send(socket, {"snapshot": True})
        if until(page, frame):
            return frames
    raise AssertionError("never got there")
