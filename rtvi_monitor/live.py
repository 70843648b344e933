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
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
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


MAX_SEQ = 2**53 - 1  # the largest integer a browser's JSON keeps exactly
EARLIEST_SENT_AT = 946_684_800.0  # 2000-01-01: older stamps are a broken clock
SENT_AT_AHEAD = 86_400.0  # a day ahead of our clock at most
BROWSER_PREVIEW = 4096  # characters of a message's JSON sent to browsers; the rest on request


def storable(text: str) -> str:
    """Text any database column takes: NUL and lone surrogates escaped, visibly."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def reply_text(text: str, limit: int = 300) -> str:
    """A reply to a bot never repeats its input at length."""
    return text if len(text) <= limit else text[:limit] + "..."


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
    text: str  # what is stored: the message as JSON, or the raw text
    valid: bool
    error: str
    reply: dict | None  # what the bot is told once it is stored
    replier: Replier | None
    refused: str = ""  # set when the database refused it even escaped: answered, not stored

    def as_event(self) -> dict:
        """The row as browsers get it: long messages as a preview."""
        message = self.message
        if len(self.text) > BROWSER_PREVIEW:
            message = {"truncated": True, "preview": self.text[:BROWSER_PREVIEW], "length": len(self.text)}
        return {
            "seq": self.seq,
            "direction": self.direction,
            "type": self.type,
            "received_at": self.received_at,
            "sent_at": self.sent_at,
            "message": message,
            "valid": self.valid,
            "error": self.error,
        }

    def as_params(self) -> tuple:
        return (
            self.live.pk,
            self.seq,
            self.direction,
            self.type,
            self.received_at,
            self.sent_at,
            self.text,
            self.valid,
            self.error,
        )

    def as_state_event(self) -> StateEvent:
        message = self.message if isinstance(self.message, dict) and self.valid else None
        return StateEvent(
            self.seq, self.direction, event_time(self.sent_at, self.received_at), message, self.valid, self.error
        )

    def quarantine(self, problem: str) -> None:
        """The database refused the row as it was: keep it as an invalid record, escaped and cut."""
        raw = self.text.encode("ascii", "backslashreplace").decode("ascii").replace("\x00", "\\u0000")
        self.text = protocol.truncated(raw)
        self.message = self.text
        self.type = storable(self.type[: protocol.MAX_TYPE])
        self.valid = False
        self.error = reply_text(f"could not be stored as sent ({problem}); stored escaped and cut")
        self.reply = {"error": self.error, "seq": self.seq}


def stored_message(text: str) -> Any:
    """A stored message back as JSON; the raw text as received when it was not (strict, bounded) JSON."""
    try:
        return protocol.parse(text)
    except protocol.NotJSON:
        return text


def event_from_db(event: Event, preview: bool = False) -> dict:
    """An Event row in the shape browsers and the API receive (long messages as a preview if asked)."""
    if preview and len(event.message) > BROWSER_PREVIEW:
        message = {"truncated": True, "preview": event.message[:BROWSER_PREVIEW], "length": len(event.message)}
    else:
        message = stored_message(event.message)
    return {
        "seq": event.seq,
        "direction": event.direction,
        "type": event.type,
        "received_at": event.received_at,
        "sent_at": event.sent_at,
        "message": message,
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
    """The state folded from stored events (event_from_db's shape), in seq order."""
    state = SessionState()
    for e in events:
        message = e["message"] if isinstance(e["message"], dict) and e["valid"] else None
        at = event_time(e["sent_at"], e["received_at"])
        state.apply(StateEvent(e["seq"], e["direction"], at, message, e["valid"], e["error"]))
    return state


def load_events(
    session_pk: int,
    after_seq: int = 0,
    limit: int | None = None,
    newest: bool = False,
    preview: bool = False,
    upto_seq: int | None = None,
) -> list[dict]:
    """Stored events of a session in seq order: after a seq, or the newest `limit`."""
    queryset = Event.objects.filter(session_id=session_pk, seq__gt=after_seq)
    if upto_seq is not None:
        queryset = queryset.filter(seq__lte=upto_seq)
    if newest and limit:
        rows = list(queryset.order_by("-seq")[:limit])
        rows.reverse()
    else:
        rows = list(queryset.order_by("seq")[:limit] if limit else queryset.order_by("seq"))
    return [event_from_db(e, preview) for e in rows]


def _db_text(text: str) -> str:
    return storable(text)


def _db_json(value: Any) -> Any:
    """A JSON value any database's JSON column takes (PostgreSQL's jsonb refuses NUL)."""
    text = json.dumps(value)
    return json.loads(text.replace("\\u0000", "\\\\u0000")) if "\\u0000" in text else value


def session_fields(state: SessionState) -> dict:
    """The Session columns derived from the state: what lists, filters and search read."""
    # Called about once a second per live session: read the state's parts
    # directly rather than building the whole to_dict().
    summary = state.summary()
    latency = summary.get("latency") or {}
    return {
        "protocol_version": _db_text(summary.get("protocol_version") or "")[:32],
        "client_about": _db_json(state.client_about) if isinstance(state.client_about, dict) else {},
        "bot_about": _db_json(state.bot_about) if isinstance(state.bot_about, dict) else {},
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
        "transcript_text": _db_text(
            "\n".join(f"{item['role']}: {item['text']}" for item in state.transcript if item.get("final", True))
        ),
    }


def session_row(session: Session) -> dict:
    """A session as the session list (socket and API) shows it."""
    return {
        "id": session.session_id,
        "agent_id": str(session.agent_id) if session.agent_id else None,
        "agent_name": session.agent.name if session.agent_id and session.agent else None,
        "status": session.status,
        "bot": session.bot_state,
        "away_since": session.bot_left_at.isoformat() if session.bot_left_at and session.bot_state else None,
        "end_reason": session.end_reason,
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


def _hash(text: str) -> int:
    return hash(text)


@dataclass(eq=False)
class LiveSession:
    """A session with a bot connected to this process: its state, and which seqs it has.

    The state folds in only what is stored (Writer._after_store), so it, its
    patches and the database always describe the same messages.
    """

    pk: int
    organization_id: Any
    session_id: str
    state: SessionState
    seen: dict[int, int]  # seq -> hash of what it holds, pending or stored
    max_seq: int = 0
    connections: int = 0
    last_summary_at: float = 0.0
    summary_due: bool = True
    summary: dict = field(default_factory=dict)  # the fields of the next summary update
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

        Returns (row, immediate_reply). A resend of a stored seq with the same
        content gets an immediate ack and no row; everything else is recorded:
        a seq that holds other content is recorded under a new seq, as invalid.
        """
        wrapped = isinstance(frame, dict) and "message" in frame and "seq" in frame
        if not wrapped:
            # Bare RTVI message, or something that is not even JSON: the next seq.
            checked = protocol.check(frame)
            return self._row(
                self.next_seq, protocol.default_direction(checked.type), checked, received_at, None, None, replier
            ), None

        seq = frame["seq"]
        checked = protocol.check(frame["message"])
        if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
            error = (
                f"seq: expected a whole number from 1 to 2**53-1, got {protocol.describe(seq)}; "
                f"recorded under seq {self.next_seq}"
            )
            reply = {"error": error, "seq": None}
            row = self._row(
                self.next_seq,
                protocol.default_direction(checked.type),
                checked,
                received_at,
                None,
                reply,
                replier,
                error,
            )
            return row, None
        checked, text = _stored_form(checked)
        held = self.seen.get(seq)
        if held is not None:
            if held == _hash(text):
                if seq in self.waiting:
                    if replier not in self.waiting[seq]:
                        self.waiting[seq].append(replier)
                    return None, None
                return None, {"ack": seq}
            new_seq = self.next_seq
            error = f"seq {seq} already holds a different message; this one is recorded as invalid under seq {new_seq}"
            row = self._row(
                new_seq,
                protocol.default_direction(checked.type),
                checked,
                received_at,
                None,
                {"error": error, "seq": seq},
                replier,
                error,
            )
            return row, None

        direction = frame.get("direction") or protocol.default_direction(checked.type)
        wrapper_error = ""
        if direction not in DIRECTIONS:
            wrapper_error = f"direction: expected 'to-client' or 'from-client', got {protocol.describe(direction)}"
            direction = protocol.default_direction(checked.type)
        sent_at = frame.get("sent_at")
        if sent_at is not None and not _plausible_time(sent_at, received_at):
            wrapper_error = (
                wrapper_error or f"sent_at: expected epoch seconds near now, got {protocol.describe(sent_at)}"
            )
            sent_at = None
        if not checked.valid or wrapper_error:
            reply = {"error": reply_text(checked.error or wrapper_error), "seq": seq}
        elif not checked.known:
            reply = {"ack": seq, "warning": f"unknown RTVI type {checked.type!r}: stored, not interpreted"}
        else:
            reply = {"ack": seq}
        return self._row(seq, direction, checked, received_at, sent_at, reply, replier, wrapper_error, text), None

    def _row(self, seq, direction, checked, received_at, sent_at, reply, replier, extra_error="", text=None) -> Row:
        if text is None:
            checked, text = _stored_form(checked)
        if reply is None and not checked.valid:
            reply = {"error": reply_text(checked.error), "seq": None}
        self.seen[seq] = _hash(text)
        self.max_seq = max(self.max_seq, seq)
        if reply is not None:
            self.waiting[seq] = [replier]
        valid = checked.valid and not extra_error
        error = checked.error or extra_error
        message = checked.message if checked.message is not None else checked.raw
        self.summary_due = True
        return Row(
            self,
            seq,
            direction,
            storable(checked.type),
            received_at,
            sent_at,
            message,
            text,
            valid,
            error,
            reply,
            replier,
        )


def _stored_form(checked: protocol.Validated) -> tuple[protocol.Validated, str]:
    """What is stored of a message: its JSON, or the raw text (escaped) when it was not JSON.

    A number too big for a float was parsed as infinity: strict JSON has none,
    so such a message is invalid, kept as the text it makes.
    """
    if checked.message is None:
        return checked, storable(checked.raw)
    try:
        return checked, json.dumps(checked.message, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = protocol.truncated(json.dumps(checked.message, separators=(",", ":")))
        error = "a number is out of range (JSON has no Infinity)"
        return protocol.Validated(None, checked.type, False, checked.known, error, text), text


def _plausible_time(value: Any, now: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and EARLIEST_SENT_AT <= value <= now + SENT_AT_AHEAD
    )


class Registry:
    """The sessions with a bot connected to this process, and bot connections per ingest token."""

    def __init__(self):
        self.sessions: dict[int, LiveSession] = {}
        self.per_token: dict[int, int] = {}

    async def attach(self, session: Session) -> LiveSession:
        live = self.sessions.get(session.pk)
        if live is None:
            events = await in_db_thread(load_events, session.pk)
            live = LiveSession(
                pk=session.pk,
                organization_id=session.organization_id,
                session_id=session.session_id,
                state=replay(events),
                seen={e["seq"]: _hash(_stored_text(e)) for e in events},
                max_seq=events[-1]["seq"] if events else 0,
            )
            live.state.take_changes()  # browsers get this state as a snapshot; patches start here
            self.sessions[session.pk] = live
        live.connections += 1
        live.ended = False
        return live

    def detach(self, live: LiveSession) -> bool:
        """One bot connection fewer; True when it was the session's last here."""
        live.connections -= 1
        return live.connections <= 0


def _stored_text(event: dict) -> str:
    message = event["message"]
    return message if isinstance(message, str) else json.dumps(message, separators=(",", ":"))


registry = Registry()


async def relay(group: str, message: dict) -> None:
    """group_send that never breaks the live path.

    A channel layer that is down (Redis restarting) loses this relay; the
    message is already stored, and a browser that sees the gap in versions
    asks for a fresh snapshot.
    """
    try:
        await get_channel_layer().group_send(group, message)
    except Exception:
        logger.warning("Relay to %s failed; browsers will resync from the database", group, exc_info=True)


def to_json(value: Any) -> str:
    """Strict JSON for a browser: no NaN or Infinity ever (they become null)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def batch_message(live: LiveSession, events: list[dict], version_from: int) -> dict:
    """What the writer relays to a session's browsers after a stored batch: the reducer's patch and the events."""
    changes = live.state.take_changes()
    version_to = live.state.version
    text = to_json({"type": "batch", "from": version_from, "to": version_to, "changes": changes, "events": events})
    return {"type": "session.batch", "text": text, "from": version_from, "to": version_to}


async def session_changed(session: Session, event: str) -> None:
    """Tell the session's browsers and the organization's list (event: started, updated, away, back, ended)."""
    row = session_row(session)
    if event in ("away", "back", "ended"):
        await relay(session_group(session.pk), {"type": "session.changed", "event": event, "session": row})
    await relay(org_group(session.organization_id), {"type": "session.list", "event": event, "session": row})


async def end_session(
    live: LiveSession, reason: str, ended_at: float | None = None, only_if_away: bool = False
) -> None:
    """Store everything pending, then mark the session ended with its final state.

    `ended_at` (epoch seconds) defaults to the last message's time. With
    `only_if_away`, only if its bot is still away (no process has it back).
    """
    await get_writer().flush()
    version_from = live.state.version
    at = ended_at if ended_at is not None else (live.state.last_at or time.time())
    live.state.end(at, reason)
    fields = session_fields(live.state)
    fields["state"] = live.state.to_dict()
    await relay(session_group(live.pk), batch_message(live, [], version_from))
    end = datetime.fromtimestamp(at, tz=UTC)

    def store():
        queryset = Session.objects.filter(pk=live.pk, status=Session.Status.LIVE)
        if only_if_away:
            queryset = queryset.filter(bot_left_at__isnull=False)
        ended = queryset.update(status=Session.Status.ENDED, ended_at=end, end_reason=reason, holder="", **fields)
        return Session.objects.select_related("agent").get(pk=live.pk) if ended else None

    session = await in_db_thread(store)
    if live.connections <= 0:
        registry.sessions.pop(live.pk, None)
    if session is None:
        return
    live.ended = True
    await session_changed(session, "ended")


UNAVAILABLE = (OperationalError, InterfaceError)  # the database itself, not the data: hold and retry


class Writer:
    """Batches rows into one INSERT per flush; then folds them into the state, acks bots and relays."""

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
        self.unavailable_since: float | None = None
        self.due: dict[int, LiveSession] = {}  # sessions whose row awaits a summary update

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
                self.unavailable_since = self.unavailable_since or time.time()
                logger.exception("Storing %d RTVI messages failed; retrying", len(self.pending))
                await asyncio.sleep(min(5.0, 0.1 * 2 ** min(self.failures, 6)))
            else:
                self.failures = 0
                self.unavailable_since = None

    async def flush(self) -> None:
        async with self.lock:
            # Summaries come from the state as folded so far (they are 1 Hz figures)
            # and go in the same transaction as the batch: one round trip a flush.
            updates = self._due_summaries()
            if not self.pending and not updates:
                return
            batch, self.pending = self.pending, []
            last_event_at = timezone.now()
            try:
                quarantined, changed = await in_db_thread(self._store, batch, updates, last_event_at)
            except Exception:
                self.pending[:0] = batch  # keep order; nothing was acknowledged
                for live in updates.values():
                    self._mark_due(live)
                raise
            if quarantined:
                logger.warning("%d RTVI messages were stored escaped: the database refused them as sent", quarantined)
            # Fold what is stored into each session's state, in the order it came.
            sessions: dict[int, tuple[LiveSession, int]] = {}
            for row in batch:
                if row.live.pk not in sessions:
                    sessions[row.live.pk] = (row.live, row.live.state.version)
                    self._mark_due(row.live)
                if not row.refused:
                    row.live.state.apply(row.as_state_event())
        await self._after_store(batch, sessions, changed)

    def _mark_due(self, live: LiveSession) -> None:
        live.summary_due = True
        self.due[live.pk] = live

    def _due_summaries(self) -> dict[int, LiveSession]:
        """Sessions whose row is due an update (at most SUMMARIES_PER_FLUSH), their fields computed now."""
        now = time.monotonic()
        updates: dict[int, LiveSession] = {}
        for pk, live in list(self.due.items()):
            if now - live.last_summary_at < settings.SESSION_SUMMARY_INTERVAL:
                continue
            # Sessions that started together would otherwise all be
            # summarised in the same flush, every interval: spread them.
            if len(updates) >= SUMMARIES_PER_FLUSH:
                break
            del self.due[pk]
            live.summary = session_fields(live.state)
            live.last_summary_at, live.summary_due = now, False
            updates[pk] = live
        return updates

    @classmethod
    def _store(cls, batch: list[Row], updates: dict[int, "LiveSession"], last_event_at) -> tuple[int, list[Session]]:
        """Insert the batch and the due summaries. Rows the database refuses for their data are stored escaped, alone.

        Returns how many rows had to be escaped, and the sessions whose rows
        were updated. A database that is down or locked raises, and the batch
        is kept for the next flush.
        """
        fields = {pk: live.summary for pk, live in updates.items()}
        try:
            with transaction.atomic():
                if batch:
                    cls._insert(batch, last_event_at)
                for pk, values in fields.items():
                    Session.objects.filter(pk=pk).update(**values)
            escaped = 0
        except UNAVAILABLE:
            raise
        except Exception:
            logger.warning("A batch of %d RTVI messages was refused; storing row by row", len(batch), exc_info=True)
            escaped = cls._store_alone(batch, last_event_at)
            cls._summaries_alone(fields)
        changed = list(Session.objects.select_related("agent").filter(pk__in=fields)) if fields else []
        return escaped, changed

    @classmethod
    def _store_alone(cls, batch: list[Row], last_event_at) -> int:
        escaped = 0
        for row in batch:
            try:
                with transaction.atomic():
                    cls._insert([row], last_event_at)
                continue
            except UNAVAILABLE:
                raise
            except Exception as exc:
                row.quarantine(type(exc).__name__)
            try:
                with transaction.atomic():
                    cls._insert([row], last_event_at)
                escaped += 1
            except UNAVAILABLE:
                raise
            except Exception as exc:
                # Not even escaped: it cannot be stored, and the bot is told so (nothing else is held up).
                row.refused = f"could not be stored ({type(exc).__name__}); not kept"
                row.reply = {"error": row.refused, "seq": row.seq}
                logger.error("RTVI message %s of session %s could not be stored", row.seq, row.live.session_id)
        return escaped

    @staticmethod
    def _summaries_alone(fields: dict[int, dict]) -> None:
        for pk, values in fields.items():
            try:
                with transaction.atomic():
                    Session.objects.filter(pk=pk).update(**values)
            except UNAVAILABLE:
                raise
            except Exception:
                # The events are stored; a summary is derived, and comes again with the next one.
                logger.warning("The summary of session %s was refused", pk, exc_info=True)

    @classmethod
    def _insert(cls, rows: list[Row], last_event_at) -> None:
        with connection.cursor() as cursor:
            cursor.executemany(cls.INSERT, [row.as_params() for row in rows])
        Session.objects.filter(pk__in={row.live.pk for row in rows}).update(last_event_at=last_event_at)

    async def _after_store(
        self, batch: list[Row], sessions: dict[int, tuple[LiveSession, int]], changed: list[Session]
    ) -> None:
        by_session: dict[int, list[dict]] = {}
        replies: dict[Replier, list[dict]] = {}
        for row in batch:
            events = by_session.setdefault(row.live.pk, [])
            if not row.refused:
                events.append(row.as_event())
            else:
                row.live.seen.pop(row.seq, None)
            for replier in row.live.waiting.pop(row.seq, ()):
                if row.reply is not None:
                    replies.setdefault(replier, []).append(row.reply)
        for replier, payloads in replies.items():
            try:
                await replier.reply(payloads)
            except Exception:  # the bot went away; it resends what was not acknowledged
                logger.debug("Could not acknowledge to a closed ingest socket", exc_info=True)
        for pk, events in by_session.items():
            live, version_from = sessions[pk]
            events.sort(key=lambda e: e["seq"])
            await relay(session_group(pk), batch_message(live, events, version_from))
        for session in changed:
            await session_changed(session, "updated")
        for live, _ in sessions.values():
            if live.state.fatal and not live.ended:
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
        _before_shutdown(writer)
        from rtvi_monitor import lifecycle

        lifecycle.start()
    return writer


def _before_shutdown(writer: Writer) -> None:
    """Under daphne, store what is pending before the reactor stops, and let go of the sessions.

    Whatever is still lost (a crash) was never acknowledged: the bots resend it.
    """
    try:
        from twisted.internet import defer, reactor
    except ImportError:
        return
    if not reactor.running:
        return

    async def stop():
        from rtvi_monitor import lifecycle

        await writer.flush()
        await lifecycle.release()

    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(stop()))
    )
