"""The product's duration format on the server: `{{ value|duration }}` (milliseconds) or `{{ value|duration:"s" }}`.

The same rules as formatDuration in static/js/format.js, so that a cell the server renders and the
same cell the browser renders later read the same; tests/test_format.py checks both against one
table of cases. Rounding is half up (floor of x + 0.5) as JavaScript's Math.round, not Python's
round() (half to even), with the same float operations in the same order, so both agree to the digit.
"""

import math

from django import template

register = template.Library()

UNKNOWN = "—"


@register.filter
def duration(value, unit: str = "ms") -> str:
    """ "380 ms", "1.2 s", "12 s", "4 min 05 s", "1 h 02 min"; "—" for None or a value that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return UNKNOWN
    if unit not in ("ms", "s"):
        raise template.TemplateSyntaxError(f"duration: unit {unit!r} is not ms or s")
    ms = max(value * 1000 if unit == "s" else value, 0)
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


@register.filter
def error_kind(text: str) -> str:
    """An error as a viewer sees it: what comes before its first colon (the rest may quote a caller)."""
    head, sep, _ = str(text or "").partition(":")
    return head.strip() + (": …" if sep else "")


@register.filter
def webhook_host(url: str) -> str:
    from rtvi_monitor.models import webhook_host as host

    return host(url)


@register.filter
def signed_seconds(value) -> str:
    """A difference in seconds with its sign: "+0.24 s", "−0.10 s", "±0.00 s"; "—" for None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return UNKNOWN
    if round(value, 2) == 0:
        return "±0.00 s"
    return f"{'+' if value > 0 else '−'}{abs(value):.2f} s"
