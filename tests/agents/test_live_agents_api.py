"""The agents service over real HTTP, against the built-in API on a live server."""

import asyncio

import pytest

from dashboard.agents.service import fetch_agents, get_agents
from dashboard.agents.upstream import AgentsAPIError
from dashboard.org.models import Organization


@pytest.fixture
def live_org(live_server, agents, api_key):
    org = agents[0].organization
    org.agents_api_base_url = f"{live_server.url}/v1"
    org.agents_api_key = api_key
    org.save()
    return org


def test_the_service_reads_the_built_in_api_over_http(live_server, live_org, api_key):
    fetched = asyncio.run(fetch_agents(f"{live_server.url}/v1", api_key, include_deployment=True))
    assert {a.name for a in fetched} == {"support-bot", "sales-bot", "old-bot"}
    assert {a.status for a in fetched} == {"active", "deleted"}
    assert all(a.deployment and a.deployment.id == a.active_deployment_id for a in fetched)


def test_the_cached_listing_works_over_http(live_server, live_org):
    listing = asyncio.run(get_agents(Organization.objects.get(pk=live_org.pk)))
    assert not listing.error and len(listing.agents) == 3


def test_a_bad_key_is_reported_as_such_over_http(live_server, live_org):
    with pytest.raises(AgentsAPIError, match="refused the key"):
        asyncio.run(fetch_agents(f"{live_server.url}/v1", "pk_wrong"))


def test_a_base_url_without_v1_is_reported_as_such_over_http(live_server, live_org, api_key):
    with pytest.raises(AgentsAPIError, match=r"AGENTS_API_BASE_URL: it must be the API.s base and end in /v1"):
        asyncio.run(fetch_agents(live_server.url, api_key))
