"""A session held by this process, and where each frame's seq is judged.

`LiveSession.accept` judges each frame a bot sends (validated by
rtvi_monitor/core/protocol.py, its seq checked against what the session holds) and
turns it into a `Row` for the writer (live/writer.py). The state folds in only
what is stored (`LiveSession.fold`), so it, its patches and the database always
describe the same messages.

A `LiveSession` changes only through its own methods: the registry connects
and disconnects bots to it, the writer folds stored rows and takes summaries,
the relay takes its patches, the lifecycle ends it.
"""

import copy
from dataclasses import dataclass, field
from typing import Any

from rtvi_dashboard.wire import MAX_SEQ

from rtvi_monitor.core import protocol
from rtvi_monitor.core.redaction import NONE, Redactor
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live.joining import Holdback, piece_of, without_text
from rtvi_monitor.sessions.events import Replier, Row, content_hash, redact, reply_text, stored_form, stored_text
from rtvi_monitor.sessions.models import caller_key, storable, summary_fields

SEEN_WINDOW = 100_000  # bot seqs a stream remembers what they hold
MAX_STREAMS = 256  # streams a session remembers (a bot restart is a new one)
EARLIEST_SENT_AT = 946_684_800.0  # 2000-01-01: older stamps are a broken clock

SENT_AT_AHEAD = 86_400.0  # a day ahead of our clock at most


MAX_CALLERS = 16  # user_id keys cached for one session (a call has one caller, a conference a few)
CALLER_PREFIX = "caller:"  # what a message's user_id becomes: this and the first characters of its key
CALLER_SHOWN = 12


def _user_id(frame: Any) -> str:
    """The `user_id` a message's data names (user-transcription, user-input...), as the bot sent it; or ''."""
    message = frame.get("message") if isinstance(frame, dict) and "seq" in frame else frame
    data = message.get("data") if isinstance(message, dict) else None
    user_id = data.get("user_id") if isinstance(data, dict) else None
    return user_id if isinstance(user_id, str) and 0 < len(user_id) <= 200 else ""


def _with_user_id(frame: Any, user_id: str) -> Any:
    """A copy of the frame whose message's data.user_id is `user_id` (the frame as received is left alone)."""
    if isinstance(frame, dict) and "seq" in frame:
        return {**frame, "message": _with_user_id(frame["message"], user_id)}
    return {**frame, "data": {**frame["data"], "user_id": user_id}}


@dataclass(eq=False)
class LiveSession:
    """A session with a bot connected to this process: its state, and which (stream, seq) pairs it holds.

    Two numberings meet here. A bot numbers its messages within its stream
    (`stream` is what its client names in the ingest URL, "" for a bot that
    names none): those numbers are for acks and resends only. The dashboard
    numbers what it stores in its own order (`Row.seq`, 1, 2, 3... per
    session): garbage, bare messages and a second or restarted client all
    take the next of those, so nothing a bot sends can take another
    message's place.

    The state folds in only what is stored (`fold`, from the writer), so it, its
    patches and the database always describe the same messages. Every change
    to it is one of its methods: `connect`/`disconnect` (the registry),
    `accept` (a bot's frame), `fold`/`take_summary` (the writer), `take_changes`
    (the relay), `final_state`/`end` (the lifecycle).
    """

    pk: int
    organization_id: Any
    session_id: str
    state: SessionState
    # stream -> bot seq -> hash of what it holds (pending or stored), newest streams last; (hash,) of all but
    # the text, for a stored piece of a stream's text (held_seqs)
    seen: dict[str, dict[int, int | tuple[int]]] = field(default_factory=dict)
    agent_id: str = ""  # for the metrics' labels
    max_seq: int = 0  # the dashboard's numbering: the last seq given to a row
    connections: int = 0
    last_summary_at: float = 0.0
    summary: dict = field(default_factory=dict)  # the fields of the next summary update
    usage: dict = field(default_factory=dict)  # the state's usage per model then, for its cost
    ended: bool = False
    # (stream, bot seq) -> its row while it waits to be stored (a resend waits for it too)
    pending: dict[tuple[str, int], Row] = field(default_factory=dict)
    # user_id -> its key (models.caller_keys), for the session's callers; `linked`: the keys stored with it
    callers: dict[str, str] = field(default_factory=dict)
    linked: set[str] = field(default_factory=set)
    # Rows on their way to the writer while a streamed text is held back (live/joining.py)
    holdback: Holdback = field(default_factory=Holdback)

    @property
    def next_seq(self) -> int:
        return self.max_seq + 1

    # --- bots connecting and leaving (the registry) ---

    def connect(self) -> None:
        """One bot connection more here: the session is live again, whatever ended it before."""
        self.connections += 1
        self.ended = False

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
            self.linked.add(row.caller)  # stored with this row: the next ones need not carry it

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

    def accept(
        self,
        frame: Any,
        received_at: float,
        replier: Replier,
        stream: str = "",
        redactor: Redactor = NONE,
        shallow: bool = False,
    ) -> tuple[Row | None, dict | None]:
        """`shallow`: the frame's text was too short in brackets to nest past protocol.MAX_DEPTH (protocol.shallow).

        A row's text that is one piece of a stream (an LLM's token...) is left for its stream's redaction
        (`ready`), which sees it joined to the pieces before and after it. The row is numbered there too.
        """
        caller = ""
        message = frame.get("message") if isinstance(frame, dict) and "seq" in frame else frame
        piece = piece_of(message) if redactor else None
        if user_id := _user_id(frame):
            # A caller's id is theirs (often their number): stored, relayed and shown as a pseudonym only, the
            # same for the same caller; its key goes in with the row until the session has it (erasure by caller).
            caller = self._caller_key(user_id)
            frame = _with_user_id(frame, CALLER_PREFIX + caller[:CALLER_SHOWN])
        # The pseudonym is the dashboard's, not the bot's words: redaction leaves it (it may be all digits).
        keep = ("user_id",) if caller else ()
        if piece is not None:
            keep = (*keep, "text")
        row, reply = self._accept(frame, received_at, replier, stream, redactor, keep, shallow)
        if row is not None:
            if row.error and redactor:
                row.error = redactor.text(row.error, {})  # what is wrong may quote what the bot sent
            if piece is not None and type(row.message) is dict:
                # Joined whatever its wrapper's mistakes (sent_at in ms, a bad direction): its words are the same.
                row.piece = piece
            if caller and caller not in self.linked:
                row.caller = caller  # Writer._flush adds it to `linked` once the row is stored
        return row, reply

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

    def _caller_key(self, user_id: str) -> str:
        key = self.callers.get(user_id)
        if key is None:
            key = caller_key(self.organization_id, user_id)  # the fallbacks' are for finding, not for making
            if len(self.callers) < MAX_CALLERS:
                self.callers[user_id] = key
        return key

    def _accept(
        self,
        frame: Any,
        received_at: float,
        replier: Replier,
        stream: str,
        redactor: Redactor,
        keep: tuple = (),
        shallow: bool = False,
    ):
        """Turn one frame (a wrapper, a bare RTVI message, or garbage) from `stream` into a Row.

        `frame` is the parsed JSON, or the raw text when it was not JSON;
        validation keeps the text of whatever is invalid.

        Returns (row, immediate_reply). A resend of a (stream, seq) that is
        stored with the same content gets an immediate ack and no row; one
        still pending is acked when it is stored. Everything else is recorded
        under the dashboard's next seq: a (stream, seq) that holds other
        content is recorded as invalid and reported, and keeps what it held.

        Before anything else sees it, `redactor` (the organization's: rtvi_monitor/core/redaction.py) removes
        what it finds from the message's texts; what is stored, compared, relayed and folded is that.
        """
        wrapped = isinstance(frame, dict) and "message" in frame and "seq" in frame
        if not wrapped:
            # Bare RTVI message, or something that is not even JSON: stored in the dashboard's order.
            checked, redacted = redact(protocol.check(frame, shallow), redactor, keep)
            checked, text = stored_form(checked)
            row = self._row(
                stream, None, protocol.default_direction(checked.type), checked, received_at, None, "", text
            )
            row.redacted = redacted
            if not checked.valid:
                row.reply = {"error": reply_text(checked.error), "seq": None}
            return self._wait(row, replier), None

        seq = frame["seq"]
        checked, redacted = redact(protocol.check(frame["message"], shallow), redactor, keep)
        if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
            error = f"seq: expected a whole number from 1 to 2**53-1, got {protocol.describe(seq)}; recorded without it"
            checked, text = stored_form(checked)
            row = self._row(
                stream, None, protocol.default_direction(checked.type), checked, received_at, None, error, text
            )
            row.reply = {"error": error, "seq": None}
            row.redacted = redacted
            return self._wait(row, replier), None
        checked, text = stored_form(checked)
        digest = content_hash(text)
        numbered = self.seen.get(stream)
        held = numbered.get(seq) if numbered is not None else None
        if held is not None:
            if held == digest or (type(held) is tuple and held[0] == content_hash(without_text(checked.message))):
                pending = self.pending.get((stream, seq))
                if pending is not None:
                    pending.add_replier(replier)
                    return None, None
                return None, {"ack": seq}
            error = f"seq {seq} already holds a different message; this one is recorded as invalid beside it"
            row = self._row(
                stream, seq, protocol.default_direction(checked.type), checked, received_at, None, error, text
            )
            row.reply = {"error": error, "seq": seq}
            row.redacted = redacted
            return self._wait(row, replier), None

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
        row = self._row(stream, seq, direction, checked, received_at, sent_at, wrapper_error, text)
        row.redacted = redacted
        if not checked.valid or wrapper_error:
            row.reply = {"error": reply_text(checked.error or wrapper_error), "seq": seq}
        elif not checked.known:
            row.reply = {"ack": seq, "warning": f"unknown RTVI type {checked.type!r}: stored, not interpreted"}
        else:
            row.reply = {"ack": seq}
        self._hold(stream, seq, digest, row)
        return self._wait(row, replier), None

    def _hold(self, stream: str, seq: int, digest: int, row: Row) -> None:
        """(stream, seq) holds this row's content from now on (its resends are acked, not stored)."""
        held = self.seen.get(stream)
        if held is None:
            if len(self.seen) >= MAX_STREAMS:
                del self.seen[next(iter(self.seen))]  # the oldest stream: its resends are long past
            held = self.seen[stream] = {}
        held[seq] = digest
        if len(held) > 2 * SEEN_WINDOW:
            # Seqs long past are forgotten (a bot resends only what is recent); memory stays bounded.
            floor = max(held) - SEEN_WINDOW
            self.seen[stream] = {s: h for s, h in held.items() if s > floor}
        row.holds = True
        self.pending[(stream, seq)] = row

    @staticmethod
    def _wait(row: Row, replier: Replier) -> Row:
        if row.reply is not None:
            row.add_replier(replier)
        return row

    def stored(self, row: Row) -> None:
        """The writer is done with `row`, which holds its (stream, seq) (stored, or refused): it waits no more."""
        key = (row.stream, row.bot_seq)
        if self.pending.get(key) is row:
            del self.pending[key]
        if row.refused:
            # Not kept: a resend must be taken, not acked.
            self.seen.get(row.stream, {}).pop(row.bot_seq, None)

    def _row(self, stream, bot_seq, direction, checked, received_at, sent_at, extra_error, text) -> Row:
        """A row, numbered when it leaves for the writer (`ready`); `checked` and `text` as stored_form() made them."""
        valid = checked.valid and not extra_error
        error = checked.error or extra_error
        message = checked.message if checked.message is not None else checked.raw
        return Row(
            self,
            0,
            direction,
            storable(checked.type)[: protocol.MAX_TYPE],
            received_at,
            sent_at,
            message,
            text,
            valid,
            error,
            None,
            stream=stream,
            bot_seq=bot_seq,
        )


def _plausible_time(value: Any, now: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and EARLIEST_SENT_AT <= value <= now + SENT_AT_AHEAD
    )


def held_seqs(stored: list[dict]) -> dict[str, dict[int, int]]:
    """What each (stream, bot seq) holds, from stored events in the order they were stored.

    The first message stored under a (stream, seq) is the one it holds; a
    conflicting one stored later beside it holds nothing.
    """
    seen: dict[str, dict[int, int]] = {}
    for event in stored:
        if event["bot_seq"] is not None:
            message = event["message"]
            if piece_of(message) is not None:
                # A piece's text is stored as its stream's redaction made it, joined to its neighbours, which a
                # resend alone cannot repeat: what it holds is the rest of it (live/joining.py).
                digest = (content_hash(without_text(message)),)
            else:
                digest = content_hash(stored_text(event))
            seen.setdefault(event["stream"], {}).setdefault(event["bot_seq"], digest)
    for stream, held in list(seen.items())[-MAX_STREAMS:]:
        if len(held) > SEEN_WINDOW:
            floor = max(held) - SEEN_WINDOW
            seen[stream] = {s: h for s, h in held.items() if s > floor}
    return dict(list(seen.items())[-MAX_STREAMS:])
