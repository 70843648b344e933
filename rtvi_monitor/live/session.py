"""A session held by this process, and where each frame's seq is judged.

`LiveSession.accept` judges each frame (validated by rtvi_monitor/core/protocol.py,
its seq checked against what the session holds: live/held.py, a caller's id made a
pseudonym: live/callers.py) and turns it into a `Row`; `ready` numbers it for the
writer (live/writer.py). Both are called by the one way in, live/intake.py. The
state folds in only what is stored (`LiveSession.fold`), so it, its patches and
the database always describe the same messages.

A `LiveSession` changes only through its own methods: the registry connects
and disconnects bots to it, the writer folds stored rows and takes summaries,
the relay takes its patches, the lifecycle ends it. Rows name it by its key
(`Row.session_pk`); the registry finds it by that key.
"""

import copy
from dataclasses import dataclass, field
from typing import Any

from rtvi_dashboard.wire import MAX_SEQ

from rtvi_monitor.core import protocol
from rtvi_monitor.core.redaction import NONE, Redactor
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live.callers import Callers, user_id_of
from rtvi_monitor.live.held import HeldSeqs
from rtvi_monitor.live.joining import Holdback, piece_of
from rtvi_monitor.sessions.events import Replier, Row, content_hash, redact, reply_text, stored_form
from rtvi_monitor.sessions.models import storable, summary_fields

EARLIEST_SENT_AT = 946_684_800.0  # 2000-01-01: older stamps are a broken clock

SENT_AT_AHEAD = 86_400.0  # a day ahead of our clock at most


@dataclass(eq=False)
class LiveSession:
    """A session with a bot connected to this process: its state, and which (stream, seq) pairs it holds.

    Two numberings meet here. A bot numbers its messages within its stream
    (`stream` is what its client names in the ingest URL, "" for a bot that
    names none): those numbers are for acks and resends only (`held`,
    live/held.py). The dashboard numbers what it stores in its own order
    (`Row.seq`, 1, 2, 3... per session): garbage, bare messages and a second
    or restarted client all take the next of those, so nothing a bot sends
    can take another message's place.

    Every change to it is one of its methods: `connect`/`disconnect` (the registry),
    `accept`/`ready` (a message coming in: live/intake.py), `fold`/`stored`/`take_summary`
    (the writer), `take_changes` (the relay), `final_state`/`end` (the lifecycle).
    """

    pk: int
    organization_id: Any
    session_id: str
    state: SessionState
    held: HeldSeqs = field(default_factory=HeldSeqs)
    agent_id: str = ""  # for the metrics' labels
    eval_run: bool = False  # a call an eval run made: counted in no fleet metric (Session.objects.calls)
    max_seq: int = 0  # the dashboard's numbering: the last seq given to a row
    connections: int = 0
    last_summary_at: float = 0.0
    summary: dict = field(default_factory=dict)  # the fields of the next summary update
    usage: dict = field(default_factory=dict)  # the state's usage per model then, for its cost
    ended: bool = False
    callers: Callers = field(default_factory=Callers)  # live/callers.py: pseudonyms, and the keys stored
    # Rows on their way to the writer while a streamed text is held back (live/joining.py), and when they go
    holdback: Holdback = field(default_factory=Holdback)
    hold_timer: Any = None  # live/intake.py's: an asyncio.TimerHandle while rows are held back
    # What is removed from its messages before they are stored: the organization's rules as its newest bot
    # connection read them (rtvi_monitor/core/redaction.py); an operator's actions go through it too.
    redactor: Redactor = NONE

    # --- bots connecting and leaving (the registry) ---

    def connect(self, redactor: Redactor = NONE) -> None:
        """One bot connection more here: the session is live again, whatever ended it before."""
        self.connections += 1
        self.ended = False
        self.redactor = redactor

    def disconnect(self) -> bool:
        """One bot connection fewer; True when it was the last one here."""
        self.connections -= 1
        return self.connections <= 0

    # --- what is stored (the writer) ---

    def fold(self, row: Row) -> None:
        """`row` is stored (or refused even escaped): its seq is taken, and a stored one is folded into the state."""
        if row.seq > self.max_seq:  # renumbered past what another process stored
            self.max_seq = row.seq
        if row.refused:
            return
        self.state.apply(row.as_state_event())
        if row.caller:
            self.callers.linked.add(row.caller)  # stored with this row: the next ones need not carry it

    def stored(self, row: Row) -> None:
        """The writer is done with `row`, which holds its (stream, seq) (stored, or refused): it waits no more."""
        self.held.stored(row)

    def take_summary(self, now: float) -> None:
        """The session row's figures as the state has them now, for the writer's next summary update."""
        self.summary = summary_fields(self.state)
        self.usage = {model: dict(use) for model, use in self.state.usage.items()}
        self.last_summary_at = now

    # --- browsers (the relay) ---

    def take_changes(self) -> tuple[list, int]:
        """The reducer's patch since the last one taken, and the state's version after it."""
        changes = self.state.take_changes()
        return changes, self.state.version

    # --- its end (the lifecycle) ---

    def final_state(self, shared: bool) -> tuple[SessionState, int | None]:
        """The state to end, and the version it is ended from when that is this very state.

        A `shared` session (a bot's, which browsers follow) gives a copy: it ends
        for real only if the database says so, under the writer's lock (`end`).
        One loaded for its end alone gives its own state, ended in place
        (copying it was most of a sweep's time).
        """
        if shared:
            return copy.deepcopy(self.state), None
        return self.state, self.state.version

    def end(self, at: float, reason: str, kind: str, ended_from: int | None) -> int:
        """The session ended: its state says so (unless it was ended in place from `ended_from`).
        Returns the version its browsers' last patch starts from."""
        if ended_from is None:
            ended_from = self.state.version
            self.state.end(at, reason, kind)
        self.ended = True
        return ended_from

    # --- a message coming in (live/intake.py) ---

    def accept(
        self,
        frame: Any,
        received_at: float,
        replier: Replier,
        stream: str = "",
        redactor: Redactor = NONE,
        shallow: bool = False,
    ) -> tuple[Row | None, dict | None]:
        """Turn one frame (a wrapper, a bare RTVI message, or garbage) from `stream` into a Row.

        `frame` is the parsed JSON, or the raw text when it was not JSON;
        validation keeps the text of whatever is invalid. `shallow`: the frame's
        text was too short in brackets to nest past protocol.MAX_DEPTH (protocol.shallow).

        Returns (row, immediate_reply). A resend of a (stream, seq) that is
        stored with the same content gets an immediate ack and no row; one
        still pending is acked when it is stored. Everything else is recorded
        under the dashboard's next seq (given in `ready`): a (stream, seq) that
        holds other content is recorded as invalid and reported, and keeps what it held.

        Before anything else sees it, `redactor` (the organization's: rtvi_monitor/core/redaction.py) removes
        what it finds from the message's texts; what is stored, compared, relayed and folded is that. A row's
        text that is one piece of a stream (an LLM's token...) is left for its stream's redaction (`ready`),
        which sees it joined to the pieces before and after it.
        """
        caller = ""
        wrapped = isinstance(frame, dict) and "seq" in frame
        piece = piece_of(frame.get("message") if wrapped else frame) if redactor else None
        if user_id := user_id_of(frame):
            # A caller's id is theirs (often their number): stored, relayed and shown as a pseudonym only.
            frame, caller = self.callers.pseudonymous(frame, user_id, self.organization_id)
        # The pseudonym is the dashboard's, not the bot's words: redaction leaves it (it may be all digits).
        keep = ("user_id",) if caller else ()
        if piece is not None:
            keep = (*keep, "text")
        if wrapped and "message" in frame:
            row, reply = self._wrapped(frame, received_at, replier, stream, redactor, keep, shallow)
            if row is None:
                return None, reply
        else:
            row = self._bare(frame, received_at, stream, redactor, keep, shallow)
        if row.reply is not None:
            row.add_replier(replier)
        if row.error and redactor:
            row.error = redactor.text(row.error, {})  # what is wrong may quote what the bot sent
        if piece is not None and type(row.message) is dict:
            # Joined whatever its wrapper's mistakes (sent_at in ms, a bad direction): its words are the same.
            row.piece = piece
        if caller and caller not in self.callers.linked:
            row.caller = caller  # the writer's fold adds it to `linked` once the row is stored
        return row, None

    def _bare(self, frame: Any, received_at: float, stream: str, redactor: Redactor, keep: tuple, shallow: bool) -> Row:
        """A bare RTVI message, or something that is not even JSON: stored in the dashboard's order."""
        checked, redacted = redact(protocol.check(frame, shallow), redactor, keep)
        checked, text = stored_form(checked)
        direction = protocol.default_direction(checked.type)
        row = _row(self.pk, stream, None, direction, checked, received_at, None, "", text, redacted)
        if not checked.valid:
            row.reply = {"error": reply_text(checked.error), "seq": None}
        return row

    def _wrapped(self, frame: dict, received_at, replier, stream, redactor, keep, shallow):
        """A message in the bot package's wrapper ({"seq", "message", "direction", "sent_at"}): (row, None), or
        (None, the reply at once) for a resend of what its (stream, seq) holds."""
        seq = frame["seq"]
        checked, redacted = redact(protocol.check(frame["message"], shallow), redactor, keep)
        checked, text = stored_form(checked)
        if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
            error = f"seq: expected a whole number from 1 to 2**53-1, got {protocol.describe(seq)}; recorded without it"
            direction = protocol.default_direction(checked.type)
            row = _row(self.pk, stream, None, direction, checked, received_at, None, error, text, redacted)
            row.reply = {"error": error, "seq": None}
            return row, None
        digest = content_hash(text)
        held = self.held.get(stream, seq)
        if held is not None:
            if self.held.same(held, digest, checked.message):
                pending = self.held.pending.get((stream, seq))
                if pending is not None:
                    pending.add_replier(replier)  # acked when it is stored
                    return None, None
                return None, {"ack": seq}
            error = f"seq {seq} already holds a different message; this one is recorded as invalid beside it"
            direction = protocol.default_direction(checked.type)
            row = _row(self.pk, stream, seq, direction, checked, received_at, None, error, text, redacted)
            row.reply = {"error": error, "seq": seq}
            return row, None

        direction = frame.get("direction") or protocol.default_direction(checked.type)
        wrapper_error = ""
        if direction not in protocol.DIRECTIONS:
            wrapper_error = f"direction: expected 'to-client' or 'from-client', got {protocol.describe(direction)}"
            direction = protocol.default_direction(checked.type)
        sent_at = frame.get("sent_at")
        if sent_at is not None and not _plausible_time(sent_at, received_at):
            wrapper_error = (
                wrapper_error or f"sent_at: expected epoch seconds near now, got {protocol.describe(sent_at)}"
            )
            sent_at = None
        row = _row(self.pk, stream, seq, direction, checked, received_at, sent_at, wrapper_error, text, redacted)
        if not checked.valid or wrapper_error:
            row.reply = {"error": reply_text(checked.error or wrapper_error), "seq": seq}
        elif not checked.known:
            row.reply = {"ack": seq, "warning": f"unknown RTVI type {checked.type!r}: stored, not interpreted"}
        else:
            row.reply = {"ack": seq}
        self.held.hold(stream, seq, digest, row)
        return row, None

    def ready(self, row: Row, redactor: Redactor) -> list[Row]:
        """The rows the writer may store now, `row` in (live/joining.py): `row` alone unless a piece waits.

        Each is numbered as it leaves (`Row.seq`, the dashboard's order), so seqs follow the order of storage."""
        return self._numbered(self.holdback.take(row, row.piece, redactor))

    def expired(self, now: float, wait: float) -> list[Row]:
        """Rows held back `wait` seconds or more, numbered, for the writer."""
        return self._numbered(self.holdback.expired(now, wait))

    def release_all(self) -> list[Row]:
        """Every row held back, numbered, for the writer (its bot is leaving)."""
        return self._numbered(self.holdback.release_all())

    def _numbered(self, rows: list[Row]) -> list[Row]:
        for row in rows:
            self.max_seq += 1
            row.seq = self.max_seq
        return rows


def _row(session_pk, stream, bot_seq, direction, checked, received_at, sent_at, extra_error, text, redacted) -> Row:
    """A row, numbered when it leaves for the writer (`ready`); `checked` and `text` as stored_form() made them."""
    return Row(
        session_pk,
        0,
        direction,
        storable(checked.type)[: protocol.MAX_TYPE],
        received_at,
        sent_at,
        checked.message if checked.message is not None else checked.raw,
        text,
        checked.valid and not extra_error,
        checked.error or extra_error,
        None,
        stream=stream,
        bot_seq=bot_seq,
        redacted=redacted,
    )


def _plausible_time(value: Any, now: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and EARLIEST_SENT_AT <= value <= now + SENT_AT_AHEAD
    )
