"""The product's formats in templates: `{{ value|duration }}` (milliseconds) or `{{ value|duration:"s" }}`,
`{% short_id id %}`, `{{ about|peer:version }}`, and the rest below.

The rules live in dashboard/web/display.py (pure, also used outside templates); static/js/format.js and
state_format.js have the same ones for what the browser renders; tests/web/test_format.py checks both against one
table of cases.
"""

import json
import math

from django import template
from django.urls import reverse
from django.utils.html import format_html

from dashboard.access import policy as access
from dashboard.web import display
from rtvi_monitor.core.figure_names import FIGURES, WAIT

register = template.Library()

UNKNOWN = display.UNKNOWN


@register.filter
def duration(value, unit: str = "ms") -> str:
    """ "380 ms", "1.2 s", "12 s", "4 min 05 s", "1 h 02 min"; "—" for None or a value that is not a number."""
    if unit not in ("ms", "s"):
        raise template.TemplateSyntaxError(f"duration: unit {unit!r} is not ms or s")
    return display.seconds_text(value) if unit == "s" else display.duration_text(value)


@register.simple_tag
def figure_name(key: str) -> str:
    """What a figure is called on every page ("Turn latency by call"): rtvi_monitor/core/figure_names.py."""
    return FIGURES[key].name


@register.simple_tag
def figure_meaning(key: str) -> str:
    """What a figure measures, from and to, and which turns count, in one sentence (figure_names.py)."""
    return FIGURES[key].meaning


@register.simple_tag
def figure_how(key: str) -> str:
    """How a figure summarises the turns' waits, and which count (figure_names.py)."""
    return FIGURES[key].how


@register.simple_tag
def figure_wait() -> str:
    """The wait every latency figure summarises, from and to (figure_names.py WAIT)."""
    return WAIT


@register.filter
def percent(share) -> str:
    """A share (0..1) as a person reads it: "12 %", "0.4 %" under 1 %; "—" for None (display.percent_text)."""
    return display.percent_text(share)


@register.filter
def money(usd) -> str:
    """US dollars to the cent: "$0.05", "$1,234.50"; "—" for None (display.money_text)."""
    return display.money_text(usd)


@register.filter
def usd(value) -> str:
    """A price: "$3.00", "$0.0043" (display.usd_text)."""
    return display.usd_text(value)


@register.filter
def short(value) -> str:
    """An id as a person reads it: a UUID by its first 8 characters, any other id whole (display.short_id)."""
    return display.short_id(value)


@register.simple_tag
def short_id(value, tag: str = "code"):
    """An id shown short with the whole of it on hover: <code title="(id)">4cab03c7</code>; "—" for none."""
    if value is None or value == "":
        return UNKNOWN
    return format_html('<{} class="id" title="{}">{}</{}>', tag, value, display.short_id(value), tag)


@register.filter
def peer(about, version=None) -> str:
    """A client's or bot's about (client-ready, bot-ready) as words: "client-js 1.4.0 on browser · RTVI 2.1.0"."""
    return display.peer_text(version, about)


@register.filter
def as_json(value) -> str:
    """A value as compact JSON, for a title (the words are peer's; the whole of what was sent on hover)."""
    if value is None or value == {} or value == "":
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)[:2000]


@register.filter
def threshold(rule) -> str:
    """A rule's threshold in its condition's unit: "1.5 s", "20 %", "4"; "1.5 s (default)" when the rule sets
    none; what fires a condition that takes none (rtvi_monitor/alerts/thresholds.py, the one rule)."""
    from rtvi_monitor.alerts import thresholds

    return thresholds.text(rule)


@register.filter
def condition(rule) -> str:
    """A rule's condition in words, its unit left to its threshold (thresholds.condition_text)."""
    from rtvi_monitor.alerts import thresholds

    return thresholds.condition_text(rule.condition)


@register.filter
def window(rule) -> str:
    """A rule's window: "15 min", or "15 min (default)" when the rule sets none (thresholds.window_text)."""
    from rtvi_monitor.alerts import thresholds

    return thresholds.window_text(rule)


@register.filter
def alert_levels(rule) -> str:
    """When the rule's alerts fire and resolve, hysteresis included: "fires above 20 %; resolves at 16 % or below"."""
    from rtvi_monitor.alerts.rules import levels_text

    return levels_text(rule)


@register.filter
def error_kind(text: str) -> str:
    """An error as a viewer sees it: its kind, never its words (dashboard/access/policy.py error_kind)."""
    return access.error_kind(text)


@register.filter
def webhook_host(url: str) -> str:
    from rtvi_monitor.alerts.models import webhook_host as host

    return host(url)


@register.filter
def signed_seconds(value) -> str:
    """A difference in seconds with its sign: "+0.24 s", "−0.10 s", "±0.00 s"; "—" for None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return UNKNOWN
    if round(value, 2) == 0:
        return "±0.00 s"
    return f"{'+' if value > 0 else '−'}{abs(value):.2f} s"


@register.simple_tag
def session_link(session_id):
    """A link to a session's page: its id short (a UUID by its first 8 characters), the whole id on hover; class
    "id", which dashboard.css keeps on one line (an id broken at its hyphen reads as two)."""
    return format_html(
        '<a class="id" href="{}" title="{}">{}</a>',
        reverse("session_detail", args=[session_id]),
        session_id,
        display.short_id(session_id),
    )
