"""The state of a session, derived from its RTVI messages. Plain Python: no I/O, no Django.

`SessionState.apply` folds one message at a time (cheap, never raising) into
what the dashboard shows: who is speaking, the transcript, turns and their
latency, function calls, client requests, errors and metrics. It reads time
only from the events, so the same events give the same state: a live session
and its replay from the database agree.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rtvi_monitor.protocol import CATALOG, protocol_version

# Memory bounds for long sessions: the newest entries are kept.
MAX_POINTS = 2000  # per metric series
MAX_INTERVALS = 5000  # per timeline lane
MAX_ITEMS = 5000  # transcript items, errors, server messages, function calls
TIME_METRICS = frozenset({"ttfb", "processing", "ttfa", "ttfat"})  # seconds on the wire, ms here
INTERRUPTION_MERGE_S = 1.0  # a bot-interrupted this close to a barge-in is the same interruption

# Where a bot turn's text comes from, best first: what was spoken beats what was written.
BOT_SOURCES = ("bot-output", "bot-tts-text", "bot-transcription", "bot-llm-text")


@dataclass(frozen=True, slots=True)
class Event:
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
    if not text:
        return piece.lstrip()
    if piece[:1].isspace() or text[-1:].isspace() or piece[:1] in ",.;:!?'":
        return text + piece
    return f"{text} {piece}"


def _cap(items: list, limit: int = MAX_ITEMS) -> None:
    if len(items) > limit:
        del items[: len(items) - limit]


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
            at = self.intervals[-1][1]  # out-of-order receipt: never overlap the previous interval
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


class SessionState:
    """Everything derived from one session's messages; see to_dict() for its shape."""

    def __init__(self):
        self.seen: set[int] = set()
        self.protocol_version: str | None = None
        self.client_version: str | None = None
        self.bot_version: str | None = None
        self.client_about: Any = None
        self.bot_about: Any = None
        self.lanes = {name: _Lane() for name in ("user_speaking", "bot_speaking", "llm_busy", "tts_busy")}
        self.interruptions: list[float] = []
        self.transcript: list[dict] = []
        self._user_item: dict | None = None  # the user item a final transcription completes
        self._bot_item: dict | None = None  # the bot turn text is being added to
        self.turns: list[dict] = []
        self._pending_turn: dict | None = None  # user stopped, bot not yet speaking
        self.llm = {"busy": False, "current_tokens": "", "last_user_llm_text": ""}
        self.tts = {"busy": False, "current_text": ""}
        self.function_calls: dict[str, dict] = {}
        self.client_messages: dict[str, dict] = {}
        self.server_messages: list[dict] = []
        self.errors: list[dict] = []
        self.fatal = False
        self.metrics: dict[str, dict[str, list[list[float]]]] = {}
        self.totals = {"characters": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.counts = {"total": 0, "invalid": 0, "unknown": 0, "by_type": {}}
        self.last_at: float | None = None

    # --- folding -------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one message in. Duplicated sequence numbers are ignored; nothing raises."""
        if event.seq in self.seen:
            return
        self.seen.add(event.seq)
        message = event.message if isinstance(event.message, dict) else None
        msg_type = message.get("type") if message is not None else None
        msg_type = msg_type if isinstance(msg_type, str) else ""
        counts = self.counts
        counts["total"] += 1
        counts["by_type"][msg_type] = counts["by_type"].get(msg_type, 0) + 1
        if not event.valid or message is None:
            counts["invalid"] += 1
            return
        if msg_type not in CATALOG:
            counts["unknown"] += 1
            return
        at = event.received_at if isinstance(event.received_at, (int, float)) else 0.0
        self.last_at = at if self.last_at is None else max(self.last_at, at)
        data = message.get("data")
        data = data if isinstance(data, dict) else {}
        handler = _HANDLERS.get(msg_type)
        if handler is not None:
            try:
                handler(self, event, message, data, at)
            except (TypeError, ValueError, AttributeError, KeyError):
                # A valid envelope whose data still surprises us (an optional
                # field of an odd type): it is counted, its meaning skipped.
                pass

    # connection
    def _ready(self, event, message, data, at):
        version = protocol_version(message)
        if message["type"] == "client-ready":
            self.client_version = version or self.client_version
            self.client_about = data.get("about", self.client_about)
        else:
            self.bot_version = version or self.bot_version
            self.bot_about = data.get("about", self.bot_about)
        # bot-ready echoes the version the bot agreed to speak.
        self.protocol_version = self.bot_version or self.client_version

    # speaking
    def _user_started(self, event, message, data, at):
        if self.lanes["user_speaking"].start(at):
            if self.lanes["bot_speaking"].open:
                self._interrupt(at)
            self._bot_item = None
            if self._pending_turn is not None and self._pending_turn.get("bot_started_at") is None:
                self._pending_turn = None  # the user went on talking: the turn is measured from the next stop

    def _user_stopped(self, event, message, data, at):
        self.lanes["user_speaking"].stop(at)
        self._pending_turn = {
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
        turn = self._pending_turn
        if turn is not None:
            turn["bot_started_at"] = at
            turn["latency_ms"] = round((at - turn["user_stopped_at"]) * 1000, 3)
            self.turns.append(turn)
            _cap(self.turns)
            self._pending_turn = None

    def _bot_stopped(self, event, message, data, at):
        self.lanes["bot_speaking"].stop(at)
        if self._bot_item is not None:
            self._bot_item["final"] = True

    def _interrupt(self, at):
        if self.interruptions and abs(at - self.interruptions[-1]) < INTERRUPTION_MERGE_S:
            return
        self.interruptions.append(at)
        _cap(self.interruptions)
        if self.turns:
            self.turns[-1]["interrupted"] = True

    def _bot_interrupted(self, event, message, data, at):
        self._interrupt(at)

    # transcript
    def _user_transcription(self, event, message, data, at):
        text, final = data["text"], data["final"]
        item = self._user_item
        if item is None or item["final"]:
            item = {"role": "user", "text": text, "final": final, "source": "voice", "seq": event.seq, "at": at}
            self._append(item)
            self._user_item = item
        else:
            item["text"], item["final"], item["seq"], item["at"] = text, final, event.seq, at
        self._bot_item = None

    def _chat(self, event, text: str, at: float):
        last = self.transcript[-1] if self.transcript else None
        if last is not None and last["role"] == "user" and last["source"] == "chat" and last["text"] == text:
            return  # send-text from the client, then Pipecat's user-input for the same text
        self._append({"role": "user", "text": text, "final": True, "source": "chat", "seq": event.seq, "at": at})
        self._bot_item = None

    def _send_text(self, event, message, data, at):
        self._chat(event, data["content"], at)

    def _user_input(self, event, message, data, at):
        # Pipecat sends user-input beside every voice transcription too; only chat adds a line.
        if data.get("input_type") == "chat":
            self._chat(event, data["text"], at)

    def _append(self, item: dict) -> None:
        self.transcript.append(item)
        if len(self.transcript) > MAX_ITEMS:
            del self.transcript[0]

    def _bot_text(self, source: str, event: Event, at: float) -> dict:
        item = self._bot_item
        if item is None:
            item = {
                "role": "bot",
                "text": "",
                "final": False,
                "source": source,
                "seq": event.seq,
                "at": at,
                "_parts": {},
            }
            self._append(item)
            self._bot_item = item
        return item

    def _set_bot_text(self, item: dict) -> None:
        for source in BOT_SOURCES:
            part = item["_parts"].get(source)
            if part:
                item["source"] = source
                item["text"] = " ".join(part).strip() if isinstance(part, list) else part.strip()
                return

    def _sentence(self, source: str, event: Event, text: str, at: float, key: Any = None) -> None:
        text = text.strip()
        if not text:
            return
        item = self._bot_text(source, event, at)
        sentences = item["_parts"].setdefault(source, [])
        keys = item.setdefault("_keys", {}).setdefault(source, [])
        if key is not None and key in keys:
            sentences[keys.index(key)] = text  # a later status of the same segment
        elif sentences and sentences[-1] == text:
            return  # the same sentence again (bot-output comes twice per sentence)
        else:
            sentences.append(text)
            keys.append(key)
        self._set_bot_text(item)

    def _bot_output(self, event, message, data, at):
        if data.get("will_be_spoken") is False or (data.get("spoken") is False and "spoken_status" not in data):
            return  # text the bot will not say aloud (v1 sends it again once spoken)
        self._sentence("bot-output", event, data["text"], at, data.get("segment_id"))

    def _bot_transcription(self, event, message, data, at):
        self._sentence("bot-transcription", event, data["text"], at)

    def _bot_tts_text(self, event, message, data, at):
        text = data["text"]
        self.tts["current_text"] = _join_piece(self.tts["current_text"], text)
        if text.strip():
            item = self._bot_text("bot-tts-text", event, at)
            item["_parts"]["bot-tts-text"] = _join_piece(item["_parts"].get("bot-tts-text", ""), text)
            self._set_bot_text(item)

    def _bot_llm_text(self, event, message, data, at):
        text = data["text"]
        self.llm["current_tokens"] += text
        if text:
            item = self._bot_text("bot-llm-text", event, at)
            item["_parts"]["bot-llm-text"] = item["_parts"].get("bot-llm-text", "") + text
            self._set_bot_text(item)

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
        call_id = data.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = None
        call = self.function_calls.get(call_id) if call_id else None
        if call is None and call_id:
            # Adopt a call announced without an id (llm-function-call-started often has data: {}).
            call = next((c for c in reversed(self.function_calls.values()) if c["tool_call_id"] is None), None)
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
            if len(self.function_calls) > MAX_ITEMS:
                del self.function_calls[next(iter(self.function_calls))]
        if isinstance(data.get("function_name"), str):
            call["function_name"] = data["function_name"]
        args = data.get("args", data.get("arguments"))
        if args is not None and (call["args"] is None or args):  # a result may echo empty args
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
        if "result" in data:
            call["result"] = data["result"]
        self._end_call(call, "cancelled" if data.get("cancelled") else "completed", at)

    def _fc_result(self, event, message, data, at):
        call = self._call(data, event, at)
        call["result"] = data["result"]
        self._end_call(call, "completed", at)

    # client-server messaging
    def _client_message(self, event, message, data, at):
        msg_id = message.get("id") or f"#{event.seq}"
        self.client_messages[msg_id] = {
            "id": msg_id,
            "t": data["t"],
            "d": data.get("d"),
            "sent_at": at,
            "status": "pending",
            "response": None,
            "response_ms": None,
        }
        if len(self.client_messages) > MAX_ITEMS:
            del self.client_messages[next(iter(self.client_messages))]

    def _response(self, event, message, data, at):
        request = self.client_messages.get(message.get("id"))
        if message["type"] == "error-response":
            self.errors.append(
                {
                    "seq": event.seq,
                    "at": at,
                    "message": data["error"],
                    "fatal": False,
                    "type": "error-response",
                    "id": message.get("id"),
                }
            )
            _cap(self.errors)
        if request is not None and request["status"] == "pending":
            request["status"] = "answered" if message["type"] == "server-response" else "failed"
            request["response"] = data
            request["response_ms"] = round(max(0.0, at - request["sent_at"]) * 1000, 3)

    def _server_message(self, event, message, data, at):
        self.server_messages.append({"seq": event.seq, "at": at, "data": message.get("data")})
        _cap(self.server_messages)

    def _error(self, event, message, data, at):
        text = data.get("message", data.get("error"))
        fatal = data.get("fatal") is True
        self.errors.append({"seq": event.seq, "at": at, "message": text, "fatal": fatal, "type": "error", "id": None})
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
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if kind in TIME_METRICS:
                    value = round(value * 1000, 3)
                elif kind == "characters":
                    self.totals["characters"] += value
                self._point(kind, entry, at, value)
                if kind == "ttfb" and self._pending_turn is not None:
                    self._turn_ttfb(str(entry.get("processor") or ""), value)

    def _tokens(self, entry: dict, at: float) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = entry.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.totals[key] += value
        total = entry.get("total_tokens")
        if isinstance(total, (int, float)) and not isinstance(total, bool):
            self._point("tokens", entry, at, total)

    def _point(self, kind: str, entry: dict, at: float, value: float) -> None:
        series = f"{entry.get('processor') or ''}|{entry.get('model') or ''}"
        points = self.metrics.setdefault(kind, {}).setdefault(series, [])
        points.append([at, value])
        if len(points) > MAX_POINTS:
            del points[0]

    def _turn_ttfb(self, processor: str, value_ms: float) -> None:
        name = processor.lower()
        key = "llm_ttfb_ms" if "llm" in name else "tts_ttfb_ms" if "tts" in name else None
        if key and self._pending_turn[key] is None:
            self._pending_turn[key] = value_ms

    # --- reading -------------------------------------------------------------

    def latency(self) -> dict:
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
            "totals": dict(self.totals),
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
    "send-text": SessionState._send_text,
    "user-input": SessionState._user_input,
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
