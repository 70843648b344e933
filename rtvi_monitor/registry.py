"""The sessions whose bot is connected to this process: what they hold, and how a frame becomes a row.

`LiveSession.accept` judges each frame a bot sends (validated by
rtvi_monitor/protocol.py, its seq checked against what the session holds) and
turns it into a `Row` for the writer (rtvi_monitor/writer.py). The state folds
in only what is stored, so it, its patches and the database always describe
the same messages.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from rtvi_dashboard.wire import MAX_SEQ

from rtvi_monitor import protocol
from rtvi_monitor.events import Replier, Row, content_hash, load_state, reply_text, stored_form, stored_text
from rtvi_monitor.models import Session, storable
from rtvi_monitor.state import SessionState

DIRECTIONS = ("to-client", "from-client")

SEEN_WINDOW = 100_000  # seqs a session remembers what they hold
EARLIEST_SENT_AT = 946_684_800.0  # 2000-01-01: older stamps are a broken clock

SENT_AT_AHEAD = 86_400.0  # a day ahead of our clock at most


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
    agent_id: str = ""  # for the metrics' labels
    max_seq: int = 0
    connections: int = 0
    last_summary_at: float = 0.0
    summary: dict = field(default_factory=dict)  # the fields of the next summary update
    usage: dict = field(default_factory=dict)  # the state's usage per model then, for its cost
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
        checked, text = stored_form(checked)
        held = self.seen.get(seq)
        if held is not None:
            if held == content_hash(text):
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
            checked, text = stored_form(checked)
        if reply is None and not checked.valid:
            reply = {"error": reply_text(checked.error), "seq": None}
        self.seen[seq] = content_hash(text)
        self.max_seq = max(self.max_seq, seq)
        if len(self.seen) > 2 * SEEN_WINDOW:
            # Seqs long past are forgotten (a bot resends only what is recent); memory stays bounded.
            floor = self.max_seq - SEEN_WINDOW
            self.seen = {s: h for s, h in self.seen.items() if s > floor}
        if reply is not None:
            self.waiting[seq] = [replier]
        valid = checked.valid and not extra_error
        error = checked.error or extra_error
        message = checked.message if checked.message is not None else checked.raw
        return Row(
            self,
            seq,
            direction,
            storable(checked.type)[: protocol.MAX_TYPE],
            received_at,
            sent_at,
            message,
            text,
            valid,
            error,
            reply,
            replier,
        )


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
        self.connecting = 0  # bots between their handshake and attach(): the sweep leaves them be
        self.loading: dict[int, asyncio.Future] = {}

    async def attach(self, session: Session) -> LiveSession:
        """One bot connection more; the session is loaded from what is stored when no bot had it here."""
        live = self.sessions.get(session.pk)
        if live is None:
            # Two connections of one session at once share one load (two copies would hand out the same seqs).
            loading = self.loading.get(session.pk)
            if loading is None:
                loading = self.loading[session.pk] = asyncio.ensure_future(self._load(session))
                try:
                    live = self.sessions[session.pk] = await loading
                finally:
                    del self.loading[session.pk]
            else:
                await loading
                live = self.sessions[session.pk]
        live.connections += 1
        live.ended = False
        return live

    @staticmethod
    async def _load(session: Session) -> LiveSession:
        # Off the writer's thread: a long history must not hold up everyone's acks.
        state, stored = await sync_to_async(load_state, thread_sensitive=False)(session.pk)
        state.take_changes()  # browsers get this state as a snapshot; patches start here
        return LiveSession(
            pk=session.pk,
            organization_id=session.organization_id,
            session_id=session.session_id,
            agent_id=session.agent_key,
            state=state,
            seen={e["seq"]: content_hash(stored_text(e)) for e in stored[-SEEN_WINDOW:]},
            max_seq=max((e["seq"] for e in stored), default=0),
        )

    def detach(self, live: LiveSession) -> bool:
        """One bot connection fewer; True when it was the session's last here.

        The registry holds sessions whose bot is connected here, nothing else:
        a bot that comes back (here or to another process) is loaded afresh
        from what is stored, so no process ever works from a stale copy.
        """
        live.connections -= 1
        if live.connections > 0:
            return False
        if self.sessions.get(live.pk) is live:
            del self.sessions[live.pk]
        return True


registry = Registry()
