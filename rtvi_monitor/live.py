"""The live path inside one server process: sessions being ingested, and the one writer.

A bot's messages go: ingest consumer -> `LiveSession.accept` (validate, assign
seq, fold into the derived state) -> `Writer` (batched insert, one statement
per batch) -> after the batch is stored: acks to the bots, and one relay
message per session to the channel layer for the browsers.

Relaying only what is stored makes the browsers' backfill exact: anything a
browser missed (a full channel, a Redis blip, a reconnect) is in the database
by the time a later sequence number reveals the gap.
"""

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from rtvi_monitor import protocol
from rtvi_monitor.models import Event, Session
from rtvi_monitor.state import Event as StateEvent
from rtvi_monitor.state import SessionState

logger = logging.getLogger(__name__)

# All database work of the live path runs on this one thread: it keeps its
# connection, and SQLite sees a single writer.
DB_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-db")

DIRECTIONS = ("to-client", "from-client")
SUMMARIES_PER_FLUSH = 10


def session_group(session_pk: int) -> str:
    return f"session-{session_pk}"


def org_group(organization_id) -> str:
    return f"org-{organization_id}-sessions"


async def in_db_thread(fn, *args):
    """Run fn(*args) on the live path's database thread.

    The thread keeps its connection open across calls (reopening one per
    flush cost more than the insert); a failed call drops it, so a restarted
    database is reconnected on the next call.
    """

    def call():
        try:
            return fn(*args)
        except Exception:
            # A broken connection (database restart) must not stick.
            connection.close()
            raise

    return await asyncio.get_running_loop().run_in_executor(DB_THREAD, call)


class Replier(Protocol):
    async def reply(self, payloads: list[dict]) -> None: ...


@dataclass(slots=True)
class Row:
    """One received message on its way to the database and the browsers."""

    live: "LiveSession"
    seq: int
    direction: str
    type: str
    received_at: float
    sent_at: float | None
    message: Any  # the parsed message, or the raw text when it was not JSON
    valid: bool
    error: str
    reply: dict | None  # what the bot is told once it is stored
    replier: Replier | None

    def as_event(self) -> dict:
        return {
            "seq": self.seq,
            "direction": self.direction,
            "type": self.type,
            "received_at": self.received_at,
            "sent_at": self.sent_at,
            "message": self.message,
            "valid": self.valid,
            "error": self.error,
        }

    def as_params(self) -> tuple:
        text = self.message if isinstance(self.message, str) else json.dumps(self.message, separators=(",", ":"))
        return (
            self.live.pk,
            self.seq,
            self.direction,
            self.type,
            self.received_at,
            self.sent_at,
            text,
            self.valid,
            self.error,
        )


def stored_message(text: str) -> Any:
    """A stored message back as JSON; the raw text as received when it was not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def event_from_db(event: Event) -> dict:
    """An Event row in the shape browsers and the API receive."""
    return {
        "seq": event.seq,
        "direction": event.direction,
        "type": event.type,
        "received_at": event.received_at,
        "sent_at": event.sent_at,
        "message": stored_message(event.message),
        "valid": event.valid,
        "error": event.error,
    }


def event_time(sent_at: float | None, received_at: float) -> float:
    """When a message happened, for the state: the bot's own clock when it says.

    A bot's client batches messages, so many arrive together; their sent_at
    keeps the real spacing that turn latencies are made of.
    """
    return sent_at if sent_at is not None else received_at


def replay(events: list[dict]) -> SessionState:
    state = SessionState()
    for e in events:
        message = e["message"] if isinstance(e["message"], dict) else None
        at = event_time(e["sent_at"], e["received_at"])
        state.apply(StateEvent(e["seq"], e["direction"], at, message, e["valid"], e["error"]))
    return state


def load_events(session_pk: int, after_seq: int = 0, limit: int | None = None, newest: bool = False) -> list[dict]:
    """Stored events of a session in seq order: after a seq, or the newest `limit`."""
    queryset = Event.objects.filter(session_id=session_pk, seq__gt=after_seq)
    if newest and limit:
        rows = list(queryset.order_by("-seq")[:limit])
        rows.reverse()
    else:
        rows = list(queryset.order_by("seq")[:limit] if limit else queryset.order_by("seq"))
    return [event_from_db(e) for e in rows]


def session_fields(state: SessionState) -> dict:
    """The Session columns derived from the state: what lists, filters and search read."""
    # Called about once a second per live session: read the state's parts
    # directly rather than building the whole to_dict().
    summary = state.summary()
    latency = summary.get("latency") or {}
    return {
        "protocol_version": summary.get("protocol_version") or "",
        "client_about": state.client_about if isinstance(state.client_about, dict) else {},
        "bot_about": state.bot_about if isinstance(state.bot_about, dict) else {},
        "event_count": summary["event_count"],
        "invalid_count": summary["invalid_count"],
        "unknown_count": summary["unknown_count"],
        "error_count": summary["error_count"],
        "turn_count": summary["turn_count"],
        "interruption_count": summary["interruptions"],
        "latency_p50_ms": latency.get("p50"),
        "latency_p95_ms": latency.get("p95"),
        "latency_max_ms": latency.get("max"),
        "fatal": summary["fatal"],
        "transcript_text": "\n".join(
            f"{item['role']}: {item['text']}" for item in state.transcript if item.get("final", True)
        ),
    }


def session_row(session: Session) -> dict:
    """A session as the session list (socket and API) shows it."""
    return {
        "id": session.session_id,
        "agent_id": str(session.agent_id) if session.agent_id else None,
        "agent_name": session.agent.name if session.agent_id and session.agent else None,
        "status": session.status,
        "protocol_version": session.protocol_version,
        "started_at": session.started_at.isoformat(),
        "ended_at": session.ended_at.isoformat() if session.ended_at else None,
        "last_event_at": session.last_event_at.isoformat() if session.last_event_at else None,
        "duration_s": session.duration_seconds,
        "event_count": session.event_count,
        "invalid_count": session.invalid_count,
        "error_count": session.error_count,
        "turn_count": session.turn_count,
        "interruption_count": session.interruption_count,
        "latency": {"p50": session.latency_p50_ms, "p95": session.latency_p95_ms, "max": session.latency_max_ms},
        "fatal": session.fatal,
    }


@dataclass(eq=False)
class LiveSession:
    """A session with a bot connected to this process: its state, and which seqs it has."""

    pk: int
    organization_id: Any
    session_id: str
    state: SessionState
    seen: set[int]
    max_seq: int = 0
    connections: int = 0
    last_summary_at: float = 0.0
    summary_due: bool = True
    ended: bool = False
    # seq -> repliers waiting for it to be stored (a resend of a pending seq)
    waiting: dict[int, list[Replier]] = field(default_factory=dict)

    @property
    def next_seq(self) -> int:
        return self.max_seq + 1

    def accept(self, frame: Any, received_at: float, replier: Replier) -> tuple[Row | None, dict | None]:
        """Turn one frame (a wrapper, a bare RTVI message, or garbage) into a Row.

        `frame` is the parsed JSON, or the raw text when it was not JSON;
        validation keeps the text of whatever is invalid.

        Returns (row, immediate_reply). A duplicate of a stored seq gets an
        immediate ack and no row; everything else is recorded.
        """
        wrapped = isinstance(frame, dict) and "message" in frame and "seq" in frame
        if not wrapped:
            # Bare RTVI message, or something that is not even JSON.
            checked = protocol.validate(frame)
            seq = self.next_seq
            direction = protocol.default_direction(checked.type)
            return self._row(seq, direction, checked, received_at, None, None, replier), None

        seq = frame["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            checked = protocol.validate(frame["message"])
            error = f"seq: expected a positive integer, got {json.dumps(seq)}; recorded under seq {self.next_seq}"
            return self._row(
                self.next_seq,
                protocol.default_direction(checked.type),
                checked,
                received_at,
                None,
                {"error": error, "seq": None},
                replier,
                extra_error=error,
            ), None
        if seq in self.seen:
            if seq in self.waiting:
                self.waiting[seq].append(replier)
                return None, None
            return None, {"ack": seq}

        message = frame["message"]
        checked = protocol.validate(message)
        direction = frame.get("direction") or protocol.default_direction(checked.type)
        wrapper_error = ""
        if direction not in DIRECTIONS:
            wrapper_error = f"direction: expected 'to-client' or 'from-client', got {json.dumps(direction)}"
            direction = protocol.default_direction(checked.type)
        sent_at = frame.get("sent_at")
        if sent_at is not None and (not isinstance(sent_at, (int, float)) or isinstance(sent_at, bool)):
            wrapper_error = wrapper_error or f"sent_at: expected epoch seconds, got {json.dumps(sent_at)}"
            sent_at = None
        if not checked.valid or wrapper_error:
            reply = {"error": checked.error or wrapper_error, "seq": seq}
        elif not checked.known:
            reply = {"ack": seq, "warning": f"unknown RTVI type {checked.type!r}: stored, not interpreted"}
        else:
            reply = {"ack": seq}
        return self._row(seq, direction, checked, received_at, sent_at, reply, replier, wrapper_error), None

    def _row(self, seq, direction, checked, received_at, sent_at, reply, replier, extra_error="") -> Row:
        if reply is None and not checked.valid:
            reply = {"error": checked.error, "seq": None}
        self.seen.add(seq)
        self.max_seq = max(self.max_seq, seq)
        if reply is not None:
            self.waiting[seq] = [replier]
        valid = checked.valid and not extra_error
        error = checked.error or extra_error
        message = checked.message if checked.message is not None else checked.raw
        at = event_time(sent_at, received_at)
        self.state.apply(StateEvent(seq, direction, at, checked.message, valid, error))
        self.summary_due = True
        return Row(self, seq, direction, checked.type, received_at, sent_at, message, valid, error, reply, replier)


class Registry:
    """The sessions with a bot connected to this process."""

    def __init__(self):
        self.sessions: dict[int, LiveSession] = {}
        self.end_timers: dict[int, asyncio.Task] = {}

    async def attach(self, session: Session) -> LiveSession:
        timer = self.end_timers.pop(session.pk, None)
        if timer:
            timer.cancel()
        live = self.sessions.get(session.pk)
        if live is None:
            events = await in_db_thread(load_events, session.pk)
            live = LiveSession(
                pk=session.pk,
                organization_id=session.organization_id,
                session_id=session.session_id,
                state=replay(events),
                seen={e["seq"] for e in events},
                max_seq=events[-1]["seq"] if events else 0,
            )
            self.sessions[session.pk] = live
        live.connections += 1
        live.ended = False
        return live

    def detach(self, live: LiveSession, epoch: int) -> None:
        live.connections -= 1
        if live.connections <= 0:
            self.end_timers[live.pk] = asyncio.get_running_loop().create_task(self._end_after_grace(live, epoch))

    async def _end_after_grace(self, live: LiveSession, epoch: int) -> None:
        await asyncio.sleep(settings.SESSION_END_GRACE)
        self.end_timers.pop(live.pk, None)
        if live.connections <= 0:
            await end_session(live, "bot disconnected", epoch=epoch)


registry = Registry()


async def relay(group: str, message: dict) -> None:
    """group_send that never breaks the live path.

    A channel layer that is down (Redis restarting) loses this relay; the
    message is already stored, and browsers fill the gap from the database
    when the next sequence number reaches them.
    """
    try:
        await get_channel_layer().group_send(group, message)
    except Exception:
        logger.warning("Relay to %s failed; browsers will backfill from the database", group, exc_info=True)


async def end_session(live: LiveSession, reason: str, epoch: int | None = None) -> None:
    """Store everything pending, then mark the session ended with its final state.

    With `epoch`, only if no bot has connected since (in any process).
    """
    await get_writer().flush()
    fields = session_fields(live.state)
    fields["state"] = live.state.to_dict()

    def store():
        queryset = Session.objects.filter(pk=live.pk, status=Session.Status.LIVE)
        if epoch is not None:
            queryset = queryset.filter(ingest_epoch=epoch)
        ended = queryset.update(status=Session.Status.ENDED, ended_at=timezone.now(), end_reason=reason, **fields)
        return Session.objects.select_related("agent").get(pk=live.pk) if ended else None

    session = await in_db_thread(store)
    if live.connections <= 0:
        registry.sessions.pop(live.pk, None)
    if session is None:
        return
    live.ended = True
    row = session_row(session)
    await relay(session_group(live.pk), {"type": "session.ended", "session": row})
    await relay(org_group(live.organization_id), {"type": "session.list", "event": "ended", "session": row})


class Writer:
    """Batches rows into one INSERT per flush; then acks bots and relays to browsers."""

    INSERT = (
        f"INSERT INTO {Event._meta.db_table} "
        "(session_id, seq, direction, type, received_at, sent_at, message, valid, error) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, seq) DO NOTHING"
    )

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pending: list[Row] = []
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task = loop.create_task(self._run())
        self.failures = 0

    @property
    def backlog(self) -> int:
        return len(self.pending)

    def add(self, row: Row) -> None:
        self.pending.append(row)
        if len(self.pending) >= settings.INGEST_FLUSH_ROWS:
            self.wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            # Flush on a fixed cadence (not "interval after the last flush
            # ended"), or sooner when INGEST_FLUSH_ROWS are waiting.
            next_at = max(next_at + settings.INGEST_FLUSH_INTERVAL, loop.time())
            try:
                await asyncio.wait_for(self.wake.wait(), max(0.0, next_at - loop.time()))
            except TimeoutError:
                pass
            self.wake.clear()
            try:
                await self.flush()
            except Exception:
                self.failures += 1
                logger.exception("Storing %d RTVI messages failed; retrying", len(self.pending))
                await asyncio.sleep(min(5.0, 0.1 * 2 ** min(self.failures, 6)))
            else:
                self.failures = 0

    async def flush(self) -> None:
        async with self.lock:
            if not self.pending:
                return
            batch, self.pending = self.pending, []
            now = time.monotonic()
            sessions: dict[int, LiveSession] = {}
            for row in batch:
                sessions[row.live.pk] = row.live
            updates = {}
            for live in sessions.values():
                if live.summary_due and (now - live.last_summary_at >= settings.SESSION_SUMMARY_INTERVAL):
                    updates[live.pk] = session_fields(live.state)
                    # Sessions that started together would otherwise all be
                    # summarised in the same flush, every interval: spread them.
                    if len(updates) >= SUMMARIES_PER_FLUSH:
                        break
            last_event_at = timezone.now()
            try:
                changed = await in_db_thread(self._store, [r.as_params() for r in batch], updates, last_event_at)
            except Exception:
                self.pending[:0] = batch  # keep order; nothing was acknowledged
                raise
            for pk in updates:
                sessions[pk].last_summary_at = now
                sessions[pk].summary_due = False
        await self._after_store(batch, sessions, changed)

    @classmethod
    def _store(cls, params: list[tuple], updates: dict[int, dict], last_event_at) -> list[Session]:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.executemany(cls.INSERT, params)
            Session.objects.filter(pk__in={p[0] for p in params}).update(last_event_at=last_event_at)
            for pk, fields in updates.items():
                Session.objects.filter(pk=pk).update(**fields)
        return list(Session.objects.select_related("agent").filter(pk__in=updates)) if updates else []

    async def _after_store(self, batch: list[Row], sessions: dict[int, LiveSession], changed: list[Session]) -> None:
        by_session: dict[int, list[dict]] = {}
        replies: dict[Replier, list[dict]] = {}
        for row in batch:
            by_session.setdefault(row.live.pk, []).append(row.as_event())
            for replier in row.live.waiting.pop(row.seq, ()):
                if row.reply is not None:
                    replies.setdefault(replier, []).append(row.reply)
        for replier, payloads in replies.items():
            try:
                await replier.reply(payloads)
            except Exception:  # the bot went away; it resends what was not acknowledged
                logger.debug("Could not acknowledge to a closed ingest socket", exc_info=True)
        for pk, events in by_session.items():
            events.sort(key=lambda e: e["seq"])
            text = json.dumps({"type": "events", "events": events}, separators=(",", ":"))
            await relay(
                session_group(pk),
                {"type": "session.events", "text": text, "first_seq": events[0]["seq"], "last_seq": events[-1]["seq"]},
            )
        for session in changed:
            live = sessions[session.pk]
            await relay(
                org_group(live.organization_id),
                {"type": "session.list", "event": "updated", "session": session_row(session)},
            )
            if session.fatal and not live.ended:
                await end_session(live, "fatal error")


_writers: dict[asyncio.AbstractEventLoop, Writer] = {}


def get_writer() -> Writer:
    """The writer of the running event loop (one per server process)."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None or writer.task.done():
        for old in [lp for lp in _writers if lp.is_closed()]:
            del _writers[old]
        writer = _writers[loop] = Writer(loop)
        _flush_before_shutdown(writer)
    return writer


def _flush_before_shutdown(writer: Writer) -> None:
    """Under daphne, store what is pending before the reactor stops.

    Whatever is still lost (a crash) was never acknowledged: the bots resend it.
    """
    try:
        from twisted.internet import defer, reactor
    except ImportError:
        return
    if not reactor.running:
        return
    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(writer.flush()))
    )
