"""Agent pages through the real URLconf, with the upstream faked at the httpx layer."""

import time

import httpx
import pytest

from dashboard.org.models import Membership, Organization
from tests.agents_samples import (
    AGENT,
    BASE,
    BODY,
    DEPLOYMENT,
    KEY,
    URL,
    answers_after,
    background_fetches,
    expire,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _upstream(org, fast_retries):
    org.agents_api_base_url = BASE
    org.agents_api_key = KEY
    org.save()


@pytest.mark.parametrize("path", ["/", "/agents/", f"/agents/{AGENT['id']}/"])
def test_every_page_needs_a_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_signed_in_user_of_no_organization_is_told_why_not_sent_round_the_login(client, django_user_model):
    user = django_user_model.objects.create_user("visitor", password="x-long-password-1")
    client.force_login(user)
    response = client.get("/agents/")
    assert response.status_code == 403 and b"belongs to no organization" in response.content


def test_login_with_the_form_reaches_the_agents(client, staff_user, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    response = client.post(
        "/login/?next=/agents/",
        {"username": "ops", "password": "correct-horse-battery", "next": "/agents/"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == "/agents/"
    assert b"support-bot" in response.content


def test_the_list_shows_name_status_deployment_and_times(staff_client, httpx_mock):
    deleted = {
        **AGENT,
        "id": "2b7e6a42-0d5e-4d55-9d0c-7f9a1c1c2b12",
        "name": "old-bot",
        "deletedAt": "2025-07-01T00:00:00.000Z",
    }
    httpx_mock.add_response(url=URL, json={"services": [AGENT, deleted]})
    html = staff_client.get("/agents/").content.decode()
    assert "support-bot" in html and "old-bot" in html
    assert ">active<" in html and ">deleted<" in html
    assert AGENT["activeDeploymentId"] in html
    assert 'datetime="2025-06-01T10:00:00+00:00"' in html
    assert "Fetched" in html


def test_search_filters_by_name(staff_client, httpx_mock):
    other = {**AGENT, "id": "2b7e6a42-0d5e-4d55-9d0c-7f9a1c1c2b12", "name": "sales-bot"}
    httpx_mock.add_response(url=URL, json={"services": [AGENT, other]})
    html = staff_client.get("/agents/?q=SALES").content.decode()
    assert "sales-bot" in html and "support-bot" not in html


def test_the_deployments_toggle_shows_images(staff_client, httpx_mock):
    httpx_mock.add_response(
        url=f"{URL}?includeActiveDeployment=true", json={"services": [{**AGENT, "deployment": DEPLOYMENT}]}
    )
    html = staff_client.get("/agents/?deployments=1").content.decode()
    assert "reg/support:v9" in html


def test_an_upstream_failure_with_no_history_shows_a_banner_not_a_500(staff_client, httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("refused"), is_reusable=True)
    response = staff_client.get("/agents/")
    assert response.status_code == 200
    assert b"could not be fetched" in response.content
    assert b"Could not connect" in response.content


def test_an_upstream_failure_shows_the_last_good_list_and_its_age(staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    staff_client.get("/agents/")
    httpx_mock.add_response(url=URL, status_code=500, is_reusable=True)
    response = staff_client.post("/agents/refresh/", {"next": "/agents/"}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "support-bot" in html
    assert "Showing the last good list" in html and "HTTP 500" in html


# Async client: it serves the page on the test's event loop, as daphne does, so
# the fetch a page stops waiting for goes on (the sync client's loop ends with
# the request). Committed data: the views query from another thread.
async def test_a_hung_upstream_never_keeps_the_agents_page_waiting(
    async_client, staff_user, org, transactional_db, httpx_mock, short_waits
):
    short_waits.AGENTS_DEADLINE = 0.5
    httpx_mock.add_response(url=URL, json=BODY)
    await async_client.aforce_login(staff_user)
    await async_client.get("/agents/")
    await background_fetches()  # however slow the first fetch was, it has filled the cache
    assert "support-bot" in (await async_client.get("/agents/")).content.decode()
    await expire(org)
    httpx_mock.add_callback(answers_after(30), url=URL)

    started = time.monotonic()
    response = await async_client.get("/agents/")
    assert time.monotonic() - started < 0.5
    html = response.content.decode()
    assert response.status_code == 200 and "support-bot" in html and "(cached)" in html

    await background_fetches()  # given up at the deadline
    started = time.monotonic()
    response = await async_client.get("/agents/")
    assert time.monotonic() - started < 0.5
    html = response.content.decode()
    assert response.status_code == 200 and "support-bot" in html
    assert 'data-testid="stale-banner"' in html and "Showing the last good list, fetched" in html
    assert "did not answer within 0.5 s" in html
    assert len(httpx_mock.get_requests()) == 2  # the back-off spared the upstream the second load


async def test_a_hung_upstream_and_no_list_yet_is_a_banner_within_the_page_wait(
    async_client, staff_user, transactional_db, httpx_mock, short_waits
):
    short_waits.AGENTS_DEADLINE = 0.5
    httpx_mock.add_callback(answers_after(30), url=URL)
    await async_client.aforce_login(staff_user)
    started = time.monotonic()
    response = await async_client.get("/agents/")
    assert time.monotonic() - started < 0.5 + 0.2
    assert response.status_code == 200
    assert 'data-testid="error-banner"' in response.content.decode()
    assert b"has not answered within 0.2 s" in response.content
    await background_fetches()


def test_refresh_fetches_again_and_returns_to_the_page(staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    httpx_mock.add_response(url=URL, json={"services": [{**AGENT, "name": "renamed-bot"}]})
    staff_client.get("/agents/")
    response = staff_client.post("/agents/refresh/", {"next": "/agents/?q=renamed"})
    assert response["Location"] == "/agents/?q=renamed"
    assert b"renamed-bot" in staff_client.get("/agents/?q=renamed").content


def test_refresh_does_not_redirect_off_site(staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    response = staff_client.post("/agents/refresh/", {"next": "https://evil.example/"})
    assert response["Location"] == "/agents/"


def test_the_detail_page_shows_every_field_and_the_manifest(staff_client, httpx_mock):
    from tests.platform_samples import fake_pipecat_cloud

    httpx_mock.add_response(
        url=f"{URL}?includeActiveDeployment=true", json={"services": [{**AGENT, "deployment": DEPLOYMENT}]}
    )
    fake_pipecat_cloud(httpx_mock)
    html = staff_client.get(f"/agents/{AGENT['id']}/").content.decode()
    for value in (AGENT["id"], AGENT["activeDeploymentId"], "us-west", "reg/support:v9"):
        assert value in html
    assert "&quot;minAgents&quot;: 1" in html  # indented, escaped JSON


def test_an_unknown_agent_is_a_404(staff_client, httpx_mock):
    httpx_mock.add_response(url=f"{URL}?includeActiveDeployment=true", json=BODY)
    assert staff_client.get("/agents/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_agent_names_are_escaped(staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json={"services": [{**AGENT, "name": "<img src=x onerror=alert(1)>"}]})
    html = staff_client.get("/agents/").content.decode()
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_a_user_without_organization_is_told_so(client, django_user_model):
    user = django_user_model.objects.create_user("lost", password="x-long-password-1", is_staff=True)
    client.force_login(user)
    assert b"belongs to no organization" in client.get("/agents/").content


def test_each_organization_uses_its_own_agents_api(client, django_user_model, httpx_mock):
    other = Organization.objects.create(
        name="Other", agents_api_base_url="https://other.example/v1", agents_api_key="pk_o"
    )
    user = django_user_model.objects.create_user("other", password="x-long-password-1", is_staff=True)
    Membership.objects.create(user=user, organization=other)
    httpx_mock.add_response(url="https://other.example/v1/agents", json={"services": [{**AGENT, "name": "other-bot"}]})
    client.force_login(user)
    html = client.get("/agents/").content.decode()
    assert "other-bot" in html
    assert httpx_mock.get_request().headers["Authorization"] == "Bearer pk_o"


class TestJsonForScripts:
    def test_a_private_key_reads_the_cached_list(self, client, api_key, httpx_mock):
        httpx_mock.add_response(url=URL, json=BODY)
        body = client.get("/api/agents/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
        assert [a["name"] for a in body["agents"]] == ["support-bot"]
        assert body["stale"] is False and body["error"] is None and body["fetchedAt"]

    def test_a_staff_session_reads_it_too(self, staff_client, httpx_mock):
        httpx_mock.add_response(url=URL, json=BODY)
        assert staff_client.get("/api/agents/").json()["agents"][0]["name"] == "support-bot"

    def test_no_credentials_is_a_json_401(self, client):
        response = client.get("/api/agents/")
        assert response.status_code == 401 and response.json()["code"] == "401"

    def test_it_reports_a_stale_list(self, client, api_key, httpx_mock):
        httpx_mock.add_response(url=URL, json=BODY)
        client.get("/api/agents/", HTTP_AUTHORIZATION=f"Bearer {api_key}")
        httpx_mock.add_response(url=URL, status_code=503, is_reusable=True)
        body = client.get("/api/agents/?refresh=true", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
        assert body["stale"] is True and "HTTP 503" in body["error"]
        assert body["agents"][0]["name"] == "support-bot" and body["ageSeconds"] >= 0


def test_responses_carry_server_timing(staff_client, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    header = staff_client.get("/agents/")["Server-Timing"]
    assert header.startswith("app;dur=") and float(header.split("=")[1]) > 0
