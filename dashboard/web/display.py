"""How figures and names read for a person, on every page and in alert text: pure functions, no Django.

static/js/format.js (formatDuration, shortId) and static/js/state_format.js (peerText) have the same rules
in JavaScript; tests/web/test_format.py checks both languages on one table of cases each, so a cell the server
renders and the same cell the browser renders later read the same. The templates reach these through
dashboard/templatetags/dashboard_format.py.
"""

import math
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

UNKNOWN = "—"

# An id a person cannot read whole: a UUID (Pipecat Cloud's sessions and deployments, the built-in
# deployments) or a long run of hex. Shown by its first 8 characters, as git shows a commit; any other id
# ("demo-3fa9c2d1e0b4", "support-call-17") was chosen by somebody to be read, and is shown as it is.
SHORT = 8
_OPAQUE = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}|[0-9a-fA-F]{20,}")

# What the client and bot libraries call themselves, as a person says it: npm's scope goes.
_SCOPE = re.compile(r"^@[^/]+/")


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def duration_text(ms: Any) -> str:
    """ "380 ms", "1.2 s", "12 s", "4 min 05 s", "1 h 02 min"; "—" for None or a value that is not a number.

    Milliseconds below a second, then seconds to two significant figures, then minutes. Rounding is half up
    (floor of x + 0.5) as JavaScript's Math.round, not Python's round() (half to even), with the same float
    operations in the same order, so both languages agree to the digit.
    """
    if not _number(ms):
        return UNKNOWN
    ms = max(ms, 0)
    if math.floor(ms + 0.5) < 1000:
        return f"{math.floor(ms + 0.5)} ms"
    tenths = math.floor(ms / 100 + 0.5)
    if tenths < 100:
        return f"{tenths // 10}.{tenths % 10} s"
    seconds = math.floor(ms / 1000 + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    minutes = math.floor(ms / 60000 + 0.5)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def seconds_text(seconds: Any) -> str:
    """duration_text of a figure given in seconds (the platform's, the audio's)."""
    return duration_text(seconds * 1000) if _number(seconds) else UNKNOWN


def usd_text(value: Any) -> str:
    """A price in US dollars as a person reads money: "$3.00", "$0.15", "$0.0043" (a fraction of a cent keeps its
    digits, up to six places); "—" for None or a value that is not a number."""
    if not _number(value):
        return UNKNOWN
    digits = f"{value:.6f}".rstrip("0")
    whole, _, cents = digits.partition(".")
    return f"{'-' if value < 0 else ''}${whole.lstrip('-')}.{cents.ljust(2, '0')}"


def percent_text(share: Any) -> str:
    """A share (0 to 1) as a whole percentage: "0 %", "12 %", "100 %"; "<1 %" and ">99 %" for a share that is
    neither none nor all but would round to it (1 error in 300 calls is not "0 %"); "—" for None.

    Half up, as JavaScript's Math.round: static/js/format.js's percentText is the same rule.
    """
    if not _number(share):
        return UNKNOWN
    whole = _half_up(share, 100)
    if whole <= 0 < share:
        return "<1 %"
    if whole >= 100 > share * 100:
        return ">99 %"
    return f"{max(whole, 0)} %"


def _half_up(value: float, scale: int) -> int:
    """`value` × `scale`, rounded half up, as a whole number: exact past what a float holds (1e307 dollars' cents)."""
    scaled = value * scale + 0.5
    if math.isfinite(scaled):
        return math.floor(scaled)
    return math.floor(Decimal(value) * scale + Decimal("0.5"))


def money_text(usd: Any) -> str:
    """US dollars to the cent, thousands grouped: "$0.05", "$1,234.50"; "<$0.01" for a cost under a cent that is
    not nothing; "—" for None."""
    if not _number(usd):
        return UNKNOWN
    cents = _half_up(usd, 100)
    if cents <= 0 < usd:
        return "<$0.01"
    return f"${max(cents, 0) // 100:,}.{max(cents, 0) % 100:02d}"


def is_opaque(value: Any) -> bool:
    """Whether an id is one a person cannot read whole (a UUID, a long hex run): shown short."""
    return isinstance(value, str) and _OPAQUE.fullmatch(value) is not None


def short_id(value: Any) -> str:
    """A UUID or hex id by its first 8 characters ("4cab03c7"); any other id as it is; "—" for none."""
    if value is None or value == "":
        return UNKNOWN
    text = str(value)
    return text[:SHORT] if is_opaque(text) else text


def _word(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def peer_text(version: Any, about: Any) -> str:
    """What a client (client-ready) or bot (bot-ready) says it is, as a person reads it.

    "client-js 1.4.0 on browser · RTVI 2.1.0" from {"library": "@pipecat-ai/client-js", "library_version": "1.4.0",
    "platform": "browser"}; "pipecat-ai 1.14.0 · RTVI 2.2.0" from Pipecat's default bot-ready; a `name` the bot
    gives itself follows the library. `platform_details` and any other field are left to the raw JSON (shown on
    hover): they are free-form. An `about` of no known field reads as its scalar fields ("os linux"); "—" when
    nothing at all was said.
    """
    parts = []
    if isinstance(about, dict) and about.get("truncated") is True and isinstance(about.get("length"), int):
        parts.append(f"({about['length']} characters of JSON)")  # the server's stand-in for a long value
    elif isinstance(about, dict):
        library = _SCOPE.sub("", _word(about.get("library")))
        said = " ".join(w for w in (library, _word(about.get("library_version"))) if w)
        platform = " ".join(w for w in (_word(about.get("platform")), _word(about.get("platform_version"))) if w)
        if platform:
            said = f"{said} on {platform}" if said else f"on {platform}"
        name = _word(about.get("name"))
        if name:
            said = f"{said} ({name})" if said else name
        if not said:
            known = {"library", "library_version", "platform", "platform_version", "platform_details", "name"}
            said = ", ".join(
                f"{key} {value}"
                for key, value in about.items()
                if key not in known and isinstance(value, str | int | float) and not isinstance(value, bool)
            )[:120]
        if said:
            parts.append(said)
    elif isinstance(about, str) and about.strip():
        parts.append(about.strip()[:120])
    version = _word(version)
    if version:
        parts.append(f"RTVI {version}")
    return " · ".join(parts) or UNKNOWN


def iso_ms(dt: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and Z, the spec's timestamp format."""
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
