"""WebSocket consumers: they authenticate, and move frames between sockets and the live path.

- `IngestConsumer` (`/ws/ingest/<session_id>/`): a bot streams its RTVI messages.
- `SessionConsumer` (`/ws/sessions/<session_id>/`): a browser watches one session.
- `SessionListConsumer` (`/ws/sessions/`): a browser watches the live session list.

What a bot may send and how it is answered is live/admission.py's; what a browser
watching a session is sent, live/snapshots.py's; the rest of the live path is
under rtvi_monitor/live/ (its __init__ draws it).
"""

import asyncio
import importlib.metadata
import json
import logging
import re
import time
from urllib.parse import parse_qs

from autobahn.exception import Disconnected
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
    CLOSE_TOO_BIG,
    CONTROL_PARAM,
    STREAM_ID_RE,
    STREAM_PARAM,
    TAG_PARAMS,
    TAG_RE,
    TAG_RULE,
    control_version,
    is_control_result,
)

from dashboard.access import policy as access
from dashboard.access.auth import bearer_token, scope_actor
from dashboard.org import audit
from dashboard.server import daphne_tuning
from rtvi_monitor.core.protocol import SESSION_ID_RE
from rtvi_monitor.live import control, intake, lifecycle, process, relay
from rtvi_monitor.live.admission import Admission
from rtvi_monitor.live.dbthread import CONNECT_THREAD, in_db_thread
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.live.registry import registry
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.live.snapshots import SessionFeed
from rtvi_monitor.live.start import find_credential, open_ingest
from rtvi_monitor.sessions import metrics
from rtvi_monitor.sessions.models import Session

REVOKED = "This ingest token was revoked: the bot must be given a new one to connect again."
SESSION_ID_RULE = "session id: use 1-100 characters of A-Z a-z 0-9 _ . : -, not only dots"
STREAM_RULE = "stream: use 1-64 characters of A-Z a-z 0-9 _ . : -"
# The operators' actions are stored on the dashboard's own stream (live/control.py), and only what is stored
# there is read as an operator's (core/reducer/operators.py): no bot may name it.
RESERVED_STREAM_RULE = f"stream: {control.CONTROL_STREAM!r} is the dashboard's own; name another"

logger = logging.getLogger(__name__)

LIST_ROWS_PER_FRAME = 500  # a list row is ~0.5 KB of JSON: a frame well under daphne's 1 MiB
_STREAM_ID = re.compile(STREAM_ID_RE)
_TAG = re.compile(TAG_RE)


def tags_of(query: dict[str, str]) -> tuple[dict[str, str], str]:
    """The tags a bot named in its ingest URL (wire.TAG_PARAMS: its deployment, its eval run and scenario), or
    what is wrong with one."""
    for name in TAG_PARAMS:
        if name in query and not _TAG.match(query[name]):
            return {}, f"{name}: {TAG_RULE}"
    return {name: query[name] for name in TAG_PARAMS if name in query}, ""


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
    - A frame sent as the other end leaves is dropped, not raised: daphne (autobahn) raises
      `Disconnected` for a socket already closing whose disconnect has not reached the consumer
      yet (a browser that left while its snapshot was being made), and the consumer's
      `disconnect` follows anyway. It was logged as a crash of the application.

    The first two replace Channels' own consumer loop, so they are made only on the Channels version they
    were written for (WRITTEN_FOR_CHANNELS, what requirements.txt pins): on any other, Channels' own loop
    and dispatch, and one warning.
    """

    WRITTEN_FOR_CHANNELS = "4.3.2"
    lean: bool | None = None  # whether the installed Channels is that one: read at the first socket

    @staticmethod
    def channels_version() -> str | None:
        try:
            return importlib.metadata.version("channels")
        except importlib.metadata.PackageNotFoundError:
            return None

    @classmethod
    def lean_dispatch(cls) -> bool:
        if LeanDispatchMixin.lean is None:
            found = cls.channels_version()
            LeanDispatchMixin.lean = found == cls.WRITTEN_FOR_CHANNELS
            if not LeanDispatchMixin.lean:
                logger.warning(
                    "Channels' own consumer dispatch: LeanDispatchMixin was written for channels %s, found %s",
                    cls.WRITTEN_FOR_CHANNELS,
                    found or "none installed",
                )
        return LeanDispatchMixin.lean

    async def __call__(self, scope, receive, send):
        async def send_while_open(message):
            try:
                await send(message)
            except Disconnected:
                logger.debug("A %s frame to a socket already closing was dropped", message.get("type"))

        if not self.lean_dispatch():
            return await super().__call__(scope, receive, send_while_open)
        self.scope = scope
        self.base_send = send_while_open
        self.channel_layer = None
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message):
        if not self.lean:
            return await super().dispatch(message)
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


def _active_tokens(pks: list[int]) -> set[int]:
    return set(IngestToken.objects.active().filter(pk__in=pks).values_list("pk", flat=True))


class TokenWatch:
    """The ingest tokens this process's bots stream with, checked again every BROWSER_ACCESS_CHECK seconds
    (the browsers' interval): a bot whose token was revoked (or deleted) since it connected gets a fatal
    error frame and CLOSE_BAD_TOKEN, one of wire.FATAL_CLOSE_CODES: the bot package logs the refusal and
    backs off (30 s, not 0.2 s), and any later try is refused at connect.

    One query a round for every token in use in this process, not a task and a query per socket: a thousand
    bots share a few tokens, and a round costs one indexed lookup of those few primary keys however many
    sockets hold them. A socket joins at connect and leaves at disconnect; nothing is added per message.
    """

    def __init__(self):
        self.sockets: dict[int, set] = {}  # token pk -> the ingest consumers streaming with it
        self.task: asyncio.Task | None = None
        self.loop = None

    def hold(self, consumer, token_pk: int) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a new event loop (a test's): what the last one held is gone with it
            self.loop, self.sockets, self.task = loop, {}, None
        self.sockets.setdefault(token_pk, set()).add(consumer)
        if self.task is None:
            self.task = loop.create_task(self._watch())

    def release(self, consumer, token_pk: int) -> None:
        held = self.sockets.get(token_pk)
        if held is None:
            return
        held.discard(consumer)
        if not held:
            del self.sockets[token_pk]
        if not self.sockets and self.task is not None:
            self.task.cancel()
            self.task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(settings.BROWSER_ACCESS_CHECK)
            held = list(self.sockets)
            if not held:  # the last ones were closed here: the next bot to connect starts a new round
                self.task = None
                return
            try:
                active = await in_db_thread(_active_tokens, held, executor=CONNECT_THREAD)
            except Exception:  # the database is away: the next round asks again
                logger.warning("Could not check the ingest tokens in use again", exc_info=True)
                continue
            for token_pk in held:
                if token_pk not in active:
                    for consumer in list(self.sockets.pop(token_pk, ())):
                        try:
                            await consumer.fail(REVOKED, CLOSE_BAD_TOKEN)
                        except Exception:  # one socket's failure must not keep the others open
                            logger.warning("Could not close a revoked token's socket", exc_info=True)


token_watch = TokenWatch()


def _query(scope) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("utf-8", "replace")).items()}


class IngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    """A bot's stream. Every frame is recorded and answered; only auth, size, rate and caps close it."""

    live_session: LiveSession | None = None
    admission: Admission | None = None  # its limits and how it is answered (live/admission.py)
    stream = ""  # whose seqs these are (wire.STREAM_PARAM); "" for a bot that names none
    control_version = 0  # the control frames the bot takes (wire.CONTROL_PARAM); 0: none (live/control.py)
    token_pk: int | None = None  # the ingest token it streams with, watched by token_watch
    # Set by fail(): the socket is closing (revoked token, rate, size), and nothing more it sends is taken. A
    # client that ignores the close frame can go on sending until the close handshake times out.
    closing = False
    access_action = "ingest"  # dashboard/access/policy.py: its ingest token

    async def connect(self):
        await self.accept()
        query = _query(self.scope)
        self.control_version = control_version(query.get(CONTROL_PARAM))
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        if not SESSION_ID_RE.match(session_id):
            return await self.fail(SESSION_ID_RULE, CLOSE_BAD_REQUEST)
        self.stream = query.get(STREAM_PARAM, "")
        if STREAM_PARAM in query and not _STREAM_ID.match(self.stream):
            return await self.fail(STREAM_RULE, CLOSE_BAD_REQUEST)
        if self.stream == control.CONTROL_STREAM:
            return await self.fail(RESERVED_STREAM_RULE, CLOSE_BAD_REQUEST)
        tags, wrong = tags_of(query)
        if wrong:
            return await self.fail(wrong, CLOSE_BAD_REQUEST)
        token = bearer_token(dict((k.decode("latin-1").title(), v.decode("latin-1")) for k, v in self.scope["headers"]))
        if not token:
            return await self.fail("Send 'Authorization: Bearer <ingest token>' in the handshake.", CLOSE_BAD_TOKEN)
        credential = await find_credential(token)
        if access.refusal(access.Actor(ingest_token=credential), self.access_action):
            return await self.fail("Unknown or revoked ingest token.", CLOSE_BAD_TOKEN)
        admission = Admission(ranged_acks=query.get(ACKS_PARAM) == ACKS_RANGES)
        refused = admission.hold_token(credential.pk)
        if refused:
            return await self.fail(refused, CLOSE_RATE)
        self.admission = admission
        registry.connecting += 1
        try:
            session, event, warning, redactor = await open_ingest(credential, session_id, query.get("agent"), tags)
            self.epoch = session.ingest_epoch
            self.writer = process.start()
            # The writer's batch of sends (a flush's relays and acks) goes out through these sockets: under
            # daphne with its tuning, each connection's frames in one send; stock, or on another server, a no-op.
            self.writer.sends_together = daphne_tuning.corked
            # Should this fail, the sweep sees a session held here with no bot here, and marks it away.
            self.live_session = await registry.attach(session, redactor)
        finally:
            registry.connecting -= 1
        self.token_pk = credential.pk
        token_watch.hold(self, credential.pk)
        control.hub.attach(self, session.pk)  # an operator's request for this session reaches this connection
        if warning:
            await self.reply([{"error": warning, "seq": None}])
        if event:
            await relay.session_changed(session, event)

    async def fail(self, error: str, code: int):
        self.closing = True
        await self.send(text_data=json.dumps({"error": error, "fatal": True}))
        await self.close(code)

    async def receive(self, text_data=None, bytes_data=None):
        if self.live_session is None or self.closing:
            return
        try:
            await self.take(text_data if text_data is not None else bytes_data)
        except Exception:
            # Nothing a bot sends may take the socket (or the session) down.
            logger.exception("An ingest frame of session %s could not be handled", self.live_session.session_id)
            await self.reply([{"error": "The dashboard could not handle this frame; it has been logged.", "seq": None}])

    async def take(self, data: str | bytes) -> None:
        received_at = time.time()
        admission = self.admission
        size, too_big = admission.size(data)
        if too_big:
            return await self.fail(too_big, CLOSE_TOO_BIG)
        frame = admission.parse(data)
        if is_control_result(frame):
            return control.hub.result(self, frame)  # the bot's answer to an operator's request, not a message
        frames = admission.items(frame)
        busy = admission.busy(frames, self.writer.backlog)
        if busy is not None:
            return await self.reply([busy])
        over = admission.over_rate(size, len(frames))
        if over:
            return await self.fail(over, CLOSE_RATE)
        # The one way in (live/intake.py): judged, redacted, numbered and handed to the writer.
        replies = intake.take_in(
            self.writer, self.live_session, frames, received_at, self, self.stream, admission.shallow(data)
        )
        immediate = admission.once_per_seq(replies)
        if immediate:
            await self.reply(immediate)

    async def reply(self, payloads: list[dict]) -> None:
        """Answer the bot (the writer calls this once per write per connection; live/admission.py says how)."""
        for text in self.admission.frames(payloads):
            await self.base_send({"type": "websocket.send", "text": text})  # self.send(text_data=...), less two awaits

    async def disconnect(self, code):
        left_at = timezone.now()
        if self.admission is not None:
            self.admission.release_token()
        if self.token_pk is not None:
            token_watch.release(self, self.token_pk)
        if self.live_session is not None:
            control.hub.detach(self, self.live_session.pk)
            intake.let_go(self.writer, self.live_session)  # rows held back, judged as they stand: no more is coming
            try:
                await self.writer.flush()
            except Exception:  # the writer keeps the rows and retries; the bot resends what was not acknowledged
                logger.warning("Could not store a disconnecting bot's last messages yet", exc_info=True)
            if registry.detach(self.live_session):
                await lifecycle.bot_left(self.live_session, self.epoch, code, left_at)

    # Browsers' group messages are not for bots; ingest sockets join no group.


@database_sync_to_async
def _find_session(scope, session_id: str):
    """The session, when the socket's user may watch it: `sessions.contents` in its organization."""
    actor = scope_actor(scope)
    if access.refusal(actor, SessionConsumer.access_action):
        return None, CLOSE_FORBIDDEN
    session = Session.objects.find(actor.membership.organization, session_id)
    return session, (CLOSE_NOT_FOUND if session is None else None)


@database_sync_to_async
def _still_allowed(scope, organization_id, action: str) -> bool:
    """Whether the socket's browser may still watch: signed in still, and the action still allowed in the
    organization (not removed, switched to another organization, nor demoted below it)."""
    browser_session = scope.get("session")
    key = getattr(browser_session, "session_key", None)
    if key is None or not browser_session.exists(key):  # signed out (or the login expired) since
        return False
    return access.allows(scope_actor(scope), action, organization_id)


class AccessWatch:
    """A browser's right to watch is checked again every BROWSER_ACCESS_CHECK seconds: a member who is
    removed, demoted to viewer or signs out stops receiving within that time (code 4403)."""

    watch_task: asyncio.Task | None = None

    def watch_access(self, organization_id) -> None:
        self.watch_task = asyncio.ensure_future(self._watch(organization_id, self.access_action))

    def stop_watching_access(self) -> None:
        if self.watch_task is not None:
            self.watch_task.cancel()
            self.watch_task = None

    async def _watch(self, organization_id, action: str) -> None:
        while True:
            await asyncio.sleep(settings.BROWSER_ACCESS_CHECK)
            try:
                allowed = await _still_allowed(self.scope, organization_id, action)
            except Exception:  # the database is away: the next round asks again
                logger.warning("Could not check a browser's access again", exc_info=True)
                continue
            if not allowed:
                self.watch_task = None
                await self.stop_relays()  # not one more relay, whenever the browser's disconnect comes
                await self.close(CLOSE_FORBIDDEN)
                return


class SessionConsumer(AccessWatch, LeanDispatchMixin, AsyncWebsocketConsumer):
    """A browser watching one session: a snapshot of the derived state, then the reducer's patches
    (the protocol is live/snapshots.py's `SessionFeed`, which the fan-out delivers to)."""

    access_action = "sessions.contents"  # dashboard/access/policy.py: what it carries is the call's contents
    session: Session | None = None
    group: str | None = None
    feed: SessionFeed | None = None

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
        self.feed = SessionFeed(self.session, self._send_text, self.close)  # relays wait until the snapshot is out
        metrics.BROWSERS.inc()
        try:
            await relay.fanout.watch(self.group, self.feed)
            await self.accept()
            self.watch_access(self.session.organization_id)
            await self.feed.send_snapshots()
        except BaseException:
            # No disconnect follows a connect that raised (Redis down, the database): leave now.
            await self.leave()
            raise

    async def _send_text(self, text: str) -> None:
        await self.send(text_data=text)

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
            self.feed.cancel()
            await relay.fanout.unwatch(group, self.feed)

    async def receive(self, text_data=None, bytes_data=None):
        if self.group is None:
            # Left (its member lost access, or it is closing): a page that ignores the close frame can go on
            # asking until the close handshake times out; a snapshot then would be the call's contents.
            return
        await self.feed.request(text_data if text_data is not None else bytes_data)


@database_sync_to_async
def _organization(scope):
    actor = scope_actor(scope)
    return None if access.refusal(actor, SessionListConsumer.access_action) else actor.membership.organization


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

    access_action = "sessions.figures"  # dashboard/access/policy.py: the list's rows are figures
    group = None
    held: list[dict] | None = None  # relays that came before the list went out
    pinged = None  # the organization whose change pings this page takes instead of rows (?changes=1)

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.close(CLOSE_FORBIDDEN)
        organization = await _organization(self.scope)
        if organization is None:
            return await self.close(CLOSE_FORBIDDEN)
        if parse_qs(self.scope.get("query_string", b"").decode()).get("changes") == ["1"]:
            return await self._pings_only(organization)
        self.group = relay.org_group(organization.pk)
        self.held = []
        try:
            await relay.fanout.watch(self.group, self)
            rows = await _live_rows(organization)
            await self.accept()
            self.watch_access(organization.pk)
            await self.send(text_data=json.dumps({"type": "live", "sessions": rows, "at": timezone.now().isoformat()}))
            while self.held:
                await self.forward(self.held.pop(0))
            self.held = None
        except BaseException:
            # No disconnect follows a connect that raised: leave now.
            await self.disconnect(1011)
            raise

    async def _pings_only(self, organization) -> None:
        """?changes=1 (the Overview): no rows, only {"type": "changed"} when the organization's sessions changed,
        at most every OVERVIEW_PING_SECONDS (relay.ChangePings), and once now, for what changed while the page
        was opening."""
        self.pinged = organization.pk
        await relay.pings.join(organization.pk, self.send)
        try:
            await self.accept()
            self.watch_access(organization.pk)
            await self.send(text_data=relay.PING)
        except BaseException:
            await self.disconnect(1011)
            raise

    async def disconnect(self, code):
        self.stop_watching_access()
        await self.stop_relays()

    async def stop_relays(self) -> None:
        if self.group:
            group, self.group = self.group, None
            await relay.fanout.unwatch(group, self)
        if self.pinged is not None:
            organization_id, self.pinged = self.pinged, None
            await relay.pings.leave(organization_id, self.send)

    async def receive(self, text_data=None, bytes_data=None):
        pass

    async def deliver(self, message: dict) -> None:
        if self.held is not None:
            self.held.append(message)
        else:
            await self.forward(message)

    async def forward(self, message: dict) -> None:
        if message["event"] == "updated":
            # One flush's summaries in one frame: with 1,000 live sessions each row comes about once a
            # second, and a frame per row was most of what a list's browser cost the server.
            rows = message["sessions"]
            for start in range(0, len(rows), LIST_ROWS_PER_FRAME):  # daphne sends at most 1 MiB a frame
                chunk = rows[start : start + LIST_ROWS_PER_FRAME]
                await self.send(text_data=relay.to_json({"type": "updated", "sessions": chunk}))
            return
        for row in message["sessions"]:
            await self.send(text_data=relay.to_json({"type": message["event"], "session": row}))
