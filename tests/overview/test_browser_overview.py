"""The Overview in Debian's Chromium: it updates by itself as bots report errors, and shows what fires."""

import json
import time
import uuid

import httpx
import pytest
import websockets.sync.client as ws
from playwright.sync_api import expect

from tests.conftest import log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def server():
    """The real dashboard, seeded like `make run`, evaluating alerts every half second."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"ALERT_EVALUATE_INTERVAL": "0.5", "SESSION_SUMMARY_INTERVAL": "0.2"}).start()
    try:
        yield server, *server.seed_demo()
    finally:
        server.stop()


def stream(server, token, session_id, messages):
    """A bot: each message sent over the public ingest socket, and stored (acked) before the next."""
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as bot:
        for seq, message in enumerate(messages, 1):
            bot.send(json.dumps(wrap(seq, message, sent_at=time.time())))
            assert json.loads(bot.recv(timeout=10)) == {"ack": seq}


def test_the_overview_shows_new_errors_and_a_firing_alert_without_a_reload(browser, server):
    server, username, password, key = server
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    rule = {"name": "Any fatal error", "condition": "fatal_error"}
    response = httpx.post(f"{server.url}/api/alerts/rules/", json=rule, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 201

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        log_in(page, server, username, password)
        page.goto(f"{server.url}/")
        page.wait_for_selector("#conn:text('connected')")
        page.evaluate("window.loadedOnce = true")  # gone if the page reloads
        assert page.locator("[data-testid=firing-count]").inner_text() == "0"

        noisy = f"noisy-{uuid.uuid4().hex[:6]}"
        stream(
            server,
            token,
            noisy,
            [
                rtvi("bot-ready", {"version": "2.1.0"}),
                rtvi("error", {"error": "TTS websocket reconnected after 1532 ms", "fatal": False}),
                rtvi("error", {"error": "TTS websocket reconnected after 87 ms", "fatal": False}),
            ],
        )
        groups = page.locator("[data-testid=error-groups] tbody")
        groups.locator("text=TTS websocket reconnected after <n> ms").wait_for(timeout=15000)
        row = groups.locator("tr", has_text="TTS websocket reconnected")
        # The panel may have been read between the two errors' stores: its next read has both.
        expect(row.locator("td.num")).to_have_text("2", timeout=15000)
        assert row.locator("td.num").inner_text() == "2" and noisy in row.inner_text()

        dead = f"dead-{uuid.uuid4().hex[:6]}"
        stream(
            server,
            token,
            dead,
            [
                rtvi("bot-ready", {"version": "2.1.0"}),
                rtvi("error", {"error": "<b>LLM</b> service returned 401 Unauthorized", "fatal": True}),
            ],
        )
        # Its own rule and the demo's "Fatal errors" rule both fire.
        page.wait_for_function(
            "document.querySelector('[data-testid=firing-count]').textContent.trim() === '2'", timeout=20000
        )
        firing = page.locator("[data-testid=firing-alerts]").inner_text()
        assert "Any fatal error" in firing and "Fatal errors" in firing and dead in firing
        fatal_row = groups.locator("tr.fatal")
        assert "<b>LLM</b> service returned <n> Unauthorized" in fatal_row.inner_text()  # as text, not markup
        assert fatal_row.locator("b").count() == 0
        assert groups.locator("tr").first.get_attribute("class") == "fatal"  # fatal errors stand first
        assert page.evaluate("window.loadedOnce") is True  # all of it without a reload
        assert errors == []
    finally:
        context.close()
