"""Two changes to the server under daphne, each measured on the live path and each optional (DAPHNE_TUNING).

**Write-through.** Twisted queues every write until the next turn of the
loop: it registers the socket for writability (an epoll_ctl), the loop wakes,
the data is sent and the registration removed (a second epoll_ctl). With a
bot's ack and a browser's patch for most messages, that was ~18 % of the live
path's main thread at 3,000 messages a second (py-spy, docs/BENCHMARKS.md),
twice the send itself. asyncio's own transports try the send first and queue
only what the kernel did not take; `install()` gives twisted's plain TCP
connections (what daphne serves on) that behaviour. What does not change: a
write while anything is queued, a pull producer is registered, the connection
is closing or TLS is on goes through twisted's own path, so order,
back-pressure and close-after-flush are twisted's (a streaming producer, as
twisted.web registers, is paused only by a queue, so it is not in the way; a
pull producer is asked for more as its queue empties, so its writes queue);
what the kernel does not take at once (the socket buffer full, EAGAIN) is
queued there too; a send error leaves the data queued and twisted's next
write attempt finds the error and loses the connection as it always did.

**Small frames unmasked in one step.** Every frame a client sends is masked;
autobahn builds a native (cffi) masker for each, ~2.3 us, three times what
one integer XOR of a 150-byte payload costs. Frames under SMALL_FRAME bytes
(a bot's message, a browser's request) get the XOR; larger ones autobahn's.

tests/test_daphne_tuning.py checks both against twisted's and autobahn's own.
"""

from autobahn.websocket import protocol as autobahn_protocol
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


class _SmallMasker:
    """Unmasks a small frame's payload with one integer XOR (autobahn's masker API: pointer, reset, process)."""

    __slots__ = ("_mask", "_ptr")

    def __init__(self, mask: bytes):
        self._mask = bytes(mask)
        self._ptr = 0

    def pointer(self) -> int:
        return self._ptr

    def reset(self) -> None:
        self._ptr = 0

    def process(self, data) -> bytes:
        n = len(data)
        shift = self._ptr & 3
        mask = self._mask[shift:] + self._mask[:shift] if shift else self._mask
        self._ptr += n
        key = (mask * (n // 4 + 1))[:n]
        return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


_native_masker = autobahn_protocol.create_xor_masker
SMALL_FRAME = 1024  # bytes: below this one integer XOR is faster than building autobahn's native masker


def _create_xor_masker(mask, length=None):
    if length is not None and length < SMALL_FRAME:
        return _SmallMasker(mask)
    return _native_masker(mask, length)


def install() -> None:
    """Both changes, for every connection made from now on (idempotent)."""
    tcp.Connection.write = _write
    autobahn_protocol.create_xor_masker = _create_xor_masker


def installed() -> bool:
    return tcp.Connection.write is _write and autobahn_protocol.create_xor_masker is _create_xor_masker
