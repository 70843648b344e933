"""What the settings pages and the login page say is true: a threshold typed in the unit beside it and shown back
as typed, defaults said as such, no action offered that the server refuses, a refused login that names no staff
account; and who may open them (an admin of the organization only; another organization's rows are a 404)."""

import re

import pytest
from django.test import Client

from dashboard.org.models import Membership, Organization, Role
from rtvi_monitor.alerts.models import AlertRule
from tests.conftest import make_member

pytestmark = pytest.mark.django_db

C = AlertRule.Condition


def _input(html: str, name: str) -> str:
    return re.search(rf'<input [^>]*name="{name}"[^>]*>', html).group(0)


def _rule(client, **fields):
    return client.post("/settings/alert-rules/", {"agent_choice": "", "enabled": "on", **fields})


@pytest.mark.parametrize(
    ("condition", "typed", "stored", "unit", "read"),
    [
        (C.TURN_LATENCY_P95, "2.5", 2500.0, "s", "2.5 s"),
        (C.ERROR_RATE, "12.5", 12.5, "%", "12.5 %"),
        (C.ENDED_BADLY, "4", 4.0, "sessions", "4"),
    ],
)
def test_a_threshold_is_typed_in_the_unit_beside_it_and_its_edit_shows_it_as_typed(
    staff_client, org, condition, typed, stored, unit, read
):
    assert _rule(staff_client, name="r", condition=condition, threshold=typed).status_code == 302
    rule = AlertRule.objects.get(organization=org)
    assert rule.threshold == stored
    html = staff_client.get(f"/settings/alert-rules/?edit={rule.pk}").content.decode()
    assert f'value="{typed}"' in _input(html, "threshold")
    assert f'<span class="unit" id="id_threshold-unit">{unit}</span>' in html
    assert f'<td data-label="Threshold">{read}</td>' in html
    again = staff_client.post(
        "/settings/alert-rules/",
        {"id": rule.pk, "name": "r", "condition": condition, "threshold": typed, "agent_choice": "", "enabled": "on"},
    )
    assert again.status_code == 302
    rule.refresh_from_db()
    assert rule.threshold == stored  # saved again unchanged: no drift by a unit each round


def test_a_threshold_the_condition_cannot_take_is_refused_by_the_form_saying_why(staff_client, org):
    refused = _rule(staff_client, name="r", condition=C.ERROR_RATE, threshold="150")
    assert (
        refused.status_code == 400
        and "Out of range: a share of sessions is from 0 to 100 %." in refused.content.decode()
    )
    none = _rule(staff_client, name="f", condition=C.FATAL_ERROR, threshold="3")
    assert none.status_code == 400 and "This condition takes no threshold" in none.content.decode()
    zero = _rule(staff_client, name="w", condition=C.FATAL_ERROR, window_minutes="0")
    assert zero.status_code == 400
    assert not AlertRule.objects.exists()


def test_defaults_are_said_as_such_and_the_words_read_right(staff_client, org):
    AlertRule.objects.create(organization=org, name="fatal", condition=C.FATAL_ERROR)
    html = staff_client.get("/settings/alert-rules/").content.decode()
    assert '<td data-label="Threshold">none: one fatal error fires it</td>' in html
    assert '<td data-label="Window">15 min (default)</td>' in html
    assert ">default<" not in html
    assert "Add an alert rule" in html and "Webhook URL" in html and "Add a alert" not in html
    head = html.split("<body")[0]
    assert "<th" not in head  # the table's columns are in the table, not in the page's <head>
    prices = staff_client.get("/settings/prices/").content.decode()
    assert "USD per million input tokens" in prices and "Usd per" not in prices and "Add a price" in prices


def test_the_only_admin_is_offered_neither_removal_nor_a_lower_role(staff_client, staff_user, org):
    mine = Membership.objects.get(user=staff_user)
    html = staff_client.get("/settings/members/").content.decode()
    row = html.split(f'data-member="{staff_user.username}"')[1].split("</tr>")[0]
    assert 'value="remove"' not in row and "<select" not in row and "the only admin" in row
    other = make_member(org, "second", Role.ADMIN)
    html = staff_client.get("/settings/members/").content.decode()
    for username in (staff_user.username, other.username):
        row = html.split(f'data-member="{username}"')[1].split("</tr>")[0]
        assert 'value="remove"' in row and 'value="viewer"' in row and "the only admin" not in row
    Membership.objects.filter(user=other).delete()
    staff_client.post("/settings/members/", {"do": "remove", "membership": mine.pk})
    assert Membership.objects.filter(pk=mine.pk).exists()  # still refused by the server, as the page said


def test_a_failed_login_says_it_matches_no_account_and_not_which_part(client, org):
    make_member(org, "ana", Role.VIEWER)
    for username in ("ana", "nobody"):
        html = client.post("/login/", {"username": username, "password": "wrong"}).content.decode()
        assert "That username and password do not match an account." in html
        assert "staff" not in html.lower()


@pytest.mark.parametrize(
    "path",
    [
        "/settings/alert-rules/",
        "/settings/prices/",
        "/settings/members/",
        "/settings/retention/",
        "/settings/recording/",
        "/settings/keys/",
    ],
)
def test_a_viewer_and_an_operator_may_not_open_a_settings_page(viewer_client, operator_client, path):
    for client in (viewer_client, operator_client):
        refused = client.get(path)
        assert refused.status_code == 403 and b"needs the admin role" in refused.content


def test_another_organizations_admin_reaches_none_of_these_rows(org, other_org):
    rule = AlertRule.objects.create(organization=org, name="ours", condition=C.ERROR_RATE, threshold=20)
    theirs = Client()
    theirs.force_login(make_member(other_org, "globex-admin", Role.ADMIN))
    assert theirs.get(f"/settings/alert-rules/?edit={rule.pk}").status_code == 404
    posted = theirs.post(
        "/settings/alert-rules/",
        {"id": rule.pk, "name": "x", "condition": C.ERROR_RATE, "threshold": "1", "agent_choice": ""},
    )
    assert posted.status_code == 404
    rule.refresh_from_db()
    assert rule.threshold == 20 and rule.name == "ours"
    assert "ours" not in theirs.get("/settings/alert-rules/").content.decode()
    mine = Membership.objects.create(user=make_member(Organization.objects.create(name="x"), "z"), organization=org)
    assert theirs.post("/settings/members/", {"do": "remove", "membership": mine.pk}).status_code == 404
