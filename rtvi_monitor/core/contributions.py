"""A turn's latency contributions, as a bot's Pipecat UserBotLatencyObserver names them. Plain Python.

The bot package (sdk/src/rtvi_dashboard/latency.py) sends each LatencyBreakdown
the observer emits as one `rtvi-dashboard-latency` message (docs/PROTOCOL.md):
the measured interval (`total_secs`, from the user's actual silence to the
bot speaking) and its `contributions`, the named parts that sum to it
(key, label, owner, owner_kind service|setting|bot|pipeline, duration_secs,
start_secs into the interval). Durations only, rounded to the microsecond,
never epoch times: redaction (core/redaction.py) reads a long run of digits as
a card or phone number, and a figure it took would no longer be one.

This module is the one home of what such a message is (`check`, the
validator's rule: bounded lists, strings and numbers; the parts must sum to
the total), how a turn keeps it (`read`), which turn it belongs to (`pick`,
for the reducer and the turn diagnosis alike) and when it disagrees with the
wait the messages measure (`disagreement`).
"""

import math
from typing import Any

LATENCY_TYPE = "rtvi-dashboard-latency"  # the bot package's rtvi_dashboard.latency.LATENCY_TYPE
MAX_CONTRIBUTIONS = 64  # parts of one breakdown (Pipecat names at most ~15)
MAX_SECS = 3600.0  # a part, or the whole wait, longer than an hour is no turn's
MAX_KEY = 64  # characters of a key, an owner kind, a measured_from
MAX_NAME = 200  # characters of a label or an owner (a processor's name, a "config: ..." setting)
OWNER_KINDS = ("service", "setting", "bot", "pipeline")  # Pipecat 1.14's; another short word is kept as given
# The parts must sum to the total: to within this (s), or this share of it. Pipecat makes the total their sum.
SUM_SLACK_S, SUM_SLACK_SHARE = 0.001, 0.001
# Where the contributions and the messages' own measure of a turn disagree: past the larger of these.
TOLERANCE_MS, TOLERANCE_SHARE = 50.0, 0.10
MATCH_S = 2.0  # a breakdown is of a turn whose bot started speaking at most this long before it came


def _is_secs(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_SECS
    )


def _short(value: Any, limit: int, required: bool = True) -> bool:
    if value is None:
        return not required
    return isinstance(value, str) and (not required or value != "") and len(value) <= limit


def _check_part(i: int, part: Any) -> str:
    where = f"data.contributions[{i}]"
    if not isinstance(part, dict):
        return f"{where}: expected an object, got {type(part).__name__}"
    for name, limit, required in (
        ("key", MAX_KEY, True),
        ("owner_kind", MAX_KEY, True),
        ("label", MAX_NAME, False),
        ("owner", MAX_NAME, False),
    ):
        if not _short(part.get(name), limit, required):
            need = "a non-empty string" if required else "a string"
            return f"{where}.{name}: expected {need} of at most {limit} characters"
    if not _is_secs(part.get("duration_secs")):
        return f"{where}.duration_secs: expected a number of seconds from 0 to {MAX_SECS:g}"
    if part.get("start_secs") is not None and not _is_secs(part["start_secs"]):
        return f"{where}.start_secs: expected a number of seconds from 0 to {MAX_SECS:g}"
    return ""


def check(data: dict) -> str:
    """What is wrong with an rtvi-dashboard-latency message's data ("" when nothing): the validator's rule."""
    total = data.get("total_secs")
    if not _is_secs(total):
        return f"data.total_secs: expected a number of seconds from 0 to {MAX_SECS:g}"
    for name in ("user_turn_secs", "released_ago_secs"):
        if data.get(name) is not None and not _is_secs(data[name]):
            return f"data.{name}: expected a number of seconds from 0 to {MAX_SECS:g}"
    if not _short(data.get("measured_from"), MAX_KEY, required=False):
        return f"data.measured_from: expected a string of at most {MAX_KEY} characters"
    parts = data.get("contributions")
    if not isinstance(parts, list):
        return "data.contributions: expected an array"
    if len(parts) > MAX_CONTRIBUTIONS:
        return f"data.contributions: at most {MAX_CONTRIBUTIONS} parts, got {len(parts)}"
    for i, part in enumerate(parts):
        error = _check_part(i, part)
        if error:
            return error
    summed = math.fsum(part["duration_secs"] for part in parts)
    if abs(summed - total) > max(SUM_SLACK_S, SUM_SLACK_SHARE * total):
        return f"data.contributions: they sum to {summed:.4f} s, not data.total_secs {total:.4f} s"
    return ""


def read(data: dict) -> dict:
    """A valid message's data as a turn keeps it: each part's key, label, owner, kind and ms; the total in ms
    (the bot's own total_secs), and how much of it came before the user's turn was released (user_turn_ms)."""
    parts = [
        {
            "key": part["key"],
            "label": part.get("label") or part["key"],
            "owner": part.get("owner") or "",
            "kind": part["owner_kind"],
            "ms": round(part["duration_secs"] * 1000, 3),
        }
        for part in data["contributions"]
    ]
    user_turn = data.get("user_turn_secs")
    return {
        "contributions": parts,
        "total_ms": round(data["total_secs"] * 1000, 3),
        "user_turn_ms": None if user_turn is None else round(user_turn * 1000, 3),
        "measured_from": data.get("measured_from"),
    }


def of_a_turn(data: dict) -> bool:
    """Whether a breakdown is of a user's turn: the greeting (measured from the client connecting) is not."""
    return data.get("measured_from") != "client_connected" and bool(data.get("contributions"))


def released_at(data: dict, at: float) -> float | None:
    """When the breakdown says the user's turn was released (its user-stopped-speaking): `released_ago_secs`
    before the message's own time `at` (the bot's clock, as the turns' times are)."""
    ago = data.get("released_ago_secs")
    return at - ago if _is_secs(ago) else None


def pick(at: float, released: float | None, waiting: tuple | None, spoken: tuple | None) -> Any:
    """The turn a breakdown that came at `at` belongs to: the one whose bot started speaking as it was made.

    The bot's observer makes it at that very moment, but its message and the
    bot-started-speaking one travel separately, so it may come just before it
    (the turn still `waiting` for the bot: (turn, user_stopped_at)) or just
    after (the last turn the bot spoke to: (turn, user_stopped_at,
    bot_started_at), only within MATCH_S of it). Each only when it has none
    yet (the caller passes None otherwise). When both may be: the one whose
    user stopped nearest to when the breakdown says the turn was `released`;
    without that, the waiting one (the spoken one's would have come as its bot
    started).
    """
    candidates = []
    if spoken is not None and spoken[2] is not None and abs(at - spoken[2]) <= MATCH_S:
        candidates.append(spoken[:2])
    if waiting is not None:
        candidates.append(waiting[:2])
    if not candidates:
        return None
    if len(candidates) == 2 and released is not None:
        return min(candidates, key=lambda c: math.inf if c[1] is None else abs(c[1] - released))[0]
    return candidates[-1][0]


def tolerance_ms(measured_ms: float) -> float:
    """How far the two measures of one wait may be apart and still agree: 50 ms, or 10 % of it if more."""
    return max(TOLERANCE_MS, TOLERANCE_SHARE * measured_ms)


def comparable_ms(kept: dict) -> float:
    """The part of the breakdown's interval the messages measure too: from the user's turn being released
    (user-stopped-speaking) to the bot speaking; the whole when the bot did not say when it was released."""
    total = math.fsum(part["ms"] for part in kept["contributions"])
    before = kept.get("user_turn_ms")
    return round(total - before, 1) if before is not None and before <= total else round(total, 1)


def disagreement(kept: dict | None, latency_ms: float | None) -> str:
    """A note when a turn's contributions and its messages' measured latency disagree beyond the tolerance."""
    if kept is None or latency_ms is None:
        return ""
    theirs = comparable_ms(kept)
    apart = theirs - latency_ms
    if abs(apart) <= tolerance_ms(latency_ms):
        return ""
    after = " after the user's turn was released" if kept.get("user_turn_ms") is not None else ""
    return (
        f"the bot's latency contributions sum to {theirs:.0f} ms{after}, the messages measure {latency_ms:.0f} ms: "
        f"{abs(apart):.0f} ms {'more' if apart > 0 else 'less'}, past the tolerance of "
        f"{tolerance_ms(latency_ms):.0f} ms"
    )
