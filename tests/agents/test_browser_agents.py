"""The agents pages in a real browser against the real server (daphne), seeded like `make run`."""

import json
import uuid

import pytest

from tests.conftest import SCREENSHOTS, log_in, overflow

pytestmark = pytest.mark.browser


def test_a_newcomer_logs_in_and_sees_the_demo_agents(page, demo_server):
    server, username, password, _ = demo_server
    page.goto(f"{server.url}/agents/")
    assert "/login/" in page.url
    log_in(page, server, username, password)
    page.wait_for_selector("text=Is anything wrong?")  # home
    page.screenshot(path=str(SCREENSHOTS / "home.png"), full_page=True)
    page.goto(f"{server.url}/agents/")
    names = page.locator("table.data tbody td:first-child > a").all_inner_texts()
    assert set(names) == {"support-concierge", "appointment-booker", "outbound-survey", "legacy-ivr"}
    assert page.locator(".pill.deleted").count() == 1
    page.check("input[name=deployments]")
    page.click("text=Apply")
    page.wait_for_url("**deployments=1**")
    assert page.locator("code", has_text="registry.example.com/demo-voice-co/support-concierge:v42").count() == 1
    page.screenshot(path=str(SCREENSHOTS / "agents.png"), full_page=True)

    page.click("text=support-concierge")
    # The manifest is folded away under its <summary> (a closed <details> renders no text): open it.
    page.click("summary:text-is('Manifest')")
    assert page.locator("[data-testid=manifest]").inner_text().count('"autoScaling"') == 1


def test_a_wrong_password_is_refused(page, demo_server):
    server, username, _, _ = demo_server
    log_in(page, server, username, "not-the-password")
    assert "do not match" in page.locator("[role=alert]").inner_text()


# --- The agent page's platform view, against the built-in agents API ----------------------------------
#
# A Pipecat Cloud stand-in cannot be faked at the httpx layer inside the server's process, so the
# organization's agents API is the default one: the server's own /v1, answering from the sessions and
# log lines seeded into its database. Its own server, so that no agent list is cached before the seed.

RUN = uuid.uuid4().hex[:6]
XSS = "<img src=x onerror=alert(1)>"
NEEDLE = f"needle-{RUN}"
PHONE = {"width": 390, "height": 844}
SEED = """
import json
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Agent, Deployment, Organization
from rtvi_monitor.models import Event, Session

RUN, XSS, NEEDLE = {run!r}, {xss!r}, {needle!r}
org = Organization.objects.get(name="Demo Voice Co")
now = timezone.now()
agent = Agent.objects.create(organization=org, name=f"voice-desk-{{RUN}}", created_at=now - timedelta(days=5))
spec = {{"region": "eu-central", "autoScaling": {{"minAgents": 1, "maxAgents": 5}}}}
old = Deployment.objects.create(agent=agent, image="img/voice-desk:v1", manifest=spec, created_at=now - timedelta(days=3))
new = Deployment.objects.create(agent=agent, image="img/voice-desk:v2", manifest=spec, created_at=now - timedelta(days=1))
agent.active_deployment = new
agent.save()
sessions = []
for i in range(12):
    dep = old if i < 6 else new
    start = now - timedelta(minutes=30 - i)
    sessions.append(Session(
        organization=org, agent=agent, agent_key=str(agent.pk), agent_name=agent.name,
        session_id=f"pf-{{RUN}}-{{i:02d}}", deployment_id=str(dep.pk), status="ended",
        started_at=start, ended_at=start + timedelta(seconds=90), last_event_at=start + timedelta(seconds=80),
        end_reason="fatal error" if i == 3 else "bot disconnected", fatal=i == 3, error_count=int(i == 3),
        latency_p50_ms=1200 if dep is old else 700, latency_p95_ms=1800 if dep is old else 1000,
    ))
Session.objects.bulk_create(sessions)
sessions = list(Session.objects.filter(agent_key=str(agent.pk)).order_by("session_id"))
events = []
levels = ["DEBUG", "INFO", "WARNING", "ERROR"]
for i, session in enumerate(sessions):
    lines = [("system-log", {{"text": f"{{session.session_id}} step {{k}}", "level": levels[k % 4]}}) for k in range(10)]
    if i == 3:
        lines.append(("error", {{"error": "LLM service returned 401", "fatal": True}}))
    if i == 5:
        lines.append(("system-log", {{"text": XSS, "level": "WARNING"}}))
    if i in (2, 9):
        lines.append(("system-log", {{"text": f"caller asked for {{NEEDLE}} refund", "level": "INFO"}}))
    base = session.started_at.timestamp()
    for seq, (kind, data) in enumerate(lines, 1):
        events.append(Event(
            session=session, seq=seq, direction="to-client", type=kind, received_at=base + seq,
            message=json.dumps({{"label": "rtvi-ai", "type": kind, "data": data}}),
        ))
Event.objects.bulk_create(events)
print(json.dumps({{"agent": str(agent.pk), "old": str(old.pk), "new": str(new.pk), "lines": len(events)}}))
"""


@pytest.fixture(scope="module")
def platform_server():
    """A real server whose agents API is its own /v1, with an agent of two deployments' sessions and log lines.

    Yields (server, username, password, seeded): seeded has the agent's id, its old and new (active)
    deployment ids and how many log lines its bots sent.
    """
    from tests.server import DaphneServer

    server = DaphneServer().start()
    try:
        username, password, _ = server.seed_demo()
        out = server.manage("shell", "-c", SEED.format(run=RUN, xss=XSS, needle=NEEDLE))
        yield server, username, password, json.loads(out.splitlines()[-1])
    finally:
        server.stop()


def session_id(i: int) -> str:
    return f"pf-{RUN}-{i:02d}"


def log_texts(page) -> list[str]:
    return page.locator("[data-testid=log-lines] li .log-text").all_inner_texts()


def submit_logs_form(page, query: str, log_session: str) -> None:
    form = page.locator("form[role=search]")
    page.fill("#f-q", query)
    page.fill("#f-log-session", log_session)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    page.wait_for_selector("[data-testid=log-lines]")


def test_the_agent_page_shows_the_platform_view_of_its_sessions_and_logs(browser, platform_server):
    server, username, password, seeded = platform_server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    dialogs = []
    try:
        page = context.new_page()
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")
        page.goto(f"{server.url}/agents/{seeded['agent']}/")
        page.wait_for_selector("[data-testid=platform-sessions]")
        assert "could not be fetched" not in page.content()

        # Status: the built-in API's answer, from the active deployment's manifest.
        status = page.locator("[data-testid=agent-status]")
        assert page.locator("[data-testid=region]").inner_text() == "eu-central"
        assert status.locator(".pill.live", has_text="ready").count() == 1
        assert seeded["new"][:8] in status.inner_text()
        assert status.locator(f"[title='{seeded['new']}']").count() == 1  # the whole id on hover
        assert "1 – 5 agents" in status.inner_text()
        assert page.locator("[data-testid=live-count]").inner_text() == "0"
        assert "12 · all its sessions" in page.locator("[data-testid=agent-figures]").inner_text()

        # Deployments: two rows, newest first; the active one marked, with its turn latency.
        rows = page.locator("[data-testid=deployments] tbody tr")
        assert rows.count() == 2
        current = page.locator("[data-testid=deployments] tbody tr.current")
        assert current.count() == 1 and current.locator(".pill.live", has_text="active").count() == 1
        assert current.locator("a").get_attribute("href").startswith(f"?deployment={seeded['new']}")
        assert rows.nth(1).locator("a").get_attribute("href").startswith(f"?deployment={seeded['old']}")
        assert rows.nth(1).locator(".pill.error").count() == 1  # the old one's fatal session: a platform failure
        assert current.locator("td").nth(5).inner_text() == "0 %"
        latency = [rows.nth(i).locator("td").nth(2).inner_text() for i in range(2)]
        assert "—" not in latency and latency[0] != latency[1], latency  # 0.7 s on the new one, 1.2 s on the old
        assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(2)] == ["6", "6"]

        # The platform's sessions: twelve, newest first, the fatal one failed with HTTP_ERROR, all linked.
        table = page.locator("[data-testid=platform-sessions] tbody tr")
        assert table.count() == 12
        assert table.locator("td:first-child a").all_inner_texts() == [session_id(i) for i in reversed(range(12))]
        failed = page.locator("[data-testid=platform-sessions] tbody tr.failed")
        assert failed.count() == 1
        assert failed.locator("td:first-child").inner_text() == session_id(3)
        assert failed.locator(".pill.error").inner_text() == "HTTP_ERROR"
        assert page.locator("[data-testid=platform-sessions] .pill.ended", has_text="HTTP_COMPLETED").count() == 11
        for i in range(12):
            assert page.locator(f"[data-testid=platform-sessions] a[href='/sessions/{session_id(i)}/']").count() == 1

        # The logs: newest first, a page of 100 of them, each line's level as its class, the markup as text.
        lines = page.locator("[data-testid=log-lines] li")
        assert lines.count() == 100
        assert f"100 of {seeded['lines']} lines" in page.locator("#logs .pager").inner_text()
        for level in ("debug", "info", "warning", "error", "critical"):
            assert page.locator(f"[data-testid=log-lines] li.log-{level}").count() > 0, level
        assert page.locator("[data-testid=log-lines] li.log-critical .log-text").all_inner_texts() == [
            "CRITICAL: LLM service returned 401"
        ]
        assert f"WARNING: {XSS}" in log_texts(page)
        assert page.locator("[data-testid=log-lines] img").count() == 0
        assert page.locator("img[src=x]").count() == 0
        assert log_texts(page)[0] == f"INFO: {session_id(11)} step 9"  # the newest line (9 % 4: INFO)

        # The next page: the rest of the lines, and the way back.
        with page.expect_navigation():
            page.locator("#logs .pager a", has_text="older").click()
        assert "lo=100" in page.url
        assert lines.count() == seeded["lines"] - 100
        assert page.locator("#logs .pager a", has_text="newer").count() == 1
        assert page.locator("#logs .pager a", has_text="older").count() == 0

        # A search through the form: only the lines with the text, from the first page.
        submit_logs_form(page, NEEDLE, "")
        assert f"q={NEEDLE}" in page.url and "lo=" not in page.url
        assert sorted(log_texts(page)) == [f"INFO: caller asked for {NEEDLE} refund"] * 2
        assert "2 of 2 lines" in page.locator("#logs .pager").inner_text()
        submit_logs_form(page, "no-such-text-anywhere", "")
        assert page.locator("[data-testid=log-lines] li").all_inner_texts() == ["No line matches."]

        # The session filter: that session's lines only, through the form and through a row's "logs" link.
        submit_logs_form(page, "", session_id(7))
        levels = ["DEBUG", "INFO", "WARNING", "ERROR"]
        assert sorted(log_texts(page)) == sorted(f"{levels[k % 4]}: {session_id(7)} step {k}" for k in range(10))
        page.goto(f"{server.url}/agents/{seeded['agent']}/")
        fatal_row = page.locator("[data-testid=platform-sessions] tbody tr.failed")
        with page.expect_navigation():
            fatal_row.locator("a", has_text="logs").click()
        assert f"log_session={session_id(3)}" in page.url
        assert page.locator("#f-log-session").input_value() == session_id(3)
        assert lines.count() == 11 and all(session_id(3) in t or "LLM service" in t for t in log_texts(page))

        # A session row opens the session page, whose platform panel shows the platform's record and lines.
        page.goto(f"{server.url}/agents/{seeded['agent']}/")
        with page.expect_navigation():
            page.locator(f"[data-testid=platform-sessions] a[href='/sessions/{session_id(3)}/']").click()
        assert page.url == f"{server.url}/sessions/{session_id(3)}/"
        page.wait_for_selector("#platform", state="visible")
        page.wait_for_selector("[data-testid=platform-logs] li")
        assert page.locator("#platform-completion").inner_text().startswith("HTTP_ERROR (failed)")
        assert "failed-text" in page.locator("#platform-completion").get_attribute("class")
        # A deployment's UUID by its first 8 characters, the whole of it on hover.
        assert page.locator("#platform-deployment").inner_text() == seeded["old"][:8]
        assert page.locator("#platform-deployment").get_attribute("title") == seeded["old"]
        assert not page.locator("#platform-error").is_visible()
        panel_lines = page.locator("[data-testid=platform-logs] li")
        assert panel_lines.count() == 11  # oldest first: its ten lines, then the fatal error
        assert panel_lines.first.locator(".log-text").inner_text() == f"DEBUG: {session_id(3)} step 0"
        assert panel_lines.last.get_attribute("class") == "log-critical"
        assert "(11 of 11)" in page.locator("#platform-logs-count").inner_text()
        link = page.locator("#platform-logs-link")
        assert link.is_visible() and f"log_session={session_id(3)}" in link.get_attribute("href")

        # The session with the markup in a log line: shown as text on its page too.
        page.goto(f"{server.url}/sessions/{session_id(5)}/")
        page.wait_for_selector("[data-testid=platform-logs] li")
        assert f"WARNING: {XSS}" in page.locator("[data-testid=platform-logs] .log-text").all_inner_texts()
        assert page.locator("#platform img").count() == 0
        assert page.locator("#platform-completion").inner_text().startswith("HTTP_COMPLETED")
        assert dialogs == []
    finally:
        context.close()


def test_the_agent_page_fits_a_390_px_screen(browser, platform_server):
    server, username, password, seeded = platform_server
    context = browser.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        log_in(page, server, username, password)
        page.wait_for_url(f"{server.url}/")
        for path, ready in (
            (f"/agents/{seeded['agent']}/", "[data-testid=log-lines] li.log-critical"),
            (f"/agents/{seeded['agent']}/?q={NEEDLE}", "[data-testid=log-lines] li.log-info"),
            (f"/sessions/{session_id(3)}/", "[data-testid=platform-logs] li.log-critical"),
        ):
            page.goto(f"{server.url}{path}")
            page.wait_for_selector(ready)
            page.wait_for_load_state("load")
            measured = overflow(page, PHONE["width"])
            assert measured["scrollWidth"] <= PHONE["width"], (
                f"{path} is {measured['scrollWidth']} px wide: {measured['outside']}"
            )
        # The wide tables stack their rows (each value after its column's name), nothing of them dropped.
        page.goto(f"{server.url}/agents/{seeded['agent']}/")
        page.wait_for_selector("[data-testid=platform-sessions]")
        assert page.locator(".table-scroll:has([data-testid=platform-sessions])").evaluate(
            "(e) => e.scrollWidth <= e.clientWidth"
        )
        assert page.locator("[data-testid=platform-sessions] thead th").count() == 8
        first = page.locator("[data-testid=platform-sessions] tbody tr").first
        assert first.locator("td[data-label]").count() == 8 and first.locator("td").last.is_visible()
    finally:
        context.close()
