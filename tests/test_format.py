"""The product's formats on the server: the `duration` filter (the same rules as format.js's formatDuration,
checked on one table of cases in both languages) and the <time> every page's moments are written as."""

import json
import random
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.template import Context, Template, TemplateSyntaxError

from dashboard.templatetags.dashboard_format import duration
from tests.conftest import skip_or_fail

FORMAT_JS = Path(__file__).resolve().parent.parent / "static" / "js" / "format.js"

# (milliseconds, text): every boundary of every rule, both sides of it. tests/js/format.test.mjs has the landmarks.
DURATIONS = [
    (0, "0 ms"),
    (0.4, "0 ms"),
    (0.5, "1 ms"),
    (380.491, "380 ms"),
    (380.5, "381 ms"),  # half up, as JavaScript rounds: Python's round() would say 380
    (999.4, "999 ms"),
    (999.5, "1.0 s"),
    (1000, "1.0 s"),
    (1049.9, "1.0 s"),
    (1050, "1.1 s"),
    (1234, "1.2 s"),
    (9949, "9.9 s"),
    (9950, "10 s"),
    (12_345, "12 s"),
    (59_499, "59 s"),
    (59_500, "1 min 00 s"),
    (60_000, "1 min 00 s"),
    (245_000, "4 min 05 s"),
    (245_499, "4 min 05 s"),
    (245_500, "4 min 06 s"),
    (3_599_499, "59 min 59 s"),
    (3_599_500, "1 h 00 min"),
    (3_720_000, "1 h 02 min"),
    (3_749_999, "1 h 02 min"),
    (3_750_000, "1 h 03 min"),
    (90_000_000, "25 h 00 min"),
    (-5, "0 ms"),  # clocks disagree: never a negative duration
]


@pytest.mark.parametrize(("ms", "text"), DURATIONS)
def test_the_duration_filter_rounds_as_a_person_says_it(ms, text):
    assert duration(ms) == text


def test_unknown_durations_are_a_dash_and_seconds_can_be_given():
    for unknown in (None, "", "12", float("nan"), float("inf"), True):
        assert duration(unknown) == "—"
    assert duration(245, "s") == "4 min 05 s"
    assert duration(1.2345, "s") == "1.2 s"
    rendered = Template('{% load dashboard_format %}{{ a|duration }} · {{ b|duration:"s" }} · {{ c|duration }}').render(
        Context({"a": 820.4, "b": 0.38, "c": None})
    )
    assert rendered == "820 ms · 380 ms · —"
    with pytest.raises(TemplateSyntaxError):
        duration(1, "h")


def run_format_duration(values: list[float]) -> list[str]:
    """format.js's formatDuration on each value, in Node."""
    node = shutil.which("node")
    if node is None:
        skip_or_fail("Node.js is not installed: format.js cannot be checked against the filter")
    script = (
        f"import {{ formatDuration }} from {json.dumps(FORMAT_JS.as_uri())};"
        "const values = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(values.map(formatDuration)));"
    )
    result = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(values)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return json.loads(result.stdout)


def test_format_js_says_the_same_on_the_same_table():
    assert run_format_duration([ms for ms, _ in DURATIONS]) == [text for _, text in DURATIONS]


def test_format_js_and_the_filter_agree_everywhere():
    """Not only on the table: on values of every size, halves (where rounding rules differ) included."""
    rng = random.Random(12)
    values = [rng.uniform(0, 10) ** rng.uniform(0, 8) for _ in range(3000)]
    values += [n + 0.5 for n in range(0, 5000, 7)] + [n * 100 + 50 for n in range(0, 2000, 3)]
    values += [n * 1000 + 500 for n in range(0, 7200, 11)] + [n * 60_000 + 30_000 for n in range(0, 200)]
    assert run_format_duration(values) == [duration(value) for value in values]


def test_a_moment_is_written_in_utc_for_the_browser_to_rewrite():
    moment = datetime(2026, 11, 23, 13, 3, 7, 123456, tzinfo=UTC)
    html = Template('{% include "dashboard/_when.html" with when=moment %}').render(Context({"moment": moment}))
    assert html == (
        '<time class="when" datetime="2026-11-23T13:03:07.123456+00:00" title="2026-11-23 13:03:07 UTC">'
        "2026-11-23 13:03:07 UTC</time>"
    )
    assert Template('{% include "dashboard/_when.html" with when=None %}').render(Context()) == "—"


def test_a_moment_is_utc_whatever_the_server_zone(settings):
    settings.TIME_ZONE = "Europe/Paris"
    moment = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    html = Template('{% include "dashboard/_when.html" with when=moment %}').render(Context({"moment": moment}))
    assert 'datetime="2026-07-01T12:00:00+00:00"' in html and ">2026-07-01 12:00:00 UTC</time>" in html
