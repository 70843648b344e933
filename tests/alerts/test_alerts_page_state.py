"""The alerts page says no alert has fired only when none ever has in the organization."""

import re

import pytest
from django.utils import timezone

from rtvi_monitor.alerts.models import Alert, AlertRule

pytestmark = pytest.mark.django_db

NEVER = "No alert has fired yet."


def table(page: str, testid: str) -> str:
    """The HTML of one of the page's alert tables."""
    match = re.search(rf'<table class="data[^"]*" data-testid="{testid}">.*?</table>', page, re.S)
    assert match, f"no {testid} table"
    return match.group(0)


def alerts_page(client) -> str:
    response = client.get("/alerts/")
    assert response.status_code == 200
    return response.content.decode()


def fired(org, status=Alert.Status.FIRING, summary="Fatal error in 1 session") -> Alert:
    rule = AlertRule.objects.create(organization=org, name="Fatal errors", condition=AlertRule.Condition.FATAL_ERROR)
    resolved_at = timezone.now() if status == Alert.Status.RESOLVED else None
    return Alert.objects.create(rule=rule, organization=org, summary=summary, status=status, resolved_at=resolved_at)


def test_an_organization_whose_alerts_never_fired_is_told_so(staff_client):
    page = alerts_page(staff_client)
    assert "Nothing is firing." in table(page, "firing") and NEVER in table(page, "history")


def test_an_alert_firing_now_is_not_told_as_none_ever_fired(staff_client, org):
    fired(org, summary="Fatal error in 2 sessions")
    page = alerts_page(staff_client)
    assert "Fatal error in 2 sessions" in table(page, "firing")
    assert NEVER not in page and "Nothing has resolved yet." in table(page, "history")


def test_a_resolved_alert_is_history_and_nothing_fires(staff_client, org):
    fired(org, Alert.Status.RESOLVED, summary="Fatal error in 1 session")
    page = alerts_page(staff_client)
    assert "Fatal error in 1 session" in table(page, "history") and "Nothing is firing." in table(page, "firing")
    assert NEVER not in page


def test_another_organizations_alerts_do_not_count(staff_client, other_org):
    fired(other_org, summary="Globex is on fire")
    page = alerts_page(staff_client)
    assert NEVER in table(page, "history") and "Globex is on fire" not in page
