"""The Overview's agents through the real URLconf: every agent the agents API lists (sessions or not), the agents
known only from sessions, and dead agents red with their reason, first; with Pipecat Cloud faked at the httpx layer."""

import re
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from dashboard.org.models import Membership, Organization
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.sessions.models import Session
from tests.agents_samples import AGENT, BASE, KEY, URL

pytestmark = pytest.mark.django_db

HEALTHY = AGENT  # support-bot: deployed, with a session just now
IDLE = {**AGENT, "id": "a1000000-0000-4000-8000-000000000001", "name": "idle-bot"}  # deployed, never called
DELETED = {
    **AGENT,
    "id": "a1000000-0000-4000-8000-000000000002",
    "name": "retired-bot",
    "deletedAt": "2025-07-01T00:00:00.000Z",
}
UNDEPLOYED = {**AGENT, "id": "a1000000-0000-4000-8000-000000000003", "name": "draft-bot", "activeDeploymentId": None}
BUSY = {**AGENT, "id": "a1000000-0000-4000-8000-000000000004", "name": "busy-bot"}  # busy all day, silent now
GONE_KEY = "b2000000-0000-4000-8000-00000000dead"  # a bot used it; the API no longer lists it


@pytest.fixture(autouse=True)
def _upstream(org, fast_retries):
    org.agents_api_base_url = BASE
    org.agents_api_key = KEY
    org.save()


def session(org, session_id, record=None, *, ago_minutes=1.0, key="", name="", **fields):
    """A session of the agent `record` (a record of the API, or `key`/`name` alone), started `ago_minutes` ago."""
    started = timezone.now() - timedelta(minutes=ago_minutes)
    ended = {"status": "ended", "ended_at": started + timedelta(minutes=1)} if ago_minutes > 5 else {}
    return Session.objects.create(
        organization=org,
        session_id=session_id,
        agent_key=record["id"] if record else key,
        agent_name=record["name"] if record else name,
        started_at=started,
        **{**ended, **fields},
    )


def row(html: str, agent_id: str) -> str:
    """The Overview's table row of one agent (empty when it has none)."""
    found = re.search(
        rf'<tr class="[^"]*" data-testid="agent-row" data-agent-id="{re.escape(agent_id)}">.*?</tr>', html, re.S
    )
    return found.group(0) if found else ""


def is_dead(row_html: str) -> bool:
    return row_html.startswith('<tr class="dead"')


def overview(client) -> tuple[str, list[dict]]:
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode(), response.context["summary"]["agents"]


@pytest.fixture
def everything(org, httpx_mock):
    """The upstream lists five agents; sessions for the healthy one, the busy one (hours ago) and an unlisted one."""
    httpx_mock.add_response(url=URL, json={"services": [HEALTHY, IDLE, DELETED, UNDEPLOYED, BUSY]})
    session(org, "now-1", HEALTHY, latency_p50_ms=600, latency_p95_ms=900)
    for i in range(4):  # four calls between two and six hours ago, none since
        session(org, f"busy-{i}", BUSY, ago_minutes=120 + 60 * i)
    session(org, "old-name-1", key=GONE_KEY, name="gone-bot", ago_minutes=10)


def test_an_agent_with_no_sessions_is_listed_with_zeros_and_dashes(staff_client, everything):
    html, agents = overview(staff_client)
    idle = row(html, IDLE["id"])
    assert "idle-bot" in idle and not is_dead(idle)
    assert re.search(r'<td class="num" data-label="Live">0</td>', idle)  # live, labelled for a phone's stacked rows
    assert '<span class="figure" data-testid="sessions-24h">0</span>' in idle and "— / —" in idle
    assert "<svg" not in idle.split('data-label="Sessions in 24 h, by the hour"')[1]  # no chart of nothing
    (figures,) = [a for a in agents if a["agent_id"] == IDLE["id"]]
    assert (figures["sessions"], figures["live"], figures["p95"], figures["cost_usd"]) == (0, 0, None, None)
    assert figures["problems"] == [] and figures["listed"] and not figures["unlisted"]


def is_retired(row_html: str) -> bool:
    return row_html.startswith('<tr class="retired"')


def test_a_deleted_agent_nobody_called_is_grey_and_last_not_red(staff_client, everything):
    html, agents = overview(staff_client)
    retired = row(html, DELETED["id"])
    assert is_retired(retired) and not is_dead(retired)
    assert 'data-testid="agent-retired">deleted<' in retired and 'data-testid="dead-reason"' not in retired
    assert agents[-1]["name"] == "retired-bot" and agents[-1]["problems"] == []


def test_a_deleted_agent_that_still_had_calls_is_not_ready_red_with_its_reason(org, staff_client, everything):
    session(org, "to-retired-1", DELETED, ago_minutes=30)
    html, agents = overview(staff_client)
    retired = row(html, DELETED["id"])
    assert is_dead(retired) and 'data-testid="agent-dead"' in retired
    assert "not ready: the agents API lists it as deleted, so it takes no sessions (it had 1 in the last 24 h)" in (
        retired
    )
    assert agents[0]["name"] == "retired-bot"


def test_an_agent_with_no_active_deployment_is_red_with_its_reason(staff_client, everything):
    html, _ = overview(staff_client)
    draft = row(html, UNDEPLOYED["id"])
    assert is_dead(draft) and "no active deployment" in draft


def test_a_usually_busy_agent_that_went_silent_is_red(staff_client, everything):
    html, _ = overview(staff_client)
    busy = row(html, BUSY["id"])
    assert is_dead(busy) and "no session in the last 30 min (it had 4 in the 24 h before)" in busy


def test_a_healthy_agent_is_not_red(staff_client, everything):
    html, _ = overview(staff_client)
    healthy = row(html, HEALTHY["id"])
    assert healthy and not is_dead(healthy)
    assert 'data-testid="dead-reason"' not in healthy and 'data-testid="agent-dead"' not in healthy
    assert "support-bot" in healthy and "605 ms / 905 ms" in healthy  # to 10 ms: the middle of the bucket


def test_dead_agents_come_first_worst_first(staff_client, everything):
    _, agents = overview(staff_client)
    order = [a["name"] for a in agents]
    assert order[:2] == ["draft-bot", "busy-bot"]  # no deployment, silent
    assert set(order[2:5]) == {"support-bot", "idle-bot", "gone-bot"}
    assert order[5] == "retired-bot"  # deleted, and nobody called it: last
    assert [bool(a["problems"]) for a in agents] == [True, True, False, False, False, False]


def test_an_agent_known_only_from_sessions_is_shown_and_marked(staff_client, everything):
    html, agents = overview(staff_client)
    gone = row(html, GONE_KEY)
    assert "gone-bot" in gone and "not in the agents list" in gone and not is_dead(gone)
    assert next(a for a in agents if a["agent_id"] == GONE_KEY)["unlisted"]
    assert "not in the agents list" not in row(html, HEALTHY["id"])


def test_a_silent_agent_the_list_no_longer_has_is_red_too(org, staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json={"services": [HEALTHY]})
    for i in range(3):
        session(org, f"gone-{i}", key=GONE_KEY, name="gone-bot", ago_minutes=90 + i)
    gone = row(overview(staff_client)[0], GONE_KEY)
    assert is_dead(gone) and "not in the agents list" in gone and "it had 3 in the 24 h before" in gone


def test_a_live_session_or_a_recent_one_keeps_a_busy_agent_alive(org, staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json={"services": [BUSY, IDLE]})
    for i in range(4):
        session(org, f"busy-{i}", BUSY, ago_minutes=120 + i)
    session(org, "long-call", BUSY, ago_minutes=45, status="live")  # started before the window, still on
    session(org, "idle-old", IDLE, ago_minutes=120)  # one call: not "usually busy"
    html, agents = overview(staff_client)
    assert [a["problems"] for a in agents] == [[], []]
    assert not is_dead(row(html, BUSY["id"])) and not is_dead(row(html, IDLE["id"]))


def test_the_organizations_own_no_sessions_rule_sets_the_window(org, staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json={"services": [BUSY]})
    for i in range(4):
        session(org, f"busy-{i}", BUSY, ago_minutes=60 + i)
    AlertRule.objects.create(
        organization=org, name="Quiet", condition=AlertRule.Condition.NO_SESSIONS, window_minutes=120
    )
    assert not is_dead(row(overview(staff_client)[0], BUSY["id"]))  # 60 min of quiet is fine under a 2 h rule


def test_agent_names_and_reasons_are_text_not_markup(org, staff_client, httpx_mock):
    evil = {**UNDEPLOYED, "name": "<img src=x onerror=alert(1)>"}
    httpx_mock.add_response(url=URL, json={"services": [evil]})
    session(org, "evil-old", key=GONE_KEY, name="<script>alert(2)</script>", ago_minutes=10)
    html, _ = overview(staff_client)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in row(html, evil["id"])
    assert "<script>alert(2)" not in html and "&lt;script&gt;alert(2)&lt;/script&gt;" in row(html, GONE_KEY)


def test_the_panel_the_page_refetches_shows_the_same_rows(staff_client, everything):
    html = staff_client.get("/overview/panel/").content.decode()
    assert "<html" not in html
    assert is_retired(row(html, DELETED["id"])) and is_dead(row(html, UNDEPLOYED["id"]))
    assert "idle-bot" in row(html, IDLE["id"])


def test_an_upstream_failure_shows_the_last_good_list_and_its_age_never_a_500(org, staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json={"services": [HEALTHY, IDLE]})
    session(org, "now-1", HEALTHY)
    assert "idle-bot" in overview(staff_client)[0]
    httpx_mock.add_response(url=URL, status_code=500, is_reusable=True)
    staff_client.post("/agents/refresh/", {"next": "/"})  # the same cached list: it fails now
    for path in ("/", "/overview/panel/"):
        response = staff_client.get(path)
        html = response.content.decode()
        assert response.status_code == 200
        assert 'data-testid="stale-banner"' in html and "Showing the last good agent list, fetched" in html
        assert "HTTP 500" in html and "<time" in html
        assert "idle-bot" in row(html, IDLE["id"]) and "support-bot" in row(html, HEALTHY["id"])


def test_an_upstream_failure_with_no_list_yet_shows_the_agents_known_from_sessions(org, staff_client, httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("refused"), is_reusable=True)
    session(org, "now-1", HEALTHY)
    for i in range(3):
        session(org, f"busy-{i}", BUSY, ago_minutes=120 + i)
    html, agents = overview(staff_client)
    assert 'data-testid="error-banner"' in html and "the agents below are those known from sessions" in html
    assert "Could not connect" in html
    assert [a["name"] for a in agents] == ["busy-bot", "support-bot"]  # the silent one is still red, first
    assert is_dead(row(html, BUSY["id"])) and not is_dead(row(html, HEALTHY["id"]))
    assert "not in the agents list" not in html  # with no list, nobody is "not in" it


def test_another_organizations_agents_never_appear(org, staff_client, client, django_user_model, httpx_mock):
    other = Organization.objects.create(
        name="Globex", agents_api_base_url="https://other.example/v1", agents_api_key="pk_o"
    )
    stranger = {**AGENT, "id": "c3000000-0000-4000-8000-000000000001", "name": "globex-bot"}
    httpx_mock.add_response(url="https://other.example/v1/agents", json={"services": [stranger]})
    httpx_mock.add_response(url=URL, json={"services": [HEALTHY]})
    Session.objects.create(organization=other, session_id="g-1", agent_key="c3-key", agent_name="globex-only-bot")
    session(org, "now-1", HEALTHY)

    html, agents = overview(staff_client)
    assert [a["name"] for a in agents] == ["support-bot"]
    assert "globex" not in html

    user = django_user_model.objects.create_user("globex-ops", password="x-long-password-1", is_staff=True)
    Membership.objects.create(user=user, organization=other)
    client.force_login(user)
    html, agents = overview(client)
    assert {a["name"] for a in agents} == {"globex-bot", "globex-only-bot"}
    assert "support-bot" not in html
