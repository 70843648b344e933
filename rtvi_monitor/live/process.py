"""The live path's background work in this server process, started in one place.

`start()` runs on the event loop (daphne's, or a test's) the first time a bot
connects, and when the server starts (the wiring: rtvi_monitor/apps.py): the
writer's loop, the session sweep, the lifecycle following the writer's reports
of fatal errors, and, under daphne, a last flush and the release of this
process's sessions before the reactor stops. What other features run in every
server process (the alert engine, retention's purges) is started by the wiring
beside it, never from here.

The other listeners are per socket, not per process: a browser's watch joins its
group through the channel layer (live/relay.py), and the control inbox listens while
a bot is connected here (live/control.py).
"""

import asyncio

from rtvi_monitor.live import lifecycle
from rtvi_monitor.live.writer import Writer, get_writer

_started: dict[asyncio.AbstractEventLoop, Writer] = {}  # the writer each loop's shutdown flushes


def start() -> Writer:
    """The running loop's writer, with the sweep and the fatal ends beside it (idempotent)."""
    writer = get_writer()
    if _started.get(writer.loop) is not writer:  # a new writer (a new loop, or its task ended)
        for old in [loop for loop in _started if loop.is_closed()]:
            del _started[old]
        _started[writer.loop] = writer
        _before_shutdown(writer)
    lifecycle.follow(writer)
    lifecycle.start()
    return writer


def _before_shutdown(writer: Writer) -> None:
    """Under daphne, store what is pending before the reactor stops, and let go of the sessions.

    Whatever is still lost (a crash) was never acknowledged: the bots resend it.
    """
    try:
        from twisted.internet import defer, reactor
    except ImportError:
        return
    if not reactor.running:
        return

    async def stop():
        await writer.flush()
        await lifecycle.release()

    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(stop()))
    )
