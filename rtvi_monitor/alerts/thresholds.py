"""An alert rule's threshold and window: their defaults, and how a person reads and types them, for every page.

A threshold is stored in its condition's own measure, the one the evaluation compares with (rules.py):
a turn latency in milliseconds, a share in percent, a count of sessions. A person reads it as every other
figure of its kind reads (a latency by display.duration_text: "1.5 s", as a session's page says it) and
types it in the unit shown beside the input (seconds for a latency, percent for a share). `typed` and
`stored` convert between the two, here only: the settings form asks them, the template filter
`threshold` (the Alerts page, the settings' table) asks `text`. The JSON API takes the stored measure.
"""

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from dashboard.web import display
from rtvi_monitor.alerts.models import AlertRule

C = AlertRule.Condition
DEFAULTS = {  # condition -> (threshold, window_minutes)
    C.FATAL_ERROR: (None, 15),
    C.ERROR_RATE: (20.0, 15),
    C.TURN_LATENCY_P95: (1500.0, 15),
    C.NO_SESSIONS: (3.0, 30),
    C.AGENTS_API_DOWN: (None, 5),
    C.ENDED_BADLY: (3.0, 15),
    C.DEPLOYMENT_REGRESSED: (None, 1440),
}

# The conditions that take no threshold, and what fires them instead (said where a threshold would be).
FIRES_WITHOUT = {
    C.FATAL_ERROR: "none: one fatal error fires it",
    C.AGENTS_API_DOWN: "none: failing for the whole window fires it",
    C.DEPLOYMENT_REGRESSED: "none: a wait worse beyond its interval fires it",
}


def condition_text(condition: str) -> str:
    """A condition in words beside its threshold, which says its own unit: the model's words without the unit
    ("an agent's turn latency p95 above the threshold", not "… above threshold ms" beside "1.5 s")."""
    try:
        words = C(condition).label
    except ValueError:
        return str(condition)
    for unit in (" ms", " %", " times"):
        words = words.replace(f"threshold{unit}", "the threshold")
    return words.replace("above threshold", "above the threshold")


# The largest threshold, in the unit it is typed in (the settings form's bound), for the JSON API too: a
# latency of 1e300 ms is no threshold, and the rule's edit form would refuse to save it again as it shows it.
TYPED_MOST = 10**9


def _count(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Measure:
    """How one condition's threshold is typed (in `unit`, stored × 1/`scale`) and read (`read`)."""

    unit: str  # shown beside the input: what the number typed is in
    scale: int  # stored = typed × scale
    most: float | None  # the largest stored value that means something (a share: 100 %)
    read: Callable[[float], str]  # a stored value as a person reads it


MEASURES = {
    C.ERROR_RATE: Measure("%", 1, 100.0, lambda value: f"{value:g} %"),
    C.TURN_LATENCY_P95: Measure("s", 1000, None, display.duration_text),
    C.NO_SESSIONS: Measure("sessions", 1, None, _count),
    C.ENDED_BADLY: Measure("sessions", 1, None, _count),
}


def settings_of(rule: AlertRule) -> tuple[float | None, int]:
    """The threshold and window a rule is evaluated with: its own, else its condition's defaults."""
    threshold, window = DEFAULTS[rule.condition]
    return (rule.threshold if rule.threshold is not None else threshold), (rule.window_minutes or window)


def text(rule: AlertRule) -> str:
    """A rule's threshold as a person reads it: "1.5 s", "20 %", "4"; the condition's default said as such
    ("1.5 s (default)"); what fires a condition that takes none ("none: one fatal error fires it")."""
    if rule.condition in FIRES_WITHOUT:
        return FIRES_WITHOUT[rule.condition]
    measure = MEASURES.get(rule.condition)
    if measure is None:
        return display.UNKNOWN
    if rule.threshold is None:
        return f"{measure.read(DEFAULTS[rule.condition][0])} (default)"
    return measure.read(rule.threshold)


def window_text(rule: AlertRule) -> str:
    """A rule's window: "15 min", or its condition's default said as such ("15 min (default)")."""
    if rule.window_minutes:
        return f"{rule.window_minutes} min"
    return f"{DEFAULTS[rule.condition][1]} min (default)" if rule.condition in DEFAULTS else display.UNKNOWN


def typed(condition: str, value: float | None) -> str:
    """A stored threshold as its input shows it, in the unit beside it: 1500 (ms) -> "1.5" (s); "" for none."""
    measure = MEASURES.get(condition)
    if value is None or measure is None:
        return "" if value is None else f"{value:g}"
    shown = Decimal(repr(float(value))) / measure.scale
    return format(shown.normalize(), "f")


def stored(condition: str, entered: Decimal | float | str) -> float:
    """What was typed in the unit beside the input, as stored: "1.5" (s) -> 1500.0 (ms). Decimal arithmetic,
    so that what was typed comes back as typed ("1.1" s is 1100 ms, not 1100.0000000000002)."""
    measure = MEASURES.get(condition)
    try:
        number = Decimal(str(entered))
    except InvalidOperation:
        raise ValueError(f"expected a number, got {str(entered)[:40]!r}") from None
    return float(number * (measure.scale if measure else 1))


def refusal(condition: str, value: float) -> str | None:
    """Why a stored threshold cannot be a condition's (None: it can): the JSON API and the settings form ask it."""
    if condition in FIRES_WITHOUT:
        return f"{condition} takes none (its window_minutes says when it fires)"
    if value < 0:
        return "out of range: a threshold is 0 or more"
    measure = MEASURES.get(condition)
    if measure is not None and measure.most is not None and value > measure.most:
        return "out of range: a share of sessions is from 0 to 100 %"
    most = TYPED_MOST * (measure.scale if measure is not None else 1)  # in the stored measure, as the API takes it
    if value > most:
        return f"out of range: at most {most:g}"
    return None


def units() -> dict[str, dict]:
    """Each condition's threshold unit, its defaults as the inputs' placeholders say them, and what fires one that
    takes no threshold: the settings form says the chosen condition's, its script the others' when chosen."""
    shown = {}
    for condition in C.values:
        default, window = DEFAULTS[condition]
        measure = MEASURES.get(condition)
        shown[condition] = {
            "unit": measure.unit if measure else "",
            "default": f"{typed(condition, default)} (default)" if default is not None else "",
            "none": FIRES_WITHOUT.get(condition, ""),
            "window": f"{window} (default)",
        }
    return shown
