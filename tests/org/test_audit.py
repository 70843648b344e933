"""The audit log: who read, exported, created, revoked or changed what; append-only; each organization its own.

Through the real URLconf (pages, API, admin, login) and the real socket router.
"""

import json

import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from dashboard.org.models import ApiKey, AuditEntry, AuditImmutable, Membership
from rtvi_monitor.redaction.models import RedactionRule
from tests.session_samples import make_session
from tests.sockets import browser_socket

pytestmark = pytest.mark.django_db
Action = AuditEntry.Action
CREATED_AT = {"created_at_0": "2026-11-24", "created_at_1": "10:00:00"}  # the admin form's date and time


def entries(org, action=None) -> list[AuditEntry]:
    found = AuditEntry.objects.filter(organization=org)
    return list(found.filter(action=action) if action else found)


def bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.fixture
def admin_client(client, org, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="correct-horse-battery")
    Membership.objects.create(user=user, organization=org)
    client.force_login(user)
    return client


def test_reading_a_sessions_page_is_recorded_once_a_minute_per_reader(staff_client, org):
    make_session(org, "call-1")
    assert staff_client.get("/sessions/call-1/").status_code == 200
    assert staff_client.get("/sessions/call-1/").status_code == 200  # again, at once: the same read
    (entry,) = entries(org, Action.SESSION_READ)
    assert (entry.actor, entry.ip, entry.target, entry.detail) == ("ops", "127.0.0.1", "call-1", {"via": "page"})
    assert entry.user.username == "ops"
    cache.clear()  # a minute on
    staff_client.get("/api/sessions/call-1/events/")
    assert [e.detail["via"] for e in entries(org, Action.SESSION_READ)] == ["api: session_events_page", "page"]


def test_api_reads_name_the_key_and_every_export_is_recorded(client, org, api_key):
    make_session(org, "call-1")
    assert client.get("/api/sessions/call-1/", **bearer(api_key)).status_code == 200
    (read,) = entries(org, Action.SESSION_READ)
    assert read.actor == f"API key {api_key[:10]}… (test)" and read.user is None
    for _ in range(2):
        response = client.get("/api/sessions/call-1/events.ndjson", **bearer(api_key))
        b"".join(response.streaming_content)
    assert len(entries(org, Action.SESSION_EXPORT)) == 2


def test_another_organizations_session_is_neither_read_nor_recorded(client, org, other_org):
    make_session(other_org, "theirs")
    _, key = ApiKey.issue(org, "ours")
    assert client.get("/api/sessions/theirs/", **bearer(key)).status_code == 404
    assert entries(org, Action.SESSION_READ) == [] and entries(other_org, Action.SESSION_READ) == []


@pytest.mark.usefixtures("live_path")
async def test_a_page_watching_a_session_over_its_socket_is_recorded(org, staff_cookie):
    await sync_to_async(make_session)(org, "call-1")
    page = browser_socket("/ws/sessions/call-1/", staff_cookie)
    assert (await page.connect())[0]
    await page.disconnect()
    (entry,) = await sync_to_async(entries)(org, Action.SESSION_READ)
    assert (entry.actor, entry.detail) == ("ops", {"via": "socket"})


def test_credentials_made_and_revoked_are_recorded_with_who(admin_client, org):
    call_command("create_ingest_token", "--org", org.name, stdout=open("/dev/null", "w"), stderr=open("/dev/null", "w"))
    (made,) = entries(org, Action.KEY_CREATED)
    assert made.actor == "manage.py create_ingest_token" and made.detail["kind"] == "ingest token"
    response = admin_client.post(
        "/admin/dashboard/apikey/add/", {"organization": org.pk, "name": "ci", "revoked_at_0": "", "revoked_at_1": ""}
    )
    assert response.status_code == 302, response.content[:2000]
    key = ApiKey.objects.get(name="ci")
    by_admin = entries(org, Action.KEY_CREATED)[0]
    assert (by_admin.actor, by_admin.target, by_admin.detail["kind"]) == (
        "root",
        f"{key.key_prefix}…",
        "private API key",
    )
    admin_client.post("/admin/dashboard/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    (revoked,) = entries(org, Action.KEY_REVOKED)
    assert (revoked.actor, revoked.target) == ("root", f"{key.key_prefix}…")


def test_rule_changes_are_recorded(admin_client, client, org, api_key):
    response = admin_client.post(
        "/admin/rtvi_monitor/redactionrule/add/",
        {
            "organization": org.pk,
            "name": "member-id",
            "pattern": r"M-\d{6}",
            "enabled": "on",
            "created_at_0": "2026-11-24",
            "created_at_1": "10:00:00",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    rule = RedactionRule.objects.get()
    admin_client.post(f"/admin/rtvi_monitor/redactionrule/{rule.pk}/delete/", {"post": "yes"})
    assert [e.action for e in entries(org)][:2] == [Action.RULE_DELETED, Action.RULE_CHANGED]
    body = {"name": "Fatal", "condition": "fatal_error"}
    created = client.post("/api/alerts/rules/", json.dumps(body), content_type="application/json", **bearer(api_key))
    assert created.status_code == 201, created.content
    latest = entries(org, Action.RULE_CHANGED)[0]
    assert latest.target == "alert rule: Fatal" and latest.actor.startswith("API key ")


def test_a_bad_redaction_rule_is_refused_in_the_admin_and_not_recorded(admin_client, org):
    response = admin_client.post(
        "/admin/rtvi_monitor/redactionrule/add/",
        {
            "organization": org.pk,
            "name": "member-id",
            "pattern": "M-(",
            "enabled": "on",
            "created_at_0": "2026-11-24",
            "created_at_1": "10:00:00",
        },
    )
    assert response.status_code == 200 and b"not a regular expression" in response.content
    assert not RedactionRule.objects.exists() and entries(org, Action.RULE_CHANGED) == []


def test_sign_ins_and_failed_sign_ins_are_recorded(client, staff_user, org):
    client.post("/login/", {"username": "ops", "password": "wrong"})
    client.post("/login/", {"username": "ops", "password": "correct-horse-battery"})
    assert [e.action for e in entries(org)] == [Action.SIGN_IN, Action.SIGN_IN_FAILED]
    assert {e.ip for e in entries(org)} == {"127.0.0.1"}


def test_entries_cannot_be_changed_or_deleted_through_the_product(admin_client, org):
    make_session(org, "call-1")
    admin_client.get("/sessions/call-1/")
    entry = entries(org, Action.SESSION_READ)[0]
    entry.target = "something else"
    with pytest.raises(AuditImmutable):
        entry.save()
    with pytest.raises(AuditImmutable):
        entry.delete()
    with pytest.raises(AuditImmutable):
        AuditEntry.objects.filter(organization=org).update(actor="nobody")
    with pytest.raises(AuditImmutable):
        AuditEntry.objects.filter(organization=org).delete()
    assert admin_client.get("/admin/dashboard/auditentry/").status_code == 200
    assert admin_client.get(f"/admin/dashboard/auditentry/{entry.pk}/delete/").status_code == 403
    admin_client.post(f"/admin/dashboard/auditentry/{entry.pk}/change/", {"actor": "nobody"})
    assert AuditEntry.objects.get(pk=entry.pk).actor == "root"


def test_the_audit_api_is_the_organizations_own_filtered_paged_and_exported(client, org, other_org, api_key):
    for i in range(3):
        make_session(org, f"call-{i}")
        client.get(f"/api/sessions/call-{i}/", **bearer(api_key))
    make_session(other_org, "theirs")
    _, other_key = ApiKey.issue(other_org, "theirs")
    client.get("/api/sessions/theirs/", **bearer(other_key))

    assert client.get("/api/audit/").status_code == 401
    body = client.get("/api/audit/?action=session_read", **bearer(api_key)).json()
    assert [e["target"] for e in body["entries"]] == ["call-2", "call-1", "call-0"]
    assert body["next_before"] is None
    assert [e["target"] for e in client.get("/api/audit/?target=call-1", **bearer(api_key)).json()["entries"]] == [
        "call-1"
    ]
    theirs = client.get("/api/audit/", **bearer(other_key)).json()["entries"]
    assert {e["target"] for e in theirs if e["action"] == "session_read"} == {"theirs"}
    bad = client.get("/api/audit/?action=everything", **bearer(api_key))
    assert bad.status_code == 400 and "action: expected one of" in bad.json()["error"]
    assert "since: expected an ISO 8601" in client.get("/api/audit/?since=yesterday", **bearer(api_key)).json()["error"]

    export = client.get("/api/audit/?format=ndjson", **bearer(api_key))
    lines = [json.loads(line) for line in b"".join(export.streaming_content).decode().splitlines()]
    assert {line["target"] for line in lines if line["action"] == "session_read"} == {"call-0", "call-1", "call-2"}
    assert entries(org, Action.AUDIT_EXPORT)[0].actor.startswith("API key ")


def test_the_audit_page_shows_the_organizations_entries_and_says_what_is_wrong_with_a_filter(
    staff_client, org, other_org
):
    make_session(org, "call-1")
    make_session(other_org, "theirs")
    staff_client.get("/sessions/call-1/")
    AuditEntry.objects.create(organization=other_org, actor="globex-ops", action=Action.SESSION_READ, target="theirs")
    AuditEntry.objects.create(organization=org, actor="<script>x</script>", action=Action.SIGN_IN_FAILED)
    html = staff_client.get("/audit/").content.decode()
    assert 'data-action="session_read"' in html and "call-1" in html
    assert "theirs" not in html and "globex-ops" not in html
    assert "<script>x" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    bad = staff_client.get("/audit/?since=yesterday")
    assert bad.status_code == 200 and "since: expected an ISO 8601" in bad.content.decode()
    assert staff_client.get("/audit/?action=key_created").content.decode().count('data-action="') == 0


def test_an_ended_session_is_erased_with_its_messages_and_spans_and_the_erase_is_recorded(client, org, api_key):
    from rtvi_monitor.sessions.models import Event, Session, Span

    make_session(org, "call-1", status="ended")
    make_session(org, "call-2", status="ended")
    Span.objects.create(
        organization=org,
        trace_id="1" * 32,
        span_id="2" * 16,
        conversation_id="call-1",
        name="llm",
        start_ns=1,
        end_ns=2,
    )
    erased = client.delete("/api/sessions/call-1/", **bearer(api_key))
    assert erased.status_code == 200, erased.content
    assert erased.json()["erased"] == "call-1" and erased.json()["spans"] == 1 and erased.json()["messages"] > 0
    assert not Session.objects.filter(session_id="call-1").exists() and not Span.objects.exists()
    assert not Event.objects.filter(session__session_id="call-1").exists()
    assert Event.objects.filter(session__session_id="call-2").exists()  # only that one
    (entry,) = entries(org, Action.SESSION_ERASED)
    assert entry.target == "call-1" and entry.detail["spans"] == 1 and entry.actor.startswith("API key ")
    assert client.get("/api/sessions/call-1/", **bearer(api_key)).status_code == 404


def test_a_live_session_another_organizations_or_a_browsers_erase_is_refused(client, staff_client, org, other_org):
    from rtvi_monitor.sessions.models import Session

    make_session(org, "live-1")
    make_session(org, "ended-1", status="ended")
    _, key = ApiKey.issue(org, "ours")
    _, other_key = ApiKey.issue(other_org, "theirs")
    live = client.delete("/api/sessions/live-1/", **bearer(key))
    assert live.status_code == 409 and "is live" in live.json()["error"]
    assert client.delete("/api/sessions/ended-1/", **bearer(other_key)).status_code == 404
    assert staff_client.delete("/api/sessions/ended-1/").status_code == 403  # a browser's cookie is not enough
    assert Session.objects.filter(session_id__in=["live-1", "ended-1"]).count() == 2
    assert entries(org, Action.SESSION_ERASED) == []


def test_deleting_a_session_in_the_site_admin_erases_it_as_the_api_does_and_is_recorded(admin_client, org):
    from rtvi_monitor.sessions.models import Session

    make_session(org, "call-1", status="ended")
    make_session(org, "live-1")
    ids = list(Session.objects.values_list("pk", flat=True))
    admin_client.post(
        "/admin/rtvi_monitor/session/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert list(Session.objects.values_list("session_id", flat=True)) == ["live-1"]
    (entry,) = entries(org, Action.SESSION_ERASED)
    assert (entry.target, entry.actor) == ("call-1", "root")


# --- details read as sentences ---------------------------------------------------------------------

PRICE = {
    "usd_per_million_input_tokens": "2.5",
    "usd_per_million_output_tokens": "10",
    "usd_per_thousand_characters": "0",
    "usd_per_audio_minute": "0",
}
REPRS = ("True", "False", "None", "[", "]", "{", "}", "'")
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 .:-_@…", max_size=20)
KEYS = st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True).filter(lambda key: key not in ("none", "true", "false"))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | WORDS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(KEYS, VALUES, max_size=6))
def test_any_detail_reads_as_a_sentence_with_no_python_in_it(detail):
    from dashboard.org.audit import describe

    sentence = describe(detail)
    assert not [token for token in REPRS if token in sentence], sentence
    assert sentence == "" or (sentence.endswith(".") and not sentence[0].islower())


@pytest.mark.parametrize(
    ("detail", "sentence"),
    [
        ({"mode": "cancel", "ok": True, "error": ""}, "Mode: cancel; ok: yes."),  # ended a live session
        ({"text_length": 12, "run_immediately": False, "ok": False, "error": "no answer"}, None),
        ({"changed": ["name", "threshold"]}, "Changed: name, threshold."),  # a rule's form
        ({"created": True}, "Created: yes."),
        ({"channel_added": "pagerduty"}, "Channel added: pagerduty."),
        ({"minutes": 0, "until": None}, "Minutes: 0; until: none (lifted)."),  # a silence lifted
        ({"assignee": None}, "Assignee: nobody."),
        (
            {"keep_messages_days": None, "keep_sessions_days": 30},
            "Keep messages days: for ever; keep sessions days: 30.",
        ),
        ({"erased": ["call-1", "call-2"], "live": [], "messages": 18, "spans": 0}, None),
        ({"locked": True}, "Locked: yes."),  # a sign-in refused while locked out
        ({"kept": "admin", "claimed": "viewer", "via": "oidc"}, "Kept: admin; claimed: viewer; via: oidc."),
        ({}, ""),
    ],
)
def test_what_the_writers_write_reads_as_a_sentence(detail, sentence):
    from dashboard.org.audit import describe

    said = describe(detail)
    assert not [token for token in REPRS if token in said], said
    if sentence is not None:
        assert said == sentence


def test_the_audit_page_and_api_show_the_sentence(staff_client, org, api_key):
    AuditEntry.objects.create(
        organization=org, actor="ops", action=Action.SESSION_ENDED, target="call-1", detail={"ok": False, "error": None}
    )
    html = staff_client.get("/audit/").content.decode()
    assert "Ok: no; error: none." in html and "False" not in html
    (entry,) = [e for e in staff_client.get("/api/audit/").json()["entries"] if e["target"] == "call-1"]
    assert entry["summary"] == "Ok: no; error: none." and entry["detail"] == {"ok": False, "error": None}


def test_revoking_an_invitation_is_recorded_as_that(staff_client, org):
    from dashboard.org.models import Invitation

    invitation, _ = Invitation.issue(org, "new@example.com", "viewer")
    staff_client.post("/settings/members/", {"do": "revoke", "invitation": str(invitation.pk)})
    (entry,) = entries(org, Action.INVITATION_REVOKED)
    assert (entry.actor, entry.target, entry.summary) == ("ops", "new@example.com", "Role: viewer.")
    assert entry.get_action_display() == "revoked an invitation"
    assert not entries(org, Action.KEY_REVOKED)


def test_a_rules_channel_and_fields_are_recorded_in_words(staff_client, org):
    staff_client.post("/settings/prices/", {"model": "gpt-4o", **PRICE})
    price = entries(org, Action.PRICE_CHANGED)[0]
    assert price.summary == "Created: yes."
    from dashboard.org.models import Price

    staff_client.post(
        "/settings/prices/",
        {"id": Price.objects.get().pk, "model": "gpt-4o", **PRICE, "usd_per_million_input_tokens": "3"},
    )
    assert entries(org, Action.PRICE_CHANGED)[0].summary == "Changed: usd per million input tokens."
