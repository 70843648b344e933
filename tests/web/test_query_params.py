"""Every kind of query parameter (dashboard/web/http.py, Query), good and bad, through the real URLconf.

The dashboard's own endpoints read a query as a form sends it (an empty value is absent, free text
without the spaces around it); /v1 reads it as Pipecat Cloud does (as sent: an empty number, choice,
time or yes-or-no is a bad value). Either way a bad parameter is a 400 whose error is
"<name>: <why>", quoting what it got, and a parameter given twice is refused.
"""

import pytest

from dashboard.agents.page import CHOICES
from dashboard.agents.pipecat_cloud import SESSION_STATUSES, START_TYPES
from rtvi_monitor.audio.models import SessionAudio
from rtvi_monitor.sessions.models import Session
from rtvi_monitor.sessions.queries import FILTER_CHOICES
from tests.conftest import make_agent
from tests.session_samples import make_session

pytestmark = pytest.mark.django_db

API = "/api/sessions/"
EVENTS = "/api/sessions/call-1/events/"
V1 = "/v1/agents/support-bot/sessions"
LOGS = "/v1/agents/support-bot/logs"
AUDIT = "/api/audit/"


@pytest.fixture
def get(client, org, api_key):
    make_agent(org, "support-bot")
    make_session(org)

    def get(path, query):
        return client.get(f"{path}?{query}", HTTP_AUTHORIZATION=f"Bearer {api_key}")

    return get


GOOD = [
    # whole numbers, and a page's limit and offset
    (API, "limit=1&offset=0"),
    (API, "limit=500&offset=1000000000"),
    (API, "limit=1000"),  # over 500: cut to 500, not refused (tests/live/test_storms.py asks for 1000)
    (API, "limit="),  # a form's empty field: absent
    (EVENTS, "after=0&before=9223372036854775807&limit=500"),
    (V1, "limit=1000&offset=1000000000&startTimeMin=0&startTimeMax=86400"),
    # choices
    (API, "status=ended&end=bot_vanished"),
    (API, "status="),
    (EVENTS, "direction=from-client"),
    (V1, "status=active&startType=warm"),
    (LOGS, "order=asc"),
    # free text
    (API, "agent=" + "a" * 100),
    (V1, "deploymentId=" + "d" * 200),
    (V1, "deploymentId="),  # empty text filters nothing, /v1 too
    (EVENTS, "type=" + "t" * 64),
    # session ids
    (LOGS, "sessionId=room:42.a_b-c"),
    # Unix seconds
    (V1, "startTime=1745000000.5&endTime=1745000001"),
    # ISO date-times: with a zone, without one (TIME_ZONE), and an unescaped "+" (a space)
    (API, "started_after=2025-06-01T12:00:00Z"),
    (API, "started_after=2025-06-01T12:00"),
    (API, "started_before=2025-06-01T12:00:00+02:00"),
    (AUDIT, "since=2026-11-24T10:00:00Z&until=2026-11-24T11:00:00+01:00&before=5"),
    # yes or no
    (API, "has_errors=TRUE&fatal=off&failed=0"),
    (API, "has_errors="),
    ("/v1/agents", "includeActiveDeployment=on"),
    (AUDIT, "format=json"),
]


@pytest.mark.parametrize(("path", "query"), GOOD)
def test_it_takes_a_good_parameter(get, path, query):
    response = get(path, query)
    assert response.status_code == 200, response.content


BAD = {
    "whole number": [  # ASCII digits only, within bounds, as sent
        (API, "limit=0", "limit", "expected a whole number from 1 to 1000000000, got '0'"),
        (API, "offset=1000000001", "offset", "expected a whole number from 0 to 1000000000"),
        (API, "offset=-1", "offset", "got '-1'"),
        (API, "limit=%C2%B2", "limit", "got '²'"),  # a digit to str.isdigit(), not a number
        (API, "limit=%205", "limit", "got ' 5'"),
        (EVENTS, f"before={2**63}", "before", "expected a whole number from 0 to 9223372036854775807"),
        (V1, "limit=", "limit", "expected a whole number from 1 to 1000, got ''"),  # /v1: empty is a bad value
        (V1, "offset=1000000001", "offset", "got '1000000001'"),
        (V1, "startTimeMax=%D9%A3", "startTimeMax", "got '٣'"),  # an Arabic-Indic three
        ("/api/sessions/call-1/audio/peaks/", "points=0", "points", "expected a whole number from 1 to 20000"),
    ],
    "choice": [  # exactly as written
        (API, "status=dead", "status", "expected one of live, ended, got 'dead'"),
        (API, "end=dropped", "end", "expected one of client_hung_up, bot_finished"),
        (EVENTS, "direction=sideways", "direction", "expected one of to-client, from-client, got 'sideways'"),
        ("/api/alerts/", "status=open", "status", "expected one of"),
        (V1, "status=", "status", "expected one of all, active, ended, got ''"),
        (V1, "startType=HOT", "startType", "expected one of all, cold, warm, got 'HOT'"),
        (LOGS, "order=newest", "order", "expected one of desc, asc, got 'newest'"),
        (AUDIT, "action=everything", "action", "expected one of"),
        (AUDIT, "format=csv", "format", "expected one of json, ndjson, got 'csv'"),
    ],
    "text": [  # bounded
        (API, "agent=" + "a" * 101, "agent", "expected at most 100 characters, got 101"),
        (API, "q=" + "q" * 201, "q", "expected at most 200 characters, got 201"),
        (EVENTS, "type=" + "t" * 65, "type", "expected at most 64 characters, got 65"),
        (V1, "deploymentId=" + "d" * 201, "deploymentId", "expected at most 200 characters, got 201"),
        (AUDIT, "actor=" + "x" * 201, "actor", "expected at most 200 characters, got 201"),
    ],
    "session id": [
        (LOGS, "sessionId=has%20space", "sessionId", "expected a session id (1-100 of A-Z a-z 0-9 _ . : -), got"),
        (LOGS, "sessionId=..", "sessionId", "got '..'"),
    ],
    "Unix seconds": [
        (V1, "startTime=1e9", "startTime", "expected Unix seconds (like 1745000000 or 1745000000.5), got '1e9'"),
        (V1, "endTime=", "endTime", "got ''"),
        (V1, "startTime=2000&endTime=1000", "startTime", "must not be after endTime"),
    ],
    "date-time": [
        (API, "started_after=yesterday", "started_after", "expected an ISO 8601 date-time like"),
        (API, "started_after=2025-13-01T00:00", "started_after", "got '2025-13-01T00:00'"),  # no 13th month
        (AUDIT, "since=2026-11-24T10:00:00", "since", "expected an ISO 8601 date-time with its zone"),
        (AUDIT, "before=x", "before", "got 'x'"),
    ],
    "yes or no": [
        (API, "has_errors=maybe", "has_errors", "expected true or false, got 'maybe'"),
        ("/v1/agents", "includeActiveDeployment=", "includeActiveDeployment", "expected true or false, got ''"),
        ("/api/agents/", "refresh=yes", "refresh", "expected true or false, got 'yes'"),
        ("/api/sessions/call-1/audio.wav", "download=yes", "download", "expected true or false, got 'yes'"),
    ],
    "given twice": [  # which one was meant?
        (API, "status=live&status=ended", "status", "must be given once, got 2 values: ['live', 'ended']"),
        (V1, "limit=5&limit=6", "limit", "must be given once, got 2 values"),
    ],
}


@pytest.mark.parametrize(
    ("path", "query", "name", "why"),
    [pytest.param(*row, id=f"{kind}-{i}") for kind, rows in BAD.items() for i, row in enumerate(rows)],
)
def test_a_bad_parameter_is_a_400_naming_it_and_what_it_got(get, org, path, query, name, why):
    if "/audio" in path:  # the recording must exist for its parameters to be read
        session = Session.objects.get(organization=org, session_id="call-1")
        SessionAudio.objects.create(session=session, sample_rate=16000, origin=0, end=1)
    response = get(path, query)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "400"
    assert body["error"].startswith(f"{name}: ") and why in body["error"], body["error"]


def test_a_value_too_long_to_quote_is_quoted_in_part(get):
    error = get(V1, "startTime=" + "9" * 300).json()["error"]
    assert f"got '{'9' * 100}'…" in error and "9" * 101 not in error


def test_the_sessions_page_names_a_bad_filter_and_offers_the_filters_choices(staff_client, org):
    html = staff_client.get("/sessions/?end=dead").content.decode()
    assert f"end: expected one of {', '.join(FILTER_CHOICES['end'])}, got &#x27;dead&#x27;" in html
    html = staff_client.get("/sessions/?end=bot_vanished").content.decode()
    select = html[html.index('<select id="f-end"') : html.index("</select>", html.index('id="f-end"'))]
    assert select.count("<option") == 1 + len(FILTER_CHOICES["end"])  # "any way", then each end
    assert '<option value="bot_vanished" selected>bot vanished</option>' in select
    assert all(f'value="{value}"' in select for value in FILTER_CHOICES["end"])


@pytest.mark.parametrize("status", FILTER_CHOICES["status"])
@pytest.mark.parametrize("end", FILTER_CHOICES["end"])
def test_the_api_takes_every_status_and_end_the_sessions_page_offers(get, status, end):
    assert get(API, f"status={status}&end={end}").status_code == 200


def test_the_agent_page_offers_the_platform_filters_its_api_takes_all_first():
    assert CHOICES["status"][0] == CHOICES["start"][0] == "all"
    assert set(CHOICES["status"]) == set(SESSION_STATUSES) and set(CHOICES["start"]) == set(START_TYPES)


@pytest.mark.parametrize("status", CHOICES["status"])
@pytest.mark.parametrize("start", CHOICES["start"])
def test_the_built_in_api_takes_every_filter_the_agent_page_offers(get, status, start):
    assert get(V1, f"status={status}&startType={start}").status_code == 200


def test_the_sessions_api_cuts_a_limit_over_its_most_to_it(get):
    assert get(API, "limit=1000").json()["limit"] == 500
