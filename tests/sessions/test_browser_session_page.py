"""The session page, built for diagnosis, in Debian's Chromium against the real server.

A realistic Pipecat call (tests/rtvi_samples.py's messages, paced like a real one: the LLM's first
token, the TTS's first audio and the bot's first word come when a bot's would) streams in over the
public ingest socket, with one slow turn, a function call, an error and a message too long for the log.
The page must show the header (agent, why it ended, duration, counts), each reply's wait as a waterfall
with the slow turn marked, the timeline over the whole call, every message through the log's pages and
filters, and a 390 px wide screen without sideways scrolling. A live call then loses its server: the
page says so and its clock stops, until it is back.
"""

import json
import re
import threading
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in
from tests.rtvi_samples import SCRIPT, m, pipecat_conversation_pairs, pipecat_turn

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
WAIT_MS = 60_000
TURNS = 13  # nearest-rank p95 of 13 turns is the second slowest: the slowest is over it
SLOW_TURN = 7
AGENT = "support-concierge"  # one of seed_demo's agents
BIG = "order-history " * 500  # a server message too long for the log's preview (4 KiB)

# Pauses before messages, as a real bot's come: (seconds, seconds in the slow turn).
PAUSES = {
    "bot-llm-started": (0.05, 0.05),  # the user stopped; the LLM starts
    "first-token": (0.25, 1.6),  # the LLM's first token
    "bot-tts-started": (0.04, 0.04),
    "bot-started-speaking": (0.1, 0.1),  # the TTS's first audio
    "bot-stopped-speaking": (0.5, 0.5),  # the bot speaks a while
    "user-started-speaking": (0.15, 0.15),
    "user-stopped-speaking": (0.35, 0.35),  # the user speaks a while
}


@pytest.fixture(scope="module")
def server():
    """The real dashboard with a short grace: a bot that leaves ends its session within about a second."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": "1", "SESSION_SWEEP_INTERVAL": "0.3"}).start()
    try:
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        agent_id, server.deployment_id = server.manage(
            "shell",
            "-c",
            f"from dashboard.models import Agent; a = Agent.objects.get(name={AGENT!r}); "
            "print(a.pk, a.active_deployment_id)",
        ).split()[-2:]  # the last words: Django's shell says what it imported first
        server.token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        yield server, username, password, agent_id
    finally:
        server.stop()


class Bot:
    """A bot on the public ingest socket: wrapped messages stamped with the time they are sent, acks read aside."""

    def __init__(self, server, session_id: str, agent_id: str):
        self.socket = ws.connect(
            f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent_id}",
            additional_headers={"Authorization": f"Bearer {server.token}"},
        )
        self.seq = 0
        self.acked: set[int] = set()
        self.errors: list[dict] = []
        self.changed = threading.Condition()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        try:
            for raw in self.socket:
                reply = json.loads(raw)
                with self.changed:
                    if "ack" in reply:
                        self.acked.add(reply["ack"])
                    if "error" in reply:
                        self.errors.append(reply)
                    self.changed.notify_all()
        except Exception:
            pass  # the socket closed: the test closed it, or the server went

    def send(self, direction: str, message: dict) -> None:
        self.seq += 1
        self.socket.send(
            json.dumps({"seq": self.seq, "direction": direction, "sent_at": time.time(), "message": message})
        )

    def play(self, pairs, slow: bool = False) -> None:
        """Messages in order, each pause where a real bot's message would wait for its service."""
        first_token = True
        for direction, message in pairs:
            kind = message["type"]
            if kind == "bot-llm-text" and first_token:
                kind, first_token = "first-token", False
            elif kind == "user-started-speaking":
                first_token = True
            if kind in PAUSES:
                time.sleep(PAUSES[kind][slow])
            self.send(direction, message)

    def stored(self, timeout: float = 30) -> None:
        """Every message sent so far is stored (acknowledged)."""
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.acked) >= self.seq, timeout), "not all stored"
        assert not self.errors, self.errors

    def close(self):
        self.socket.close()


def play_call(bot: Bot, turns: int, slow_turn: int | None = None) -> None:
    """A call: readiness, then voice turns (a function call in the second), an error and a long server message."""
    opening = pipecat_conversation_pairs(0)
    bot.play(opening)
    for i in range(turns):
        user, sentences = SCRIPT[i % len(SCRIPT)]
        bot.play(pipecat_turn(user, sentences, function_call=i == 1, call_id=f"call_{i}"), slow=i == slow_turn)
        if i == 3:
            bot.send("to-client", m("error", {"error": "TTS rate limited; retried", "fatal": False}))
        if i == 5:
            bot.send("to-client", m("server-message", {"history": BIG}))


def open_session(context, server, session_id: str):
    page = context.new_page()
    page.goto(f"{server.url}/sessions/{session_id}/")
    page.wait_for_function("() => window.rtviSession.model !== null", timeout=WAIT_MS)
    return page


def drawn(page):
    """Two animation frames on: the page has drawn what its model has."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def log_seqs(page) -> list[int]:
    return page.evaluate("() => [...document.querySelectorAll('#log tr')].map((tr) => Number(tr.dataset.seq))")


def fits_390(browser, server, username, password, session_id: str, shot: str):
    """At 390 x 844 nothing is wider than the screen; the page as a screenshot."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        log_in(context.new_page(), server, username, password)
        context.pages[0].wait_for_url(f"{server.url}/")
        page = open_session(context, server, session_id)
        page.wait_for_function(
            "() => document.querySelector('#transcript li') && window.rtviSession.charts['chart-latency']"
        )
        drawn(page)
        widths = page.evaluate(
            "() => ({page: document.documentElement.scrollWidth, wide: [...document.querySelectorAll('main *')]"
            ".filter((e) => e.getBoundingClientRect().right > 391).slice(0, 5).map((e) => e.outerHTML.slice(0, 120))})"
        )
        assert widths["page"] <= 390, widths
        page.screenshot(path=str(SCREENSHOTS / shot), full_page=True)
    finally:
        context.close()


@pytest.fixture(scope="module")
def ended_call(server):
    """A call of TURNS turns, over: the client asked the bot to leave, and it left."""
    server, _, _, agent_id = server
    session_id = f"diagnose-{uuid.uuid4().hex[:6]}"
    bot = Bot(server, session_id, agent_id)
    play_call(bot, TURNS, SLOW_TURN)
    bot.send("from-client", m("disconnect-bot", {}, id="d1"))
    bot.stored()
    bot.close()
    return session_id, bot.seq


def test_an_ended_call_reads_for_diagnosis(browser, server, ended_call):
    server, username, password, agent_id = server
    session_id, messages = ended_call
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        log_in(context.new_page(), server, username, password)
        context.pages[0].wait_for_url(f"{server.url}/")
        page = open_session(context, server, session_id)
        page.wait_for_function(
            "() => document.getElementById('status').textContent.startsWith('ended')", timeout=WAIT_MS
        )
        api = page.request.get(f"{server.url}/api/sessions/{session_id}/").json()
        assert api["status"] == "ended" and api["end_kind"] == "client_hung_up", api
        assert api["end_reason"] == "client hung up"
        drawn(page)

        # The header: agent (linked), status with why it ended, times, duration and counts.
        link = page.locator("#fact-agent a")
        assert link.inner_text() == AGENT and link.get_attribute("href") == f"/agents/{agent_id}/"
        assert page.locator("#status").inner_text() == "ended (client hung up)"
        assert page.locator("#fact-status").inner_text() == "ended (client hung up)"
        assert re.fullmatch(r"\d+(\.\d)? s", page.locator("#fact-duration").inner_text())
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", page.locator("#fact-ended").inner_text())
        facts = {key: page.locator(f"#fact-{key}").inner_text() for key in ("turns", "interruptions", "errors")}
        assert facts == {"turns": str(TURNS), "interruptions": "0", "errors": "1"}
        assert page.locator("#fact-protocol").inner_text() == "2.2.0"
        # The agent's active deployment when the bot connected, as the agents API names it.
        # The deployment's UUID by its first 8 characters, the whole of it on hover.
        assert page.locator("#fact-deployment").inner_text() == server.deployment_id[:8]
        assert page.locator("#fact-deployment").get_attribute("title") == server.deployment_id
        cost = page.locator("#fact-cost").inner_text()
        assert re.fullmatch(r"\$\d+\.\d{4}|—", cost), cost
        if api.get("cost_usd", "absent") is None:
            assert page.locator("#fact-cost + .cost-hint").inner_text() == "(set prices in the admin)"
        # Usage by model, from state.usage.
        models = page.locator("#usage th").all_inner_texts()
        assert {"gpt-4o-mini", "gpt-4o-mini-tts", "nova-3"} <= set(models), models

        # Each reply with its turn's wait and the wait's parts as the server gave them; the slow one marked.
        replies = page.locator("#transcript li.bot[data-turn]")
        assert replies.count() == TURNS
        for i in range(TURNS):
            parts = replies.nth(i).locator(".wf-row").evaluate_all("(rows) => rows.map((r) => r.dataset.part)")
            assert parts == [w["part"] for w in api["turns"][i]["waterfall"]], (i, parts)
            assert parts == ["llm_first_token", "tts_first_audio", "bot_speaking"]
        slow = page.locator("#transcript li.bot.slow")
        assert slow.count() == 1 and slow.get_attribute("data-turn") == str(SLOW_TURN)
        assert api["turns"][SLOW_TURN]["latency_ms"] > api["latency"]["p95"]
        assert "slow" in slow.locator(".slow-mark").inner_text()
        # The slowest wait is the widest bar: the bars share the session's scale.
        widths = replies.evaluate_all(
            "(lis) => lis.map((li) => li.querySelector('[data-part=bot_speaking] .wf-bar').getBoundingClientRect().width)"
        )
        assert max(widths) == widths[SLOW_TURN]
        # Each line has its time.
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in page.locator("#transcript li time").all_inner_texts())

        # The timeline shows the whole call: from the first moment to the end marker.
        shown = page.evaluate("() => window.rtviSession.shown")
        state = page.evaluate("() => window.rtviSession.model.state")
        ended_at = next(marker["at"] for marker in state["markers"] if marker["kind"] == "ended")
        assert shown["from"] <= state["transcript"][0]["at"] and shown["to"] >= ended_at
        page.screenshot(path=str(SCREENSHOTS / "session-detail-ended.png"), full_page=True)

        # The log holds the newest messages; its pages reach back to the first one, every message once.
        assert log_seqs(page)[0] > 1 and messages > 500
        while page.locator("#log-older").is_visible():
            page.click("#log-older")
            page.wait_for_function("() => !document.getElementById('log-status').textContent")
        assert page.locator("#log-start").is_visible()
        assert log_seqs(page) == list(range(1, messages + 1))
        times = page.locator("#log tr .log-time").all_inner_texts()
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", t) for t in times)
        first = page.locator("#log tr").first
        assert first.get_attribute("data-type") == "metrics" and first.locator(".log-dir").inner_text() == "bot→client"

        # A row opens to the whole message, read from the server when the log has only its preview.
        big = page.locator("#log tr[data-type='server-message']")
        assert "characters" in big.locator("summary").inner_text()
        big.locator("summary").click()
        page.wait_for_function(
            "(n) => document.querySelector(\"#log tr[data-type='server-message'] pre\").textContent.length > n",
            arg=len(BIG),
        )
        assert json.loads(big.locator("pre").inner_text())["data"]["history"] == BIG

        # Filters: by type, then by direction; each reads the server's pages for what the tail lacks.
        page.select_option("#log-filter", "user-transcription")
        expected = state["counts"]["by_type"]["user-transcription"]
        page.wait_for_function(f"() => document.querySelectorAll('#log tr').length === {expected}", timeout=WAIT_MS)
        assert set(page.locator("#log tr").evaluate_all("(rows) => rows.map((r) => r.dataset.type)")) == {
            "user-transcription"
        }
        previews = page.locator("#log tr summary").all_inner_texts()
        assert json.dumps(SCRIPT[0][0]) in previews  # the text itself, quoted, on one line
        page.select_option("#log-filter", "")
        page.select_option("#log-direction", "from-client")
        page.wait_for_function("() => document.getElementById('log-start').hidden === false", timeout=WAIT_MS)
        rows = page.locator("#log tr").evaluate_all("(rows) => rows.map((r) => [r.dataset.direction, r.dataset.type])")
        assert rows == [["from-client", "client-ready"], ["from-client", "disconnect-bot"]]
        page.select_option("#log-direction", "")

        # The cursor: a transcript line marks its moment on the timeline and its message in the log.
        line = page.locator("#transcript li.user").nth(2)
        line.click()
        page.wait_for_function("() => document.querySelector('#log tr.cursor')")
        cursor = page.evaluate("() => window.rtviSession.cursor")
        assert cursor["from"] == "transcript" and "cursor" in line.get_attribute("class")
        marked = int(page.locator("#log tr.cursor").get_attribute("data-seq"))
        assert marked == state["transcript"][4]["seq"]  # the third user line, after two replies
        shown = page.evaluate("() => window.rtviSession.shown")
        assert shown["from"] <= cursor["at"] <= shown["to"]
        # ...and a message's time puts the cursor there.
        page.locator("#log tr").nth(3).locator(".log-time button").click()
        page.wait_for_function("() => window.rtviSession.cursor.from === 'log'")
        assert page.locator("#transcript li.cursor").count() == 1

        # Zoom and pan move the timeline, and the time charts with it.
        before = page.evaluate("() => window.rtviSession.shown")
        page.click("#tl-in")
        page.wait_for_function(
            f"() => window.rtviSession.shown.to - window.rtviSession.shown.from < {(before['to'] - before['from']) * 0.6}"
        )
        page.click("#tl-earlier")
        drawn(page)
        zoomed = page.evaluate("() => window.rtviSession.shown")
        scale = page.evaluate("() => window.rtviSession.charts['chart-ttfb'].plot.scales.x")
        assert (scale["min"], scale["max"]) == pytest.approx((zoomed["from"], zoomed["to"]))
        page.click("#tl-whole")
        page.wait_for_function(f"() => window.rtviSession.shown.from <= {before['from'] + 0.001}")
    finally:
        context.close()
    fits_390(browser, server, username, password, session_id, "session-detail-ended-390.png")


def test_a_page_that_loses_its_server_says_so_and_stops_its_clock(browser, server):
    server, username, password, agent_id = server
    session_id = f"diagnose-live-{uuid.uuid4().hex[:6]}"
    bot = Bot(server, session_id, agent_id)
    play_call(bot, 3)
    bot.play([("to-client", m("user-started-speaking"))])
    bot.stored()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        log_in(context.new_page(), server, username, password)
        context.pages[0].wait_for_url(f"{server.url}/")
        page = open_session(context, server, session_id)
        page.wait_for_selector("#status.live")
        page.wait_for_function("() => document.querySelectorAll('#transcript li.bot').length === 3")
        assert page.locator("#fact-ended").inner_text() == "not yet"
        assert page.locator("#fact-duration").inner_text().endswith("so far")
        assert page.locator("#offline").is_hidden()
        # Live, the timeline follows the clock.
        to = page.evaluate("() => window.rtviSession.shown.to")
        page.wait_for_function(f"() => window.rtviSession.shown.to > {to + 0.5}")
        page.screenshot(path=str(SCREENSHOTS / "session-detail-live.png"), full_page=True)
        fits_390(browser, server, username, password, session_id, "session-detail-live-390.png")

        # The server goes (and the bot's socket with it): the page says so, and nothing moves. As far as the
        # page knows, the user is still speaking: that interval stays open, at the moment the server went.
        server.stop()
        page.wait_for_selector("#offline:visible")
        assert "Lost the connection to the server" in page.locator("#offline").inner_text()
        assert not page.locator("#status").inner_text().startswith("ended")  # the socket is not the session
        frozen = page.evaluate(
            "() => [window.rtviSession.shown.to, document.getElementById('fact-duration').textContent]"
        )
        assert page.evaluate("() => window.rtviSession.model.state.intervals.user_speaking.at(-1)[1]") is None
        time.sleep(2.5)
        drawn(page)
        assert (
            page.evaluate("() => [window.rtviSession.shown.to, document.getElementById('fact-duration').textContent]")
            == frozen
        )
        page.screenshot(path=str(SCREENSHOTS / "session-detail-disconnected.png"))

        # Back: the page has the server's state again, which says the call ended when its bot went with the server.
        server.start(migrate=False)
        page.wait_for_selector("#offline", state="hidden", timeout=WAIT_MS)
        page.wait_for_function(
            "() => document.getElementById('status').textContent.startsWith('ended (')", timeout=WAIT_MS
        )
        assert page.locator("#status").inner_text() in ("ended (server restarted)", "ended (bot vanished)")
    finally:
        bot.close()
        context.close()


def test_a_failed_function_call_reads_as_a_failure_in_the_error_colour(browser, server):
    server, username, password, agent_id = server
    session_id = f"diagnose-call-{uuid.uuid4().hex[:6]}"
    bot = Bot(server, session_id, agent_id)
    called = {"tool_call_id": "call_f", "function_name": "get_order"}
    bot.send("to-client", m("llm-function-call-in-progress", {**called, "arguments": {"order": 42}}))
    time.sleep(0.3)
    bot.send(
        "to-client", m("llm-function-call-stopped", {**called, "cancelled": False, "result": {"error": "timed out"}})
    )
    bot.stored()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        log_in(context.new_page(), server, username, password)
        context.pages[0].wait_for_url(f"{server.url}/")
        page = open_session(context, server, session_id)
        note = page.locator("#transcript li.note.err")
        note.wait_for(timeout=WAIT_MS)
        text = note.locator(".text").inner_text()
        assert re.fullmatch(r'function get_order: failed after \d+ ms: timed out · args \{"order":42\}', text), text
        colour, error_colour = note.evaluate(
            "(li) => { const probe = document.createElement('span'); probe.style.color = 'var(--err)';"
            " li.append(probe); const want = getComputedStyle(probe).color; probe.remove();"
            " return [getComputedStyle(li).color, want]; }"
        )
        assert colour == error_colour
    finally:
        bot.close()
        context.close()
