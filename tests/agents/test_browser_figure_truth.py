"""What the agent page and the Overview's agents say of latency is true and reads at a glance, in Debian's Chromium,
at 1280 and 390 px: one name per figure (and a line that says how the two differ), charts only from enough points
and labelled, figure pairs on one line, sparklines beside their figures, headings clear of the tables above them,
one colour per service on every chart; a viewer sees the same figures, another organization none of them."""

import json
import re
import time
import uuid

import httpx
import pytest
import websockets.sync.client as ws

from rtvi_monitor.core.figure_names import BY_CALL, TURN_LATENCY, WAIT
from tests.conftest import SCREENSHOTS, log_in
from tests.rtvi_samples import m
from tests.sockets import wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

WIDTHS = [1280, 390]
PASSWORD = "correct-horse-battery"

# Beside the demo: support-concierge's calls in five hours (15 calls whose own p50s and p95s are known), and
# outbound-survey's in two hours only; a viewer of the demo organization, and another organization's admin.
SEED = """
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from dashboard.models import Agent, Membership, Organization
from rtvi_monitor.models import Session

org = Organization.objects.get(name="Demo Voice Co")
busy = Agent.objects.get(organization=org, name="support-concierge")
few = Agent.objects.get(organization=org, name="outbound-survey")
now = timezone.now()
for hour in range(1, 6):
    for i, (p50, p95) in enumerate(((1200, 1500), (1800, 2500), (2400, 7000))):
        start = now - timedelta(hours=hour, minutes=5 + i)
        Session.objects.create(
            organization=org, agent=busy, agent_key=str(busy.id), agent_name=busy.name, status="ended",
            session_id=f"truth-{hour}-{i}", started_at=start, ended_at=start + timedelta(minutes=2),
            latency_p50_ms=p50, latency_p95_ms=p95, turn_count=4, cost_usd=0.004,
        )
for hour in (1, 3):
    start = now - timedelta(hours=hour, minutes=10)
    Session.objects.create(
        organization=org, agent=few, agent_key=str(few.id), agent_name=few.name, status="ended",
        session_id=f"few-{hour}", started_at=start, ended_at=start + timedelta(minutes=2),
        latency_p50_ms=900, latency_p95_ms=1300, turn_count=3,
    )
viewer = User.objects.create_user("watcher", password="{password}")
Membership.objects.create(organization=org, user=viewer, role="viewer")
other = Organization.objects.create(name="Other Co")
stranger = User.objects.create_user("stranger", password="{password}")
Membership.objects.create(organization=other, user=stranger, role="admin")
print(busy.id, few.id)
"""
BY_CALL_PAIR = "1.8 s / 7.0 s"  # the median of 1200/1800/2400 x5; the 95th percentile of 1500/2500/7000 x5


@pytest.fixture(scope="module")
def truth_server():
    """Yields (server, username, password, api_key, busy agent id, few-hours agent id)."""
    from tests.server import DaphneServer

    server = DaphneServer().start()
    try:
        username, password, api_key = server.seed_demo()
        busy, few = server.manage("shell", "-c", SEED.replace("{password}", PASSWORD)).split()[-2:]
        yield server, username, password, api_key, busy, few
    finally:
        server.stop()


def open_page(browser, server, width, username, password):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
    page = context.new_page()
    log_in(page, server, username, password)
    page.wait_for_url(f"{server.url}/")
    return context, page


def one_line(locator, seconds: float = 5) -> bool:
    """Whether an inline element is laid out on one line (a wrapped one has a box per line). The Overview's panel
    is replaced as its figures change: an element caught as it is swapped out has no box at all, so the count
    is read again (a pair that wraps has two boxes every time)."""
    deadline = time.monotonic() + seconds
    while True:
        boxes = locator.evaluate("(e) => e.isConnected ? e.getClientRects().length : 0")
        if boxes == 1 or time.monotonic() > deadline:
            return boxes == 1
        time.sleep(0.2)


def css_colour(page, name: str) -> str:
    """A custom property of the stylesheet as the browser computes a colour of it: "rgb(r, g, b)"."""
    return page.evaluate(
        """(name) => { const probe = document.createElement("span"); probe.style.color = `var(${name})`;
        document.body.append(probe); const colour = getComputedStyle(probe).color; probe.remove(); return colour; }""",
        name,
    )


def gap_above(page, heading: str, above: str) -> float:
    """Pixels between the bottom of `above` and the top of `heading` (selectors)."""
    return page.evaluate(
        "([h, a]) => document.querySelector(h).getBoundingClientRect().top"
        " - document.querySelector(a).getBoundingClientRect().bottom",
        [heading, above],
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_agent_page_names_each_latency_figure_and_says_how_the_two_differ(browser, truth_server, width):
    server, username, password, _, busy, _ = truth_server
    context, page = open_page(browser, server, width, username, password)
    try:
        page.goto(f"{server.url}/agents/{busy}/")
        figures = page.locator("[data-testid=agent-figures]")
        assert figures.locator("dt").nth(2).inner_text() == f"{BY_CALL.name} p50 / p95"
        assert figures.locator("dt").nth(2).get_attribute("title") == BY_CALL.meaning
        pair = page.locator("[data-testid=by-call-latency] .figure")
        assert pair.inner_text() == BY_CALL_PAIR and one_line(pair)
        # Every turn, in the turns section: its own name, never the bare "turn latency" nor "whole wait".
        every = page.locator("[data-testid=every-turn-latency] td").first
        assert every.inner_text().startswith(TURN_LATENCY.name)
        assert every.get_attribute("title") == TURN_LATENCY.meaning
        text = page.locator("main").inner_text()
        assert "Whole wait" not in text and not re.search(r"(?<!by call )(?<!every turn )Turn latency p50", text)
        note = page.locator("[data-testid=latency-definitions]").inner_text()
        assert f"Two summaries of {WAIT}." in note
        assert BY_CALL.name in note and BY_CALL.how in note and TURN_LATENCY.name in note and TURN_LATENCY.how in note
        # The chart: labelled, with its scale, drawn from the five hours with calls.
        chart = page.locator("figure[data-testid=latency-chart]")
        assert chart.locator("svg.latency-chart polyline").count() == 2
        caption = chart.locator("figcaption").inner_text()
        assert caption.startswith(f"{BY_CALL.name} per hour") and "p50" in caption and caption.endswith("to 7.0 s")
        assert chart.locator("svg").evaluate("(e) => e.getBoundingClientRect().width") >= 300
        # One rule for shares and costs.
        assert figures.locator("dd").nth(4).inner_text() == "0 % (0 of 15)"
        assert re.fullmatch(r"\$\d+\.\d\d", page.locator("[data-testid=agent-cost]").inner_text())
        # Headings clear of the tables above them.
        assert gap_above(page, "#h-turn-figures", "[data-testid=deployments]") >= 16
        assert gap_above(page, "#turn-figures h3", "[data-testid=turn-stages]") >= 16
        assert gap_above(page, "#h-platform-sessions", "[data-testid=turn-deployments]") >= 16
        page.screenshot(path=str(SCREENSHOTS / f"figure-truth-agent-{width}.png"), full_page=True)
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_turns_in_too_few_hours_draw_no_chart_and_the_page_says_why(browser, truth_server, width):
    server, username, password, _, _, few = truth_server
    context, page = open_page(browser, server, width, username, password)
    try:
        page.goto(f"{server.url}/agents/{few}/")
        assert page.locator("[data-testid=by-call-latency]").inner_text() == "905 ms / 1.3 s"
        assert page.locator("svg.latency-chart").count() == 0
        none = page.locator("[data-testid=chart-none]")
        assert none.is_visible() and none.inner_text() == "No chart: turns in 2 of the 24 hours; a chart needs 3."
        page.goto(f"{server.url}/")
        row = page.locator("[data-testid=agents-overview] tr[data-testid=agent-row]", has_text="outbound-survey")
        assert row.locator("[data-testid=latency-pair]").inner_text() == "905 ms / 1.3 s"
        assert row.locator("svg.latency-chart").count() == 0  # no stray dots above the figures
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_overview_agents_table_sets_each_sparkline_beside_its_figures_and_never_breaks_a_pair(
    browser, truth_server, width
):
    server, username, password, _, _, _ = truth_server
    context, page = open_page(browser, server, width, username, password)
    try:
        table = page.locator("[data-testid=agents-overview]")
        # The count beside the bars is the day's, not an hour's.
        assert table.locator("thead th").nth(2).evaluate("(e) => e.textContent") == "Sessions in 24 h, by the hour"
        header = table.locator("thead th").nth(3)
        assert header.evaluate("(e) => e.textContent") == f"{BY_CALL.name} p50 / p95"
        assert header.get_attribute("title") == BY_CALL.meaning
        row = table.locator("tr[data-testid=agent-row]", has_text="support-concierge")
        pair = row.locator("[data-testid=latency-pair]")
        assert pair.inner_text() == BY_CALL_PAIR and one_line(pair)  # the agent page's figure, by the same name
        chart = row.locator("svg.latency-chart")
        assert chart.count() == 1 and chart.locator("polyline").count() == 2
        box, figure = chart.bounding_box(), pair.bounding_box()
        # Beside the figures, centred on their line, wide enough to read.
        assert box["x"] + box["width"] <= figure["x"] and box["width"] >= 90
        assert abs((box["y"] + box["height"] / 2) - (figure["y"] + figure["height"] / 2)) <= 4
        assert row.locator("[data-testid=sessions-24h]").inner_text() == "15"
        bars = row.locator("svg.spark rect").first
        assert bars.evaluate("(e) => getComputedStyle(e).fill") == css_colour(page, "--accent")  # a count, not red
        for other in table.locator("[data-testid=latency-pair]").all():
            assert one_line(other)
        if width == 1280:  # the figures line up row under row, charts or not
            lefts = table.locator("[data-testid=latency-pair]").evaluate_all(
                "(pairs) => pairs.map((p) => [p.textContent, Math.round(p.getBoundingClientRect().x)])"
            )
            assert len({x for _, x in lefts}) == 1, lefts
        table.screenshot(path=str(SCREENSHOTS / f"figure-truth-overview-{width}.png"))
    finally:
        context.close()


def stream_call(server, session_id: str, agent: str) -> None:
    """A bot's call of one reply, with its TTS's and LLM's time to first byte (the TTS's name sorts first)."""
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    ttfb = [
        {"processor": "CartesiaTTSService#0", "model": "sonic", "value": 0.21},
        {"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.42},
    ]
    messages = [
        m("bot-ready", {"version": "2.2.0", "about": {"library": "pipecat-ai", "library_version": "1.14.0"}}),
        m("user-started-speaking"),
        m("user-stopped-speaking"),
        m("bot-llm-started"),
        m("bot-llm-text", {"text": "Your order ships today."}),
        m("bot-tts-started"),
        m("metrics", {"ttfb": ttfb}),
        m("bot-started-speaking"),
        m("bot-stopped-speaking"),
    ]
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent}",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as bot:
        for seq, message in enumerate(messages, 1):
            bot.send(json.dumps(wrap(seq, message, sent_at=time.time())))
            assert json.loads(bot.recv(timeout=10)) == {"ack": seq}
            time.sleep(0.05)


def legend_colour(page, chart: str, label: str) -> str:
    series = page.locator(f"{chart} .u-legend tr.u-series", has=page.locator(".u-label", has_text=label))
    return series.locator(".u-marker").evaluate("(e) => getComputedStyle(e).borderTopColor")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_service_is_one_colour_on_every_chart(browser, truth_server, width):
    server, username, password, _, _, _ = truth_server
    session_id = f"palette-{width}-{uuid.uuid4().hex[:6]}"
    stream_call(server, session_id, "appointment-booker")  # not the agent whose figures are counted
    context, page = open_page(browser, server, width, username, password)
    try:
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_selector("#chart-ttfb .u-legend .u-label:text('OpenAI LLM · gpt-4o')")
        llm, tts, p95 = (css_colour(page, name) for name in ("--llm", "--tts", "--p95"))
        assert len({llm, tts, css_colour(page, "--user")}) == 3  # the LLM no longer the user's blue
        assert legend_colour(page, "#chart-ttfb", "OpenAI LLM") == llm
        assert legend_colour(page, "#chart-ttfb", "Cartesia TTS") == tts  # not by position: it comes first
        key = "(e) => getComputedStyle(e, '::before').backgroundColor"
        assert page.locator(".wf-key[data-part=llm_first_token]").evaluate(key) == llm
        assert page.locator(".wf-key[data-part=tts_first_audio]").evaluate(key) == tts
        assert legend_colour(page, "#chart-latency", "p95") == p95
        page.goto(f"{server.url}/")
        page.wait_for_selector("[data-testid=agents-overview] svg.latency-chart polyline.p95", state="attached")
        # Read in one task: the panel is fetched again as the streamed call's session changes, and a replaced
        # element has no style.
        stroke = page.evaluate(
            "() => getComputedStyle(document.querySelector("
            "'[data-testid=agents-overview] svg.latency-chart polyline.p95')).stroke"
        )
        assert stroke == p95  # the Overview's p95, the same colour
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_viewer_reads_the_same_figures_and_another_organization_none(browser, truth_server, width):
    server, _, _, _, busy, _ = truth_server
    context, page = open_page(browser, server, width, "watcher", PASSWORD)
    try:
        page.goto(f"{server.url}/agents/{busy}/")
        assert page.locator("[data-testid=by-call-latency]").inner_text() == BY_CALL_PAIR
        assert page.locator("[data-testid=latency-definitions]").is_visible()
        page.goto(f"{server.url}/")
        row = page.locator("[data-testid=agents-overview] tr[data-testid=agent-row]", has_text="support-concierge")
        assert row.locator("[data-testid=latency-pair]").inner_text() == BY_CALL_PAIR
    finally:
        context.close()
    context, page = open_page(browser, server, width, "stranger", PASSWORD)
    try:
        response = page.goto(f"{server.url}/agents/{busy}/")
        assert response.status == 404 and BY_CALL_PAIR not in page.locator("main").inner_text()
        page.goto(f"{server.url}/")
        assert "support-concierge" not in page.locator("main").inner_text()
    finally:
        context.close()


def test_metrics_names_its_turn_latency_as_the_pages_do(truth_server):
    server, _, _, api_key, _, _ = truth_server
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
    assert response.status_code == 200
    assert f"# HELP rtvi_turn_latency_seconds {TURN_LATENCY.name}: {TURN_LATENCY.meaning}\n" in response.text
