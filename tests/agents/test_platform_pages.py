"""The platform's view beside the dashboard's: the agent page, deployments compared, a session's platform record.

Against a Pipecat Cloud stand-in (faked at the httpx layer) and, with nothing
set but the organization's own key, against the built-in API over real HTTP.
"""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from rtvi_monitor.sessions.models import Event, Session
from tests.agents_samples import AGENT, BASE, KEY, URL, background_fetches
from tests.platform_samples import (
    ACTIVE_SESSION,
    COLD_ERROR_SESSION,
    DEPLOYMENT_ID,
    OLD_DEPLOYMENT_ID,
    WARM_COMPLETED_SESSION,
    fake_pipecat_cloud,
    make_logs,
    make_sessions,
)

PAGE = f"/agents/{AGENT['id']}/"
CLOUD_AGENT = {**AGENT, "activeDeploymentId": DEPLOYMENT_ID}


@pytest.fixture
def cloud(org, httpx_mock):
    """The organization's agents API is Pipecat Cloud (a stand-in): the agent list and the four agent endpoints."""
    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    httpx_mock.add_response(url=URL, json={"services": [CLOUD_AGENT]}, is_reusable=True, is_optional=True)
    httpx_mock.add_response(
        url=f"{URL}?includeActiveDeployment=true",
        json={"services": [CLOUD_AGENT]},
        is_reusable=True,
        is_optional=True,
    )
    return httpx_mock


def monitored(org, session_id, **fields) -> Session:
    """A session the dashboard has, of the Pipecat Cloud agent (no built-in row: keyed by the API's id)."""
    defaults = {"agent_key": AGENT["id"], "agent_name": AGENT["name"], "status": "ended"}
    return Session.objects.create(organization=org, session_id=session_id, **{**defaults, **fields})


def test_the_agent_page_shows_the_platforms_status_sessions_and_logs(staff_client, org, cloud):
    fake_pipecat_cloud(cloud)
    monitored(org, WARM_COMPLETED_SESSION["sessionId"])
    html = staff_client.get(PAGE).content.decode()
    assert 'data-testid="region">us-west<' in html  # the platform's status says where it runs
    assert "1 – 10 agents" in html  # autoscaling, from the reference's minReplicas/maxReplicas
    # The platform's sessions: failures first-class, cold starts and bot start time, linked when monitored.
    assert '<tr class="failed">' in html and "HTTP_ERROR" in html
    assert "7.0 s" in html and ">cold<" in html
    assert f'href="/sessions/{WARM_COMPLETED_SESSION["sessionId"]}/"' in html
    cold = COLD_ERROR_SESSION["sessionId"]  # a UUID: by its first 8 characters, the whole of it on hover
    assert f'<code class="id" title="{cold}">{cold[:8]}</code> <small class="muted">not monitored</small>' in html
    # The logs panel: each line with its level, as text.
    assert '<li class="log-error">' in html and '<li class="log-warning">' in html and '<li class="log-info">' in html
    assert "Bot crashed: TimeoutError waiting for the LLM" in html


def test_log_search_session_filter_and_paging_go_to_the_upstream(staff_client, org, cloud):
    sessions = make_sessions(60, start=timezone.now() - timedelta(hours=2))
    fake_pipecat_cloud(cloud, sessions=sessions, logs=make_logs(1000, sessions))
    html = staff_client.get(PAGE + "?q=timed+out&lo=100").content.decode()
    sent = [r for r in cloud.get_requests() if r.url.path.endswith("/logs")]
    assert sent[-1].url.params["query"] == "timed out" and sent[-1].url.params["offset"] == "100"
    assert "the TTS service timed out" in html and "request 3 served" not in html  # only the matching lines
    assert "?q=timed+out#logs" in html and "lo=200" in html  # newer and older pages, the search kept
    html = staff_client.get(PAGE + f"?log_session={sessions[4]['sessionId']}").content.decode()
    assert [r for r in cloud.get_requests() if r.url.path.endswith("/logs")][-1].url.params["sessionId"] == (
        sessions[4]["sessionId"]
    )
    assert "of 17 lines" in html  # 1,000 lines over 60 sessions: this one has 17


def test_the_deployments_view_compares_two_deployments(staff_client, org, cloud):
    now = timezone.now()
    sessions = make_sessions(40, start=now - timedelta(hours=1), active=0)
    fake_pipecat_cloud(cloud, sessions=sessions)
    # The dashboard has the conversation of some of them: slow with errors on the old deployment, fast on the new.
    for i, platform_session in enumerate(sessions[::2]):
        old = platform_session["deploymentId"] == OLD_DEPLOYMENT_ID
        monitored(
            org,
            platform_session["sessionId"],
            started_at=now - timedelta(minutes=30),
            latency_p50_ms=1500 if old else 600,
            latency_p95_ms=2500 if old else 900,
            error_count=1 if old and i % 2 else 0,
        )
    # And one session the platform does not list (a self-hosted worker): counted by what its bot said.
    monitored(org, "elsewhere", deployment_id=DEPLOYMENT_ID, latency_p50_ms=640, latency_p95_ms=950)
    response = staff_client.get(PAGE)
    rows = {r.deployment_id: r for r in response.context["deployments"]}
    new, old = rows[DEPLOYMENT_ID], rows[OLD_DEPLOYMENT_ID]
    assert [r.deployment_id for r in response.context["deployments"]] == [DEPLOYMENT_ID, OLD_DEPLOYMENT_ID]
    assert (new.sessions, new.monitored, new.platform_sessions, new.active) == (21, 11, 20, True)
    assert (old.sessions, old.monitored, old.platform_sessions, old.active) == (20, 10, 20, False)
    # The sessions' own figures to 10 ms (the middle of the bucket), as the Overview counts them.
    assert (new.p50, new.p95, old.p50, old.p95) == (605, 955, 1505, 2505)
    assert (new.error_rate, old.error_rate) == (0, 0.5)
    # Every 7th a cold start, every 10th HTTP_ERROR, every 13th an HTTP 500 (make_sessions' mix).
    assert old.cold_start_rate == 3 / 20 and new.cold_start_rate == 3 / 20
    assert (old.failed, new.failed) == (3, 4)
    assert "active</span>" in response.content.decode()


def test_a_session_counts_once_under_the_deployment_it_ran_on(staff_client, org, cloud):
    """The platform names no deployment for it; the dashboard recorded one: one row, the dashboard's."""
    now = timezone.now()
    record = {**make_sessions(1, start=now - timedelta(minutes=5), active=0)[0], "deploymentId": None}
    fake_pipecat_cloud(cloud, sessions=[record])
    monitored(org, record["sessionId"], deployment_id=DEPLOYMENT_ID, latency_p50_ms=700, latency_p95_ms=900)
    (row,) = staff_client.get(PAGE).context["deployments"]
    assert (row.deployment_id, row.sessions, row.monitored, row.platform_sessions) == (DEPLOYMENT_ID, 1, 1, 1)


def test_upstream_times_without_a_zone_are_read_as_utc(staff_client, org, cloud):
    now = timezone.now()
    record = make_sessions(1, start=now - timedelta(minutes=5), active=0)[0]
    fake_pipecat_cloud(cloud, sessions=[{**record, "createdAt": record["createdAt"].rstrip("Z")}])
    response = staff_client.get(PAGE)
    assert response.status_code == 200 and response.context["deployments"][0].sessions == 1


def test_a_bad_filter_is_named_and_ignored(staff_client, org, cloud):
    fake_pipecat_cloud(cloud)
    html = staff_client.get(PAGE + "?status=dead&lo=-1&so=%C2%B2").content.decode()
    assert "status: expected one of all, active, ended, got &#x27;dead&#x27;" in html
    assert "lo: expected a whole number" in html
    assert "so: expected a whole number" in html  # "²" is a digit to str.isdigit, not a number
    assert "HTTP_ERROR" in html  # the rest of the page as usual


# Async client: the page is served on the test's event loop, as daphne serves it, so the fetch a load
# starts in the background finishes (the sync client's loop ends with its request).
async def test_an_upstream_failure_shows_the_last_good_answer_with_its_age(
    async_client, staff_user, org, transactional_db, cloud, settings
):
    settings.PLATFORM_CACHE_TTL = 0
    fake = fake_pipecat_cloud(cloud)
    await async_client.aforce_login(staff_user)
    assert "HTTP_ERROR" in (await async_client.get(PAGE)).content.decode()
    fake.key = "pk_rotated"  # the platform now refuses the organization's key
    await async_client.get(PAGE)  # the last good answers at once, while they are asked again
    await background_fetches()
    html = (await async_client.get(PAGE)).content.decode()
    assert "Showing the platform's sessions fetched" in html and "refused the key" in html
    assert "HTTP_ERROR" in html  # the last good sessions, still shown


def test_a_sessions_api_answer_carries_its_platform_record_and_log_lines(staff_client, org, cloud):
    fake_pipecat_cloud(cloud, logs=make_logs(30, [WARM_COMPLETED_SESSION, COLD_ERROR_SESSION]))
    monitored(org, WARM_COMPLETED_SESSION["sessionId"], state={})
    body = staff_client.get(f"/api/sessions/{WARM_COMPLETED_SESSION['sessionId']}/").json()
    platform = body["platform"]
    assert platform["session"]["completionStatus"] == "HTTP_COMPLETED"
    assert (platform["session"]["coldStart"], platform["session"]["botStartSeconds"]) == (False, 0)
    assert platform["session"]["deploymentId"] == DEPLOYMENT_ID
    assert platform["session"]["resourceMetrics"]["cpuMillicoresP95"] == 320
    assert platform["session"]["resourceMetrics"]["memoryBytesP50"] == 134217728
    assert platform["logsTotal"] == 15 and len(platform["logs"]) == 15  # this session's lines only
    assert platform["logs"][0]["timestamp"] < platform["logs"][-1]["timestamp"]  # in order
    assert platform["error"] is None
    # The page's own endpoint gives the same object.
    lazily = staff_client.get(f"/api/sessions/{WARM_COMPLETED_SESSION['sessionId']}/platform/").json()
    assert lazily["platform"]["session"] == platform["session"]


def test_a_session_the_platform_does_not_know_has_no_platform_record(staff_client, org, cloud):
    fake_pipecat_cloud(cloud, details={})
    monitored(org, "not-on-the-platform", state={})
    assert staff_client.get("/api/sessions/not-on-the-platform/").json()["platform"] is None
    # Nor does a session without an agent: the API is asked per agent.
    Session.objects.create(organization=org, session_id="no-agent", state={})
    assert staff_client.get("/api/sessions/no-agent/platform/").json() == {"platform": None}


def test_another_organizations_session_is_a_404(staff_client, other_org, cloud):
    Session.objects.create(organization=other_org, session_id=ACTIVE_SESSION["sessionId"], agent_key=AGENT["id"])
    response = staff_client.get(f"/api/sessions/{ACTIVE_SESSION['sessionId']}/platform/")
    assert response.status_code == 404 and "No session" in response.json()["error"]


def test_the_session_page_links_to_its_agent_and_has_the_platform_panel(staff_client, org, cloud):
    monitored(org, "s-linked", state={})
    html = staff_client.get("/sessions/s-linked/").content.decode()
    assert f'href="/agents/{AGENT["id"]}/">support-bot</a>' in html
    assert 'data-url="/api/sessions/s-linked/platform/"' in html
    assert f"/agents/{AGENT['id']}/?log_session=s-linked#logs" in html


# --- With nothing set: the built-in API, over real HTTP ---------------------------------------


@pytest.fixture
def built_in(live_server, agents, api_key):
    """The organization's agents API is the dashboard's own (the default install): its sessions and bots' logs."""
    org = agents[0].organization
    org.agents_api_base_url, org.agents_api_key = f"{live_server.url}/v1", api_key
    org.save()
    support = agents[0]
    now = timezone.now()
    for i, deployment in enumerate(["dep-old", "dep-old", "dep-new", "dep-new", "dep-new"]):
        session = Session.objects.create(
            organization=org,
            session_id=f"own-{i}",
            agent=support,
            deployment_id=deployment,
            status="ended",
            started_at=now - timedelta(minutes=10 - i),
            ended_at=now - timedelta(minutes=9 - i),
            end_reason="bot disconnected",
            latency_p50_ms=1200 if deployment == "dep-old" else 700,
            latency_p95_ms=1800 if deployment == "dep-old" else 1000,
            fatal=i == 1,
            error_count=int(i == 1),
            state={},
        )
        lines = [("system-log", {"text": f"pipeline {i} started", "level": "DEBUG"})]
        if i == 1:
            lines.append(("error", {"error": "LLM service returned 401", "fatal": True}))
        for seq, (kind, data) in enumerate(lines, 1):
            Event.objects.create(
                session=session,
                seq=seq,
                direction="to-client",
                type=kind,
                received_at=(now - timedelta(minutes=10 - i, seconds=-seq)).timestamp(),
                message=json.dumps({"label": "rtvi-ai", "type": kind, "data": data}),
            )
    return support


def test_with_the_built_in_api_the_agent_page_shows_its_own_sessions_and_logs(staff_client, built_in):
    response = staff_client.get(f"/agents/{built_in.pk}/")
    html = response.content.decode()
    assert response.status_code == 200 and "could not be fetched" not in html
    assert 'href="/sessions/own-4/"' in html  # the built-in API's sessions are the dashboard's, linked
    assert "HTTP_ERROR" in html and '<tr class="failed">' in html  # own-1 ended in a fatal error
    assert "pipeline 3 started" in html and "LLM service returned 401" in html
    rows = {r.deployment_id: r for r in response.context["deployments"]}
    assert (rows["dep-new"].sessions, rows["dep-new"].p50, rows["dep-old"].p50) == (3, 705, 1205)
    assert rows["dep-old"].failure_rate == 0.5 and rows["dep-new"].cold_start_rate is None  # unknown, not 0


def test_with_the_built_in_api_a_session_has_its_platform_record(staff_client, built_in):
    platform = staff_client.get("/api/sessions/own-1/").json()["platform"]
    assert platform["session"]["completionStatus"] == "HTTP_ERROR"
    assert platform["session"]["deploymentId"] == "dep-old"
    assert [line["level"] for line in platform["logs"]] == ["DEBUG", "CRITICAL"]


def test_a_platform_log_line_that_quotes_a_caller_is_cached_and_shown_redacted(staff_client, org, cloud):
    """Pipecat Cloud's log lines are the bot's own words, which quote callers: redacted as the bots' messages
    are, before they are cached (the cache holds none of it) or shown."""
    from django.core.cache import cache

    line = {"log": "INFO: caller said my card is 4111 1111 1111 1111, call me on +1 415 555 0100", "timestamp": ""}
    fake_pipecat_cloud(cloud, logs=[line])
    html = staff_client.get(PAGE).content.decode()
    assert "caller said my card is [card], call me on [phone]" in html  # the line arrived, redacted
    assert "4111 1111" not in html and "555 0100" not in html
    cached = b"".join(cache._cache.values())  # local memory's entries, pickled: their bytes
    assert b"[card]" in cached and b"4111 1111" not in cached and b"555 0100" not in cached
