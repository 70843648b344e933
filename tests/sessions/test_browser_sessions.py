"""The session pages in Debian's Chromium, against the real server, with a bot streaming over the real ingest socket."""

import json
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
XSS = "<img src=x onerror=alert(1)>"
SESSION = f"browser-live-{uuid.uuid4().hex[:6]}"  # new in every run, for shared databases


class Bot:
    """A bot on the public ingest socket, sending wrapped messages in order."""

    def __init__(self, server, session_id):
        self.server, self.session_id, self.seq = server, session_id, 0
        self.connect()

    def connect(self):
        token = self.server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        self.socket = ws.connect(
            f"{self.server.ws_url}/ws/ingest/{self.session_id}/",
            additional_headers={"Authorization": f"Bearer {token}"},
        )

    def send(self, type_, data=None, direction="to-client", pause=0.03):
        self.seq += 1
        self.socket.send(json.dumps(wrap(self.seq, rtvi(type_, data), direction, sent_at=time.time())))
        reply = json.loads(self.socket.recv(timeout=10))
        assert "ack" in reply, reply
        time.sleep(pause)

    def turn(self, user_words, sentences, ttfb=0.25):
        self.send("user-started-speaking")
        for i in range(1, len(user_words)):
            self.send(
                "user-transcription",
                {"text": " ".join(user_words[:i]), "final": False, "timestamp": "", "user_id": "u"},
            )
        self.send("user-stopped-speaking", pause=0.3)
        self.send("user-transcription", {"text": " ".join(user_words), "final": True, "timestamp": "", "user_id": "u"})
        self.send("bot-llm-started")
        self.send("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": ttfb}]})
        self.send(
            "metrics", {"processing": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": ttfb * 2}]}
        )
        self.send("bot-tts-started")
        self.send("bot-started-speaking")
        for k, sentence in enumerate(sentences):
            for token in sentence.split(" "):
                self.send("bot-llm-text", {"text": " " + token})
            for status in ("new", "completed"):
                self.send(
                    "bot-output",
                    {
                        "text": sentence,
                        "spoken": status == "completed",
                        "aggregated_by": "sentence",
                        "segment_id": k,
                        "will_be_spoken": True,
                        "spoken_status": status,
                    },
                )
            self.send("bot-tts-text", {"text": sentence})
        self.send("bot-llm-stopped")
        self.send("bot-tts-stopped")


def test_a_live_session_in_the_browser(page, demo_server):
    server, username, password, _ = demo_server
    log_in(page, server, username, password)
    page.goto(f"{server.url}/sessions/")
    page.wait_for_selector("#conn:text('connected')")

    bot = Bot(server, SESSION)
    bot.send("client-ready", {"version": "2.1.0", "about": {"library": "test"}}, "from-client")
    # The session appears live in the list.
    page.wait_for_selector(f"#live-sessions tr[data-session='{SESSION}']")

    page.click(f"#live-sessions a:text('{SESSION}')")
    page.wait_for_selector("#conn:text('connected')")
    bot.turn(["where", "is", "my", "order"], ["It ships today.", "Anything else?"])
    page.wait_for_function(
        "() => document.querySelectorAll('#transcript li.bot').length === 1 && document.querySelector('#transcript li.bot .text').textContent === 'It ships today. Anything else?'"
    )
    users = page.locator("#transcript li.user .text").all_inner_texts()
    assert users == ["where is my order"]  # the final text, not the partials
    assert page.locator("#speaker").get_attribute("data-speaker") == "bot"
    bot.send("bot-stopped-speaking")
    page.wait_for_function("() => document.getElementById('speaker').dataset.speaker === 'nobody'")
    bot.send("user-started-speaking")
    page.wait_for_function("() => document.getElementById('speaker').dataset.speaker === 'user'")

    # Charts draw points for the metrics sent: read the chart's own data. The ttfb, the processing time and the
    # turn's latency come in three messages, and the charts redraw at most every 500 ms: wait for all three.
    page.wait_for_function(
        """() => {
            const charts = window.rtviSession.charts;
            const processing = charts['chart-processing']?.plot.data[1];
            return charts['chart-ttfb'] && charts['chart-ttfb'].plot.data[1].includes(250)
                && processing && processing.length === 1 && processing[0] === 500
                && charts['chart-latency']?.plot.data[1].length === 1;
        }"""
    )
    assert page.evaluate("() => window.rtviSession.charts['chart-processing'].plot.data[1]") == [500]
    assert page.evaluate("() => window.rtviSession.charts['chart-latency'].plot.data[1].length") == 1

    # The timeline has the speaking intervals of the server's state.
    lanes = page.evaluate("() => window.rtviSession.model.state.intervals")
    assert len(lanes["user_speaking"]) >= 1 and len(lanes["bot_speaking"]) == 1

    # Bot text is text, never HTML.
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    bot.send("user-stopped-speaking")
    bot.send("user-transcription", {"text": XSS, "final": True, "timestamp": "", "user_id": "u"})
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#transcript li.user .text')].some(n => n.textContent === {json.dumps(XSS)})"
    )
    assert page.locator("#transcript img").count() == 0
    # The message log's closed row shows what the message said, as text too.
    summary = page.locator("#log tr[data-type='user-transcription'] summary").last
    summary.wait_for()
    assert json.dumps(XSS) in summary.inner_text()
    assert page.locator("#log img").count() == 0
    page.screenshot(path=str(SCREENSHOTS / "session.png"), full_page=True)

    # After the server restarts, the page resumes from its last seq, without gaps or duplicates.
    before = page.evaluate("() => window.rtviSession.log.at(-1).seq")
    # The page may reconnect before the test looks, so it records that it said "disconnected".
    page.evaluate("""() => new MutationObserver(() => {
        if (document.getElementById('conn').classList.contains('down')) window.sawDisconnected = true;
    }).observe(document.getElementById('conn'), {attributes: true, childList: true})""")
    bot.socket.close()
    server.restart()
    page.wait_for_function("() => window.sawDisconnected === true")
    bot.connect()
    for i in range(5):
        bot.send("bot-llm-text", {"text": f" after{i}"})
    page.wait_for_function(f"() => window.rtviSession.log.at(-1)?.seq === {before + 5}", timeout=30000)
    seqs = page.evaluate("() => window.rtviSession.log.map(e => e.seq)")
    assert seqs == sorted(set(seqs)) and seqs[-6:] == list(range(before, before + 6))
    # ...and its model is the server's state, every message folded in once.
    stored = page.request.get(f"{server.url}/api/sessions/{SESSION}/").json()
    page.wait_for_function("(v) => window.rtviSession.model.version === v", arg=stored["version"], timeout=30000)
    assert page.evaluate("() => window.rtviSession.model.state.transcript") == stored["transcript"]
    bot.socket.close()

    # Readable in the dark theme too.
    page.emulate_media(color_scheme="dark")
    page.reload()
    page.wait_for_function("() => window.rtviSession.model && document.querySelector('#transcript li')")
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(20, 22, 27)"
    page.screenshot(path=str(SCREENSHOTS / "session-dark.png"))
    page.emulate_media(color_scheme="light")

    page.goto(f"{server.url}/sessions/")
    page.screenshot(path=str(SCREENSHOTS / "sessions.png"), full_page=True)
