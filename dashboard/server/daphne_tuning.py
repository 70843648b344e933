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

**Whole small frames read in one step.** autobahn reads every incoming frame
in two passes (its header, then its payload), builds a frame header, a masker
and an incremental UTF-8 validator for it, checks a dozen protocol rules on
the way and copies the rest of the buffer twice: ~24 % of the main thread at
full load, for frames that are almost all one complete masked text frame of a
few hundred bytes. While the buffer starts with such a frame (FIN, no RSV
bits so not compressed, text or binary, masked, its length in the shortest
one- or two-byte form, all of it buffered and within the size limits; the
socket open, no message in progress, no frame logging, timing or auto-ping
timeout in play; the connection's options read once, at its first frame: a
setting changed on a live connection is not seen), it is unmasked, its
UTF-8 checked by Python's strict decoder and handed to the same message
hooks in the same order with the same traffic counts; the buffer is cut once
after the last of them. Anything else, or any doubt (invalid UTF-8 included),
is autobahn's own reading, which fails or answers it as it always did.

**A whole small frame written in one step.** The same for a message sent on
an open, uncompressed server connection: its header is two or four bytes
and the frame is written at once, with autobahn's counts; fragmenting,
compression, a sync or chopped write, a queue of those, frame logging or a
limit in play take autobahn's path.

**Corked blocks.** `corked()` holds a block's writes and sends each
connection's as one: a flush's acks to one bot leave in one send.

**Only on the versions they were written for.** They replace ten attributes of
twisted's and autobahn's and read private ones, which any release may change.
`install()` reads the installed versions of both (importlib.metadata) and, on
anything but WRITTEN_FOR (what requirements.txt pins), changes nothing: the
server runs stock, one warning says so, and `corked()` is a no-op.

tests/asgi/test_daphne_tuning.py and test_daphne_frames.py check them against twisted's and autobahn's own;
tests/asgi/test_server_boundary.py the version guard.
"""

import contextlib
import importlib.metadata
import logging

logger = logging.getLogger(__name__)

# The exact versions these changes were written and tested against (pinned in requirements.txt). On any other,
# install() leaves twisted and autobahn as they come.
WRITTEN_FOR = {"Twisted": "26.10.0", "autobahn": "26.10.2"}

# Set by install(), which imports twisted and autobahn (a process that never serves, e.g. manage.py, need not):
_queued_write = None  # twisted's own write
_twisted = {}  # twisted's own writeSequence, loseConnection and abortConnection
_native_masker = None  # autobahn's own masker factory
_native_fire = None  # autobahn's own WebSocketProtocol.fire
_native_process_data = None  # autobahn's own WebSocketProtocol.processData
_native_send_message = None  # and sendMessage
_held: dict | None = None  # in a corked() block: each connection's writes, in order
_stock_said = False  # install() found other versions and said so (once a process)


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
    still sends everything before it; an abort drops it, as it drops twisted's queue. Without install()
    (DAPHNE_TUNING off, or other versions of twisted or autobahn), or inside another block, no-op.
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


def _unmask(mask: bytes, data: bytes) -> bytes:
    """`data` XOR the 4-byte `mask` repeated: one integer XOR (a frame's payload, or a piece starting at a
    mask boundary)."""
    n = len(data)
    return (int.from_bytes(data, "little") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "little")).to_bytes(n, "little")


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
        return _unmask(mask, data)


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


def _whole_frame(self, data: bytes, at: int):
    """The whole small data frame at `at` in `data` as (its end, payload, binary), if this connection may read
    it in one step; else None (autobahn's reading, which fails or answers it as it always did)."""
    if not (
        len(data) >= at + 6
        and (data[at] == 0x81 or data[at] == 0x82)  # FIN, no RSV, text or binary
        and data[at + 1] & 0x80  # masked
        and self.state == self.STATE_OPEN
        and self.current_frame is None
        and not self.inside_message
        and not self.failedByMe
        and not (self.autoPingTimeoutCall and self.autoPingRestartOnAnyTraffic)
    ):
        return None
    options = self.__dict__.get("_whole_frames")
    if options is None:  # the connection's options, fixed once it is open (autobahn copies them from its factory)
        options = self._whole_frames = (
            bool(
                self.factory.isServer
                and self.applyMask
                and not self.logFrames
                and not self.trackedTimings
                and self.websocket_version != 0
            ),
            self.maxFramePayloadSize,
            self.maxMessagePayloadSize,
            self.utf8validateIncoming,
        )
    plain, frame_limit, message_limit, utf8 = options
    if not plain:
        return None
    length = data[at + 1] & 0x7F
    start = at + 6
    if length == 126:
        length = int.from_bytes(data[at + 2 : at + 4], "big") if len(data) >= at + 8 else 0
        start = at + 8
        if length < 126:  # not the shortest form (a violation), or not all of the header buffered
            return None
    elif length == 127:  # the 8-byte form (64 KiB and more): autobahn's
        return None
    end = start + length
    if (
        len(data) < end
        or 0 < frame_limit < length
        or 0 < message_limit < length  # (the hooks would fail it too; autobahn's path does)
    ):
        return None
    payload = _unmask(data[start - 4 : start], data[start:end])
    binary = data[at] == 0x82
    if not binary and utf8:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return end, payload, binary


def _process_data(self) -> bool:
    """autobahn's processData, with the whole small data frames at the head of the buffer read in one step.

    autobahn cuts what it has read off the buffer twice a frame (a copy of the rest each time); these
    frames are read in place and the buffer cut once, after the last of them."""
    data = self.data
    stats = self.trafficStats
    at = 0
    try:
        while (frame := _whole_frame(self, data, at)) is not None:
            at, payload, binary = frame
            length = len(payload)
            stats.incomingOctetsWebSocketLevel += length
            stats.incomingOctetsAppLevel += length
            stats.incomingWebSocketFrames += 1
            stats.incomingWebSocketMessages += 1
            self.inside_message = True
            self._onMessageBegin(binary)
            self._onMessageFrameBegin(length)
            self._onMessageFrameData(payload)
            self._onMessageFrameEnd()
            self._onMessageEnd()
            self.inside_message = False
    finally:
        if at:
            self.data = data[at:]  # (a hook that raised: the frames before it, and its own, are read)
    if at:
        return len(self.data) > 0
    return _native_process_data(self)


def _send_message(self, payload, isBinary=False, fragmentSize=None, sync=False, doNotCompress=False):
    """autobahn's sendMessage, with a small message on an open, uncompressed server connection framed in one step."""
    n = len(payload)
    if (
        n <= 0xFFFF
        and type(payload) is bytes
        and (isBinary is False or isBinary is True)  # autobahn asserts each of these is a bool
        and sync is False
        and (doNotCompress is False or doNotCompress is True)
        and fragmentSize is None
        and self.state == self.STATE_OPEN
        and self._perMessageCompress is None
        and self.factory.isServer
        and not self.maskServerFrames
        and not self.send_queue
        and not self.trackedTimings
        and not self.logFrames
        and not self.logOctets
        and not 0 < self.maxMessagePayloadSize < n
        and not 0 < self.autoFragmentSize < n
    ):
        opcode = 0x82 if isBinary else 0x81
        frame = (bytes((opcode, n)) if n <= 125 else bytes((opcode, 126)) + n.to_bytes(2, "big")) + payload
        stats = self.trafficStats
        stats.outgoingWebSocketMessages += 1
        stats.outgoingOctetsAppLevel += n
        stats.outgoingOctetsWebSocketLevel += n
        stats.outgoingWebSocketFrames += 1
        stats.outgoingOctetsWireLevel += len(frame)
        self.transport.write(frame)
        return
    return _native_send_message(self, payload, isBinary, fragmentSize, sync, doNotCompress)


def _plain_type(obj) -> str:
    return getattr(obj, "__qualname__", "unknown")


def _plain_value(value, color="white", bold=True):
    return value


def found_versions() -> dict[str, str | None]:
    """The installed versions of WRITTEN_FOR's packages, read now (None: not installed)."""
    found = {}
    for name in WRITTEN_FOR:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def install() -> bool:
    """All of them, for every connection made from now on (idempotent); whether they are installed.

    On versions of twisted or autobahn other than WRITTEN_FOR, none: nothing of theirs is touched, and one
    warning (once a process) says the server runs stock."""
    global _queued_write, _native_masker, _native_fire, _native_process_data, _native_send_message, _stock_said
    found = found_versions()
    if found != WRITTEN_FOR:
        if not _stock_said:
            _stock_said = True
            logger.warning(
                "daphne runs stock: dashboard/daphne_tuning.py was written for %s, found %s; it changes nothing",
                ", ".join(f"{name} {version}" for name, version in WRITTEN_FOR.items()),
                ", ".join(f"{name} {version or 'not installed'}" for name, version in found.items()),
            )
        return False
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
    if autobahn_protocol.WebSocketProtocol.processData is not _process_data:
        _native_process_data = autobahn_protocol.WebSocketProtocol.processData
        autobahn_protocol.WebSocketProtocol.processData = _process_data
    if autobahn_protocol.WebSocketProtocol.sendMessage is not _send_message:
        _native_send_message = autobahn_protocol.WebSocketProtocol.sendMessage
        autobahn_protocol.WebSocketProtocol.sendMessage = _send_message
    return True


def installed() -> bool:
    return _queued_write is not None
