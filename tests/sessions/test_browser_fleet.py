"""Where an agent's wait goes across its calls, in Debian's Chromium at 1280 and 390 px (issue 37): what the wait is
made of, its trend, the slowest turns each one click from its row on its call's page, regions, and two deployments
that differ only in the VAD's stop time compared, the setting blamed. A viewer sees the same figures.

The calls are stored as the ingest stores them (messages with the bots' breakdowns), and their figures kept by the
sweep a server runs at start (rtvi_monitor/sessions/figures.py), as after an upgrade."""

import re

import pytest

from tests.conftest import SCREENSHOTS, log_in, overflow

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

PASSWORD = "correct-horse-battery"
CALLS = 55  # a side: over the comparison's MIN_CALLS (50)

SEED = """
import json, random
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from dashboard.models import Agent, Membership, Organization
from rtvi_monitor.sessions import figures
from rtvi_monitor.sessions.models import Event, Session
from tests.core.test_contributions import breakdown, m, part, turn

org = Organization.objects.get(name="Demo Voice Co")
agent = Agent.objects.get(organization=org, name="support-concierge")
now, rng = timezone.now(), random.Random(7)


def call(t0, stop):
    # Two spoken turns, timed as a bot sends them: the VAD waits `stop` of silence before it releases the turn
    # (user-stopped-speaking), the LLM answers ~0.3 s later; the bot's breakdown says both.
    timed = []
    for k in range(2):
        released = t0 + 10 * k + 2 + stop
        llm = rng.uniform(0.25, 0.35)
        parts = [part("endpointing_wait", stop, "setting", "config: VAD stop_secs"), part("llm_inference", llm)]
        said = m("user-transcription", {"text": "Where is my order?", "final": True})
        timed += turn(released, released + llm, (released + 0.01, said), (released + llm - 0.005, breakdown(parts, user_turn_secs=stop)))  # noqa: E501
    return timed


for deployment, stop, hours in (("v1-vad-200ms", 0.2, 5), ("v2-vad-600ms", 0.6, 2)):
    for n in range({calls}):
        start = now - timedelta(hours=hours, minutes=n)
        session = Session.objects.create(
            organization=org, agent=agent, agent_key=str(agent.id), agent_name=agent.name, status="ended",
            session_id=f"{deployment}-{n:02d}", started_at=start, ended_at=start + timedelta(minutes=2),
            deployment_id=deployment, region="eu-west" if n % 2 else "us-east", end_kind="bot_finished",
        )
        timed = call(start.timestamp(), stop)
        Event.objects.bulk_create(
            Event(session=session, seq=i, direction="to-client", type=message["type"], received_at=at,
                  message=json.dumps(message))
            for i, (at, message) in enumerate(timed, 1)
        )
        Session.objects.filter(pk=session.pk).update(event_count=len(timed))
figures._sweep()  # what a server does at start: the earlier calls' figures kept
viewer = User.objects.create_user("watcher", password="{password}")
Membership.objects.create(organization=org, user=viewer, role="viewer")
print(agent.id)
"""


@pytest.fixture(scope="module")
def fleet_server():
    """Yields (server, username, password, agent id)."""
    from tests.server import DaphneServer

    server = DaphneServer().start()
    try:
        username, password, _ = server.seed_demo()
        seed = SEED.replace("{password}", PASSWORD).replace("{calls}", str(CALLS))
        agent = server.manage("shell", "-c", seed).split()[-1]
        yield server, username, password, agent
    finally:
        server.stop()


def open_page(browser, server, width, username, password):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
    page = context.new_page()
    log_in(page, server, username, password)
    page.wait_for_url(f"{server.url}/")
    return context, page


@pytest.mark.parametrize("width", [1280, 390])
def test_the_agent_page_takes_the_fleets_wait_apart_and_blames_the_vads_setting(browser, fleet_server, width):
    server, username, password, agent = fleet_server
    context, page = open_page(browser, server, width, username, password)
    try:
        page.goto(f"{server.url}/agents/{agent}/?turns=24h#turn-figures")
        section = page.locator("#turn-figures")
        assert f"{2 * CALLS} ended calls" in section.inner_text()
        made = page.locator('[data-testid="made-of"]')
        # The slowest turns are v2's, whose 0.6 s stop time is their largest part (the LLM's ~0.3 s).
        assert made.locator("tbody tr").first.get_attribute("data-part") == "endpointing_wait"
        trend = page.locator('[data-testid="trend"] tbody tr')
        assert trend.count() == 6
        counts = [int(trend.nth(i).locator("td").nth(1).inner_text()) for i in range(6)]
        assert counts == [0, 0, 0, 0, CALLS, CALLS]  # v1's calls 5 hours ago, v2's 2 hours ago
        verdicts = {
            row.get_attribute("data-figure"): row.get_attribute("data-verdict")
            for row in page.locator('[data-testid="deployment-change"] tbody tr').all()
        }
        assert verdicts["part:endpointing_wait-p50"] == "worse" and verdicts["part:endpointing_wait-p95"] == "worse"
        assert verdicts["part:llm_inference-p50"] == "no difference shown"
        # The messages' turn latency starts at the turn's release, after the VAD's wait: it cannot see the setting.
        assert verdicts["latency-p50"] == "no difference shown"
        assert page.locator("#c-after").input_value() == "v2-vad-600ms"
        assert page.locator("#c-before").input_value() == "v1-vad-200ms"
        report = overflow(page, width)
        assert report["scrollWidth"] <= width, report
        if width == 1280:
            section.screenshot(path=str(SCREENSHOTS / "agent-fleet.png"))
        # A region: the figures of its calls only, said so.
        page.locator('[data-testid="regions"] a', has_text="us-east").click()
        page.wait_for_load_state()
        assert "56 ended calls in us-east" in page.locator("#turn-figures").inner_text()  # 28 of each deployment
    finally:
        context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_slowest_turn_opens_its_row_on_its_calls_page(browser, fleet_server, width):
    server, username, password, agent = fleet_server
    context, page = open_page(browser, server, width, username, password)
    try:
        page.goto(f"{server.url}/agents/{agent}/")
        first = page.locator('[data-testid="slowest-turns"] a').first
        href = first.get_attribute("href")
        session_id, number = re.fullmatch(r"/sessions/([^/]+)/#turn-(\d+)", href).groups()
        assert session_id.startswith("v2-vad-600ms")  # the longer stop time makes the slowest turns
        first.click()
        row = page.locator(f"tr#turn-{number}")
        row.wait_for()
        assert "linked" in (row.get_attribute("class") or "")
        box, viewport = row.bounding_box(), page.viewport_size
        assert box is not None and -1 <= box["y"] < viewport["height"] / 2, box  # scrolled to its top
        if width == 1280:
            page.screenshot(path=str(SCREENSHOTS / "session-turn-linked.png"))
    finally:
        context.close()


def test_a_viewer_sees_the_same_figures_and_no_words(browser, fleet_server):
    server, _, _, agent = fleet_server
    context, page = open_page(browser, server, 1280, "watcher", PASSWORD)
    try:
        page.goto(f"{server.url}/agents/{agent}/")
        assert page.locator('[data-testid="deployment-change"] tr[data-verdict="worse"]').count() >= 2
        assert page.locator('[data-testid="slowest-turns"] a').count() == 10
        assert "Where is my order" not in page.content()
    finally:
        context.close()
