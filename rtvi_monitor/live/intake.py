"""The one way in: a message for a session accepted, redacted, numbered and handed to the writer.

A bot's frames (live/consumers.py, `IngestConsumer.take`) and an operator's actions on the call
(live/control.py, stored on the "dashboard" stream) both come in through `take_in`: judged by
the session (`LiveSession.accept`: its seq, its caller's pseudonym, the organization's redaction),
numbered as they leave its holdback (`LiveSession.ready`), and added to the writer's batch. Rows
held back for a streamed number (live/joining.py) go within REDACTION_HOLD_SECONDS
(`_wait_for_held`), or when the session's bot leaves (`let_go`).

Nothing here waits: each message costs its judging and an append, on the event loop.
"""

import asyncio
import time

from django.conf import settings

from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.live.writer import Writer
from rtvi_monitor.sessions.events import Replier


class _Nobody:
    """The replier of what no connection sent (an operator's action): what the writer says of it goes nowhere."""

    async def reply(self, payloads: list[dict]) -> None:
        return None


NOBODY: Replier = _Nobody()


def take_in(
    writer: Writer,
    live: LiveSession,
    frames: list,
    received_at: float,
    replier: Replier,
    stream: str = "",
    shallow: bool = False,
) -> list[dict | None]:
    """`frames` (parsed messages or wrappers, or raw text) for `live`, from `stream`; `replier` is told of each
    once it is stored. Returns each frame's immediate reply (None for one answered when it is stored), in order."""
    redactor = live.redactor
    replies = []
    for item in frames:
        row, reply = live.accept(item, received_at, replier, stream, redactor, shallow)
        if row is not None:
            for ready in live.ready(row, redactor):
                writer.add(ready)
        replies.append(reply)
    if live.holdback.holding and live.hold_timer is None:
        _wait_for_held(writer, live, settings.REDACTION_HOLD_SECONDS)
    return replies


def _wait_for_held(writer: Writer, live: LiveSession, delay: float) -> None:
    """Rows held back for a streamed number go to the writer within their wait, even when their stream says no more."""
    live.hold_timer = asyncio.get_running_loop().call_later(max(delay, 0.0), _release_held, writer, live)


def _release_held(writer: Writer, live: LiveSession) -> None:
    live.hold_timer = None
    wait = settings.REDACTION_HOLD_SECONDS
    for row in live.expired(time.time(), wait):
        writer.add(row)
    oldest = live.holdback.oldest()
    if oldest is not None:
        _wait_for_held(writer, live, oldest + wait - time.time())


def let_go(writer: Writer, live: LiveSession) -> None:
    """A bot of the session is leaving: every row held back goes to the writer, judged as it stands."""
    if live.hold_timer is not None:
        live.hold_timer.cancel()
        live.hold_timer = None
    for row in live.release_all():
        writer.add(row)
