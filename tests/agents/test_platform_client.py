"""dashboard/agents/pipecat_cloud.py against a faked Pipecat Cloud (pytest-httpx): shapes, parameters, errors, cache."""

import asyncio
import json
import re
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.core.cache import cache

from dashboard.agents import pipecat_cloud
from dashboard.agents.pipecat_cloud import completion_status_failed, log_level, parse_timestamp
from dashboard.agents.upstream import AgentsAPIError
from dashboard.org.models import Organization
from tests.agents_samples import BASE, KEY, Trickle, background_fetches
from tests.platform_samples import (
    ACTIVE_SESSION,
    AGENT_NAME,
    AGENT_STATUS,
    COLD_ERROR_SESSION,
    DEPLOYMENT_ID,
    LOGS_BODY,
    OLD_DEPLOYMENT_ID,
    SESSION_DETAIL,
    SESSIONS_BODY,
    WARM_COMPLETED_SESSION,
    fake_pipecat_cloud,
    make_logs,
    make_sessions,
)

AGENT_URL = f"{BASE}/agents/{AGENT_NAME}"
SESSION_ID = WARM_COMPLETED_SESSION["sessionId"]


@pytest.fixture(autouse=True)
def _fast(fast_retries):
    fast_retries.PLATFORM_CACHE_TTL = 60
    fast_retries.PLATFORM_ENDED_SESSION_TTL = 600


# Each endpoint's fetch (with a key, by default the right one) and cached get, for the cases they share.
FETCHES = {
    "status": lambda key=KEY: pipecat_cloud.fetch_agent_status(BASE, key, AGENT_NAME),
    "sessions": lambda key=KEY: pipecat_cloud.fetch_platform_sessions(BASE, key, AGENT_NAME),
    "session": lambda key=KEY: pipecat_cloud.fetch_platform_session(BASE, key, AGENT_NAME, SESSION_ID),
    "logs": lambda key=KEY: pipecat_cloud.fetch_logs(BASE, key, AGENT_NAME),
}
GETS = {
    "status": lambda org, refresh=False: pipecat_cloud.get_agent_status(org, AGENT_NAME, refresh=refresh),
    "sessions": lambda org, refresh=False: pipecat_cloud.get_platform_sessions(org, AGENT_NAME, refresh=refresh),
    "session": lambda org, refresh=False: pipecat_cloud.get_platform_session(
        org, AGENT_NAME, SESSION_ID, refresh=refresh
    ),
    "logs": lambda org, refresh=False: pipecat_cloud.get_logs(org, AGENT_NAME, refresh=refresh),
}
BODIES = {"status": AGENT_STATUS, "sessions": SESSIONS_BODY, "session": SESSION_DETAIL, "logs": LOGS_BODY}
endpoints = pytest.mark.parametrize("endpoint", list(FETCHES))
# A page of log lines is redacted with its organization's rules before it is cached: those read the database.
reads_rules = pytest.mark.django_db(transaction=True)


def sent(httpx_mock) -> httpx.Request:
    (request,) = httpx_mock.get_requests()
    return request


# --- Shapes ------------------------------------------------------------------


async def test_an_agents_status_is_read_from_the_reference_shape(httpx_mock):
    httpx_mock.add_response(url=AGENT_URL, json=AGENT_STATUS)
    status = await pipecat_cloud.fetch_agent_status(BASE, KEY, AGENT_NAME)
    assert (status.name, status.region, status.ready, status.available) == (AGENT_NAME, "us-west", True, True)
    assert status.active_deployment_id == DEPLOYMENT_ID and status.active_deployment_ready is True
    assert status.active_session_count == 2
    assert (status.min_agents, status.max_agents) == (1, 10)  # from minReplicas / maxReplicas
    assert status.deployment.image == "your-dockername/support-bot:0.1"
    assert status.deployment.service_id == AGENT_STATUS["deployment"]["serviceId"]
    assert status.created_at == datetime(2025, 4, 9, 15, 1, 17, 414000, tzinfo=UTC)
    assert status.agent_profile == "agent-1x" and not status.rolling_out


async def test_a_status_reads_min_and_max_agents_and_tolerates_missing_optional_fields(httpx_mock):
    lean = {"name": AGENT_NAME, "ready": False, "available": True, "autoScaling": {"minAgents": 0, "maxAgents": 3}}
    httpx_mock.add_response(url=AGENT_URL, json={**lean, "desiredDeploymentId": "new", "reconciledDeploymentId": "old"})
    status = await pipecat_cloud.fetch_agent_status(BASE, KEY, AGENT_NAME)
    assert (status.min_agents, status.max_agents) == (0, 3)
    assert status.deployment is None and status.region == "" and status.active_session_count is None
    assert status.active_deployment_id == "new"  # activeDeploymentId is deprecated for desiredDeploymentId
    assert status.rolling_out


async def test_sessions_are_read_with_their_start_completion_and_duration(httpx_mock):
    httpx_mock.add_response(url=re.compile(rf"{re.escape(AGENT_URL)}/sessions\?.*"), json=SESSIONS_BODY)
    page = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME)
    assert page.total_count == 330 and page.next_offset == 3
    active, warm, cold = page.sessions

    assert cold.cold_start is True and cold.bot_start_seconds == 7.0 and isinstance(cold.bot_start_seconds, float)
    assert cold.completion_status == "HTTP_ERROR" and cold.failed and not cold.active
    assert cold.duration_seconds == 25.0 and cold.deployment_id == OLD_DEPLOYMENT_ID
    assert cold.session_id == COLD_ERROR_SESSION["sessionId"]

    assert warm.cold_start is False and warm.completion_status == "HTTP_COMPLETED" and not warm.failed
    assert warm.duration_seconds == 95.5
    assert warm.resource_metrics is None and warm.meeting_ids == []  # the list has no detail

    assert active.active and active.ended_at is None and active.completion_status is None
    assert not active.failed and active.duration_seconds is None
    assert active.session_id == ACTIVE_SESSION["sessionId"] and active.service_id == ACTIVE_SESSION["serviceId"]


async def test_a_session_record_has_its_resource_metrics_and_meetings(httpx_mock):
    httpx_mock.add_response(url=f"{AGENT_URL}/sessions/{SESSION_ID}", json=SESSION_DETAIL)
    session = await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, SESSION_ID)
    metrics = session.resource_metrics
    assert metrics.sample_count == 3
    assert metrics.cpu_millicores == {"p50": 150, "p90": 280, "p95": 320, "p99": 450}
    assert metrics.memory_bytes["p99"] == 268435456
    assert [(s.t, s.cpu_millicores, s.memory_bytes) for s in metrics.timeseries][-1] == (1761122376, 450.5, 268435456)
    assert metrics.timeseries[0].at == datetime.fromtimestamp(1761122366, UTC)
    assert session.meeting_ids == ["f1e2d3c4-b5a6-9780-1234-567890abcdef"]


async def test_meeting_ids_may_be_plain_strings_and_metrics_may_be_missing(httpx_mock):
    body = {**WARM_COMPLETED_SESSION, "meetingIds": ["m-1"], "resourceMetrics": None}
    httpx_mock.add_response(url=f"{AGENT_URL}/sessions/{SESSION_ID}", json=body)
    session = await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, SESSION_ID)
    assert session.meeting_ids == ["m-1"] and session.resource_metrics is None


@pytest.mark.parametrize(
    "status,failed",
    [
        ("HTTP_ERROR", True),
        ("PIPELINE_ERROR", True),  # any *_ERROR
        ("ERROR", True),
        (500, True),  # a number, as its text
        ("404", True),
        (400, True),
        ("HTTP_COMPLETED", False),
        ("WS_CONNECTION_CLOSED", False),
        (200, False),
        ("399", False),
        (None, False),
    ],
)
async def test_the_failed_rule(httpx_mock, status, failed):
    httpx_mock.add_response(
        url=f"{AGENT_URL}/sessions/{SESSION_ID}", json={**SESSION_DETAIL, "completionStatus": status}
    )
    session = await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, SESSION_ID)
    assert session.failed is failed
    assert session.completion_status == (None if status is None else str(status))
    assert completion_status_failed(session.completion_status) is failed


async def test_a_numeric_completion_status_sent_as_a_float_is_its_code():
    body = {**WARM_COMPLETED_SESSION, "completionStatus": 502.0}
    assert pipecat_cloud.parse_platform_session(body).completion_status == "502"


async def test_log_lines_keep_the_nanoseconds_and_read_time_and_level(httpx_mock):
    httpx_mock.add_response(url=re.compile(rf"{re.escape(AGENT_URL)}/logs\?.*"), json=LOGS_BODY)
    page = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME)
    assert (page.total, page.relation) == (79, "eq")
    error, warning, info = page.logs
    assert info.level == "INFO" and info.text.startswith("INFO:     Uvicorn running")
    assert info.timestamp_raw == "2025-04-18T20:32:42.246099974Z"
    assert info.timestamp == datetime(2025, 4, 18, 20, 32, 42, 246099, tzinfo=UTC)  # truncated, not rounded
    assert warning.level == "WARNING" and warning.deployment_id == DEPLOYMENT_ID
    assert error.level == "ERROR" and error.timestamp.microsecond == 153744 and error.deployment_id is None


@pytest.mark.parametrize(
    "line,level",
    [
        ("INFO:     Application startup complete.", "INFO"),
        ("WARNING:root:low disk", "WARNING"),
        ("2025-04-18 20:33:01.512 | ERROR    | bot:run:88 - LLM failed", "ERROR"),
        ("2025-04-18 20:33:01.512 | TRACE    | pipecat:push:1 - frame", "DEBUG"),
        ("2025-04-18 20:33:01.512 | SUCCESS  | bot:main:3 - ready", "INFO"),
        ("2025-04-18 20:33:01.512 | CRITICAL | bot:main:3 - out of memory", "CRITICAL"),
        ("ERROR Bot crashed", "ERROR"),
        ("ERROR", "ERROR"),
        ("DEBUG turn 3", "DEBUG"),
        ("WARN deprecated option", "WARNING"),
        ("[ERROR] the TTS timed out", "ERROR"),
        ("2025-04-18 20:33:01,512 - FATAL - gone", "CRITICAL"),
        ("Error connecting to the LLM", ""),  # a message, not a level
        ("Sending INFO request to the CRM", ""),
        ("INFORMATION: not a level", ""),
        ("", ""),
    ],
)
def test_a_log_lines_level_is_read_from_its_head(line, level):
    assert log_level(line) == level


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2025-04-18T20:34:17.153744602Z", datetime(2025, 4, 18, 20, 34, 17, 153744, tzinfo=UTC)),
        ("2025-04-18T20:34:17.1Z", datetime(2025, 4, 18, 20, 34, 17, 100000, tzinfo=UTC)),
        ("2025-04-18T20:34:17Z", datetime(2025, 4, 18, 20, 34, 17, tzinfo=UTC)),
        ("2025-04-18T22:34:17.5+02:00", datetime(2025, 4, 18, 20, 34, 17, 500000, tzinfo=UTC)),
        ("2025-04-18 20:34:17", datetime(2025, 4, 18, 20, 34, 17, tzinfo=UTC)),
        ("yesterday", None),
        ("2025-13-40T99:00:00Z", None),
    ],
)
def test_timestamps_are_read_to_microseconds(text, expected):
    assert parse_timestamp(text) == expected


async def test_a_log_line_with_an_unreadable_time_is_kept_with_its_raw_text(httpx_mock):
    body = {"total": {"value": 1, "relation": "gte"}, "logs": [{"log": "INFO: hi", "timestamp": "soon"}]}
    httpx_mock.add_response(url=re.compile(rf"{re.escape(AGENT_URL)}/logs\?.*"), json=body)
    page = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME)
    (line,) = page.logs
    assert line.timestamp is None and line.timestamp_raw == "soon" and page.relation == "gte"


@pytest.mark.parametrize(
    "endpoint,body,words",
    [
        ("status", [], r"agent: expected an object, got list"),
        ("status", {**AGENT_STATUS, "ready": "yes"}, r"agent\.ready: expected bool, got str"),
        ("status", {k: v for k, v in AGENT_STATUS.items() if k != "name"}, r"agent\.name is missing"),
        ("status", {**AGENT_STATUS, "activeSessionCount": True}, r"agent\.activeSessionCount: expected int, got bool"),
        ("status", {**AGENT_STATUS, "autoScaling": {"maxReplicas": "10"}}, r"agent\.autoScaling\.maxReplicas"),
        ("status", {**AGENT_STATUS, "deployment": {"manifest": {}}}, r"agent\.deployment\.id is missing"),
        ("sessions", {"sessions": []}, r"body\.total_count is missing"),
        ("sessions", {"total_count": 1, "sessions": {}}, r"body\.sessions: expected list, got dict"),
        ("sessions", {"total_count": 1, "sessions": [{}]}, r"sessions\[0\]\.sessionId is missing"),
        (
            "sessions",
            {"total_count": 1, "sessions": [{**ACTIVE_SESSION, "coldStart": "no"}]},
            r"sessions\[0\]\.coldStart: expected bool, got str",
        ),
        (
            "sessions",
            {"total_count": 1, "sessions": [{**ACTIVE_SESSION, "createdAt": "later"}]},
            r"sessions\[0\]\.createdAt: 'later' is not an ISO 8601 timestamp",
        ),
        ("session", {**SESSION_DETAIL, "completionStatus": ["x"]}, r"session\.completionStatus: expected str or int"),
        (
            "session",
            {**SESSION_DETAIL, "resourceMetrics": {"timeseries": [{"t": 1, "c": "hi", "m": 2}]}},
            r"session\.resourceMetrics\.timeseries\[0\]\.c: expected int or float, got str",
        ),
        (
            "session",
            {**SESSION_DETAIL, "meetingIds": [{"participantId": "p"}]},
            r"session\.meetingIds\[0\]\.meetingId is missing",
        ),
        ("logs", {"logs": []}, r"body\.total is missing"),
        ("logs", {"total": {"value": "many"}, "logs": []}, r"body\.total\.value: expected int, got str"),
        ("logs", {"total": {"value": 1}, "logs": [{"timestamp": "x"}]}, r"logs\[0\]\.log is missing"),
        ("logs", {"total": {"value": 1}, "logs": ["INFO: hi"]}, r"logs\[0\]: expected an object, got str"),
    ],
)
async def test_a_wrong_shape_says_what_was_wrong_and_where(httpx_mock, endpoint, body, words):
    httpx_mock.add_response(json=body)
    with pytest.raises(AgentsAPIError, match=r"unexpected shape: " + words):
        await FETCHES[endpoint]()


# --- Parameters ----------------------------------------------------------------


async def test_sessions_send_every_filter_with_times_as_unix_seconds(httpx_mock):
    httpx_mock.add_response(json={"total_count": 0, "sessions": []})
    start = datetime(2025, 10, 22, 8, 0, 0, 500000, tzinfo=UTC)
    await pipecat_cloud.fetch_platform_sessions(
        BASE,
        KEY,
        AGENT_NAME,
        limit=25,
        offset=50,
        deployment_id=DEPLOYMENT_ID,
        start_time=start,
        end_time=start + timedelta(hours=1),
        status="ended",
        start_type="cold",
    )
    request = sent(httpx_mock)
    assert request.url.path == f"/v1/agents/{AGENT_NAME}/sessions"
    assert dict(request.url.params) == {
        "limit": "25",
        "offset": "50",
        "deploymentId": DEPLOYMENT_ID,
        "startTime": "1761120000",  # rounded down ...
        "endTime": "1761123601",  # ... and the end up: the window sent holds the one asked for
        "status": "ended",
        "startType": "cold",
    }
    assert request.headers["Authorization"] == f"Bearer {KEY}"


async def test_a_naive_time_is_read_as_utc_and_unset_filters_are_not_sent(httpx_mock):
    httpx_mock.add_response(json={"total_count": 0, "sessions": []})
    await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, start_time=datetime(2025, 10, 22, 8, 0, 0))
    assert dict(sent(httpx_mock).url.params) == {
        "limit": "50",
        "offset": "0",
        "startTime": "1761120000",
        "status": "all",
        "startType": "all",
    }


async def test_logs_send_every_filter(httpx_mock):
    httpx_mock.add_response(json={"total": {"value": 0, "relation": "eq"}, "logs": []})
    await pipecat_cloud.fetch_logs(
        BASE,
        KEY,
        AGENT_NAME,
        limit=100,
        offset=200,
        deployment_id=DEPLOYMENT_ID,
        session_id=SESSION_ID,
        query="timed out & retried",
        order="asc",
        start_time=1761120000.9,
        end_time=datetime(2025, 10, 22, 9, tzinfo=UTC),
    )
    request = sent(httpx_mock)
    assert request.url.path == f"/v1/agents/{AGENT_NAME}/logs"
    assert dict(request.url.params) == {
        "limit": "100",
        "offset": "200",
        "deploymentId": DEPLOYMENT_ID,
        "sessionId": SESSION_ID,
        "query": "timed out & retried",
        "order": "asc",
        "startTime": "1761120000",
        "endTime": "1761123600",
    }


@pytest.mark.parametrize(
    "call,path",
    [
        (lambda: pipecat_cloud.fetch_agent_status(BASE, KEY, "bot/../x y"), "/v1/agents/bot%2F..%2Fx%20y"),
        (lambda: pipecat_cloud.fetch_platform_sessions(BASE, KEY, "a/b"), "/v1/agents/a%2Fb/sessions"),
        (lambda: pipecat_cloud.fetch_logs(BASE, KEY, "a?b"), "/v1/agents/a%3Fb/logs"),
        (
            lambda: pipecat_cloud.fetch_platform_session(BASE, KEY, "a b", "s/1?x#y"),
            "/v1/agents/a%20b/sessions/s%2F1%3Fx%23y",
        ),
    ],
)
async def test_names_and_session_ids_are_quoted_as_one_path_segment(httpx_mock, call, path):
    httpx_mock.add_response(status_code=500, is_reusable=True)
    with pytest.raises(AgentsAPIError):
        await call()
    assert {r.url.raw_path.decode().split("?")[0] for r in httpx_mock.get_requests()} == {path}


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, status="live"), "status must be one of"),
        (lambda: pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, start_type="hot"), "start_type must be"),
        (lambda: pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, limit=0), "limit must be"),
        (lambda: pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, offset=-1), "offset must be"),
        (lambda: pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, order="newest"), "order must be one of asc, desc"),
        (lambda: pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, start_time="yesterday"), "a time must be"),
        (lambda: pipecat_cloud.fetch_agent_status(BASE, KEY, ""), "agent_name must be a non-empty string"),
        (lambda: pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, ""), "session_id must be"),
    ],
)
async def test_an_argument_outside_the_documented_values_is_a_value_error_and_never_sent(httpx_mock, call, words):
    with pytest.raises(ValueError, match=words):
        await call()
    assert httpx_mock.get_requests() == []


# --- Errors ----------------------------------------------------------------------


@endpoints
@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_says_so(httpx_mock, endpoint, status):
    httpx_mock.add_response(status_code=status, json={"error": "Unauthorized / token expired", "code": "401"})
    with pytest.raises(AgentsAPIError, match=r"refused the key .*AGENTS_API_KEY.*Unauthorized / token expired"):
        await FETCHES[endpoint]()


@pytest.mark.parametrize("endpoint", ["status", "sessions", "logs"])
async def test_a_404_names_the_agent(httpx_mock, endpoint):
    httpx_mock.add_response(status_code=404, json={"error": "Not found", "code": "NOT_FOUND"})
    with pytest.raises(AgentsAPIError, match=rf"has no agent named '{AGENT_NAME}' \(HTTP 404\).*AGENTS_API_BASE_URL"):
        await FETCHES[endpoint]()


async def test_a_404_for_a_session_is_an_answer_not_an_error(httpx_mock):
    httpx_mock.add_response(status_code=404, json={"error": "Session not found", "code": "404"})
    assert await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, SESSION_ID) is None


async def test_a_400_quotes_the_upstreams_reason(httpx_mock):
    httpx_mock.add_response(status_code=400, json={"error": "Invalid parameters", "code": "400"})
    with pytest.raises(
        AgentsAPIError, match=r'rejected the request .* \(HTTP 400\)\. The API said: "Invalid parameters"'
    ):
        await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME)


@endpoints
async def test_a_5xx_is_retried_then_succeeds(httpx_mock, endpoint):
    httpx_mock.add_response(status_code=502)
    httpx_mock.add_response(json=BODIES[endpoint])
    assert await FETCHES[endpoint]() is not None
    assert len(httpx_mock.get_requests()) == 2


@endpoints
async def test_a_failing_upstream_is_retried_a_bounded_number_of_times(httpx_mock, settings, endpoint):
    httpx_mock.add_response(status_code=503, json={"error": "Internal server error"}, is_reusable=True)
    with pytest.raises(AgentsAPIError, match=r"failed \(HTTP 503\)\. It is the upstream's fault"):
        await FETCHES[endpoint]()
    assert len(httpx_mock.get_requests()) == 1 + settings.AGENTS_RETRIES


@endpoints
async def test_a_refused_connection_is_retried_then_explained(httpx_mock, settings, endpoint):
    httpx_mock.add_exception(httpx.ConnectError("Connection refused"), is_reusable=True)
    with pytest.raises(AgentsAPIError, match=r"Could not connect to the agents API .* Check AGENTS_API_BASE_URL"):
        await FETCHES[endpoint]()
    assert len(httpx_mock.get_requests()) == 1 + settings.AGENTS_RETRIES


@endpoints
async def test_a_timeout_is_explained(httpx_mock, endpoint):
    httpx_mock.add_exception(httpx.ReadTimeout("slow"))
    with pytest.raises(AgentsAPIError, match=r"did not answer in time.*AGENTS_READ_TIMEOUT"):
        await FETCHES[endpoint]()


@endpoints
async def test_a_trickling_upstream_is_cut_off_at_the_deadline(httpx_mock, settings, endpoint):
    settings.AGENTS_DEADLINE = 0.4
    trickle = Trickle(json.dumps(BODIES[endpoint]).encode(), pause=0.02)  # seconds in all
    httpx_mock.add_callback(lambda request: httpx.Response(200, stream=trickle))
    started = time.monotonic()
    with pytest.raises(AgentsAPIError, match=r"did not answer within 0\.4 s .*AGENTS_DEADLINE"):
        await FETCHES[endpoint]()
    assert time.monotonic() - started < 1.0
    assert 0 < trickle.sent < len(trickle.body)


@endpoints
async def test_a_body_that_is_not_json_is_explained(httpx_mock, endpoint):
    httpx_mock.add_response(text="<html>login</html>", headers={"content-type": "text/html"})
    with pytest.raises(AgentsAPIError, match=r"not JSON \(text/html\)"):
        await FETCHES[endpoint]()


@endpoints
async def test_no_key_is_explained_without_calling(httpx_mock, endpoint):
    with pytest.raises(AgentsAPIError, match="No agents API key"):
        await FETCHES[endpoint](key="")
    assert httpx_mock.get_requests() == []


# --- Cache -------------------------------------------------------------------------


@endpoints
@reads_rules
async def test_a_second_load_is_served_from_the_cache(httpx_mock, organization, endpoint):
    httpx_mock.add_response(json=BODIES[endpoint])
    first = await GETS[endpoint](organization)
    second = await GETS[endpoint](organization)
    assert not first.from_cache and second.from_cache and not first.error and not second.error
    assert second.value == first.value and second.fetched_at == first.fetched_at
    assert len(httpx_mock.get_requests()) == 1


@reads_rules
async def test_every_parameter_and_the_organization_are_part_of_the_cache_key(httpx_mock, organization):
    fake_pipecat_cloud(httpx_mock, sessions=make_sessions(100))
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME, limit=10)
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME, limit=10)  # cached
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME, limit=10, offset=10)
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME, limit=10, status="active")
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME, limit=10, deployment_id=DEPLOYMENT_ID)
    await pipecat_cloud.get_platform_sessions(
        organization, AGENT_NAME, limit=10, start_time=datetime(2025, 10, 1, tzinfo=UTC)
    )
    await pipecat_cloud.get_logs(organization, AGENT_NAME, query="a")
    await pipecat_cloud.get_logs(organization, AGENT_NAME, query="b")
    other = Organization(name="Globex", agents_api_base_url=BASE, agents_api_key=KEY)
    await pipecat_cloud.get_platform_sessions(other, AGENT_NAME, limit=10)
    assert len(httpx_mock.get_requests()) == 8


@reads_rules
async def test_twenty_concurrent_cold_loads_make_one_upstream_request(httpx_mock, organization):
    async def slow_upstream(request):
        await asyncio.sleep(0.2)
        return httpx.Response(200, json=LOGS_BODY)

    httpx_mock.add_callback(slow_upstream, is_reusable=True)
    results = await asyncio.gather(*(pipecat_cloud.get_logs(organization, AGENT_NAME, query="x") for _ in range(20)))
    assert len(httpx_mock.get_requests()) == 1
    assert all(r.value.total == 79 and not r.error for r in results)


@endpoints
@reads_rules
async def test_a_failing_upstream_serves_the_last_good_answer_with_its_age(httpx_mock, organization, endpoint):
    httpx_mock.add_response(json=BODIES[endpoint])
    good = await GETS[endpoint](organization)
    httpx_mock.add_response(status_code=500, is_reusable=True)
    await asyncio.sleep(0.05)
    stale = await GETS[endpoint](organization, refresh=True)
    assert stale.stale and stale.from_cache
    assert stale.value == good.value and stale.fetched_at == good.fetched_at
    assert "HTTP 500" in stale.error
    assert stale.age_seconds >= 0.05 and stale.fetched_datetime == good.fetched_datetime


async def test_a_failing_upstream_with_no_history_gives_no_value_and_the_error(httpx_mock, organization):
    httpx_mock.add_response(status_code=401)
    fetched = await pipecat_cloud.get_agent_status(organization, AGENT_NAME)
    assert fetched.value is None and fetched.fetched_at is None and not fetched.stale
    assert "refused the key" in fetched.error


async def test_after_a_failure_loads_wait_out_the_backoff(httpx_mock, organization, short_waits):
    httpx_mock.add_response(status_code=404, json={"error": "Not found"})
    for _ in range(5):
        fetched = await pipecat_cloud.get_logs(organization, AGENT_NAME)
        assert fetched.value is None and "has no agent named" in fetched.error
    assert len(httpx_mock.get_requests()) == 1


async def test_an_unknown_session_is_none_without_an_error_and_cached_briefly(httpx_mock, organization, settings):
    settings.PLATFORM_CACHE_TTL = 1
    httpx_mock.add_response(status_code=404, json={"error": "Session not found", "code": "404"}, is_reusable=True)
    for _ in range(3):
        fetched = await pipecat_cloud.get_platform_session(organization, AGENT_NAME, "never-ran-here")
        assert fetched.value is None and fetched.error == "" and not fetched.stale and fetched.fetched_at
    assert len(httpx_mock.get_requests()) == 1

    await asyncio.sleep(1.1)  # PLATFORM_CACHE_TTL: the session may have appeared since
    await pipecat_cloud.get_platform_session(organization, AGENT_NAME, "never-ran-here")
    await background_fetches()
    assert len(httpx_mock.get_requests()) == 2


async def test_an_ended_session_is_cached_longer_than_an_active_one(httpx_mock, organization, settings):
    settings.PLATFORM_CACHE_TTL = 1
    settings.PLATFORM_ENDED_SESSION_TTL = 60
    fake_pipecat_cloud(httpx_mock)
    ended, active = WARM_COMPLETED_SESSION["sessionId"], ACTIVE_SESSION["sessionId"]
    assert (await pipecat_cloud.get_platform_session(organization, AGENT_NAME, ended)).value.resource_metrics
    assert (await pipecat_cloud.get_platform_session(organization, AGENT_NAME, active)).value.active
    await asyncio.sleep(1.1)
    assert not (await pipecat_cloud.get_platform_session(organization, AGENT_NAME, ended)).error
    await pipecat_cloud.get_platform_session(organization, AGENT_NAME, active)
    await background_fetches()
    paths = [r.url.path.rsplit("/", 1)[1] for r in httpx_mock.get_requests()]
    assert paths == [ended, active, active]


async def test_a_hung_upstream_costs_a_page_no_more_than_the_page_wait(httpx_mock, organization, short_waits):
    async def hung(request):
        await asyncio.sleep(0.5)
        return httpx.Response(200, json=AGENT_STATUS)

    httpx_mock.add_callback(hung)
    started = time.monotonic()
    fetched = await pipecat_cloud.get_agent_status(organization, AGENT_NAME)
    assert time.monotonic() - started < 0.45
    assert fetched.value is None and "has not answered within 0.2 s" in fetched.error
    await background_fetches()
    assert (await pipecat_cloud.get_agent_status(organization, AGENT_NAME)).value.name == AGENT_NAME


async def test_the_cache_holds_the_upstreams_plain_json(httpx_mock, organization):
    """Entries must survive pickling into Redis and a change of the dataclasses: the API's body is kept."""
    httpx_mock.add_response(json=SESSIONS_BODY)
    await pipecat_cloud.get_platform_sessions(organization, AGENT_NAME)
    call = pipecat_cloud._sessions_call(AGENT_NAME, pipecat_cloud.SessionFilters())
    prefix = pipecat_cloud._cache_prefix(organization, BASE, call)
    assert prefix.startswith(f"platform:{organization.pk}:")
    entry = await cache.aget(f"{prefix}:fresh")
    assert entry["body"] == SESSIONS_BODY and isinstance(entry["fetched_at"], float)
    json.dumps(entry)


# --- The fake, at scale (what the pages' tests lean on) ------------------------------


async def test_the_fake_answers_every_endpoint_with_filters(httpx_mock):
    sessions = make_sessions(1000, active=5)
    logs = make_logs(10_000, sessions[-20:])
    fake_pipecat_cloud(httpx_mock, sessions=sessions, logs=logs)

    page = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, limit=50, offset=100)
    assert page.total_count == 1000 and len(page.sessions) == 50 and page.next_offset == 150
    assert page.sessions[0].session_id == "sess-00899"  # newest first
    active = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, status="active")
    assert active.total_count == 5 and all(s.active for s in active.sessions)
    cold = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, start_type="cold", limit=1000)
    assert cold.total_count == 143 and all(s.cold_start for s in cold.sessions)
    old = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, deployment_id=OLD_DEPLOYMENT_ID, limit=1)
    assert old.total_count == 500
    window = await pipecat_cloud.fetch_platform_sessions(
        BASE,
        KEY,
        AGENT_NAME,
        start_time=datetime(2025, 10, 1, 1, tzinfo=UTC),
        end_time=datetime(2025, 10, 1, 2, tzinfo=UTC),
    )
    assert window.total_count == 61  # minutes 60 to 120, both ends included
    failed = [
        s for s in (await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, limit=1000)).sessions if s.failed
    ]
    # Every 10th (HTTP_ERROR) and every other 13th (HTTP 500, a number); WS_CONNECTION_CLOSED is no failure.
    assert len(failed) == sum(s["completionStatus"] in ("HTTP_ERROR", 500) for s in sessions) == 169

    newest = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, limit=10)
    assert newest.total == 10_000 and newest.relation == "eq"
    assert newest.logs[0].timestamp > newest.logs[-1].timestamp
    oldest = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, limit=3, order="asc")
    assert [line.level for line in oldest.logs] == ["INFO", "DEBUG", "ERROR"]
    assert oldest.logs[0].timestamp_raw == "2025-10-01T00:00:00.000000000Z"
    errors = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, query="tts service", limit=5, offset=5)
    assert errors.total == 3333 and len(errors.logs) == 5 and all(line.level == "ERROR" for line in errors.logs)
    one = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME, session_id=sessions[-1]["sessionId"], limit=1000)
    assert one.total == 500 and len(one.logs) == 500

    record = await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, "sess-00999")
    assert record.active and record.meeting_ids == [] and record.resource_metrics is None
    assert await pipecat_cloud.fetch_platform_session(BASE, KEY, AGENT_NAME, "sess-99999") is None
    with pytest.raises(AgentsAPIError, match="has no agent named 'nobody'"):
        await pipecat_cloud.fetch_agent_status(BASE, KEY, "nobody")
    with pytest.raises(AgentsAPIError, match="refused the key"):
        await pipecat_cloud.fetch_logs(BASE, "pk_wrong", AGENT_NAME)


async def test_the_fake_counts_past_ten_thousand_lines_as_a_lower_bound(httpx_mock):
    fake_pipecat_cloud(httpx_mock, logs=make_logs(10_001))
    page = await pipecat_cloud.fetch_logs(BASE, KEY, AGENT_NAME)
    assert (page.total, page.relation) == (10_000, "gte") and page.next_offset == 50


@pytest.mark.parametrize("filters", [pipecat_cloud.SessionFilters, pipecat_cloud.LogFilters])
def test_both_listings_page_and_window_by_one_rule(filters):
    """Sessions and logs share their page and their window (pipecat_cloud._Listing): checked and sent alike."""
    for bad in ({"limit": 0}, {"limit": True}, {"offset": -1}, {"offset": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            filters(**bad)
    sent = filters(limit=5, offset=10, start_time=100.7, end_time=200.2).params()
    assert {k: sent[k] for k in ("limit", "offset", "startTime", "endTime")} == {
        "limit": "5",
        "offset": "10",
        "startTime": "100",
        "endTime": "201",
    }
    assert "startTime" not in filters().params() and "endTime" not in filters().params()
