"""What the session page says is true and reads at a glance (issue 35), in Debian's Chromium against the real server.

- An operator's text is the operator's own line ("operator <name>", framed, full width), and the bot speaking it
  is a line of its own, never glued onto the reply before; nothing of it is raw JSON.
- A call an operator ended says so by name: the header's pill and facts, one line where the actions and the
  "Now" card were (at once, while the page is open, and when it is opened later), the sessions list, the API.
- A viewer's page is the operator's layout (the facts in columns) without the actions; the viewer notice is the
  neutral info style, not the green of good news. Another organization's member gets no page.

Each at 1280 and 390 px. The bot is the bot package's client with a control handler that answers as the demo
bot does (rtvi_dashboard.demo): the text is taken and spoken as the bot's next answer, with no report of the
send-text it was handed; an end closes the connection as a pipeline that ended does.
"""

import asyncio
import json
import threading
import uuid

import pytest
from rtvi_dashboard.client import DashboardClient

from tests.conftest import SCREENSHOTS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
WAIT_MS = 15_000
RUN = uuid.uuid4().hex[:6]
OPERATOR, VIEWER, STRANGER = f"oper-{RUN}", f"view-{RUN}", f"other-{RUN}"
PASSWORD = "truth-test-password-1"
WIDTHS = [1280, 390]
SETUP = """
import json
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
from rtvi_monitor.models import IngestToken
org, other = Organization.objects.create(name={org!r}), Organization.objects.create(name={other!r})
for username, role, where in {rows!r}:
    user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=other if where else org, role=role)
print(json.dumps(IngestToken.issue(org, "bot")[1]))
"""
WORDS = "Please hold, a colleague will call you back within the hour."
BEFORE = "Your order ships today."


def rtvi(type_, data=None):
    return {"label": "rtvi-ai", "type": type_, **({"data": data} if data is not None else {})}


class Bot:
    """The bot package's client on a loop of its own (Playwright's sync API has the test's thread)."""

    def __init__(self, server, session_id: str):
        self.frames: list[dict] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = DashboardClient(server.ws_url, server.token, session_id, batch_interval=0.01)
        self.client.set_control(self.apply)
        self.call(self._start())

    def call(self, coroutine, timeout: float = 15):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start(self):
        self.client.start()
        self.client.send(rtvi("bot-ready", {"version": "2.1.0"}))
        assert await self.client.flush(10)

    async def apply(self, frame: dict):
        """As the demo bot takes them: the text is kept for its next answer, the end ends the pipeline."""
        self.frames.append(frame)
        if frame["action"] == "end":

            async def ended():
                await self.client.close()  # the pipeline ended: 1000, "bot finished"

            return ended
        return None

    def say(self, sentence: str):
        """One answer: its LLM runs, then the bot speaks it (as the demo bot answers an operator's text too)."""

        async def speak():
            for message in (
                rtvi("bot-llm-started"),
                rtvi("bot-llm-text", {"text": sentence}),
                rtvi("bot-llm-stopped"),
                rtvi("bot-started-speaking"),
                rtvi("bot-tts-text", {"text": sentence}),
                rtvi("bot-stopped-speaking"),
            ):
                self.client.send(message)
            assert await self.client.flush(10)

        self.call(speak())

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
        rows = [(OPERATOR, "operator", False), (VIEWER, "viewer", False), (STRANGER, "operator", True)]
        script = SETUP.format(org=f"Truth-{RUN}", other=f"Elsewhere-{RUN}", rows=rows, password=PASSWORD)
        running.token = json.loads(running.manage("shell", "-c", script).splitlines()[-1])
        yield running
    finally:
        running.stop()


@pytest.fixture
def at_width(browser, request):
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    yield context.new_page(), request.param
    context.close()


def transcript_lines(page) -> list[tuple[str, str, str]]:
    """(role, who, text) of each line of the transcript with a speaker."""
    lines = page.evaluate(
        """[...document.querySelectorAll('#transcript li[data-role]')].map((li) => [
            li.dataset.role, li.querySelector('.who').textContent, li.querySelector('.text').textContent])"""
    )
    return [tuple(line) for line in lines]


def lines_of(page, selector: str) -> float:
    """How many lines of text an element takes (its height over its line height)."""
    return page.evaluate(
        """(sel) => { const e = document.querySelector(sel); const s = getComputedStyle(e);
        const pad = parseFloat(s.paddingTop) + parseFloat(s.paddingBottom);
        return (e.getBoundingClientRect().height - pad) / parseFloat(s.lineHeight || 20); }""",
        selector,
    )


def assert_ended_by_operator(page, width: int) -> None:
    """An ended call: who ended it, where the actions and "Now" were; nothing that could still be clicked."""
    said = f"(by operator {OPERATOR})"
    assert page.text_content("#status") == f"ended {said}"
    assert page.text_content("#fact-status") == f"ended {said}"
    assert page.is_visible("#call-ended")
    assert page.text_content("#call-ended").startswith("Call ended at ")
    assert page.text_content("#call-ended").endswith(f" {said}.")
    assert page.locator("#control, #control-text, #control-end, #control-send-button").count() == 0
    assert page.locator("#now, #speaker").count() == 0
    if width >= 1280:
        assert lines_of(page, "#call-ended") < 1.5  # one line
    # The transcript takes the row the "Now" card shared.
    grid = page.locator("#now-grid").bounding_box()
    card = page.locator(".transcript-card").bounding_box()
    assert card["width"] > grid["width"] - 2


@pytest.mark.parametrize("at_width", WIDTHS, indirect=True)
def test_an_operators_text_and_end_are_theirs_on_the_page_the_list_and_the_api(server, at_width):
    page, width = at_width
    session_id = f"truth-{width}-{RUN}"
    bot = Bot(server, session_id)
    try:
        bot.say(BEFORE)
        log_in(page, server, OPERATOR, PASSWORD)
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_selector("#control[data-available=true]", timeout=WAIT_MS)
        assert page.is_visible("#now")

        page.fill("#control-text", WORDS)
        page.click("#control-send-button")
        page.wait_for_function("document.getElementById('control-result').textContent.startsWith('Text:')")
        assert page.text_content("#control-result") == "Text: the bot took it."
        assert bot.frames[-1]["content"] == WORDS
        bot.say(WORDS)  # the demo bot's way: the words, spoken as its next answer
        page.wait_for_function(
            "document.querySelectorAll('#transcript li.bot').length === 2 && document.querySelector('#transcript li.operator')",
            timeout=WAIT_MS,
        )
        assert transcript_lines(page) == [
            ("bot", "bot", BEFORE),  # the reply before, whole and alone
            ("operator", f"operator {OPERATOR}", f"sent text (answer now, spoken): {WORDS}"),
            ("bot", "bot", WORDS),  # the bot speaking the operator's words: its own line
        ]
        transcript = page.text_content("#transcript")
        assert "server message" not in transcript and '{"' not in transcript
        # Its own look: framed, the whole width, not a bubble of the caller's or the bot's.
        look = page.evaluate(
            """(() => { const op = getComputedStyle(document.querySelector('#transcript li.operator'));
            const bot = getComputedStyle(document.querySelector('#transcript li.bot'));
            const list = document.getElementById('transcript').clientWidth;
            const width = document.querySelector('#transcript li.operator').getBoundingClientRect().width;
            return {border: op.borderTopStyle, differs: op.backgroundColor !== bot.backgroundColor,
                    full: width > list * 0.95}; })()"""
        )
        assert look == {"border": "dashed", "differs": True, "full": True}
        page.screenshot(path=str(SCREENSHOTS / f"truth-operator-text-{width}.png"), full_page=True)

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#control-end")
        # It ends while the page is open: the actions and "Now" go, one line says when and by whom.
        page.wait_for_selector("#call-ended:not([hidden])", timeout=WAIT_MS)
        page.wait_for_function("document.getElementById('status').textContent.includes('by operator')")
        assert_ended_by_operator(page, width)
        page.wait_for_function("document.querySelectorAll('#transcript li.operator').length === 2", timeout=WAIT_MS)
        assert transcript_lines(page)[-1] == ("operator", f"operator {OPERATOR}", "ended the call")
        page.screenshot(path=str(SCREENSHOTS / f"truth-ended-live-{width}.png"), full_page=True)

        # Opened later: the server's first word says the same.
        page.reload()
        page.wait_for_function("document.getElementById('conn').textContent === 'connected'", timeout=WAIT_MS)
        assert_ended_by_operator(page, width)
        page.screenshot(path=str(SCREENSHOTS / f"truth-ended-{width}.png"), full_page=False)

        # The sessions list's row, and the API.
        page.goto(f"{server.url}/sessions/?status=ended")
        row = page.locator("tr", has_text=session_id)
        assert f"ended (by operator {OPERATOR})" in row.inner_text()
        answer = page.request.get(f"{server.url}/api/sessions/{session_id}/").json()
        assert (answer["end_kind"], answer["end_reason"], answer["failed"]) == (
            "operator_ended",
            f"by operator {OPERATOR}",
            False,
        )
        assert answer["ended_by"] == OPERATOR
    finally:
        bot.stop()


def banner_colors(page, selector: str) -> dict:
    """The background and border of `selector`, beside those of the green success banner."""
    return page.evaluate(
        """(sel) => { const probe = document.createElement('p'); probe.className = 'banner success';
        document.body.append(probe); const ok = getComputedStyle(probe); const it = getComputedStyle(document.querySelector(sel));
        const out = {bg: it.backgroundColor, border: it.borderTopColor, okBg: ok.backgroundColor, okBorder: ok.borderTopColor};
        probe.remove(); return out; }""",
        selector,
    )


@pytest.mark.parametrize("at_width", WIDTHS, indirect=True)
def test_a_viewers_page_is_the_operators_layout_without_actions_and_a_stranger_gets_none(server, at_width):
    page, width = at_width
    live, ended = f"viewed-{width}-{RUN}", f"viewed-ended-{width}-{RUN}"
    bot, gone = Bot(server, live), Bot(server, ended)
    try:
        gone.say(BEFORE)
        gone.stop()  # a 1000 close: ended at once
        log_in(page, server, VIEWER, PASSWORD)
        for _ in range(100):  # its end is stored within moments of the bot's 1000 close
            if page.request.get(f"{server.url}/api/sessions/{ended}/").json()["status"] == "ended":
                break
            page.wait_for_timeout(100)
        for session_id, is_ended in ((live, False), (ended, True)):
            page.goto(f"{server.url}/sessions/{session_id}/")
            # The facts in columns, as on the operator's page: never one label per screen line.
            columns = page.evaluate(
                "getComputedStyle(document.getElementById('facts')).gridTemplateColumns.split(' ').length"
            )
            assert columns >= (5 if width >= 1280 else 2), columns
            first, second = (
                page.locator("#facts > div").nth(0).bounding_box(),
                page.locator("#facts > div").nth(1).bounding_box(),
            )
            assert abs(first["y"] - second["y"]) < 1 and second["x"] > first["x"]  # side by side
            label = page.locator("#facts dt").first
            assert page.evaluate("(e) => getComputedStyle(e).color", label.element_handle()) != page.evaluate(
                "(e) => getComputedStyle(e).color", page.locator("#facts dd").first.element_handle()
            )
            # The viewer notice: information, not good news.
            colors = banner_colors(page, "[data-testid=contents-hidden]")
            assert colors["bg"] != colors["okBg"] and colors["border"] != colors["okBorder"], colors
            assert page.locator("#control, #control-end, #control-send-button, #transcript").count() == 0
            assert page.is_visible("#call-ended") is is_ended
            if is_ended:
                assert page.text_content("#call-ended").startswith("Call ended at ")
                assert page.text_content("#status").startswith("ended (")
            page.screenshot(path=str(SCREENSHOTS / f"truth-viewer-{'ended' if is_ended else 'live'}-{width}.png"))
        # Another organization's member: no such session.
        page.context.clear_cookies()
        log_in(page, server, STRANGER, PASSWORD)
        response = page.goto(f"{server.url}/sessions/{ended}/")
        assert response.status == 404
        assert page.request.get(f"{server.url}/api/sessions/{ended}/").status == 404
    finally:
        bot.stop()
