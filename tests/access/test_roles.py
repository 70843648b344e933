"""Who may see and do what: roles per membership, several organizations per user, scoped and expiring keys.

Checked both ways: what a role may do works, and what it may not is refused on
every page, socket, export and API; an admin of one organization can never
reach another's.
"""

import json
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone

from dashboard.org.models import ApiKey, AuditEntry, Membership, Role
from rtvi_monitor.sessions.models import Event, Session
from tests.agents.test_platform_pages import cloud  # noqa: F401  (the Pipecat Cloud stand-in fixture)
from tests.conftest import make_member
from tests.sockets import browser_socket

SAID = "my card ends in nine and I live on Elm Street"


def make_call(organization, session_id="call-1", status=Session.Status.ENDED):
    session = Session.objects.create(
        organization=organization,
        session_id=session_id,
        status=status,
        ended_at=timezone.now() if status == Session.Status.ENDED else None,
        turn_count=3,
        latency_p50_ms=812.0,
        latency_p95_ms=1400.0,
        latency_max_ms=1500.0,
        transcript_text=SAID,
        state={"transcript": [{"role": "user", "text": SAID}]},
        event_count=1,
    )
    message = {"label": "rtvi-ai", "type": "user-transcription", "data": {"text": SAID, "final": True}}
    Event.objects.create(
        session=session,
        seq=1,
        direction="to-client",
        type="user-transcription",
        received_at=timezone.now().timestamp(),
        message=json.dumps(message),
    )
    return session


def bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def nonce_of(client, url: str) -> str:
    """The one-time nonce of a settings page's forms, as a browser gets it by opening the page."""
    return client.get(url).content.decode().split('name="nonce" value="')[1].split('"')[0]


CONTENT_APIS = [
    "/api/sessions/call-1/events/",
    "/api/sessions/call-1/events/1/",
    "/api/sessions/call-1/events.ndjson",
    "/api/sessions/call-1/traces/",
    "/api/sessions/call-1/platform/",
]


# --- a viewer sees figures, never contents -------------------------------------------------


def test_a_viewer_sees_a_calls_figures_and_nothing_it_said(viewer_client, org):
    make_call(org)
    response = viewer_client.get("/sessions/call-1/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="contents-hidden"' in html and "p95 1.4 s" in html and ">3<" in html
    assert SAID not in html and "/ws/sessions/" not in html and "events.ndjson" not in html
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.SESSION_READ).exists()  # nothing was read


@pytest.mark.parametrize("url", CONTENT_APIS)
def test_a_viewer_is_refused_every_api_that_carries_contents(viewer_client, org, url):
    make_call(org)
    response = viewer_client.get(url)
    assert response.status_code == 403, url
    assert "operator role" in response.json()["error"]
    assert SAID not in response.content.decode()


def test_a_viewers_session_json_is_its_row_without_state(viewer_client, org):
    make_call(org)
    body = viewer_client.get("/api/sessions/call-1/").json()
    assert body["turn_count"] == 3 and body["latency"]["p95"] == 1400.0
    assert "state" not in body and "transcript" not in body and SAID not in json.dumps(body)


def test_a_viewer_cannot_search_transcripts_an_operator_can(viewer_client, operator_client, org):
    make_call(org)
    refused = viewer_client.get("/api/sessions/", {"q": "Elm"})
    assert refused.status_code == 400 and "operator role" in refused.json()["error"]
    assert 'name="q"' not in viewer_client.get("/sessions/").content.decode()
    found = operator_client.get("/api/sessions/", {"q": "Elm"}).json()["sessions"]
    assert [s["id"] for s in found] == ["call-1"]
    # The list itself is figures: every role sees it.
    assert [s["id"] for s in viewer_client.get("/api/sessions/").json()["sessions"]] == ["call-1"]


def test_an_operator_reads_and_exports_contents(operator_client, org):
    make_call(org)
    operator_client.get("/api/sessions/call-1/platform/")  # its log lines: a read, in the audit log
    assert AuditEntry.objects.filter(action=AuditEntry.Action.SESSION_READ, target="call-1").exists()
    assert SAID in operator_client.get("/api/sessions/call-1/").content.decode()
    assert SAID in b"".join(operator_client.get("/api/sessions/call-1/events.ndjson").streaming_content).decode()
    assert 'id="transcript"' in operator_client.get("/sessions/call-1/").content.decode()


def test_an_operator_is_not_an_admin(operator_client):
    for url in ["/audit/", "/settings/members/", "/settings/keys/", "/settings/retention/", "/settings/prices/"]:
        response = operator_client.get(url)
        assert response.status_code == 403 and b"needs the admin role" in response.content, url
    assert operator_client.get("/api/audit/").status_code == 403


@pytest.mark.django_db(transaction=True)
async def test_a_viewers_session_socket_is_refused_an_operators_opens(org, live_settings):
    from rtvi_monitor.live.consumers import CLOSE_FORBIDDEN

    await sync_to_async(make_call)(org, "live-1", Session.Status.LIVE)

    async def cookie_of(username, role):
        client = Client()
        user = await sync_to_async(make_member)(org, username, role)
        await sync_to_async(client.force_login)(user)
        return f"sessionid={client.cookies['sessionid'].value}"

    viewer = browser_socket("/ws/sessions/live-1/", await cookie_of("v", Role.VIEWER))
    connected, code = await viewer.connect()
    assert not connected and code == CLOSE_FORBIDDEN
    # The list's socket carries figures only: a viewer may watch it.
    listing = browser_socket("/ws/sessions/", await cookie_of("v2", Role.VIEWER))
    assert (await listing.connect())[0]
    first = json.loads(await listing.receive_from(5))
    assert first["type"] == "live" and SAID not in json.dumps(first)
    await listing.disconnect()
    operator = browser_socket("/ws/sessions/live-1/", await cookie_of("o", Role.OPERATOR))
    assert (await operator.connect())[0]
    await operator.disconnect()


def test_a_viewer_does_not_see_an_agents_log_lines_an_operator_does(viewer_client, operator_client, org, cloud):  # noqa: F811
    from tests.agents.test_platform_pages import PAGE
    from tests.platform_samples import fake_pipecat_cloud

    fake_pipecat_cloud(cloud)
    html = viewer_client.get(PAGE).content.decode()
    assert 'data-testid="logs-hidden"' in html and "Bot crashed" not in html
    assert not [r for r in cloud.get_requests() if r.url.path.endswith("/logs")]  # not even asked for
    assert "Bot crashed: TimeoutError" in operator_client.get(PAGE).content.decode()


# --- keys: scopes and expiry ---------------------------------------------------------------


def test_a_read_key_reads_and_cannot_write(client, org):
    make_call(org)
    record, key = ApiKey.issue(org, "reader")
    record.scopes = "read"
    record.save()
    assert client.get("/api/sessions/call-1/events/", **bearer(key)).status_code == 200
    rule = {"name": "x", "condition": "fatal_error"}
    refused = client.post("/api/alerts/rules/", json.dumps(rule), content_type="application/json", **bearer(key))
    assert refused.status_code == 403 and "needs 'write'" in refused.json()["error"]
    assert client.delete("/api/sessions/call-1/", **bearer(key)).status_code == 403
    assert Session.objects.filter(session_id="call-1").exists()


def test_a_write_only_key_cannot_read(client, org):
    record, key = ApiKey.issue(org, "writer")
    record.scopes = "write"
    record.save()
    assert client.get("/api/sessions/", **bearer(key)).status_code == 403
    rule = {"name": "fatal", "condition": "fatal_error"}
    made = client.post("/api/alerts/rules/", json.dumps(rule), content_type="application/json", **bearer(key))
    assert made.status_code == 201


def test_an_expired_key_is_refused_like_a_revoked_one(client, org):
    record, key = ApiKey.issue(org, "old")
    assert client.get("/api/sessions/", **bearer(key)).status_code == 200
    record.expires_at = timezone.now() - timedelta(seconds=1)
    record.save()
    refused = client.get("/api/sessions/", **bearer(key))
    assert refused.status_code == 401 and "expired" in refused.json()["error"]
    assert client.get("/metrics", **bearer(key)).status_code == 401


def test_keys_made_on_the_settings_page_have_their_scopes_and_expiry_and_are_shown_once(staff_client, org):
    form = {"do": "key", "name": "grafana", "scopes": ["read"], "expires_in_days": "30"}
    form["nonce"] = nonce_of(staff_client, "/settings/keys/")
    page = staff_client.post("/settings/keys/", form)
    assert page["Cache-Control"] == "no-store"
    html = page.content.decode()
    secret = html.split('data-testid="secret-value">')[1].split("<")[0]
    again = staff_client.post("/settings/keys/", form, follow=True)  # a reload sends it again: nothing made
    assert "sent already" in again.content.decode() and secret not in again.content.decode()
    assert ApiKey.objects.filter(name="grafana").count() == 1
    record = ApiKey.objects.get(name="grafana")
    assert record.scopes == "read" and record.expires_at > timezone.now() + timedelta(days=29)
    assert secret.startswith("pk_") and record.key_hash != secret and secret not in record.key_hash
    assert secret not in staff_client.get("/settings/keys/").content.decode()  # once
    assert AuditEntry.objects.filter(action=AuditEntry.Action.KEY_CREATED, target=f"{record.key_prefix}…").exists()
    staff_client.post("/settings/keys/", {"do": "revoke-key", "id": record.pk})
    assert Client().get("/api/sessions/", **bearer(secret)).status_code == 401


# --- an organization's admin pages: theirs and nobody else's -------------------------------


def test_an_admin_of_one_organization_cannot_touch_anothers(staff_client, org, other_org):
    theirs_key, _ = ApiKey.issue(other_org, "theirs")
    theirs_member = Membership.objects.get(user=make_member(other_org, "globex-admin", Role.ADMIN))
    assert staff_client.post("/settings/keys/", {"do": "revoke-key", "id": theirs_key.pk}).status_code == 404
    assert (
        staff_client.post("/settings/members/", {"do": "role", "membership": theirs_member.pk, "role": "viewer"})
    ).status_code == 404
    assert staff_client.post("/settings/members/", {"do": "remove", "membership": theirs_member.pk}).status_code == 404
    theirs_key.refresh_from_db()
    theirs_member.refresh_from_db()
    assert theirs_key.revoked_at is None and theirs_member.role == Role.ADMIN
    assert "theirs" not in staff_client.get("/settings/keys/").content.decode()
    assert "globex-admin" not in staff_client.get("/settings/members/").content.decode()


def test_roles_change_and_the_last_admin_stays(staff_client, staff_user, org):
    member = make_member(org, "ana", Role.VIEWER)
    membership = Membership.objects.get(user=member)
    staff_client.post("/settings/members/", {"do": "role", "membership": membership.pk, "role": "operator"})
    membership.refresh_from_db()
    assert membership.role == Role.OPERATOR
    entry = AuditEntry.objects.get(action=AuditEntry.Action.ROLE_CHANGED)
    assert entry.target == "ana" and entry.detail == {"before": "viewer", "after": "operator"}
    mine = Membership.objects.get(user=staff_user)
    staff_client.post("/settings/members/", {"do": "role", "membership": mine.pk, "role": "viewer"})
    staff_client.post("/settings/members/", {"do": "remove", "membership": mine.pk})
    mine.refresh_from_db()
    assert mine.role == Role.ADMIN  # the only admin: neither demoted nor removed


def test_an_organization_keeps_one_admin_by_one_rule(staff_user, org):
    """Membership.leaves_no_admin: the members page and single sign-on both ask it (neither counts admins itself)."""
    mine = Membership.objects.get(user=staff_user)
    viewer = Membership.objects.get(user=make_member(org, "vi", Role.VIEWER))
    assert mine.leaves_no_admin(Role.VIEWER) and mine.leaves_no_admin(None) and not mine.leaves_no_admin(Role.ADMIN)
    assert not viewer.leaves_no_admin(None) and not viewer.leaves_no_admin(Role.OPERATOR)
    Membership.objects.filter(pk=viewer.pk).update(role=Role.ADMIN)  # a second admin: either may go now
    assert not mine.leaves_no_admin(None) and not viewer.leaves_no_admin(Role.VIEWER)
    for path in ("dashboard/access/oidc.py", "dashboard/org/views.py"):
        source = (Path(__file__).resolve().parents[2] / path).read_text()
        assert "leaves_no_admin(" in source and "role=Role.ADMIN" not in source, path


def test_an_invitation_makes_a_member_once(staff_client, org):
    nonce = nonce_of(staff_client, "/settings/members/")
    page = staff_client.post(
        "/settings/members/", {"do": "invite", "email": "new@example.com", "role": "viewer", "nonce": nonce}
    )
    assert "invite-link" not in staff_client.get("/settings/members/").content.decode()  # shown once
    link = page.content.decode().split('data-testid="invite-link">')[1].split("<code>")[1].split("</code>")[0]
    path = link.split("testserver", 1)[1]
    stranger = Client()
    assert b"Join Acme Voice" in stranger.get(path).content
    joined = stranger.post(
        path, {"username": "newbie", "password1": "a-long-pass-phrase-9", "password2": "a-long-pass-phrase-9"}
    )
    assert joined.status_code == 302
    membership = Membership.objects.get(user__username="newbie")
    assert membership.organization == org and membership.role == Role.VIEWER
    assert membership.user.email == "new@example.com" and not membership.user.is_staff
    assert stranger.get("/sessions/").status_code == 200  # signed in, a viewer
    again = Client().post(
        path, {"username": "other", "password1": "a-long-pass-phrase-9", "password2": "a-long-pass-phrase-9"}
    )
    assert again.status_code == 404 and not Membership.objects.filter(user__username="other").exists()
    actions = set(AuditEntry.objects.filter(organization=org).values_list("action", flat=True))
    assert {AuditEntry.Action.MEMBER_INVITED, AuditEntry.Action.MEMBER_JOINED} <= actions


def test_rows_pages_save_audit_and_validate(staff_client, org):
    from rtvi_monitor.alerts.models import AlertRule
    from rtvi_monitor.redaction.models import RedactionRule

    bad = staff_client.post("/settings/redaction/", {"name": "member-id", "pattern": "(unclosed", "enabled": "on"})
    assert bad.status_code == 400 and not RedactionRule.objects.exists()
    staff_client.post("/settings/redaction/", {"name": "member-id", "pattern": r"M-\d{6}", "enabled": "on"})
    assert RedactionRule.objects.get(organization=org).pattern == r"M-\d{6}"
    staff_client.post(
        "/settings/prices/",
        {
            "model": "gpt-4o",
            "usd_per_million_input_tokens": "2.5",
            "usd_per_million_output_tokens": "10",
            "usd_per_thousand_characters": "0",
            "usd_per_audio_minute": "0",
        },
    )
    assert org.prices.get().usd_per_million_input_tokens == 2.5
    staff_client.post(
        "/settings/alert-rules/",
        {"name": "slow", "condition": "turn_latency_p95_ms", "threshold": "2", "agent_choice": "", "enabled": "on"},
    )
    rule = AlertRule.objects.get(organization=org)
    assert rule.threshold == 2000 and rule.target_agent is None  # typed in seconds, beside its unit; kept in ms
    staff_client.post("/settings/alert-rules/", {"do": "delete", "id": rule.pk})
    assert not AlertRule.objects.exists()
    actions = list(AuditEntry.objects.filter(organization=org).values_list("action", "target"))
    assert (AuditEntry.Action.RULE_CHANGED, "redaction rule: member-id") in actions
    assert (AuditEntry.Action.PRICE_CHANGED, "price: gpt-4o") in actions
    assert (AuditEntry.Action.RULE_DELETED, "alert rule: slow") in actions


# --- several organizations -----------------------------------------------------------------


def test_a_member_of_two_organizations_switches_between_them(client, org, other_org):
    user = make_member(org, "both", Role.OPERATOR)
    Membership.objects.create(user=user, organization=other_org, role=Role.VIEWER)
    make_call(org, "acme-call")
    make_call(other_org, "globex-call")
    client.force_login(user)
    first = client.get("/sessions/").content.decode()
    assert "acme-call" in first and "globex-call" not in first and 'id="organization-switch"' in first
    client.post("/organization/", {"organization": str(other_org.pk), "next": "/sessions/acme-call/"})
    now = client.get("/sessions/").content.decode()
    assert "globex-call" in now and "acme-call" not in now
    assert client.get("/api/sessions/globex-call/events/").status_code == 403  # a viewer there
    assert client.get("/api/sessions/acme-call/").status_code == 404  # not in this organization
    stranger_org = type(org).objects.create(name="Initech")
    assert client.post("/organization/", {"organization": str(stranger_org.pk)}).status_code == 404


def test_a_user_need_not_be_staff_and_staff_alone_is_nothing(client, org, django_user_model):
    staff = django_user_model.objects.create_user("site-staff", password="x-long-password-1", is_staff=True)
    client.force_login(staff)
    assert client.get("/sessions/").status_code == 403
    assert client.get("/api/sessions/").status_code == 403


# --- what a bot's errors say, and where alerts go ------------------------------------------


QUOTED = "Error executing function call [lookup_order]: card 4111 for Jane Roe at 12 Elm Street"


def test_a_viewer_sees_an_errors_kind_not_what_it_quotes(viewer_client, operator_client, org, agents):
    from tests.session_samples import error_event

    session = Session.objects.create(organization=org, session_id="loud", agent=agents[0], error_count=1)
    error_event(session, 1, QUOTED, ago=60.0)
    for path in ("/", "/overview/panel/"):
        html = viewer_client.get(path).content.decode()
        assert "Error executing function call [lookup_order]: …" in html and "Jane Roe" not in html
        assert "Jane Roe" in operator_client.get(path).content.decode()


def test_a_viewer_sees_an_alerts_figures_not_the_error_it_quotes(viewer_client, operator_client, org):
    from rtvi_monitor.alerts.models import Alert, AlertRule

    rule = AlertRule.objects.create(
        organization=org,
        name="fatal",
        condition="fatal_error",
        webhook_url="https://hooks.slack.com/services/T0/B0/s3cr3t",
    )
    Alert.objects.create(
        rule=rule,
        organization=org,
        summary=f"Fatal error in 1 session (support-bot): {QUOTED}",
        figures={"sessions": 1, "errors": [QUOTED]},
        session_ids=["loud"],
    )
    for client in (viewer_client, operator_client):
        page = client.get("/alerts/").content.decode()
        api = client.get("/api/alerts/").content.decode()
        assert "Fatal error in 1 session (support-bot)" in page
        assert ("Jane Roe" in page + api) == (client is operator_client)
        # A Slack hook's path works as a password: only admins (and keys) see it whole.
        assert "s3cr3t" not in page + api + client.get("/api/alerts/rules/").content.decode()
        assert "hooks.slack.com (webhook)" in page


def test_v1_agents_takes_a_key_with_read(client, org):
    record, key = ApiKey.issue(org, "writer")
    record.scopes = "write"
    record.save()
    assert client.get("/v1/agents", **bearer(key)).status_code == 403
    assert client.get("/v1/agents/support-bot/logs", **bearer(key)).status_code == 403
    record.scopes = "read"
    record.save()
    assert client.get("/v1/agents", **bearer(key)).status_code == 200


@pytest.mark.django_db(transaction=True)
async def test_open_sockets_stop_when_a_member_is_demoted_removed_or_signs_out(org, live_settings, settings):
    from rtvi_monitor.live.consumers import CLOSE_FORBIDDEN

    settings.BROWSER_ACCESS_CHECK = 0.1
    await sync_to_async(make_call)(org, "live-1", Session.Status.LIVE)

    async def signed_in(username):
        client = Client()
        user = await sync_to_async(make_member)(org, username, Role.OPERATOR)
        await sync_to_async(client.force_login)(user)
        return client, user, f"sessionid={client.cookies['sessionid'].value}"

    async def closed(socket) -> int:
        while True:
            frame = await socket.receive_output(3)
            if frame["type"] == "websocket.close":
                return frame["code"]

    _, demoted, cookie = await signed_in("demoted")
    watching = browser_socket("/ws/sessions/live-1/", cookie)
    assert (await watching.connect())[0]
    await sync_to_async(Membership.objects.filter(user=demoted).update)(role=Role.VIEWER)
    assert await closed(watching) == CLOSE_FORBIDDEN

    _, removed, cookie = await signed_in("removed")
    listing = browser_socket("/ws/sessions/", cookie)
    assert (await listing.connect())[0]
    await sync_to_async(Membership.objects.filter(user=removed).delete)()
    assert await closed(listing) == CLOSE_FORBIDDEN

    client, _, cookie = await signed_in("leaving")
    listing = browser_socket("/ws/sessions/", cookie)
    assert (await listing.connect())[0]
    await sync_to_async(client.logout)()
    assert await closed(listing) == CLOSE_FORBIDDEN

    _, _, cookie = await signed_in("staying")
    listing = browser_socket("/ws/sessions/", cookie)
    assert (await listing.connect())[0]
    assert json.loads(await listing.receive_from(3))["type"] == "live"
    assert await listing.receive_nothing(0.5)  # five checks later, still open
    await listing.disconnect()


def test_keys_and_tokens_are_shown_revoked_and_created_by_one_template(staff_client, org):
    """keys.html's two tables end their rows with _secret_cells.html and create with _secret_form.html."""
    from rtvi_monitor.live.models import IngestToken

    key, _ = ApiKey.issue(org, "old-script")
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(days=1))
    IngestToken.issue(org, "bot")
    html = staff_client.get("/settings/keys/").content.decode()
    assert html.count('value="revoke-key"') == 1 and html.count('value="revoke-token"') == 1
    assert '<td data-label="State">expired</td>' in html and '<td data-label="State">active</td>' in html
    assert 'value="key"' in html and 'value="token"' in html and "Create a key" in html and "Create a token" in html
    keys = (Path(__file__).resolve().parents[2] / "templates/org/keys.html").read_text()
    assert "<form" not in keys and keys.count("_secret_cells.html") == 2 and keys.count("_secret_form.html") == 2
