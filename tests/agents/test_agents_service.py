"""dashboard/agents/service.py against a faked upstream (pytest-httpx): errors, cache, single-flight, slowness."""

import asyncio
import json
import time

import httpx
import pytest

from dashboard.agents import service as service
from dashboard.agents.service import fetch_agents, get_agents
from dashboard.agents.upstream import AgentsAPIError
from dashboard.org.models import Organization
from tests.agents_samples import (
    AGENT,
    BASE,
    BODY,
    DEPLOYMENT,
    KEY,
    URL,
    Trickle,
    answers_after,
    background_fetches,
    expire,
)


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
    await background_fetches()
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


# --- A slow upstream ---------------------------------------------------------


async def test_a_trickling_upstream_is_cut_off_at_the_deadline(httpx_mock, settings):
    settings.AGENTS_DEADLINE = 0.5
    trickle = Trickle(json.dumps(BODY).encode(), pause=0.05)  # about 20 s in all
    httpx_mock.add_callback(lambda request: httpx.Response(200, stream=trickle), url=URL)
    started = time.monotonic()
    with pytest.raises(AgentsAPIError, match=r"did not answer within 0\.5 s .*AGENTS_DEADLINE"):
        await fetch_agents(BASE, KEY)
    assert time.monotonic() - started < 1.0
    assert 0 < trickle.sent < len(trickle.body)


async def test_retries_stop_at_the_deadline(httpx_mock, settings):
    settings.AGENTS_DEADLINE = 0.5
    settings.AGENTS_RETRIES = 5
    settings.AGENTS_RETRY_BACKOFF = 0.2  # 0.2 + 0.4 + 0.8 + ... without a deadline
    httpx_mock.add_response(url=URL, status_code=503, is_reusable=True)
    started = time.monotonic()
    with pytest.raises(AgentsAPIError, match=r"did not answer within 0\.5 s"):
        await fetch_agents(BASE, KEY)
    assert time.monotonic() - started < 1.0
    assert len(httpx_mock.get_requests()) == 2


async def test_a_hung_upstream_costs_a_refresh_the_page_wait_and_the_fetch_fills_the_cache_later(
    httpx_mock, organization, short_waits
):
    httpx_mock.add_response(url=URL, json=BODY)
    good = await get_agents(organization)
    httpx_mock.add_callback(answers_after(0.5), url=URL)

    started = time.monotonic()
    listing = await get_agents(organization, refresh=True)
    assert time.monotonic() - started < 0.5  # the page wait (0.2 s), not the upstream
    assert listing.stale and listing.agents == good.agents and listing.age_seconds >= 0
    assert "has not answered within 0.2 s" in listing.error

    await background_fetches()
    later = await get_agents(organization)
    assert [a.name for a in later.agents] == ["renamed"] and not later.error
    assert len(httpx_mock.get_requests()) == 2


async def test_a_hung_upstream_with_no_list_yet_says_the_list_is_coming(httpx_mock, organization, short_waits):
    httpx_mock.add_callback(answers_after(0.5, BODY), url=URL)
    started = time.monotonic()
    listing = await get_agents(organization)
    assert time.monotonic() - started < 0.5
    assert listing.agents == [] and listing.fetched_at is None
    assert "still being asked" in listing.error

    await background_fetches()
    assert [a.name for a in (await get_agents(organization)).agents] == ["support-bot"]


async def test_a_hung_upstream_is_given_up_at_the_deadline_in_the_background(httpx_mock, organization, short_waits):
    short_waits.AGENTS_DEADLINE = 0.5
    httpx_mock.add_callback(answers_after(30), url=URL)
    assert "still being asked" in (await get_agents(organization)).error
    started = time.monotonic()
    await background_fetches()
    assert time.monotonic() - started < 0.5
    assert "did not answer within 0.5 s" in (await get_agents(organization)).error


async def test_after_a_failure_loads_do_not_call_the_upstream_for_the_backoff(httpx_mock, organization, short_waits):
    short_waits.AGENTS_RETRIES = 0
    httpx_mock.add_response(url=URL, json=BODY)
    good = await get_agents(organization)
    await expire(organization)
    httpx_mock.add_response(url=URL, status_code=503)
    await get_agents(organization)  # the last good list at once; the refresh fails behind it
    await background_fetches()
    assert len(httpx_mock.get_requests()) == 2

    for _ in range(10):
        listing = await get_agents(organization)
        assert listing.stale and listing.agents == good.agents and listing.age_seconds >= 0
        assert "HTTP 503" in listing.error
    assert len(httpx_mock.get_requests()) == 2


async def test_after_a_failure_with_no_list_loads_do_not_call_the_upstream_either(
    httpx_mock, organization, short_waits
):
    httpx_mock.add_response(url=URL, status_code=401)
    for _ in range(5):
        listing = await get_agents(organization)
        assert listing.agents == [] and "refused the key" in listing.error
    assert len(httpx_mock.get_requests()) == 1


async def test_a_refresh_asks_the_upstream_during_the_backoff(httpx_mock, organization, short_waits):
    httpx_mock.add_response(url=URL, status_code=401)
    httpx_mock.add_response(url=URL, json=BODY)
    await get_agents(organization)
    listing = await get_agents(organization, refresh=True)
    assert [a.name for a in listing.agents] == ["support-bot"] and not listing.error


async def test_the_upstream_is_asked_again_when_the_backoff_is_over(httpx_mock, organization, short_waits):
    short_waits.AGENTS_FAILURE_BACKOFF = 0.3
    httpx_mock.add_response(url=URL, status_code=401)
    httpx_mock.add_response(url=URL, json=BODY)
    await get_agents(organization)
    await get_agents(organization)
    assert len(httpx_mock.get_requests()) == 1
    await asyncio.sleep(0.4)
    assert [a.name for a in (await get_agents(organization)).agents] == ["support-bot"]


async def test_an_expired_list_is_served_at_once_and_refreshed_once_for_twenty_callers(
    httpx_mock, organization, short_waits
):
    httpx_mock.add_response(url=URL, json=BODY)
    good = await get_agents(organization)
    await expire(organization)
    httpx_mock.add_callback(answers_after(0.5), url=URL)

    started = time.monotonic()
    results = await asyncio.gather(*(get_agents(organization) for _ in range(20)))
    assert time.monotonic() - started < 0.5  # nobody waited for the upstream
    assert all(r.agents == good.agents and r.fetched_at == good.fetched_at and not r.error for r in results)

    await background_fetches()
    assert len(httpx_mock.get_requests()) == 2
    refreshed = await get_agents(organization)
    assert [a.name for a in refreshed.agents] == ["renamed"] and refreshed.from_cache
