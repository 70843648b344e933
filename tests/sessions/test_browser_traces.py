"""The session page's traces in Debian's Chromium: spans a bot exported, under the turn they belong to."""

import json
import time

import httpx
import pytest
import websockets.sync.client as ws

from tests.conftest import log_in
from tests.otlp_samples import conversation
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_the_page_shows_each_turns_spans(browser, demo_server):
    server, username, password, _ = demo_server
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    headers = {"Authorization": f"Bearer {token}"}
    with ws.connect(f"{server.ws_url}/ws/ingest/traced-call/", additional_headers=headers) as bot:
        bot.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}), sent_at=time.time())))
        assert json.loads(bot.recv(timeout=10)) == {"ack": 1}
    body = conversation("traced-call").SerializeToString()
    response = httpx.post(
        f"{server.url}/v1/traces", content=body, headers={**headers, "Content-Type": "application/x-protobuf"}
    )
    assert response.status_code == 200

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        log_in(page, server, username, password)
        page.goto(f"{server.url}/sessions/traced-call/")
        table = page.locator("[data-testid=traces]")
        table.wait_for(state="visible", timeout=10000)
        rows = table.locator("tbody tr").all_inner_texts()
        assert rows[0].startswith("Turn 1 · user → bot 850 ms")
        assert "gpt-4o · openai" in rows[2] and "410 ms" in rows[2] and "812 / 33" in rows[2]
        assert any(row.startswith("Turn 2") and "interrupted" in row for row in rows)
    finally:
        context.close()
