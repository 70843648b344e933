"""The live session list in Debian's Chromium: a session whose bot is away says so, and leaves when the grace runs out."""

import json
import re
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
GRACE = 3  # seconds: SESSION_END_GRACE of this module's server
AWAY = re.compile(r"^bot away since \d\d:\d\d:\d\d — the session ends if it does not return within the grace period$")


@pytest.fixture(scope="module")
def short_grace_server():
    """The real dashboard with a short grace and a quick sweep: yields (server, username, password)."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": str(GRACE), "SESSION_SWEEP_INTERVAL": "0.5"}).start()
    try:
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        yield server, username, password
    finally:
        server.stop()


def connect_bot(server, token, session_id):
    return ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    )


def send(socket, seq, type_, data=None, direction="to-client"):
    socket.send(json.dumps(wrap(seq, rtvi(type_, data), direction, sent_at=time.time())))
    assert "ack" in json.loads(socket.recv(timeout=10))


def status_of(page, session_id):
    return page.locator(f"#live-sessions tr[data-session='{session_id}'] .pill").inner_text()


def test_the_list_shows_a_bot_away_then_drops_the_session_after_the_grace(browser, short_grace_server):
    server, username, password = short_grace_server
    session_id = f"browser-away-{uuid.uuid4().hex[:6]}"
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        log_in(page, server, username, password)
        page.goto(f"{server.url}/sessions/")
        page.wait_for_selector("#conn:text('connected')")
        row = f"#live-sessions tr[data-session='{session_id}']"

        bot = connect_bot(server, token, session_id)
        send(bot, 1, "client-ready", {"version": "2.1.0", "about": {"library": "test"}}, "from-client")
        page.wait_for_selector(f"{row}[data-bot='connected']")
        assert status_of(page, session_id) == "live"
        detail = context.new_page()
        detail.goto(f"{server.url}/sessions/{session_id}/")
        detail.wait_for_selector("#status.live")

        # The bot goes, and comes back within the grace: the same session, live again.
        bot.close()
        page.wait_for_selector(f"{row}[data-bot='away']")
        assert AWAY.match(status_of(page, session_id)), status_of(page, session_id)
        bot = connect_bot(server, token, session_id)
        page.wait_for_selector(f"{row}[data-bot='connected']")
        assert status_of(page, session_id) == "live"
        send(bot, 2, "user-started-speaking")

        # The bot goes for good: away, then, the grace over, ended and gone from the live list.
        bot.close()
        page.wait_for_selector(f"{row}[data-bot='away']")
        away_seen = time.monotonic()
        assert AWAY.match(status_of(page, session_id)), status_of(page, session_id)
        detail.wait_for_selector("#status.away")
        assert AWAY.match(detail.locator("#status").inner_text())
        page.wait_for_selector(row, state="detached", timeout=30000)
        assert time.monotonic() - away_seen >= GRACE - 1  # not before the grace (less what the news took to come)
        page.wait_for_selector("#live-sessions tr.empty")
        detail.wait_for_selector("#status.ended")
        assert detail.locator("#status").inner_text() == "ended (bot disconnected)"

        # A page opened now lists it as ended, in the history only.
        page.reload()
        page.wait_for_selector("#conn:text('connected')")
        assert page.locator(row).count() == 0
        history = page.locator("#history tr", has=page.locator(f"a:text-is('{session_id}')"))
        assert history.locator(".pill").all_inner_texts() == ["ended"]
    finally:
        context.close()
