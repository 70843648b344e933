"""A session's streamed text redacted as it is joined: its rows held back while a number may go on.

An LLM's tokens, a TTS service's words and a transcription's finals come cut
into messages ("4111", " 1111", ...), each too short to be found alone. Each
such stream (a bot stream and a message type: `Holdback.key`) is redacted by a
`redaction.Joined`; a row whose text ends in a run that could still become a
match waits for its stream's next row, and so does every row of the session
behind it, so rows are still stored, acked, relayed and folded in the order
they came (and numbered in that order). A row waits until:

- its stream's next piece ends the run (the common case: the next token);
- a message that ends its stream (`CLOSES`: bot-llm-stopped for the LLM's
  tokens...) or the bot's connection leaving;
- `wait` seconds (REDACTION_HOLD_SECONDS) since it came: the run is judged as
  it stands;
- HOLD_CHARS characters of run (rtvi_monitor/redaction.py).

A held row is acked when it is stored, as every row is: an ack still means
stored; the wait is the ack's delay, for rows whose text ends in digits only.
Plain Python: the consumer, the control door and the lifecycle call it.
"""

from collections import deque
from typing import Any

from dashboard.http import compact_dumps
from rtvi_monitor.events import Row, with_text
from rtvi_monitor.redaction import Joined, Redactor

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
    "bot-started-speaking": ("user-transcription", "user-input"),
}


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
    """A session's rows on their way to the writer, in order, those behind a held piece waiting."""

    __slots__ = ("joins", "queue")

    def __init__(self):
        self.joins: dict[tuple[str, str], tuple[Joined, list[Row]]] = {}  # key -> its redactor, its held rows
        self.queue: deque[Row] = deque()  # rows not yet given to the writer, oldest first

    @property
    def holding(self) -> bool:
        return bool(self.queue)

    @staticmethod
    def key(row: Row) -> tuple[str, str]:
        return (row.stream, row.type)

    def take(self, row: Row, piece: str | None, redactor: Redactor) -> list[Row]:
        """`row` in; the rows that may be stored now, in order (`row` itself when nothing waits: most rows)."""
        if not redactor:
            piece = None
        closes = CLOSES.get(row.type)
        if closes and self.joins:
            for kind in closes:
                self._release((row.stream, kind))
        if piece is not None:
            key = self.key(row)
            held = self.joins.get(key)
            if held is None:
                held = self.joins[key] = (Joined(redactor), [])
            joined, rows = held
            row.waiting = True
            rows.append(row)
            self._final(rows, joined.add(piece))
        if not self.queue and not row.waiting:
            return [row]
        self.queue.append(row)
        return self._ready()

    def expired(self, now: float, wait: float) -> list[Row]:
        """Rows whose wait is over (held `wait` seconds or more), judged as they stand; and what they let go."""
        for key, (_, rows) in list(self.joins.items()):
            if rows and rows[0].received_at + wait <= now:
                self._release(key)
        return self._ready()

    def oldest(self) -> float | None:
        """When the row waiting longest came, or None."""
        times = [rows[0].received_at for _, rows in self.joins.values() if rows]
        return min(times) if times else None

    def release_all(self) -> list[Row]:
        """Everything, judged as it stands (the bot's connection is leaving)."""
        for key in list(self.joins):
            self._release(key)
        return self._ready()

    def _release(self, key) -> None:
        held = self.joins.pop(key, None)
        if held is not None:
            joined, rows = held
            self._final(rows, joined.release())

    @staticmethod
    def _final(rows: list[Row], final: list[tuple[str, dict]]) -> None:
        for text, counts in final:
            row = rows.pop(0)
            row.waiting = False
            with_text(row, text, counts)

    def _ready(self) -> list[Row]:
        queue, ready = self.queue, []
        while queue and not queue[0].waiting:
            ready.append(queue.popleft())
        return ready
