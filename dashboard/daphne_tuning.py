"""Changes to the server under daphne, each measured on the live path and each optional (DAPHNE_TUNING).

**Write-through.** Twisted queues every write until the next turn of the
loop: it registers the socket for writability (an epoll_ctl), the loop wakes,
the data is sent and the registration removed (a second epoll_ctl). With a
bot's ack and a browser's patch for most messages, that was ~18 % of the live
path's main thread at 3,000 messages a second (py-spy, docs/BENCHMARKS.md),
four times the sends themselves. asyncio's own transports try the send first and queue
only what the kernel did not take; `install()` gives twisted's plain TCP
connections (what daphne serves on) that behaviour; Unix sockets keep
twisted's (their writes may carry file descriptors). What does not change: a
write while anything is queued, a pull producer is registered, the connection
is closing or aborted, or TLS was started on it (startTLS) goes through
twisted's own path (a TLS port's connections write the already encrypted
bytes, which write-through sends like any other), so order,
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

**Log arguments not dressed up for logs that are off.** autobahn's sendData
logs each send at debug level, and colours the arguments (the method's
qualified name through inspect and click) before the logger sees that debug
is off: ~4 % of the main thread at full load. Its protocol module's
highlighters become plain ones (a name, the value as it is): the same log
lines, uncoloured, when autobahn's debug logging is on.

**No Deferred for an event nobody listens to.** After every incoming message
autobahn fires its "message" event for listeners added with `.on()` (daphne
adds none): a Deferred made, fired with [] and given an errback, ~5 % of the
main thread at full load. With no listener, `fire` returns an object that
behaves as that fired Deferred would (a callback runs at once with [], an
errback never); with listeners, autobahn's own.

**Corked blocks.** `corked()` holds a block's writes and sends each
connection's as one: a flush's acks to one bot leave in one send.

tests/test_daphne_tuning.py checks them against twisted's and autobahn's own.
"""

import contextlib

# Set by install(), which imports twisted and autobahn (a process that never serves, e.g. manage.py, need not):
_queued_write = None  # twisted's own write
_twisted = {}  # twisted's own writeSequence, loseConnection and abortConnection
_native_masker = None  # autobahn's own masker factory
_native_fire = None  # autobahn's own WebSocketProtocol.fire
_held: dict | None = None  # in a corked() block: each connection's writes, in order


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
        or self._aborting
        or type(data) is not bytes
        or not data
    ):
        _release(self)  # what a corked block held for it goes first
        _queued_write(self, data)
        return
    if _held is not None:
        _held.setdefault(self, []).append(data)
        return
    try:
        sent = self.socket.send(data[: self.SEND_LIMIT])
    except (BlockingIOError, InterruptedError):
        sent = 0
    except OSError:
        sent = 0  # twisted's queued write meets the error again and loses the connection
    if sent < len(data):
        _queued_write(self, data[sent:] if sent else data)


def _release(connection) -> None:
    """What a corked block holds for this connection, into twisted's queue now (before anything after it)."""
    if _held and connection in _held:
        _queued_write(connection, b"".join(_held.pop(connection)))


def _write_sequence(self, iovec):
    _release(self)  # twisted queues these at once: what was written before them goes first
    _twisted["writeSequence"](self, iovec)


def _lose_connection(self, *args, **kwargs):
    _release(self)  # twisted closes once its queue is empty: what the block held is in it
    _twisted["loseConnection"](self, *args, **kwargs)


def _abort_connection(self):
    if _held:
        _held.pop(self, None)  # an abort sends nothing more
    _twisted["abortConnection"](self)


@contextlib.contextmanager
def corked():
    """Writes made in the block leave as one send per connection when it ends, not one each.

    A flush answers an older bot with an ack frame per message: at full load, dozens for one bot in one
    flush, and a send (and a packet for the bot to read) each. The writer sends a flush's relays and acks
    in one of these blocks. Inside, nothing waits for I/O, so the block holds frames for no longer than it
    takes to produce them (should the block ever wait, what it holds waits with it, nothing is lost):
    a write that twisted must queue (its buffer full, TLS), a writeSequence or a loseConnection on a
    connection puts what the block held for it into twisted's queue first, so order is kept and a close
    still sends everything before it; an abort drops it, as it drops twisted's queue. Without install(),
    or inside another block, no-op.
    """
    global _held
    if _held is not None or _queued_write is None:
        yield
        return
    _held = {}
    try:
        yield
    finally:
        held, _held = _held, None
        for connection, chunks in held.items():
            _write(connection, b"".join(chunks))


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


SMALL_FRAME = 1024  # bytes: below this one integer XOR is faster than building autobahn's native masker


def _create_xor_masker(mask, length=None):
    if length is not None and length < SMALL_FRAME:
        return _SmallMasker(mask)
    return _native_masker(mask, length)


class _Fired:
    """fire()'s result for an event nobody listens to: as an already-fired Deferred of [] would, it runs a
    success callback at once with [] and never an errback (nothing was called, so nothing failed)."""

    __slots__ = ()

    def addCallbacks(self, callback, errback=None, *args, **kwargs):
        if callback is not None:
            callback([])
        return self

    def addCallback(self, callback, *args, **kwargs):
        callback([])
        return self

    def addErrback(self, errback, *args, **kwargs):
        return self


_FIRED = _Fired()


def _fire(self, event, *args, **kwargs):
    if self._listeners is None and self._parent is None:
        self._check_event(event)
        return _FIRED
    return _native_fire(self, event, *args, **kwargs)


def _plain_type(obj) -> str:
    return getattr(obj, "__qualname__", "unknown")


def _plain_value(value, color="white", bold=True):
    return value


def install() -> None:
    """All of them, for every connection made from now on (idempotent)."""
    global _queued_write, _native_masker, _native_fire
    from autobahn.websocket import protocol as autobahn_protocol
    from twisted.internet import tcp

    if tcp.Connection.write is not _write:
        _queued_write = tcp.Connection.write
        for name, ours in (
            ("writeSequence", _write_sequence),
            ("loseConnection", _lose_connection),
            ("abortConnection", _abort_connection),
        ):
            _twisted[name] = getattr(tcp.Connection, name)
            setattr(tcp.Connection, name, ours)
        tcp.Connection.write = _write
        try:
            from twisted.internet import unix
        except ImportError:  # no Unix sockets here
            pass
        else:  # their writes may carry file descriptors (sendmsg): twisted's own path, always
            for cls in (unix.Server, unix.Client):
                cls.write = _queued_write
                for name, original in _twisted.items():
                    setattr(cls, name, original)
    if autobahn_protocol.create_xor_masker is not _create_xor_masker:
        _native_masker = autobahn_protocol.create_xor_masker
        autobahn_protocol.create_xor_masker = _create_xor_masker
    autobahn_protocol.hltype, autobahn_protocol.hlval = _plain_type, _plain_value
    if autobahn_protocol.WebSocketProtocol.fire is not _fire:
        _native_fire = autobahn_protocol.WebSocketProtocol.fire
        autobahn_protocol.WebSocketProtocol.fire = _fire


def installed() -> bool:
    return _queued_write is not None
