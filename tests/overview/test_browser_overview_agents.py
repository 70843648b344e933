"""The Overview's agents in Debian's Chromium: every agent of the list (sessions or not), dead ones red with why."""

import json
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

# Seeded beside the demo: a silent agent (three calls two hours ago, none since) and one with no deployment.
# The agents API is the server's own built-in one (a Pipecat Cloud stand-in cannot be faked at the httpx
# layer inside the server's process); its list has the demo's agents, legacy-ivr deleted.
SEED = """
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Agent, Organization
from rtvi_monitor.models import Session

org = Organization.objects.get(name="Demo Voice Co")
Agent.objects.create(organization=org, name="draft-desk")  # no active deployment
quiet = Agent.objects.get(organization=org, name="appointment-booker")
for i in range(3):
    start = timezone.now() - timedelta(hours=2, minutes=i)
    Session.objects.create(
        organization=org, agent=quiet, session_id=f"quiet-{i}", status="ended",
        started_at=start, ended_at=start + timedelta(minutes=1),
    )
"""
ERR_LIGHT = "rgb(179, 38, 30)"  # --err in static/css/dashboard.css, light scheme


@pytest.fixture(scope="module")
def server():
    """The real dashboard, seeded like `make run`, plus a silent agent and an undeployed one."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_SUMMARY_INTERVAL": "0.2"}).start()
    try:
        login = server.seed_demo()
        server.manage("shell", "-c", SEED)
        yield server, *login
    finally:
        server.stop()


def stream(server, token, session_id, agent, messages):
    """A bot of `agent`: each message sent over the public ingest socket, and stored (acked) before the next."""
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent}",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as bot:
        for seq, message in enumerate(messages, 1):
            bot.send(json.dumps(wrap(seq, message, sent_at=time.time())))
            assert json.loads(bot.recv(timeout=10)) == {"ack": seq}


def agent_row(page, name):
    return page.locator("[data-testid=agents-overview] tr[data-testid=agent-row]", has_text=name)


def test_every_agent_is_on_the_overview_and_dead_ones_are_red_with_why(browser, server):
    server, username, password, _ = server
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        log_in(page, server, username, password)
        page.goto(f"{server.url}/")
        page.wait_for_selector("#conn:text('connected')")
        page.evaluate("window.loadedOnce = true")  # gone if the page reloads

        rows = page.locator("[data-testid=agents-overview] tr[data-testid=agent-row]")
        names = [rows.nth(i).locator("td").first.locator("a").inner_text() for i in range(rows.count())]
        # Dead first, worst first: no deployment, silent; then the fine ones; the deleted one nobody calls last.
        assert names[:2] == ["draft-desk", "appointment-booker"]
        assert set(names[2:4]) == {"support-concierge", "outbound-survey"}
        assert names[4:] == ["legacy-ivr"]

        # An agent with no session at all: listed, with zeros and dashes, and not red.
        idle = agent_row(page, "outbound-survey")
        assert idle.get_attribute("class") == ""
        assert idle.locator("td").nth(1).inner_text() == "0"
        assert idle.locator("td").nth(2).locator("[data-testid=sessions-24h]").inner_text() == "0"
        assert "— / —" in idle.locator("td").nth(3).inner_text()
        assert idle.locator("[data-testid=dead-reason]").count() == 0

        # A deleted agent with no call: grey, "deleted", not red.
        deleted = agent_row(page, "legacy-ivr")
        assert deleted.get_attribute("class") == "retired"
        assert deleted.locator("[data-testid=agent-retired]").inner_text() == "deleted"
        assert deleted.locator("[data-testid=dead-reason]").count() == 0
        assert deleted.locator("td").first.locator("a").evaluate("e => getComputedStyle(e).color") != ERR_LIGHT

        # Dead ones: red, with the reason in words.
        draft = agent_row(page, "draft-desk")
        assert "dead" in draft.get_attribute("class").split()
        reason = draft.locator("[data-testid=dead-reason]")
        assert reason.evaluate("e => getComputedStyle(e).color") == ERR_LIGHT
        first_cell = draft.locator("td").first
        assert first_cell.evaluate("e => getComputedStyle(e).borderLeftColor") == ERR_LIGHT
        assert first_cell.locator("a").evaluate("e => getComputedStyle(e).color") == ERR_LIGHT
        assert "no active deployment" in agent_row(page, "draft-desk").locator("[data-testid=dead-reason]").inner_text()
        silent = agent_row(page, "appointment-booker").locator("[data-testid=dead-reason]").inner_text()
        assert silent == "no session in the last 30 min (it had 3 in the 24 h before)"
        healthy_link = idle.locator("td").first.locator("a")
        assert healthy_link.evaluate("e => getComputedStyle(e).color") != ERR_LIGHT
        page.screenshot(path=str(SCREENSHOTS / "overview-agents.png"), full_page=True)

        # The page refetches its panel when a session starts: the rows stay, the silent agent is alive again.
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        stream(server, token, f"wake-{uuid.uuid4().hex[:6]}", "appointment-booker", [rtvi("bot-ready", {})])
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid=agents-overview] tr[data-testid=agent-row]')]
                .some((tr) => tr.textContent.includes('appointment-booker') && !tr.classList.contains('dead'))""",
            timeout=20000,
        )
        assert agent_row(page, "appointment-booker").locator("[data-testid=dead-reason]").count() == 0
        assert "dead" in agent_row(page, "draft-desk").get_attribute("class").split()
        assert agent_row(page, "legacy-ivr").get_attribute("class") == "retired"
        assert agent_row(page, "outbound-survey").count() == 1
        assert page.evaluate("window.loadedOnce") is True  # all of it without a reload
        assert errors == []
    finally:
        context.close()
