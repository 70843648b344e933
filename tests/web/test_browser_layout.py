"""Every page on a 390 px wide phone, in Debian's Chromium: nothing scrolls the page sideways.

What is wider than the screen (a table of ten columns, a long session id) wraps or scrolls inside
its own box, and the header's links stay on the screen. The data is what an operator has: a seeded
organization with agents, a session live on the real ingest socket, one that ended, with errors
and long ids.
"""

import json
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in, overflow
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WIDTH, HEIGHT = 390, 844
RUN = uuid.uuid4().hex[:6]
LIVE = f"layout-live-{RUN}-{uuid.uuid4()}"
ENDED = f"layout-ended-{RUN}" + "x" * 60  # long and unbroken: it must wrap, or scroll in its own box


def connect_bot(server, token, session_id, agent_id):
    return ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent_id}",
        additional_headers={"Authorization": f"Bearer {token}"},
    )


def stream(bot, messages):
    """Send wrapped messages in order; each must be acknowledged (stored)."""
    for seq, (type_, data, direction) in enumerate(messages, 1):
        bot.send(json.dumps(wrap(seq, rtvi(type_, data), direction, sent_at=time.time())))
        assert "ack" in json.loads(bot.recv(timeout=10))


CALL = [
    ("client-ready", {"version": "2.1.0", "about": {"library": "@pipecat-ai/client-js" * 4}}, "from-client"),
    ("user-started-speaking", None, "to-client"),
    ("user-stopped-speaking", None, "to-client"),
    (
        "user-transcription",
        {"text": "where is my order " * 12, "final": True, "timestamp": "", "user_id": "u"},
        "to-client",
    ),
    ("bot-started-speaking", None, "to-client"),
    ("bot-tts-text", {"text": "It ships today."}, "to-client"),
    ("error", {"error": "TTS hiccup: " + "upstream-timeout-" * 10, "fatal": False}, "to-client"),
]


@pytest.fixture(scope="module")
def operator_data():
    """A real server with the demo organization, a live session (its bot stays connected) and an ended one."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": "1", "SESSION_SWEEP_INTERVAL": "0.5"}).start()
    bots = []
    try:
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        agent_id = server.manage(
            "shell", "-c", "from dashboard.models import Agent; print(Agent.objects.order_by('name').first().pk)"
        ).splitlines()[-1]
        ended = connect_bot(server, token, ENDED, agent_id)
        stream(ended, CALL)
        ended.close()  # ends when the grace (1 s) runs out
        bots.append(connect_bot(server, token, LIVE, agent_id))
        stream(bots[-1], CALL)
        yield server, username, password, agent_id
    finally:
        for bot in bots:
            bot.close()
        server.stop()


def assert_fits(page, path):
    measured = overflow(page, WIDTH)
    assert measured["scrollWidth"] <= WIDTH, f"{path} is {measured['scrollWidth']} px wide: {measured['outside']}"


def test_every_page_fits_a_390_px_screen(browser, operator_data):
    server, username, password, agent_id = operator_data
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    try:
        page = context.new_page()
        page.goto(f"{server.url}/login/")
        assert_fits(page, "/login/")
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")

        # The ended session has left the live list: wait for the sweep before looking.
        deadline = time.monotonic() + 30
        while ENDED in page.request.get(f"{server.url}/api/sessions/?status=live").text():
            assert time.monotonic() < deadline, "the ended session never ended"
            time.sleep(0.2)

        pages = {
            "/": "main",
            "/sessions/": f"#live-sessions tr[data-session='{LIVE}']",  # the socket has filled the live table
            f"/sessions/{LIVE}/": "#conn:text('connected')",
            f"/sessions/{ENDED}/": "#conn:text('connected')",
            "/agents/": "table.data",
            f"/agents/{agent_id}/": "dl.fields",
            "/alerts/": "[data-testid=rules]",
        }
        for path, ready in pages.items():
            page.goto(f"{server.url}{path}")
            page.wait_for_selector(ready)
            page.wait_for_timeout(300)  # let scripts draw (charts, the transcript, times)
            assert_fits(page, path)
            # The header wraps instead of running off the screen: every link can be tapped.
            for link in page.locator("header.topbar a, header.topbar button").all():
                box = link.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (path, link.inner_text())
        # The wide tables stack their rows (each value after its column's name), and nothing of them is dropped.
        page.goto(f"{server.url}/sessions/")
        page.wait_for_selector(f"#live-sessions tr[data-session='{LIVE}']")
        scroller = page.locator(".table-scroll:has(#history)")
        assert scroller.evaluate("(e) => e.scrollWidth <= e.clientWidth")
        assert page.locator("#history thead th").count() == 10
        row = page.locator(f"#history tr[data-session='{ENDED}']")
        assert row.locator("td[data-label]").count() == 10 and row.locator("td").last.is_visible()
        assert row.locator("td").last.bounding_box()["x"] + row.locator("td").last.bounding_box()["width"] <= WIDTH
    finally:
        context.close()
