"""Forward a bot's log lines to the dashboard, where the agents API's logs endpoint serves them.

    from rtvi_dashboard.logs import forward_loguru, forward_logging

    forwarder = forward_loguru(client)            # Pipecat logs with loguru: INFO and above
    forwarder = forward_logging(client, "DEBUG")  # or the standard library's logging (the root logger)
    ...
    forwarder.close()                             # before `await client.close()`: hands over what waits

Each line becomes an RTVI `system-log` message, {"label": "rtvi-ai", "type":
"system-log", "data": {"text": ..., "level": "INFO"}}, sent through the
session's DashboardClient like any other message; the dashboard serves it at
GET /v1/agents/<agent>/logs as "LEVEL: text".

Logging must never slow down or break the bot, nor crowd out its RTVI
messages, so a forwarder:

- never blocks and never raises: a line is put in the forwarder's own queue
  (from any thread) and handed to the client on the client's event loop;
- is bounded: at most `max_pending` lines wait in it; past that, new lines
  are dropped and counted (`dropped`). While the client is not connected it
  hands it at most `max_pending` lines (then they wait here), so that an
  outage cannot fill the client's buffer with log lines, whose oldest
  messages (the bot's RTVI messages) it would drop for them; and it hands
  over at most `max_per_second` lines a second (the dashboard closes a bot
  connection over INGEST_RATE_LIMIT messages a second);
- never logs, and ignores the lines of this package and of `websockets`
  (the connection to the dashboard itself) and any line logged while it
  hands one over: no feedback loops.

The loguru sink is process-wide, as loguru's sinks are: in a process that
runs several sessions at once, pass `filter` to keep each session's lines.
loguru is imported only by forward_loguru; this package needs only websockets.
"""

import asyncio
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

# Level names and numbers, loguru's (which include the standard library's).
LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "SUCCESS": 25, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}
DEFAULT_LEVEL = "INFO"
MAX_TEXT = 8000  # characters of one line sent; the rest is cut, marked
CLIP_MARK = " […]"
# Loggers whose lines are never forwarded: this package's own, and the socket that carries the lines.
OWN_LOGGERS = ("rtvi_dashboard", "websockets")
LOGURU_FORMAT = "{name}:{function}:{line} - {message}"  # loguru's default, less the time and level
LOGGING_FORMAT = "%(name)s:%(funcName)s:%(lineno)d - %(message)s"
RETRY_SECONDS = 0.25  # how soon waiting lines are tried again (not connected, or over the rate)
LEVEL_NAME_RE = re.compile(r"^[A-Za-z]{1,16}\Z")
# Set while any forwarder hands lines to a client on this thread: whatever is logged then (by the
# client, or by a handler it triggers) is not forwarded, by this forwarder or another one.
_handing_over = threading.local()


def level_number(level: int | str) -> int:
    """A level as a number: 20, "INFO", "info", "WARN". Raises ValueError naming what it got."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str):
        name = level.strip().upper()
        name = ALIASES.get(name, name)
        if name in LEVELS:
            return LEVELS[name]
        if name.isdigit():
            return int(name)
    raise ValueError(f"level must be one of {', '.join(LEVELS)} or a number, got {level!r}")


def level_name(name: str, number: int) -> str:
    """The level a line is sent with: its own name when it is a plain word, else the nearest standard one below."""
    if isinstance(name, str) and LEVEL_NAME_RE.match(name):
        return name.upper()
    return max((n for n, no in LEVELS.items() if no <= number), key=LEVELS.get, default="TRACE")


def is_own(logger_name: str | None) -> bool:
    """Whether a line comes from this package or the dashboard's socket: forwarding it could loop."""
    name = logger_name or ""
    return any(name == own or name.startswith(own + ".") for own in OWN_LOGGERS)


def system_log(text: str, level: str) -> dict:
    """The RTVI message one log line travels as."""
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + CLIP_MARK
    return {"label": "rtvi-ai", "type": "system-log", "data": {"text": text, "level": level}}


class LogForwarder:
    """Hands log lines to a DashboardClient on its event loop: bounded, rate-limited, never blocking.

    `emit` may be called from any thread. The client's own methods are
    called only on its loop (`loop`, else the loop running where the
    forwarder is made or first used). Counters: `forwarded` (handed to the
    client), `dropped` (the queue was full, or the loop was gone),
    `refused` (the client could not take the line, e.g. over its frame limit).
    """

    def __init__(
        self,
        client,
        level: int | str = DEFAULT_LEVEL,
        *,
        max_pending: int = 1000,
        max_per_second: float = 200.0,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self.client = client
        self.levelno = level_number(level)
        self.max_pending = max_pending
        self.max_per_second = max_per_second
        self.forwarded = self.dropped = self.refused = 0
        self._pending: deque[dict] = deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a drain is due on the loop (soon, or after RETRY_SECONDS)
        self._timer: asyncio.TimerHandle | None = None
        self._tokens = max_per_second  # a second's worth may go at once
        self._offline_budget = max_pending  # lines the client may still take while not connected
        self._refilled = time.monotonic()
        self._detach: Callable[[], None] | None = None
        self.closed = False
        self._loop = loop or _running_loop()

    # --- any thread -----------------------------------------------------------------------------

    def emit(self, text: str, level: str = DEFAULT_LEVEL, levelno: int | None = None) -> None:
        """Queue one line (of `level`, numbered `levelno`, else by its name). Never blocks, never raises."""
        try:
            number = levelno if levelno is not None else LEVELS.get(level.upper(), LEVELS[DEFAULT_LEVEL])
            if self.closed or number < self.levelno or getattr(_handing_over, "active", False):
                return
            message = system_log(text, level_name(level, number))
            with self._lock:
                if len(self._pending) >= self.max_pending:
                    self.dropped += 1
                    return
                self._pending.append(message)
                if self._scheduled:
                    return
                loop = self._loop = self._loop or _running_loop()
                if loop is None:
                    return  # no loop yet: the lines wait (bounded) for `start` or the first line on one
                self._scheduled = True
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the session is over
            with self._lock:
                self._scheduled = False
                self.dropped += len(self._pending)
                self._pending.clear()
        except Exception:  # a logging sink must never raise into the code that logged
            self.dropped += 1

    # --- the client's loop ----------------------------------------------------------------------

    def start(self) -> None:
        """Bind to the running loop (when made outside it) and hand over what waits."""
        with self._lock:
            self._loop = self._loop or asyncio.get_running_loop()
            self._scheduled = True
        self._loop.call_soon(self._drain)

    def close(self) -> None:
        """Stop forwarding (the sink or handler is removed) and hand every waiting line to the client.

        Call it on the client's loop before `await client.close()`, which then
        flushes them with the rest.
        """
        if self.closed:
            return
        self.closed = True
        if self._detach is not None:
            self._detach()
        if self._timer is not None:
            self._timer.cancel()
        self._hand_over(limit=None)

    def _drain(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = time.monotonic()
        self._tokens = min(self.max_per_second, self._tokens + (now - self._refilled) * self.max_per_second)
        self._refilled = now
        limit = int(self._tokens)
        if self.client.stats.get("connected", True):
            self._offline_budget = self.max_pending
        else:  # lines handed over now wait in the client's buffer: at most max_pending of them per outage
            limit = min(limit, self._offline_budget)
        taken = self._hand_over(limit)
        self._tokens -= taken
        if not self.client.stats.get("connected", True):
            self._offline_budget -= taken
        with self._lock:
            self._scheduled = bool(self._pending)
            if self._scheduled:
                self._timer = self._loop.call_later(RETRY_SECONDS, self._drain)

    def _hand_over(self, limit: int | None) -> int:
        """Send up to `limit` waiting lines (all when None) through the client; returns how many were taken."""
        taken, outer = 0, getattr(_handing_over, "active", False)
        _handing_over.active = True  # a line the client logs while sending is not forwarded
        try:
            while limit is None or taken < limit:
                with self._lock:
                    if not self._pending:
                        break
                    message = self._pending.popleft()
                taken += 1
                try:
                    accepted = self.client.send(message) is not None
                except Exception:  # DashboardClient.send never raises; another client might
                    accepted = False
                if accepted:
                    self.forwarded += 1
                else:
                    self.refused += 1
        finally:
            _handing_over.active = outer
        return taken


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def forward_loguru(
    client,
    level: int | str = DEFAULT_LEVEL,
    *,
    format: str = LOGURU_FORMAT,
    filter: Callable[[dict], bool] | None = None,
    logger: Any = None,
    **options,
) -> LogForwarder:
    """Forward loguru's lines (Pipecat's logger) at `level` and above; returns the forwarder (`close()` it).

    `format` is loguru's format of the line's text (its default without the
    time and level, which the dashboard adds); `filter(record)` may keep a
    session's own lines; `logger` defaults to loguru's global logger.
    `options` go to LogForwarder (max_pending, max_per_second, loop).
    """
    if logger is None:
        from loguru import logger
    forwarder = LogForwarder(client, level, **options)

    def sink(message) -> None:
        record = message.record
        forwarder.emit(str(message).rstrip("\n"), record["level"].name, record["level"].no)

    def keep(record) -> bool:
        return not is_own(record["name"]) and (filter is None or filter(record))

    # No variable values in tracebacks (diagnose): they may hold secrets, and the line would be long.
    sink_id = logger.add(
        sink, level=forwarder.levelno, format=format, filter=keep, colorize=False, backtrace=False, diagnose=False
    )
    forwarder._detach = lambda: logger.remove(sink_id)
    return forwarder


class DashboardLogHandler(logging.Handler):
    """A standard logging handler that forwards records through a LogForwarder (see forward_logging)."""

    def __init__(self, forwarder: LogForwarder, level: int = logging.NOTSET):
        super().__init__(level)
        self.forwarder = forwarder
        self.setFormatter(logging.Formatter(LOGGING_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if is_own(record.name):
            return
        try:
            text = self.format(record)
        except Exception:  # a record whose message cannot be formatted: its raw message, never an error
            text = str(record.msg)
        self.forwarder.emit(text, record.levelname, record.levelno)


def forward_logging(
    client, level: int | str = DEFAULT_LEVEL, *, logger: logging.Logger | None = None, **options
) -> LogForwarder:
    """Forward the standard library's records of `logger` (the root logger) at `level` and above.

    Returns the forwarder; `close()` removes the handler. The logger's own
    level still decides what is logged at all. `options` go to LogForwarder.
    """
    forwarder = LogForwarder(client, level, **options)
    handler = DashboardLogHandler(forwarder, forwarder.levelno)
    target = logger or logging.getLogger()
    target.addHandler(handler)
    forwarder._detach = lambda: target.removeHandler(handler)
    return forwarder
