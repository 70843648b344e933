"""Daphne's TCP connections send a frame at once when nothing is queued before it.

Twisted queues every write until the next turn of the loop: it registers the
socket for writability (an epoll_ctl), the loop wakes, the data is sent and
the registration removed (a second epoll_ctl). With a bot's ack and a
browser's patch for most messages, that was ~18 % of the live path's main
thread at 3,000 messages a second (py-spy, docs/BENCHMARKS.md), twice the
send itself. asyncio's own transports try the send first and queue only what
the kernel did not take; `install()` gives twisted's plain TCP connections
(what daphne serves on) that behaviour.

What does not change: a write while anything is queued, a pull producer
is registered, the connection is closing or TLS is on goes through twisted's
own path, so order, back-pressure and close-after-flush are twisted's (a
streaming producer, as twisted.web registers, is paused only by a queue, so
it is not in the way; a pull producer is asked for more as its queue empties,
so its writes queue); what
the kernel does not take at once (the socket buffer full, EAGAIN) is queued
there too; a send error leaves the data queued and twisted's next write
attempt finds the error and loses the connection as it always did.
"""

from twisted.internet import tcp

_queued_write = tcp.Connection.write


def _write(self, data):
    if (
        self.TLS
        or (self.producer is not None and not self.streamingProducer)
        or self.disconnecting
        or self._writeDisconnecting
        or self._tempDataLen
        or self.offset != len(self.dataBuffer)
        or not self.connected
        or self._writeDisconnected
        or type(data) is not bytes
        or not data
    ):
        _queued_write(self, data)
        return
    try:
        sent = self.socket.send(data[: self.SEND_LIMIT])
    except (BlockingIOError, InterruptedError):
        sent = 0
    except OSError:
        sent = 0  # twisted's queued write meets the error again and loses the connection
    if sent < len(data):
        _queued_write(self, data[sent:] if sent else data)


def install() -> None:
    """Give twisted's TCP connections write-through (idempotent)."""
    tcp.Connection.write = _write


def installed() -> bool:
    return tcp.Connection.write is _write
