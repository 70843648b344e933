"""WebSocket consumers: they authenticate, hand frames to the live path, and move messages.

- `IngestConsumer` (`/ws/ingest/<session_id>/`): a bot streams its RTVI messages.
- `SessionConsumer` (`/ws/sessions/<session_id>/`): a browser watches one session.
- `SessionListConsumer` (`/ws/sessions/`): a browser watches the live session list.
"""

import json
import logging
import time
import uuid
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from dashboard.auth import bearer_token, organization_of
from dashboard.models import Agent
from rtvi_monitor import live
from rtvi_monitor.models import SESSION_ID_RE, IngestToken, Session

logger = logging.getLogger(__name__)

# Close codes. daphne drops close reasons, so a bot is told why in an
# {"error": ..., "fatal": true} frame first.
CLOSE_BAD_TOKEN = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
CLOSE_TOO_BIG = 1009
CLOSE_RATE = 4429
CLOSE_STALLED = 4008


class LeanDispatchMixin:
    """Skip Channels' per-message `aclose_old_connections()`.

    Channels >= 4.2 runs it in a thread before every handler (~145 us,
    serialized on one thread). These consumers never use the ORM on the event
    loop: database work goes through `database_sync_to_async` (which closes
    old connections itself) or the live path's own database thread.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


def _query(scope) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}


class TokenBucket:
    """Allows `rate` per second sustained, with bursts of `burst` seconds' worth."""

    def __init__(self, rate: float, burst_seconds: float):
        self.rate = rate
        self.capacity = max(rate * burst_seconds, 1.0)
        self.tokens = self.capacity
        self.at = time.monotonic()

    def take(self, n: int) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= n
        return self.tokens >= 0


@database_sync_to_async
def open_ingest(token: str, session_id: str, agent_id: str | None):
    """Check the token and open (or reopen) the session.

    Returns (session, started, warning), or an error string. `started` is
    true for a new session and for one reopened after it had ended.
    """
    credential = IngestToken.objects.find(token)
    if credential is None:
        return "Unknown or revoked ingest token."
    credential.touch()
    organization = credential.organization
    agent, warning = None, ""
    if agent_id:
        agent = Agent.objects.filter(organization=organization, pk=agent_id).first() if _is_uuid(agent_id) else None
        if agent is None:
            warning = f"agent {agent_id!r} is not an agent of your organization; the session is recorded without one"
    session, created = Session.objects.get_or_create(
        organization=organization, session_id=session_id, defaults={"agent": agent}
    )
    updates = {"ingest_epoch": F("ingest_epoch") + 1}
    if agent and session.agent_id != agent.pk:
        updates["agent"] = agent
    reopened = session.status == Session.Status.ENDED  # the bot came back after the grace period
    if reopened:
        updates.update(status=Session.Status.LIVE, ended_at=None, end_reason="", state=None)
    Session.objects.filter(pk=session.pk).update(**updates)
    session = Session.objects.select_related("agent").get(pk=session.pk)
    return session, created or reopened, warning


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class IngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    """A bot's stream. Every frame is recorded and answered; only auth, size and rate close it."""

    live_session: live.LiveSession | None = None

    async def connect(self):
        await self.accept()
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        if not SESSION_ID_RE.match(session_id):
            return await self.fail("session id: use 1-100 characters of A-Z a-z 0-9 _ . : -", CLOSE_BAD_REQUEST)
        token = bearer_token(dict((k.decode().title(), v.decode()) for k, v in self.scope["headers"]))
        if not token:
            return await self.fail("Send 'Authorization: Bearer <ingest token>' in the handshake.", CLOSE_BAD_TOKEN)
        opened = await open_ingest(token, session_id, _query(self.scope).get("agent"))
        if isinstance(opened, str):
            return await self.fail(opened, CLOSE_BAD_TOKEN)
        session, started, warning = opened
        self.epoch = session.ingest_epoch
        self.bucket = TokenBucket(settings.INGEST_RATE_LIMIT, settings.INGEST_RATE_BURST_SECONDS)
        self.writer = live.get_writer()
        self.live_session = await live.registry.attach(session)
        if warning:
            await self.send_json([{"error": warning, "seq": None}])
        if started:
            await self.channel_layer.group_send(
                live.org_group(session.organization_id),
                {"type": "session.list", "event": "started", "session": live.session_row(session)},
            )

    async def fail(self, error: str, code: int):
        await self.send(text_data=json.dumps({"error": error, "fatal": True}))
        await self.close(code)

    async def receive(self, text_data=None, bytes_data=None):
        if self.live_session is None:
            return
        received_at = time.time()
        raw = text_data if text_data is not None else bytes_data.decode("utf-8", "replace")
        if len(raw) > settings.INGEST_MAX_FRAME_BYTES:
            return await self.fail(
                f"Frame of {len(raw)} bytes is over the limit of {settings.INGEST_MAX_FRAME_BYTES}.", CLOSE_TOO_BIG
            )
        if self.writer.backlog > settings.INGEST_MAX_PENDING:
            # Storage is behind (database down?): refuse rather than grow
            # without bound; the client keeps these unacknowledged and resends.
            return await self.send_json(
                [{"error": "The dashboard cannot store messages right now; resend later.", "seq": None, "retry": True}]
            )
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = raw  # recorded as received, answered with what is wrong
        frames = frame["batch"] if isinstance(frame, dict) and isinstance(frame.get("batch"), list) else [frame]
        if not self.bucket.take(len(frames)):
            return await self.fail(
                f"Over the rate limit of {settings.INGEST_RATE_LIMIT:g} messages per second.", CLOSE_RATE
            )
        immediate = []
        for item in frames:  # inside a batch each item is judged alone
            row, reply = self.live_session.accept(item, received_at, self)
            if row is not None:
                self.writer.add(row)
            if reply is not None:
                immediate.append(reply)
        if immediate:
            await self.send_json(immediate)

    async def reply(self, payloads: list[dict]) -> None:
        await self.send_json(payloads)

    async def send_json(self, payloads: list[dict]) -> None:
        # One frame per reply, as the protocol says.
        for payload in payloads:
            await self.send(text_data=json.dumps(payload))

    async def disconnect(self, code):
        if self.live_session is not None:
            try:
                await self.writer.flush()
            except Exception:  # the writer keeps the rows and retries; the bot resends what was not acked
                logger.warning("Could not store a disconnecting bot's last messages yet", exc_info=True)
            live.registry.detach(self.live_session, self.epoch)

    # Browsers' group messages are not for bots; ingest sockets join no group.


@database_sync_to_async
def _find_session(user, session_id: str):
    return Session.objects.find(organization_of(user), session_id)


class SessionConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    """A browser watching one session: the state, then live events in seq order, never a gap.

    The browser acknowledges what it has processed ({"ack": seq}). When it
    falls more than BROWSER_MAX_LAG events behind, the server stops sending
    and tells it to resync ({"type": "resync"}); the browser then asks for
    what it missed with {"since": seq}. Server memory stays bounded whatever
    the browser does.
    """

    session: Session | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_staff:
            return await self.close(CLOSE_FORBIDDEN)
        self.session = await _find_session(user, self.scope["url_route"]["kwargs"]["session_id"])
        if self.session is None:
            return await self.close(CLOSE_NOT_FOUND)
        self.group = live.session_group(self.session.pk)
        self.last_seq = 0  # highest seq sent to this browser
        self.acked = 0
        self.paused_since: float | None = None
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = _query(self.scope).get("since")
        await self.send_snapshot(int(since) if since and since.isdigit() else None)

    async def disconnect(self, code):
        if self.session is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def send_snapshot(self, since: int | None) -> None:
        """The derived state plus recent events (or exactly those after `since`)."""
        pk = self.session.pk

        def load():
            if since is None:
                events = live.load_events(pk, limit=settings.BROWSER_RECENT_EVENTS, newest=True)
            else:
                events = live.load_events(pk, after_seq=since)
            session = Session.objects.select_related("agent").get(pk=pk)
            return session, events

        session, events = await database_sync_to_async(load)()
        state = await self.current_state(session)
        # No event after `since` (or none at all) means the browser is up to date.
        last_seq = events[-1]["seq"] if events else (since or 0)
        self.last_seq = self.acked = last_seq
        self.paused_since = None
        await self.send(
            text_data=json.dumps(
                {
                    "type": "snapshot",
                    "session": await database_sync_to_async(live.session_row)(session),
                    "state": state,
                    "events": events,
                    "since": since,
                    "last_seq": last_seq,
                },
                separators=(",", ":"),
            )
        )

    async def current_state(self, session: Session) -> dict:
        here = live.registry.sessions.get(session.pk)
        if here is not None:
            return here.state.to_dict()
        if session.state is not None:
            return session.state
        events = await database_sync_to_async(live.load_events)(session.pk)
        return live.replay(events).to_dict()

    async def receive(self, text_data=None, bytes_data=None):
        try:
            request = json.loads(text_data or "")
        except ValueError:
            return
        if not isinstance(request, dict):
            return
        if isinstance(request.get("ack"), int):
            self.acked = max(self.acked, request["ack"])
        if isinstance(request.get("since"), int):
            await self.send_snapshot(request["since"])

    async def session_events(self, message):
        """A stored batch of one session's events, from the writer of whichever process ingests it."""
        if self.paused_since is not None:
            if time.monotonic() - self.paused_since > settings.BROWSER_STALL_TIMEOUT:
                await self.close(CLOSE_STALLED)
            return
        if message["last_seq"] <= self.last_seq:
            return  # already had it (the snapshot overlapped the live stream)
        if self.last_seq - self.acked > settings.BROWSER_MAX_LAG:
            self.paused_since = time.monotonic()
            await self.send(text_data=json.dumps({"type": "resync", "after_seq": self.acked}))
            return
        if message["first_seq"] > self.last_seq + 1 or message["first_seq"] <= self.last_seq:
            # A gap (a dropped relay) or an overlap: send exactly what follows
            # last_seq from the database, where every relayed event already is.
            events = await database_sync_to_async(live.load_events)(self.session.pk, self.last_seq)
            if events:
                self.last_seq = events[-1]["seq"]
                await self.send(text_data=json.dumps({"type": "events", "events": events}, separators=(",", ":")))
            return
        self.last_seq = message["last_seq"]
        await self.send(text_data=message["text"])

    async def session_ended(self, message):
        await self.send(text_data=json.dumps({"type": "ended", "session": message["session"]}))

    async def session_list(self, message):
        pass  # list updates go to SessionListConsumer


@database_sync_to_async
def _live_rows(user):
    organization = organization_of(user)
    if organization is None:
        return None, []
    sessions = Session.objects.live().filter(organization=organization).select_related("agent")[:500]
    return organization, [live.session_row(s) for s in sessions]


class SessionListConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    """A browser watching the organization's sessions start, update and end."""

    group = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_staff:
            return await self.close(CLOSE_FORBIDDEN)
        organization, rows = await _live_rows(user)
        if organization is None:
            return await self.close(CLOSE_FORBIDDEN)
        self.group = live.org_group(organization.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send(text_data=json.dumps({"type": "live", "sessions": rows, "at": timezone.now().isoformat()}))

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        pass

    async def session_list(self, message):
        await self.send(text_data=json.dumps({"type": message["event"], "session": message["session"]}))
