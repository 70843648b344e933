"""What each (stream, bot seq) of a session holds: a bot's resend is acknowledged, never stored twice.

A bot numbers its messages within its stream, and resends what it has not seen acknowledged. The first
message taken under a (stream, seq) is the one it holds (a hash of what is stored of it); a resend of the
same content is acknowledged (at once when it is stored, with the original's ack when it still waits), one
of other content is recorded as invalid beside it and holds nothing. Memory stays bounded: a stream
remembers its last SEEN_WINDOW seqs, a session its last MAX_STREAMS streams.

Plain Python: the session (live/session.py) asks it while it judges a frame.
"""

from rtvi_monitor.live.joining import piece_of, without_text
from rtvi_monitor.sessions.events import Row, content_hash, stored_text

SEEN_WINDOW = 100_000  # bot seqs a stream remembers what they hold
MAX_STREAMS = 256  # streams a session remembers (a bot restart is a new one)


class HeldSeqs:
    """A session's (stream, bot seq) pairs: what each holds, and the rows that wait to be stored under one."""

    __slots__ = ("pending", "seen")

    def __init__(self, seen: dict | None = None):
        # stream -> bot seq -> hash of what it holds (pending or stored), newest streams last; (hash,) of all
        # but the text, for a stored piece of a stream's text (`held_seqs`)
        self.seen: dict[str, dict[int, int | tuple[int]]] = seen if seen is not None else {}
        # (stream, bot seq) -> its row while it waits to be stored (a resend waits for it too)
        self.pending: dict[tuple[str, int], Row] = {}

    def get(self, stream: str, seq: int) -> int | tuple[int] | None:
        """What (stream, seq) holds, or None when it holds nothing yet."""
        numbered = self.seen.get(stream)
        return numbered.get(seq) if numbered is not None else None

    @staticmethod
    def same(held: int | tuple[int], digest: int, message) -> bool:
        """Whether a message whose stored text hashes to `digest` is what `held` holds (a piece: but for its text,
        which its stream's redaction may have changed)."""
        return held == digest or (type(held) is tuple and held[0] == content_hash(without_text(message)))

    def hold(self, stream: str, seq: int, digest: int, row: Row) -> None:
        """(stream, seq) holds this row's content from now on (its resends are acked, not stored)."""
        held = self.seen.get(stream)
        if held is None:
            if len(self.seen) >= MAX_STREAMS:
                del self.seen[next(iter(self.seen))]  # the oldest stream: its resends are long past
            held = self.seen[stream] = {}
        held[seq] = digest
        if len(held) > 2 * SEEN_WINDOW:
            # Seqs long past are forgotten (a bot resends only what is recent); memory stays bounded.
            floor = max(held) - SEEN_WINDOW
            self.seen[stream] = {s: h for s, h in held.items() if s > floor}
        row.holds = True
        self.pending[(stream, seq)] = row

    def stored(self, row: Row) -> None:
        """The writer is done with `row`, which holds its (stream, seq) (stored, or refused): it waits no more."""
        key = (row.stream, row.bot_seq)
        if self.pending.get(key) is row:
            del self.pending[key]
        if row.refused:
            # Not kept: a resend must be taken, not acked.
            self.seen.get(row.stream, {}).pop(row.bot_seq, None)


def held_seqs(stored: list[dict]) -> dict[str, dict[int, int]]:
    """What each (stream, bot seq) holds, from stored events in the order they were stored.

    The first message stored under a (stream, seq) is the one it holds; a
    conflicting one stored later beside it holds nothing.
    """
    seen: dict[str, dict[int, int]] = {}
    for event in stored:
        if event["bot_seq"] is not None:
            message = event["message"]
            if piece_of(message) is not None:
                # A piece's text is stored as its stream's redaction made it, joined to its neighbours, which a
                # resend alone cannot repeat: what it holds is the rest of it (live/joining.py).
                digest = (content_hash(without_text(message)),)
            else:
                digest = content_hash(stored_text(event))
            seen.setdefault(event["stream"], {}).setdefault(event["bot_seq"], digest)
    for stream, held in list(seen.items())[-MAX_STREAMS:]:
        if len(held) > SEEN_WINDOW:
            floor = max(held) - SEEN_WINDOW
            seen[stream] = {s: h for s, h in held.items() if s > floor}
    return dict(list(seen.items())[-MAX_STREAMS:])
