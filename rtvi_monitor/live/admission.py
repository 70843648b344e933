"""What one bot connection may send, and how it is answered: the ingest socket's rules apart from its socket.

- per ingest token, at most INGEST_MAX_CONNECTIONS_PER_TOKEN bot connections on this process;
- a frame at most INGEST_MAX_FRAME_BYTES (UTF-8);
- at most INGEST_RATE_LIMIT messages and INGEST_RATE_BYTES bytes a second, with
  bursts of INGEST_RATE_BURST_SECONDS' worth (token buckets);
- back-pressure: with more than INGEST_MAX_PENDING rows waiting for the writer,
  a frame is refused with the seqs to resend later, not queued without bound;
- one immediate reply per seq of a frame, and a bot that asked for ranged acks
  (wire.ACKS_RANGES) gets its plain acks as one {"acks": [[first, last], ...]} frame.

Plain Python on the connection's numbers (rtvi_monitor/live/consumers.py holds one per bot socket).
"""

import time

from django.conf import settings
from rtvi_dashboard.wire import ack_ranges

from dashboard.web.http import compact_dumps
from rtvi_monitor.core import protocol
from rtvi_monitor.live.registry import registry

BUSY = "The dashboard cannot store messages right now; resend later."


class TokenBucket:
    """Allows `rate` per second sustained, with bursts of `burst` seconds' worth."""

    def __init__(self, rate: float, burst_seconds: float):
        self.rate = rate
        self.capacity = max(rate * burst_seconds, 1.0)
        self.tokens = self.capacity
        self.at = time.monotonic()

    def take(self, n: int) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= n
        return self.tokens >= 0


class Admission:
    """One bot connection's limits and answers. Each check returns what is wrong ("" or None when nothing is)."""

    def __init__(self, ranged_acks: bool = False):
        self.ranged_acks = ranged_acks
        self.token_pk: int | None = None
        self.owed: int | None = None  # the first seq refused as busy, until the bot resends from it
        self.max_frame = settings.INGEST_MAX_FRAME_BYTES
        self.max_pending = settings.INGEST_MAX_PENDING
        self.messages = TokenBucket(settings.INGEST_RATE_LIMIT, settings.INGEST_RATE_BURST_SECONDS)
        self.bytes = TokenBucket(settings.INGEST_RATE_BYTES, settings.INGEST_RATE_BURST_SECONDS)

    # --- the connection ---

    def hold_token(self, token_pk: int) -> str:
        """This connection counts against its token's cap from now on; or why it may not."""
        held = registry.per_token.get(token_pk, 0)
        limit = settings.INGEST_MAX_CONNECTIONS_PER_TOKEN
        if held >= limit:
            return (
                f"This ingest token has {held} bot connections open here, its limit "
                f"(INGEST_MAX_CONNECTIONS_PER_TOKEN={limit})."
            )
        self.token_pk = token_pk
        registry.per_token[token_pk] = held + 1
        return ""

    def release_token(self) -> None:
        if self.token_pk is not None:
            registry.per_token[self.token_pk] -= 1
            self.token_pk = None

    # --- each frame ---

    def size(self, data: str | bytes) -> tuple[int, str]:
        """The frame's size in bytes, and what is wrong with it."""
        size = len(data) if isinstance(data, bytes) else _utf8_length(data, self.max_frame)
        if size > self.max_frame:
            return size, f"Frame of {size} bytes is over the limit of {self.max_frame}."
        return size, ""

    @staticmethod
    def parse(data: str | bytes):
        """The frame as JSON, or, when it is not, a record of the text as received with what is wrong."""
        raw = data if isinstance(data, str) else data.decode("utf-8", "replace")
        try:
            return protocol.parse(raw, max_depth=None)  # each message's depth is judged alone
        except protocol.NotJSON as exc:
            return protocol.unparsed(raw, str(exc))  # recorded as received, answered with what is wrong

    # Whether no message in the frame can nest too deep (few brackets): each message's depth then goes unwalked.
    shallow = staticmethod(protocol.shallow)

    @staticmethod
    def items(frame) -> list:
        """The messages a frame carries: a batch's items, each judged alone, or the frame itself."""
        if isinstance(frame, dict) and isinstance(frame.get("batch"), list):
            return frame["batch"]
        return [frame]

    def busy(self, frames: list, backlog: int) -> dict | None:
        """With storage behind (the database down?), the reply that refuses the frame: the bot keeps these
        messages unacknowledged and resends them.

        Once a frame is refused, the frames after it are refused too until the bot resends from the first
        seq refused (`owed`): a bot goes on sending while it waits to resend, and taking those as room came
        back would store its stream out of order (a transcript's tokens shuffled)."""
        if backlog <= self.max_pending and self.owed is None:
            return None  # the usual case, with nothing to look at
        seqs = [f.get("seq") for f in frames if isinstance(f, dict) and isinstance(f.get("seq"), int)]
        waiting = self.owed is not None and bool(seqs) and min(seqs) > self.owed
        if backlog <= self.max_pending and not waiting:
            if seqs and self.owed is not None:
                self.owed = None  # the resend from the gap: the stream goes on in order
            return None
        if seqs:
            self.owed = min(seqs) if self.owed is None else min(self.owed, min(seqs))
        return {"error": BUSY, "seq": None, "retry": True, "seqs": seqs}

    def over_rate(self, size: int, messages: int) -> str:
        if not self.bytes.take(size):
            return f"Over the rate limit of {settings.INGEST_RATE_BYTES} bytes per second (INGEST_RATE_BYTES)."
        if not self.messages.take(messages):
            return f"Over the rate limit of {settings.INGEST_RATE_LIMIT:g} messages per second."
        return ""

    # --- answers ---

    @staticmethod
    def once_per_seq(replies: list[dict | None]) -> list[dict]:
        """A frame's immediate replies, one per acknowledged seq (a batch may carry a seq twice)."""
        out, answered = [], set()
        for reply in replies:
            if reply is not None and reply.get("ack") not in answered:
                answered.add(reply.get("ack"))
                out.append(reply)
        return out

    def frames(self, payloads: list[dict]) -> list[str]:
        """The WebSocket frames that carry these replies: one each, or, for a bot that asked for ranged acks,
        its plain acks in one frame after the rest (warnings and errors always go one frame each).

        The writer answers once per write per connection, so a bot with ranged acks gets one frame per
        write however many of its messages it stored; a frame per message was a large share of the
        server's time (docs/BENCHMARKS.md, issue 15).
        """
        if not self.ranged_acks:
            return [compact_dumps(payload) for payload in payloads]
        texts, acked = [], []
        for payload in payloads:
            if len(payload) == 1 and "ack" in payload:
                acked.append(payload["ack"])
            else:
                texts.append(compact_dumps(payload))
        if acked:
            texts.append(compact_dumps({"acks": ack_ranges(acked)}))
        return texts


def _utf8_length(text: str, limit: int) -> int:
    """The frame's size in bytes (its UTF-8 length); cheap when it cannot be over the limit."""
    if len(text) * 4 <= limit or text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))
