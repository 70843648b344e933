"""How big a session's state may grow, and the helpers that keep what it is sent within that.

However long a session or its messages, the state (and so a browser's snapshot)
stays small: lists keep their newest entries, longer text is cut with a mark,
a longer JSON value is kept as a preview naming the message (seq) that has it
whole. The parts read the bounds through this module (`limits.MAX_ITEMS`), so
that a test can lower one for the states it makes.
"""

import json
import math
from typing import Any

# Memory bounds for long sessions; past them the newest entries are kept.
MAX_POINTS = 2000  # per metric series
MAX_INTERVALS = 5000  # per timeline lane
MAX_ITEMS = 5000  # transcript items, turns, errors, server messages
MAX_TYPES = 200  # distinct types counted by name; the rest under OTHER_TYPES
MAX_SEGMENTS = 256  # bot-output segments remembered for late updates, and per bot line
MAX_SERIES = 50  # metric series (processor|model) per kind
MAX_CALLS = 500  # function calls and client requests kept (each sent whole when any changes)
MAX_KEY = 200  # characters of an id the state keeps as a key (tool_call_id, segment_id)
DEDUP_WINDOW = 100_000  # seqs remembered for duplicate detection; older ones count as seen
OTHER_TYPES = "(other)"
# Byte bounds: longer text is cut with CLIP_MARK; a longer JSON value is kept as a preview.
MAX_TEXT = 4000  # characters of one transcript line or streaming text
MAX_VALUE = 2000  # characters of JSON kept of one value (args, results, data, about)
TRANSCRIPT_BUDGET = 1_000_000  # characters of transcript text kept; past it the oldest lines go
LIST_BUDGET = 500_000  # characters kept of errors and of server messages, each
CLIP_MARK = " […]"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """Text cut to `limit` characters, marked when it was cut (idempotent)."""
    if len(text) <= limit:
        return text
    return text[:limit] + CLIP_MARK


def bounded(value: Any, seq: int, limit: int = MAX_VALUE) -> Any:
    """A JSON value as the state keeps it: itself when small, else a preview.

    The preview says how long the whole was and which message (seq) holds it,
    so a page can show the start and fetch the rest on demand.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit], "length": len(text), "seq": seq}


def number(value: Any) -> float | None:
    """A JSON number the state can count with: not a bool, not NaN or infinite; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def json_size(item: dict) -> int:
    """An item's size as its list's byte budget counts it."""
    return len(json.dumps(item, separators=(",", ":"), default=str))


def cap_dict(items: dict, limit: int = MAX_ITEMS) -> None:
    """Drop a dict's oldest entries past `limit`."""
    while len(items) > limit:
        del items[next(iter(items))]
