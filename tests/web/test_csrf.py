"""CSRF for JSON views: one decision, in dashboard/web/http.py `json_methods`.

Machine endpoints are exempt (a bearer key is no credential another site can make a browser send); a JSON
view that a member's browser changes things with says `browser_form=True`, and then a request of an unsafe
method riding on the browser's session cookie without the page's CSRF token is refused, before its door.
"""

import inspect
import json

import pytest
from django.conf import settings
from django.test import Client, RequestFactory

from dashboard.access import policy as access
from dashboard.web import http
from rtvi_monitor.alerts.models import Alert, AlertRule
from rtvi_monitor.sessions.models import Session
from tests.access.test_access_policy import url_patterns
from tests.conftest import make_member
from tests.sources import files_containing


def json_views():
    """(route, view) for every URL pattern whose view is a json_methods view."""
    return [(route, p.callback) for route, p, _ in url_patterns() if hasattr(p.callback, "json_methods")]


def member_writes(view) -> list[str]:
    """The unsafe methods of a JSON view whose door lets a member's browser in (an action with a role)."""
    if getattr(view, "access_door", None) != "json":  # a bot's door (ingest): no browser session is read
        return []
    actions = view.access_action
    methods = []
    for method in sorted(http.UNSAFE_METHODS & set(view.json_methods)):
        action = actions if isinstance(actions, str) else (actions or {}).get(method)
        if action in access.ACTIONS and access.ACTIONS[action].role is not None:
            methods.append(method)
    return methods


def test_every_json_view_a_members_browser_changes_things_with_checks_csrf():
    unchecked = [route for route, view in json_views() if member_writes(view) and not view.browser_form]
    assert unchecked == [], f"JSON views a member's browser may change things with, not browser_form=True: {unchecked}"
    # The views this is about today: if none were found, the walk above checked nothing.
    checked = {route for route, view in json_views() if view.browser_form}
    assert {"api/sessions/<str:session_id>/end/", "api/alerts/<int:pk>/acknowledge/"} <= checked


def test_csrf_is_turned_on_nowhere_else():
    """The old copies (a view calling CsrfViewMiddleware itself) are gone: json_methods decides."""
    assert files_containing("CsrfViewMiddleware(") == ["dashboard/web/http.py"]
    assert "csrf_exempt(" in inspect.getsource(http.json_methods)


def _request(method: str, **extra):
    request = getattr(RequestFactory(), method.lower())("/api/any/", **extra)
    request.COOKIES[settings.SESSION_COOKIE_NAME] = "a-browser-session"
    return request


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "view"), [(r, v) for r, v in json_views() if v.browser_form])
def test_a_browser_form_view_refuses_a_cross_site_request_and_lets_a_key_through(route, view):
    for method in sorted(http.UNSAFE_METHODS & set(view.json_methods)):
        refused = http.csrf_refusal(_request(method))
        assert refused is not None and refused.status_code == 403, (route, method)
        assert "CSRF" in json.loads(refused.content)["error"]
        assert http.csrf_refusal(_request(method, HTTP_AUTHORIZATION="Bearer pk_x")) is None  # a key's
        assert http.csrf_refusal(getattr(RequestFactory(), method.lower())("/api/any/")) is None  # no cookie


@pytest.fixture
def browser(org):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_member(org, "csrf-op", "operator"))
    client.get("/alerts/")  # the page sets the CSRF cookie
    return client, client.cookies["csrftoken"].value


@pytest.mark.django_db
def test_a_cross_site_post_without_the_token_is_refused_where_a_member_acts(browser, org):
    client, token = browser
    Session.objects.create(organization=org, session_id="call-1")
    rule = AlertRule.objects.create(organization=org, name="r", condition=AlertRule.Condition.FATAL_ERROR)
    alert = Alert.objects.create(organization=org, rule=rule, key="k", summary="t")
    for path in (
        "/api/sessions/call-1/end/",
        "/api/sessions/call-1/send-text/",
        f"/api/alerts/{alert.pk}/acknowledge/",
    ):
        refused = client.post(path, "{}", content_type="application/json")
        assert refused.status_code == 403 and "CSRF" in refused.json()["error"], path
    refused = client.delete("/api/sessions/call-1/")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    # With the token the door and the view answer (here: the call has no bot to ask, 409; the alert is taken).
    assert (
        client.post(
            "/api/sessions/call-1/end/", "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
        ).status_code
        == 409
    )
    taken = client.post(
        f"/api/alerts/{alert.pk}/acknowledge/", "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert taken.status_code == 200


@pytest.mark.django_db
def test_a_script_without_a_cookie_meets_the_door_not_the_csrf_check():
    anonymous = Client(enforce_csrf_checks=True)
    response = anonymous.post("/api/sessions/call-1/end/", "{}", content_type="application/json")
    assert response.status_code == 401 and "CSRF" not in response.json()["error"]
