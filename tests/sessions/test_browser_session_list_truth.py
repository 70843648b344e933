"""The sessions list says what is true, and reads at a glance, on a desktop and on a phone (Debian's Chromium,
the real server, bots on the real ingest socket).

A session is listed once: in Live while it is live (its bot away within the grace included), in the history
once it ended, as the server renders the page and as the page follows its socket. The figure the session
page calls "Messages" has that name here too. The history's filters say what they hold.
"""

import json
import re
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
GRACE = 8  # seconds: SESSION_END_GRACE of this module's server (long enough for a busy machine's return)
WIDTHS = [1280, 390]
OPERATOR = {"timezone_id": "Europe/Paris", "locale": "en-GB"}
COLUMNS = ["Session", "Status", "Agent", "Started", "Duration", "Messages", "Turns", "Latency p50 / p95"]
COLUMNS += ["Interruptions", "Errors"]


@pytest.fixture(scope="module")
def server():
    """The real dashboard with a short grace and a quick sweep: yields (server, username, password, token)."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": str(GRACE), "SESSION_SWEEP_INTERVAL": "0.5"}).start()
    try:
        username, password, _ = server.seed_demo()
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        yield server, username, password, token
    finally:
        server.stop()


def bot(server, token, session_id):
    socket = ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    )
    return socket


def send(socket, seq, type_, data=None, direction="to-client"):
    socket.send(json.dumps(wrap(seq, rtvi(type_, data), direction, sent_at=time.time())))
    assert "ack" in json.loads(socket.recv(timeout=10))


def opened(browser, server, username, password, width, path="/sessions/"):
    context = browser.new_context(viewport={"width": width, "height": 900}, **OPERATOR)
    page = context.new_page()
    log_in(page, server, username, password)
    page.goto(f"{server.url}{path}")
    page.wait_for_selector("#conn:text('connected')")
    return context, page


def rows(page, session_id) -> dict:
    """Where the page lists the session: how many rows in each table."""
    return {
        table: page.locator(f"#{table} tr[data-session='{session_id}']").count()
        for table in ("live-sessions", "history")
    }


def column_names(page, table) -> list[str]:
    """The columns as the reader sees them: the header's cells on a desktop, each cell's label on a phone."""
    return page.locator(f"#{table}").evaluate(
        """(table) => {
            const head = table.tHead.getBoundingClientRect().height > 1;
            if (head) return [...table.tHead.rows[0].cells].map((th) => th.innerText.trim());
            const row = table.querySelector('tbody tr[data-session]');
            return [...row.cells].map((td) => JSON.parse(getComputedStyle(td, '::before').content));
        }"""
    )


def one_line(page, selector) -> bool:
    """Whether the element's text sits on one line (a pill, a label, a value: no wrapping)."""
    return page.locator(selector).first.evaluate(
        """(e) => { const range = document.createRange(); range.selectNodeContents(e);
                    const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
                    return tops.size === 1; }"""
    )


def labels_on_one_line(page, table) -> bool:
    """On a phone each cell's label floats before its value, in a column of its own: each label's text fits that
    column's width on one line (measured in the label's own font)."""
    return page.locator(f"#{table} tbody tr[data-session]").first.evaluate(
        """(row) => [...row.cells].every((td) => {
            const before = getComputedStyle(td, '::before');
            const probe = document.createElement('span');
            probe.textContent = td.dataset.label;
            Object.assign(probe.style, { fontFamily: before.fontFamily, fontSize: before.fontSize,
                fontWeight: before.fontWeight, whiteSpace: 'nowrap', position: 'absolute', visibility: 'hidden' });
            document.body.append(probe);
            const fits = probe.getBoundingClientRect().width <= parseFloat(before.width) + 0.5;
            probe.remove();
            return fits;
        })"""
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_session_is_listed_once_live_then_in_the_history(browser, server, width):
    server, username, password, token = server
    session_id = f"once-{width}-{uuid.uuid4().hex[:6]}"
    live_row, history_row = (f"#{t} tr[data-session='{session_id}']" for t in ("live-sessions", "history"))
    caller = bot(server, token, session_id)
    send(caller, 1, "client-ready", {"version": "2.1.0"}, "from-client")
    send(caller, 2, "user-started-speaking")
    context, page = opened(browser, server, username, password, width)
    try:
        # Server-rendered, the history does not list the live call; the socket puts it in Live.
        assert f'data-session="{session_id}"' not in page.request.get(f"{server.url}/sessions/").text()
        page.wait_for_selector(live_row)
        assert rows(page, session_id) == {"live-sessions": 1, "history": 0}
        assert page.locator(f"{live_row} .pill").inner_text() == "live"
        assert page.locator("#live-sessions").is_visible() and page.locator(live_row).is_visible()
        # What each table holds, said under its heading; the same columns, "Messages" as the session page says.
        lede = page.locator("h2:text-is('Live') + p")
        assert "A call whose bot is away is still live" in lede.inner_text() and lede.is_visible()
        assert page.locator("h2:text-is('History') + p").inner_text().startswith("Calls that have ended.")
        assert column_names(page, "live-sessions") == COLUMNS
        # Both messages were acknowledged (stored) before the page opened; the row's count is the session's
        # summary, which the writer brings up to date on its own beat: it reads 2 within it, never more.
        cell = page.locator(f"{live_row} td[data-label=Messages]")
        deadline = time.monotonic() + 10
        while cell.inner_text() != "2":
            assert cell.inner_text() in ("1", "2") and time.monotonic() < deadline, cell.inner_text()
            page.wait_for_timeout(50)

        # Its bot drops: away, within the grace, so still live, listed in Live alone; and back again.
        caller.close(code=1001)
        page.wait_for_selector(f"{live_row}[data-bot='away']")
        assert page.locator(f"{live_row} .pill").inner_text().startswith("bot away since ")
        assert page.locator(f"{live_row} .pill").evaluate("(e) => getComputedStyle(e).color") != (
            page.locator("#live-sessions").evaluate("(e) => getComputedStyle(e).color")
        )  # in the warning's colour
        assert rows(page, session_id) == {"live-sessions": 1, "history": 0}
        assert f'data-session="{session_id}"' not in page.request.get(f"{server.url}/sessions/?part=history").text()
        caller = bot(server, token, session_id)
        send(caller, 3, "user-stopped-speaking")
        page.wait_for_selector(f"{live_row}[data-bot='connected']")
        assert rows(page, session_id) == {"live-sessions": 1, "history": 0}

        # It ends: it leaves Live and is in the history once, never in both, never twice.
        caller.close()
        deadline, seen = time.monotonic() + 30, []
        while not page.locator(history_row).count():
            seen.append(rows(page, session_id))
            assert time.monotonic() < deadline, seen[-5:]
            page.wait_for_timeout(50)
        assert all(sum(where.values()) <= 1 for where in seen), seen
        assert rows(page, session_id) == {"live-sessions": 0, "history": 1}
        assert page.locator(f"{history_row} .pill").inner_text() == "ended (bot finished)"
        assert one_line(page, f"{history_row} .pill")
        assert page.locator(f"{history_row} td[data-label=Messages]").inner_text() == "3"
        link = page.locator(f"{history_row} a")
        assert link.is_visible() and link.get_attribute("href") == f"/sessions/{session_id}/"
        assert column_names(page, "history") == COLUMNS
        if width < 600:
            assert labels_on_one_line(page, "history")  # "Latency p50 / p95" included
        assert page.evaluate("document.scrollingElement.scrollWidth") <= width + 1
        assert not page.locator("#history-stale").is_visible()

        # The session page names the same figure the same way.
        page.goto(f"{server.url}/sessions/{session_id}/")
        assert page.locator("h2:text-is('Messages')").is_visible()
    finally:
        caller.close()
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_history_filters_say_what_they_hold(browser, server, width):
    server, username, password, _ = server
    run = uuid.uuid4().hex[:6]
    # Three ended calls of an agent of this run's own: one finished, one vanished, one fatal.
    agent_id = server.manage(
        "shell",
        "-c",
        f"""
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Agent, Organization
from rtvi_monitor.models import Session
org = Organization.objects.get(name="Demo Voice Co")
agent = Agent.objects.create(organization=org, name="filters-{run}")
now = timezone.now()
for i, (kind, reason, fatal) in enumerate([("bot_finished", "bot finished", False),
        ("bot_vanished", "bot vanished", False), ("fatal_error", "fatal error", True)]):
    Session.objects.create(organization=org, agent=agent, session_id=f"filters-{run}-{{kind}}", status="ended",
        started_at=now - timedelta(minutes=i + 1), ended_at=now - timedelta(minutes=i), end_kind=kind,
        end_reason=reason, fatal=fatal, event_count=12)
print(agent.pk)
""",
    ).splitlines()[-1]
    ours = {f"filters-{run}-{kind}" for kind in ("bot_finished", "bot_vanished", "fatal_error")}

    def shown():
        listed = page.locator("#history tr[data-session]").evaluate_all("(rows) => rows.map((r) => r.dataset.session)")
        return sorted(i for i in listed if i in ours)

    # As the Overview's "ended badly" tile links: the filter it applies is shown, checked.
    context, page = opened(browser, server, username, password, width, f"/sessions/?agent={agent_id}&failed=true")
    try:
        badly = page.locator("label.check", has_text="ended badly")
        assert badly.is_visible() and badly.locator("input").is_checked()
        assert shown() == [f"filters-{run}-bot_vanished", f"filters-{run}-fatal_error"]
        assert page.locator("#f-agent").input_value() == agent_id
        # Each field's name beside its field, on the same line, whatever the width.
        for field in page.locator("form.filters .field").all():
            label, control = field.locator("label").bounding_box(), field.locator("input, select").bounding_box()
            assert abs((label["y"] + label["height"] / 2) - (control["y"] + control["height"] / 2)) < 6, field
            assert label["x"] < control["x"]
        assert page.evaluate("document.scrollingElement.scrollWidth") <= width + 1

        # How it ended, by its words: one kind.
        assert page.locator("#f-end option").all_inner_texts()[:3] == ["any way", "client hung up", "bot finished"]
        badly.locator("input").uncheck()
        page.select_option("#f-end", label="bot vanished")
        with page.expect_navigation():
            page.click("form.filters button[type=submit]")
        assert re.search(r"[?&]end=bot_vanished(&|$)", page.url)
        page.wait_for_selector("#conn:text('connected')")
        assert shown() == [f"filters-{run}-bot_vanished"]
        assert page.locator("#f-end option:checked").inner_text() == "bot vanished"
        pill = page.locator(f"#history tr[data-session='filters-{run}-bot_vanished'] .pill").first
        assert pill.inner_text() == "ended (bot vanished)" and "error" in pill.get_attribute("class")

        # Nothing matches: said so, as the filters' doing.
        page.goto(f"{server.url}/sessions/?agent={agent_id}&end=client_hung_up")
        assert page.locator("#history td.muted").inner_text() == "No ended session matches these filters."
        # The Overview's "live sessions" tile: Live on top, and the history as it is (no status of its own).
        page.goto(f"{server.url}/sessions/?agent={agent_id}&status=live")
        page.wait_for_selector("#conn:text('connected')")
        assert shown() == sorted(ours)
        assert page.locator("h2:text-is('Live')").bounding_box()["y"] < page.locator("#history").bounding_box()["y"]
    finally:
        context.close()
