"""Small inline SVG charts for server-rendered pages (the Overview's sparklines and per-agent charts).

Drawn on the server from figures the server computed, so the page needs no
script to show them and stays the same whether it was loaded or refreshed.
Only numbers go into the markup.
"""

from django import template
from django.utils.html import format_html, format_html_join

from dashboard.web.display import duration_text

register = template.Library()


def _points(values, width: float, height: float, top: float) -> list[list[tuple[float, float]]]:
    """Polyline runs (a gap where a value is None), scaled so that 0 is the bottom and `top` the top."""
    step = width / max(1, len(values) - 1)
    runs, run = [], []
    for i, value in enumerate(values):
        if value is None:
            if run:
                runs.append(run)
            run = []
            continue
        run.append((round(i * step, 1), round(height - (value / top) * height if top else height, 1)))
    if run:
        runs.append(run)
    return runs


@register.simple_tag
def sparkline(values, width=120, height=24, label=""):
    """Counts per bucket as bars, from zero; nothing when every count is zero (an empty box reads as a gap)."""
    values = list(values)
    if not any(values):
        return ""
    top = max(values, default=0) or 1
    bar = width / max(1, len(values))
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}"></rect>',
        (
            (
                round(i * bar, 1),
                round(height - v / top * height, 1),
                round(max(1.0, bar - 1), 1),
                round(v / top * height, 1),
            )
            for i, v in enumerate(values)
            if v
        ),
    )
    return format_html(
        '<svg class="spark" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">{}</svg>',
        width,
        height,
        width,
        height,
        label or f"{sum(values)} in all, at most {max(values, default=0)} per bar",
        bars,
    )


# Hours with turns a latency chart needs: with fewer, two dots (or one) say nothing of a trend that the p50 / p95
# beside them does not, and read as stray marks. The figures stand alone then.
MIN_HOURS = 3


def hours_with_turns(hours) -> int:
    """How many of the hours have a p50: the points a latency chart would draw."""
    return sum(1 for h in hours if h["p50"] is not None)


@register.filter
def chartable(hours) -> bool:
    """Whether a latency chart of these hours is drawn: MIN_HOURS of them had turns."""
    return hours_with_turns(hours or ()) >= MIN_HOURS


@register.filter
def chart_top(hours) -> str:
    """The top of a latency chart of these hours (its highest p95 or p50), as a duration: the scale a caption gives."""
    known = [v for h in hours or () for v in (h["p50"], h["p95"]) if v is not None]
    return duration_text(max(known)) if known else duration_text(None)


@register.simple_tag
def latency_chart(hours, width=160, height=36, explain=False):
    """An agent's hourly p50 (solid) and p95 (dashed) turn latency by call, from zero, on a baseline; the top
    value in its label. Nothing (or, with `explain`, a line saying why) when fewer than MIN_HOURS hours had turns.
    The colours are the stylesheet's --p50 and --p95, as on every latency chart."""
    p50 = [h["p50"] for h in hours]
    p95 = [h["p95"] for h in hours]
    measured = hours_with_turns(hours)
    if measured < MIN_HOURS:
        if not explain:
            return ""
        return format_html(
            '<span class="muted chart-none" data-testid="chart-none">No chart: turns in {} of the {} hours; '
            "a chart needs {}.</span>",
            measured,
            len(hours),
            MIN_HOURS,
        )
    top = max(v for v in p50 + p95 if v is not None) or 1
    lines = [format_html('<line class="base" x1="0" y1="{}" x2="{}" y2="{}"></line>', height, width, height)]
    for values, css in ((p95, "p95"), (p50, "p50")):
        for run in _points(values, width, height, top):
            if len(run) == 1:
                x, y = run[0]
                lines.append(format_html('<circle class="{}" cx="{}" cy="{}" r="1.5"></circle>', css, x, y))
            else:
                path = " ".join(f"{x},{y}" for x, y in run)
                lines.append(format_html('<polyline class="{}" points="{}"></polyline>', css, path))
    return format_html(
        '<svg class="latency-chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="turn latency by call per hour, p50 and p95, over {} hours; top {}">{}</svg>',
        width,
        height,
        width,
        height,
        len(hours),
        duration_text(top),
        format_html_join("", "{}", ((line,) for line in lines)),
    )
