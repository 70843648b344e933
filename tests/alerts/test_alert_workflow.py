"""Alerts as a workflow: acknowledge, silence, assign, notes, re-notification, and each channel's payload.

Slack, PagerDuty and Opsgenie are a real HTTP server on this machine (their HTTP boundary): what the
dashboard sends them is read back and checked against each one's documented format.
"""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asgiref.sync import async_to_sync
from django.core import mail
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from dashboard.agents.models import Agent
from dashboard.org.models import AuditEntry
from rtvi_monitor.alerts import rules as alerts
from rtvi_monitor.alerts.models import Alert, AlertChannel, AlertDelivery, AlertNote, AlertRule
from rtvi_monitor.sessions.models import Session
from tests.conftest import make_member
from tests.session_samples import error_event

pytestmark = pytest.mark.django_db

C = AlertRule.Condition
PD_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
GENIE_KEY = "3f2c9b1e-7d4a-4c1b-9a7e-0123456789ab"


class Upstream:
    """Slack, PagerDuty and Opsgenie on 127.0.0.1: every request kept; answers set per path prefix."""

    def __init__(self):
        self.requests: list[dict] = []
        self.answers: dict[str, tuple[int, str]] = {}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                upstream.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(body or b"null")}
                )
                status, text = next(
                    (answer for prefix, answer in upstream.answers.items() if self.path.startswith(prefix)),
                    (202, '{"status":"success","message":"Event processed"}'),
                )
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def to(self, prefix: str) -> list[dict]:
        return [r for r in self.requests if r["path"].startswith(prefix)]


@pytest.fixture
def upstream(settings):
    server = Upstream()
    settings.ALERT_PAGERDUTY_URL = f"{server.url}/v2/enqueue"
    settings.ALERT_OPSGENIE_URL = server.url
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True  # the Slack and webhook stand-ins are on loopback
    settings.DASHBOARD_URL = "https://rtvi.example.com"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    yield server
    server.server.shutdown()
    server.server.server_close()


def fatal_rule(org, **fields) -> AlertRule:
    return AlertRule.objects.create(organization=org, name="Fatal errors", condition=C.FATAL_ERROR, **fields)


def fatal_session(org, session_id="call-1", agent=None, text="LLM service returned 401 Unauthorized"):
    session = Session.objects.create(
        organization=org, session_id=session_id, agent=agent, fatal=True, error_count=1, last_event_at=timezone.now()
    )
    error_event(session, 1, text, fatal=True)
    return session


def evaluate(rule, now=None):
    rule = AlertRule.objects.select_related("organization", "agent").get(pk=rule.pk)
    return alerts.evaluate_rule(rule, now or timezone.now(), {})


def deliver_due():
    """What a round sends; a message queued by an evaluation "later" (now + 11 min) is due now too."""
    AlertDelivery.objects.filter(status="pending").update(next_attempt_at=timezone.now())
    claimed = alerts.claim_due(timezone.now())

    async def send():
        return [await alerts.deliver(delivery) for delivery in claimed]

    for delivery, error in zip(claimed, async_to_sync(send)(), strict=True):
        alerts.record(delivery, error, timezone.now())
    return claimed


@pytest.fixture
def firing(org, agents):
    """A firing fatal-error alert of `org`, its rule sending nowhere yet."""
    rule = fatal_rule(org, runbook_url="/alerts/runbook/#fatal-errors")
    fatal_session(org, agent=agents[0])
    evaluate(rule)
    return Alert.objects.get()


def post(client, path, body=None, **extra):
    return client.post(path, json.dumps(body if body is not None else {}), content_type="application/json", **extra)


def actions(org) -> list[tuple[str, str]]:
    return list(AuditEntry.objects.filter(organization=org).values_list("action", "actor"))


# --- acknowledge, silence, assign, notes through the API ---------------------------------------


def test_an_operator_acknowledges_once_and_it_is_audited(firing, operator_client, org):
    response = post(operator_client, f"/api/alerts/{firing.pk}/acknowledge/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["acknowledged"]["by"] == "operator" and body["acknowledged"]["at"]
    again = post(operator_client, f"/api/alerts/{firing.pk}/acknowledge/")
    assert again.status_code == 409 and "operator acknowledged this alert already" in again.json()["error"]
    assert actions(org).count((AuditEntry.Action.ALERT_ACKNOWLEDGED, "operator")) == 1


def test_viewers_read_but_do_not_act_and_other_organizations_see_nothing(firing, viewer_client, other_org):
    assert viewer_client.get(f"/api/alerts/{firing.pk}/").json()["id"] == firing.pk
    for path in ("acknowledge", "silence", "assign", "notes"):
        response = post(viewer_client, f"/api/alerts/{firing.pk}/{path}/", {"minutes": 5})
        assert response.status_code == 403 and "operator role" in response.json()["error"]
    assert viewer_client.post(f"/alerts/{firing.pk}/act/", {"do": "acknowledge"}).status_code == 403
    outsider = Client()
    outsider.force_login(make_member(other_org, "globex-admin", "admin"))
    assert outsider.get(f"/api/alerts/{firing.pk}/").status_code == 404
    assert post(outsider, f"/api/alerts/{firing.pk}/acknowledge/").status_code == 404
    assert outsider.post(f"/alerts/{firing.pk}/act/", {"do": "acknowledge"}).status_code == 404
    assert outsider.get(f"/alerts/{firing.pk}/").status_code == 404
    firing.refresh_from_db()
    assert firing.acknowledged_at is None


def test_a_key_acts_with_the_write_scope_and_is_named_in_the_log(firing, org, api_key):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    response = post(Client(), f"/api/alerts/{firing.pk}/notes/", {"text": "Rotating the LLM key"}, **auth)
    assert response.status_code == 200
    (note,) = response.json()["notes"]
    assert note["text"] == "Rotating the LLM key" and note["author"].startswith("API key ")
    assert AuditEntry.objects.get(action=AuditEntry.Action.ALERT_NOTE).actor.startswith("API key ")


def test_a_browser_session_must_send_its_csrf_token(firing, org):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(make_member(org, "ana", "operator"))
    refused = post(browser, f"/api/alerts/{firing.pk}/acknowledge/")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    browser.get("/alerts/")  # the page sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    assert post(browser, f"/api/alerts/{firing.pk}/acknowledge/", HTTP_X_CSRFTOKEN=token).status_code == 200


def test_silences_for_a_time_until_resolved_and_lifted(firing, operator_client, org):
    path = f"/api/alerts/{firing.pk}/silence/"
    body = post(operator_client, path, {"minutes": 60}).json()
    until = timezone.datetime.fromisoformat(body["silenced"]["until"])
    assert timedelta(minutes=59) < until - timezone.now() <= timedelta(minutes=60)
    assert body["silenced"]["by"] == "operator" and body["silenced"]["until_resolved"] is False
    body = post(operator_client, path, {"until_resolved": True}).json()
    assert body["silenced"] == {"until": None, "until_resolved": True, "by": "operator"}
    assert post(operator_client, path, {"minutes": 0}).json()["silenced"] is None
    details = list(
        AuditEntry.objects.filter(action=AuditEntry.Action.ALERT_SILENCED)
        .order_by("pk")
        .values_list("detail", flat=True)
    )
    assert [d.get("until") for d in details][1:] == ["resolved", None] and details[0]["minutes"] == 60


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, 'Send "minutes"'),
        ({"minutes": 5, "until_resolved": True}, 'Send "minutes"'),
        ({"minutes": "soon"}, "minutes: expected a whole number"),
        ({"minutes": -1}, "minutes: expected a whole number"),
        ({"minutes": 10081}, "minutes: expected a whole number"),
        ({"minutes": True}, "minutes: expected a whole number"),
        ({"until_resolved": "yes"}, "until_resolved: expected true or false"),
        ({"minutes": 5, "for": "me"}, "unknown field(s): for"),
    ],
)
def test_a_bad_silence_is_refused_saying_what_is_wrong(firing, operator_client, body, message):
    response = post(operator_client, f"/api/alerts/{firing.pk}/silence/", body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_bad_bodies_get_json_errors_not_500s(firing, operator_client):
    path = f"/api/alerts/{firing.pk}/notes/"
    response = operator_client.post(path, "{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"] == "The body is not a JSON object."
    assert post(operator_client, path, ["a list"]).status_code == 400
    assert "text:" in post(operator_client, path, {"text": "   "}).json()["error"]
    assert "at most 4000" in post(operator_client, path, {"text": "x" * 4001}).json()["error"]
    assert post(operator_client, "/api/alerts/999999/notes/", {"text": "x"}).status_code == 404
    assert operator_client.get(f"/api/alerts/{firing.pk}/acknowledge/").status_code == 405


def test_an_owner_is_a_member_of_the_organization(firing, operator_client, org, other_org):
    make_member(org, "bea", "viewer")
    make_member(other_org, "mallory", "admin")
    path = f"/api/alerts/{firing.pk}/assign/"
    assert post(operator_client, path, {"user": "bea"}).json()["assignee"] == "bea"
    refused = post(operator_client, path, {"user": "mallory"})
    assert refused.status_code == 400 and "'mallory' is not a member of Acme Voice" in refused.json()["error"]
    assert post(operator_client, path, {"user": 7}).status_code == 400
    assert post(operator_client, path, {"user": None}).json()["assignee"] is None
    details = (
        AuditEntry.objects.filter(action=AuditEntry.Action.ALERT_ASSIGNED)
        .order_by("pk")
        .values_list("detail", flat=True)
    )
    assert [d["assignee"] for d in details] == ["bea", None]


def test_a_resolved_alert_is_not_acknowledged_or_silenced_but_takes_notes(firing, operator_client):
    Alert.objects.filter(pk=firing.pk).update(status=Alert.Status.RESOLVED, resolved_at=timezone.now())
    assert post(operator_client, f"/api/alerts/{firing.pk}/acknowledge/").status_code == 409
    assert post(operator_client, f"/api/alerts/{firing.pk}/silence/", {"minutes": 5}).status_code == 409
    response = post(operator_client, f"/api/alerts/{firing.pk}/notes/", {"text": "Post-mortem: key rotated"})
    assert response.status_code == 200


# --- the page ---------------------------------------------------------------------------------


def test_the_page_acts_with_plain_forms_and_shows_notes_as_text(firing, operator_client, org):
    page = operator_client.get("/alerts/").content.decode()
    assert 'data-testid="acknowledge"' in page and 'href="/alerts/runbook/#fatal-errors"' in page
    response = operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "acknowledge", "next": "/alerts/"})
    assert response.status_code == 302 and response["Location"] == f"/alerts/#alert-{firing.pk}"
    operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "silence", "minutes": "resolved"})
    note = "<img src=x onerror=alert(1)> restarted the TTS"
    operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "note", "text": note})
    operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "assign", "user": "operator"})
    page = operator_client.get("/alerts/").content.decode()
    assert 'data-testid="acknowledged">acknowledged by operator' in page
    assert "silenced until it resolves by operator" in page and "owner: operator" in page
    assert "&lt;img src=x onerror=alert(1)&gt; restarted the TTS" in page and "<img src=x" not in page
    assert 'data-testid="acknowledge"' not in page  # taken: no button left
    detail = operator_client.get(f"/alerts/{firing.pk}/").content.decode()
    assert "&lt;img src=x" in detail and 'data-testid="deliveries"' in detail
    # Off-site "next" is not followed.
    response = operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "note", "text": "x", "next": "https://evil/"})
    assert response["Location"] == f"/alerts/#alert-{firing.pk}"
    bad = operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "silence", "minutes": "forever"}, follow=True)
    assert "minutes: expected a whole number" in bad.content.decode()
    assert AlertNote.objects.count() == 2


def test_viewers_see_the_state_but_no_forms(firing, viewer_client):
    page = viewer_client.get("/alerts/").content.decode()
    assert "Fatal errors" in page and 'data-testid="alert-actions"' not in page


def test_the_runbook_page_has_a_section_for_each_demo_rule(staff_client, org):
    call_command("seed_demo", stdout=open("/dev/null", "w"))
    page = staff_client.get("/alerts/runbook/").content.decode()
    seeded = AlertRule.objects.filter(organization__name="Demo Voice Co")
    assert seeded.count() == 4 and not seeded.filter(name="Slow turns (p95 over 2 s)").exists()
    for rule in seeded:
        anchor = rule.runbook_url.split("#")[1]
        assert f'id="{anchor}"' in page, anchor
    assert Client().get("/alerts/runbook/").status_code == 302  # login first


def test_the_runbook_markdown_is_escaped(monkeypatch, tmp_path, staff_client):
    from rtvi_monitor.alerts import views as alert_views

    source = tmp_path / "RUNBOOK.md"
    source.write_text("## Fatal <b>errors</b>\n\n- check `<script>` and [docs](javascript:alert(1))\n")
    monkeypatch.setattr(alert_views, "RUNBOOK", source)
    page = staff_client.get("/alerts/runbook/").content.decode()
    assert "Fatal &lt;b&gt;errors&lt;/b&gt;" in page and "<code>&lt;script&gt;</code>" in page
    assert 'href="javascript' not in page


# --- re-notification and silences -------------------------------------------------------------


def test_a_firing_alert_is_reminded_on_its_schedule_until_acknowledged(org, upstream, operator_client):
    rule = fatal_rule(org, renotify_minutes=10, webhook_url=f"{upstream.url}/hook")
    AlertChannel.objects.create(rule=rule, kind="pagerduty", secret=PD_KEY)
    fatal_session(org)
    start = timezone.now()
    evaluate(rule, now=start)
    alert = Alert.objects.get()
    assert alerts.remind_due(start + timedelta(minutes=9)) == 0
    assert alerts.remind_due(start + timedelta(minutes=10, seconds=1)) == 1
    reminders = AlertDelivery.objects.filter(event="reminder")
    assert list(reminders.values_list("channel", flat=True)) == ["webhook"]  # PagerDuty escalates by itself
    assert alerts.remind_due(start + timedelta(minutes=15)) == 0  # the next one 10 min after this one
    assert alerts.remind_due(start + timedelta(minutes=21)) == 1
    post(operator_client, f"/api/alerts/{alert.pk}/acknowledge/")
    assert alerts.remind_due(start + timedelta(hours=5)) == 0
    assert reminders.count() == 2


def test_a_silence_holds_reminders_until_it_ends(org, upstream, operator_client):
    rule = fatal_rule(org, renotify_minutes=10, email="oncall@example.com")
    fatal_session(org)
    evaluate(rule)
    alert = Alert.objects.get()
    post(operator_client, f"/api/alerts/{alert.pk}/silence/", {"minutes": 60})
    now = timezone.now()
    assert alerts.remind_due(now + timedelta(minutes=30)) == 0
    assert alerts.remind_due(now + timedelta(minutes=61)) == 1  # the silence ended: due at once
    post(operator_client, f"/api/alerts/{alert.pk}/silence/", {"until_resolved": True})
    assert alerts.remind_due(now + timedelta(days=2)) == 0


def test_a_silenced_alert_resolves_quietly_but_pagerduty_closes_its_incident(org, upstream, operator_client):
    rule = fatal_rule(org, window_minutes=10, webhook_url=f"{upstream.url}/hook")
    AlertChannel.objects.create(rule=rule, kind="pagerduty", secret=PD_KEY)
    fatal_session(org)
    evaluate(rule)
    alert = Alert.objects.get()
    post(operator_client, f"/api/alerts/{alert.pk}/silence/", {"until_resolved": True})
    post(operator_client, f"/api/alerts/{alert.pk}/acknowledge/")
    evaluate(rule, now=timezone.now() + timedelta(minutes=11))
    events = sorted(AlertDelivery.objects.values_list("event", "channel"))
    assert events == [
        ("acknowledged", "pagerduty"),
        ("fired", "pagerduty"),
        ("fired", "webhook"),
        ("resolved", "pagerduty"),
    ]


def test_turn_latency_needs_five_calls_of_the_agent(org, agents):
    slow = AlertRule.objects.create(organization=org, name="slow", condition=C.TURN_LATENCY_P95, threshold=1500)
    for i in range(4):
        Session.objects.create(organization=org, session_id=f"s{i}", agent=agents[0], latency_p95_ms=4000)
    assert evaluate(slow) == (0, 0)  # four slow calls: not yet the agent's p95
    Session.objects.create(organization=org, session_id="s4", agent=agents[0], latency_p95_ms=4000)
    assert evaluate(slow) == (1, 0)


# --- the channels' payloads --------------------------------------------------------------------


def test_pagerduty_is_triggered_acknowledged_and_resolved_on_one_dedup_key(org, agents, upstream, operator_client):
    rule = fatal_rule(org, window_minutes=10, runbook_url="/alerts/runbook/#fatal-errors")
    AlertChannel.objects.create(rule=rule, kind="pagerduty", secret=PD_KEY)
    fatal_session(org, agent=agents[0])
    evaluate(rule)
    alert = Alert.objects.get()
    deliver_due()
    post(operator_client, f"/api/alerts/{alert.pk}/acknowledge/")
    deliver_due()
    evaluate(rule, now=timezone.now() + timedelta(minutes=11))
    deliver_due()
    trigger, ack, resolve = (r["json"] for r in upstream.to("/v2/enqueue"))
    key = f"rtvi-{org.pk}-alert-{alert.pk}"
    assert [e["event_action"] for e in (trigger, ack, resolve)] == ["trigger", "acknowledge", "resolve"]
    assert {e["dedup_key"] for e in (trigger, ack, resolve)} == {key}
    assert {e["routing_key"] for e in (trigger, ack, resolve)} == {PD_KEY}
    assert ack == {"routing_key": PD_KEY, "event_action": "acknowledge", "dedup_key": key}
    payload = trigger["payload"]
    assert payload["summary"].startswith("[FIRING] Fatal errors: Fatal error in 1 session (support-bot)")
    assert payload["severity"] == "critical" and payload["source"] == "Acme Voice"  # every agent: the organization
    assert payload["class"] == "fatal_error" and payload["group"] == "Acme Voice"
    assert payload["custom_details"]["session_ids"] == ["call-1"]
    assert payload["custom_details"]["runbook_url"] == "https://rtvi.example.com/alerts/runbook/#fatal-errors"
    assert trigger["links"] == [
        {"href": f"https://rtvi.example.com/alerts/{alert.pk}/", "text": "Alert in the RTVI dashboard"},
        {"href": "https://rtvi.example.com/alerts/runbook/#fatal-errors", "text": "Runbook"},
    ]
    assert set(AlertDelivery.objects.values_list("status", flat=True)) == {"sent"}


def test_opsgenie_gets_an_alias_and_is_acknowledged_and_closed_by_it(org, upstream, operator_client):
    rule = fatal_rule(org, window_minutes=10, runbook_url="https://wiki.example.com/fatal")
    AlertChannel.objects.create(rule=rule, kind="opsgenie", secret=GENIE_KEY)
    fatal_session(org)
    evaluate(rule)
    alert = Alert.objects.get()
    deliver_due()
    post(operator_client, f"/api/alerts/{alert.pk}/acknowledge/")
    deliver_due()
    evaluate(rule, now=timezone.now() + timedelta(minutes=11))
    deliver_due()
    alias = f"rtvi-{org.pk}-alert-{alert.pk}"
    create, ack, close = upstream.to("/v2/alerts")
    assert create["path"] == "/v2/alerts"
    assert ack["path"] == f"/v2/alerts/{alias}/acknowledge?identifierType=alias"
    assert close["path"] == f"/v2/alerts/{alias}/close?identifierType=alias"
    assert {r["headers"]["Authorization"] for r in (create, ack, close)} == {f"GenieKey {GENIE_KEY}"}
    body = create["json"]
    assert body["alias"] == alias and body["priority"] == "P1" and len(body["message"]) <= 130
    assert body["message"].startswith("[FIRING] Fatal errors: Fatal error in 1 session")
    assert body["details"]["runbook"] == "https://wiki.example.com/fatal"
    assert "Runbook: https://wiki.example.com/fatal" in body["description"]
    assert ack["json"]["user"] == "operator" and ack["json"]["source"] == "RTVI dashboard"


def test_slack_gets_text_and_blocks_with_names_as_text_and_no_bot_words(org, upstream):
    rule = fatal_rule(org, runbook_url="/alerts/runbook/#fatal-errors")
    AlertChannel.objects.create(rule=rule, kind="slack", secret=f"{upstream.url}/services/T0/B0/XyZsecret")
    agent = Agent.objects.create(organization=org, name="<!channel> bot")
    fatal_session(org, agent=agent, text="<https://evil.example|reset your key>")
    evaluate(rule)
    deliver_due()
    (request,) = upstream.to("/services/")
    body = request["json"]
    assert body["text"].startswith("[FIRING] Fatal errors: Fatal error in 1 session")
    assert "evil.example" not in json.dumps(body)  # what the error said is in no alert (it can quote the caller)
    assert "<!channel>" not in json.dumps(body) and "&lt;!channel&gt;" in body["blocks"][1]["text"]["text"]
    assert body["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "FIRING: Fatal errors"}}
    buttons = {b["text"]["text"]: b["url"] for b in body["blocks"][-1]["elements"]}
    alert = Alert.objects.get()
    assert buttons == {
        "Open in the dashboard": f"https://rtvi.example.com/alerts/{alert.pk}/",
        "Runbook": "https://rtvi.example.com/alerts/runbook/#fatal-errors",
    }


def test_a_refusal_from_pagerduty_is_not_retried(org, upstream):
    upstream.answers["/v2/enqueue"] = (400, '{"status":"invalid event","errors":["Event object is invalid"]}')
    rule = fatal_rule(org)
    AlertChannel.objects.create(rule=rule, kind="pagerduty", secret=PD_KEY)
    fatal_session(org)
    evaluate(rule)
    deliver_due()
    delivery = AlertDelivery.objects.get()
    assert delivery.status == "failed" and delivery.attempts == 1
    assert "HTTP 400 from PagerDuty" in delivery.last_error and "Event object is invalid" in delivery.last_error


def test_the_generic_webhook_and_email_carry_the_runbook_and_acknowledgement(org, upstream, operator_client):
    rule = fatal_rule(org, webhook_url=f"{upstream.url}/hook", email="oncall@example.com", runbook_url="/rb/#x")
    fatal_session(org)
    evaluate(rule)
    alert = Alert.objects.get()
    post(operator_client, f"/api/alerts/{alert.pk}/acknowledge/")
    deliver_due()
    fired, acked = (r["json"] for r in upstream.to("/hook"))
    assert (fired["event"], acked["event"]) == ("fired", "acknowledged")
    assert fired["runbook_url"] == "https://rtvi.example.com/rb/#x" and fired["severity"] == "critical"
    assert fired["dedup_key"] == f"rtvi-{org.pk}-alert-{alert.pk}" and fired["test"] is False
    assert acked["acknowledged"]["by"] == "operator" and acked["text"].startswith("[ACKNOWLEDGED] Fatal errors")
    (message,) = mail.outbox  # e-mail is told it fired, not of the acknowledgement
    assert "Runbook: https://rtvi.example.com/rb/#x" in message.body


# --- channels on the rules page: secrets masked, test-send --------------------------------------


def test_channels_are_added_with_their_secrets_masked_everywhere(staff_client, org, api_key, upstream):
    rule = fatal_rule(org)
    page = f"/settings/alert-rules/?edit={rule.pk}"
    staff_client.post(
        "/settings/alert-rules/", {"do": "add-channel", "rule": rule.pk, "kind": "pagerduty", "value": PD_KEY}
    )
    staff_client.post(
        "/settings/alert-rules/", {"do": "add-channel", "rule": rule.pk, "kind": "opsgenie", "value": GENIE_KEY}
    )
    hook = f"{upstream.url}/services/T0/B0/XyZsecretpath"
    staff_client.post("/settings/alert-rules/", {"do": "add-channel", "rule": rule.pk, "kind": "slack", "value": hook})
    assert sorted(rule.channels.values_list("kind", flat=True)) == ["opsgenie", "pagerduty", "slack"]
    fatal_session(org)
    evaluate(rule)
    shown = [
        staff_client.get(page).content.decode(),
        staff_client.get("/alerts/").content.decode(),
        staff_client.get(f"/alerts/{Alert.objects.get().pk}/").content.decode(),
        json.dumps(staff_client.get("/api/alerts/rules/").json()),
        json.dumps(Client().get("/api/alerts/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()),
    ]
    for text in shown:
        assert PD_KEY not in text and GENIE_KEY not in text and "XyZsecretpath" not in text
    assert "key …CDEF" in shown[0] and "…path" in shown[0]
    channels = staff_client.get("/api/alerts/rules/").json()["rules"][0]["channels"]
    assert {c["kind"]: c["target"] for c in channels}["pagerduty"] == "key …CDEF"
    kinds = [a for a, _ in actions(org) if a == AuditEntry.Action.RULE_CHANGED]
    assert len(kinds) == 3


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("pagerduty", "short", "routing_key: expected 8 to 200"),
        ("opsgenie", "has spaces in it", "api_key: expected 8 to 200"),
        ("slack", "http://10.0.0.5/hook", "private or loopback"),
        ("webhook", "ftp://example.com/x", "url: expected an http(s) URL"),
        ("email", "nobody", "email: expected an e-mail address"),
        ("carrier-pigeon", "x", "kind: expected one of"),
    ],
)
def test_a_bad_channel_is_refused_saying_why(staff_client, org, kind, value, message):
    rule = fatal_rule(org)
    response = staff_client.post(
        "/settings/alert-rules/", {"do": "add-channel", "rule": rule.pk, "kind": kind, "value": value}, follow=True
    )
    assert message in response.content.decode() and not rule.channels.exists()


def test_a_test_send_goes_now_and_shows_the_answer_and_is_audited(staff_client, operator_client, org, upstream):
    rule = fatal_rule(org, webhook_url=f"{upstream.url}/hook")
    channel = AlertChannel.objects.create(rule=rule, kind="pagerduty", secret=PD_KEY)
    response = staff_client.post(
        "/settings/alert-rules/", {"do": "test-channel", "rule": rule.pk, "channel": f"c{channel.pk}"}, follow=True
    )
    page = response.content.decode()
    assert "Test sent to pagerduty key …CDEF: HTTP 202:" in page and "Event processed" in page
    trigger, resolve = (r["json"] for r in upstream.to("/v2/enqueue"))
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] and "-test-" in trigger["dedup_key"]
    assert trigger["payload"]["summary"].startswith("[TEST] Fatal errors: This is a test notification sent by ops")
    assert trigger["payload"]["severity"] == "info" and trigger["payload"]["custom_details"]["test"] is True
    assert not Alert.objects.exists() and not AlertDelivery.objects.exists()  # nothing fired

    upstream.answers["/hook"] = (404, "no_service")
    response = staff_client.post(
        "/settings/alert-rules/", {"do": "test-channel", "rule": rule.pk, "channel": "webhook"}, follow=True
    )
    assert "The test to webhook" in response.content.decode() and "HTTP 404" in response.content.decode()
    assert upstream.to("/hook")[0]["json"]["test"] is True
    audited = AuditEntry.objects.filter(action=AuditEntry.Action.ALERT_TEST_SENT).order_by("pk")
    assert [(e.detail["channel"], e.detail["outcome"]) for e in audited] == [
        ("pagerduty", "sent"),
        ("webhook", "HTTP 404 from " + f"{upstream.url}/hook"),
    ]
    # Operators do not reach the settings: the button is the admins'.
    refused = operator_client.post(
        "/settings/alert-rules/", {"do": "test-channel", "rule": rule.pk, "channel": "webhook"}
    )
    assert refused.status_code == 403 and len(upstream.to("/hook")) == 1


def test_another_organizations_rule_has_no_channels_for_you(staff_client, other_org):
    theirs = fatal_rule(other_org)
    response = staff_client.post(
        "/settings/alert-rules/", {"do": "add-channel", "rule": theirs.pk, "kind": "email", "value": "x@example.com"}
    )
    assert response.status_code == 404 and not theirs.channels.exists()


def test_the_rules_api_takes_channels_runbook_and_renotify(client, org, api_key, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    body = {
        "name": "Fatal",
        "condition": "fatal_error",
        "severity": "critical",
        "runbook_url": "/alerts/runbook/#fatal-errors",
        "renotify_minutes": 15,
        "channels": [{"kind": "pagerduty", "routing_key": PD_KEY}, {"kind": "email", "email": "a@example.com"}],
    }
    created = post(client, "/api/alerts/rules/", body, **auth).json()
    assert created["renotify_minutes"] == 15 and created["runbook_url"] == "/alerts/runbook/#fatal-errors"
    assert [(c["kind"], c["target"]) for c in created["channels"]] == [
        ("pagerduty", "key …CDEF"),
        ("email", "a@example.com"),
    ]
    for bad, message in [
        ({"runbook_url": "javascript:alert(1)"}, "runbook_url:"),
        ({"renotify_minutes": 0}, "renotify_minutes:"),
        ({"severity": "apocalyptic"}, "severity:"),
        ({"channels": [{"kind": "pagerduty", "routing_key": "x"}]}, "channels[0].routing_key"),
        ({"channels": [{"kind": "slack", "url": "http://127.0.0.1/x"}]}, "channels[0].url: a private"),
        ({"channels": [{"kind": "opsgenie", "api_key": GENIE_KEY, "region": "eu"}]}, "unknown field(s) region"),
        ({"channels": "pagerduty"}, "channels: expected a list"),
    ]:
        response = post(client, "/api/alerts/rules/", {"name": "x", "condition": "fatal_error", **bad}, **auth)
        assert response.status_code == 400 and message in response.json()["error"], (bad, response.json())
    assert AlertRule.objects.count() == 1


def test_the_settings_tables_are_one_template_the_rules_page_extends(staff_client, org):
    """rows.html is the settings' tables (redaction, prices, alert rules); the rules page fills its blocks, so a
    rule's threshold reads as everywhere else (the `threshold` filter) and its edit and delete are the others'."""
    from pathlib import Path

    AlertRule.objects.create(
        organization=org, name="slow", condition=AlertRule.Condition.TURN_LATENCY_P95, threshold=1500
    )
    AlertRule.objects.create(organization=org, name="bad", condition=AlertRule.Condition.ERROR_RATE)
    html = staff_client.get("/settings/alert-rules/").content.decode()
    assert '<td data-label="Threshold">1.5 s</td>' in html and '<td data-label="Threshold">20 % (default)</td>' in html
    assert html.count('<input type="hidden" name="do" value="delete">') == 2 and html.count('data-rule="') == 2
    templates = Path(__file__).resolve().parents[2] / "templates/org"
    assert (templates / "alert_rules.html").read_text().startswith('{% extends "org/rows.html" %}')
    assert "org_alert_rules" not in (templates / "rows.html").read_text()  # no second copy of the rules' table
    for path in ("/settings/prices/", "/settings/redaction/"):
        assert staff_client.get(path).status_code == 200
