"""What the alerts say is what they do: when an alert fires and resolves (hysteresis included), every session
it names a page at a time, and the Overview's firing alerts worked as on their page, by whom the policy lets."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.org.models import AuditEntry
from rtvi_monitor.alerts import named, rules
from rtvi_monitor.alerts.models import Alert, AlertRule
from rtvi_monitor.sessions.models import Session
from tests.conftest import make_member

C = AlertRule.Condition


def rule_of(org, condition, **fields) -> AlertRule:
    return AlertRule.objects.create(organization=org, name=f"rule {condition}", condition=condition, **fields)


# --- when it fires and when it resolves -----------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "threshold", "window", "text"),
    [
        (C.ERROR_RATE, 20, 15, "fires above 20 %; resolves at 16 % or below"),
        (C.ERROR_RATE, None, None, "fires above 20 %; resolves at 16 % or below"),  # the condition's default
        (C.ERROR_RATE, 12.5, 15, "fires above 12.5 %; resolves at 10 % or below"),
        (C.TURN_LATENCY_P95, 5000, 15, "fires above 5.0 s; resolves at 4.0 s or below"),
        (C.ENDED_BADLY, 4, 15, "fires at 4 sessions or more in 15 min; resolves at 3 or fewer"),
        (C.ENDED_BADLY, 3, 10, "fires at 3 sessions or more in 10 min; resolves at 2 or fewer"),
        (C.FATAL_ERROR, None, 30, "fires on a fatal error; resolves once 30 min pass with none"),
        (C.AGENTS_API_DOWN, None, None, "fires when the agents API has failed for 5 min; resolves when it answers"),
    ],
)
def test_each_rule_says_when_it_fires_and_when_it_resolves(condition, threshold, window, text):
    rule = AlertRule(condition=condition, threshold=threshold, window_minutes=window)
    assert rules.levels_text(rule) == text


@pytest.mark.parametrize("threshold", [3, 4, 5, 7, 15])
def test_a_count_rules_words_are_where_its_evaluation_turns(threshold):
    """The count it names as resolving is the largest one that no longer holds a firing alert, and the count
    it names as firing the smallest that fires one: the words and the comparisons agree at the edge."""
    words = rules.levels_text(AlertRule(condition=C.ENDED_BADLY, threshold=threshold, window_minutes=15))
    fires, clears = map(
        int, re.fullmatch(r"fires at (\d+) sessions or more in 15 min; resolves at (\d+) or fewer", words).groups()
    )
    assert rules._at_least(fires, threshold, firing=False) and not rules._at_least(fires - 1, threshold, firing=False)
    assert not rules._at_least(clears, threshold, firing=True) and rules._at_least(clears + 1, threshold, firing=True)


def test_the_resolve_level_is_taken_from_the_evaluations_one_setting(monkeypatch):
    rule = AlertRule(condition=C.ERROR_RATE, threshold=20)
    monkeypatch.setattr(rules, "CLEAR_AT", 0.5)
    assert rules.levels_text(rule) == "fires above 20 %; resolves at 10 % or below"
    assert rules._above(10.5, 20, firing=True) and not rules._above(10, 20, firing=True)


def error_sessions(org, count, *, errors=True, start=0):
    """`count` sessions of `org`, started a minute apart (the first, `start` minutes ago, the newest)."""
    now = timezone.now()
    return [
        Session.objects.create(
            organization=org,
            session_id=f"call-{start + i:02d}",
            started_at=now - timedelta(minutes=start + i, seconds=1),
            error_count=1 if errors else 0,
            status=Session.Status.ENDED,
        )
        for i in range(count)
    ]


def test_an_error_rate_alert_between_the_two_levels_stays_firing_and_says_why(org, staff_client):
    rule = rule_of(org, C.ERROR_RATE, threshold=20, window_minutes=60)
    error_sessions(org, 2)
    clean = error_sessions(org, 8, errors=False, start=2)  # 2 of 10: 20 %, not above it
    rules.evaluate_rule(rule, timezone.now(), {})
    assert not Alert.objects.exists()
    clean[0].delete()  # 2 of 9: 22.2 %, fires
    rules.evaluate_rule(rule, timezone.now(), {})
    alert = Alert.objects.get(status=Alert.Status.FIRING)
    error_sessions(org, 2, errors=False, start=20)  # 2 of 11: 18.2 %, under the threshold, over 16 %
    rules.evaluate_rule(rule, timezone.now(), {})
    alert.refresh_from_db()
    assert alert.status == Alert.Status.FIRING and alert.summary.startswith("18.2 % of sessions")
    for page in ("/alerts/", f"/alerts/{alert.pk}/", "/"):
        html = staff_client.get(page).content.decode()
        assert "Fires above 20 %; resolves at 16 % or below" in html, page
    error_sessions(org, 2, errors=False, start=30)  # 2 of 13: 15.4 %, resolves
    rules.evaluate_rule(rule, timezone.now(), {})
    alert.refresh_from_db()
    assert alert.status == Alert.Status.RESOLVED


def test_the_rules_table_says_the_effective_threshold_and_window(org, staff_client):
    rule_of(org, C.FATAL_ERROR, runbook_url="/alerts/runbook/#fatal-errors")
    html = staff_client.get("/alerts/").content.decode()
    assert '<td data-label="Threshold">none: one fatal error fires it</td>' in html
    assert '<td data-label="Window">15 min (default)</td>' in html
    assert "Fires on a fatal error; resolves once 15 min pass with none" in html


# --- every session an alert names ------------------------------------------------------------


@pytest.fixture
def named_alert(org):
    """An alert naming 25 sessions in no order of time, two of them no longer stored."""
    rule = rule_of(org, C.ERROR_RATE)
    sessions = error_sessions(org, 23)
    ids = [s.session_id for s in sessions]
    ids = [*ids[10:], "erased-1", *ids[:10], "erased-2"]
    return Alert.objects.create(rule=rule, organization=org, summary="many", session_ids=ids)


def test_an_alerts_sessions_are_listed_newest_first_a_page_at_a_time(named_alert, monkeypatch):
    monkeypatch.setattr(named, "SESSIONS_PAGE", 10)
    first = named.named_sessions(named_alert, 1)
    assert [s.session_id for s in first.sessions] == [f"call-{i:02d}" for i in range(10)]
    assert (first.gone, first.number, first.pages, first.total, first.first, first.last) == ([], 1, 3, 25, 1, 10)
    last = named.named_sessions(named_alert, 3)
    assert [s.session_id for s in last.sessions] == ["call-20", "call-21", "call-22"]
    assert last.gone == ["erased-1", "erased-2"] and (last.first, last.last) == (21, 25)
    assert named.named_sessions(named_alert, 99).number == 3  # past the last: the last


def test_the_alert_page_pages_through_its_sessions(named_alert, staff_client):
    page_size = named.SESSIONS_PAGE
    html = staff_client.get(f"/alerts/{named_alert.pk}/").content.decode()
    assert html.count('<tr data-session="call-') == page_size and 'data-session="call-00"' in html
    assert f"1–{page_size} of 25, newest first" in html and "?page=2#sessions" in html
    assert "25 sessions, listed below" in html
    rest = staff_client.get(f"/alerts/{named_alert.pk}/?page=2").content.decode()
    assert rest.count('<tr data-session="call-') == 23 - page_size and "erased-2" in rest
    assert "no longer stored" in rest and "?page=1#sessions" in rest
    assert staff_client.get(f"/alerts/{named_alert.pk}/?page=two").status_code == 400
    listing = staff_client.get("/alerts/").content.decode()
    assert f'href="/alerts/{named_alert.pk}/#sessions" data-testid="all-sessions">and 20 more</a>' in listing


def test_another_organization_and_a_viewer_read_the_alert_page_as_the_policy_says(named_alert, other_org, org):
    outsider = Client()
    outsider.force_login(make_member(other_org, "globex-admin", "admin"))
    assert outsider.get(f"/alerts/{named_alert.pk}/?page=2").status_code == 404
    viewer = Client()
    viewer.force_login(make_member(org, "watcher", "viewer"))
    html = viewer.get(f"/alerts/{named_alert.pk}/?page=2").content.decode()
    assert "erased-2" in html and 'data-testid="alert-actions"' not in html


# --- the Overview's firing alerts ------------------------------------------------------------------


@pytest.fixture
def firing_alert(org):
    rule = rule_of(org, C.ERROR_RATE, threshold=20)
    ids = [s.session_id for s in error_sessions(org, 7)]
    return Alert.objects.create(rule=rule, organization=org, summary="70 % of sessions had errors", session_ids=ids)


def overview_item(client, alert) -> str:
    html = client.get("/overview/panel/").content.decode()
    found = re.search(rf'<li id="alert-{alert.pk}".*?</li>', html, re.S)
    return found.group(0) if found else ""


def test_the_overview_links_each_firing_alert_and_says_who_has_it(firing_alert, operator_client):
    item = overview_item(operator_client, firing_alert)
    assert f'href="/alerts/{firing_alert.pk}/" data-testid="alert-link">rule error_rate</a>' in item
    assert 'data-testid="unacknowledged">not acknowledged' in item and 'data-testid="acknowledge"' in item
    assert f'href="/alerts/{firing_alert.pk}/#sessions" data-testid="all-sessions">and 2 more</a>' in item
    response = operator_client.post(f"/alerts/{firing_alert.pk}/act/", {"do": "acknowledge", "next": "/"})
    assert response.status_code == 302 and response["Location"] == f"/#alert-{firing_alert.pk}"
    operator_client.post(f"/alerts/{firing_alert.pk}/act/", {"do": "silence", "minutes": "60", "next": "/"})
    operator_client.post(f"/alerts/{firing_alert.pk}/act/", {"do": "assign", "user": "operator", "next": "/"})
    item = overview_item(operator_client, firing_alert)
    assert 'data-testid="acknowledged">acknowledged by operator' in item and "not acknowledged" not in item
    assert 'data-testid="silenced">silenced until <time' in item and "by operator" in item
    assert 'data-testid="owner">owner: operator' in item
    assert 'data-testid="acknowledge"' not in item and 'data-testid="silence"' in item  # taken; still silenceable


def test_a_viewer_sees_the_overviews_alerts_but_no_action_and_is_refused_one(firing_alert, viewer_client, org):
    item = overview_item(viewer_client, firing_alert)
    assert "not acknowledged" in item and "<form" not in item
    assert viewer_client.post(f"/alerts/{firing_alert.pk}/act/", {"do": "acknowledge", "next": "/"}).status_code == 403
    assert viewer_client.post(f"/alerts/{firing_alert.pk}/act/", {"do": "silence", "minutes": "60"}).status_code == 403
    firing_alert.refresh_from_db()
    assert firing_alert.acknowledged_at is None and not firing_alert.silenced()
    assert not AuditEntry.objects.filter(organization=org, action=AuditEntry.Action.ALERT_ACKNOWLEDGED).exists()


def test_another_organizations_overview_neither_shows_nor_works_the_alert(firing_alert, other_org):
    outsider = Client()
    outsider.force_login(make_member(other_org, "globex-operator", "operator"))
    assert overview_item(outsider, firing_alert) == "" and "rule error_rate" not in outsider.get("/").content.decode()
    response = outsider.post(f"/alerts/{firing_alert.pk}/act/", {"do": "acknowledge", "next": "/"})
    assert response.status_code == 404
    firing_alert.refresh_from_db()
    assert firing_alert.acknowledged_at is None


def test_what_nobody_has_acknowledged_is_listed_first(org, staff_client):
    rule = rule_of(org, C.ERROR_RATE)
    now = timezone.now()
    older = Alert.objects.create(
        rule=rule, organization=org, key="a", summary="older", fired_at=now - timedelta(hours=1)
    )
    newer = Alert.objects.create(
        rule=rule, organization=org, key="b", summary="newer", fired_at=now, acknowledged_at=now, acknowledged_by="ops"
    )
    newest = Alert.objects.create(
        rule=rule, organization=org, key="c", summary="newest", fired_at=now + timedelta(seconds=1)
    )
    expected = [f'id="alert-{a.pk}"' for a in (newest, older, newer)]
    for page in ("/", "/alerts/"):
        html = staff_client.get(page).content.decode()
        assert sorted(expected, key=html.index) == expected, page


def test_a_resolved_alert_says_its_summary_is_the_last_while_firing_and_shows_no_silence(org, staff_client):
    rule = rule_of(org, C.ERROR_RATE)
    later = timezone.now() + timedelta(hours=1)
    alert = Alert.objects.create(
        rule=rule,
        organization=org,
        summary="17.8 % of sessions had errors",
        status=Alert.Status.RESOLVED,
        resolved_at=timezone.now(),
        silenced_until=later,
        silenced_by="ops",
    )
    html = staff_client.get(f"/alerts/{alert.pk}/").content.decode()
    assert 'data-testid="last-firing">Last while firing:</span> <span class="summary">17.8 %' in html
    assert 'data-testid="silenced"' not in html and 'data-testid="unacknowledged"' not in html
    Alert.objects.filter(pk=alert.pk).update(status=Alert.Status.FIRING, resolved_at=None)
    html = staff_client.get(f"/alerts/{alert.pk}/").content.decode()
    assert 'data-testid="silenced">silenced until <time' in html and "Last while firing" not in html
