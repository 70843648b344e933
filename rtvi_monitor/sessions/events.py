"""Stored messages: a received message on its way to the database (`Row`), and back out of it.

What is stored of a message is its JSON, or its raw text escaped when it was
not JSON (`stored_form`); browsers get long messages as previews
(`Row.as_event`, `event_from_db(preview=True)`), the whole one on request.
"""

import json
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from dashboard.web.http import all_finite, compact_dumps
from rtvi_monitor.core import protocol
from rtvi_monitor.core.state import Event as StateEvent
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.core.state import replay as fold
from rtvi_monitor.sessions.models import Event, storable


class Replier(Protocol):
    async def reply(self, payloads: list[dict]) -> None: ...


BROWSER_PREVIEW = 4096  # characters of a message's JSON sent to browsers; the rest on request


def reply_text(text: str, limit: int = 300) -> str:
    """A reply to a bot never repeats its input at length."""
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(slots=True)
class Row:
    """One received message on its way to the database and the browsers.

    `session_pk` is its session's key (the Session row's, and the live path's registry's); `seq` is the
    dashboard's own numbering of the session's messages, in the order they are stored; `stream` and `bot_seq`
    are what the bot called it (rtvi_monitor/live/session.py), `bot_seq` None when it gave no usable seq.
    """

    session_pk: int
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
    stream: str = ""
    bot_seq: int | None = None
    redacted: dict | None = None  # what redaction removed from it: {"card": 1}
    caller: str | None = None  # a caller's key (models.caller_keys) first seen in this message, stored beside it
    # The connection to tell once it is stored; a resend's, on another connection, in `more_repliers` (rare:
    # no list per row, which under a full backlog was thousands more objects for the collector to walk).
    replier: Replier | None = None
    more_repliers: list[Replier] | None = None

    def add_replier(self, replier: Replier) -> None:
        if self.replier is None:
            self.replier = replier
        elif replier is not self.replier and replier not in (self.more_repliers or ()):
            self.more_repliers = [*(self.more_repliers or ()), replier]

    @property
    def repliers(self) -> tuple:
        if self.replier is None:
            return ()
        return (self.replier, *self.more_repliers) if self.more_repliers else (self.replier,)

    holds: bool = False  # it is what (stream, bot_seq) holds (a conflicting resend holds nothing)
    piece: str | None = None  # its text as it came, when it is a piece of a stream (live/joining.py)
    refused: str = ""  # set when the database refused it even escaped: answered, not stored

    def _described(self) -> dict:
        """What browsers get of the row besides its message."""
        return {
            "seq": self.seq,
            "stream": self.stream,
            "bot_seq": self.bot_seq,
            "direction": self.direction,
            "type": self.type,
            "received_at": self.received_at,
            "sent_at": self.sent_at,
            "valid": self.valid,
            "error": self.error,
            "redacted": self.redacted,
        }

    def as_event(self) -> dict:
        """The row as browsers get it: long messages as a preview."""
        message = self.message
        if len(self.text) > BROWSER_PREVIEW:
            message = {"truncated": True, "preview": self.text[:BROWSER_PREVIEW], "length": len(self.text)}
        return {**self._described(), "message": message}

    def as_event_json(self) -> str:
        """`as_event()` as strict JSON. A message that is an object is spliced in as stored: `text` is its
        compact strict JSON already (stored_form), and encoding it again was most of a relay's cost."""
        if type(self.message) is not dict or len(self.text) > BROWSER_PREVIEW:
            return compact_dumps(self.as_event())
        head = compact_dumps(self._described())
        return f'{head[:-1]},"message":{self.text}}}'

    def as_params(self) -> tuple:
        return (
            self.session_pk,
            self.seq,
            self.stream,
            self.bot_seq,
            self.direction,
            self.type,
            self.received_at,
            self.sent_at,
            self.text,
            self.valid,
            self.error,
            json.dumps(self.redacted, separators=(",", ":")) if self.redacted else "",
        )

    def as_state_event(self) -> StateEvent:
        message = self.message if isinstance(self.message, dict) and self.valid else None
        return StateEvent(
            self.seq,
            self.direction,
            event_time(self.sent_at, self.received_at),
            message,
            self.valid,
            self.error,
            self.redacted,
            self.stream,
        )

    def quarantine(self, problem: str) -> None:
        """The database refused the row as it was: keep it as an invalid record, escaped and cut."""
        raw = self.text.encode("ascii", "backslashreplace").decode("ascii").replace("\x00", "\\u0000")
        self.text = protocol.truncated(raw)
        self.message = self.text
        self.type = storable(self.type[: protocol.MAX_TYPE])
        self.valid = False
        self.error = reply_text(f"could not be stored as sent ({problem}); stored escaped and cut")
        self.reply = {"error": self.error, "seq": self.bot_seq}


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
        "stream": event.stream,
        "bot_seq": event.bot_seq,
        "direction": event.direction,
        "type": event.type,
        "received_at": event.received_at,
        "sent_at": event.sent_at,
        "message": message,
        "valid": event.valid,
        "error": event.error,
        "redacted": json.loads(event.redacted) if event.redacted else None,
    }


def event_time(sent_at: float | None, received_at: float) -> float:
    """When a message happened, for the state: the bot's own clock when it says.

    A bot's client batches messages, so many arrive together; their sent_at
    keeps the real spacing that turn latencies are made of.
    """
    return sent_at if sent_at is not None else received_at


def recent_events(session_pk: int, limit: int, upto_seq: int | None = None, after_seq: int | None = None) -> list[dict]:
    """A session's newest stored events (after a seq, up to a seq), in seq order, long messages as previews."""
    queryset = Event.objects.filter(session_id=session_pk)
    if upto_seq is not None:
        queryset = queryset.filter(seq__lte=upto_seq)
    if after_seq is not None:
        queryset = queryset.filter(seq__gt=after_seq)
    rows = list(queryset.order_by("-seq")[:limit])
    return [event_from_db(e, preview=True) for e in reversed(rows)]


def stored_form(checked: protocol.Validated) -> tuple[protocol.Validated, str]:
    """What is stored of a message: its JSON, or the raw text (escaped) when it was not JSON.

    A number too big for a float was parsed as infinity: strict JSON has none,
    so such a message is invalid, kept as the text it makes.
    """
    if checked.message is None:
        return checked, storable(checked.raw)
    try:
        return checked, _compact(checked.message)
    except ValueError:
        text = protocol.truncated(json.dumps(checked.message, separators=(",", ":")))
        error = "a number is out of range (JSON has no Infinity)"
        return protocol.Validated(None, checked.type, False, checked.known, error, text), text


def _compact(message: Any) -> str:
    """A parsed message as compact strict JSON; ValueError if it holds a float JSON cannot write (infinity).

    orjson writes it (json here was ~10 % of the main thread unpaced, the largest part of taking a message in), UTF-8 as
    it came rather than \\u escapes; orjson writes infinity as null, so a message whose text has a
    null is checked for one. An integer past 64 bits or a lone surrogate, which orjson refuses,
    is written by json as before.
    """
    try:
        text = orjson.dumps(message)
    except TypeError:
        return json.dumps(message, separators=(",", ":"), allow_nan=False)
    if b"null" in text and not all_finite(message):
        raise ValueError("Out of range float values are not JSON compliant")
    return text.decode()


# A client's sound sent as messages (RTVI raw-audio, raw-audio-batch: Pipecat's eval harness speaks to a bot so).
AUDIO_MESSAGE_TYPES = frozenset(("raw-audio", "raw-audio-batch"))


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_size(item) for item in value)
    if isinstance(value, dict):
        return sum(_size(item) for item in value.values())
    return 0


_AUDIO_ENVELOPE = ("label", "type", "id")  # kept when short


def without_audio(checked: protocol.Validated) -> protocol.Validated:
    """A client's raw audio as it is stored: its numbers (rate, channels), and of its sound only how many
    characters it was sent as. A caller's voice is kept in one place, the call's recording, which an
    organization opts into (rtvi_monitor/audio), never in its messages: wherever a message of that type holds
    text (its data as a string or list, a key beside data, an id, a message too deep or too broken to read),
    only its size stays."""
    if checked.type not in AUDIO_MESSAGE_TYPES:
        return checked
    if not isinstance(checked.message, dict):
        raw = json.dumps({"type": checked.type, "audio_not_stored": len(checked.raw or "")})
        return checked._replace(raw=raw)
    message = checked.message
    kept = {
        k: v if v is None or isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 64) else _size(v)
        for k, v in message.items()
        if k in _AUDIO_ENVELOPE
    }
    not_stored = {k: _size(v) for k, v in message.items() if k not in (*_AUDIO_ENVELOPE, "data")}
    data = message.get("data")
    if isinstance(data, dict):
        numbers = {k: v for k, v in data.items() if v is None or isinstance(v, int | float | bool)}
        not_stored |= {k: _size(v) for k, v in data.items() if k not in numbers}
        kept["data"] = {**numbers, "audio_not_stored": not_stored}
    elif "data" in message:
        kept["data"] = {"audio_not_stored": {"data": _size(data), **not_stored}}
    elif not_stored:
        kept["audio_not_stored"] = not_stored
    return checked._replace(message=kept, raw=json.dumps(kept) if checked.raw else "")


def redact(checked: protocol.Validated, redactor, keep: tuple[str, ...] = ()) -> tuple[protocol.Validated, dict | None]:
    """The message (its payload's texts) or the raw text of what is not a message, with what the
    organization's redactor removes replaced (rtvi_monitor/core/redaction.py); and what was removed.
    `keep`: payload keys the dashboard wrote itself (Redactor.message). A client's sound never stays
    (without_audio), whatever the organization's redaction."""
    checked = without_audio(checked)
    if not redactor:
        return checked, None
    counts: dict[str, int] = {}
    if isinstance(checked.message, dict):
        message = redactor.message(checked.message, counts, keep)
        if message is not checked.message:
            checked = checked._replace(message=message)
    elif checked.raw:
        checked = checked._replace(raw=redactor.text(checked.raw, counts))
    return checked, (counts or None)


def with_text(row: Row, text: str, counts: dict) -> None:
    """`row`'s message with its data.text as its stream's redaction made it (live/joining.py), and what that
    removed counted with the rest."""
    if counts:
        merged = dict(row.redacted or {})
        for kind, found in counts.items():
            merged[kind] = merged.get(kind, 0) + found
        row.redacted = merged
    message = row.message
    if message["data"]["text"] != text:
        row.message = {**message, "data": {**message["data"], "text": text}}
        row.text = _compact(row.message)


def stored_text(event: dict) -> str:
    message = event["message"]
    return message if isinstance(message, str) else json.dumps(message, separators=(",", ":"))


def content_hash(text: str) -> int:
    return hash(text)


def replay(events: list[dict]) -> SessionState:
    """The state folded from stored events (event_from_db's shape), in the order given."""
    return fold(
        StateEvent(
            e["seq"],
            e["direction"],
            event_time(e["sent_at"], e["received_at"]),
            e["message"] if isinstance(e["message"], dict) and e["valid"] else None,
            e["valid"],
            e["error"],
            e.get("redacted"),
            e.get("stream", ""),
        )
        for e in events
    )


def load_state(session_pk: int) -> tuple[SessionState, list[dict]]:
    """A session's state folded from what is stored, in the order it was stored.

    That is the order a live session folded it in (the writer inserts and
    folds each batch in the order its rows came), so a state replayed here
    equals the live one, version for version, even when a bot's seqs arrived
    out of order.
    """
    stored = [event_from_db(e) for e in Event.objects.filter(session_id=session_pk).order_by("pk")]
    return replay(stored), stored
