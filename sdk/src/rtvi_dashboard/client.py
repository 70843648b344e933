"""Stream a bot's RTVI messages to the dashboard. Needs only `websockets`; no Django.

    client = DashboardClient("ws://dashboard:8000", token, session_id, agent_id)
    client.start()                       # from inside the bot's event loop
    client.send(message)                 # never blocks, never raises
    client.send(message, "from-client")  # what the bot's client sent it
    await client.close()                 # waits (bounded) for the last acks, then closes with 1000

Every message gets a sequence number and waits in a bounded buffer until the
dashboard acknowledges that it is stored (it asks for ranged acks, `?acks=ranges`:
one {"acks": [[first, last], ...]} frame per dashboard write, rather than a
frame per message; older dashboards ack each message). On a lost connection the client
reconnects with jittered backoff and resends whatever was not acknowledged;
the dashboard stores each (stream, seq) once, so nothing is lost or doubled.
Each client is its own stream (`?stream=<id>`, a random id it keeps across
reconnects): a bot that restarts, or two clients in one session, number
from 1 each without colliding.
When the buffer is full the oldest messages are dropped (and counted): a bot
must never slow down or fail because its monitor is away. A message that can
never be stored (not JSON-serializable, or bigger than a frame may be) is
dropped at once with the reason in the log and `stats`, never retried.

When the dashboard says it cannot store right now ({"retry": true}), the
client resends what is unacknowledged after a back-off.

Control: a client given a control handler (`set_control`, which the Pipecat
integration does) announces it in its ingest URL (`?control=1`), and the
dashboard may then send it control frames: end the call, or send text into
it (wire.py and the dashboard's docs/PROTOCOL.md, "Control"). The handler
applies each one; the client answers every frame once with its result.

`close()` (the bot's pipeline ended) closes the socket with 1000, normal
closure: the dashboard ends the session at once ("bot finished"). A bot that
vanishes (killed, network gone) closes with nothing or another code, and the
dashboard waits out its grace period for it to come back.
"""

import asyncio
import json
import logging
import random
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlencode

import websockets
from rtvi_dashboard.wire import (
    ACKS_PARAM,
    ACKS_RANGES,
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_TOO_BIG,
    CONTROL,
    CONTROL_ACTIONS,
    CONTROL_PARAM,
    CONTROL_RESULT,
    CONTROL_VERSION,
    FATAL_CLOSE_CODES,
    MAX_CONTROL_ERROR,
    MAX_FRAME_BYTES,
    STREAM_PARAM,
    TAG_PARAMS,
    TAG_RE,
    TAG_RULE,
    valid_range,
)

logger = logging.getLogger("rtvi_dashboard.client")

# What applies a control frame: given the frame, it does what it asks, or raises with the reason it
# cannot (ControlRefused, or any exception: its text is the reason). It may return a coroutine function
# to run once the answer has gone (ending the call closes this client: the answer must go first).
ControlHandler = Callable[[dict], Awaitable[Callable[[], Awaitable[None]] | None]]


def checked_tags(tags: dict[str, str] | None) -> dict[str, str]:
    """The tags for the ingest URL (wire.TAG_PARAMS: deployment, eval_run, eval_scenario), empty ones left out;
    ValueError, when the bot starts rather than when the dashboard refuses it, for a name or value it refuses."""
    given = {name: str(value) for name, value in (tags or {}).items() if value not in (None, "")}
    for name, value in given.items():
        if name not in TAG_PARAMS:
            raise ValueError(f"unknown tag {name!r}: the dashboard takes {', '.join(TAG_PARAMS)}")
        if not re.match(TAG_RE, value):
            raise ValueError(f"tag {name}={value[:120]!r}: {TAG_RULE}")
    return given


class ControlRefused(Exception):
    """A control frame this bot will not apply; the message is the reason the dashboard shows."""


class _Control:
    """The dashboard acting on the call: its control frames, applied by the bot's handler and answered once each.

    Each frame is applied and answered in a task of its own, so that acks keep being read meanwhile.
    """

    def __init__(self, stats: dict):
        self.handler: ControlHandler | None = None
        self.stats = stats
        self._tasks: set[asyncio.Task] = set()

    def take(self, socket, frame: dict) -> None:
        task = asyncio.get_running_loop().create_task(self.answer(socket, frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def answer(self, socket, frame: dict) -> None:
        control_id = frame.get("id")
        if not isinstance(control_id, str):
            logger.warning("A control frame without an id was ignored")
            return
        then, error = None, ""
        self.stats["controls"] += 1
        try:
            if self.handler is None:
                raise ControlRefused("this bot takes no control frames")
            if frame.get("v") != CONTROL_VERSION:
                raise ControlRefused(f"control version {frame.get('v')!r}: this bot speaks {CONTROL_VERSION}")
            if frame.get("action") not in CONTROL_ACTIONS:
                raise ControlRefused(f"unknown action {str(frame.get('action'))[:40]!r}")
            then = await self.handler(frame)
        except Exception as exc:  # whatever the handler raises is the reason, and the bot goes on
            error = (str(exc) or type(exc).__name__)[:MAX_CONTROL_ERROR]
            logger.warning("The dashboard's %s was not applied: %s", frame.get("action"), error)
        answer = {"type": CONTROL_RESULT, "id": control_id, "ok": not error}
        if error:
            answer["error"] = error
        try:
            await socket.send(json.dumps(answer))
        except Exception as exc:  # the connection went: the dashboard says it had no answer
            logger.warning("The answer to the dashboard's %s was not sent: %s", frame.get("action"), exc)
        if then is not None:
            try:
                await then()
            except Exception:
                logger.exception("Applying the dashboard's %s failed", frame.get("action"))


class _Outbox:
    """The messages the dashboard has not stored yet: numbered, oldest first, within a bound (the oldest are
    dropped, and counted), each sent again on every new connection until it is acknowledged."""

    def __init__(self, stats: dict):
        self.stats = stats
        self.seq = 0  # the last seq given
        self.unacked: OrderedDict[int, str] = OrderedDict()  # seq -> frame text, oldest first
        self.unsent: list[int] = []  # seqs not yet written on the current connection

    def add(self, frame: str, max_buffer: int) -> int:
        """A message's frame (numbered self.seq + 1): its seq."""
        self.seq += 1
        if len(self.unacked) >= max_buffer:
            self.unacked.popitem(last=False)
            self.stats["dropped"] += 1
            if self.stats["dropped"] in (1, 10, 100) or self.stats["dropped"] % 1000 == 0:
                logger.warning("Dashboard unreachable: %d messages dropped so far", self.stats["dropped"])
        self.unacked[self.seq] = frame
        self.unsent.append(self.seq)
        return self.seq

    def resend(self) -> None:
        """Everything unacknowledged goes again, in order."""
        self.unsent = list(self.unacked)

    def next_frames(self, max_batch: int, max_frame_bytes: int) -> list[str]:
        """The next frames to send together: at most max_batch, and within the frame limit in bytes."""
        frames, size, taken = [], 16, 0
        for seq in self.unsent:
            if len(frames) >= max_batch:
                break
            frame = self.unacked.get(seq)
            taken += 1
            if frame is None:
                continue
            if frames and size + len(frame) + 1 > max_frame_bytes:
                taken -= 1
                break
            frames.append(frame)
            size += len(frame) + 1
        del self.unsent[:taken]
        return frames

    def drop_too_big(self, max_frame_bytes: int) -> None:
        for seq, frame in list(self.unacked.items()):
            if len(frame.encode()) > max_frame_bytes:
                del self.unacked[seq]
                self.stats["too_big"] += 1
                logger.warning("RTVI message %d dropped: over the dashboard's frame limit", seq)

    def acknowledge(self, seq) -> None:
        """{"ack": seq}: that one is stored."""
        if self.unacked.pop(seq, None) is not None:
            self.stats["acked"] += 1

    def acknowledge_ranges(self, runs) -> None:
        """{"acks": [[first, last], ...]}: every seq in those runs is stored."""
        if not isinstance(runs, list):
            return
        for run in runs:
            if not valid_range(run):
                continue
            first, last = run
            if last - first >= len(self.unacked):
                # A run wider than what we hold: walk what we hold, not the run.
                seqs = [seq for seq in self.unacked if first <= seq <= last]
            else:
                seqs = range(first, last + 1)
            for seq in seqs:
                if self.unacked.pop(seq, None) is not None:
                    self.stats["acked"] += 1


class DashboardClient:
    """Streams one session's RTVI messages to the dashboard (see the module's docstring); one event loop."""

    def __init__(
        self,
        url: str,
        token: str,
        session_id: str,
        agent_id: str | None = None,
        *,
        max_buffer: int = 10_000,
        batch_interval: float = 0.05,
        max_batch: int = 200,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        stream: str | None = None,
        tags: dict[str, str] | None = None,
    ):
        base = url.rstrip("/")
        # Whose seqs these are: this client's, across its reconnects (wire.STREAM_PARAM).
        self.stream = stream or uuid.uuid4().hex
        # Ranged acks: one frame per dashboard write instead of one per message (a server
        # that does not know them ignores the parameter and acks each message).
        query = {"agent": agent_id} if agent_id else {}
        query[ACKS_PARAM] = ACKS_RANGES
        query[STREAM_PARAM] = self.stream
        query.update(checked_tags(tags))
        self.url = f"{base}/ws/ingest/{quote(session_id, safe='')}/?{urlencode(query, quote_via=quote)}"
        self.token = token
        self.session_id = session_id
        self.max_buffer = max_buffer
        self.batch_interval = batch_interval
        self.max_batch = max_batch
        self.max_frame_bytes = max_frame_bytes
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._socket = None  # the open connection, for close()'s 1000
        self.stats = {
            "sent": 0,
            "acked": 0,
            "errors": 0,
            "dropped": 0,
            "too_big": 0,
            "unserializable": 0,
            "retries": 0,
            "reconnects": 0,
            "controls": 0,
            "connected": False,
        }
        self.last_error = ""
        self._resend_at: float | None = None
        self._outbox = _Outbox(self.stats)
        self._control = _Control(self.stats)

    # --- control: the dashboard acting on the call ------------------------------

    def set_control(self, handler: ControlHandler | None) -> None:
        """Take the dashboard's control frames with `handler` (None: none), announced from the next connection.

        Set it before start(): the capability goes in the ingest URL (`?control=1`).
        """
        self._control.handler = handler

    @property
    def connect_url(self) -> str:
        """The ingest URL this client connects to: `url`, with the control capability when it has a handler."""
        return f"{self.url}&{CONTROL_PARAM}={CONTROL_VERSION}" if self._control.handler is not None else self.url

    # --- the bot's side: cheap and synchronous ---------------------------------

    def start(self) -> None:
        """Start streaming in the background (idempotent; needs a running event loop)."""
        if self._task is None or self._task.done():
            self._wake, self._idle = asyncio.Event(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"rtvi-dashboard-{self.session_id}")

    def send(self, message: dict, direction: str = "to-client") -> int | None:
        """Queue one RTVI message; returns its seq, or None when it was dropped. Never blocks, never raises."""
        try:
            return self._queue(message, direction)
        except Exception as exc:  # whatever the bot hands us, the bot goes on
            self.stats["unserializable"] += 1
            self.last_error = f"RTVI message dropped: {type(exc).__name__}"
            logger.warning("RTVI message not sent to the dashboard: %s", self.last_error)
            return None

    def _queue(self, message: dict, direction: str) -> int | None:
        try:
            frame = json.dumps(
                {"seq": self._outbox.seq + 1, "direction": direction, "sent_at": time.time(), "message": message},
                allow_nan=False,
            )
        except (TypeError, ValueError, RecursionError) as exc:
            self.stats["unserializable"] += 1
            self.last_error = f"RTVI message dropped: not JSON ({type(exc).__name__}: {str(exc)[:100]})"
            logger.warning("%s", self.last_error)
            return None
        if len(frame.encode()) > self.max_frame_bytes:
            self.stats["too_big"] += 1
            self.last_error = (
                f"RTVI message dropped: {len(frame)} bytes, over the {self.max_frame_bytes}-byte frame limit"
            )
            logger.warning("%s", self.last_error)
            return None
        seq = self._outbox.add(frame, self.max_buffer)
        if self._wake is not None:
            self._idle.clear()
            self._wake.set()
        return seq

    async def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything sent so far is acknowledged; False on timeout."""
        if not self._outbox.unacked:
            return True
        if self._idle is None:
            return False
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float = 5.0, finished: bool = True) -> None:
        """Flush (bounded by timeout), then close the socket with 1000 (normal closure) and stop.

        1000 tells the dashboard the session is over (its pipeline ended): it
        ends the session now instead of waiting for this bot to come back.
        `finished=False` (a bot going down mid-call) closes with 1001, going
        away: the dashboard waits out its grace, then counts the bot as vanished.
        """
        await self.flush(timeout)
        self._closing = True
        socket = self._socket
        if socket is not None:
            code, reason = (CLOSE_NORMAL, "session over") if finished else (CLOSE_GOING_AWAY, "going away")
            try:
                await asyncio.wait_for(socket.close(code, reason), timeout)
            except (TimeoutError, asyncio.CancelledError, Exception):
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    # --- the background task ------------------------------------------------------

    async def _run(self) -> None:
        delay = 0.2
        while not self._closing:
            try:
                async with websockets.connect(
                    self.connect_url, additional_headers={"Authorization": f"Bearer {self.token}"}, open_timeout=10
                ) as socket:
                    self._socket = socket
                    self.stats["connected"] = True
                    delay = 0.2
                    self._outbox.resend()
                    reader = asyncio.create_task(self._read(socket))
                    try:
                        await self._write(socket, reader)
                    finally:
                        reader.cancel()
                        self._socket = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: the bot must not notice
                self.last_error = str(exc) or type(exc).__name__
                code = getattr(getattr(exc, "rcvd", None), "code", None)
                if code == CLOSE_TOO_BIG:
                    # The dashboard's limit is lower than ours: send smaller batches from now on.
                    self.max_frame_bytes = max(16 * 1024, self.max_frame_bytes // 2)
                    self._outbox.drop_too_big(self.max_frame_bytes)
                if code in FATAL_CLOSE_CODES:
                    logger.error("The dashboard refused this bot (%s): %s", code, self.last_error)
                    delay = max(delay, 30.0)
            self.stats["connected"] = False
            if self._closing:
                return
            self.stats["reconnects"] += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 10.0)

    async def _write(self, socket, reader: asyncio.Task) -> None:
        while not reader.done():
            if self._resend_at is not None and time.monotonic() >= self._resend_at:
                # The dashboard could not store for a while: everything unacknowledged goes again.
                self._resend_at = None
                self._outbox.resend()
            if not self._outbox.unsent:
                self._wake.clear()
                wait = asyncio.create_task(self._wake.wait())
                timeout = None if self._resend_at is None else max(0.0, self._resend_at - time.monotonic())
                try:
                    await asyncio.wait({wait, reader}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    # Also when close() cancels us here: a wait left pending is destroyed pending with the client.
                    wait.cancel()
                continue
            await asyncio.sleep(self.batch_interval)  # let a few messages gather into one frame
            frames = self._outbox.next_frames(self.max_batch, self.max_frame_bytes)
            if frames:
                await socket.send(frames[0] if len(frames) == 1 else '{"batch": [' + ",".join(frames) + "]}")
                self.stats["sent"] += len(frames)
        reader.result()  # re-raise why the connection ended

    async def _read(self, socket) -> None:
        async for raw in socket:
            try:
                reply = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(reply, dict):
                continue
            if reply.get("type") == CONTROL:
                self._control.take(socket, reply)
                continue
            if "acks" in reply:
                self._outbox.acknowledge_ranges(reply["acks"])
            elif "ack" in reply:
                self._outbox.acknowledge(reply["ack"])
            elif "error" in reply:
                self.stats["errors"] += 1
                self.last_error = str(reply["error"])
                if reply.get("seq") is not None:
                    # Recorded as invalid: final, do not resend.
                    self._outbox.unacked.pop(reply["seq"], None)
                elif reply.get("retry"):
                    self.stats["retries"] += 1
                    self._resend_at = time.monotonic() + min(5.0, 0.5 * 2 ** min(self.stats["retries"], 3))
                    self._wake.set()
                elif reply.get("fatal"):
                    logger.error("The dashboard refused this bot: %s", reply["error"])
                else:
                    logger.warning("The dashboard answered: %s", reply["error"])
            if not self._outbox.unacked:
                self._idle.set()
