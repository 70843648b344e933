"""The sessions page in Debian's Chromium, against the real server and bots on the real ingest socket.

A session whose bot is away says so, and leaves the live table when the grace runs out; live rows
are newest first; a session that ends moves from the live table to the history, written the same
way by the browser and the server; the history pages go older and newer.
The browser runs in Paris, in British English: every time must be the operator's, not the server's UTC.
"""

import json
import re
import time
import uuid
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
# seconds: SESSION_END_GRACE of this module's server. The test's reconnect must land within it, after the
# away news has reached the page: with 3 s, a CI machine busy with Chromium and the suite missed it once.
GRACE = 8
OPERATOR = {"timezone_id": "Europe/Paris", "locale": "en-GB"}
PARIS = ZoneInfo("Europe/Paris")
AWAY = re.compile(
    r"^bot away since \d\d:\d\d:\d\d CES?T — the session ends if it does not return within the grace period$"
)
AGO = re.compile(r"^(just now|\d+ s ago|\d+ min ago|\d+ h ago|\d{4}-\d\d-\d\d \d\d:\d\d \S+)$")


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
    context = browser.new_context(viewport={"width": 1280, "height": 800}, **OPERATOR)
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

        # The bot's connection drops (any close but 1000), and it comes back within the grace: the same session,
        # live again.
        bot.close(code=1001)
        page.wait_for_selector(f"{row}[data-bot='away']")
        assert AWAY.match(status_of(page, session_id)), status_of(page, session_id)
        bot = connect_bot(server, token, session_id)
        page.wait_for_selector(f"{row}[data-bot='connected']")
        assert status_of(page, session_id) == "live"
        send(bot, 2, "user-started-speaking")

        # The bot goes for good: away, then, the grace over, ended (vanished, in red) and gone from the live list.
        bot.close(code=1001)
        page.wait_for_selector(f"{row}[data-bot='away']")
        away_seen = time.monotonic()
        assert AWAY.match(status_of(page, session_id)), status_of(page, session_id)
        detail.wait_for_selector("#status.away")
        assert AWAY.match(detail.locator("#status").inner_text())
        page.wait_for_selector(row, state="detached", timeout=30000)
        assert time.monotonic() - away_seen >= GRACE - 1  # not before the grace (less what the news took to come)
        page.wait_for_selector("#live-sessions tr.empty")
        detail.wait_for_selector("#status.ended")
        assert detail.locator("#status").inner_text() == "ended (bot vanished)"

        # A page opened now lists it as ended, in the history only.
        page.reload()
        page.wait_for_selector("#conn:text('connected')")
        assert page.locator(row).count() == 0
        history = page.locator("#history tr", has=page.locator(f"a:text-is('{session_id}')"))
        assert history.locator(".pill").all_inner_texts() == ["ended (bot vanished)"]
        assert history.locator(".pill").get_attribute("class") == "pill ended error"
    finally:
        context.close()


def ids_in(page, table, ours):
    """The session ids of a table, top to bottom, of the sessions this test made."""
    ids = page.locator(f"#{table} tr[data-session]").evaluate_all("(rows) => rows.map((r) => r.dataset.session)")
    return [i for i in ids if i in ours]


def cells(page, table, session_id):
    """A row's cells as HTML, with what ages (how long ago) left out: the markup both tables must share."""
    return page.locator(f"#{table} tr[data-session='{session_id}']").evaluate(
        """(row) => [...row.cells].map((cell) => {
            const copy = cell.cloneNode(true);
            for (const time of copy.querySelectorAll('time.when')) time.textContent = '';
            return copy.innerHTML;
        })"""
    )


def assert_operator_times(page, selector):
    """Every moment in `selector`: how long ago, and on hover the full time in Paris, 24-hour, the zone named."""
    times = page.locator(f"{selector} time.when")
    assert times.count() > 0
    for time_ in times.all():
        assert AGO.match(time_.inner_text()), time_.inner_text()
        moment = datetime.fromisoformat(time_.get_attribute("datetime")).astimezone(PARIS)
        assert time_.get_attribute("title") == moment.strftime("%Y-%m-%d %H:%M:%S %Z")  # e.g. "... 14:03:07 CET"
    text = page.locator(selector).inner_text()
    assert "UTC" not in text and " AM" not in text and " PM" not in text and " ago ago" not in text


def test_both_tables_follow_the_sessions_alike(browser, short_grace_server):
    server, username, password = short_grace_server
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    run = uuid.uuid4().hex[:6]
    a, b, c, d = (f"follow-{run}-{name}" for name in "abcd")
    ours = {a, b, c, d}
    bots = {}
    context = browser.new_context(viewport={"width": 1280, "height": 800}, **OPERATOR)
    try:
        # Three calls start one after another before the page opens; the first has an error.
        for session_id in (a, b, c):
            bots[session_id] = connect_bot(server, token, session_id)
            send(bots[session_id], 1, "client-ready", {"version": "2.1.0", "about": {"library": "test"}}, "from-client")
            time.sleep(0.05)
        send(bots[a], 2, "error", {"error": "TTS hiccup", "fatal": False})
        page = context.new_page()
        log_in(page, server, username, password)
        page.goto(f"{server.url}/sessions/")
        page.wait_for_selector(f"#live-sessions tr[data-session='{a}'] .pill.error")

        # Newest start first, in the live table alone: the history holds sessions that ended.
        assert ids_in(page, "live-sessions", ours) == [c, b, a]
        assert ids_in(page, "history", ours) == []
        # A call that starts now goes on top.
        bots[d] = connect_bot(server, token, d)
        send(bots[d], 1, "client-ready", {"version": "2.1.0"}, "from-client")
        page.wait_for_selector(f"#live-sessions tr[data-session='{d}']")
        assert ids_in(page, "live-sessions", ours) == [d, c, b, a]
        assert page.locator(f"#live-sessions tr[data-session='{a}'] td").last.inner_html() == (
            '<span class="pill error">1</span>'
        )
        assert page.locator(f"#live-sessions tr[data-session='{b}'] td").last.inner_html() == "0"
        assert_operator_times(page, "#live-sessions")

        # A call ends (its bot closes with 1000, its pipeline over): it leaves the live table and is listed in the
        # history, once, in the same cells the browser wrote (its status and duration as they are now).
        live_b = cells(page, "live-sessions", b)
        bots.pop(b).close()
        page.wait_for_selector(f"#history tr[data-session='{b}'][data-status='ended']", timeout=30000)
        assert page.locator(f"#live-sessions tr[data-session='{b}']").count() == 0
        assert page.locator(f"#history tr[data-session='{b}'] .pill").inner_text() == "ended (bot finished)"
        ended_b = cells(page, "history", b)
        assert [cell for i, cell in enumerate(ended_b) if i not in (1, 4)] == [
            cell for i, cell in enumerate(live_b) if i not in (1, 4)
        ]
        assert ids_in(page, "history", ours) == [b] and ids_in(page, "live-sessions", ours) == [d, c, a]

        # The newest call ends: on top of the history, as its start puts it.
        bots.pop(d).close()
        page.wait_for_selector(f"#history tr[data-session='{d}']", timeout=30000)
        assert page.locator(f"#live-sessions tr[data-session='{d}']").count() == 0
        assert ids_in(page, "history", ours) == [d, b]
        assert not page.locator("#history-stale").is_visible()
        assert_operator_times(page, "#history")

        # Reloaded, the server renders the history as the page showed it.
        page.reload()
        page.wait_for_selector(f"#live-sessions tr[data-session='{a}']")
        assert cells(page, "history", b) == ended_b
        assert ids_in(page, "history", ours) == [d, b]
        assert ids_in(page, "live-sessions", ours) == [c, a]
    finally:
        for bot in bots.values():
            bot.close()
        context.close()


def test_the_history_pages_go_older_and_newer(browser, short_grace_server):
    server, username, password = short_grace_server
    run = uuid.uuid4().hex[:6]
    # 120 ended sessions of one agent, a minute apart; #49 and #50 started at the same moment, across a page's end.
    agent_id = server.manage(
        "shell",
        "-c",
        f"""
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Agent, Organization
from rtvi_monitor.models import Session
org = Organization.objects.get(name="Demo Voice Co")
agent = Agent.objects.create(organization=org, name="pager-{run}")
base = timezone.now() - timedelta(minutes=5)
starts = [base - timedelta(minutes=49 if i == 50 else i) for i in range(120)]
Session.objects.bulk_create(
    Session(organization=org, agent=agent, agent_key=str(agent.pk), agent_name=agent.name,
            session_id=f"page-{run}-{{i:03d}}", status="ended",
            started_at=start, ended_at=start + timedelta(seconds=95), end_reason="bot disconnected")
    for i, start in enumerate(starts)
)
print(agent.pk)
""",
    ).splitlines()[-1]
    names = [f"page-{run}-{i:03d}" for i in range(120)]
    # Newest first; the two of the same moment by creation, latest first.
    expected = [*names[:49], names[50], names[49], *names[51:]]
    context = browser.new_context(viewport={"width": 1280, "height": 800}, **OPERATOR)
    try:
        page = context.new_page()
        log_in(page, server, username, password)
        page.goto(f"{server.url}/sessions/?agent={agent_id}")

        def shown():
            return ids_in(page, "history", set(names))

        pages = [shown()]
        assert page.locator("a[rel=prev]").count() == 0  # the newest page: nothing newer
        while page.locator("a[rel=next]").count():
            page.click("a[rel=next]")
            page.wait_for_load_state()
            pages.append(shown())
        assert [len(p) for p in pages] == [50, 50, 20]
        assert [i for p in pages for i in p] == expected
        assert f"agent={agent_id}" in page.url  # the filters go along
        assert page.locator("#history tr[data-session] td:nth-child(5)").first.inner_text() == "1 min 35 s"
        assert_operator_times(page, "#history")

        # And back, page by page, to the newest.
        back = [shown()]
        while page.locator("a[rel=prev]").count():
            page.click("a[rel=prev]")
            page.wait_for_load_state()
            back.append(shown())
        assert back == pages[::-1]
        assert page.locator("a[rel=next]").count() == 1
    finally:
        context.close()
