"""Which of a session's messages were folded in (their seq), and what they were, counted.

A message sent again (the same seq) is folded once. Every message counts,
whatever it is: all of them, the invalid ones, those of a type the catalog
does not have, those with no readable type, each type's, and what redaction
removed from them (the state's `counts`). Only a valid message of a known
type goes on to the parts that read it.
"""

from typing import TYPE_CHECKING

from rtvi_monitor.core.protocol import CATALOG
from rtvi_monitor.core.reducer import limits

if TYPE_CHECKING:
    from rtvi_monitor.core.state import Event


class Seen:
    """The seqs folded in so far, within limits.DEDUP_WINDOW of the highest (older ones count as seen)."""

    __slots__ = ("_seqs", "upto")

    def __init__(self):
        self._seqs: set[int] = set()
        self.upto = 0  # the highest seq folded in

    def first(self, seq: int) -> bool:
        """Whether this seq is new (and now seen)."""
        if seq in self._seqs or seq <= self.upto - limits.DEDUP_WINDOW:
            return False
        self._seqs.add(seq)
        if seq > self.upto:
            self.upto = seq
            if len(self._seqs) > 2 * limits.DEDUP_WINDOW:
                floor = seq - limits.DEDUP_WINDOW
                self._seqs = {s for s in self._seqs if s > floor}
        return True


class Counts:
    """The session's messages counted: {"total", "invalid", "unknown", "unparseable", "by_type", "redacted"}."""

    __slots__ = ("counts",)

    def __init__(self):
        self.counts = {"total": 0, "invalid": 0, "unknown": 0, "unparseable": 0, "by_type": {}, "redacted": {}}

    def count(self, event: "Event", msg_type: object) -> bool:
        """Count one message (of type `msg_type`, as read); whether it is one to fold in: valid, of a known type."""
        counts = self.counts
        counts["total"] += 1
        if event.redacted:
            self._count_redacted(event.redacted)
        if not isinstance(msg_type, str) or not msg_type:
            counts["unparseable"] += 1  # no readable type: not JSON, not an object, or no type
            counts["invalid"] += 1
            return False
        by_type = counts["by_type"]
        if msg_type in by_type:
            by_type[msg_type] += 1
        elif len(by_type) < limits.MAX_TYPES:
            by_type[msg_type] = 1
        else:
            by_type[limits.OTHER_TYPES] = by_type.get(limits.OTHER_TYPES, 0) + 1
        if not event.valid:
            counts["invalid"] += 1
            return False
        if msg_type not in CATALOG:
            counts["unknown"] += 1
            return False
        return True

    def _count_redacted(self, redacted: dict) -> None:
        """What redaction removed, by kind (the built-in detectors' and the organization's own)."""
        counts = self.counts["redacted"]
        for kind, n in redacted.items():
            if isinstance(kind, str) and isinstance(n, int) and (kind in counts or len(counts) < limits.MAX_TYPES):
                counts[kind] = counts.get(kind, 0) + n
