"""What a browser watching a session is sent: a snapshot of the derived state, then the reducer's patches.

Every stored batch comes as {"type": "batch", "from", "to", "changes",
"events"}; the page applies the changes when `from` is the version it has,
and otherwise asks for a new snapshot ({"snapshot": true}). The browser
acknowledges the version it has rendered ({"ack": version}); more than
BROWSER_MAX_LAG messages behind, the server stops sending and says
{"type": "resync"}. Server memory stays bounded whatever the browser does.

Relays come from the writer (`relay.fanout`, to `SessionFeed.deliver`) and are
sent at once; while a snapshot is being made they wait in `held` (at most
BROWSER_MAX_LAG of them, else a fresh snapshot follows), and go after it in
order, those it already covers skipped (`BrowserStream.take`).

The socket (rtvi_monitor/live/consumers.py, SessionConsumer) authenticates and
moves frames; this is the protocol on it.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings
from rtvi_dashboard.wire import CLOSE_STALLED

from rtvi_monitor.live.registry import registry
from rtvi_monitor.live.relay import to_json
from rtvi_monitor.sessions import events
from rtvi_monitor.sessions.models import Session

logger = logging.getLogger(__name__)


class SessionFeed:
    """One browser's view of one session: its snapshots and the relays that follow them.

    `send(text)` sends one WebSocket message, `close(code)` closes the socket.
    """

    def __init__(self, session: Session, send: Callable[[str], Awaitable[None]], close: Callable[[int], Awaitable]):
        self.session = session
        self.send = send
        self.close = close
        self.stream = BrowserStream()
        self.held: list[dict] | None = []  # relays that came while a snapshot was being made; None when none is
        self.again = False  # another snapshot was asked for while one was being made
        self.since: int | None = None  # the next snapshot's events start after this seq (the page has those before)
        self.snapshots: asyncio.Task | None = None

    def cancel(self) -> None:
        if self.snapshots is not None:
            self.snapshots.cancel()

    async def send_frame(self, text: str) -> None:
        """One frame, in parts when it is too big for one WebSocket message."""
        for part in parts(text):
            await self.send(part)

    async def deliver(self, message: dict) -> None:
        """A relay for this session (relay.fanout), sent now or after the snapshot being made."""
        if self.held is None:
            await self.forward(message)
        elif len(self.held) < settings.BROWSER_MAX_LAG:
            self.held.append(message)
        else:  # the snapshot is slow to come: what it misses, the next one has
            self.held.clear()
            self.again = True

    async def forward(self, message: dict) -> None:
        if message["type"] == "session.batch":
            # A stored batch of one session: the reducer's patch and the events, from whichever process ingests it.
            action = self.stream.take(message["to"])
            if action == "send":
                await self.send_frame(message["text"])
            elif action == "resync":
                await self.send(json.dumps({"type": "resync"}))
            elif action == "stalled":
                await self.close(CLOSE_STALLED)
        elif message["type"] == "session.changed":
            kind = "ended" if message["event"] == "ended" else "session"
            await self.send(to_json({"type": kind, "session": message["session"]}))
            if message["event"] in ("started", "back"):
                # Its bot is back: the state is loaded afresh from what is stored, and a copy
                # made before (an ended state, say) is not the one the next patches continue.
                self.snapshot_soon()

    async def request(self, data: str | bytes | None) -> None:
        """A page's request on its socket: an ack, or a snapshot asked for; anything else is answered with
        what is wrong."""
        request, problem = browser_request(data)
        if problem:
            return await self.send(json.dumps({"type": "error", "error": problem}))
        if "ack" in request:
            self.stream.acknowledge(request["ack"])
        if request.get("snapshot"):
            self.snapshot_soon(request.get("since"))

    def snapshot_soon(self, since: int | None = None) -> None:
        """A fresh snapshot, made beside the relays (which wait for it), or once more after the one being made.

        With `since`, its events are those stored after that seq (none when it is past the last).
        """
        self.since = since
        if self.held is not None:
            self.again = True
            return
        self.held = []
        self.snapshots = asyncio.create_task(self._send_snapshots_or_close())

    async def _send_snapshots_or_close(self) -> None:
        try:
            await self.send_snapshots()
        except Exception:  # the database, say: the page reconnects and asks again
            logger.exception("A snapshot for a browser of session %s failed", self.session.session_id)
            await self.close(1011)

    async def send_snapshots(self) -> None:
        """Snapshots until none more is asked for, each followed by the relays that came meanwhile."""
        try:
            while True:
                self.again = False
                await self.send_snapshot()
                while self.held and not self.again:
                    await self.forward(self.held.pop(0))
                if not self.again:
                    break
        finally:
            self.held = None

    async def send_snapshot(self) -> None:
        """The derived state, its list bases and the newest events, as of one moment."""
        pk = self.session.pk
        here = registry.sessions.get(pk)
        if here is not None:
            # The events go up to what this state has folded in: one stored since, but not yet folded (the
            # writer stores, then folds), comes in the next batch; in the snapshot too, a page had it twice.
            snapshot = {"state": here.state.to_dict(), "bases": here.state.bases(), "upto": here.state.folded_upto}
        else:
            snapshot = await database_sync_to_async(_stored_snapshot)(pk)
        upto = snapshot.pop("upto", None)
        since, self.since = self.since, None

        def load():
            recent = events.recent_events(pk, settings.BROWSER_RECENT_EVENTS, upto_seq=upto, after_seq=since)
            return Session.objects.select_related("agent").get(pk=pk), recent

        session, recent = await database_sync_to_async(load)()
        self.stream.restart(snapshot["state"].get("version", 0))
        await self.send_frame(to_json({"type": "snapshot", "session": session.row(), **snapshot, "events": recent}))


def _stored_snapshot(pk: int) -> dict:
    """A snapshot of a session nobody ingests here: its frozen state, or a replay of what is stored."""
    session = Session.objects.get(pk=pk)
    if session.state is not None:
        return {"state": session.state, "bases": {}}
    state, stored = events.load_state(pk)
    return {"state": state.to_dict(), "bases": state.bases(), "upto": max((e["seq"] for e in stored), default=0)}


# A frame to a browser longer than this goes as parts (daphne refuses to send
# more than 1 MiB at once; a part's text may double when escaped).
FRAME_PART = 256 * 1024


def parts(text: str) -> list[str]:
    """A frame as the WebSocket messages that carry it: itself, or {"type": "part"} pieces in order."""
    if len(text) <= FRAME_PART:
        return [text]
    return [
        to_json({"type": "part", "data": text[start : start + FRAME_PART], "last": start + FRAME_PART >= len(text)})
        for start in range(0, len(text), FRAME_PART)
    ]


class BrowserStream:
    """What one browser was sent and has acknowledged (in state versions), and so what it gets next.

    More than BROWSER_MAX_LAG messages unacknowledged, the browser is told to
    resync and sent nothing more until it asks for a snapshot; silent for
    BROWSER_STALL_TIMEOUT after that, it is closed. Server memory stays
    bounded whatever the browser does.
    """

    def __init__(self):
        self.sent = self.acked = 0
        self.paused_since: float | None = None

    def restart(self, version: int) -> None:
        """A snapshot at `version` went out."""
        self.sent = self.acked = version
        self.paused_since = None

    def acknowledge(self, version) -> None:
        if isinstance(version, int) and not isinstance(version, bool):
            self.acked = max(self.acked, min(version, self.sent))

    def take(self, version: int) -> str:
        """What to do with a batch that brings the state to `version`: send, skip, resync or stalled."""
        if self.paused_since is not None:
            return "stalled" if time.monotonic() - self.paused_since > settings.BROWSER_STALL_TIMEOUT else "skip"
        if version <= self.sent:
            return "skip"  # the snapshot had it already
        if self.sent - self.acked > settings.BROWSER_MAX_LAG:
            self.paused_since = time.monotonic()
            return "resync"
        self.sent = version
        return "send"


BROWSER_REQUEST_FIELDS = ("ack", "snapshot", "since")
BROWSER_REQUEST_MAX = 1000  # characters: a page's requests are a few dozen


def browser_request(data: str | bytes | None) -> tuple[dict, str]:
    """A page's request on its session socket, checked: (request, "") or ({}, what is wrong).

    A page sends {"ack": version} (what it has rendered) and {"snapshot": true}
    (a fresh copy), optionally with "since": seq (the events after that seq,
    for a page that has the ones before). Anything else is answered with what
    was wrong, never with silence.
    """
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not data or len(data) > BROWSER_REQUEST_MAX:
        return {}, f"expected a JSON object of at most {BROWSER_REQUEST_MAX} characters"
    try:
        request = json.loads(data)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return {}, 'expected a JSON object: {"ack": version} or {"snapshot": true, "since": seq}'
    unknown = sorted(set(request) - set(BROWSER_REQUEST_FIELDS))
    if unknown:
        return {}, f"unknown field {unknown[0]!r}: expected ack, snapshot or since"
    for name in ("ack", "since"):
        value = request.get(name)
        if name in request and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return {}, f"{name}: expected a whole number from 0, got {json.dumps(value)[:40]}"
    if "snapshot" in request and request["snapshot"] is not True:
        return {}, "snapshot: expected true"
    if "since" in request and "snapshot" not in request:
        return {}, 'since: only with "snapshot": true'
    return request, ""
