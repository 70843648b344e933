"""dashboard/agents.py against a faked upstream (pytest-httpx): errors, cache, single-flight."""

import asyncio
import json

import httpx
import pytest

from dashboard import agents as service
from dashboard.agents import AgentsAPIError, fetch_agents, get_agents
from dashboard.models import Organization

BASE = "https://api.pipecat.example/v1"
URL = f"{BASE}/agents"
KEY = "pk_test"

AGENT = {
    "id": "1b7e6a42-0d5e-4d55-9d0c-7f9a1c1c2b11",
    "name": "support-bot",
    "activeDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "organizationId": "5f0c8a9e-3d2b-4c1a-8e7f-6a5b4c3d2e1f",
    "createdAt": "2025-06-01T10:00:00.000Z",
    "updatedAt": "2025-06-02T11:30:00.250Z",
    "deletedAt": None,
    # Pipecat Cloud also sends these; the API grows and extras are tolerated.
    "region": "us-west",
    "desiredDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "reconciledDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
}
DEPLOYMENT = {
    "id": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "serviceId": AGENT["id"],
    "manifest": {"spec": {"image": "reg/support:v9", "autoScaling": {"minAgents": 1}}},
    "createdAt": "2025-06-02T11:00:00.000Z",
    "updatedAt": "2025-06-02T11:30:00.000Z",
}
BODY = {"services": [AGENT]}


@pytest.fixture
def organization():
    # Unsaved: the service needs only its id and its agents API settings.
    return Organization(name="Acme", agents_api_base_url=BASE, agents_api_key=KEY)


@pytest.fixture(autouse=True)
def _fast(fast_retries):
    fast_retries.AGENTS_CACHE_TTL = 60


async def test_it_parses_agents_into_typed_records(httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    (agent,) = await fetch_agents(BASE, KEY)
    assert agent.name == "support-bot"
    assert agent.status == "active"
    assert agent.region == "us-west"
    assert agent.created_at.isoformat() == "2025-06-01T10:00:00+00:00"
    assert agent.deployment is None


async def test_it_sends_the_bearer_key_and_the_deployment_flag(httpx_mock):
    httpx_mock.add_response(
        url=f"{URL}?includeActiveDeployment=true", json={"services": [{**AGENT, "deployment": DEPLOYMENT}]}
    )
    (agent,) = await fetch_agents(BASE, KEY, include_deployment=True)
    request = httpx_mock.get_request()
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert agent.deployment.manifest["spec"]["image"] == "reg/support:v9"
    assert agent.deployment.service_id == AGENT["id"]


@pytest.mark.parametrize(
    "status,words",
    [
        (401, "refused the key"),
        (403, "refused the key"),
        (404, "AGENTS_API_BASE_URL"),
        (500, "upstream"),
        (503, "upstream"),
    ],
)
async def test_each_http_failure_says_what_to_do(httpx_mock, status, words):
    httpx_mock.add_response(url=URL, status_code=status, json={"error": "nope", "code": "PCC-1001"}, is_reusable=True)
    with pytest.raises(AgentsAPIError, match=words):
        await fetch_agents(BASE, KEY)


async def test_it_retries_5xx_then_succeeds(httpx_mock):
    httpx_mock.add_response(url=URL, status_code=502)
    httpx_mock.add_response(url=URL, json=BODY)
    assert len(await fetch_agents(BASE, KEY)) == 1
    assert len(httpx_mock.get_requests()) == 2


async def test_retries_are_bounded(httpx_mock, settings):
    httpx_mock.add_response(url=URL, status_code=500, is_reusable=True)
    with pytest.raises(AgentsAPIError):
        await fetch_agents(BASE, KEY)
    assert len(httpx_mock.get_requests()) == 1 + settings.AGENTS_RETRIES


async def test_a_refused_connection_is_retried_then_explained(httpx_mock, settings):
    httpx_mock.add_exception(httpx.ConnectError("Connection refused"), is_reusable=True)
    with pytest.raises(AgentsAPIError, match=r"Could not connect .* Check AGENTS_API_BASE_URL"):
        await fetch_agents(BASE, KEY)
    assert len(httpx_mock.get_requests()) == 1 + settings.AGENTS_RETRIES


async def test_a_timeout_is_explained(httpx_mock):
    httpx_mock.add_exception(httpx.ReadTimeout("slow"))
    with pytest.raises(AgentsAPIError, match="did not answer in time"):
        await fetch_agents(BASE, KEY)


async def test_a_body_that_is_not_json_is_explained(httpx_mock):
    httpx_mock.add_response(url=URL, text="<html>login</html>", headers={"content-type": "text/html"})
    with pytest.raises(AgentsAPIError, match=r"not JSON .*text/html"):
        await fetch_agents(BASE, KEY)


@pytest.mark.parametrize(
    "body,words",
    [
        ([], "expected a JSON object"),
        ({"agents": []}, "'services' is missing"),
        ({"services": [{**AGENT, "name": 7}]}, r"services\[0\]\.name: expected str, got int"),
        ({"services": [{k: v for k, v in AGENT.items() if k != "id"}]}, r"services\[0\]\.id is missing"),
        ({"services": [{**AGENT, "createdAt": "yesterday"}]}, r"services\[0\]\.createdAt: 'yesterday' is not"),
        ({"services": [{**AGENT, "deployment": "x"}]}, r"services\[0\]\.deployment: expected an object"),
    ],
)
async def test_a_wrong_shape_says_what_was_wrong(httpx_mock, body, words):
    httpx_mock.add_response(url=URL, json=body)
    with pytest.raises(AgentsAPIError, match=words):
        await fetch_agents(BASE, KEY)


async def test_no_key_is_explained_without_calling():
    with pytest.raises(AgentsAPIError, match="No agents API key"):
        await fetch_agents(BASE, "")


async def test_a_second_call_is_served_from_the_cache(httpx_mock, organization):
    httpx_mock.add_response(url=URL, json=BODY)
    first = await get_agents(organization)
    second = await get_agents(organization)
    assert not first.from_cache and second.from_cache
    assert second.agents == first.agents
    assert len(httpx_mock.get_requests()) == 1


async def test_the_cache_expires_after_the_ttl(httpx_mock, organization, settings):
    settings.AGENTS_CACHE_TTL = 1
    httpx_mock.add_response(url=URL, json=BODY, is_reusable=True)
    await get_agents(organization)
    await asyncio.sleep(1.1)
    await get_agents(organization)
    assert len(httpx_mock.get_requests()) == 2


async def test_refresh_bypasses_the_cache(httpx_mock, organization):
    httpx_mock.add_response(url=URL, json=BODY)
    httpx_mock.add_response(url=URL, json={"services": [{**AGENT, "name": "renamed"}]})
    await get_agents(organization)
    listing = await get_agents(organization, refresh=True)
    assert [a.name for a in listing.agents] == ["renamed"]


async def test_a_failing_upstream_serves_the_last_good_list_with_its_age(httpx_mock, organization):
    httpx_mock.add_response(url=URL, json=BODY)
    good = await get_agents(organization)
    httpx_mock.add_response(url=URL, status_code=500, is_reusable=True)
    stale = await get_agents(organization, refresh=True)
    assert stale.stale
    assert stale.agents == good.agents
    assert stale.fetched_at == good.fetched_at
    assert "HTTP 500" in stale.error
    assert stale.age_seconds >= 0


async def test_a_failing_upstream_with_no_history_gives_an_empty_list_and_the_error(httpx_mock, organization):
    httpx_mock.add_response(url=URL, status_code=401)
    listing = await get_agents(organization)
    assert listing.agents == [] and listing.fetched_at is None
    assert "refused the key" in listing.error


async def test_lists_with_and_without_deployments_are_cached_apart(httpx_mock, organization):
    httpx_mock.add_response(url=URL, json=BODY)
    httpx_mock.add_response(
        url=f"{URL}?includeActiveDeployment=true", json={"services": [{**AGENT, "deployment": DEPLOYMENT}]}
    )
    plain = await get_agents(organization)
    detailed = await get_agents(organization, include_deployment=True)
    assert plain.agents[0].deployment is None and detailed.agents[0].deployment is not None


async def test_organizations_are_cached_apart(httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY, is_reusable=True)
    await get_agents(Organization(name="A", agents_api_base_url=BASE, agents_api_key=KEY))
    await get_agents(Organization(name="B", agents_api_base_url=BASE, agents_api_key=KEY))
    assert len(httpx_mock.get_requests()) == 2


async def test_twenty_concurrent_cold_calls_make_one_upstream_request(httpx_mock, organization):
    async def slow_upstream(request):
        await asyncio.sleep(0.2)
        return httpx.Response(200, json=BODY)

    httpx_mock.add_callback(slow_upstream, url=URL, is_reusable=True)
    results = await asyncio.gather(*(get_agents(organization) for _ in range(20)))
    assert len(httpx_mock.get_requests()) == 1
    assert all(r.agents and r.agents[0].name == "support-bot" for r in results)


async def test_concurrent_callers_share_a_failure_without_piling_on(httpx_mock, organization, settings):
    settings.AGENTS_RETRIES = 0

    async def failing(request):
        await asyncio.sleep(0.1)
        return httpx.Response(503)

    httpx_mock.add_callback(failing, url=URL, is_reusable=True)
    results = await asyncio.gather(*(get_agents(organization) for _ in range(10)))
    assert len(httpx_mock.get_requests()) == 1
    assert all("HTTP 503" in r.error for r in results)


async def test_the_cache_holds_plain_data(httpx_mock, organization):
    """Entries must survive pickling into Redis and a change of the dataclasses."""
    from django.core.cache import cache

    httpx_mock.add_response(url=URL, json=BODY)
    await get_agents(organization)
    entry = await cache.aget(service._keys(str(organization.pk), False)["fresh"])
    json.dumps(entry, default=str)
    assert isinstance(entry["agents"][0], dict)
