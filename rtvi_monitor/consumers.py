"""WebSocket consumers: they authenticate, hand frames to the live path, and move messages.

- `IngestConsumer` (`/ws/ingest/<session_id>/`): a bot streams its RTVI messages.
- `SessionConsumer` (`/ws/sessions/<session_id>/`): a browser watches one session.
- `SessionListConsumer` (`/ws/sessions/`): a browser watches the live session list.
"""

import asyncio
import json
import logging
import re
import time
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone
from rtvi_dashboard.wire import (
    ACKS_PARAM,
    ACKS_RANGES,
    CLOSE_BAD_REQUEST,
    CLOSE_BAD_TOKEN,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_RATE,
    CLOSE_STALLED,
    CLOSE_TOO_BIG,
    CONTROL_PARAM,
    STREAM_ID_RE,
    STREAM_PARAM,
    ack_ranges,
    control_version,
    is_control_result,
)

from dashboard import audit
from dashboard.auth import bearer_token, scope_membership
from rtvi_monitor import agent_link, control, events, lifecycle, metrics, protocol, redaction, relay, writer
from rtvi_monitor.dbthread import CONNECT_THREAD, in_db_thread
from rtvi_monitor.models import SESSION_ID_RE, IngestToken, RedactionRule, Session
from rtvi_monitor.ratelimit import TokenBucket
from rtvi_monitor.registry import LiveSession, registry

SESSION_ID_RULE = "session id: use 1-100 characters of A-Z a-z 0-9 _ . : -, not only dots"
STREAM_RULE = "stream: use 1-64 characters of A-Z a-z 0-9 _ . : -"

logger = logging.getLogger(__name__)
_STREAM_ID = re.compile(STREAM_ID_RE)


class LeanDispatchMixin:
    """Channels' consumer loop, without its per-message costs.

    - No `aclose_old_connections()` before every handler: Channels >= 4.2 runs
      it in a thread each time (~145 us, serialized on one thread). These
      consumers never use the ORM on the event loop: database work goes
      through `database_sync_to_async` (which closes old connections itself)
      or the live path's own database thread.
    - No channel layer: a bot's socket joins no group, and a browser's relays
      come through `relay.fanout`. So each consumer awaits its socket directly,
      instead of a new task and an `asyncio.wait` per frame
      (`channels.utils.await_many_dispatch`), and has no channel to make (with
      Redis, a subscription per socket) (docs/BENCHMARKS.md, issue 15).
    """

    async def __call__(self, scope, receive, send):
        self.scope = scope
        self.base_send = send
        self.channel_layer = None
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


def _query(scope) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("utf-8", "replace")).items()}


def _find_credential(token: str) -> IngestToken | None:
    credential = IngestToken.objects.find(token)
    if credential is not None:
        credential.touch()
    return credential


async def find_credential(token: str) -> IngestToken | None:
    """The ingest token's record, on the connecting bots' database thread (see `open_ingest`)."""
    return await in_db_thread(_find_credential, token, executor=CONNECT_THREAD)


async def open_ingest(credential: IngestToken, session_id: str, agent: str | None):
    """Open (or reopen) the session for this bot, held by this process.

    Returns (session, event, warning, redactor): `event` is "started" for a new
    session and one reopened after it had ended, "back" when its bot returns
    within the grace, else ""; `redactor` what is removed from this bot's
    messages before they are stored (the organization's rules as they are now).

    Its queries run on a thread of their own that keeps its connection: on
    Django's shared sync thread each one opened a connection, so a hundred
    bots reconnecting at once (a restart, a deploy) took 3 s to attach
    (docs/BENCHMARKS.md, issue 15); on the writer's thread, 500 of them held
    up the acks of bots already connected past a second (issue 22).
    """
    organization = credential.organization
    link, warning = await agent_link.resolve(organization, agent)

    def open_session():
        opened = Session.objects.open_for_bot(organization, session_id, link, lifecycle.SERVER_ID)
        return *opened, RedactionRule.redactor_for(organization.pk)

    session, event, redactor = await in_db_thread(open_session, executor=CONNECT_THREAD)
    return session, event, warning, redactor


class IngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    """A bot's stream. Every frame is recorded and answered; only auth, size, rate and caps close it."""

    live_session: LiveSession | None = None
    token_pk: int | None = None
    ranged_acks = False  # the bot asked for {"acks": [[first, last], ...]} (wire.ACKS_PARAM)
    stream = ""  # whose seqs these are (wire.STREAM_PARAM); "" for a bot that names none
    redactor = redaction.NONE  # the organization's (rtvi_monitor/redaction.py), from connect on
    control_version = 0  # the control frames the bot takes (wire.CONTROL_PARAM); 0: none (rtvi_monitor/control.py)

    async def connect(self):
        await self.accept()
        query = _query(self.scope)
        self.ranged_acks = query.get(ACKS_PARAM) == ACKS_RANGES
        self.control_version = control_version(query.get(CONTROL_PARAM))
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        if not SESSION_ID_RE.match(session_id):
            return await self.fail(SESSION_ID_RULE, CLOSE_BAD_REQUEST)
        self.stream = query.get(STREAM_PARAM, "")
        if STREAM_PARAM in query and not _STREAM_ID.match(self.stream):
            return await self.fail(STREAM_RULE, CLOSE_BAD_REQUEST)
        token = bearer_token(dict((k.decode("latin-1").title(), v.decode("latin-1")) for k, v in self.scope["headers"]))
        if not token:
            return await self.fail("Send 'Authorization: Bearer <ingest token>' in the handshake.", CLOSE_BAD_TOKEN)
        credential = await find_credential(token)
        if credential is None:
            return await self.fail("Unknown or revoked ingest token.", CLOSE_BAD_TOKEN)
        held = registry.per_token.get(credential.pk, 0)
        if held >= settings.INGEST_MAX_CONNECTIONS_PER_TOKEN:
            return await self.fail(
                f"This ingest token has {held} bot connections open here, its limit "
                f"(INGEST_MAX_CONNECTIONS_PER_TOKEN={settings.INGEST_MAX_CONNECTIONS_PER_TOKEN}).",
                CLOSE_RATE,
            )
        self.token_pk = credential.pk
        registry.per_token[credential.pk] = held + 1
        registry.connecting += 1
        try:
            session, event, warning, self.redactor = await open_ingest(credential, session_id, query.get("agent"))
            self.epoch = session.ingest_epoch
            self.bucket = TokenBucket(settings.INGEST_RATE_LIMIT, settings.INGEST_RATE_BURST_SECONDS)
            self.bytes = TokenBucket(settings.INGEST_RATE_BYTES, settings.INGEST_RATE_BURST_SECONDS)
            self.writer = writer.get_writer()
            # Should this fail, the sweep sees a session held here with no bot here, and marks it away.
            lifecycle.forget_finishing(session.pk)
            self.live_session = await registry.attach(session)
        finally:
            registry.connecting -= 1
        control.hub.attach(self)  # an operator's request for this session reaches this connection
        if warning:
            await self.reply([{"error": warning, "seq": None}])
        if event:
            await relay.session_changed(session, event)

    async def fail(self, error: str, code: int):
        await self.send(text_data=json.dumps({"error": error, "fatal": True}))
        await self.close(code)

    async def receive(self, text_data=None, bytes_data=None):
        if self.live_session is None:
            return
        try:
            await self.take(text_data if text_data is not None else bytes_data)
        except Exception:
            # Nothing a bot sends may take the socket (or the session) down.
            logger.exception("An ingest frame of session %s could not be handled", self.live_session.session_id)
            await self.reply([{"error": "The dashboard could not handle this frame; it has been logged.", "seq": None}])

    async def take(self, data: str | bytes) -> None:
        received_at = time.time()
        size = len(data) if isinstance(data, bytes) else _utf8_length(data, settings.INGEST_MAX_FRAME_BYTES)
        if size > settings.INGEST_MAX_FRAME_BYTES:
            return await self.fail(
                f"Frame of {size} bytes is over the limit of {settings.INGEST_MAX_FRAME_BYTES}.", CLOSE_TOO_BIG
            )
        raw = data if isinstance(data, str) else data.decode("utf-8", "replace")
        try:
            frame = protocol.parse(raw, max_depth=None)  # each message's depth is judged alone
        except protocol.NotJSON as exc:
            frame = protocol.unparsed(raw, str(exc))  # recorded as received, answered with what is wrong
        if is_control_result(frame):
            return control.hub.result(self, frame)  # the bot's answer to an operator's request, not a message
        frames = frame["batch"] if isinstance(frame, dict) and isinstance(frame.get("batch"), list) else [frame]
        if self.writer.backlog > settings.INGEST_MAX_PENDING:
            # Storage is behind (database down?): refuse rather than grow
            # without bound; the client keeps these unacknowledged and resends.
            seqs = [f.get("seq") for f in frames if isinstance(f, dict) and isinstance(f.get("seq"), int)]
            return await self.reply(
                [
                    {
                        "error": "The dashboard cannot store messages right now; resend later.",
                        "seq": None,
                        "retry": True,
                        "seqs": seqs,
                    }
                ]
            )
        if not self.bytes.take(size):
            return await self.fail(
                f"Over the rate limit of {settings.INGEST_RATE_BYTES} bytes per second (INGEST_RATE_BYTES).", CLOSE_RATE
            )
        if not self.bucket.take(len(frames)):
            return await self.fail(
                f"Over the rate limit of {settings.INGEST_RATE_LIMIT:g} messages per second.", CLOSE_RATE
            )
        immediate, answered = [], set()
        for item in frames:  # inside a batch each item is judged alone
            row, reply = self.live_session.accept(item, received_at, self, self.stream, self.redactor)
            if row is not None:
                self.writer.add(row)
            if reply is not None and reply.get("ack") not in answered:  # one reply per seq per frame
                answered.add(reply.get("ack"))
                immediate.append(reply)
        if immediate:
            await self.reply(immediate)

    async def reply(self, payloads: list[dict]) -> None:
        """Answer the bot: one frame per reply, or, when it asked for ranged acks, its plain acks in one frame.

        The writer calls this once per flush per connection, so a bot with
        ranged acks gets one {"acks": [[first, last], ...]} frame per write
        however many of its messages it stored; a frame per message was a
        large share of the server's time (docs/BENCHMARKS.md, issue 15).
        Warnings and errors always come one frame each.
        """
        acked = []
        for payload in payloads:
            if self.ranged_acks and len(payload) == 1 and "ack" in payload:
                acked.append(payload["ack"])
            else:
                await self.send(text_data=json.dumps(payload))
        if acked:
            await self.send(text_data=json.dumps({"acks": ack_ranges(acked)}, separators=(",", ":")))

    async def disconnect(self, code):
        left_at = timezone.now()
        if self.token_pk is not None:
            registry.per_token[self.token_pk] -= 1
        if self.live_session is not None:
            control.hub.detach(self)
            try:
                await self.writer.flush()
            except Exception:  # the writer keeps the rows and retries; the bot resends what was not acked
                logger.warning("Could not store a disconnecting bot's last messages yet", exc_info=True)
            if registry.detach(self.live_session):
                await lifecycle.bot_left(self.live_session, self.epoch, code, left_at)

    # Browsers' group messages are not for bots; ingest sockets join no group.


def _utf8_length(text: str, limit: int) -> int:
    """The frame's size in bytes (its UTF-8 length); cheap when it cannot be over the limit."""
    if len(text) * 4 <= limit or text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


@database_sync_to_async
def _find_session(scope, session_id: str):
    """The session, when the socket's user may watch it: a member of its organization who sees contents."""
    membership = scope_membership(scope)
    if membership is None or not membership.sees_contents:
        return None, CLOSE_FORBIDDEN
    session = Session.objects.find(membership.organization, session_id)
    return session, (CLOSE_NOT_FOUND if session is None else None)


@database_sync_to_async
def _still_allowed(scope, organization_id, contents: bool) -> bool:
    """Whether the socket's browser may still watch: signed in still, a member of the organization still, and,
    for a session's contents, with a role that sees them."""
    browser_session = scope.get("session")
    key = getattr(browser_session, "session_key", None)
    if key is None or not browser_session.exists(key):  # signed out (or the login expired) since
        return False
    membership = scope_membership(scope)
    if membership is None or membership.organization_id != organization_id:
        return False  # removed, or switched to another organization
    return membership.sees_contents or not contents


class AccessWatch:
    """A browser's right to watch is checked again every BROWSER_ACCESS_CHECK seconds: a member who is
    removed, demoted to viewer or signs out stops receiving within that time (code 4403)."""

    watch_task: asyncio.Task | None = None

    def watch_access(self, organization_id, contents: bool) -> None:
        self.watch_task = asyncio.ensure_future(self._watch(organization_id, contents))

    def stop_watching_access(self) -> None:
        if self.watch_task is not None:
            self.watch_task.cancel()
            self.watch_task = None

    async def _watch(self, organization_id, contents: bool) -> None:
        while True:
            await asyncio.sleep(settings.BROWSER_ACCESS_CHECK)
            try:
                allowed = await _still_allowed(self.scope, organization_id, contents)
            except Exception:  # the database is away: the next round asks again
                logger.warning("Could not check a browser's access again", exc_info=True)
                continue
            if not allowed:
                self.watch_task = None
                await self.stop_relays()  # not one more relay, whenever the browser's disconnect comes
                await self.close(CLOSE_FORBIDDEN)
                return


class SessionConsumer(AccessWatch, LeanDispatchMixin, AsyncWebsocketConsumer):
    """A browser watching one session: a snapshot of the derived state, then the reducer's patches.

    Every stored batch comes as {"type": "batch", "from", "to", "changes",
    "events"}; the page applies the changes when `from` is the version it
    has, and otherwise asks for a new snapshot ({"snapshot": true}). The
    browser acknowledges the version it has rendered ({"ack": version});
    more than BROWSER_MAX_LAG messages behind, the server stops sending and
    says {"type": "resync"}. Server memory stays bounded whatever the browser does.

    Relays come from the writer (`relay.fanout`) and are sent at once; while
    a snapshot is being made they wait in `held` (at most BROWSER_MAX_LAG of
    them, else a fresh snapshot follows), and go after it in order, those it
    already covers skipped (`BrowserStream.take`).
    """

    session: Session | None = None
    group: str | None = None
    held: list[dict] | None = None  # relays that came while a snapshot was being made; None when none is
    again = False  # another snapshot was asked for while one was being made
    since: int | None = None  # the next snapshot's events start after this seq (the page has those before)
    snapshots: asyncio.Task | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.close(CLOSE_FORBIDDEN)
        # A viewer's socket is refused: what it carries is the call's contents (transcript, messages).
        self.session, refused = await _find_session(self.scope, self.scope["url_route"]["kwargs"]["session_id"])
        if refused:
            return await self.close(refused)
        await audit.arecord_read(self.session.organization_id, self.session.session_id, "socket", scope=self.scope)
        self.group = relay.session_group(self.session.pk)
        self.stream = relay.BrowserStream()
        self.held = []  # from now until the first snapshot is out
        metrics.BROWSERS.inc()
        try:
            await relay.fanout.watch(self.group, self)
            await self.accept()
            self.watch_access(self.session.organization_id, contents=True)
            await self.send_snapshots()
        except BaseException:
            # No disconnect follows a connect that raised (Redis down, the database): leave now.
            await self.leave()
            raise

    async def disconnect(self, code):
        await self.leave()

    async def stop_relays(self) -> None:
        await self.leave()

    async def leave(self) -> None:
        """No more relays to this browser (once, whether it connected or not)."""
        self.stop_watching_access()
        if self.session is not None and self.group is not None:
            group, self.group = self.group, None
            metrics.BROWSERS.dec()
            if self.snapshots is not None:
                self.snapshots.cancel()
            await relay.fanout.unwatch(group, self)

    async def send_frame(self, text: str) -> None:
        """One frame, in parts when it is too big for one WebSocket message."""
        for part in relay.parts(text):
            await self.send(text_data=part)

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
                await self.send(text_data=json.dumps({"type": "resync"}))
            elif action == "stalled":
                await self.close(CLOSE_STALLED)
        elif message["type"] == "session.changed":
            kind = "ended" if message["event"] == "ended" else "session"
            await self.send(text_data=relay.to_json({"type": kind, "session": message["session"]}))
            if message["event"] in ("started", "back"):
                # Its bot is back: the state is loaded afresh from what is stored, and a copy
                # made before (an ended state, say) is not the one the next patches continue.
                self.snapshot_soon()

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
        await self.send_frame(
            relay.to_json({"type": "snapshot", "session": session.row(), **snapshot, "events": recent})
        )

    async def receive(self, text_data=None, bytes_data=None):
        request, problem = relay.browser_request(text_data if text_data is not None else bytes_data)
        if problem:
            return await self.send(text_data=json.dumps({"type": "error", "error": problem}))
        if "ack" in request:
            self.stream.acknowledge(request["ack"])
        if request.get("snapshot"):
            self.snapshot_soon(request.get("since"))


def _stored_snapshot(pk: int) -> dict:
    """A snapshot of a session nobody ingests here: its frozen state, or a replay of what is stored."""
    session = Session.objects.get(pk=pk)
    if session.state is not None:
        return {"state": session.state, "bases": {}}
    state, stored = events.load_state(pk)
    return {"state": state.to_dict(), "bases": state.bases(), "upto": max((e["seq"] for e in stored), default=0)}


@database_sync_to_async
def _organization(scope):
    membership = scope_membership(scope)
    return membership.organization if membership else None


@database_sync_to_async
def _live_rows(organization) -> list[dict]:
    sessions = Session.objects.live().filter(organization=organization).select_related("agent")[:500]
    return [s.row() for s in sessions]


class SessionListConsumer(AccessWatch, LeanDispatchMixin, AsyncWebsocketConsumer):
    """A browser watching the organization's sessions start, update and end (relays from relay.fanout).

    It watches before the list is loaded: what changes meanwhile waits in
    `held` and goes right after the {"type": "live"} list, so nothing that
    happens while a page opens is missed.
    """

    group = None
    held: list[dict] | None = None  # relays that came before the list went out

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.close(CLOSE_FORBIDDEN)
        organization = await _organization(self.scope)  # the list's rows are figures: every role sees them
        if organization is None:
            return await self.close(CLOSE_FORBIDDEN)
        self.group = relay.org_group(organization.pk)
        self.held = []
        try:
            await relay.fanout.watch(self.group, self)
            rows = await _live_rows(organization)
            await self.accept()
            self.watch_access(organization.pk, contents=False)
            await self.send(text_data=json.dumps({"type": "live", "sessions": rows, "at": timezone.now().isoformat()}))
            while self.held:
                await self.forward(self.held.pop(0))
            self.held = None
        except BaseException:
            # No disconnect follows a connect that raised: leave now.
            await self.disconnect(1011)
            raise

    async def disconnect(self, code):
        self.stop_watching_access()
        await self.stop_relays()

    async def stop_relays(self) -> None:
        if self.group:
            group, self.group = self.group, None
            await relay.fanout.unwatch(group, self)

    async def receive(self, text_data=None, bytes_data=None):
        pass

    async def deliver(self, message: dict) -> None:
        if self.held is not None:
            self.held.append(message)
        else:
            await self.forward(message)

    async def forward(self, message: dict) -> None:
        # The sessions of one event (several "updated" from one flush of the writer): a frame each.
        for row in message["sessions"]:
            await self.send(text_data=relay.to_json({"type": message["event"], "session": row}))
