"""Every page on a 390 x 844 phone, in Debian's Chromium: the first screen says whether anything is wrong.

The Overview shows what fires above its tiles; data tables read as stacked rows (each value after its
column's name) rather than columns cut at the screen's edge; nothing scrolls the page sideways. Ids a person
cannot read whole (UUIDs) are short, the whole id on hover; a client reads as its library, not as JSON.
Each page is photographed into a temporary directory (PHONE_SCREENSHOTS to keep them somewhere else).
"""

import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in, wait_until_firing
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
WIDTH, HEIGHT = 390, 844
FATAL = str(uuid.uuid4())  # as Pipecat Cloud names a session
CALM = str(uuid.uuid4())
CLIENT = {"library": "@pipecat-ai/client-js", "library_version": "1.4.0", "platform": "browser"}
BOT = {"library": "pipecat-ai", "library_version": "1.14.0"}


def stream(server, token, session_id, agent_id, messages, close=True):
    bot = ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent_id}",
        additional_headers={"Authorization": f"Bearer {token}"},
    )
    for seq, (message, direction) in enumerate(messages, 1):
        bot.send(json.dumps(wrap(seq, message, direction, sent_at=time.time())))
        assert json.loads(bot.recv(timeout=10)) == {"ack": seq}
    if close:
        bot.close()
    return bot


def call(fatal: bool):
    said = [
        (rtvi("client-ready", {"version": "2.1.0", "about": CLIENT}), "from-client"),
        (rtvi("bot-ready", {"version": "2.2.0", "about": BOT}), "to-client"),
        (rtvi("user-started-speaking"), "to-client"),
        (rtvi("user-stopped-speaking"), "to-client"),
        (rtvi("user-transcription", {"text": "where is my order", "final": True}), "to-client"),
        (
            rtvi("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 1.32}]}),
            "to-client",
        ),
        (rtvi("bot-started-speaking"), "to-client"),
        (rtvi("bot-tts-text", {"text": "It ships today."}), "to-client"),
    ]
    if fatal:
        said.append((rtvi("error", {"error": "LLM service returned 401 Unauthorized", "fatal": True}), "to-client"))
    return said


@pytest.fixture(scope="module")
def phone_data():
    """The demo organization on a real server, a fatal call (its alert firing) and a live one, both of an agent."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"ALERT_EVALUATE_INTERVAL": "0.5", "SESSION_SUMMARY_INTERVAL": "0.2"}).start()
    bots = []
    try:
        username, password, key = server.seed_demo()
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        agent_id, agent_name = (
            server.manage(
                "shell",
                "-c",
                "from dashboard.models import Agent; a = Agent.objects.order_by('name').first(); print(a.pk, a.name)",
            )
            .splitlines()[-1]
            .split(" ", 1)
        )
        stream(server, token, FATAL, agent_id, call(fatal=True))
        bots.append(stream(server, token, CALM, agent_id, call(fatal=False), close=False))
        wait_until_firing(server, key, FATAL)
        yield server, username, password, agent_id, agent_name
    finally:
        for bot in bots:
            bot.close()
        server.stop()


def screenshots() -> Path:
    where = Path(os.environ.get("PHONE_SCREENSHOTS") or tempfile.mkdtemp(prefix="phone-390-"))
    where.mkdir(parents=True, exist_ok=True)
    return where


def scroll_width(page) -> int:
    return page.evaluate("document.scrollingElement.scrollWidth")


def wider_than_the_screen(page) -> list[str]:
    """Elements whose right edge is past the screen while their parent's is not (what to blame)."""
    return page.evaluate(
        """(width) => [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > width + 1 && e.parentElement.getBoundingClientRect().right <= width + 1)
            .slice(0, 8).map((e) => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`)""",
        WIDTH,
    )


def stacked(page, table: str) -> dict:
    """How a data table lays out: its header hidden, each cell a block with its column's name before the value."""
    return page.locator(table).evaluate(
        """(table) => {
            const cells = [...table.querySelectorAll('tbody td[data-label]:not([data-label=""])')];
            const style = (e, pseudo) => getComputedStyle(e, pseudo);
            return {
                cells: cells.length,
                blocks: cells.filter((td) => style(td).display !== 'table-cell').length,
                labelled: cells.filter((td) => style(td, '::before').content === JSON.stringify(td.dataset.label)).length,
                headHidden: table.tHead === null || table.tHead.getBoundingClientRect().height <= 1,
                right: Math.max(...[...table.rows].map((row) => row.getBoundingClientRect().right)),
            };
        }"""
    )


def test_every_page_answers_is_anything_wrong_on_a_phone(browser, phone_data):
    server, username, password, agent_id, agent_name = phone_data
    shots = screenshots()
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=2)
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")

        pages = {
            "overview": ("/", "[data-testid=firing-alerts]"),
            "agents": ("/agents/", "table.data"),
            "agent": (f"/agents/{agent_id}/", "[data-testid=deployments]"),
            "sessions": ("/sessions/", f"#live-sessions tr[data-session='{CALM}']"),
            "session": (f"/sessions/{FATAL}/", "#conn:text('connected')"),
            "session-live": (f"/sessions/{CALM}/", "#conn:text('connected')"),
            "alerts": ("/alerts/", "[data-testid=rules]"),
            "audit": ("/audit/", "[data-testid=audit]"),
            "settings": ("/settings/", "nav.subnav"),
            "settings-members": ("/settings/members/", "[data-testid=members]"),
            "settings-keys": ("/settings/keys/", "[data-testid=api-keys]"),
            "settings-alert-rules": ("/settings/alert-rules/", "[data-testid=rows]"),
            "settings-prices": ("/settings/prices/", "[data-testid=rows]"),
            "settings-retention": ("/settings/retention/", "[data-testid=agent-retention]"),
            "settings-redaction": ("/settings/redaction/", "[data-testid=rows]"),
            "settings-recording": ("/settings/recording/", "[data-testid=recording-state]"),
            "settings-erase": ("/settings/erase/", "#h-erase"),
        }
        for name, (path, ready) in pages.items():
            page.goto(f"{server.url}{path}")
            page.wait_for_selector(ready)
            page.wait_for_timeout(300)  # let the scripts draw (charts, the transcript, times)
            page.screenshot(path=str(shots / f"{name}.png"))
            width = scroll_width(page)
            assert width <= WIDTH + 1, f"{path} is {width} px wide: {wider_than_the_screen(page)}"
            # Every data table a person reads on the page is stacked, none cut at the edge.
            for index in range(page.locator("table.data.stack").count()):
                table = page.locator("table.data.stack").nth(index)
                if not table.is_visible():
                    continue
                layout = stacked(page, f"table.data.stack >> nth={index}")
                assert layout["headHidden"] and layout["right"] <= WIDTH + 1, (path, index, layout)
                assert layout["blocks"] == layout["cells"] == layout["labelled"], (path, index, layout)
        assert errors == []

        # The Overview: what fires first, above the tiles, on the first screen.
        page.goto(f"{server.url}/")
        alerts = page.locator("[data-testid=firing-alerts]")
        alerts.wait_for()
        for _ in range(50):  # the panel may be mid-refresh (overview.js puts a fresh copy in place)
            tiles, box = page.locator(".tiles").bounding_box(), alerts.bounding_box()
            if tiles and box:
                break
            page.wait_for_timeout(100)
        assert box["y"] + 40 < HEIGHT and box["y"] < tiles["y"], (box, tiles)
        # Its session by the UUID's first 8 characters, the whole id on hover and in the link.
        link = alerts.locator(f"a[title='{FATAL}']").first
        assert link.inner_text() == FATAL[:8] and link.get_attribute("href") == f"/sessions/{FATAL}/"

        # The alerts page: what fires now is on the first screen.
        page.goto(f"{server.url}/alerts/")
        firing_now = page.locator("[data-testid=firing] tbody tr").first
        assert FATAL[:8] in firing_now.inner_text() and firing_now.bounding_box()["y"] < HEIGHT

        # The sessions list: short ids, the agent by name (its id on hover), each value after its label.
        page.goto(f"{server.url}/sessions/")
        live_row = page.locator(f"#live-sessions tr[data-session='{CALM}']")
        live_row.wait_for()
        assert live_row.locator("td").first.inner_text() == CALM[:8]
        agent_cell = live_row.locator("td[data-label=Agent]")
        assert agent_cell.inner_text() == agent_name and agent_cell.get_attribute("title") == agent_id
        history_row = page.locator(f"#history tr[data-session='{FATAL}']")
        assert history_row.locator("a").get_attribute("title") == FATAL
        assert history_row.locator("td[data-label=Agent]").get_attribute("title") == agent_id

        # A session: the client and bot as words; what they sent whole on hover.
        page.goto(f"{server.url}/sessions/{FATAL}/")
        page.wait_for_selector("#conn:text('connected')")
        page.wait_for_function("document.getElementById('client').textContent !== '—'")
        assert page.locator("#client").inner_text() == "client-js 1.4.0 on browser · RTVI 2.1.0"
        assert page.locator("#bot").inner_text() == "pipecat-ai 1.14.0 · RTVI 2.2.0"
        assert json.loads(page.locator("#client").get_attribute("title")) == CLIENT
        assert page.locator("#fact-agent a").get_attribute("title") == agent_id
    finally:
        context.close()
