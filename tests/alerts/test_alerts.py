"""The alert engine (each condition, dedupe, resolve, deliveries and their retries), its API and its page."""

import json
import time
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core import mail
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from dashboard.agents.models import Agent
from dashboard.net import guard
from dashboard.org.models import Price
from rtvi_monitor.alerts import rules as alerts
from rtvi_monitor.alerts.models import Alert, AlertDelivery, AlertRule
from rtvi_monitor.live.models import Lease
from rtvi_monitor.sessions.models import Event, Session
from tests.agents_samples import BASE, KEY, URL
from tests.session_samples import error_event

pytestmark = pytest.mark.django_db

C = AlertRule.Condition


@pytest.fixture(autouse=True)
def _webhooks_anywhere(settings):
    """The webhooks here go to example hosts (faked at the httpx layer) that this sandbox cannot resolve."""
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True


def rule(org, condition, **fields) -> AlertRule:
    fields.setdefault("webhook_url", "https://hooks.example.com/rtvi")
    return AlertRule.objects.create(organization=org, name=f"{condition} rule", condition=condition, **fields)


def evaluate(rule, context=None, now=None):
    rule = AlertRule.objects.select_related("organization", "agent").get(pk=rule.pk)
    return alerts.evaluate_rule(rule, now or timezone.now(), context or {})


def fatal_session(org, session_id, agent=None, text="LLM service returned 401 Unauthorized"):
    session = Session.objects.create(
        organization=org, session_id=session_id, agent=agent, fatal=True, error_count=1, last_event_at=timezone.now()
    )
    error_event(session, 1, text, fatal=True)
    return session


def test_a_fatal_error_fires_once_while_it_lasts_and_resolves_when_the_window_passes(org, agents):
    fatal = rule(org, C.FATAL_ERROR, email="oncall@example.com", window_minutes=10)
    fatal_session(org, "call-1", agents[0])
    assert evaluate(fatal) == (1, 0)
    fatal_session(org, "call-2", agents[1], text="Pipeline crashed: out of memory")
    assert evaluate(fatal) == (0, 0)  # still firing: the same alert, now naming both sessions
    (alert,) = Alert.objects.all()
    assert alert.status == "firing" and set(alert.session_ids) == {"call-1", "call-2"}
    assert "Fatal error in 2 sessions" in alert.summary
    assert sorted(AlertDelivery.objects.values_list("event", "channel")) == [("fired", "email"), ("fired", "webhook")]

    later = timezone.now() + timedelta(minutes=11)
    assert evaluate(fatal, now=later) == (0, 1)
    alert.refresh_from_db()
    assert alert.status == "resolved" and alert.resolved_at == later
    assert AlertDelivery.objects.filter(event="resolved").count() == 2
    assert evaluate(fatal, now=later) == (0, 0)  # resolved stays resolved


def test_error_rate_needs_enough_sessions_and_compares_the_share_with_the_threshold(org, agents):
    rate = rule(org, C.ERROR_RATE, threshold=30)
    for i in range(3):
        Session.objects.create(organization=org, session_id=f"e{i}", error_count=1)
    assert evaluate(rate) == (0, 0)  # 3 of 3, but too few sessions to be a rate
    for i in range(5):
        Session.objects.create(organization=org, session_id=f"ok{i}")
    assert evaluate(rate) == (1, 0)  # 3 of 8 = 37.5 % > 30 %
    alert = Alert.objects.get()
    assert alert.figures == {"percent": 37.5, "with_errors": 3, "sessions": 8, "threshold_percent": 30.0}
    assert set(alert.session_ids) == {"e0", "e1", "e2"}
    for i in range(3):
        Session.objects.create(organization=org, session_id=f"ok-more{i}")
    assert evaluate(rate) == (0, 0)  # 3 of 11 = 27 %: under 30 %, not yet under 24 %, so it does not flap
    for i in range(2):
        Session.objects.create(organization=org, session_id=f"ok-last{i}")
    assert evaluate(rate) == (0, 1)  # 3 of 13 = 23 %


def test_error_rate_keeps_firing_while_there_are_too_few_sessions_to_judge(org):
    rate = rule(org, C.ERROR_RATE, threshold=30, window_minutes=10)
    for i in range(5):
        Session.objects.create(organization=org, session_id=f"e{i}", error_count=1)
    assert evaluate(rate) == (1, 0)
    Session.objects.update(started_at=timezone.now() - timedelta(minutes=11))
    Session.objects.create(organization=org, session_id="late", error_count=1)
    assert evaluate(rate) == (0, 0)  # 1 of 1: traffic dropped, not the errors
    assert Alert.objects.get().status == "firing"


def test_turn_latency_fires_per_agent(org, agents):
    slow = rule(org, C.TURN_LATENCY_P95, threshold=1500)
    for i in range(5):
        Session.objects.create(organization=org, session_id=f"s{i}", agent=agents[0], latency_p95_ms=2000 + i)
        Session.objects.create(organization=org, session_id=f"f{i}", agent=agents[1], latency_p95_ms=600)
    assert evaluate(slow) == (1, 0)
    alert = Alert.objects.get()
    assert alert.key == str(agents[0].pk) and alert.agent == agents[0]
    assert alert.summary.startswith("support-bot: turn latency by call p95 2.0 s") and alert.session_ids[0] == "s4"


@pytest.mark.parametrize("agent_key", ["1b7e6a42-0d5e-4d55-9d0c-7f9a1c1c2b11", "agent-7f3a-" + "x" * 80])
def test_turn_latency_fires_for_an_agent_of_pipecat_clouds_list(org, agent_key):
    """No built-in row: the alert is keyed by the agents API's id and named by the sessions' agent name."""
    slow = rule(org, C.TURN_LATENCY_P95, threshold=1500)
    for i in range(5):
        Session.objects.create(
            organization=org, session_id=f"c{i}", agent_key=agent_key, agent_name="cloud-bot", latency_p95_ms=2100
        )
    assert evaluate(slow) == (1, 0)
    alert = Alert.objects.get()
    assert (alert.key, alert.agent) == (agent_key, None)
    assert alert.summary.startswith("cloud-bot: turn latency by call p95 2.1 s")
    assert AlertDelivery.objects.filter(alert=alert).count() == 1
    assert evaluate(slow) == (0, 0)  # still firing: the same alert


def test_no_sessions_fires_for_an_agent_that_usually_has_them(org, agents):
    quiet = rule(org, C.NO_SESSIONS, window_minutes=30, threshold=3)
    for i in range(3):
        session = Session.objects.create(organization=org, session_id=f"old{i}", agent=agents[0], status="ended")
        Session.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(hours=2))
    session = Session.objects.create(organization=org, session_id="rare", agent=agents[1], status="ended")
    Session.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(hours=2))
    assert evaluate(quiet) == (1, 0)  # support-bot usually has sessions; sales-bot had one: not "usually"
    assert Alert.objects.get().agent == agents[0]
    Session.objects.create(organization=org, session_id="new", agent=agents[0])
    assert evaluate(quiet) == (0, 1)


def test_agents_api_down_fires_after_its_window(org, httpx_mock, settings):
    settings.AGENTS_RETRIES = 0
    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    down = rule(org, C.AGENTS_API_DOWN, window_minutes=5)
    httpx_mock.add_response(url=URL, status_code=503, is_reusable=True)
    context = async_to_sync(alerts.failing_context)([org])
    since, error = context["agents_api"][org.pk]
    assert since <= time.time()
    assert "503" in error or "unavailable" in error.lower()
    assert evaluate(down, context) == (0, 0)  # failing, but not for 5 minutes yet
    assert evaluate(down, context, now=timezone.now() + timedelta(minutes=6)) == (1, 0)
    assert Alert.objects.get().figures["failing_minutes"] >= 6
    assert evaluate(down, {"agents_api": {}}) == (0, 1)  # it answers again


def test_a_fatal_error_counts_from_when_it_came_not_how_long_its_session_goes_on(org):
    fatal = rule(org, C.FATAL_ERROR, window_minutes=10)
    session = fatal_session(org, "call-1")
    Event.objects.filter(session=session).update(received_at=time.time() - 3600)  # an hour ago
    Session.objects.filter(pk=session.pk).update(last_event_at=timezone.now())  # still sending metrics
    assert evaluate(fatal) == (0, 0)


def test_a_bots_error_text_never_reaches_slack_and_what_does_is_text(org, agents, httpx_mock):
    fatal = rule(org, C.FATAL_ERROR)
    named = Agent.objects.create(organization=org, name="<!channel> & co")
    fatal_session(org, "call-1", named, text="<https://evil.example|Reset your key> said the caller")
    evaluate(fatal)
    httpx_mock.add_response(url="https://hooks.example.com/rtvi", method="POST")
    _deliver_due()
    body = httpx_mock.get_requests()[-1].content.decode()
    assert "evil.example" not in body and "said the caller" not in body  # the error's words: nowhere
    text = json.loads(body)["text"]
    assert "(&lt;!channel&gt; &amp; co): 1 error" in text and "<!channel>" not in text


def test_no_sessions_forgets_a_deleted_agent(org, agents):
    quiet = rule(org, C.NO_SESSIONS, window_minutes=30, threshold=3)
    for i in range(3):
        session = Session.objects.create(organization=org, session_id=f"old{i}", agent=agents[2], status="ended")
        Session.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(hours=2))
    assert agents[2].deleted_at is not None
    assert evaluate(quiet) == (0, 0)


def test_the_database_keeps_one_firing_alert_per_rule_and_key(org):
    fatal = rule(org, C.FATAL_ERROR)
    Alert.objects.create(rule=fatal, organization=org, key="", summary="x")
    with pytest.raises(IntegrityError), transaction.atomic():  # whichever process tries
        Alert.objects.create(rule=fatal, organization=org, key="", summary="y")
    fatal_session(org, "call-1")
    assert evaluate(fatal) == (0, 0)  # the firing one is updated, not doubled


def test_the_lease_is_held_by_one_process_until_it_stops_renewing():
    assert alerts.acquire("alerts", "process-a", timedelta(seconds=30))
    assert alerts.acquire("alerts", "process-a", timedelta(seconds=30))  # renewing
    assert not alerts.acquire("alerts", "process-b", timedelta(seconds=30))
    Lease.objects.filter(name="alerts").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert alerts.acquire("alerts", "process-b", timedelta(seconds=30))
    assert not alerts.acquire("alerts", "process-a", timedelta(seconds=30))


def _deliver_due():
    """What a round of the engine does with deliveries: claim what is due, send, record."""
    claimed = alerts.claim_due(timezone.now())

    async def send():
        return [await alerts.deliver(delivery) for delivery in claimed]

    for delivery, error in zip(claimed, async_to_sync(send)(), strict=True):
        alerts.record(delivery, error, timezone.now())


def test_a_webhook_is_retried_with_back_off_then_sent_with_what_happened(org, agents, httpx_mock, settings):
    settings.ALERT_RETRY_BASE = 30
    settings.DASHBOARD_URL = "https://rtvi.example.com"
    fatal = rule(org, C.FATAL_ERROR, agent=agents[0])
    fatal_session(org, "call-9", agents[0])
    evaluate(fatal)
    hook = "https://hooks.example.com/rtvi"
    httpx_mock.add_response(url=hook, method="POST", status_code=500)
    _deliver_due()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("pending", 1, f"HTTP 500 from {hook}")
    assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=25)  # waits before the next try
    _deliver_due()
    assert AlertDelivery.objects.get().attempts == 1  # not due yet: nothing sent

    AlertDelivery.objects.update(next_attempt_at=timezone.now())
    httpx_mock.add_response(url=hook, method="POST", status_code=200)
    _deliver_due()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 2)
    body = json.loads(httpx_mock.get_requests(method="POST")[-1].content)
    assert body["text"] == (
        "[FIRING] fatal_error rule: Fatal error in 1 session (support-bot): 1 error <https://rtvi.example.com/alerts/>"
    )
    assert body["rule"] == {
        "id": fatal.pk,
        "name": "fatal_error rule",
        "condition": "fatal_error",
        "threshold": None,
        "window_minutes": 15,
    }
    assert body["agent"] == {"id": str(agents[0].pk), "name": "support-bot"}
    assert body["session_ids"] == ["call-9"]
    assert body["session_urls"] == ["https://rtvi.example.com/sessions/call-9/"]
    # Counts, never what the error said: it can quote the caller, and the alert outlives the call.
    assert body["figures"] == {"sessions": 1, "fatal_errors": 1, "kinds": 1, "window_minutes": 15}
    assert "Unauthorized" not in json.dumps(body) and "returned 401" not in json.dumps(body)  # (a UUID may hold 401)


def test_a_delivery_that_keeps_failing_is_marked_failed(org, httpx_mock, settings):
    settings.ALERT_DELIVERY_ATTEMPTS = 2
    fatal = rule(org, C.FATAL_ERROR)
    fatal_session(org, "call-1")
    evaluate(fatal)
    httpx_mock.add_exception(httpx.ConnectError("connection refused"), is_reusable=True)
    for _ in range(2):
        AlertDelivery.objects.update(next_attempt_at=timezone.now())
        _deliver_due()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 2)
    assert "ConnectError" in delivery.last_error


@pytest.mark.parametrize("hook", ["http://localhost:9/hook", "http://127.0.0.1:6379/", "http://[::1]/x"])
def test_a_webhook_into_the_dashboards_own_network_is_refused_for_good(org, settings, hook):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    fatal = rule(org, C.FATAL_ERROR, webhook_url=hook)  # as the admin would save it
    fatal_session(org, "call-1")
    evaluate(fatal)
    _deliver_due()  # nothing is faked: a POST would fail the test (pytest-httpx refuses unknown requests)
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert "private address" in delivery.last_error and "ALERT_WEBHOOK_ALLOW_PRIVATE" in delivery.last_error


@pytest.mark.parametrize(
    "hook,why",
    [
        ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://localhost:8000/hook", "localhost resolves to "),
    ],
)
def test_a_refused_webhook_is_a_failed_delivery_that_says_why(org, settings, httpx_mock, hook, why):
    """Refused by the outbound client's guard (dashboard/net/guard.py) when sent, as the rule's author may have
    saved it before the check existed or through a name: recorded as failed at once, never POSTed."""
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    fatal = rule(org, C.FATAL_ERROR)
    AlertRule.objects.filter(pk=fatal.pk).update(webhook_url=hook)  # past the API's own check
    fatal_session(org, "call-1")
    evaluate(fatal)
    _deliver_due()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert delivery.last_error.startswith("refused: ") and why in delivery.last_error
    assert "OUTBOUND_ALLOWED_HOSTS" in delivery.last_error and "ALERT_WEBHOOK_ALLOW_PRIVATE" in delivery.last_error
    assert httpx_mock.get_requests() == []


def test_a_webhook_goes_to_the_address_that_was_checked(org, settings, httpx_mock, monkeypatch):
    """The name is resolved once and the POST goes to that address: a second answer (DNS rebinding) is never asked."""
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    answers = iter([[(2, 1, 6, "", ("93.184.216.34", 443))], [(2, 1, 6, "", ("127.0.0.1", 443))]])
    monkeypatch.setattr(guard.socket, "getaddrinfo", lambda *args, **kwargs: next(answers))
    fatal = rule(org, C.FATAL_ERROR, webhook_url="https://hooks.example.com/rtvi")
    fatal_session(org, "call-1")
    evaluate(fatal)
    httpx_mock.add_response(url="https://93.184.216.34/rtvi", method="POST")
    _deliver_due()
    (request,) = httpx_mock.get_requests()
    assert request.headers["Host"] == "hooks.example.com"
    assert request.extensions["sni_hostname"] == "hooks.example.com"  # the certificate is checked for the name
    assert AlertDelivery.objects.get().status == "sent"


@pytest.mark.parametrize(
    "hook", ["http://127.0.0.1:8000/x", "http://10.1.2.3/x", "http://169.254.169.254/latest", "http://localhost/x"]
)
def test_the_api_refuses_a_webhook_to_a_private_address(client, org, api_key, settings, hook):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    body = {"name": "x", "condition": "fatal_error", "webhook_url": hook}
    response = client.post(
        "/api/alerts/rules/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert response.status_code == 400 and "private or loopback" in response.json()["error"]
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True  # a receiver inside the team's network, when they say so
    response = client.post(
        "/api/alerts/rules/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert response.status_code == 201


def test_email_goes_through_djangos_backend(org, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    fatal = rule(org, C.FATAL_ERROR, webhook_url="", email="oncall@example.com")
    fatal_session(org, "call-1")
    evaluate(fatal)
    _deliver_due()
    (message,) = mail.outbox
    assert message.to == ["oncall@example.com"] and "Fatal error in 1 session" in message.subject
    assert "/sessions/call-1/" in message.body
    assert AlertDelivery.objects.get().status == "sent"


def test_a_rule_switched_off_stops_firing(org):
    fatal = rule(org, C.FATAL_ERROR)
    fatal_session(org, "call-1")
    assert alerts.evaluate_all(timezone.now(), {}) == (1, 0)
    AlertRule.objects.filter(pk=fatal.pk).update(enabled=False)
    alerts.evaluate_all(timezone.now(), {})
    assert Alert.objects.get().status == "resolved"
    assert not AlertDelivery.objects.filter(event="resolved").exists()


def test_one_bad_rule_does_not_stop_the_others(org, monkeypatch):
    good = rule(org, C.FATAL_ERROR)
    rule(org, C.ERROR_RATE)
    fatal_session(org, "call-1")

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setitem(alerts.EVALUATE, C.ERROR_RATE, broken)
    assert alerts.evaluate_all(timezone.now(), {}) == (1, 0)
    assert Alert.objects.get().rule == good


# --- the API and the page -------------------------------------------------------------


def test_rules_are_created_and_listed_with_a_private_key(client, org, other_org, agents, api_key):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    body = {
        "name": "Slow support",
        "condition": "turn_latency_p95_ms",
        "agent": str(agents[0].pk),
        "threshold": 1200,
        "window_minutes": 10,
        "webhook_url": "https://hooks.slack.com/services/T/B/X",
        "email": "oncall@example.com",
    }
    response = client.post("/api/alerts/rules/", body, content_type="application/json", **auth)
    assert response.status_code == 201, response.content
    created = response.json()
    assert {k: created[k] for k in body} == body and created["enabled"] is True
    listed = client.get("/api/alerts/rules/", **auth).json()["rules"]
    assert [r["id"] for r in listed] == [created["id"]]
    default = client.post(
        "/api/alerts/rules/", {"name": "Fatal", "condition": "fatal_error"}, content_type="application/json", **auth
    ).json()
    assert (default["threshold"], default["window_minutes"]) == (None, 15)  # the condition's defaults, said
    rule(other_org, C.FATAL_ERROR)
    assert len(client.get("/api/alerts/rules/", **auth).json()["rules"]) == 2  # not the other organization's


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected a JSON object"),
        ({"condition": "fatal_error"}, "name:"),
        ({"name": "x", "condition": "cpu"}, "condition: expected one of"),
        ({"name": "x", "condition": "error_rate", "threshold": 120}, "threshold: out of range"),
        ({"name": "x", "condition": "error_rate", "threshold": "high"}, "threshold: expected a number"),
        ({"name": "x", "condition": "fatal_error", "threshold": 3}, "threshold: fatal_error takes none"),
        ({"name": "x", "condition": "error_rate", "window_minutes": 0}, "window_minutes:"),
        ({"name": "x", "condition": "error_rate", "window_minutes": 1.5}, "window_minutes:"),
        ({"name": "x", "condition": "error_rate", "webhook_url": "ftp://x"}, "webhook_url:"),
        ({"name": "x", "condition": "error_rate", "email": "nobody"}, "email:"),
        ({"name": "x", "condition": "error_rate", "agent": "not-a-uuid"}, "agent:"),
        ({"name": "x", "condition": "error_rate", "colour": "red"}, "unknown field(s): colour"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field(client, org, api_key, body, message):
    response = client.post(
        "/api/alerts/rules/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert response.status_code == 400 and message in response.json()["error"]
    assert not AlertRule.objects.exists()


def test_an_agent_of_another_organization_is_refused(client, org, other_org, api_key):
    from tests.conftest import make_agent

    theirs = make_agent(other_org, "their-bot")
    body = {"name": "x", "condition": "error_rate", "agent": str(theirs.pk)}
    response = client.post(
        "/api/alerts/rules/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert response.status_code == 400 and "no agent" in response.json()["error"]


def test_the_rules_api_needs_a_key_to_write(staff_client):
    body = {"name": "x", "condition": "fatal_error"}
    client = Client()
    assert client.get("/api/alerts/rules/").status_code == 401
    assert client.post("/api/alerts/rules/", body, content_type="application/json").status_code == 401
    assert staff_client.get("/api/alerts/rules/").status_code == 200  # a browser may read
    assert staff_client.post("/api/alerts/rules/", body, content_type="application/json").status_code == 403
    assert client.put("/api/alerts/rules/", HTTP_AUTHORIZATION="Bearer pk_wrong").status_code == 405


def test_alerts_are_listed_with_their_deliveries(client, org, api_key):
    fatal = rule(org, C.FATAL_ERROR)
    fatal_session(org, "call-1")
    evaluate(fatal)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    (alert,) = client.get("/api/alerts/?status=firing", **auth).json()["alerts"]
    assert alert["session_ids"] == ["call-1"] and alert["deliveries"][0]["status"] == "pending"
    assert client.get("/api/alerts/?status=resolved", **auth).json()["alerts"] == []
    assert client.get("/api/alerts/?status=maybe", **auth).status_code == 400


def test_the_alerts_page_and_the_overview_show_what_fires(staff_client, org):
    fatal = rule(org, C.FATAL_ERROR)
    fatal_session(org, "call-1", text="<script>alert(1)</script> crashed")
    evaluate(fatal)
    page = staff_client.get("/alerts/").content.decode()
    assert "fatal_error rule" in page and "/sessions/call-1/" in page and "<script>alert" not in page
    home = staff_client.get("/").content.decode()
    assert 'data-testid="firing-count">1<' in home and 'data-testid="firing-alerts"' in home
    assert Client().get("/alerts/").status_code == 302  # login first


def test_cost_is_priced_from_usage_per_model(org):
    from rtvi_monitor.sessions.cost import forget_prices, session_cost

    forget_prices()
    assert session_cost(org.pk, {"gpt-4o": {"prompt_tokens": 1000}}) is None  # no prices: unknown, not $0
    Price.objects.create(
        organization=org, model="gpt-4o", usd_per_million_input_tokens=2.5, usd_per_million_output_tokens=10
    )
    Price.objects.create(organization=org, model="sonic-2", usd_per_thousand_characters=0.05)
    Price.objects.create(organization=org, model="nova-3", usd_per_audio_minute=0.0043)
    forget_prices()
    usage = {
        "gpt-4o": {"prompt_tokens": 10_000, "completion_tokens": 500},
        "sonic-2": {"characters": 2000},
        "nova-3": {"stt_audio_seconds": 120},
        "unpriced-model": {"prompt_tokens": 1_000_000},
    }
    assert session_cost(org.pk, usage) == pytest.approx(0.025 + 0.005 + 0.1 + 0.0086)
