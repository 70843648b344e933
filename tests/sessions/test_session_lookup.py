"""The organization's session named in a URL: one way to find it (rtvi_monitor/sessions/queries.py
`organization_session`), a page's 404 or a JSON 404 in its words, and never another organization's."""

import re

import pytest
from django.http import Http404

from rtvi_monitor.sessions.models import Session
from rtvi_monitor.sessions.queries import organization_session
from tests.sources import ROOT, files_containing

NOT_OURS = "No session 'theirs' in your organization."


@pytest.fixture
def theirs(other_org):
    return Session.objects.create(organization=other_org, session_id="theirs")


def test_it_finds_the_organizations_session_and_nobody_elses(org, theirs):
    ours = Session.objects.create(organization=org, session_id="ours")
    assert organization_session(org, "ours") == ours
    for organization, session_id in ((org, "theirs"), (None, "theirs"), (org, "nope")):
        with pytest.raises(Http404, match=re.escape(f"No session {session_id!r} in your organization.")):
            organization_session(organization, session_id)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/sessions/theirs/"),
        ("get", "/api/sessions/theirs/turns/"),
        ("get", "/api/sessions/theirs/traces/"),
        ("get", "/api/sessions/theirs/platform/"),
        ("get", "/api/sessions/theirs/events/"),
        ("get", "/api/sessions/theirs/control/"),
        ("post", "/api/sessions/theirs/end/"),
        ("get", "/api/sessions/theirs/audio/"),
        ("get", "/api/sessions/theirs/audio/peaks/"),
        ("post", "/api/sessions/theirs/audio/played/"),
    ],
)
def test_every_json_view_answers_another_organizations_session_with_the_same_json_404(
    staff_client, theirs, method, path
):
    response = getattr(staff_client, method)(path)
    assert response.status_code == 404 and response.json() == {"error": NOT_OURS, "code": "404"}


def test_the_page_answers_it_with_a_page_404(staff_client, theirs):
    response = staff_client.get("/sessions/theirs/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_no_view_finds_a_session_its_own_way():
    """Session.objects.find is the query; beside organization_session only the places whose answer is no 404
    call it: a bot's upload (try again later), the erase form (a form error), the session socket (a close)."""
    assert files_containing("Session.objects.find(") == [
        "dashboard/org/views.py",
        "rtvi_monitor/audio/views.py",
        "rtvi_monitor/live/consumers.py",
        "rtvi_monitor/sessions/queries.py",
    ]
    worded = files_containing("No session {session_id!r} in your organization")
    assert worded == ["rtvi_monitor/sessions/queries.py"]
    assert "Session.objects.find(token.organization" in (ROOT / "rtvi_monitor/audio/views.py").read_text()
