"""The state of a session, derived from its RTVI messages. Plain Python: no I/O, no Django.

`SessionState.apply` folds one message at a time (cheap, never raising) into
what the dashboard shows: who is speaking, the transcript, turns and their
latency, function calls, client requests, errors and metrics. It reads time
only from the events, so the same events in the same order give the same
state: a live session and its replay from the database agree.

Each message type goes to the part whose concern it is (rtvi_monitor/core/reducer/):
who is speaking and what the LLM and TTS are doing (speaking.py), the turns
and their latency (turns.py), the transcript (transcript.py), function calls
(calls.py), client-server messaging (messaging.py), errors (errors.py) and
metrics (metrics.py), all within the bounds of limits.py; which messages were
folded in, and what they were, counted (counts.py). What is the session's
own stays here: its two ends' versions, its end, and the state as the pages
get it (to_dict, and patches by take_changes).
"""

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from rtvi_monitor.core.contributions import LATENCY_TYPE
from rtvi_monitor.core.patches import Tail, public, put, same
from rtvi_monitor.core.protocol import protocol_version
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.calls import Calls
from rtvi_monitor.core.reducer.counts import Counts, Seen
from rtvi_monitor.core.reducer.errors import Errors
from rtvi_monitor.core.reducer.limits import bounded, number
from rtvi_monitor.core.reducer.messaging import Messaging
from rtvi_monitor.core.reducer.metrics import Metrics
from rtvi_monitor.core.reducer.operators import Operators
from rtvi_monitor.core.reducer.speaking import LANES, Lane, Speaking
from rtvi_monitor.core.reducer.transcript import Transcript
from rtvi_monitor.core.reducer.turns import Turns, with_waterfall


class Event(NamedTuple):
    """One stored message of a session, as the reducer sees it (immutable; a NamedTuple: one per message)."""

    seq: int
    direction: str  # "to-client" or "from-client"
    received_at: float  # epoch seconds
    message: dict | None
    valid: bool = True
    error: str = ""
    redacted: dict | None = None  # what redaction removed from it before it was stored: {"card": 1}
    stream: str = ""  # the stream it came on: "dashboard" for an operator's action (reducer/operators.py)


class SessionState:
    """Everything derived from one session's messages; see to_dict() for its shape."""

    def __init__(self):
        self._seen = Seen()
        self._counts = Counts()
        self.protocol_version: str | None = None
        self.client_version: str | None = None
        self.bot_version: str | None = None
        self.client_about: Any = None
        self.bot_about: Any = None
        self.lanes = {name: Lane() for name in LANES}
        # The parts, a concern each (rtvi_monitor/core/reducer/). The lists and tables they keep are the state's
        # too, under the names its readers use (state.transcript, state.turns, ...).
        self._turns = Turns()
        self._transcript = Transcript(self.lanes)
        self._speaking = Speaking(self.lanes, self._turns, self._transcript)
        self._calls = Calls()
        self._errors = Errors()
        self._messaging = Messaging(self._errors)
        self._metrics = Metrics(self._turns)
        self._operators = Operators(self._transcript)
        self.transcript = self._transcript.lines
        self.turns, self.interruptions = self._turns.turns, self._turns.interruptions
        self.llm, self.tts = self._speaking.llm, self._speaking.tts
        self.function_calls = self._calls.function_calls
        self.client_messages = self._messaging.client_messages
        self.server_messages = self._messaging.server_messages
        self.errors = self._errors.errors
        self.metrics, self.totals, self.usage = self._metrics.metrics, self._metrics.totals, self._metrics.usage
        self.markers = Tail(limits.MAX_ITEMS)  # moments the timeline marks: the client's disconnect-bot, the end
        self.fatal = False
        self.ended = False
        self.end_reason = ""
        self.end_kind = ""  # models.EndKind's value once ended
        self.hung_up_at: float | None = None  # when the client sent disconnect-bot
        self.version = 0  # messages folded in so far: where a patch stream stands
        self._sent_head: dict = {}
        self.counts = self._counts.counts
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
        return self._seen.upto

    def _apply(self, event: Event) -> None:
        if not self._seen.first(event.seq):
            return
        self.version += 1
        message = event.message if isinstance(event.message, dict) else None
        msg_type = message.get("type") if message is not None else None
        if not self._counts.count(event, msg_type):
            return

        at = number(event.received_at)
        if at is None:
            at = self.last_at or 0.0
        self.last_at = at if self.last_at is None else max(self.last_at, at)
        route = _ROUTES.get(msg_type)
        if route is not None:
            part, handler = route
            data = message.get("data")
            data = data if isinstance(data, dict) else {}
            handler(self if part is None else getattr(self, part), event, message, data, at)

    # --- the session's own messages --------------------------------------------

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

    def _send_text(self, event, message, data, at):
        self._messaging.request(event, message, data, at)
        if not self._operators.sent(event, message, data, at):
            self._transcript.send_text(event, message, data, at)

    def _server_message(self, event, message, data, at):
        if not self._operators.record(event, message, data, at):
            self._messaging.server_message(event, message, data, at)

    @property
    def ended_by(self) -> str:
        """The operator whose end of the call its bot took, before any hang-up ("" when none): reducer/operators.py."""
        ops, hung_up = self._operators, self.hung_up_at
        return "" if hung_up is not None and ops.ended_at is not None and hung_up <= ops.ended_at else ops.ended_by

    def _disconnect_bot(self, event, message, data, at):
        self._messaging.request(event, message, data, at)
        self.markers.append({"at": at, "kind": "disconnect-bot", "seq": event.seq})
        if self.hung_up_at is None:
            self.hung_up_at = at

    def _error(self, event, message, data, at):
        if self._errors.error(event, data, at):
            self.fatal = True
            self.end(at, "fatal error", "fatal_error")

    # --- the session's end, which the server knows and the messages may not ---

    def end(self, at: float, reason: str, kind: str = "") -> None:
        """The session ended (its bot left, or a fatal error): nobody speaks or works any more.

        `kind` is how (rtvi_monitor.models.EndKind's value), `reason` the words for it.
        """
        if self.ended:
            return
        self.ended, self.end_reason, self.end_kind = True, reason, kind
        at = max(at, self.last_at or at)
        self._speaking.end(at)
        self.markers.append({"at": at, "kind": "ended", "reason": reason})
        self.version += 1

    # --- reading -------------------------------------------------------------

    def latency(self) -> dict:
        """p50, p95 and max of the turns' latency in ms (None when no turn has one)."""
        return self._turns.latency()

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
            "ended_by": self.ended_by,
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
        yield ("turns",), self.turns, with_waterfall
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
        state["function_calls"] = self._calls.rows()
        state["client_messages"] = self._messaging.rows()
        return dict(sorted(state.items()))

    def bases(self) -> dict:
        """Where each list of to_dict() starts (items dropped before it): a patch stream continues from here."""
        bases: dict = {}
        for path, tail, _ in self._tails():
            put(bases, path, tail.dropped)
        return bases

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
        if self._calls.changed:
            changes["function_calls"] = self._calls.rows()
        if self._messaging.changed:
            changes["client_messages"] = self._messaging.rows()
        self._calls.changed = self._messaging.changed = False
        return changes

    def snapshot(self) -> dict:
        """to_dict() and bases(), and the patch stream restarts from here."""
        self.take_changes()  # marks up to now are in the copy: nothing is sent twice
        return {"state": self.to_dict(), "bases": self.bases()}


# A message type's route: the state's attribute that holds the part (None: the state itself), and the
# handler, called with that part.
Route = tuple[str | None, Callable[..., None]]


def _routes(part: str | None, handlers: dict[str, Callable[..., None]]) -> dict[str, Route]:
    return {msg_type: (part, handler) for msg_type, handler in handlers.items()}


# Each message type's handler, by part. One table for all states rather than bound methods per state: the
# live path interleaves thousands of sessions, and one more object per state to reach for every message costs.
_ROUTES: dict[str, Route] = {
    **_routes(
        None,
        {
            "client-ready": SessionState._ready,
            "bot-ready": SessionState._ready,
            "send-text": SessionState._send_text,
            "disconnect-bot": SessionState._disconnect_bot,
            "server-message": SessionState._server_message,
            "error": SessionState._error,
        },
    ),
    **_routes(
        "_speaking",
        {
            "user-started-speaking": Speaking.user_started,
            "user-stopped-speaking": Speaking.user_stopped,
            "bot-started-speaking": Speaking.bot_started,
            "bot-stopped-speaking": Speaking.bot_stopped,
            "bot-interrupted": Speaking.bot_interrupted,
            "bot-llm-started": Speaking.llm_started,
            "bot-llm-stopped": Speaking.llm_stopped,
            "bot-llm-text": Speaking.llm_text,
            "llm-raw-text": Speaking.llm_text,
            "user-llm-text": Speaking.user_llm_text,
            "bot-tts-started": Speaking.tts_started,
            "bot-tts-stopped": Speaking.tts_stopped,
            "bot-tts-text": Speaking.tts_text,
            "tts-raw-text": Speaking.tts_text,
        },
    ),
    **_routes(
        "_transcript",
        {
            "user-transcription": Transcript.user_transcription,
            "user-input": Transcript.user_input,
            "bot-output": Transcript.bot_output,
            "bot-transcription": Transcript.bot_transcription,
        },
    ),
    **_routes(
        "_calls",
        {
            "llm-function-call-started": Calls.started,
            "llm-function-call-start": Calls.started,
            "llm-function-call": Calls.started,
            "llm-function-call-in-progress": Calls.in_progress,
            "llm-function-call-stopped": Calls.stopped,
            "llm-function-call-result": Calls.result,
        },
    ),
    **_routes(
        "_messaging",
        {
            "client-message": Messaging.client_message,
            "append-to-context": Messaging.request,
            "send-file": Messaging.request,
            "server-response": Messaging.response,
            "error-response": Messaging.response,
        },
    ),
    **_routes("_metrics", {"metrics": Metrics.fold}),
    **_routes("_turns", {LATENCY_TYPE: Turns.latency_breakdown}),
}


def replay(events: Iterable[Event]) -> SessionState:
    """A state folded from events in the given order."""
    state = SessionState()
    for event in events:
        state.apply(event)
    return state
