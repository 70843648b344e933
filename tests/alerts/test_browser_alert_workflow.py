"""The alerts page in Debian's Chromium against the real server: acknowledge, silence and a note, at desktop and 390 px."""

import json
import time
import uuid

import httpx
import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in, wait_until_firing
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def server():
    """The real dashboard, seeded like `make run`, evaluating alerts every half second."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"ALERT_EVALUATE_INTERVAL": "0.5"}).start()
    try:
        yield server, *server.seed_demo()
    finally:
        server.stop()


def fatal_call(server, token):
    session_id = f"dead-{uuid.uuid4().hex[:6]}"
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as bot:
        for seq, message in enumerate(
            [rtvi("bot-ready", {"version": "2.1.0"}), rtvi("error", {"error": "LLM returned 401", "fatal": True})], 1
        ):
            bot.send(json.dumps(wrap(seq, message, sent_at=time.time())))
            assert json.loads(bot.recv(timeout=10)) == {"ack": seq}
    return session_id


def act_on(page, server, rule_name: str, width: int, username: str):
    """Acknowledge, silence for an hour, and write a note on the firing alert of `rule_name`."""
    row = page.locator("[data-testid=firing] tbody tr", has_text=rule_name)
    row.wait_for(timeout=20000)
    assert row.locator("[data-testid=runbook]").count() == (1 if rule_name == "Fatal errors" else 0)
    row.locator("[data-testid=acknowledge]").click()
    page.wait_for_load_state()
    row = page.locator("[data-testid=firing] tbody tr", has_text=rule_name)
    assert row.locator("[data-testid=acknowledged]").inner_text().startswith(f"acknowledged by {username}")
    assert row.locator("[data-testid=acknowledge]").count() == 0

    row.locator("details summary").click()
    row.locator("select[name=minutes]").select_option("60")
    row.locator("[data-testid=silence]").click()
    page.wait_for_load_state()
    row = page.locator("[data-testid=firing] tbody tr", has_text=rule_name)
    assert "silenced until" in row.locator("[data-testid=silenced]").inner_text()

    row.locator("details summary").click()
    row.locator("textarea[name=text]").fill("<b>Rotated</b> the LLM key")
    row.locator("[data-testid=add-note]").click()
    page.wait_for_load_state()
    row = page.locator("[data-testid=firing] tbody tr", has_text=rule_name)
    assert "<b>Rotated</b> the LLM key" in row.locator("[data-testid=notes]").inner_text()  # as text
    assert row.locator("[data-testid=notes] b").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_acknowledge_silence_and_note_on_the_alerts_page_at_desktop_and_390(browser, server):
    server, username, password, key = server
    rule = {"name": "Any fatal error", "condition": "fatal_error"}
    assert httpx.post(
        f"{server.url}/api/alerts/rules/", json=rule, headers={"Authorization": f"Bearer {key}"}
    ).is_success
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    dead = fatal_call(server, token)  # fires the demo's "Fatal errors" and "Any fatal error"
    # The alerts page is rendered once and never refreshes: open it only once the evaluator (every 0.5 s) has
    # fired both, else a page loaded before that round never shows the rows.
    wait_until_firing(server, key, dead, rules={"Fatal errors", "Any fatal error"}, seconds=20)

    for width, height, rule_name in ((1280, 900, "Fatal errors"), (390, 844, "Any fatal error")):
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))  # noqa: B023
            log_in(page, server, username, password)
            page.wait_for_url(f"{server.url}/")
            page.goto(f"{server.url}/alerts/")
            act_on(page, server, rule_name, width, username)
            page.screenshot(path=str(SCREENSHOTS / f"alerts-workflow-{width}.png"), full_page=True)
            assert errors == []
        finally:
            context.close()

    alerts = httpx.get(f"{server.url}/api/alerts/?status=firing", headers={"Authorization": f"Bearer {key}"}).json()
    acted = {a["rule_name"]: a for a in alerts["alerts"]}
    for name in ("Fatal errors", "Any fatal error"):
        assert acted[name]["acknowledged"]["by"] == username and acted[name]["silenced"]["by"] == username
        assert [n["text"] for n in acted[name]["notes"]] == ["<b>Rotated</b> the LLM key"]
    audit = httpx.get(f"{server.url}/api/audit/", headers={"Authorization": f"Bearer {key}"}).json()
    done = [e["action"] for e in audit["entries"]]
    for action in ("alert_acknowledged", "alert_silenced", "alert_note"):
        assert done.count(action) == 2, (action, done)
