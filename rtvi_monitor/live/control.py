"""Act on a live call: end it, or send text into it, through its bot's own ingest socket.

A bot whose package takes control frames says so when it connects
(`?control=1`, rtvi_dashboard.wire). The dashboard then reaches it down that
same socket: a control frame goes to the bot, the bot applies it to its
pipeline and answers with a control-result frame (docs/PROTOCOL.md, "Control").

The request (an HTTP request, on any server process) and the bot's socket
(on the process that holds the session, `Session.holder`) meet through the
channel layer: every process that has bots connected listens on its own
channel, `inbox(SERVER_ID)`; a request goes there with a reply channel of its
own and waits (`ask`). The holding process finds the bot's connection
(`Hub.connections`), sends the frame, waits for the answer (`CONTROL_TIMEOUT`),
stores what the operator did as a message of the session, and replies. With
one process and the in-memory layer it is the same path in one process.

What the operator did comes in as a bot's message does, through the one way in
(live/intake.py `take_in`: judged, redacted, numbered and stored with the
session's other messages), on the "dashboard" stream; the session is found by
its key in the registry, never through a bot's connection.

Pure message moving and bookkeeping: the consumer (rtvi_monitor/live/consumers.py)
hands frames here, the API (rtvi_monitor/sessions/api.py) asks and answers.
"""

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from channels.layers import get_channel_layer
from django.conf import settings
from rtvi_dashboard.wire import CONTROL, CONTROL_VERSION, MAX_CONTROL_ERROR, MAX_CONTROL_TEXT

from rtvi_monitor.live import intake
from rtvi_monitor.live.registry import SERVER_ID, registry
from rtvi_monitor.live.relay import received
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.live.writer import get_writer

logger = logging.getLogger(__name__)

CONTROL_STREAM = "dashboard"  # the stream the operators' actions are stored under, beside the bot's messages
PROBE_TIMEOUT = 2.0  # seconds the page waits to learn whether a bot takes control
MARGIN = 1.0  # seconds a request waits past the bot's deadline for the holding process to answer

ENDED = "the session has ended"
NO_PACKAGE = (
    "this bot does not take control frames: it streams without the rtvi-dashboard package's control "
    "(an older package, a bot of its own, or RTVI_DASHBOARD_CONTROL=0)"
)
MOVED = "the bot is not connected to the server process that held it any more; try again in a moment"


def timeout() -> float:
    """Seconds the dashboard waits for a bot's answer (LIVE_CONTROL_TIMEOUT, 5 by default)."""
    return settings.LIVE_CONTROL_TIMEOUT


def inbox(server_id: str) -> str:
    """The channel a server process takes control requests on."""
    return f"rtvi-control.{server_id}"


@dataclass
class Outcome:
    """What became of a request: `status` is the HTTP status the API answers with."""

    ok: bool
    status: int
    error: str = ""
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "status": self.status, "error": self.error, "detail": self.detail}

    @classmethod
    def from_dict(cls, value: dict) -> "Outcome":
        status, error = int(value.get("status", 500)), str(value.get("error", ""))
        return cls(bool(value.get("ok")), status, error, value.get("detail") or {})


def unavailable(reason: str) -> Outcome:
    return Outcome(False, 409, reason)


def before_asking(session) -> Outcome | None:
    """Why no bot can be asked, from the session row alone (ended, or its bot away); None when one may be."""
    if session.status != session.Status.LIVE:
        return unavailable(ENDED)
    state = session.bot_state
    if state == "finished":
        return unavailable("the bot has finished the call; the session is ending")
    if state == "away":
        return unavailable("the bot is not connected (it left, and may come back within the grace period)")
    if not session.holder:
        return unavailable(MOVED)
    return None


async def ask(session, request: dict, wait: float) -> Outcome:
    """Send `request` to the process holding the session's bot; its answer, or why there was none."""
    refused = before_asking(session)
    if refused is not None:
        return refused
    layer = get_channel_layer()
    reply = await layer.new_channel(prefix="rtvi-control-reply.")
    try:
        message = {"type": "control.request", "reply": reply, "session": session.pk, **request}
        await layer.send(inbox(session.holder), message)
    except Exception as exc:  # the layer is down (Redis), or full: say so rather than fail
        logger.warning("A control request could not be sent through the channel layer", exc_info=True)
        return Outcome(False, 503, f"the dashboard could not reach the bot's server process ({type(exc).__name__})")
    try:
        message = await asyncio.wait_for(layer.receive(reply), wait)
    except TimeoutError:
        return Outcome(False, 504, f"the server process holding the bot's connection did not answer within {wait:g} s")
    return Outcome.from_dict(message.get("outcome") or {})


async def availability(session) -> dict:
    """Whether an operator can act on the session now: {"available": bool, "reason": str, "version": int}."""
    outcome = await ask(session, {"op": "probe"}, PROBE_TIMEOUT)
    return {
        "available": outcome.ok,
        "reason": "" if outcome.ok else outcome.error,
        "version": outcome.detail.get("version", 0) if outcome.ok else 0,
        "actions": ["end", "send-text"] if outcome.ok else [],
    }


async def end(session, operator: str, cancel: bool = False) -> Outcome:
    """Ask the bot to end its call: gracefully (its pipeline's EndFrame), or at once (`cancel`)."""
    wait = timeout()
    return await ask(session, {"op": "end", "operator": operator, "cancel": cancel, "timeout": wait}, wait + MARGIN)


async def send_text(session, operator: str, content: str, options: dict) -> Outcome:
    """Ask the bot to take `content` as RTVI send-text with `options` (run_immediately, audio_response)."""
    wait = timeout()
    request = {"op": "send-text", "operator": operator, "content": content, "options": options, "timeout": wait}
    return await ask(session, request, wait + MARGIN)


def send_text_body(raw: bytes) -> tuple[dict | None, str]:
    """A send-text request's body, checked: ({"content", "options"}, "") or (None, what is wrong)."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return None, 'expected a JSON object: {"content": "...", "options": {"run_immediately": true}}'
    if not isinstance(body, dict):
        return None, 'expected a JSON object: {"content": "...", "options": {...}}'
    unknown = sorted(set(body) - {"content", "options"})
    if unknown:
        return None, f"unknown field {unknown[0]!r}: expected content and options"
    content = body.get("content")
    if not isinstance(content, str) or not content.strip():
        return None, "content: expected the text to send, a non-empty string"
    if len(content) > MAX_CONTROL_TEXT:
        return None, f"content: at most {MAX_CONTROL_TEXT} characters, got {len(content)}"
    options = body.get("options", {})
    if not isinstance(options, dict):
        return None, "options: expected an object with run_immediately and audio_response (true or false)"
    for name, value in options.items():
        if name not in ("run_immediately", "audio_response"):
            return None, f"options: unknown option {name!r}: expected run_immediately or audio_response"
        if not isinstance(value, bool):
            return None, f"options.{name}: expected true or false, got {json.dumps(value)[:40]}"
    # The spec's defaults, written out: what the operator asked for is what the audit log says.
    options = {name: options.get(name, True) for name in ("run_immediately", "audio_response")}
    return {"content": content, "options": options}, ""


def end_body(raw: bytes) -> tuple[dict | None, str]:
    """An end request's body (optional): {"cancel": bool}; ({"cancel": ...}, "") or (None, what is wrong)."""
    if not raw or not raw.strip():
        return {"cancel": False}, ""
    try:
        body = json.loads(raw)
    except ValueError:
        return None, 'expected no body, or a JSON object: {"cancel": false}'
    if not isinstance(body, dict):
        return None, 'expected a JSON object: {"cancel": false}'
    unknown = sorted(set(body) - {"cancel"})
    if unknown:
        return None, f"unknown field {unknown[0]!r}: expected cancel"
    cancel = body.get("cancel", False)
    if not isinstance(cancel, bool):
        return None, f"cancel: expected true or false, got {json.dumps(cancel)[:40]}"
    return {"cancel": cancel}, ""


class Hub:
    """This process's side: the bots connected here (for the requests that reach them) and the answers awaited.

    Every process with a bot connected listens on `inbox(SERVER_ID)` (one task per event loop, from its
    first bot connection to its last), so it can say at once why a bot cannot be reached, too.
    """

    def __init__(self):
        self.connections: dict[int, list] = {}  # session pk -> its bots' ingest consumers here, oldest first
        self.pending: dict[str, tuple[object, asyncio.Future]] = {}  # control id -> (the consumer asked, its answer)
        self.listeners: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}
        self.attached: dict[asyncio.AbstractEventLoop, int] = {}
        self.tasks: set[asyncio.Task] = set()

    # --- bot connections (IngestConsumer) ---------------------------------------------

    def attach(self, consumer, session_pk: int) -> None:
        """A bot's connection to the session of this key is open here (the session attached); `consumer.control_version`
        is what it takes."""
        self.connections.setdefault(session_pk, []).append(consumer)
        loop = asyncio.get_running_loop()
        self.attached[loop] = self.attached.get(loop, 0) + 1
        listener = self.listeners.get(loop)
        if listener is None or listener.done():
            for old in [old for old in self.listeners if old.is_closed()]:
                del self.listeners[old]
                self.attached.pop(old, None)
            self.listeners[loop] = loop.create_task(self._listen(), name="rtvi-control-inbox")

    def detach(self, consumer, session_pk: int) -> None:
        """The connection went: what was asked of it is answered "disconnected" now."""
        held = self.connections.get(session_pk, [])
        if consumer not in held:
            return
        held.remove(consumer)
        if not held:
            del self.connections[session_pk]
        for asked, answer in list(self.pending.values()):
            if asked is consumer and not answer.done():
                answer.set_result({"ok": False, "error": "the bot disconnected before it answered"})
        loop = asyncio.get_running_loop()
        self.attached[loop] = self.attached.get(loop, 1) - 1
        if self.attached[loop] <= 0:
            listener = self.listeners.pop(loop, None)
            if listener is not None:
                listener.cancel()

    def result(self, consumer, frame: dict) -> None:
        """A bot's control-result frame: the answer its request waits for (one of another connection is ignored)."""
        control_id = frame.get("id")
        waiting = self.pending.get(control_id) if isinstance(control_id, str) else None
        if waiting is None or waiting[0] is not consumer or waiting[1].done():
            logger.info("A control result nobody waits for (id %r) was dropped", str(control_id)[:64])
            return
        waiting[1].set_result(frame)

    # --- requests from any process ------------------------------------------------------

    async def _listen(self) -> None:
        layer = get_channel_layer()
        channel = inbox(SERVER_ID)
        async for message in received(layer, channel, "control requests"):
            # Each in a task: a bot slow to answer never holds up the others' requests.
            task = asyncio.get_running_loop().create_task(self._serve(layer, message))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _serve(self, layer, message: dict) -> None:
        try:
            outcome = await self._answer(message)
        except Exception:
            logger.exception("A control request for session %s failed", message.get("session"))
            outcome = Outcome(False, 500, "the dashboard could not pass this on to the bot; it has been logged")
        try:
            await layer.send(message["reply"], {"type": "control.answer", "outcome": outcome.as_dict()})
        except Exception:
            logger.warning("A control answer could not be sent back", exc_info=True)

    async def _answer(self, message: dict) -> Outcome:
        held = self.connections.get(message.get("session"), [])
        if not held:
            return unavailable(MOVED)
        able = [c for c in held if c.control_version >= 1]
        if not able:
            return unavailable(NO_PACKAGE)
        consumer = able[-1]  # the newest connection: a bot that reconnected is its newest
        if message["op"] == "probe":
            return Outcome(True, 200, detail={"version": min(consumer.control_version, CONTROL_VERSION)})
        control_id = uuid.uuid4().hex
        frame = {"type": CONTROL, "v": CONTROL_VERSION, "id": control_id, "action": message["op"]}
        if message["op"] == "end":
            frame["cancel"] = bool(message.get("cancel"))
        else:
            frame["content"], frame["options"] = message["content"], message["options"]
        wait = float(message.get("timeout") or timeout())
        asked = registry.find(message["session"])  # held: its bot is connected here
        outcome = await self._ask_bot(consumer, frame, wait)
        outcome.detail["id"] = control_id
        # The session as held now; the one asked if its bot left meanwhile (stored all the same, read back when loaded).
        live = registry.find(message["session"]) or asked
        if live is not None:
            _record(live, message, frame, outcome)
        return outcome

    async def _ask_bot(self, consumer, frame: dict, wait: float) -> Outcome:
        answer = asyncio.get_running_loop().create_future()
        self.pending[frame["id"]] = (consumer, answer)
        try:
            await consumer.send(text_data=json.dumps(frame))
            result = await asyncio.wait_for(answer, wait)
        except TimeoutError:
            return Outcome(False, 504, f"the bot did not answer within {wait:g} s")
        finally:
            self.pending.pop(frame["id"], None)
        if result.get("ok") is True:
            return Outcome(True, 200, detail={"answer": "the bot took it"})
        error = result.get("error")
        error = error[:MAX_CONTROL_ERROR] if isinstance(error, str) and error else "no reason given"
        return Outcome(False, 502, f"the bot did not take it: {error}")


def _record(live: LiveSession, message: dict, frame: dict, outcome: Outcome) -> None:
    """The operator's action, as a message of the session (stream "dashboard"): its log shows it, its transcript
    as the operator's line (rtvi_monitor/core/reducer/operators.py reads `data["dashboard"]`). It comes in as a
    bot's message does (intake.take_in: redacted as one); nobody is answered when it is stored."""
    operator = str(message.get("operator") or "an operator")[:200]
    if frame["action"] == "end":
        did = f"operator {operator} {'cancelled' if frame['cancel'] else 'ended'} the call"
    else:
        options = frame["options"]
        how = [
            "run now" if options["run_immediately"] else "for the next turn",
            "spoken" if options["audio_response"] else "not spoken",
        ]
        did = f"operator {operator} sent text ({len(frame['content'])} characters; {', '.join(how)})"
    said = "the bot took it" if outcome.ok else outcome.error
    data = {
        "text": f"{did}: {said}",
        "dashboard": {"action": frame["action"], "id": frame["id"], "operator": operator, "ok": outcome.ok},
    }
    if frame["action"] == "end":
        data["dashboard"]["cancel"] = bool(frame["cancel"])
    else:
        # The words themselves, as the session's transcript shows them (rtvi_monitor/core/reducer/operators.py):
        # a bot that does not report the send-text it was handed, or refused it, leaves no other copy.
        data["dashboard"]["content"], data["dashboard"]["options"] = frame["content"], frame["options"]
    if not outcome.ok:
        data["dashboard"]["error"] = outcome.error
    stored = {"label": "rtvi-ai", "type": "server-message", "id": f"dashboard-{frame['id']}", "data": data}
    intake.take_in(get_writer(), live, [stored], time.time(), intake.NOBODY, CONTROL_STREAM)


hub = Hub()
