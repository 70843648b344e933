"""Why a turn went wrong, in Debian's Chromium against the real server: the session page's turn table (desktop
and 390 px, kept current while the call is live) and the agent page's turn figures by deployment."""

import json
import threading
import time
import uuid
from itertools import pairwise

import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in, overflow
from tests.rtvi_samples import barge_in_turn, m, pipecat_turn

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

RUN = uuid.uuid4().hex[:6]
AGENT = f"turns-desk-{RUN}"
XSS = "<img src=x onerror=alert(1)>"
PHONE = {"width": 390, "height": 844}
SEED = """
from dashboard.models import Agent, Deployment, Organization
org = Organization.objects.get(name="Demo Voice Co")
agent = Agent.objects.create(organization=org, name={name!r})
agent.active_deployment = Deployment.objects.create(agent=agent, image="img/turns-desk:v3", manifest={{}})
agent.save()
print(agent.pk, agent.active_deployment_id)
"""


@pytest.fixture(scope="module")
def turns_server(demo_server):
    server, username, password, _ = demo_server
    agent_id, deployment_id = server.manage("shell", "-c", SEED.format(name=AGENT)).split()[-2:]
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    return server, username, password, agent_id, deployment_id, token


class Bot:
    """A bot on the public ingest socket whose messages carry the bot's own clock (sent_at), 50 ms apart."""

    def __init__(self, server, token: str, session_id: str, agent: str):
        self.socket = ws.connect(
            f"{server.ws_url}/ws/ingest/{session_id}/?agent={agent}",
            additional_headers={"Authorization": f"Bearer {token}"},
        )
        self.seq, self.clock = 0, time.time() - 120
        self.acked: set[int] = set()
        self.changed = threading.Condition()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        try:
            for raw in self.socket:
                reply = json.loads(raw)
                with self.changed:
                    if "ack" in reply:
                        self.acked.add(reply["ack"])
                    self.changed.notify_all()
        except Exception:
            pass  # closed

    def play(self, pairs, step: float = 0.05) -> None:
        for direction, message in pairs:
            self.seq += 1
            self.clock += step
            frame = {"seq": self.seq, "direction": direction, "sent_at": self.clock, "message": message}
            self.socket.send(json.dumps(frame))
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.acked) >= self.seq, 30), "not all stored"

    def close(self):
        self.socket.close()


GREETING = [
    ("to-client", m("bot-ready", {"version": "2.1.0", "about": {"library": "pipecat-ai"}}, id="r1")),
    ("to-client", m("bot-llm-started")),
    ("to-client", m("bot-llm-text", {"text": "Hello, how can I help?"})),
    ("to-client", m("bot-tts-started")),
    ("to-client", m("bot-started-speaking")),
    ("to-client", m("bot-tts-text", {"text": "Hello, how can I help?"})),
    ("to-client", m("bot-stopped-speaking")),
]
# The bot's own breakdown of a turn's wait (Pipecat's UserBotLatencyObserver, through the bot package): six parts,
# two of them settings, one owner a would-be tag; sent just after the bot starts speaking, as the bot package does.
PARTS = [
    ("endpointing_wait", "setting", "config: VAD stop_secs", 0.2),
    ("stt_final", "service", "DeepgramSTTService#0", 0.09),
    ("llm_inference", "service", "OpenAILLMService#0", 0.336),
    ("turn_analyzer", "setting", "config: smart turn", 0.05),
    ("lookup_order", "bot", XSS, 0.04),
    ("tts_first_audio", "service", "CartesiaTTSService#0", 0.14),
]
BREAKDOWN = m(
    "rtvi-dashboard-latency",
    {
        "v": 1,
        "measured_from": "user_silence",
        "total_secs": sum(secs for *_, secs in PARTS),
        "user_turn_secs": 0.25,
        "released_ago_secs": 0.9,
        "contributions": [
            {"key": key, "label": key.replace("_", " "), "owner": owner, "owner_kind": kind, "duration_secs": secs}
            for key, kind, owner, secs in PARTS
        ],
    },
)


def with_breakdown(pairs):
    """A turn's messages with the bot's breakdown just after its bot-started-speaking."""
    at = next(i for i, (_, message) in enumerate(pairs) if message["type"] == "bot-started-speaking") + 1
    return [*pairs[:at], ("to-client", BREAKDOWN), *pairs[at:]]


CALL = [
    *GREETING,
    *with_breakdown(pipecat_turn(f"Where is my order {XSS}", ["Let me check that for you.", "It ships today."])),
    *barge_in_turn("Can you look it up?", ["It ships today and arrives on Thursday."], 3),
    *pipecat_turn("No, the other one", ["Sorry.", "Which one?"]),
]


def rows(page) -> list[str]:
    return page.locator("[data-testid=turns] tbody tr").all_inner_texts()


def test_the_session_page_takes_each_turn_apart_and_keeps_it_current(browser, turns_server):
    server, username, password, _, _, token = turns_server
    session_id = f"turns-{RUN}"
    bot = Bot(server, token, session_id, AGENT)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    dialogs = []
    try:
        bot.play(CALL)
        page = context.new_page()
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_function("document.querySelectorAll('[data-testid=turns] tbody tr').length === 4")
        status = page.locator("#turns-status").inner_text()
        assert status.startswith("4 turns, 3 with every stage measured; 1 barge-in, 0 backchannels")

        heads = page.locator("[data-testid=turns] thead th").all_inner_texts()
        assert heads[:4] == ["Turn", "Said", "Latency", "Final transcription"] and heads[-1] == "Missing / notes"
        greeting, order, cut, answer = rows(page)
        # The greeting: started by the bot, its user stages missing and why, its LLM stages measured.
        assert "started by the bot" in greeting and "the turn was started by the bot" in greeting
        missing = page.locator("[data-testid=turns] tbody tr").first.locator("td.missing").first
        assert missing.inner_text() == "—"
        assert missing.get_attribute("title") == "no user-stopped-speaking: the turn was started by the bot"
        # A voice turn: every stage, its latency; what the user said is text, never markup.
        assert f"User: Where is my order {XSS}" in order and "Bot: Let me check that for you." in order
        assert page.locator("[data-testid=turns] img").count() == 0 and not dialogs
        # The barge-in: 3 of the reply's 7 words spoken when it was cut.
        assert "barge-in “No, the other one” · cut after 43 % of the reply (3 of 7 words)" in cut
        assert page.locator("[data-testid=turns] tbody tr.barged").count() == 1
        assert "User: No, the other one" in answer
        page.screenshot(path=str(SCREENSHOTS / "turns-desktop.png"), full_page=True)
        check_the_compact_contributions(page)

        # Live: a new turn shows within the page's next read (every 5 s).
        bot.play(pipecat_turn("Thanks!", ["You're welcome!"]))
        # A read during the turn's messages has its row without what the user said: wait for the row as stored.
        page.wait_for_function(
            """() => {
                const rows = document.querySelectorAll('[data-testid=turns] tbody tr');
                return rows.length === 5 && rows[4].innerText.includes('User: Thanks!');
            }""",
            timeout=15000,
        )
        assert "User: Thanks!" in rows(page)[-1]
        # The breakdown's "+2 more", opened above, is still open after the reads since.
        opened = page.locator("[data-testid=turns] tbody tr").nth(1).locator("details.more")
        assert opened.get_attribute("open") is not None

        # At 390 px: the table is stacked rows, each value after its column's name, nothing cut at the edge.
        phone = browser.new_context(viewport=PHONE)
        try:
            small = phone.new_page()
            log_in(small, server, username, password)
            small.wait_for_url(f"{server.url}/")
            small.goto(f"{server.url}/sessions/{session_id}/")
            small.wait_for_function("document.querySelectorAll('[data-testid=turns] tbody tr').length === 5")
            wide = overflow(small, PHONE["width"])
            assert wide["scrollWidth"] <= PHONE["width"], wide
            row = small.locator("[data-testid=turns] tbody tr").nth(2)
            assert row.evaluate("(tr) => getComputedStyle(tr).display") == "block"
            boxes = [cell.bounding_box() for cell in row.locator("td").all()]
            assert all(b["y"] >= a["y"] + a["height"] - 1 for a, b in pairwise(boxes))
            assert all(b["x"] + b["width"] <= PHONE["width"] for b in boxes)
            label = row.locator("td[data-label=Latency]").evaluate("(td) => getComputedStyle(td, '::before').content")
            assert label == '"Latency"'
            # Its value beside the label, not under it: the cell keeps the stacked rows' left padding.
            pad = row.locator("td[data-label=Latency]").evaluate("(td) => parseFloat(getComputedStyle(td).paddingLeft)")
            assert pad > 100, pad
            small.locator("#turns").screenshot(path=str(SCREENSHOTS / "turns-phone.png"))
        finally:
            phone.close()
    finally:
        bot.close()
        context.close()


def check_the_compact_contributions(page):
    """At 1280 px: the breakdown a short line a part, the largest first, its owner and kind on hover; the table
    fits, its Missing / notes column inside the window."""
    cell = page.locator("[data-testid=turns] tbody tr").nth(1).locator("td.contributions")
    parts = cell.locator(".part")
    shown = [line.split(" (")[0] for line in parts.all_text_contents()[:4]]
    assert shown == ["llm_inference 336 ms", "endpointing_wait 200 ms", "tts_first_audio 140 ms", "stt_final 90 ms"]
    boxes = [part.bounding_box() for part in parts.all()[:4]]
    assert all(box["height"] < 30 for box in boxes), boxes  # one line each
    assert parts.first.get_attribute("title") == "llm inference — service: OpenAILLMService#0"
    setting = cell.locator(".part.setting").first
    assert setting.get_attribute("title") == "endpointing wait — setting: VAD stop_secs"
    assert setting.locator(".who").text_content() == " (setting: VAD stop_secs)"  # for screen readers
    page.mouse.move(0, 0)
    setting.hover()
    # The rest behind "+2 more", closed, then open; the would-be tag among them is text.
    more = cell.locator("details.more")
    assert more.locator("summary").inner_text() == "+2 more" and not more.get_attribute("open")
    more.locator("summary").click()
    assert more.locator(".part").last.get_attribute("title") == f"lookup order — the bot's code: {XSS}"
    assert page.locator("[data-testid=turns] img").count() == 0
    # The table fits: nothing to scroll sideways, each row's last cell (Missing / notes) inside the window.
    page.locator("#turns").screenshot(path="/tmp/compact-turns.png")
    scroll = page.locator("#turns .table-scroll").evaluate("(e) => [e.scrollWidth, e.clientWidth]")
    widths = page.locator("[data-testid=turns] thead th").evaluate_all(
        "(ths) => ths.map((th) => `${th.textContent} ${Math.round(th.getBoundingClientRect().width)}`)"
    )
    assert scroll[0] <= scroll[1], (scroll, widths)
    wide = overflow(page, 1280)
    assert wide["scrollWidth"] <= 1280, wide
    for box in (td.bounding_box() for td in page.locator("[data-testid=turns] tbody td:last-child").all()):
        assert box["x"] + box["width"] <= 1280, box


def test_the_agent_page_shows_its_turns_by_deployment_desktop_and_phone(browser, turns_server):
    server, username, password, agent_id, deployment_id, token = turns_server
    bot = Bot(server, token, f"turns-agent-{RUN}", AGENT)
    try:
        bot.play(CALL)
    finally:
        bot.close()
    for viewport in ({"width": 1280, "height": 900}, PHONE):
        context = browser.new_context(viewport=viewport)
        try:
            page = context.new_page()
            log_in(page, server, username, password)
            page.wait_for_url(f"{server.url}/")
            page.goto(f"{server.url}/agents/{agent_id}/?turns=7d")
            section = page.locator("#turn-figures")
            assert section.locator("h2").inner_text().startswith("Turns (7 days)")
            assert section.locator("[aria-current=true]").inner_text() == "7 d"
            # This test's sessions under the agent: at least this one call (the other test's may be there too).
            barge_ins = section.locator("[data-testid=barge-in-rate]").inner_text()
            assert barge_ins.endswith("% of replies (1)") or barge_ins.endswith("% of replies (2)"), barge_ins
            stages = section.locator("[data-testid=turn-stages] tbody tr").all_inner_texts()
            assert len(stages) == 6 and "LLM first token" in stages[2] and "—" not in stages[2]
            deployment = section.locator("[data-testid=turn-deployments] tbody tr")
            assert deployment.count() == 1 and deployment.first.get_attribute("class") == "current"
            assert deployment_id[:8] in deployment.first.inner_text()
            if viewport is PHONE:
                wide = overflow(page, PHONE["width"])
                assert wide["scrollWidth"] <= PHONE["width"], wide
                assert deployment.first.evaluate("(tr) => getComputedStyle(tr).display") == "block"
                section.screenshot(path=str(SCREENSHOTS / "agent-turns-phone.png"))
            else:
                section.screenshot(path=str(SCREENSHOTS / "agent-turns.png"))
        finally:
            context.close()
