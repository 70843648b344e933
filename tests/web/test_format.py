"""The product's formats on the server: the `duration` filter (the same rules as format.js's formatDuration,
checked on one table of cases in both languages), clients and bots as words (peer_text and state_format.js's
peerText), ids shown short (short_id and format.js's shortId), and the <time> every page's moments are
written as."""

import json
import random
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.template import Context, Template, TemplateSyntaxError

from dashboard.templatetags.dashboard_format import duration
from dashboard.web.display import peer_text, short_id
from tests.conftest import skip_or_fail

STATIC_JS = Path(__file__).resolve().parents[2] / "static" / "js"
FORMAT_JS = STATIC_JS / "format.js"  # every page's: durations, short ids
STATE_FORMAT_JS = STATIC_JS / "state_format.js"  # the session page's: clients and bots as words

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


# (share, text): the one percentage rule, server and browser (display.percent_text, format.js percentText).
PERCENTS = [
    (None, "—"),
    (0, "0 %"),
    (0.0001, "<1 %"),  # 1 error in 10,000 calls is not "0 %"
    (0.00499, "<1 %"),
    (0.005, "1 %"),
    (0.125, "13 %"),  # half up
    (0.375, "38 %"),
    (0.9949, "99 %"),
    (0.9951, ">99 %"),  # not all: never "100 %"
    (1, "100 %"),
]


def test_every_share_reads_as_one_percentage_rule_in_both_languages():
    from dashboard.templatetags.dashboard_format import percent

    assert [percent(share) for share, _ in PERCENTS] == [text for _, text in PERCENTS]
    node = shutil.which("node")
    if node is None:
        skip_or_fail("Node.js is not installed: format.js cannot be checked against the filter")
    script = (
        f"import {{ percentText }} from {json.dumps(FORMAT_JS.as_uri())};"
        "console.log(JSON.stringify(JSON.parse(process.argv[1]).map(percentText)));"
    )
    shares = json.dumps([share for share, _ in PERCENTS])
    result = subprocess.run(
        [node, "--input-type=module", "-e", script, shares], capture_output=True, text=True, check=True, timeout=30
    )
    assert json.loads(result.stdout) == [text for _, text in PERCENTS]


def test_money_reads_to_the_cent():
    from dashboard.templatetags.dashboard_format import money

    cases = [(None, "—"), (0, "$0.00"), (0.004, "<$0.01"), (0.005, "$0.01"), (0.051, "$0.05"), (1234.5, "$1,234.50")]
    assert [money(usd) for usd, _ in cases] == [text for _, text in cases]


def test_a_moment_is_written_in_utc_for_the_browser_to_rewrite():
    moment = datetime(2026, 11, 23, 13, 3, 7, 123456, tzinfo=UTC)
    html = Template('{% include "web/_when.html" with when=moment %}').render(Context({"moment": moment}))
    assert html == (
        '<time class="when" datetime="2026-11-23T13:03:07.123456+00:00" title="2026-11-23 13:03:07 UTC">'
        "2026-11-23 13:03:07 UTC</time>"
    )
    assert Template('{% include "web/_when.html" with when=None %}').render(Context()) == "—"


def test_a_moment_is_utc_whatever_the_server_zone(settings):
    settings.TIME_ZONE = "Europe/Paris"
    moment = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    html = Template('{% include "web/_when.html" with when=moment %}').render(Context({"moment": moment}))
    assert 'datetime="2026-07-01T12:00:00+00:00"' in html and ">2026-07-01 12:00:00 UTC</time>" in html


# (version, about, text): what a client-ready or bot-ready says, as a person reads it. state_format.js's peerText
# says the same on the same table (test_state_format_js_reads_clients_and_bots_the_same).
PEERS = [
    (
        "2.1.0",
        {"library": "@pipecat-ai/client-js", "library_version": "1.4.0", "platform": "browser"},
        "client-js 1.4.0 on browser · RTVI 2.1.0",
    ),
    ("2.2.0", {"library": "pipecat-ai", "library_version": "1.14.0"}, "pipecat-ai 1.14.0 · RTVI 2.2.0"),
    (None, {"library": "pipecat", "library_version": "0.0.95", "platform": "python"}, "pipecat 0.0.95 on python"),
    (
        "1.0.0",
        {
            "library": "@pipecat-ai/client-js",
            "library_version": "1.2.0",
            "platform": "Chrome",
            "platform_version": "131.0",
            "platform_details": {"os": {"name": "macOS"}, "browser": {"name": "Chrome"}},
        },
        "client-js 1.2.0 on Chrome 131.0 · RTVI 1.0.0",
    ),
    (
        "2.2.0",
        {"library": "pipecat-ai", "library_version": "1.14.0", "name": "support"},
        "pipecat-ai 1.14.0 (support) · RTVI 2.2.0",
    ),
    ("2.2.0", {"platform": "ios"}, "on ios · RTVI 2.2.0"),
    (None, {"os": "linux", "build": 7, "debug": True, "nested": {"a": 1}}, "os linux, build 7"),
    ("1.0.0", {}, "RTVI 1.0.0"),
    ("1.0.0", None, "RTVI 1.0.0"),
    (None, None, "—"),
    ("", "a bot that says a string", "a bot that says a string"),
    ("2.1.0", {"library": " ", "library_version": 3}, "RTVI 2.1.0"),
    ("2.1.0", {"truncated": True, "preview": '{"library', "length": 9000}, "(9000 characters of JSON) · RTVI 2.1.0"),
]

IDS = [
    ("4cab03c7-8f53-4e1b-9a0d-2f6c1e7b5a90", "4cab03c7"),
    ("4CAB03C7-8F53-4E1B-9A0D-2F6C1E7B5A90", "4CAB03C7"),
    ("0123456789abcdef0123456789abcdef", "01234567"),
    ("demo-3fa9c2d1e0b4", "demo-3fa9c2d1e0b4"),  # somebody's name for it: whole
    ("4cab03c7-8f53", "4cab03c7-8f53"),
    ("support-call-17", "support-call-17"),
    ("", "—"),
    (None, "—"),
]


def run_js(module: Path, function: str, calls: list) -> list:
    """The module's `function` on each argument list, in Node."""
    node = shutil.which("node")
    if node is None:
        skip_or_fail(f"Node.js is not installed: {module.name} cannot be checked against the filters")
    script = (
        f"import {{ {function} }} from {json.dumps(module.as_uri())};"
        "const calls = JSON.parse(process.argv[1]);"
        f"console.log(JSON.stringify(calls.map((args) => {function}(...args))));"
    )
    result = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(calls)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize(("version", "about", "text"), PEERS)
def test_a_client_or_bot_reads_as_its_library_and_platform_not_json(version, about, text):
    assert peer_text(version, about) == text


def test_state_format_js_reads_clients_and_bots_the_same():
    calls = [[version, about] for version, about, _ in PEERS]
    assert run_js(STATE_FORMAT_JS, "peerText", calls) == [text for *_, text in PEERS]


@pytest.mark.parametrize(("value", "text"), IDS)
def test_uuids_read_short_and_ids_somebody_chose_whole(value, text):
    assert short_id(value) == text


def test_format_js_shortens_the_same_ids():
    assert run_js(FORMAT_JS, "shortId", [[value] for value, _ in IDS]) == [text for _, text in IDS]


def test_the_filters_keep_the_whole_id_on_hover_and_the_words_escaped():
    rendered = Template(
        "{% load dashboard_format %}{% short_id a %}|{% session_link b %}|{{ about|peer:'2.1.0' }}|{{ about|as_json }}"
    ).render(
        Context(
            {
                "a": "4cab03c7-8f53-4e1b-9a0d-2f6c1e7b5a90",
                "b": "9f8e7d6c-8f53-4e1b-9a0d-2f6c1e7b5a90",
                "about": {"library": "<b>x</b>", "library_version": "1"},
            }
        )
    )
    short, link, words, raw = rendered.split("|")
    assert short == '<code class="id" title="4cab03c7-8f53-4e1b-9a0d-2f6c1e7b5a90">4cab03c7</code>'
    assert link == (
        '<a class="id" href="/sessions/9f8e7d6c-8f53-4e1b-9a0d-2f6c1e7b5a90/" '
        'title="9f8e7d6c-8f53-4e1b-9a0d-2f6c1e7b5a90">9f8e7d6c</a>'
    )
    assert words == "&lt;b&gt;x&lt;/b&gt; 1 · RTVI 2.1.0"  # a bot's words are text, never markup
    assert "<b>" not in raw and "&lt;b&gt;" in raw
    assert Template("{% load dashboard_format %}{% short_id a %}").render(Context({"a": None})) == "—"


def test_thresholds_read_in_their_conditions_unit():
    from rtvi_monitor.alerts.models import AlertRule

    latency = AlertRule(condition=AlertRule.Condition.TURN_LATENCY_P95, threshold=1500)
    short = AlertRule(condition=latency.condition, threshold=850)
    rate = AlertRule(condition=AlertRule.Condition.ERROR_RATE, threshold=12.5)
    badly = AlertRule(condition=AlertRule.Condition.ENDED_BADLY, threshold=3)
    default = AlertRule(condition=AlertRule.Condition.TURN_LATENCY_P95)
    fatal = AlertRule(condition=AlertRule.Condition.FATAL_ERROR)
    rendered = Template("{% load dashboard_format %}{% for r in rules %}{{ r|threshold }};{% endfor %}").render(
        Context({"rules": [latency, short, rate, badly, default, fatal]})
    )
    # A rule that sets none reads as its condition's default, said as such; one that takes none says what fires it.
    assert rendered == "1.5 s;850 ms;12.5 %;3;1.5 s (default);none: one fatal error fires it;"
    windows = Template("{% load dashboard_format %}{% for r in rules %}{{ r|window }};{% endfor %}").render(
        Context({"rules": [AlertRule(condition=fatal.condition, window_minutes=5), fatal]})
    )
    assert windows == "5 min;15 min (default);"
