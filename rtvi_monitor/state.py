"""The state of a session, derived from its RTVI messages. Plain Python: no I/O, no Django.

`SessionState.apply` folds one message at a time (cheap, never raising) into
what the dashboard shows: who is speaking, the transcript, turns and their
latency, function calls, client requests, errors and metrics. It reads time
only from the events, so the same events in the same order give the same
state: a live session and its replay from the database agree.

What real Pipecat bots send shapes the rules (FIELD_NOTES.md, and a real
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

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rtvi_monitor.protocol import CATALOG, protocol_version

# Memory bounds for long sessions; past them the newest entries are kept.
MAX_POINTS = 2000  # per metric series
MAX_INTERVALS = 5000  # per timeline lane
MAX_ITEMS = 5000  # transcript items, turns, errors, server messages, function calls, client messages
MAX_TYPES = 200  # distinct types counted by name; the rest under OTHER_TYPES
MAX_SEGMENTS = 256  # bot-output segments remembered for late updates
DEDUP_WINDOW = 100_000  # seqs remembered for duplicate detection; older ones count as seen
OTHER_TYPES = "(other)"

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


def _percentile(ordered: list[float], p: float) -> float | None:
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


def _cap(items: list, limit: int = MAX_ITEMS) -> None:
    if len(items) > limit:
        del items[: len(items) - limit]


def _cap_dict(items: dict, limit: int = MAX_ITEMS) -> None:
    while len(items) > limit:
        del items[next(iter(items))]


class _Lane:
    """Intervals of one activity (speaking, busy) that never overlap themselves."""

    __slots__ = ("intervals", "open")

    def __init__(self):
        self.intervals: list[list[float | None]] = []
        self.open = False

    def start(self, at: float) -> bool:
        if self.open:
            return False
        if self.intervals and self.intervals[-1][1] is not None and at < self.intervals[-1][1]:
            at = self.intervals[-1][1]  # received out of order: never overlap the previous interval
        self.intervals.append([at, None])
        _cap(self.intervals, MAX_INTERVALS)
        self.open = True
        return True

    def stop(self, at: float) -> bool:
        if not self.open:
            return False
        self.intervals[-1][1] = max(at, self.intervals[-1][0])
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
        self.interruptions: list[float] = []
        self.transcript: list[dict] = []
        self._user_item: dict | None = None  # the voice line partials update, and finals complete
        self._bot_item: dict | None = None  # the bot line of the current turn
        self._segments: dict[Any, _Segment] = {}  # segment_id -> segment, for updates that come late
        self._chat_ids: dict[str, None] = {}  # send-text ids, to skip Pipecat's user-input echo of them
        self.turns: list[dict] = []
        self._pending_turn: dict | None = None  # the user stopped; the bot has not started speaking yet
        self._metrics_turn: dict | None = None  # the turn ttfb metrics still attach to
        self.llm = {"busy": False, "current_tokens": "", "last_user_llm_text": ""}
        self.tts = {"busy": False, "current_text": ""}
        self.function_calls: dict[str, dict] = {}
        self.client_messages: dict[str, dict] = {}
        self._request_types: dict[str, str] = {}  # id -> type of what the client sent, for error-response
        self.server_messages: list[dict] = []
        self.errors: list[dict] = []
        self.fatal = False
        self.metrics: dict[str, dict[str, list[list[float]]]] = {}
        self.totals = {
            "characters": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "stt_audio_seconds": 0.0,
        }
        self.counts = {"total": 0, "invalid": 0, "unknown": 0, "unparseable": 0, "by_type": {}}
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

    def _apply(self, event: Event) -> None:
        seq = event.seq
        if seq in self._seen or seq <= self._max_seq - DEDUP_WINDOW:
            return
        self._seen.add(seq)
        if seq > self._max_seq:
            self._max_seq = seq
            if len(self._seen) > 2 * DEDUP_WINDOW:
                floor = seq - DEDUP_WINDOW
                self._seen = {s for s in self._seen if s > floor}

        message = event.message if isinstance(event.message, dict) else None
        msg_type = message.get("type") if message is not None else None
        counts = self.counts
        counts["total"] += 1
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
            self.client_about = data.get("about", self.client_about)
        else:
            self.bot_version = version or self.bot_version
            self.bot_about = data.get("about", self.bot_about)
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
        if self._pending_turn is not None:
            self._pending_turn = None  # the user went on talking: the turn is measured from the next stop

    def _user_stopped(self, event, message, data, at):
        self.lanes["user_speaking"].stop(at)
        self._pending_turn = self._metrics_turn = {
            "index": len(self.turns),
            "user_stopped_at": at,
            "bot_started_at": None,
            "latency_ms": None,
            "llm_ttfb_ms": None,
            "tts_ttfb_ms": None,
            "interrupted": False,
        }

    def _bot_started(self, event, message, data, at):
        self.lanes["bot_speaking"].start(at)
        if self._bot_item is not None:
            self._bot_item["final"] = False  # speaking again after a pause mid-answer
        turn = self._pending_turn
        if turn is not None:
            turn["bot_started_at"] = at
            turn["latency_ms"] = round((at - turn["user_stopped_at"]) * 1000, 3)
            turn["index"] = len(self.turns)
            self.turns.append(turn)
            _cap(self.turns)
            self._pending_turn = None

    def _bot_stopped(self, event, message, data, at):
        self.lanes["bot_speaking"].stop(at)
        if self._bot_item is not None:
            self._bot_item["final"] = True

    def _interrupt(self, at):
        """The user (or the client) cut the bot off while it was speaking."""
        self._cut_unspoken()
        if self.interruptions and abs(at - self.interruptions[-1]) < INTERRUPTION_MERGE_S:
            return
        self.interruptions.append(at)
        _cap(self.interruptions)
        if self.turns:
            self.turns[-1]["interrupted"] = True

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
        if item is None:
            item = {"role": "user", "text": text, "final": final, "source": "voice", "seq": event.seq, "at": at}
            self._close_bot_item()
            self._append(item)
            self._user_item = item
        else:
            item["text"], item["final"], item["seq"], item["at"] = text, final, event.seq, at

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
                    "text": data["text"],
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
        self._append({"role": "user", "text": text, "final": True, "source": "chat", "seq": event.seq, "at": at})

    def _append(self, item: dict) -> None:
        self.transcript.append(item)
        if len(self.transcript) > MAX_ITEMS:
            del self.transcript[0]

    # transcript: the bot
    def _close_bot_item(self) -> None:
        if self._bot_item is not None:
            self._bot_item["final"] = True
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
                "_order": [],  # bot-output segments in the order they first came
                "_parts": {},  # source -> its text of this turn
            }
            self._append(item)
            self._bot_item = item
            self._user_item = None
        return item

    def _show(self, item: dict) -> None:
        """The line's text: from the best source it has."""
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
        text = data["text"]
        kind = data.get("output_type") or data.get("text_type") or data.get("aggregated_by")
        word = kind in WORD_TYPES
        key = data.get("segment_id")
        if not isinstance(key, (int, str)) or isinstance(key, bool):
            key = None
        segment = self._segments.get(key) if key is not None else None
        if segment is not None and segment.item is not self._bot_item and segment.text != text.strip():
            # Not a late status of that sentence (those repeat its text): an id used again in a
            # later turn, as bots that count segments per turn do.
            segment = None
        if segment is None and not text.strip():
            return
        if segment is None:
            item = self._bot_line("bot-output", event, at)
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
                segment.text = _join_piece(segment.text, text.strip())  # v1 words before their sentence
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
            segment.spoken = segment.text if segment.from_words else _join_piece(segment.spoken, text.strip())
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
                order[-1].text = _join_piece(order[-1].text, text)
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
        text = data["text"].strip()
        if text:
            item = self._bot_line("bot-transcription", event, at)
            sentences = item["_parts"].setdefault("bot-transcription", [])
            sentences.append(text)
            self._show(item)

    def _bot_tts_text(self, event, message, data, at):
        text = data["text"]
        self.tts["current_text"] = _join_piece(self.tts["current_text"], text)
        if text.strip():
            item = self._bot_line("bot-tts-text", event, at)
            parts = item["_parts"]
            parts["bot-tts-text"] = _join_piece(parts.get("bot-tts-text", ""), text)
            if not item["_order"]:
                self._show(item)

    def _bot_llm_text(self, event, message, data, at):
        text = data["text"]
        self.llm["current_tokens"] += text
        if text:
            item = self._bot_line("bot-llm-text", event, at)
            parts = item["_parts"]
            parts["bot-llm-text"] = parts.get("bot-llm-text", "") + text
            # Tokens are the last resort: rebuild the line only while nothing better has come.
            if item["source"] == "bot-llm-text":
                item["text"] = parts["bot-llm-text"].strip()

    # LLM and TTS activity
    def _llm_started(self, event, message, data, at):
        if self.lanes["llm_busy"].start(at):
            self.llm["busy"] = True
            self.llm["current_tokens"] = ""

    def _llm_stopped(self, event, message, data, at):
        self.lanes["llm_busy"].stop(at)
        self.llm["busy"] = False

    def _user_llm_text(self, event, message, data, at):
        self.llm["last_user_llm_text"] = data["text"]

    def _tts_started(self, event, message, data, at):
        if self.lanes["tts_busy"].start(at):
            self.tts["busy"] = True
            self.tts["current_text"] = ""

    def _tts_stopped(self, event, message, data, at):
        self.lanes["tts_busy"].stop(at)
        self.tts["busy"] = False

    # function calls
    def _call(self, data: dict, event: Event, at: float) -> dict:
        """The call a message is about: by tool_call_id, else the oldest one announced without an id."""
        call_id = data.get("tool_call_id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
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
                "started_at": at,
                "ended_at": None,
                "duration_ms": None,
                "seq": event.seq,
            }
            self.function_calls[key] = call
            _cap_dict(self.function_calls)
        if name:
            call["function_name"] = name
        args = data.get("args", data.get("arguments"))
        if args is not None and (call["args"] is None or args):  # a result may echo empty arguments
            call["args"] = args
        return call

    def _end_call(self, call: dict, status: str, at: float) -> None:
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
            call["result"] = data["result"]
        self._end_call(call, "cancelled" if data.get("cancelled") is True else "completed", at)

    def _fc_result(self, event, message, data, at):
        call = self._call(data, event, at)
        call["result"] = data["result"]
        self._end_call(call, "completed", at)

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
        self.client_messages[key] = {
            "id": key,
            "t": data["t"],
            "d": data.get("d"),
            "sent_at": at,
            "status": "pending",
            "response": None,
            "response_ms": None,
        }
        _cap_dict(self.client_messages)

    def _response(self, event, message, data, at):
        msg_id = message.get("id")
        failed = message["type"] == "error-response"
        if failed:
            self.errors.append(
                {
                    "seq": event.seq,
                    "at": at,
                    "message": data["error"],
                    "fatal": False,
                    "type": "error-response",
                    "id": msg_id,
                    "request_type": self._request_types.get(msg_id),
                }
            )
            _cap(self.errors)
        request = self.client_messages.get(msg_id) if isinstance(msg_id, str) else None
        if request is not None and request["status"] == "pending":
            request["status"] = "failed" if failed else "answered"
            request["response"] = data
            request["response_ms"] = round(max(0.0, at - request["sent_at"]) * 1000, 3)

    def _server_message(self, event, message, data, at):
        self.server_messages.append({"seq": event.seq, "at": at, "data": message.get("data")})
        _cap(self.server_messages)

    def _error(self, event, message, data, at):
        text = data.get("message") if isinstance(data.get("message"), str) else data.get("error")
        fatal = data.get("fatal") is True
        self.errors.append(
            {
                "seq": event.seq,
                "at": at,
                "message": text,
                "fatal": fatal,
                "type": "error",
                "id": None,
                "request_type": None,
            }
        )
        _cap(self.errors)
        self.fatal = self.fatal or fatal

    # metrics
    def _metrics(self, event, message, data, at):
        for kind, entries in data.items():
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    continue
                if kind == "tokens":
                    self._tokens(entry, at)
                    continue
                value = entry.get("value")
                if kind == "stt_usage" and isinstance(value, dict):
                    value = _number(value.get("audio_seconds"))
                    if value is not None:
                        self.totals["stt_audio_seconds"] += value
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
                self._point(kind, entry, at, value)
                if kind == "ttfb" and self._metrics_turn is not None:
                    self._turn_ttfb(entry.get("processor"), value)

    def _tokens(self, entry: dict, at: float) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = _number(entry.get(key))
            if value is not None:
                self.totals[key] += value
        total = _number(entry.get("total_tokens"))
        if total is not None:
            self._point("tokens", entry, at, total)

    def _point(self, kind: str, entry: dict, at: float, value: float) -> None:
        series = f"{entry.get('processor') or ''}|{entry.get('model') or ''}"
        points = self.metrics.setdefault(kind, {}).setdefault(series, [])
        points.append([at, value])
        if len(points) > MAX_POINTS:
            del points[0]

    def _turn_ttfb(self, processor: Any, value_ms: float) -> None:
        """The first LLM and TTS time-to-first-byte of a turn (the start-of-session zeros excluded)."""
        name = processor.lower() if isinstance(processor, str) else ""
        key = "llm_ttfb_ms" if "llm" in name else "tts_ttfb_ms" if "tts" in name else None
        if key and self._metrics_turn[key] is None:
            self._metrics_turn[key] = value_ms

    # --- reading -------------------------------------------------------------

    def latency(self) -> dict:
        """p50, p95 and max of the turns' latency in ms (None when no turn has one)."""
        values = sorted(t["latency_ms"] for t in self.turns if t["latency_ms"] is not None)
        return {"p50": _percentile(values, 50), "p95": _percentile(values, 95), "max": values[-1] if values else None}

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
        return [{k: v for k, v in item.items() if not k.startswith("_")} for item in self.transcript]

    def to_dict(self) -> dict:
        """The whole derived state, JSON-serializable."""
        return {
            "protocol_version": self.protocol_version,
            "client_version": self.client_version,
            "bot_version": self.bot_version,
            "client_about": self.client_about,
            "bot_about": self.bot_about,
            "speaking": {"user": self.lanes["user_speaking"].open, "bot": self.lanes["bot_speaking"].open},
            "intervals": {name: [list(i) for i in lane.intervals] for name, lane in self.lanes.items()},
            "interruptions": list(self.interruptions),
            "transcript": self.transcript_items(),
            "turns": [dict(t) for t in self.turns],
            "latency": self.latency(),
            "llm": dict(self.llm),
            "tts": dict(self.tts),
            "function_calls": [{k: v for k, v in c.items() if k != "key"} for c in self.function_calls.values()],
            "client_messages": [dict(m) for m in self.client_messages.values()],
            "server_messages": list(self.server_messages),
            "errors": list(self.errors),
            "fatal": self.fatal,
            "ended": self.fatal,
            "metrics": {
                kind: {s: [list(p) for p in pts] for s, pts in series.items()} for kind, series in self.metrics.items()
            },
            "totals": {**self.totals, "stt_audio_seconds": round(self.totals["stt_audio_seconds"], 3)},
            "counts": {**self.counts, "by_type": dict(self.counts["by_type"])},
            "last_at": self.last_at,
        }


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
    "bot-llm-text": SessionState._bot_llm_text,
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
    "disconnect-bot": SessionState._client_request,
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
