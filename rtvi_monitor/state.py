"""The state of a session, derived from its RTVI messages. Plain Python: no I/O, no Django.

`SessionState.apply` folds one message at a time (cheap, never raising) into
what the dashboard shows: who is speaking, the transcript, turns and their
latency, function calls, client requests, errors and metrics. It reads time
only from the events, so the same events in the same order give the same
state: a live session and its replay from the database agree.

What real Pipecat bots send shapes the rules (docs/PROTOCOL.md, and a real
Pipecat 1.14 pipeline's traffic, see tests/rtvi_samples.py):

- The user's words arrive twice, as user-input (input_type "transcription")
  and user-transcription, partials then a final: one transcript line, the
  partials replaced by the final text.
- A bot sentence arrives up to five ways: bot-output (v2: "new", then
  "in-progress" per word, then "completed"; v1 clients also get one per
  word), bot-tts-text, bot-transcription, bot-llm-text tokens. A bot turn is
  one transcript line, built from the best source the bot sends, each
  sentence once (bot-output segments are keyed by segment_id).
- bot-interrupted comes at every user turn start, whether or not the bot was
  saying anything: it counts as an interruption only when the bot was
  speaking.
"""

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rtvi_monitor.patches import Tail, public, put, same
from rtvi_monitor.protocol import CATALOG, protocol_version
from rtvi_monitor.services import service_kind

# Memory bounds for long sessions; past them the newest entries are kept.
MAX_POINTS = 2000  # per metric series
MAX_INTERVALS = 5000  # per timeline lane
MAX_ITEMS = 5000  # transcript items, turns, errors, server messages
MAX_TYPES = 200  # distinct types counted by name; the rest under OTHER_TYPES
MAX_SEGMENTS = 256  # bot-output segments remembered for late updates, and per bot line
MAX_SERIES = 50  # metric series (processor|model) per kind
MAX_CALLS = 500  # function calls and client requests kept (each sent whole when any changes)
MAX_KEY = 200  # characters of an id the state keeps as a key (tool_call_id, segment_id)
# The metric kinds the catalog names; a bot's own kinds are stored, not charted.
METRIC_KINDS = frozenset(field.name for field in CATALOG["metrics"].fields)
DEDUP_WINDOW = 100_000  # seqs remembered for duplicate detection; older ones count as seen
OTHER_TYPES = "(other)"
# Byte bounds: however long a session or its messages, the state (and so a
# browser's snapshot) stays small. Longer text is cut with a mark; a longer
# JSON value is kept as a preview naming the message (seq) that has it whole.
MAX_TEXT = 4000  # characters of one transcript line or streaming text
MAX_VALUE = 2000  # characters of JSON kept of one value (args, results, data, about)
TRANSCRIPT_BUDGET = 1_000_000  # characters of transcript text kept; past it the oldest lines go
LIST_BUDGET = 500_000  # characters kept of errors and of server messages, each
CLIP_MARK = " […]"

TIME_METRICS = frozenset({"ttfb", "processing", "ttfa", "ttfat"})  # seconds on the wire, ms here
INTERRUPTION_MERGE_S = 1.0  # a bot-interrupted this close to a barge-in is the same interruption
WORD_TYPES = frozenset({"word", "token"})  # bot-output of single words: progress, not sentences

# Where a bot turn's text comes from, best first: what was spoken beats what was written.
BOT_SOURCES = ("bot-output", "bot-tts-text", "bot-transcription", "bot-llm-text")


@dataclass(frozen=True, slots=True)
class Event:
    """One stored message of a session, as the reducer sees it."""

    seq: int
    direction: str  # "to-client" or "from-client"
    received_at: float  # epoch seconds
    message: dict | None
    valid: bool = True
    error: str = ""
    redacted: dict | None = None  # what redaction removed from it before it was stored: {"card": 1}


ERROR_TYPES = ("error", "error-response")  # the messages that are a session's errors
LOG_TYPES = ("system-log", *ERROR_TYPES)  # the messages that are its bot's log lines (the agents' logs API)


def error_of(msg_type: str, data: dict) -> tuple[Any, bool]:
    """An error message's text and whether it is fatal: the one reading of error and error-response.

    `error` carries its text in `message` (the spec, client-js) or `error`
    (Pipecat); `error-response` answers a client request and is never fatal.
    """
    if msg_type == "error-response":
        return data.get("error"), False
    text = data.get("message") if isinstance(data.get("message"), str) else data.get("error")
    return text, data.get("fatal") is True


# What Pipecat puts in a call's result when the function's handler raised
# (LLMService.FUNCTION_CALL_ERROR_MESSAGE_TEMPLATE).
PIPECAT_CALL_FAILED = re.compile(r"The function `[^`]*` failed and returned no result\.")
FAILED_STATUSES = frozenset({"error", "failed", "failure"})


def call_failure(result: Any) -> str | None:
    """What went wrong when a function call's result says the call failed; None when it does not.

    A call failed when its result is an object with a non-empty "error" (how a
    Pipecat function reports a failure: `result_callback({"error": "timed out"})`),
    an object whose "status" is "error", "failed" or "failure", or Pipecat's own
    text for a handler that raised. The text is the error's (or the message's),
    else the whole result. Any other result is a result, however it reads: a
    call is not guessed to have failed.
    """
    if isinstance(result, str):
        return result.strip() if PIPECAT_CALL_FAILED.fullmatch(result.strip()) else None
    if not isinstance(result, dict):
        return None
    error, status = result.get("error"), result.get("status")
    if not error and not (isinstance(status, str) and status.lower() in FAILED_STATUSES):
        return None  # {"error": null} and the like: a result that has room for an error, and none
    said = error.get("message") if isinstance(error, dict) else (error or result.get("message"))
    if isinstance(said, str) and said.strip():
        return _clip(said.strip())
    return _clip(json.dumps(error or result, ensure_ascii=False))


def percentile(ordered: list[float], p: float) -> float | None:
    """The p-th percentile of sorted values, nearest rank (None for none)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def _join_piece(text: str, piece: str) -> str:
    """Join streamed words that may or may not carry their own spaces."""
    if not text:
        return piece.lstrip()
    if piece[:1].isspace() or text[-1:].isspace() or piece[:1] in ",.;:!?'":
        return text + piece
    return f"{text} {piece}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    """Text cut to `limit` characters, marked when it was cut (idempotent)."""
    if len(text) <= limit:
        return text
    return text[:limit] + CLIP_MARK


def bounded(value: Any, seq: int, limit: int = MAX_VALUE) -> Any:
    """A JSON value as the state keeps it: itself when small, else a preview.

    The preview says how long the whole was and which message (seq) holds it,
    so a page can show the start and fetch the rest on demand.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit], "length": len(text), "seq": seq}


def _size(item: dict) -> int:
    return len(json.dumps(item, separators=(",", ":"), default=str))


def _cap_dict(items: dict, limit: int = MAX_ITEMS) -> None:
    while len(items) > limit:
        del items[next(iter(items))]


class _Lane:
    """Intervals of one activity (speaking, busy) that never overlap themselves."""

    __slots__ = ("intervals", "open")

    def __init__(self):
        self.intervals = Tail(MAX_INTERVALS)
        self.open = False

    def start(self, at: float) -> bool:
        if self.open:
            return False
        if self.intervals and self.intervals[-1][1] is not None and at < self.intervals[-1][1]:
            at = self.intervals[-1][1]  # received out of order: never overlap the previous interval
        self.intervals.append([at, None])
        self.open = True
        return True

    def stop(self, at: float) -> bool:
        if not self.open:
            return False
        self.intervals[-1][1] = max(at, self.intervals[-1][0])
        self.intervals.touch(-1)
        self.open = False
        return True


class _Segment:
    """One bot-output segment (a sentence, usually) of a bot transcript line."""

    __slots__ = ("cut", "from_words", "item", "spoken", "text", "will_be_spoken")

    def __init__(self, item: dict, text: str, from_words: bool):
        self.item = item
        self.text = text
        self.from_words = from_words  # built from v1 per-word messages until its sentence arrives
        self.spoken = ""  # the longest spoken-so-far text reported
        self.will_be_spoken: bool | None = None
        self.cut = False  # interrupted: only what was spoken of it shows

    def shown(self) -> str:
        return self.spoken if self.cut else self.text


class SessionState:
    """Everything derived from one session's messages; see to_dict() for its shape."""

    def __init__(self):
        self._seen: set[int] = set()
        self._max_seq = 0
        self.protocol_version: str | None = None
        self.client_version: str | None = None
        self.bot_version: str | None = None
        self.client_about: Any = None
        self.bot_about: Any = None
        self.lanes = {name: _Lane() for name in ("user_speaking", "bot_speaking", "llm_busy", "tts_busy")}
        self.interruptions = Tail(MAX_ITEMS)
        self.transcript = Tail(MAX_ITEMS, budget=TRANSCRIPT_BUDGET, size=lambda item: len(item["text"]) + 64)
        self._user_item: dict | None = None  # the voice line partials update, and finals complete
        self._bot_item: dict | None = None  # the bot line of the current turn
        self._segments: dict[Any, _Segment] = {}  # segment_id -> segment, for updates that come late
        self._text_sources: dict[str, str] = {}  # "llm"/"tts" -> the message type that carries it here
        self._chat_ids: dict[str, None] = {}  # send-text ids, to skip Pipecat's user-input echo of them
        self.turns = Tail(MAX_ITEMS)
        self._latency: dict | None = None  # cached until a turn is added
        self._pending_turn: dict | None = None  # the user stopped; the bot has not started speaking yet
        self._metrics_turn: dict | None = None  # the turn ttfb metrics still attach to
        self._reply_turn: int | None = None  # the turn whose reply the next new bot line is
        self.llm = {"busy": False, "current_tokens": "", "last_user_llm_text": ""}
        self.tts = {"busy": False, "current_text": ""}
        self.function_calls: dict[str, dict] = {}
        self.client_messages: dict[str, dict] = {}
        self._request_types: dict[str, str] = {}  # id -> type of what the client sent, for error-response
        self.server_messages = Tail(MAX_ITEMS, budget=LIST_BUDGET, size=_size)
        self.errors = Tail(MAX_ITEMS, budget=LIST_BUDGET, size=_size)
        self.markers = Tail(MAX_ITEMS)  # moments the timeline marks: the client's disconnect-bot, the session's end
        self.fatal = False
        self.ended = False
        self.end_reason = ""
        self.end_kind = ""  # models.EndKind's value once ended
        self.hung_up_at: float | None = None  # when the client sent disconnect-bot
        self.metrics: dict[str, dict[str, Tail]] = {}
        self.version = 0  # messages folded in so far: where a patch stream stands
        self._changed: set[str] = set()  # whole sections (function_calls, client_messages) changed
        self._sent_head: dict = {}
        self.totals = {
            "characters": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "stt_audio_seconds": 0.0,
        }
        # What each model was used for (tokens, TTS characters, STT seconds): what the session cost.
        self.usage: dict[str, dict[str, float]] = {}
        self._llm_model = ""  # the LLM's model from its metrics: real bots' tokens entries name none
        self.counts = {"total": 0, "invalid": 0, "unknown": 0, "unparseable": 0, "by_type": {}, "redacted": {}}
        self.last_at: float | None = None

    # --- folding -------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one message in. Duplicated sequence numbers are ignored; nothing raises."""
        try:
            self._apply(event)
        except Exception:
            # A message whose data still surprises us (a field of an odd type
            # in an event nobody validated): it is counted, its meaning
            # skipped. The ingest path must never fail on what a bot sends.
            pass

    @property
    def folded_upto(self) -> int:
        """The highest seq folded in: a snapshot of this state goes with the events up to it, no further."""
        return self._max_seq

    def _apply(self, event: Event) -> None:
        seq = event.seq
        if seq in self._seen or seq <= self._max_seq - DEDUP_WINDOW:
            return
        self._seen.add(seq)
        self.version += 1
        if seq > self._max_seq:
            self._max_seq = seq
            if len(self._seen) > 2 * DEDUP_WINDOW:
                floor = seq - DEDUP_WINDOW
                self._seen = {s for s in self._seen if s > floor}

        message = event.message if isinstance(event.message, dict) else None
        msg_type = message.get("type") if message is not None else None
        counts = self.counts
        counts["total"] += 1
        if event.redacted:
            self._count_redacted(event.redacted)
        if not isinstance(msg_type, str) or not msg_type:
            counts["unparseable"] += 1  # no readable type: not JSON, not an object, or no type
            counts["invalid"] += 1
            return
        by_type = counts["by_type"]
        if msg_type in by_type:
            by_type[msg_type] += 1
        elif len(by_type) < MAX_TYPES:
            by_type[msg_type] = 1
        else:
            by_type[OTHER_TYPES] = by_type.get(OTHER_TYPES, 0) + 1
        if not event.valid:
            counts["invalid"] += 1
            return
        if msg_type not in CATALOG:
            counts["unknown"] += 1
            return

        at = _number(event.received_at)
        if at is None:
            at = self.last_at or 0.0
        self.last_at = at if self.last_at is None else max(self.last_at, at)
        handler = _HANDLERS.get(msg_type)
        if handler is not None:
            data = message.get("data")
            handler(self, event, message, data if isinstance(data, dict) else {}, at)

    # connection
    def _ready(self, event, message, data, at):
        version = protocol_version(message)
        if message["type"] == "client-ready":
            self.client_version = version or self.client_version
            self.client_about = bounded(data.get("about", self.client_about), event.seq)
        else:
            self.bot_version = version or self.bot_version
            self.bot_about = bounded(data.get("about", self.bot_about), event.seq)
        # What the bot answers is what it speaks (it echoes a 1.x client's version).
        self.protocol_version = self.bot_version or self.client_version

    # speaking and turns
    def _user_started(self, event, message, data, at):
        if not self.lanes["user_speaking"].start(at):
            return
        if self.lanes["bot_speaking"].open:
            self._interrupt(at)
        self._close_bot_item()
        self._user_item = None
        self._metrics_turn = None
        self._reply_turn = None
        if self._pending_turn is not None:
            self._pending_turn = None  # the user went on talking: the turn is measured from the next stop

    def _user_stopped(self, event, message, data, at):
        self.lanes["user_speaking"].stop(at)
        self._pending_turn = self._metrics_turn = {
            "index": None,
            "user_stopped_at": at,
            "bot_started_at": None,
            "latency_ms": None,
            "llm_ttfb_ms": None,
            "tts_ttfb_ms": None,
            # When the reply's parts began, where the messages say (epoch seconds): the waterfall.
            "llm_started_at": None,
            "llm_first_token_at": None,
            "tts_started_at": None,
            "interrupted": False,
        }

    def _bot_started(self, event, message, data, at):
        self.lanes["bot_speaking"].start(at)
        if self._bot_item is not None:
            self._bot_item["final"] = False  # speaking again after a pause mid-answer
            self._touch(self._bot_item)
        turn = self._pending_turn
        if turn is not None:
            turn["bot_started_at"] = at
            turn["latency_ms"] = round((at - turn["user_stopped_at"]) * 1000, 3)
            turn["index"] = self.turns.next_position()
            self.turns.append(turn)
            self._latency = None
            self._pending_turn = None
            # The bot line that answers it: the one under way (tokens come before the speech), or the next.
            item = self._bot_item
            if item is not None and item["turn"] is None and item["at"] >= turn["user_stopped_at"]:
                item["turn"] = turn["index"]
                self._touch(item)
            else:
                self._reply_turn = turn["index"]

    def _bot_stopped(self, event, message, data, at):
        self.lanes["bot_speaking"].stop(at)
        if self._bot_item is not None:
            self._bot_item["final"] = True
            self._touch(self._bot_item)

    def _interrupt(self, at):
        """The user (or the client) cut the bot off while it was speaking.

        Pipecat cancels the reply's LLM and TTS work then, and often sends no
        bot-llm-stopped or bot-tts-stopped for it: their lanes end here.
        """
        self._cut_unspoken()
        for lane, service in (("llm_busy", self.llm), ("tts_busy", self.tts)):
            if self.lanes[lane].stop(at):
                service["busy"] = False
        if self.interruptions and abs(at - self.interruptions[-1]) < INTERRUPTION_MERGE_S:
            return
        self.interruptions.append(at)
        if self.turns:
            self.turns[-1]["interrupted"] = True
            self.turns.touch(-1)

    def _bot_interrupted(self, event, message, data, at):
        # Pipecat sends this at every user turn start; it cuts the bot off only when it was speaking.
        if self.lanes["bot_speaking"].open:
            self._interrupt(at)

    # transcript: the user
    def _voice(self, event, text: str, final: bool, at: float) -> None:
        item = self._user_item
        if item is not None and item["final"]:
            if final and item["text"] == text:
                return  # the same final again: user-input and user-transcription both carry it
            item = None
        text = _clip(text)
        if item is None:
            item = {"role": "user", "text": text, "final": final, "source": "voice", "seq": event.seq, "at": at}
            user = self.lanes["user_speaking"]
            # Words while the bot speaks, from a bot that marks user turns and has none under way: a "mhm" its
            # turn strategy let pass (Pipecat 1.4+ sends it as voice activity and a transcription). Like a
            # backchannel, it does not end the bot's line, which goes on.
            if not (self.lanes["bot_speaking"].open and user.intervals and not user.open):
                self._close_bot_item()
            self._append(item)
            self._user_item = item
        else:
            item["text"], item["final"], item["seq"], item["at"] = text, final, event.seq, at
            self._touch(item)

    def _user_transcription(self, event, message, data, at):
        self._voice(event, data["text"], data["final"] is True, at)

    def _user_input(self, event, message, data, at):
        kind = data.get("input_type")
        if kind == "transcription":
            self._voice(event, data["text"], data.get("final") is not False, at)
        elif kind == "chat":
            if data.get("msg_id") not in self._chat_ids:
                self._chat(event, data["text"], at)
        elif kind == "backchannel":
            # A "mhm" while the bot talks: it does not interrupt, nor end the bot's line.
            self._append(
                {
                    "role": "user",
                    "text": _clip(data["text"]),
                    "final": True,
                    "source": "backchannel",
                    "seq": event.seq,
                    "at": at,
                }
            )
        # Older bots send user-input without input_type beside every transcription: nothing new.

    def _send_text(self, event, message, data, at):
        self._client_request(event, message, data, at)
        msg_id = message.get("id")
        if isinstance(msg_id, str):
            self._chat_ids[msg_id] = None
            _cap_dict(self._chat_ids, 1000)
        self._chat(event, data["content"], at)

    def _chat(self, event, text: str, at: float):
        last = self.transcript[-1] if self.transcript else None
        if last is not None and last["source"] == "chat" and last["text"] == text:
            return  # send-text from the client, then Pipecat's user-input for it
        self._close_bot_item()
        self._user_item = None
        self._append({"role": "user", "text": _clip(text), "final": True, "source": "chat", "seq": event.seq, "at": at})

    def _append(self, item: dict) -> None:
        item["_pos"] = self.transcript.next_position()
        self.transcript.append(item)

    def _touch(self, item: dict) -> None:
        """A transcript line changed after it was added."""
        self.transcript.touch_position(item["_pos"])

    # transcript: the bot
    def _close_bot_item(self) -> None:
        if self._bot_item is not None:
            self._bot_item["final"] = True
            self._touch(self._bot_item)
            self._bot_item = None

    def _bot_line(self, source: str, event: Event, at: float) -> dict:
        item = self._bot_item
        if item is None:
            item = {
                "role": "bot",
                "text": "",
                "final": False,
                "source": source,
                "seq": event.seq,
                "at": at,
                "interrupted": False,
                "turn": self._reply_turn,  # the index of the turn this line answers, if any
                "_order": [],  # bot-output segments in the order they first came
                "_parts": {},  # source -> its text of this turn
            }
            self._append(item)
            self._bot_item = item
            self._user_item = None
            self._reply_turn = None
        return item

    def _show(self, item: dict) -> None:
        """The line's text: from the best source it has."""
        self._pick_text(item)
        item["text"] = _clip(item["text"])
        self._touch(item)

    def _pick_text(self, item: dict) -> None:
        parts = item["_parts"]
        order = item["_order"]
        fallbacks = BOT_SOURCES[1:]
        if order:
            text = " ".join(filter(None, (s.shown() for s in order))).strip()
            if text:
                item["source"], item["text"] = "bot-output", text
                return
            fallbacks = ("bot-tts-text",)  # all of it cut off: only what the TTS spoke was said
        for source in fallbacks:
            part = parts.get(source)
            if part:
                item["source"] = source
                item["text"] = " ".join(part).strip() if isinstance(part, list) else part.strip()
                return
        item["text"] = ""

    def _bot_output(self, event, message, data, at):
        text = _clip(data["text"])
        kind = data.get("output_type") or data.get("text_type") or data.get("aggregated_by")
        word = kind in WORD_TYPES
        key = data.get("segment_id")
        if not isinstance(key, (int, str)) or isinstance(key, bool):
            key = None
        elif isinstance(key, str):
            key = key[:MAX_KEY]
        segment = self._segments.get(key) if key is not None else None
        if segment is not None and segment.item is not self._bot_item and segment.text != text.strip():
            # Not a late status of that sentence (those repeat its text): an id used again in a
            # later turn, as bots that count segments per turn do.
            segment = None
        if segment is None and not text.strip():
            return
        if segment is None:
            item = self._bot_line("bot-output", event, at)
            if len(item["_order"]) >= MAX_SEGMENTS or len(item["text"]) >= MAX_TEXT:
                return  # the line is full: what it would add is never shown, so it is not kept
            if key is None:
                segment = self._unkeyed_segment(item, text.strip(), word, data)
                if segment is None:
                    return
            else:
                segment = _Segment(item, text.strip(), word)
                item["_order"].append(segment)
                self._segments[key] = segment
                _cap_dict(self._segments, MAX_SEGMENTS)
        elif word:
            if segment.from_words:
                segment.text = _clip(_join_piece(segment.text, text.strip()))  # v1 words before their sentence
        else:
            segment.text, segment.from_words = text.strip(), False

        # How much of it has been spoken (an interruption cuts the rest).
        status = data.get("spoken_status")
        progress = data.get("spoken_progress")
        if not word and data.get("will_be_spoken") is not None:
            segment.will_be_spoken = data["will_be_spoken"]
        if status == "completed" or (data.get("spoken") is True and not word):
            segment.spoken, segment.cut = segment.text, False  # all of it said, even if late
        elif isinstance(progress, dict) and isinstance(progress.get("accumulated_text"), str):
            spoken = progress["accumulated_text"].strip()
            if len(spoken) > len(segment.spoken):
                segment.spoken = spoken
        elif word:  # 1.x clients: the words of the sentence, as each is spoken
            segment.spoken = segment.text if segment.from_words else _clip(_join_piece(segment.spoken, text.strip()))
        self._show(segment.item)

    def _unkeyed_segment(self, item: dict, text: str, word: bool, data: dict) -> _Segment | None:
        """Old v1 bots: no segment_id; a sentence comes unspoken, then spoken (or as words).

        Sentences are matched by their text, so a sentence a bot repeats word
        for word within one turn is shown once.
        """
        order = item["_order"]
        if word:
            if any(not s.from_words for s in order):
                return None  # its sentence is there already: a word only says it is being spoken
            if order and order[-1].from_words:
                order[-1].text = _clip(_join_piece(order[-1].text, text))
                return order[-1]
        else:
            same = [s for s in order if s.text == text]
            if same:
                if data.get("spoken") is True:
                    return next((s for s in same if not s.spoken), None)  # the unspoken one it confirms
                return None  # the same sentence again
        segment = _Segment(item, text, word)
        order.append(segment)
        return segment

    def _cut_unspoken(self) -> None:
        """An interruption: what the bot meant to say but had not yet said leaves its line."""
        item = self._bot_item
        if item is None:
            return
        item["interrupted"] = True
        for segment in item["_order"]:
            if segment.will_be_spoken and segment.spoken != segment.text:
                segment.cut = True
        self._show(item)

    def _bot_transcription(self, event, message, data, at):
        text = _clip(data["text"].strip())
        if text:
            item = self._bot_line("bot-transcription", event, at)
            sentences = item["_parts"].setdefault("bot-transcription", [])
            if len(sentences) < MAX_SEGMENTS and sum(map(len, sentences)) < MAX_TEXT:
                sentences.append(text)
            self._show(item)

    def _one_source(self, kind: str, msg_type: str) -> bool:
        """Whether this message is the session's source of `kind` text ("llm" or "tts").

        Pipecat 1.13+ sends clients of protocol 2.2 both the deprecated
        bot-llm-text / bot-tts-text and the llm-raw-text / tts-raw-text that
        replace them (2.0 sends only the new ones): the same text twice. The
        type that comes first in a session is its source; the other is skipped.
        """
        source = self._text_sources.setdefault(kind, msg_type)
        return source == msg_type

    def _bot_tts_text(self, event, message, data, at):
        if not self._one_source("tts", message["type"]):
            return
        text = _clip(data["text"])
        self.tts["current_text"] = _clip(_join_piece(self.tts["current_text"], text))
        if text.strip():
            item = self._bot_line("bot-tts-text", event, at)
            parts = item["_parts"]
            parts["bot-tts-text"] = _clip(_join_piece(parts.get("bot-tts-text", ""), text))
            if not item["_order"]:
                self._show(item)

    def _bot_llm_text(self, event, message, data, at):
        if not self._one_source("llm", message["type"]):
            return
        text = _clip(data["text"])
        turn = self._pending_turn
        if text and turn is not None and turn["llm_first_token_at"] is None:
            # The first token of a new reply: the LLM's text starts over even when no bot-llm-started
            # said so (a bot with the LLM's messages off but its raw text on).
            self.llm["current_tokens"] = ""
        if text:
            self._milestone("llm_first_token_at", at)
        self.llm["current_tokens"] = _clip(self.llm["current_tokens"] + text)
        if text:
            item = self._bot_line("bot-llm-text", event, at)
            parts = item["_parts"]
            parts["bot-llm-text"] = _clip(parts.get("bot-llm-text", "") + text)
            # Tokens are the last resort: rebuild the line only while nothing better has come.
            if item["source"] == "bot-llm-text":
                item["text"] = parts["bot-llm-text"].strip()
                self._touch(item)

    # LLM and TTS activity
    def _work_started(self, lane: str, service: dict, text_key: str, at: float) -> None:
        if self.lanes[lane].start(at):
            service["busy"] = True
            service[text_key] = ""

    def _work_stopped(self, lane: str, service: dict, at: float) -> None:
        self.lanes[lane].stop(at)
        service["busy"] = False

    def _milestone(self, key: str, at: float) -> None:
        """The first time a part of the reply began, while the user waits for it."""
        turn = self._pending_turn
        if turn is not None and turn[key] is None:
            turn[key] = at

    def _llm_started(self, event, message, data, at):
        self._work_started("llm_busy", self.llm, "current_tokens", at)
        self._milestone("llm_started_at", at)

    def _llm_stopped(self, event, message, data, at):
        self._work_stopped("llm_busy", self.llm, at)

    def _user_llm_text(self, event, message, data, at):
        self.llm["last_user_llm_text"] = _clip(data["text"])

    def _tts_started(self, event, message, data, at):
        self._work_started("tts_busy", self.tts, "current_text", at)
        self._milestone("tts_started_at", at)

    def _tts_stopped(self, event, message, data, at):
        self._work_stopped("tts_busy", self.tts, at)

    # function calls
    def _call(self, data: dict, event: Event, at: float) -> dict:
        """The call a message is about: by tool_call_id, else the oldest one announced without an id."""
        call_id = data.get("tool_call_id")
        call_id = call_id[:MAX_KEY] if isinstance(call_id, str) and call_id else None
        name = data.get("function_name") if isinstance(data.get("function_name"), str) else None
        call = self.function_calls.get(call_id) if call_id else None
        if call is None and call_id:
            # llm-function-call-started carries no id (often data: {}); the in-progress after it does.
            waiting = [c for c in self.function_calls.values() if c["tool_call_id"] is None and c["ended_at"] is None]
            call = next((c for c in waiting if name and c["function_name"] == name), waiting[0] if waiting else None)
            if call is not None:
                del self.function_calls[call["key"]]
                call["tool_call_id"] = call["key"] = call_id
                self.function_calls[call_id] = call
        if call is None:
            key = call_id or f"#{event.seq}"
            call = {
                "key": key,
                "tool_call_id": call_id,
                "function_name": None,
                "args": None,
                "status": "requested",
                "result": None,
                "error": None,  # what went wrong, when status is "failed"
                "started_at": at,
                "ended_at": None,
                "duration_ms": None,
                "seq": event.seq,
            }
            self.function_calls[key] = call
            _cap_dict(self.function_calls, MAX_CALLS)
        self._changed.add("function_calls")
        if name:
            call["function_name"] = _clip(name, 200)
        args = data.get("args", data.get("arguments"))
        if args is not None and (call["args"] is None or args):  # a result may echo empty arguments
            call["args"] = bounded(args, event.seq)
        return call

    def _end_call(self, call: dict, status: str, at: float, result: Any = None) -> None:
        """The call is over: cancelled, else failed when its result says so (call_failure), else completed."""
        if status == "completed":
            call["error"] = call_failure(result)
            if call["error"] is not None:
                status = "failed"
        call["status"] = status
        if call["ended_at"] is None:
            call["ended_at"] = at
            call["duration_ms"] = round(max(0.0, at - call["started_at"]) * 1000, 3)

    def _fc_started(self, event, message, data, at):
        self._call(data, event, at)

    def _fc_in_progress(self, event, message, data, at):
        call = self._call(data, event, at)
        if call["status"] == "requested":
            call["status"] = "in_progress"

    def _fc_stopped(self, event, message, data, at):
        call = self._call(data, event, at)
        if data.get("result") is not None:
            call["result"] = bounded(data["result"], event.seq)
        self._end_call(call, "cancelled" if data.get("cancelled") is True else "completed", at, data.get("result"))

    def _fc_result(self, event, message, data, at):
        call = self._call(data, event, at)
        call["result"] = bounded(data["result"], event.seq)
        self._end_call(call, "completed", at, data["result"])

    # client-server messaging
    def _client_request(self, event, message, data, at):
        """Anything the client sends with an id may be answered with error-response."""
        msg_id = message.get("id")
        if isinstance(msg_id, str) and event.direction == "from-client":
            self._request_types[msg_id] = message["type"]
            _cap_dict(self._request_types)

    def _client_message(self, event, message, data, at):
        msg_id = message.get("id")
        if event.direction == "to-client" and msg_id in self.client_messages:
            self._response(event, message, data, at)  # the spec's erratum: a response typed client-message
            return
        self._client_request(event, message, data, at)
        key = msg_id if isinstance(msg_id, str) and msg_id else f"#{event.seq}"
        self._changed.add("client_messages")
        self.client_messages[key] = {
            "id": key,
            "t": _clip(data["t"], 200),
            "d": bounded(data.get("d"), event.seq),
            "sent_at": at,
            "status": "pending",
            "response": None,
            "response_ms": None,
        }
        _cap_dict(self.client_messages, MAX_CALLS)

    def _response(self, event, message, data, at):
        msg_id = message.get("id")
        failed = message["type"] == "error-response"
        if failed:
            text, _ = error_of("error-response", data)
            self.errors.append(
                {
                    "seq": event.seq,
                    "at": at,
                    "message": _clip(text),
                    "fatal": False,
                    "type": "error-response",
                    "id": msg_id,
                    "request_type": self._request_types.get(msg_id),
                }
            )
        request = self.client_messages.get(msg_id) if isinstance(msg_id, str) else None
        if request is not None and request["status"] == "pending":
            self._changed.add("client_messages")
            request["status"] = "failed" if failed else "answered"
            request["response"] = bounded(data, event.seq)
            request["response_ms"] = round(max(0.0, at - request["sent_at"]) * 1000, 3)

    def _server_message(self, event, message, data, at):
        self.server_messages.append({"seq": event.seq, "at": at, "data": bounded(message.get("data"), event.seq)})

    def _error(self, event, message, data, at):
        text, fatal = error_of("error", data)
        self.errors.append(
            {
                "seq": event.seq,
                "at": at,
                "message": _clip(text) if isinstance(text, str) else text,
                "fatal": fatal,
                "type": "error",
                "id": None,
                "request_type": None,
            }
        )
        if fatal:
            self.fatal = True
            self.end(at, "fatal error", "fatal_error")

    # metrics
    def _metrics(self, event, message, data, at):
        for kind, entries in data.items():
            if kind not in METRIC_KINDS or not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    continue
                model = entry.get("model") if isinstance(entry.get("model"), str) else ""
                processor = entry.get("processor")
                if model and service_kind(processor) == "llm":
                    self._llm_model = _clip(model, 200)
                if kind == "tokens":
                    self._tokens(entry, at, model or self._llm_model)
                    continue
                value = entry.get("value")
                if kind == "stt_usage" and isinstance(value, dict):
                    value = _number(value.get("audio_seconds"))
                    if value is not None:
                        self.totals["stt_audio_seconds"] += value
                        self._use(model, "stt_audio_seconds", value)
                        self._point(kind, entry, at, value)
                    continue
                if value is None:
                    value = entry.get(kind)  # ttfa and ttfat carry their figure under their own name
                value = _number(value)
                if value is None:
                    continue
                if kind in TIME_METRICS:
                    value = round(value * 1000, 3)
                elif kind == "characters":
                    self.totals["characters"] += value
                    self._use(model, "characters", value)
                self._point(kind, entry, at, value)
                if kind == "ttfb" and self._metrics_turn is not None:
                    self._turn_ttfb(entry.get("processor"), value)

    def _tokens(self, entry: dict, at: float, model: str) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = _number(entry.get(key))
            if value is not None:
                self.totals[key] += value
                if key != "total_tokens":
                    self._use(model, key, value)
        total = _number(entry.get("total_tokens"))
        if total is not None:
            self._point("tokens", entry, at, total)

    def _use(self, model: str, key: str, amount: float) -> None:
        """Count usage under its model ("" when the messages name none)."""
        model = _clip(model, 200)
        usage = self.usage.get(model)
        if usage is None:
            if len(self.usage) >= MAX_SERIES:
                return
            usage = self.usage[model] = {}
        usage[key] = usage.get(key, 0) + amount

    def _point(self, kind: str, entry: dict, at: float, value: float) -> None:
        series = _clip(f"{entry.get('processor') or ''}|{entry.get('model') or ''}", 200)
        by_series = self.metrics.get(kind)
        if by_series is None:
            if len(self.metrics) >= MAX_SERIES:
                return
            by_series = self.metrics[kind] = {}
        points = by_series.get(series)
        if points is None:
            if len(by_series) >= MAX_SERIES:
                return  # a bot naming a new processor in every message: keep the first ones
            points = by_series[series] = Tail(MAX_POINTS)
        points.append([at, value])

    def _turn_ttfb(self, processor: Any, value_ms: float) -> None:
        """The first LLM and TTS time-to-first-byte of a turn (the start-of-session zeros excluded).

        An STT's, or an unknown processor's, is neither.
        """
        key = {"llm": "llm_ttfb_ms", "tts": "tts_ttfb_ms"}.get(service_kind(processor))
        turn = self._metrics_turn
        if key and turn[key] is None:
            turn[key] = value_ms
            if turn["index"] is not None:
                self.turns.touch_position(turn["index"])

    def _disconnect_bot(self, event, message, data, at):
        self._client_request(event, message, data, at)
        self.markers.append({"at": at, "kind": "disconnect-bot", "seq": event.seq})
        if self.hung_up_at is None:
            self.hung_up_at = at

    # --- the session's end, which the server knows and the messages may not ---

    def _count_redacted(self, redacted: dict) -> None:
        """What redaction removed, by kind (the built-in detectors' and the organization's own)."""
        counts = self.counts["redacted"]
        for kind, n in redacted.items():
            if isinstance(kind, str) and isinstance(n, int) and (kind in counts or len(counts) < MAX_TYPES):
                counts[kind] = counts.get(kind, 0) + n

    def end(self, at: float, reason: str, kind: str = "") -> None:
        """The session ended (its bot left, or a fatal error): nobody speaks or works any more.

        `kind` is how (rtvi_monitor.models.EndKind's value), `reason` the words for it.
        """
        if self.ended:
            return
        self.ended, self.end_reason, self.end_kind = True, reason, kind
        at = max(at, self.last_at or at)
        for lane in self.lanes.values():
            lane.stop(at)
        self.llm["busy"] = self.tts["busy"] = False
        self.markers.append({"at": at, "kind": "ended", "reason": reason})
        self.version += 1

    # --- reading -------------------------------------------------------------

    def latency(self) -> dict:
        """p50, p95 and max of the turns' latency in ms (None when no turn has one)."""
        if self._latency is None:
            values = sorted(t["latency_ms"] for t in self.turns if t["latency_ms"] is not None)
            self._latency = {
                "p50": percentile(values, 50),
                "p95": percentile(values, 95),
                "max": values[-1] if values else None,
            }
        return dict(self._latency)

    def summary(self) -> dict:
        """The few figures a session list shows."""
        return {
            "protocol_version": self.protocol_version,
            "turn_count": len(self.turns),
            "latency": self.latency(),
            "interruptions": len(self.interruptions),
            "error_count": len(self.errors),
            "fatal": self.fatal,
            "event_count": self.counts["total"],
            "invalid_count": self.counts["invalid"],
            "unknown_count": self.counts["unknown"],
            "user_speaking": self.lanes["user_speaking"].open,
            "bot_speaking": self.lanes["bot_speaking"].open,
        }

    def transcript_items(self) -> list[dict]:
        """The transcript lines without their bookkeeping."""
        return [public(item) for item in self.transcript]

    def head(self) -> dict:
        """The small parts of the state, sent whole when they change."""
        return {
            "version": self.version,
            "protocol_version": self.protocol_version,
            "client_version": self.client_version,
            "bot_version": self.bot_version,
            "client_about": self.client_about,
            "bot_about": self.bot_about,
            "speaking": {"user": self.lanes["user_speaking"].open, "bot": self.lanes["bot_speaking"].open},
            "latency": self.latency(),
            "llm": dict(self.llm),
            "tts": dict(self.tts),
            "fatal": self.fatal,
            "ended": self.ended,
            "end_reason": self.end_reason,
            "end_kind": self.end_kind,
            "totals": {**self.totals, "stt_audio_seconds": round(self.totals["stt_audio_seconds"], 3)},
            "usage": {model: {k: round(v, 3) for k, v in use.items()} for model, use in self.usage.items()},
            "counts": {
                **self.counts,
                "by_type": dict(self.counts["by_type"]),
                "redacted": dict(self.counts["redacted"]),
            },
            "last_at": self.last_at,
        }

    def _tails(self):
        """(path, tail, dump) for every list that changes at its end."""
        yield ("transcript",), self.transcript, public
        yield ("turns",), self.turns, _turn
        yield ("interruptions",), self.interruptions, same
        yield ("server_messages",), self.server_messages, same
        yield ("errors",), self.errors, same
        yield ("markers",), self.markers, same
        for name, lane in self.lanes.items():
            yield ("intervals", name), lane.intervals, list
        for kind, series in self.metrics.items():
            for name, points in series.items():
                yield ("metrics", kind, name), points, list

    def to_dict(self) -> dict:
        """The whole derived state, JSON-serializable."""
        state = self.head()
        for path, tail, dump in self._tails():
            put(state, path, [dump(item) for item in tail])
        for name in ("intervals", "metrics"):
            state.setdefault(name, {})
        state["function_calls"] = self._function_calls()
        state["client_messages"] = [dict(m) for m in self.client_messages.values()]
        return dict(sorted(state.items()))

    def bases(self) -> dict:
        """Where each list of to_dict() starts (items dropped before it): a patch stream continues from here."""
        bases: dict = {}
        for path, tail, _ in self._tails():
            put(bases, path, tail.dropped)
        return bases

    def _function_calls(self) -> list[dict]:
        return [{k: v for k, v in c.items() if k != "key"} for c in self.function_calls.values()]

    def take_changes(self) -> dict:
        """What changed since the last call: a patch that turns an earlier to_dict() into this one.

        Patches are exact and cumulative: a copy of to_dict() (with bases())
        taken at any moment, given every later patch in order by
        `patches.apply_changes`, equals to_dict(). Whoever keeps a copy (the
        browser's page) applies them and derives nothing itself.
        """
        changes: dict = {}
        head = self.head()
        sent = self._sent_head
        changed = {k: v for k, v in head.items() if k not in sent or sent[k] != v}
        if changed:
            changes["head"] = changed
        self._sent_head = head
        for path, tail, dump in self._tails():
            patch = tail.patch(dump)
            if patch is not None:
                put(changes, ("tails", *path), patch)
        if "function_calls" in self._changed:
            changes["function_calls"] = self._function_calls()
        if "client_messages" in self._changed:
            changes["client_messages"] = [dict(m) for m in self.client_messages.values()]
        self._changed.clear()
        return changes

    def snapshot(self) -> dict:
        """to_dict() and bases(), and the patch stream restarts from here."""
        self.take_changes()  # marks up to now are in the copy: nothing is sent twice
        return {"state": self.to_dict(), "bases": self.bases()}


def _turn(turn: dict) -> dict:
    """A turn with its waterfall: the parts of the wait, in ms after the user stopped speaking.

    Each part is {"part", "from_ms", "to_ms"}; a part the messages only
    half tell (no first token, no TTS time-to-first-byte) has to_ms None.
    The page draws these bars as they are.
    """
    start = turn["user_stopped_at"]

    def offset(at: float | None) -> float | None:
        return None if at is None else round(max(0.0, at - start) * 1000, 1)

    parts = []
    llm_at, tts_at = turn.get("llm_started_at"), turn.get("tts_started_at")
    if llm_at is not None:
        first = turn.get("llm_first_token_at")
        if first is None and turn["llm_ttfb_ms"] is not None:
            first = llm_at + turn["llm_ttfb_ms"] / 1000
        parts.append({"part": "llm_first_token", "from_ms": offset(llm_at), "to_ms": offset(first)})
    if tts_at is not None:
        audio = tts_at + turn["tts_ttfb_ms"] / 1000 if turn["tts_ttfb_ms"] is not None else None
        parts.append({"part": "tts_first_audio", "from_ms": offset(tts_at), "to_ms": offset(audio)})
    if turn["latency_ms"] is not None:
        parts.append({"part": "bot_speaking", "from_ms": 0.0, "to_ms": round(turn["latency_ms"], 1)})
    return {**turn, "waterfall": parts}


_HANDLERS = {
    "client-ready": SessionState._ready,
    "bot-ready": SessionState._ready,
    "user-started-speaking": SessionState._user_started,
    "user-stopped-speaking": SessionState._user_stopped,
    "bot-started-speaking": SessionState._bot_started,
    "bot-stopped-speaking": SessionState._bot_stopped,
    "bot-interrupted": SessionState._bot_interrupted,
    "user-transcription": SessionState._user_transcription,
    "user-input": SessionState._user_input,
    "send-text": SessionState._send_text,
    "bot-output": SessionState._bot_output,
    "bot-transcription": SessionState._bot_transcription,
    "bot-tts-text": SessionState._bot_tts_text,
    "tts-raw-text": SessionState._bot_tts_text,
    "bot-llm-text": SessionState._bot_llm_text,
    "llm-raw-text": SessionState._bot_llm_text,
    "bot-llm-started": SessionState._llm_started,
    "bot-llm-stopped": SessionState._llm_stopped,
    "user-llm-text": SessionState._user_llm_text,
    "bot-tts-started": SessionState._tts_started,
    "bot-tts-stopped": SessionState._tts_stopped,
    "llm-function-call-started": SessionState._fc_started,
    "llm-function-call-start": SessionState._fc_started,
    "llm-function-call": SessionState._fc_started,
    "llm-function-call-in-progress": SessionState._fc_in_progress,
    "llm-function-call-stopped": SessionState._fc_stopped,
    "llm-function-call-result": SessionState._fc_result,
    "client-message": SessionState._client_message,
    "append-to-context": SessionState._client_request,
    "send-file": SessionState._client_request,
    "disconnect-bot": SessionState._disconnect_bot,
    "server-response": SessionState._response,
    "error-response": SessionState._response,
    "server-message": SessionState._server_message,
    "error": SessionState._error,
    "metrics": SessionState._metrics,
}


def replay(events: Iterable[Event]) -> SessionState:
    """A state folded from events in the given order."""
    state = SessionState()
    for event in events:
        state.apply(event)
    return state
