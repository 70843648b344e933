"""The audit page in Debian's Chromium against the real server: a sign-in and a session read appear, filters work."""

import json
import time
import uuid

import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in
from tests.sockets import rtvi, wrap


def test_the_audit_page_shows_who_signed_in_and_read_a_call_and_filters(browser, demo_server):
    server, username, password, _ = demo_server
    session_id = f"audited-{uuid.uuid4().hex[:6]}"
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as bot:
        said = {"text": "My card is 4111 1111 1111 1111", "final": True, "user_id": "u"}
        bot.send(json.dumps(wrap(1, rtvi("user-transcription", said), sent_at=time.time())))
        assert "ack" in json.loads(bot.recv(timeout=10))

    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_function("() => document.getElementById('fact-redacted').textContent === '1 card'")
        assert "4111" not in page.content()

        page.goto(f"{server.url}/audit/")
        rows = page.locator("[data-testid=audit] tbody tr")
        actions = [rows.nth(i).get_attribute("data-action") for i in range(rows.count())]
        assert "sign_in" in actions and "session_read" in actions and "key_created" in actions
        read = page.locator("[data-testid=audit] tr[data-action=session_read]", has_text=session_id).first
        cells = read.locator("td").all_inner_texts()
        assert cells[1] == username and cells[2] == "127.0.0.1" and cells[4] == session_id

        page.select_option("select[name=action]", "sign_in")
        page.click("[data-testid=audit-filters] button[type=submit]")
        page.wait_for_url("**/audit/?action=sign_in*")
        shown = {
            page.locator("[data-testid=audit] tbody tr").nth(i).get_attribute("data-action")
            for i in range(page.locator("[data-testid=audit] tbody tr").count())
        }
        assert shown == {"sign_in"}
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.screenshot(path=str(SCREENSHOTS / "audit-390.png"), full_page=True)
    finally:
        context.close()
