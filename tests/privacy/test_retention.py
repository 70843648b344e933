"""Retention: each organization's data is purged when its days run out, in bounded rounds, audited, others untouched.

The purge itself through the models; its loop on a real server (daphne) with a lease; the admin's
change of a retention setting in the audit log.
"""

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from dashboard.org.models import AuditEntry, Membership
from rtvi_monitor.alerts.models import Alert, AlertRule
from rtvi_monitor.alerts.rules import acquire
from rtvi_monitor.privacy import retention
from rtvi_monitor.sessions.models import Event, Session, Span
from tests.session_samples import make_session

Action = AuditEntry.Action


def ended(org, session_id, days_ago, **fields):
    session = make_session(org, session_id, **fields)
    at = timezone.now() - timedelta(days=days_ago)
    Session.objects.filter(pk=session.pk).update(
        status="ended",
        started_at=at - timedelta(minutes=3),
        ended_at=at,
        transcript_text="my card is [card]",
        state={"transcript": [{"role": "user", "text": "hello"}]},
        turn_count=2,
    )
    return Session.objects.get(pk=session.pk)


@pytest.mark.django_db
def test_an_agents_own_days_replace_the_organizations_for_its_calls(org):
    from dashboard.org.models import AgentRetention

    org.keep_messages_days = 30
    org.save()
    AgentRetention.objects.create(organization=org, agent_id="sales", keep_messages_days=0.5)  # 12 hours
    AgentRetention.objects.create(organization=org, agent_id="legal", keep_sessions_days=365)  # messages: the org's
    sales_old = ended(org, "sales-old", 1, agent_key="sales")
    sales_recent = ended(org, "sales-recent", 0.25, agent_key="sales")
    support_old = ended(org, "support-old", 1, agent_key="support")
    legal_older = ended(org, "legal-older", 31, agent_key="legal")

    retention.purge_round()

    for session in (sales_old, sales_recent, support_old, legal_older):
        session.refresh_from_db()
    assert sales_old.contents_purged_at is not None  # past the agent's 12 hours
    assert sales_recent.contents_purged_at is None and support_old.contents_purged_at is None
    assert legal_older.contents_purged_at is not None  # its own days say nothing of messages: the org's 30


@pytest.mark.django_db
def test_messages_past_their_days_go_the_calls_figures_stay(org, other_org):
    org.keep_messages_days = 7
    org.save()
    old, recent = ended(org, "old", 8), ended(org, "recent", 6)
    live = make_session(org, "live")
    theirs = ended(other_org, "theirs", 30)
    assert Event.objects.filter(session=old).exists()

    removed = retention.purge_round()

    assert removed[org.pk]["calls_emptied"] == 1 and removed[org.pk]["messages"] > 0
    old.refresh_from_db()
    assert not Event.objects.filter(session=old).exists()
    assert old.state is None and old.transcript_text == "" and old.contents_purged_at is not None
    assert old.turn_count == 2  # its figures stay
    for kept in (recent, live, theirs):
        assert Event.objects.filter(session=kept).exists()
    (entry,) = AuditEntry.objects.filter(organization=org, action=Action.PURGED)
    assert entry.actor == "retention" and entry.detail["calls_emptied"] == 1
    assert not AuditEntry.objects.filter(organization=other_org).exists()
    assert retention.purge_round() == {}  # nothing more to do: nothing recorded either


@pytest.mark.django_db
def test_a_big_purge_goes_in_bounded_rounds(org):
    org.keep_messages_days = 1
    org.save()
    sessions = [ended(org, f"old-{i}", 3) for i in range(3)]
    per_call = Event.objects.filter(session=sessions[0]).count()
    rounds = 0
    while retention.purge_round(batch=per_call // 2 + 1):
        rounds += 1
        assert rounds < 50
    assert rounds >= 6  # 3 calls of per_call messages, at most half a call a round: never all at once
    assert not Event.objects.filter(session__organization=org).exists()
    assert Session.objects.filter(organization=org, contents_purged_at__isnull=False).count() == 3


@pytest.mark.django_db
def test_calls_spans_and_resolved_alerts_past_their_days_go(org, other_org):
    org.keep_sessions_days, org.keep_spans_days, org.keep_alerts_days = 30, 3, 10
    org.save()
    old, recent = ended(org, "old", 31), ended(org, "recent", 29)
    ended(other_org, "theirs", 400)
    now_ns = int(time.time() * 1e9)
    ids = {"trace_id": "1" * 32, "name": "llm", "end_ns": now_ns}
    Span.objects.create(organization=org, span_id="a" * 16, start_ns=now_ns - int(4 * 86400e9), **ids)
    Span.objects.create(organization=org, span_id="b" * 16, start_ns=now_ns - int(2 * 86400e9), **ids)
    rule = AlertRule.objects.create(organization=org, name="fatal", condition="fatal_error")
    at = timezone.now() - timedelta(days=11)
    Alert.objects.create(organization=org, rule=rule, key="a", status="resolved", resolved_at=at, fired_at=at)
    Alert.objects.create(organization=org, rule=rule, key="b", status="firing", fired_at=at)

    removed = retention.purge_round()[org.pk]

    assert (removed["calls"], removed["spans"], removed["alerts"]) == (1, 1, 1)
    assert list(Session.objects.filter(organization=org).values_list("session_id", flat=True)) == ["recent"]
    assert not Event.objects.filter(session_id=old.pk).exists() and Event.objects.filter(session=recent).exists()
    assert Session.objects.filter(organization=other_org).count() == 1
    assert list(Span.objects.values_list("span_id", flat=True)) == ["b" * 16]
    assert list(Alert.objects.values_list("key", flat=True)) == ["b"]  # a firing alert is never purged


@pytest.mark.django_db
def test_only_one_process_purges_at_a_time(org):
    assert acquire(retention.LEASE, "process-a", timedelta(seconds=60))
    assert not acquire(retention.LEASE, "process-b", timedelta(seconds=60))


@pytest.mark.django_db
def test_changing_retention_in_the_admin_is_audited(client, org, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="correct-horse-battery")
    Membership.objects.create(user=user, organization=org)
    client.force_login(user)
    response = client.post(
        f"/admin/dashboard/organization/{org.pk}/change/",
        {
            "name": org.name,
            "agents_api_base_url": "",
            "agents_api_key": "",
            "keep_messages_days": "30",
            "keep_sessions_days": "",
            "keep_spans_days": "",
            "keep_alerts_days": "",
            "keep_audio_days": "",
            "audio_agents": "",
            "audio_role": "operator",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    (entry,) = AuditEntry.objects.filter(organization=org, action=Action.RETENTION_CHANGED)
    assert entry.actor == "root" and entry.detail == {"keep_messages_days": 30}


def test_the_running_server_purges_by_itself(tmp_path):
    """A real daphne with a short interval: an old call's messages go, nobody asking."""
    from tests.server import DaphneServer

    with DaphneServer(env={"RETENTION_INTERVAL": "0.5"}) as server:
        key = server.manage("create_api_key", "--create", "--org", "Kept").splitlines()[-1]
        server.manage(
            "shell",
            "-c",
            """
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Organization
from rtvi_monitor.models import Event, Session
org = Organization.objects.get(name="Kept")
org.keep_messages_days = 1
org.save()
at = timezone.now() - timedelta(days=2)
s = Session.objects.create(organization=org, session_id="old-call", status="ended", started_at=at, ended_at=at)
Event.objects.create(session=s, seq=1, direction="to-client", type="bot-ready", received_at=1.0, message="{}")
""",
        )
        deadline = time.monotonic() + 20
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as api:
            while True:
                body = api.get("/api/sessions/old-call/events/").json()
                if not body["events"]:
                    break
                assert time.monotonic() < deadline, "the server never purged"
                time.sleep(0.3)
            purged = api.get("/api/audit/?action=purged").json()["entries"]
        assert purged and purged[0]["detail"]["calls_emptied"] == 1


@pytest.mark.django_db
def test_a_purged_calls_page_says_why_it_is_empty(staff_client, org):
    org.keep_messages_days = 7
    org.save()
    ended(org, "old", 8)
    retention.purge_round()
    html = staff_client.get("/sessions/old/").content.decode()
    assert 'data-testid="purged"' in html and "keeps them for 7 days" in html
    assert staff_client.get("/api/sessions/old/").json()["transcript"] == []
