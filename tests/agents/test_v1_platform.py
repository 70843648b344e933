"""The built-in agents API's agent, sessions and logs endpoints, through the real URLconf: Pipecat Cloud's contract.

GET /v1/agents/<name>, .../sessions, .../sessions/<id> and .../logs, as
https://docs.pipecat.ai/api-reference/pipecat-cloud/rest-reference shapes
them (dashboard/agents/builtin_api.py). GET /v1/agents itself is tests/agents/test_v1_agents.py.
"""

import asyncio
import json
import logging
import re
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.agents import builtin_api
from dashboard.agents.models import Agent
from dashboard.org.models import ApiKey
from rtvi_monitor.sessions.models import Event, Session
from tests.conftest import make_agent
from tests.sockets import rtvi

pytestmark = pytest.mark.django_db

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ISO_NS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
DETAIL_FIELDS = {
    "name", "region", "ready", "available", "createdAt", "updatedAt", "desiredDeploymentId", "activeDeploymentId",
    "reconciledDeploymentId", "activeDeploymentReady", "autoScaling", "activeSessionCount", "agentProfile",
    "deployment", "krispViva", "currentRevision", "previousRevision",
}  # fmt: skip
SESSION_FIELDS = {
    "sessionId", "serviceId", "organizationId", "deploymentId", "endedAt", "botStartSeconds", "coldStart",
    "completionStatus", "createdAt", "updatedAt",
}  # fmt: skip
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
E0 = T0.timestamp()


def get(client, path, key, **params):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return client.get(f"/v1/agents/{path}", params, **headers)


def ok(response) -> dict:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()


def bad(response, parameter: str) -> str:
    """The 400's message, which must name the parameter."""
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "400" and parameter in body["error"], body
    return body["error"]


def add_session(agent, session_id, minutes=0, **fields) -> Session:
    """A session of `agent` started `minutes` after T0 (ended unless status says live)."""
    started = T0 + timedelta(minutes=minutes)
    defaults = {
        "status": Session.Status.ENDED,
        "ended_at": started + timedelta(seconds=30),
        "last_event_at": started + timedelta(seconds=29),
        "end_reason": "bot disconnected",
        "deployment_id": str(agent.active_deployment_id or ""),
    }
    defaults.update(fields)
    if defaults["status"] == Session.Status.LIVE:
        defaults.update(ended_at=None, end_reason="")
    return Session.objects.create(
        organization=agent.organization,
        session_id=session_id,
        agent=agent,
        agent_key=str(agent.pk),
        agent_name=agent.name,
        started_at=started,
        **defaults,
    )


def add_lines(session, lines, start=E0, step=1.0, direction="to-client") -> list[Event]:
    """Messages of `session`: each (type, data), received `step` seconds apart from `start`."""
    first = (Event.objects.filter(session=session).order_by("-seq").values_list("seq", flat=True).first()) or 0
    return Event.objects.bulk_create(
        Event(
            session=session,
            seq=first + i,
            direction=direction,
            type=kind,
            received_at=start + i * step,
            message=json.dumps(rtvi(kind, data)),
        )
        for i, (kind, data) in enumerate(lines, 1)
    )


def log(text, level=None):
    return ("system-log", {"text": text} if level is None else {"text": text, "level": level})


@pytest.fixture
def bot(org):
    return make_agent(
        org,
        "support-bot",
        manifest={"spec": {"region": "eu-central", "autoScaling": {"minReplicas": 1, "maxReplicas": 5}}},
    )


ENDPOINTS = ["support-bot", "support-bot/sessions", "support-bot/sessions/call-1", "support-bot/logs"]


# --- every endpoint: keys, organizations, methods --------------------------------------------------


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "headers",
    [{}, {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"}, {"HTTP_AUTHORIZATION": "Bearer pk_not-a-real-key"}],
    ids=["missing", "wrong-scheme", "unknown"],
)
def test_every_endpoint_answers_401_json_without_a_valid_key(client, bot, path, headers):
    add_session(bot, "call-1")
    response = client.get(f"/v1/agents/{path}", **headers)
    assert response.status_code == 401
    assert response.json()["code"] == "401" and response.json()["error"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_revoked_key_is_refused_and_a_used_key_recorded(client, org, bot, path):
    record, secret = ApiKey.issue(org)
    add_session(bot, "call-1")
    ok(get(client, path, secret))
    record.refresh_from_db()
    assert record.last_used_at is not None
    record.revoked_at = timezone.now()
    record.save()
    assert get(client, path, secret).status_code == 401


@pytest.mark.parametrize("path", ENDPOINTS)
def test_no_key_learns_nothing_of_which_agents_exist(client, bot, path):
    """The key is checked before the name: without one, a real and a made-up agent answer alike."""
    for name in ("support-bot", "no-such-bot"):
        assert client.get(f"/v1/agents/{path.replace('support-bot', name)}").status_code == 401


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_a_wrong_method_is_a_json_405(client, api_key, bot, path, method):
    response = getattr(client, method)(f"/v1/agents/{path}", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 405
    assert response.json()["code"] == "405"
    assert response["Allow"] == "GET"


@pytest.mark.parametrize("path", ENDPOINTS)
def test_an_unknown_agent_is_a_json_404_naming_it(client, api_key, bot, path):
    response = get(client, path.replace("support-bot", "no-such-bot"), api_key)
    assert response.status_code == 404
    assert response.json() == {"error": "No agent named 'no-such-bot' in your organization.", "code": "404"}


@pytest.mark.parametrize("path", ENDPOINTS)
def test_another_organizations_agent_is_a_404_never_its_data(client, bot, other_org, path):
    add_session(bot, "call-1")
    add_lines(Session.objects.get(session_id="call-1"), [log("acme's secret")])
    other_key = ApiKey.issue(other_org)[1]
    response = get(client, path, other_key)
    assert response.status_code == 404
    assert b"secret" not in response.content and str(bot.pk).encode() not in response.content


def test_each_organization_sees_its_own_agent_of_the_same_name(client, bot, api_key, other_org):
    theirs = make_agent(other_org, "support-bot")
    add_session(bot, "ours-1")
    add_session(theirs, "theirs-1")
    add_lines(Session.objects.get(session_id="theirs-1"), [log("globex line")])
    add_lines(Session.objects.get(session_id="ours-1"), [log("acme line")])

    assert ok(get(client, "support-bot", api_key))["deployment"]["serviceId"] == str(bot.pk)
    sessions = ok(get(client, "support-bot/sessions", api_key))
    assert [s["sessionId"] for s in sessions["sessions"]] == ["ours-1"]
    assert {s["organizationId"] for s in sessions["sessions"]} == {str(bot.organization_id)}
    assert get(client, "support-bot/sessions/theirs-1", api_key).status_code == 404
    assert [entry["log"] for entry in ok(get(client, "support-bot/logs", api_key))["logs"]] == ["INFO: acme line"]


def test_a_session_named_for_another_organizations_agent_is_not_counted(client, bot, api_key, other_org):
    """Sessions belong to an organization first: a bot of another one naming our agent's id lands nowhere here."""
    Session.objects.create(organization=other_org, session_id="stray", agent_key=str(bot.pk), status="live")
    assert ok(get(client, "support-bot", api_key))["activeSessionCount"] == 0
    assert ok(get(client, "support-bot/sessions", api_key))["total_count"] == 0


@pytest.mark.parametrize("name", ["my bot", "bot.v2", "bót-ü", "a:b", "100%-bot"])
def test_agent_names_are_read_url_encoded_from_the_path(client, org, api_key, name):
    make_agent(org, name)
    assert ok(get(client, quote(name, safe=""), api_key))["name"] == name
    assert ok(get(client, f"{quote(name, safe='')}/sessions", api_key))["total_count"] == 0


def test_a_name_with_a_slash_is_not_an_agent_path(client, api_key, bot):
    assert get(client, "support-bot/extra", api_key).status_code == 404


# --- GET /v1/agents/<name> ------------------------------------------------------------------------


def test_the_agent_has_exactly_the_reference_fields(client, bot, api_key):
    add_session(bot, "live-1", status=Session.Status.LIVE)
    add_session(bot, "live-2", status=Session.Status.LIVE, bot_left_at=timezone.now())  # away: still live
    add_session(bot, "done-1")
    make_agent(bot.organization, "sales-bot")  # its sessions are not ours
    add_session(Agent.objects.get(name="sales-bot"), "sales-live", status=Session.Status.LIVE)

    body = ok(get(client, "support-bot", api_key))
    assert set(body) == DETAIL_FIELDS
    deployment_id = str(bot.active_deployment_id)
    assert body["name"] == "support-bot"
    assert body["region"] == "eu-central"
    assert body["ready"] is body["available"] is body["activeDeploymentReady"] is True
    assert body["desiredDeploymentId"] == body["activeDeploymentId"] == body["reconciledDeploymentId"] == deployment_id
    assert body["autoScaling"] == {"maxReplicas": 5, "minReplicas": 1}
    assert body["activeSessionCount"] == 2
    assert ISO_MS.match(body["createdAt"]) and ISO_MS.match(body["updatedAt"])
    assert body["deployment"]["id"] == deployment_id and body["deployment"]["serviceId"] == str(bot.pk)
    assert body["deployment"]["manifest"] == bot.active_deployment.manifest
    assert body["agentProfile"] is body["krispViva"] is body["currentRevision"] is body["previousRevision"] is None


def test_the_agents_deployment_is_the_one_the_list_shows(client, bot, api_key):
    (listed,) = ok(client.get("/v1/agents?includeActiveDeployment=true", HTTP_AUTHORIZATION=f"Bearer {api_key}"))[
        "services"
    ]
    detail = ok(get(client, "support-bot", api_key))
    assert detail["deployment"] == listed["deployment"]
    assert (detail["createdAt"], detail["updatedAt"]) == (listed["createdAt"], listed["updatedAt"])


@pytest.mark.parametrize(
    "manifest,region,scaling,profile,krisp",
    [
        ({"region": "us-west", "autoScaling": {"minAgents": 0, "maxAgents": 20}}, "us-west", (20, 0), None, None),
        (
            {"agentProfile": "agent-2x", "krispViva": {"audioFilter": "tel"}, "spec": {"region": "ap-south"}},
            "ap-south",
            None,
            "agent-2x",
            {"audioFilter": "tel"},
        ),
        ({"spec": {"autoScaling": {"maxReplicas": 3}}}, None, (3, None), None, None),
        ({"autoScaling": {"minAgents": "1", "maxAgents": True}, "region": 5}, None, None, None, None),
        ({"krispViva": {"audioFilter": None}}, None, None, None, {"audioFilter": None}),
        ({}, None, None, None, None),
    ],
    ids=["top-level", "spec-and-profile", "half-scaling", "wrong-types", "krisp-off", "empty"],
)
def test_region_scaling_profile_and_krisp_come_from_the_manifest(
    client, org, api_key, manifest, region, scaling, profile, krisp
):
    make_agent(org, "custom", manifest=manifest or {"image": "x"})
    body = ok(get(client, "custom", api_key))
    assert body["region"] == region
    assert body["autoScaling"] == (None if scaling is None else {"maxReplicas": scaling[0], "minReplicas": scaling[1]})
    assert body["agentProfile"] == profile
    assert body["krispViva"] == krisp


def test_an_agent_without_deployment_is_not_ready(client, org, api_key):
    Agent.objects.create(organization=org, name="fresh")
    body = ok(get(client, "fresh", api_key))
    assert body["ready"] is body["available"] is body["activeDeploymentReady"] is False
    assert body["activeDeploymentId"] is body["deployment"] is body["region"] is body["autoScaling"] is None
    assert body["activeSessionCount"] == 0


def test_a_deleted_agent_is_served_but_never_ready(client, org, api_key):
    """Deleted agents stay readable (GET /v1/agents lists them; their sessions and logs are history)."""
    old = make_agent(org, "old-bot", deleted=True)
    add_session(old, "old-1")
    add_lines(Session.objects.get(session_id="old-1"), [log("last words")])
    body = ok(get(client, "old-bot", api_key))
    assert body["ready"] is body["available"] is False
    assert body["activeDeploymentId"] == str(old.active_deployment_id)
    assert [s["sessionId"] for s in ok(get(client, "old-bot/sessions", api_key))["sessions"]] == ["old-1"]
    assert ok(get(client, "old-bot/logs", api_key))["logs"][0]["log"] == "INFO: last words"


# --- GET /v1/agents/<name>/sessions ----------------------------------------------------------------


def test_sessions_are_listed_newest_first_in_the_reference_shape(client, bot, api_key):
    first = add_session(bot, "call-1", minutes=0)
    add_session(bot, "call-2", minutes=5, status=Session.Status.LIVE, last_event_at=None)
    add_session(bot, "call-3", minutes=10, deployment_id="")
    other = make_agent(bot.organization, "sales-bot")
    add_session(other, "sales-1", minutes=20)
    Session.objects.create(organization=bot.organization, session_id="no-agent")

    body = ok(get(client, "support-bot/sessions", api_key))
    assert set(body) == {"total_count", "sessions"}
    assert body["total_count"] == 3
    assert [s["sessionId"] for s in body["sessions"]] == ["call-3", "call-2", "call-1"]
    for record in body["sessions"]:
        assert set(record) == SESSION_FIELDS
        assert record["serviceId"] == str(bot.pk)
        assert record["organizationId"] == str(bot.organization_id)
        assert record["botStartSeconds"] is None and record["coldStart"] is None
        assert ISO_MS.match(record["createdAt"]) and ISO_MS.match(record["updatedAt"])
    call3, call2, call1 = body["sessions"]
    assert call1 == {
        "sessionId": "call-1",
        "serviceId": str(bot.pk),
        "organizationId": str(bot.organization_id),
        "deploymentId": str(bot.active_deployment_id),
        "endedAt": "2025-06-01T12:00:30.000Z",
        "botStartSeconds": None,
        "coldStart": None,
        "completionStatus": "HTTP_COMPLETED",
        "createdAt": "2025-06-01T12:00:00.000Z",
        "updatedAt": "2025-06-01T12:00:30.000Z",  # its end, after its last message (12:00:29)
    }
    assert first.session_id == call1["sessionId"]
    # Live, no message yet: not ended, updated when it started.
    assert call2["endedAt"] is None and call2["completionStatus"] is None
    assert call2["updatedAt"] == call2["createdAt"] == "2025-06-01T12:05:00.000Z"
    assert call3["deploymentId"] is None  # unknown deployment


def test_updated_at_is_the_last_message_of_a_live_session(client, bot, api_key):
    add_session(bot, "live", status=Session.Status.LIVE, last_event_at=T0 + timedelta(seconds=12.3456))
    (record,) = ok(get(client, "support-bot/sessions", api_key))["sessions"]
    assert record["updatedAt"] == "2025-06-01T12:00:12.345Z"


@pytest.mark.parametrize(
    "fields,expected",
    [
        ({"status": Session.Status.LIVE}, None),
        ({"status": Session.Status.LIVE, "bot_left_at": T0}, None),  # away within the grace: still live
        ({"end_reason": "bot disconnected"}, "HTTP_COMPLETED"),
        ({"end_reason": ""}, "HTTP_COMPLETED"),
        ({"end_reason": "bot disconnected", "error_count": 3}, "HTTP_COMPLETED"),  # errors it survived
        ({"end_reason": "fatal error", "fatal": True}, "HTTP_ERROR"),
        ({"end_reason": "bot disconnected", "fatal": True}, "HTTP_ERROR"),
        ({"end_reason": "fatal error"}, "HTTP_ERROR"),
        ({"end_reason": "server restarted"}, "WS_CONNECTION_CLOSED"),
    ],
)
def test_completion_status_says_how_the_session_ended(client, bot, api_key, fields, expected):
    add_session(bot, "call-1", **fields)
    (listed,) = ok(get(client, "support-bot/sessions", api_key))["sessions"]
    assert listed["completionStatus"] == expected
    assert ok(get(client, "support-bot/sessions/call-1", api_key))["completionStatus"] == expected


def test_limit_and_offset_page_the_sessions_with_the_full_total(client, bot, api_key):
    for i in range(25):
        add_session(bot, f"call-{i:02d}", minutes=i)
    default = ok(get(client, "support-bot/sessions", api_key))
    assert default["total_count"] == 25
    assert [s["sessionId"] for s in default["sessions"]] == [f"call-{i:02d}" for i in range(24, 14, -1)]  # 10
    page = ok(get(client, "support-bot/sessions", api_key, limit=7, offset=20))
    assert page["total_count"] == 25
    assert [s["sessionId"] for s in page["sessions"]] == ["call-04", "call-03", "call-02", "call-01", "call-00"]
    assert ok(get(client, "support-bot/sessions", api_key, offset=25))["sessions"] == []
    assert len(ok(get(client, "support-bot/sessions", api_key, limit=1000))["sessions"]) == 25


def test_sessions_filter_by_status(client, bot, api_key):
    add_session(bot, "ended-1", minutes=1)
    add_session(bot, "live-1", minutes=2, status=Session.Status.LIVE)
    add_session(bot, "ended-2", minutes=3, end_reason="server restarted")

    def ids(**params):
        body = ok(get(client, "support-bot/sessions", api_key, **params))
        assert body["total_count"] == len(body["sessions"])
        return [s["sessionId"] for s in body["sessions"]]

    assert ids(status="active") == ["live-1"]
    assert ids(status="ended") == ["ended-2", "ended-1"]
    assert ids(status="all") == ids() == ["ended-2", "live-1", "ended-1"]


def test_sessions_filter_by_deployment(client, bot, api_key):
    add_session(bot, "old-deploy", deployment_id="dep-old")
    add_session(bot, "new-deploy", minutes=1)
    current = str(bot.active_deployment_id)
    body = ok(get(client, "support-bot/sessions", api_key, deploymentId=current))
    assert [s["sessionId"] for s in body["sessions"]] == ["new-deploy"] and body["total_count"] == 1
    assert [s["deploymentId"] for s in ok(get(client, "support-bot/sessions", api_key, deploymentId="dep-old"))[
        "sessions"
    ]] == ["dep-old"]  # fmt: skip
    assert ok(get(client, "support-bot/sessions", api_key, deploymentId="nope"))["total_count"] == 0
    assert ok(get(client, "support-bot/sessions", api_key, deploymentId=""))["total_count"] == 2  # empty: no filter


def test_sessions_filter_by_start_and_end_time_in_unix_seconds(client, bot, api_key):
    for minute in (0, 10, 20, 30):
        add_session(bot, f"at-{minute}", minutes=minute)

    def ids(**params):
        return [s["sessionId"] for s in ok(get(client, "support-bot/sessions", api_key, **params))["sessions"]]

    ten, twenty = int(E0) + 600, int(E0) + 1200
    assert ids(startTime=ten) == ["at-30", "at-20", "at-10"]  # from startTime, inclusive
    assert ids(endTime=twenty) == ["at-10", "at-0"]  # until endTime, exclusive
    assert ids(startTime=ten, endTime=twenty) == ["at-10"]
    assert ids(startTime=f"{ten}.5") == ["at-30", "at-20"]  # decimals
    assert ids(startTime=ten, endTime=ten) == []
    assert ok(get(client, "support-bot/sessions", api_key, startTime=ten, limit=1))["total_count"] == 3


def test_start_type_and_bot_start_filters_match_nothing_since_the_bot_start_is_unknown(client, bot, api_key):
    add_session(bot, "call-1")
    for params in ({"startType": "cold"}, {"startType": "warm"}, {"startTimeMin": 1}, {"startTimeMax": 5}):
        assert ok(get(client, "support-bot/sessions", api_key, **params)) == {"total_count": 0, "sessions": []}
    for params in ({"startType": "all"}, {"startTimeMin": 0, "startTimeMax": 0}):
        assert ok(get(client, "support-bot/sessions", api_key, **params))["total_count"] == 1


SESSION_BAD_PARAMS = [
    ("limit", "0"),
    ("limit", "1001"),
    ("limit", "-1"),
    ("limit", "+5"),
    ("limit", "ten"),
    ("limit", "1.5"),
    ("limit", ""),
    ("limit", " 5"),
    ("limit", "9" * 40),
    ("offset", "-1"),
    ("offset", "x"),
    ("offset", ""),
    ("offset", "1000000001"),
    ("status", "live"),
    ("status", "ACTIVE"),
    ("status", ""),
    ("startType", "hot"),
    ("startType", ""),
    ("startTime", "yesterday"),
    ("startTime", "-5"),
    ("startTime", "1e9"),
    ("startTime", "2025-06-01T12:00:00Z"),
    ("startTime", "1745000000."),
    ("startTime", ""),
    ("startTime", "nan"),
    ("startTime", "999999999999"),
    ("endTime", "soon"),
    ("endTime", "inf"),
    ("deploymentId", "d" * 201),
    ("startTimeMin", "-1"),
    ("startTimeMax", "x"),
]


@pytest.mark.parametrize("name,value", SESSION_BAD_PARAMS)
def test_a_bad_sessions_parameter_is_a_400_naming_it_and_its_value(client, bot, api_key, name, value):
    message = bad(get(client, "support-bot/sessions", api_key, **{name: value}), name)
    assert repr(value[:100]) in message or "characters" in message


def test_a_parameter_given_twice_is_a_400(client, bot, api_key):
    response = client.get("/v1/agents/support-bot/sessions?limit=5&limit=6", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert "given once" in bad(response, "limit")


def test_start_time_after_end_time_is_a_400_naming_both(client, bot, api_key):
    message = bad(get(client, "support-bot/sessions", api_key, startTime=2000, endTime=1000), "startTime")
    assert "endTime" in message


def test_unknown_parameters_are_ignored(client, bot, api_key):
    add_session(bot, "call-1")
    assert ok(get(client, "support-bot/sessions", api_key, color="blue"))["total_count"] == 1


# --- GET /v1/agents/<name>/sessions/<id> -------------------------------------------------------------


def test_one_session_is_the_list_record_with_metrics_and_meetings(client, bot, api_key):
    add_session(bot, "call-1", end_reason="fatal error", fatal=True)
    (listed,) = ok(get(client, "support-bot/sessions", api_key))["sessions"]
    detail = ok(get(client, "support-bot/sessions/call-1", api_key))
    assert detail == {**listed, "resourceMetrics": None, "meetingIds": []}
    assert detail["completionStatus"] == "HTTP_ERROR"


@pytest.mark.parametrize("session_id", ["no-such-call", "..", "a b", "x" * 101, "sales-1"])
def test_an_unknown_session_or_another_agents_is_a_404(client, bot, api_key, session_id):
    add_session(make_agent(bot.organization, "sales-bot"), "sales-1")
    response = get(client, f"support-bot/sessions/{quote(session_id, safe='')}", api_key)
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "404" and "support-bot" in body["error"]


def test_session_ids_with_the_characters_bots_use_are_found(client, bot, api_key):
    add_session(bot, "room:abc_1.2-x")
    assert ok(get(client, "support-bot/sessions/room:abc_1.2-x", api_key))["sessionId"] == "room:abc_1.2-x"


# --- GET /v1/agents/<name>/logs ---------------------------------------------------------------------


@pytest.fixture
def call(bot):
    """A session of the bot with every kind of log line, one a second from E0, and messages that are not lines."""
    session = add_session(bot, "call-1")
    add_lines(
        session,
        [
            log("Starting pipeline"),  # +1
            ("bot-ready", {"version": "1.0.0"}),  # +2: not a line
            log("LLM slow", level="warning"),  # +3
            ("error", {"error": "TTS hiccup", "fatal": False}),  # +4
            ("error", {"message": "Pipeline crashed", "fatal": True}),  # +5
            ("error-response", {"error": "Unknown action"}),  # +6
            log("Debugging detail", level="DEBUG"),  # +7
            log("odd level", level="not a level!"),  # +8
            ("system-log", {"text": 42}),  # +9: not a string, shown as JSON
        ],
    )
    add_lines(session, [log("from the client")], start=E0 + 100, direction="from-client")
    return session


CALL_LINES = [
    "INFO: Starting pipeline",
    "WARNING: LLM slow",
    "ERROR: TTS hiccup",
    "CRITICAL: Pipeline crashed",
    "ERROR: Unknown action",
    "DEBUG: Debugging detail",
    "INFO: odd level",
    "INFO: 42",
]


def lines(client, api_key, **params) -> list[str]:
    return [entry["log"] for entry in ok(get(client, "support-bot/logs", api_key, **params))["logs"]]


def test_logs_are_the_bots_lines_and_errors_newest_first(client, bot, api_key, call):
    body = ok(get(client, "support-bot/logs", api_key))
    assert set(body) == {"total", "logs"}
    assert body["total"] == {"value": 8, "relation": "eq"}
    assert [entry["log"] for entry in body["logs"]] == CALL_LINES[::-1]
    for entry in body["logs"]:
        assert set(entry) == {"log", "timestamp", "deploymentId"}
        assert ISO_NS.match(entry["timestamp"])
        assert entry["deploymentId"] == str(bot.active_deployment_id)
    assert body["logs"][-1]["timestamp"] == "2025-06-01T12:00:01.000000000Z"


def test_order_asc_gives_the_oldest_first(client, bot, api_key, call):
    assert lines(client, api_key, order="asc") == CALL_LINES
    assert lines(client, api_key, order="desc") == CALL_LINES[::-1]


def test_timestamps_have_nine_fraction_digits_from_the_received_time(client, bot, api_key):
    session = add_session(bot, "call-1")
    add_lines(session, [log("precise")], start=1_745_000_000.123456 - 1)
    add_lines(session, [log("whole")], start=1_745_000_100 - 1)
    stamps = [entry["timestamp"] for entry in ok(get(client, "support-bot/logs", api_key, order="asc"))["logs"]]
    assert stamps == ["2025-04-18T18:13:20.123456000Z", "2025-04-18T18:15:00.000000000Z"]


@pytest.mark.parametrize(
    "epoch,expected",
    [
        (0.0, "1970-01-01T00:00:00.000000000Z"),
        (1_745_008_457.153744, "2025-04-18T20:34:17.153744000Z"),  # the float's digits, not its binary noise
        (1_745_008_457.9999999999, "2025-04-18T20:34:18.000000000Z"),
        (1_745_008_457.5, "2025-04-18T20:34:17.500000000Z"),
    ],
)
def test_iso_ns_writes_nanoseconds(epoch, expected):
    assert builtin_api.iso_ns(epoch) == expected


def test_limit_and_offset_page_the_logs_with_the_exact_total(client, bot, api_key, call):
    body = ok(get(client, "support-bot/logs", api_key, limit=3, offset=2))
    assert body["total"] == {"value": 8, "relation": "eq"}
    assert [entry["log"] for entry in body["logs"]] == CALL_LINES[::-1][2:5]
    assert len(lines(client, api_key)) == 8  # the default limit (10) holds them all
    assert lines(client, api_key, offset=8) == []


def test_query_matches_the_line_case_insensitively_level_included(client, bot, api_key, call):
    assert lines(client, api_key, query="pipeline") == ["CRITICAL: Pipeline crashed", "INFO: Starting pipeline"]
    assert lines(client, api_key, query="error:") == ["ERROR: Unknown action", "ERROR: TTS hiccup"]
    assert lines(client, api_key, query="critical: pipe") == ["CRITICAL: Pipeline crashed"]
    assert lines(client, api_key, query="nothing like it") == []
    body = ok(get(client, "support-bot/logs", api_key, query="e", limit=2, offset=1, order="asc"))
    matching = [line for line in CALL_LINES if "e" in line.lower()]
    assert body["total"] == {"value": len(matching), "relation": "eq"}
    assert [entry["log"] for entry in body["logs"]] == matching[1:3]


def test_query_matches_text_beyond_ascii(client, bot, api_key):
    add_lines(add_session(bot, "call-1"), [log('Überweisung fehlgeschlagen: «Konto» "gesperrt"')])
    assert lines(client, api_key, query="überweisung") == ['INFO: Überweisung fehlgeschlagen: «Konto» "gesperrt"']
    assert len(lines(client, api_key, query='«konto» "gesperrt"')) == 1


def test_logs_filter_by_session_and_deployment(client, bot, api_key, call):
    other = add_session(bot, "call-2", minutes=1, deployment_id="dep-old")
    add_lines(other, [log("older deployment")], start=E0 + 50)
    assert lines(client, api_key, sessionId="call-2") == ["INFO: older deployment"]
    assert lines(client, api_key, deploymentId="dep-old") == ["INFO: older deployment"]
    current = ok(get(client, "support-bot/logs", api_key, deploymentId=str(bot.active_deployment_id)))
    assert current["total"]["value"] == 8
    assert ok(get(client, "support-bot/logs", api_key, sessionId="call-1"))["total"]["value"] == 8
    assert ok(get(client, "support-bot/logs", api_key))["total"]["value"] == 9
    assert lines(client, api_key, sessionId="no-such-call") == []
    entry = ok(get(client, "support-bot/logs", api_key, sessionId="call-2"))["logs"][0]
    assert entry["deploymentId"] == "dep-old"


def test_logs_filter_by_received_time(client, bot, api_key, call):
    start = int(E0) + 3
    assert lines(client, api_key, startTime=start, endTime=start + 3, order="asc") == CALL_LINES[1:4]
    assert lines(client, api_key, startTime=f"{start}.5", endTime=start + 3, order="asc") == CALL_LINES[2:4]
    assert ok(get(client, "support-bot/logs", api_key, endTime=start))["total"]["value"] == 1


def test_logs_leave_out_other_agents_and_the_clients_messages(client, bot, api_key, call):
    sales = make_agent(bot.organization, "sales-bot")
    add_lines(add_session(sales, "sales-1"), [log("sales line")])
    assert "INFO: from the client" not in lines(client, api_key, limit=100)
    assert "INFO: sales line" not in lines(client, api_key, limit=100)
    assert [e["log"] for e in ok(get(client, "sales-bot/logs", api_key))["logs"]] == ["INFO: sales line"]


def test_a_log_message_stored_as_raw_text_is_its_text(client, bot, api_key):
    session = add_session(bot, "call-1")
    Event.objects.create(
        session=session,
        seq=1,
        direction="to-client",
        type="system-log",
        received_at=E0,
        message="not json",
        valid=False,
    )
    assert lines(client, api_key) == ["INFO: not json"]


LOG_BAD_PARAMS = [
    ("limit", "0"),
    ("limit", "5000"),
    ("offset", "-3"),
    ("order", "newest"),
    ("order", "ASC"),
    ("order", ""),
    ("sessionId", ".."),
    ("sessionId", "has space"),
    ("sessionId", "x" * 101),
    ("query", "q" * 201),
    ("startTime", "last week"),
    ("endTime", "-1"),
]


@pytest.mark.parametrize("name,value", LOG_BAD_PARAMS)
def test_a_bad_logs_parameter_is_a_400_naming_it(client, bot, api_key, name, value):
    bad(get(client, "support-bot/logs", api_key, **{name: value}), name)


def test_ten_thousand_lines_are_read_through_the_log_index(client, bot, api_key):
    session = add_session(bot, "long-call")
    now = time.time()
    Event.objects.bulk_create(
        Event(
            session=session,
            seq=i,
            direction="to-client",
            type="system-log" if i % 10 else "metrics",
            received_at=now - 20_000 + i,
            message=json.dumps(rtvi("system-log", {"text": f"line {i} {'needle' if i % 1000 == 1 else ''}"})),
        )
        for i in range(1, 12_001)
    )
    logs_total = 12_000 - 1_200
    with CaptureQueriesContext(connection) as queries:
        body = ok(get(client, "support-bot/logs", api_key, limit=5))
    statements = [query["sql"] for query in queries.captured_queries]  # the next request resets the log
    assert body["total"] == {"value": logs_total, "relation": "eq"}
    assert [e["log"] for e in body["logs"]][:2] == ["INFO: line 11999 ", "INFO: line 11998 "]
    assert len(queries) <= 5  # key, agent, count, page (and the key's touch)

    body = ok(get(client, "support-bot/logs", api_key, query="NEEDLE", order="asc"))
    assert body["total"]["value"] == 12 and body["logs"][0]["log"] == "INFO: line 1 needle"

    if connection.vendor == "sqlite":  # the page and the count read the partial index of log lines
        reads = [sql for sql in statements if "rtvi_monitor_event" in sql]
        assert len(reads) >= 2  # the count and the page
        with connection.cursor() as cursor:
            for sql in reads:
                plan = " ".join(str(row) for row in cursor.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
                assert "event_log_idx" in plan, (sql, plan)


# --- the project's agents client reads these answers ------------------------------------------------


def test_the_agents_client_parses_every_answer(client, bot, api_key, call):
    """dashboard.agents.pipecat_cloud (what is read from Pipecat Cloud) reads the built-in API the same way."""
    from dashboard.agents import pipecat_cloud

    add_session(bot, "crashed", minutes=1, end_reason="fatal error", fatal=True)
    add_session(bot, "orphaned", minutes=2, end_reason="server restarted")
    add_session(bot, "live", minutes=3, status=Session.Status.LIVE)

    status = pipecat_cloud.parse_agent_status(ok(get(client, "support-bot", api_key)))
    assert (status.name, status.region, status.ready, status.available) == ("support-bot", "eu-central", True, True)
    assert status.active_deployment_id == status.deployment.id == str(bot.active_deployment_id)
    assert (status.min_agents, status.max_agents, status.active_session_count) == (1, 5, 1)
    assert not status.rolling_out

    page = pipecat_cloud.parse_platform_sessions(ok(get(client, "support-bot/sessions", api_key, limit=2)))
    assert page.total_count == 4 and page.next_offset == 2
    assert [(s.session_id, s.active, s.failed) for s in page.sessions] == [
        ("live", True, False),
        ("orphaned", False, False),
    ]
    crashed = pipecat_cloud.parse_platform_session(ok(get(client, "support-bot/sessions/crashed", api_key)))
    assert crashed.failed and crashed.completion_status == "HTTP_ERROR" and crashed.duration_seconds == 30
    assert crashed.resource_metrics is None and crashed.meeting_ids == [] and crashed.cold_start is None

    logs = pipecat_cloud.parse_logs(ok(get(client, "support-bot/logs", api_key, order="asc", limit=5)))
    assert (logs.total, logs.relation, logs.next_offset) == (8, "eq", 5)
    assert [line.level for line in logs.logs] == ["INFO", "WARNING", "ERROR", "CRITICAL", "ERROR"]
    assert logs.logs[0].timestamp == T0 + timedelta(seconds=1)
    assert logs.logs[0].timestamp_raw == "2025-06-01T12:00:01.000000000Z"
    assert logs.logs[0].deployment_id == str(bot.active_deployment_id)


def test_the_message_a_bot_forwards_a_line_with_is_valid_rtvi():
    """rtvi_dashboard.logs sends system-log with a `level` beside its `text`: the validator takes the extra field."""
    from rtvi_dashboard.logs import system_log

    from rtvi_monitor.core import protocol

    checked = protocol.check(system_log("Pipeline started", "WARNING"))
    assert checked.valid and checked.known and checked.type == "system-log"


# --- end to end: a bot's logger, its client, the server, the logs endpoint ----------------------------------


@pytest.fixture(scope="module")
def server():
    """The real dashboard (daphne), seeded with the demo organization and its built-in agents."""
    from tests.server import DaphneServer

    with DaphneServer() as running:
        running.key = running.seed_demo()[2]
        running.token = running.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        yield running


@pytest.mark.timeout(120)
async def test_a_bots_forwarded_log_lines_are_served_as_its_agents_logs(server):
    from rtvi_dashboard import DashboardClient
    from rtvi_dashboard.logs import forward_logging

    from dashboard.agents import pipecat_cloud

    bot_logger = logging.getLogger("e2e.bot")
    bot_logger.setLevel(logging.DEBUG)
    bot_logger.propagate = False
    client = DashboardClient(server.ws_url, server.token, "e2e-logs", "support-concierge")
    client.start()
    forwarder = forward_logging(client, "INFO", logger=bot_logger)
    try:
        bot_logger.info("Pipeline started")
        bot_logger.debug("below the level: stays home")
        bot_logger.warning("LLM slow: %d ms", 900)
        await asyncio.sleep(0.05)  # the lines reach the client on the loop's next turn; the error after them
        client.send(rtvi("error", {"error": "TTS failed", "fatal": False}))
        forwarder.close()
        assert await client.flush(10)

        base = f"{server.url}/v1"
        logs = await pipecat_cloud.fetch_logs(base, server.key, "support-concierge", session_id="e2e-logs", order="asc")
        assert logs.total == 3 and logs.relation == "eq"
        assert [line.level for line in logs.logs] == ["INFO", "WARNING", "ERROR"]
        assert logs.logs[0].text.startswith("INFO: e2e.bot:") and logs.logs[0].text.endswith(" - Pipeline started")
        assert logs.logs[1].text.endswith(" - LLM slow: 900 ms") and logs.logs[2].text == "ERROR: TTS failed"
        searched = await pipecat_cloud.fetch_logs(base, server.key, "support-concierge", query="llm SLOW")
        assert [line.level for line in searched.logs] == ["WARNING"]

        status = await pipecat_cloud.fetch_agent_status(base, server.key, "support-concierge")
        assert status.active_session_count >= 1
        sessions = await pipecat_cloud.fetch_platform_sessions(base, server.key, "support-concierge", status="active")
        (ours,) = [s for s in sessions.sessions if s.session_id == "e2e-logs"]
        assert ours.active and ours.deployment_id == status.active_deployment_id and ours.completion_status is None
        assert logs.logs[0].deployment_id == status.active_deployment_id
    finally:
        forwarder.close()
        await client.close()
        bot_logger.handlers.clear()


def test_a_search_reads_a_bounded_number_of_lines(client, bot, api_key, monkeypatch):
    """Past SCAN_MAX lines a search stops, and its total says it is a lower bound."""
    from dashboard.agents import builtin_api

    monkeypatch.setattr(builtin_api, "SCAN_MAX", 50)
    session = add_session(bot, "chatty", minutes=1)
    now = time.time()
    Event.objects.bulk_create(
        Event(
            session=session,
            seq=i,
            direction="to-client",
            type="system-log",
            received_at=now - 1000 + i,
            message=json.dumps(rtvi("system-log", {"text": f"needle {i}"})),
        )
        for i in range(1, 121)
    )
    body = ok(get(client, "support-bot/logs", api_key, query="needle", limit=5))
    assert body["total"] == {"value": 50, "relation": "gte"}
    assert body["logs"][0]["log"] == "INFO: needle 120"  # the newest first, as without a search
    assert ok(get(client, "support-bot/logs", api_key, limit=5))["total"] == {"value": 120, "relation": "eq"}
