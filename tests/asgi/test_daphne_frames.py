"""dashboard/server/daphne_tuning.py's one-step reading and writing of whole small frames, against autobahn's own.

Two real autobahn server protocols (the twisted adapter daphne's protocol is
built on), one reading and writing with autobahn's processData and
sendMessage, one with daphne_tuning's, are each given the same opening
handshake and then the same bytes, cut at the same places: whole text and
binary frames of every length form, empty ones, fragmented messages, pings,
closes, invalid UTF-8 (whole and cut inside a character), unmasked frames, RSV
bits, reserved opcodes, non-minimal lengths, messages past the size limits.
Hypothesis checks that both deliver the same messages in the same order, write
the same bytes back (pongs, close frames with their codes), end in the same
state and count the same traffic; and that a message sent is framed byte for
byte as autobahn frames it, or refused as autobahn refuses it.
"""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("autobahn")

HANDSHAKE = (
    b"GET /ws/ HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def natives():
    """autobahn's own processData and sendMessage (install() may have replaced them in this process)."""
    from autobahn.websocket.protocol import WebSocketProtocol

    from dashboard.server import daphne_tuning

    return (
        daphne_tuning._native_process_data or WebSocketProtocol.processData,
        daphne_tuning._native_send_message or WebSocketProtocol.sendMessage,
    )


@pytest.fixture
def protocols(monkeypatch):
    """A maker of the two protocols, opened (a factory: each example makes its own, nothing is shared)."""
    import txaio

    txaio.use_twisted()
    from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
    from twisted.internet.testing import StringTransport

    from dashboard.server import daphne_tuning

    process_data, send_message = natives()
    monkeypatch.setattr(daphne_tuning, "_native_process_data", process_data)  # what install() keeps
    monkeypatch.setattr(daphne_tuning, "_native_send_message", send_message)

    class Recorder(WebSocketServerProtocol):
        def onConnect(self, request):
            self.events = []

        def onMessage(self, payload, isBinary):
            self.events.append(("message", payload, isBinary))

        def onPing(self, payload):
            self.events.append(("ping", payload))
            super().onPing(payload)

        def onClose(self, wasClean, code, reason):
            self.events.append(("close", wasClean, code, reason))

    class Native(Recorder):
        processData = process_data
        sendMessage = send_message

    class Tuned(Recorder):
        processData = daphne_tuning._process_data
        sendMessage = daphne_tuning._send_message

    class Transport(StringTransport):
        def unregisterProducer(self):  # autobahn unregisters whether or not one was registered
            self.producer = None

    def make(cls, **options):
        factory = WebSocketServerFactory()
        factory.setProtocolOptions(openHandshakeTimeout=0, closeHandshakeTimeout=0, **options)
        factory.protocol = cls
        protocol = factory.buildProtocol(("127.0.0.1", 9))
        transport = Transport()
        protocol.makeConnection(transport)
        protocol.dataReceived(HANDSHAKE)
        assert protocol.state == protocol.STATE_OPEN, transport.value()
        transport.clear()
        return protocol, transport

    def both(**options):
        return make(Native, **options), make(Tuned, **options)

    return both


def frame(opcode, payload, *, fin=True, rsv=0, mask=b"\x12\x34\x56\x78", long_form=False, long8=False, masked=True):
    """A client frame as the wire carries it (masked unless `masked` is False; `long_form`, `long8`: its length
    in the 2- or 8-byte form whatever it is)."""
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    n = len(payload)
    flag = 0x80 if masked else 0
    if n < 126 and not long_form and not long8:
        head += bytes([flag | n])
    elif n <= 0xFFFF and not long8:
        head += bytes([flag | 126]) + struct.pack("!H", n)
    else:
        head += bytes([flag | 127]) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    key = (mask * (n // 4 + 1))[:n]
    return head + mask + bytes(a ^ b for a, b in zip(payload, key, strict=True))


texts = st.text(max_size=300).map(lambda t: t.encode("utf-8"))
masks = st.binary(min_size=4, max_size=4)

one_frame = st.one_of(
    st.builds(lambda p, m: frame(1, p, mask=m), texts, masks),  # the common case
    st.builds(lambda p, m: frame(2, p, mask=m), st.binary(max_size=300), masks),
    st.builds(lambda n, m: frame(1, b"x" * n, mask=m), st.integers(126, 70_000), masks),  # 2- and 8-byte lengths
    st.builds(lambda p, m: frame(1, p, mask=m, long_form=True), texts, masks),  # length not minimally encoded
    st.builds(lambda p, o: frame(o, p, long8=True), st.binary(max_size=300), st.sampled_from([1, 2])),  # nor here
    st.builds(  # the edges of each length form
        lambda n, o: frame(o, b"z" * n),
        st.sampled_from([0, 1, 125, 126, 127, 65535, 65536, 65537]),
        st.sampled_from([1, 2]),
    ),
    st.builds(lambda p, m: frame(1, p, mask=m), st.binary(max_size=40), masks),  # mostly invalid UTF-8
    st.builds(lambda p: frame(1, p, masked=False), texts),  # unmasked: a protocol violation
    st.builds(lambda p, r: frame(1, p, rsv=r), texts, st.integers(1, 7)),  # RSV bits, nothing negotiated
    st.builds(lambda p, o: frame(o, p), texts, st.sampled_from([3, 4, 5, 6, 7, 11, 15])),  # reserved opcodes
    st.builds(lambda p: frame(9, p), st.binary(max_size=125)),  # ping: answered with a pong
    st.builds(lambda p: frame(10, p), st.binary(max_size=125)),  # unsolicited pong
    st.builds(
        lambda parts, m: b"".join(
            frame(1 if i == 0 else 0, part, fin=i == len(parts) - 1, mask=m) for i, part in enumerate(parts)
        ),
        st.lists(st.binary(max_size=60), min_size=2, max_size=4),  # a fragmented message (its UTF-8 across frames)
        masks,
    ),
    st.builds(lambda p: frame(1, p, fin=False), texts),  # a first fragment: a new message after it is a violation
    st.builds(lambda p: frame(0, p), texts),  # a last fragment, with or without a first
    st.builds(lambda code: frame(8, struct.pack("!H", code) + b"bye"), st.sampled_from([1000, 1001, 3000])),
)


def outcome(protocol, transport):
    stats = {k: v for k, v in vars(protocol.trafficStats).items() if not k.startswith("_")}
    state = (protocol.state, protocol.inside_message, bytes(protocol.data), transport.disconnecting)
    return protocol.events, transport.value(), state, stats


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(one_frame, min_size=1, max_size=8),
    st.lists(st.integers(0, 200_000), max_size=6),
    st.sampled_from([{}, {"maxMessagePayloadSize": 100}, {"maxFramePayloadSize": 50}, {"utf8validateIncoming": False}]),
)
def test_every_stream_of_frames_is_read_as_autobahn_reads_it(protocols, frames, cuts, options):
    stream = b"".join(frames)
    (native, native_out), (tuned, tuned_out) = protocols(**options)
    start = 0
    for end in [*sorted(c for c in cuts if c < len(stream)), len(stream)]:
        for protocol in (native, tuned):
            if protocol.state != protocol.STATE_CLOSED:
                protocol.dataReceived(stream[start:end])
        assert outcome(tuned, tuned_out) == outcome(native, native_out)
        start = end


@pytest.mark.parametrize("cut", [0, 10, 133, 1460])
@pytest.mark.parametrize("message", [frame(2, bytes(65536)), frame(1, b"x" * 70_000), frame(2, b"y" * 200, long8=True)])
def test_the_eight_byte_length_form_is_read_as_autobahn_reads_it(protocols, message, cut):
    """64 KiB and more (and a short message in that form, a violation): autobahn's reading, cut anywhere."""
    (native, native_out), (tuned, tuned_out) = protocols()
    for protocol in (native, tuned):
        for piece in (message[:cut], message[cut:]):
            if protocol.state != protocol.STATE_CLOSED:
                protocol.dataReceived(piece)
    assert outcome(tuned, tuned_out) == outcome(native, native_out)


@pytest.mark.parametrize("arguments", [{"isBinary": 1}, {"isBinary": None}, {"sync": 0}, {"doNotCompress": None}])
def test_a_send_with_arguments_autobahn_refuses_is_refused(protocols, arguments):
    """autobahn asserts its flags are bools (unless Python runs with -O): so does the one-step write."""
    for protocol, transport in protocols():
        with pytest.raises(AssertionError):
            protocol.sendMessage(b"hi", **arguments)
        assert transport.value() == b""


def test_whole_small_frames_are_read_in_one_step(protocols):
    """The control: the common frame does take the new path (autobahn's is not called for it)."""
    from dashboard.server import daphne_tuning

    (_, _), (tuned, _) = protocols()
    calls = []
    native = daphne_tuning._native_process_data
    daphne_tuning._native_process_data = lambda self: calls.append(1) or native(self)
    try:
        tuned.dataReceived(frame(1, b'{"seq": 1}') + frame(2, b"\x00\x01") + frame(1, "é".encode()))
    finally:
        daphne_tuning._native_process_data = native
    assert [e[1] for e in tuned.events] == [b'{"seq": 1}', b"\x00\x01", "é".encode()] and calls == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(st.binary(max_size=300), st.integers(0, 70_000).map(lambda n: b"y" * n)),
    st.booleans(),
    st.sampled_from([{}, {"maxMessagePayloadSize": 1000}, {"autoFragmentSize": 200}]),
)
def test_every_message_sent_is_framed_as_autobahn_frames_it(protocols, payload, binary, options):
    from autobahn.exception import PayloadExceededError

    (native, native_out), (tuned, tuned_out) = protocols(**options)
    results = []
    for protocol in (native, tuned):
        try:
            protocol.sendMessage(payload, binary)
            results.append("sent")
        except PayloadExceededError:
            results.append("refused")
    assert results[0] == results[1]
    assert outcome(tuned, tuned_out) == outcome(native, native_out)


def test_a_closed_connection_refuses_a_send_as_autobahn_does(protocols):
    from autobahn.exception import Disconnected

    for protocol, _ in protocols():
        protocol.dataReceived(frame(8, struct.pack("!H", 1000)))
        with pytest.raises(Disconnected):
            protocol.sendMessage(b"late")
