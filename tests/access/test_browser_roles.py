"""Roles in Debian's Chromium against the real server: what a viewer, an operator and an admin each get.

One organization has a call whose caller said a distinctive sentence. A viewer sees its figures and
never the sentence (nor a socket to the call); an operator reads it in the transcript; an admin
invites someone by a one-time link (opened in another browser), makes a read-only API key shown
once, changes the newcomer's role, and finds all of it in the audit log. A member of two
organizations switches between them, and the settings pages fit a 390 px wide screen.
"""

import json
import re
import time
import uuid

import httpx
import pytest
import websockets.sync.client as ws

from tests.conftest import SCREENSHOTS, log_in, overflow

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WAIT_MS = 15_000
# Names new in every run, so a shared database (DATABASE_URL) never sees them twice.
RUN = uuid.uuid4().hex[:6]
ACME, GLOBEX = f"Acme-{RUN}", f"Globex-{RUN}"
ACME_CALL, GLOBEX_CALL = f"acme-call-{RUN}", f"globex-call-{RUN}"
SAID = "Please send the spare kettle to Marigold Lane before Thursday"
GLOBEX_SAID = "Globex caller asks about the invoice"
PASSWORD = "roles-test-password-1"
ADMIN, OPERATOR, VIEWER, BOTH = (f"{name}-{RUN}" for name in ("admin", "operator", "viewer", "both"))

# One `manage.py shell` for the organizations, their credentials and the members (each manage.py
# run costs seconds): prints {"organization name": [ingest token, private API key]} on its last line.
SETUP = """
import json
from django.contrib.auth import get_user_model
from dashboard.models import ApiKey, Membership, Organization
from rtvi_monitor.models import IngestToken
organizations, secrets = {{}}, {{}}
for name in {names!r}:
    organizations[name] = Organization.objects.create(name=name)
    secrets[name] = [IngestToken.issue(organizations[name], "bot")[1], ApiKey.issue(organizations[name], "test")[1]]
for username, organization, role in {rows!r}:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=organizations[organization], role=role)
print(json.dumps(secrets))
"""


def stream_call(server, token: str, session_id: str, sentence: str) -> None:
    """A bot's short call on the public ingest socket: every message stored, then a clean close (it ended)."""
    messages = [
        ("to-client", {"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "2.1.0"}}),
        (
            "to-client",
            {
                "label": "rtvi-ai",
                "type": "user-transcription",
                "data": {"text": sentence, "final": True, "user_id": "u"},
            },
        ),
        ("to-client", {"label": "rtvi-ai", "type": "bot-llm-text", "data": {"text": "Certainly."}}),
    ]
    with ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as socket:
        for seq, (direction, message) in enumerate(messages, 1):
            socket.send(json.dumps({"seq": seq, "direction": direction, "sent_at": time.time(), "message": message}))
        acked = set()
        while len(acked) < len(messages):
            reply = json.loads(socket.recv(timeout=10))
            assert "error" not in reply, reply
            acked.add(reply["ack"])


def wait_ended(server, key: str, session_id: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        response = httpx.get(f"{server.url}/api/sessions/{session_id}/", headers={"Authorization": f"Bearer {key}"})
        if response.status_code == 200 and response.json().get("status") == "ended":
            return
        time.sleep(0.1)
    raise AssertionError(f"{session_id} did not end: {response.status_code} {response.text[:300]}")


@pytest.fixture(scope="module")
def server():
    """The real dashboard, two organizations with a call each, and a member of every role."""
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": "1", "SESSION_SWEEP_INTERVAL": "0.3"}).start()
    try:
        rows = [
            (ADMIN, ACME, "admin"),
            (OPERATOR, ACME, "operator"),
            (VIEWER, ACME, "viewer"),
            (BOTH, ACME, "operator"),
            (BOTH, GLOBEX, "viewer"),
        ]
        script = SETUP.format(names=[ACME, GLOBEX], rows=rows, password=PASSWORD)
        secrets = json.loads(server.manage("shell", "-c", script).splitlines()[-1])
        (acme_token, acme_key), (globex_token, globex_key) = secrets[ACME], secrets[GLOBEX]
        stream_call(server, acme_token, ACME_CALL, SAID)
        stream_call(server, globex_token, GLOBEX_CALL, GLOBEX_SAID)
        wait_ended(server, acme_key, ACME_CALL)
        wait_ended(server, globex_key, GLOBEX_CALL)
        yield server
    finally:
        server.stop()


def signed_in(browser, server, username: str, width: int = 1280):
    """A new browser context (its own cookies) with `username` signed in through the real login page."""
    context = browser.new_context(viewport={"width": width, "height": 844 if width < 600 else 800})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    log_in(page, server, username, PASSWORD)
    page.wait_for_url(f"{server.url}/")
    return context, page


def nav_links(page) -> list[str]:
    return [text.strip() for text in page.locator("nav[aria-label=Main] a").all_inner_texts()]


def test_a_viewer_sees_figures_never_what_was_said_and_no_settings(browser, server):
    context, page = signed_in(browser, server, VIEWER)
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    try:
        # The Overview works, live: its socket (figures only) connects.
        assert ACME in page.locator("h1").inner_text()
        page.wait_for_function("() => document.getElementById('conn').textContent === 'connected'")
        assert nav_links(page)[:4] == ["Overview", "Sessions", "Agents", "Alerts"]
        assert "Audit" not in nav_links(page) and "Settings" not in nav_links(page)
        assert page.locator(".org-name").inner_text() == f"{ACME} · viewer"

        # The session list: the call is there; no transcript search for a viewer.
        response = page.goto(f"{server.url}/sessions/")
        assert response.status == 200
        page.wait_for_function("() => document.getElementById('conn').textContent === 'connected'")
        row = page.locator(f"#history tr[data-session='{ACME_CALL}']")
        assert row.count() == 1 and row.get_attribute("data-status") == "ended"
        assert page.locator("#f-q").count() == 0
        assert SAID not in page.content()

        # The call: its figures, a banner instead of its contents, and no socket to it.
        with page.expect_navigation():
            row.locator(f"a[href='/sessions/{ACME_CALL}/']").first.click()
        assert page.url == f"{server.url}/sessions/{ACME_CALL}/"
        banner = page.locator("[data-testid=contents-hidden]")
        banner.wait_for()
        assert "viewer" in banner.inner_text() and "operator role" in banner.inner_text()
        assert page.locator("#fact-status").inner_text().startswith("ended")
        assert page.locator("#fact-messages").inner_text() == "3"
        page.wait_for_load_state("networkidle")
        html = page.content()
        assert SAID not in html and "Marigold" not in html and "kettle" not in html
        assert "Marigold" not in page.evaluate("document.body.innerText")
        assert page.locator("#transcript").count() == 0
        assert not [url for url in sockets if f"/ws/sessions/{ACME_CALL}/" in url], sockets
        assert "Audit" not in nav_links(page) and "Settings" not in nav_links(page)

        # Settings: the "needs the admin role" page, a 403.
        response = page.goto(f"{server.url}/settings/members/")
        assert response.status == 403
        refusal = page.locator("[data-testid=forbidden]").inner_text()
        assert "needs the admin role" in refusal and "yours is viewer" in refusal
        assert page.locator("[data-testid=members]").count() == 0
        assert page.goto(f"{server.url}/audit/").status == 403
    finally:
        context.close()


def test_an_operator_reads_the_transcript_of_the_same_call(browser, server):
    context, page = signed_in(browser, server, OPERATOR)
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    try:
        assert "Audit" not in nav_links(page) and "Settings" not in nav_links(page)
        page.goto(f"{server.url}/sessions/{ACME_CALL}/")
        page.wait_for_function(
            "(said) => [...document.querySelectorAll('#transcript li .text')].some((n) => n.textContent.includes(said))",
            arg=SAID,
        )
        assert page.locator("[data-testid=contents-hidden]").count() == 0
        assert any(f"/ws/sessions/{ACME_CALL}/" in url for url in sockets), sockets
        assert page.goto(f"{server.url}/settings/keys/").status == 403
    finally:
        context.close()


def test_an_admin_invites_makes_a_read_key_changes_a_role_and_the_audit_shows_it(browser, server):
    context, page = signed_in(browser, server, ADMIN)
    newcomer, email = f"newbie-{RUN}", f"newbie-{RUN}@example.com"
    try:
        assert {"Audit", "Settings"} <= set(nav_links(page))
        with page.expect_navigation():
            page.locator("nav[aria-label=Main] a", has_text="Settings").click()
        assert page.url == f"{server.url}/settings/members/"
        assert page.locator(f"[data-testid=members] tr[data-member='{ADMIN}']").count() == 1

        # Invite someone as a viewer: the one-time link is on the page.
        invite = page.locator("form:has(input[name=do][value=invite])")
        invite.locator("input[name=email]").fill(email)
        invite.locator("select[name=role]").select_option("viewer")
        with page.expect_navigation():
            invite.locator("button[type=submit]").click()
        link = page.locator("[data-testid=invite-link] code").inner_text().strip()
        assert re.fullmatch(rf"{re.escape(server.url)}/invitations/[^/]+/", link), link
        invited = page.locator("[data-testid=invitations] tbody tr", has_text=email)
        assert "viewer" in invited.inner_text() and "open" in invited.inner_text()

        # In another browser: open the link, make an account, land signed in as a viewer of Acme.
        stranger = browser.new_context(viewport={"width": 1280, "height": 800})
        stranger.set_default_timeout(WAIT_MS)
        try:
            other = stranger.new_page()
            other.goto(link)
            assert other.locator("h1").inner_text() == f"Join {ACME}"
            other.fill("#id_username", newcomer)
            other.fill("#id_password1", PASSWORD)
            other.fill("#id_password2", PASSWORD)
            with other.expect_navigation():
                other.locator("button[type=submit]", has_text=f"Join {ACME}").click()
            other.wait_for_url(f"{server.url}/")
            assert other.locator(".logout .who").inner_text() == newcomer
            assert other.locator(".org-name").inner_text() == f"{ACME} · viewer"
            assert f"You are now a member of {ACME} (viewer)" in other.locator("main").inner_text()
            assert "Settings" not in nav_links(other)
            # The link works once.
            again = other.goto(link)
            assert again.status == 404
            assert "cannot be used" in other.locator("h1").inner_text()
            assert other.locator("[data-testid=invitation-invalid]").is_visible()
        finally:
            stranger.close()

        # A private API key with the read scope only: shown once, reads, cannot write.
        page.goto(f"{server.url}/settings/keys/")
        form = page.locator("form:has(input[name=do][value=key])")
        form.locator("input[name=name]").fill(f"grafana-{RUN}")
        form.locator("input[name=scopes][value=read]").check()
        form.locator("input[name=scopes][value=write]").uncheck()
        with page.expect_navigation():
            form.locator("button[type=submit]").click()
        secret = page.locator("[data-testid=secret-value]").inner_text().strip()
        assert secret.startswith("pk_"), secret
        row = page.locator("[data-testid=api-keys] tbody tr", has_text=f"grafana-{RUN}")
        assert "read" in row.inner_text() and "write" not in row.inner_text() and "active" in row.inner_text()
        bearer = {"Authorization": f"Bearer {secret}"}
        listed = httpx.get(f"{server.url}/api/sessions/", headers=bearer)
        assert listed.status_code == 200, listed.text
        assert ACME_CALL in [s["id"] for s in listed.json()["sessions"]]
        refused = httpx.post(
            f"{server.url}/api/alerts/rules/", headers=bearer, json={"name": "x", "condition": "fatal_error"}
        )
        assert refused.status_code == 403 and "needs 'write'" in refused.json()["error"], refused.text
        # Opened again (a GET: Chromium's reload of this page would POST the form again and make
        # another key), the page lists the key by its prefix and no longer shows the secret.
        assert page.goto(f"{server.url}/settings/keys/").request.method == "GET"
        page.locator("[data-testid=api-keys]").wait_for()
        assert page.locator("[data-testid=secret-value]").count() == 0
        assert secret not in page.content()
        assert page.locator("[data-testid=api-keys] tbody tr", has_text=f"grafana-{RUN}").count() == 1

        # The newcomer becomes an operator.
        page.goto(f"{server.url}/settings/members/")
        member = page.locator(f"[data-testid=members] tr[data-member='{newcomer}']")
        assert member.locator("select[name=role]").input_value() == "viewer"
        member.locator("select[name=role]").select_option("operator")
        with page.expect_navigation():
            member.locator("button", has_text="Change").click()
        assert f"{newcomer} is now operator" in page.locator("main").inner_text()
        assert member.locator("select[name=role]").input_value() == "operator"

        # The audit log has the invitation, the join and the role change.
        page.goto(f"{server.url}/audit/")
        audit = page.locator("[data-testid=audit]")
        audit.wait_for()
        invited = audit.locator("tr[data-action=member_invited]", has_text=email)
        joined = audit.locator("tr[data-action=member_joined]", has_text=newcomer)
        changed = audit.locator("tr[data-action=role_changed]", has_text=newcomer)
        assert invited.count() == 1 and ADMIN in invited.inner_text() and "viewer" in invited.inner_text()
        assert joined.count() == 1 and "viewer" in joined.inner_text()
        assert changed.count() == 1 and ADMIN in changed.inner_text()
        assert "Before: viewer; after: operator" in changed.inner_text()  # a sentence (audit.describe)
    finally:
        context.close()


def test_a_member_of_two_organizations_switches_and_sees_the_others_calls(browser, server):
    context, page = signed_in(browser, server, BOTH)
    try:
        page.goto(f"{server.url}/sessions/")
        switch = page.locator("#organization-switch")
        assert switch.locator("option:checked").inner_text() == f"{ACME} (operator)"
        assert page.locator(f"#history tr[data-session='{ACME_CALL}']").count() == 1
        assert page.locator(f"#history tr[data-session='{GLOBEX_CALL}']").count() == 0

        with page.expect_navigation():
            switch.select_option(label=f"{GLOBEX} (viewer)")
        page.wait_for_url(f"{server.url}/sessions/")
        assert page.locator("#organization-switch option:checked").inner_text() == f"{GLOBEX} (viewer)"
        assert GLOBEX in page.locator("h1").inner_text()
        assert page.locator(f"#history tr[data-session='{GLOBEX_CALL}']").count() == 1
        assert page.locator(f"#history tr[data-session='{ACME_CALL}']").count() == 0
        assert page.locator("#f-q").count() == 0  # a viewer in Globex: no transcript search

        # It sticks (the browser session keeps it), and Acme's call is not in Globex.
        page.reload()
        assert page.locator("#organization-switch option:checked").inner_text() == f"{GLOBEX} (viewer)"
        assert page.goto(f"{server.url}/sessions/{ACME_CALL}/").status == 404
        page.goto(f"{server.url}/sessions/{GLOBEX_CALL}/")
        page.locator("[data-testid=contents-hidden]").wait_for()
        assert GLOBEX_SAID not in page.content()
    finally:
        context.close()


@pytest.mark.parametrize("section", ["members", "keys"])
def test_settings_pages_fit_a_390_px_screen(browser, server, section):
    context, page = signed_in(browser, server, ADMIN, width=390)
    try:
        response = page.goto(f"{server.url}/settings/{section}/")
        assert response.status == 200
        page.locator("[data-testid=members]" if section == "members" else "[data-testid=api-keys]").wait_for()
        wide = page.evaluate("() => document.scrollingElement.scrollWidth")
        inner = page.evaluate("() => window.innerWidth")
        assert wide <= inner + 1, overflow(page, inner)
        page.screenshot(path=str(SCREENSHOTS / f"settings-{section}-390.png"), full_page=True)
    finally:
        context.close()
