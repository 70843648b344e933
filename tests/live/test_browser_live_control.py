"""Acting on a live call from its page, in Debian's Chromium against the real server.

The bot is the bot package's client (rtvi_dashboard.DashboardClient) with a control handler, as the
Pipecat integration gives it (tests/live/test_live_control_pipecat.py drives a real pipeline): it answers
each control frame and, for the end, closes its connection as a pipeline that ended does. An
operator sends text and ends the call from the page and reads each answer; a second bot without
control shows the actions disabled with the reason; a viewer's page of the call has no actions.
"""

import asyncio
import json
import re
import threading
import uuid

import pytest
from rtvi_dashboard.client import DashboardClient

from tests.conftest import SCREENSHOTS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WAIT_MS = 15_000
RUN = uuid.uuid4().hex[:6]
ORG = f"Control-{RUN}"
OPERATOR, VIEWER = f"oper-{RUN}", f"view-{RUN}"
PASSWORD = "control-test-password-1"
SETUP = """
import json
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
from rtvi_monitor.models import IngestToken
org = Organization.objects.create(name={org!r})
for username, role in {rows!r}:
    user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=org, role=role)
print(json.dumps(IngestToken.issue(org, "bot")[1]))
"""


class Bot:
    """The bot package's client on a loop of its own (Playwright's sync API has the test's thread)."""

    def __init__(self, server, token: str, session_id: str, control: bool = True):
        self.frames: list[dict] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = DashboardClient(server.ws_url, token, session_id, batch_interval=0.01)
        if control:
            self.client.set_control(self.apply)
        self.call(self._start())

    def call(self, coroutine, timeout: float = 15):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start(self):
        self.client.start()
        self.client.send({"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "2.1.0"}})
        assert await self.client.flush(10)

    async def apply(self, frame: dict):
        """As the Pipecat integration applies them: the text goes to the RTVI processor, the end ends it."""
        self.frames.append(frame)
        if frame["action"] == "end":

            async def ended():
                await self.client.close()  # the pipeline ended: 1000, "bot finished"

            return ended
        message = {"content": frame["content"], "options": frame["options"]}
        sent = {"label": "rtvi-ai", "type": "send-text", "id": f"dashboard-{frame['id']}", "data": message}
        self.client.send(sent, "from-client")
        return None

    def stop(self):
        try:
            self.call(self.client.close(timeout=2))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    running = DaphneServer(env={"SESSION_END_GRACE": "2"}).start()
    try:
        script = SETUP.format(org=ORG, rows=[(OPERATOR, "operator"), (VIEWER, "viewer")], password=PASSWORD)
        running.token = json.loads(running.manage("shell", "-c", script).splitlines()[-1])
        yield running
    finally:
        running.stop()


def test_an_operator_sends_text_and_ends_the_call_from_its_page(server, page):
    session_id = f"call-{RUN}"
    bot = Bot(server, server.token, session_id)
    plain = Bot(server, server.token, f"plain-{RUN}", control=False)
    try:
        log_in(page, server, OPERATOR, PASSWORD)
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_selector("#control[data-available=true]", timeout=WAIT_MS)
        assert page.is_enabled("#control-send-button") and page.is_enabled("#control-end")

        page.fill("#control-text", "Offer the caller a callback <b>tomorrow</b>.")
        page.uncheck("#control-audio")
        page.click("#control-send-button")
        page.wait_for_function(
            "document.getElementById('control-result').textContent.startsWith('Text:')", timeout=WAIT_MS
        )
        assert page.text_content("#control-result") == "Text: the bot took it."
        (sent,) = bot.frames
        assert sent["content"] == "Offer the caller a callback <b>tomorrow</b>."
        assert sent["options"] == {"run_immediately": True, "audio_response": False}
        # The transcript: the words as typed (text, never markup), on the operator's own line with their name.
        # Two records from two writers: the bot's send-text comes in its next batch, the dashboard's note
        # of the answer as soon as the answer does; either may be first, and they make one line: the page is
        # waited on for both (the name is the note's, the words both's).
        page.wait_for_function(
            """(() => {
                const line = document.querySelector('#transcript li.operator');
                return line && line.querySelector('.who').textContent.includes('oper-');
            })()""",
            timeout=WAIT_MS,
        )
        line = page.locator("#transcript li.operator")
        assert line.count() == 1 and page.locator("#transcript li.user").count() == 0  # not the caller's
        assert line.locator(".who").text_content() == f"operator {OPERATOR}"
        assert line.locator(".text").text_content() == (
            "sent text (answer now, not spoken): Offer the caller a callback <b>tomorrow</b>."
        )
        assert "server message" not in page.text_content("#transcript")
        assert page.locator("#transcript b").count() == 0
        page.screenshot(path=str(SCREENSHOTS / "live-control-sent.png"), full_page=True)

        page.check("#control-cancel")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#control-end")
        page.wait_for_function(
            "document.getElementById('control-result').textContent.startsWith('End:')", timeout=WAIT_MS
        )
        assert page.text_content("#control-result") == "End: the bot took it."
        assert bot.frames[-1]["action"] == "end" and bot.frames[-1]["cancel"] is True
        # The bot closed as an ended pipeline does: the session ends, and its actions go for one line that
        # says when and by whom (tests/sessions/test_browser_session_truth.py has the rest).
        page.wait_for_selector("#call-ended:not([hidden])", timeout=WAIT_MS)
        assert page.locator("#control, #control-end, #control-send-button").count() == 0
        page.wait_for_function(
            "document.getElementById('transcript').textContent.includes('cut the call off at once')",
            timeout=WAIT_MS,
        )
        page.wait_for_function("document.getElementById('call-ended').textContent.includes('by operator')")
        assert page.text_content("#call-ended").endswith(f"(by operator {OPERATOR}).")

        # A bot without the package's control: the actions are there, disabled, with the reason.
        page.goto(f"{server.url}/sessions/plain-{RUN}/")
        page.wait_for_function(
            "document.getElementById('control-status').textContent.includes('does not take control frames')",
            timeout=WAIT_MS,
        )
        assert re.match(r"Unavailable: this bot does not take control frames", page.text_content("#control-status"))
        assert not page.is_enabled("#control-end") and not page.is_enabled("#control-send-button")
    finally:
        plain.stop()
        bot.stop()


def test_a_viewer_has_no_actions_on_a_call(server, page):
    session_id = f"viewed-{RUN}"
    bot = Bot(server, server.token, session_id)
    try:
        log_in(page, server, VIEWER, PASSWORD)
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_load_state("networkidle")
        assert page.locator("#control").count() == 0
        assert page.locator("#control-end, #control-send-button").count() == 0
        assert bot.frames == []
    finally:
        bot.stop()
