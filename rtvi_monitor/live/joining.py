"""A session's streamed text redacted as it is joined: a stream's rows held back while a number may go on.

An LLM's tokens, a TTS service's words and a transcription's finals come cut
into messages ("4111", " 1111", ...), each too short to be found alone. Each
such stream (a bot stream and a message type: `Holdback.key`) is redacted by a
`redaction.Joined`; a row whose text ends in a run that could still become a
match waits for its stream's next row. Only that stream waits: the session's
other rows go on (they are numbered as they leave, so the dashboard's seqs
still follow the order rows are stored, acked, relayed and folded). A row
waits until:

- its stream's next piece ends the run (the common case: the next token);
- a message that ends its stream (`CLOSES`: bot-llm-stopped for the LLM's
  tokens...), or the bot's connection leaving;
- `wait` seconds (REDACTION_HOLD_SECONDS, 3 s: a TTS service's words come as
  they are spoken and a caller's finals as they are said, a group of four
  digits about a second apart): the run is judged as it stands, and the
  stream's next pieces are still read after it;
- HOLD_CHARS characters of run (rtvi_monitor/core/redaction.py).

A held row is acked when it is stored, as every row is: an ack still means
stored; the wait is the ack's delay, for rows whose text ends in digits only.
Plain Python: the session (live/session.py) calls it.
"""

from typing import Any

from dashboard.web.http import compact_dumps
from rtvi_monitor.core.redaction import Joined, Redactor
from rtvi_monitor.sessions.events import Row, with_text

# The messages whose data.text is one piece of a longer text, and when.
JOINED = frozenset(
    {"bot-llm-text", "bot-tts-text", "bot-transcription", "bot-output", "user-transcription", "user-input"}
)
# What ends a stream: its pieces are judged as they stand before the message that ends it is stored.
CLOSES = {
    "bot-llm-started": ("bot-llm-text",),
    "bot-llm-stopped": ("bot-llm-text",),
    "bot-tts-started": ("bot-tts-text",),
    "bot-tts-stopped": ("bot-tts-text",),
    "bot-stopped-speaking": ("bot-output", "bot-transcription", "bot-tts-text"),
}  # (a caller's finals: no message ends them; a bot's "mm-hmm" comes between the groups a caller reads out)


def piece_of(message: Any) -> str | None:
    """The text a message adds to its stream as it came (before any redaction), or None for one that adds none.

    Only what joins: a final transcription (a partial is the whole utterance so far, redacted alone), a
    spoken user-input (a typed one is whole), every bot text."""
    if type(message) is not dict:
        return None
    kind = message.get("type")
    if kind not in JOINED:
        return None
    data = message.get("data")
    if type(data) is not dict:
        return None
    text = data.get("text")
    if type(text) is not str:
        return None
    if kind == "user-transcription" and data.get("final") is not True:
        return None
    if kind == "user-input" and data.get("input_type", "transcription") != "transcription":
        return None
    return text


def without_text(message: dict) -> str:
    """A piece's message without its text, as compact JSON: what a resend of it is compared by."""
    return compact_dumps({**message, "data": {**message["data"], "text": ""}})


class Holdback:
    """A session's streams of text on their way to the writer: each stream's pieces that wait."""

    __slots__ = ("joins",)

    def __init__(self):
        self.joins: dict[tuple[str, str], tuple[Joined, list[Row]]] = {}  # key -> its redactor, its held rows

    @property
    def holding(self) -> bool:
        return any(rows for _, rows in self.joins.values())

    def take(self, row: Row, piece: str | None, redactor: Redactor) -> list[Row]:
        """`row` in; the rows that may be stored now, oldest first (`row` itself, most of the time)."""
        out: list[Row] = []
        closes = CLOSES.get(row.type)
        if closes and self.joins:
            for kind in closes:
                held = self.joins.pop((row.stream, kind), None)
                if held is not None:
                    out.extend(self._final(held[1], held[0].release()))
        if piece is None or not redactor:
            out.append(row)
            return out
        key = (row.stream, row.type)
        held = self.joins.get(key)
        if held is None:
            held = self.joins[key] = (Joined(redactor), [])
        joined, rows = held
        rows.append(row)
        out.extend(self._final(rows, joined.add(piece)))
        return out

    def expired(self, now: float, wait: float) -> list[Row]:
        """Rows held `wait` seconds or more, judged as they stand (their stream's next pieces are read after)."""
        out: list[Row] = []
        for joined, rows in self.joins.values():
            if rows and rows[0].received_at + wait <= now:
                out.extend(self._final(rows, joined.release()))
        out.sort(key=lambda row: row.received_at)
        return out

    def oldest(self) -> float | None:
        """When the row waiting longest came, or None."""
        times = [rows[0].received_at for _, rows in self.joins.values() if rows]
        return min(times) if times else None

    def release_all(self) -> list[Row]:
        """Everything, judged as it stands (the bot's connection is leaving)."""
        out: list[Row] = []
        for joined, rows in self.joins.values():
            out.extend(self._final(rows, joined.release()))
        self.joins.clear()
        out.sort(key=lambda row: row.received_at)
        return out

    @staticmethod
    def _final(rows: list[Row], final: list[tuple[str, dict]]) -> list[Row]:
        """The first rows held, with their texts final, taken off the list."""
        done = rows[: len(final)]
        del rows[: len(final)]
        for row, (text, counts) in zip(done, final, strict=True):
            with_text(row, text, counts)
        return done
