"""The built-in agents API, through the real URLconf: Pipecat Cloud's contract."""

import re
import uuid

import pytest
from django.utils import timezone

from dashboard.org.models import ApiKey
from tests.conftest import make_agent

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
AGENT_FIELDS = {"id", "name", "activeDeploymentId", "organizationId", "createdAt", "updatedAt", "deletedAt"}
DEPLOYMENT_FIELDS = {"id", "serviceId", "manifest", "createdAt", "updatedAt"}

pytestmark = pytest.mark.django_db


def get(client, key=None, query="", **headers):
    if key is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return client.get(f"/v1/agents{query}", **headers)


def test_it_lists_the_organizations_agents_with_exactly_the_spec_fields(client, agents, api_key):
    response = get(client, api_key)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"services"}
    assert {a["name"] for a in body["services"]} == {"support-bot", "sales-bot", "old-bot"}
    for record in body["services"]:
        assert set(record) == AGENT_FIELDS
        uuid.UUID(record["id"])
        uuid.UUID(record["activeDeploymentId"])
        assert record["organizationId"] == str(agents[0].organization_id)
        assert ISO_MS.match(record["createdAt"]) and ISO_MS.match(record["updatedAt"])


def test_deleted_at_is_null_unless_the_agent_is_deleted(client, agents, api_key):
    services = {a["name"]: a for a in get(client, api_key).json()["services"]}
    assert services["support-bot"]["deletedAt"] is None
    assert ISO_MS.match(services["old-bot"]["deletedAt"])


def test_include_active_deployment_adds_the_deployment_record(client, agents, api_key):
    services = get(client, api_key, "?includeActiveDeployment=true").json()["services"]
    for record in services:
        assert set(record) == AGENT_FIELDS | {"deployment"}
        deployment = record["deployment"]
        assert set(deployment) == DEPLOYMENT_FIELDS
        assert deployment["id"] == record["activeDeploymentId"]
        assert deployment["serviceId"] == record["id"]
        assert ISO_MS.match(deployment["createdAt"])
        assert isinstance(deployment["manifest"], dict)


def test_an_agent_without_deployment_has_null_deployment(client, org, api_key):
    from dashboard.agents.models import Agent

    Agent.objects.create(organization=org, name="fresh")
    (record,) = get(client, api_key, "?includeActiveDeployment=1").json()["services"]
    assert record["activeDeploymentId"] is None
    assert record["deployment"] is None


@pytest.mark.parametrize(
    "value,included", [("true", True), ("TRUE", True), ("1", True), ("false", False), ("False", False), ("0", False)]
)
def test_it_accepts_the_boolean_spellings(client, agents, api_key, value, included):
    services = get(client, api_key, f"?includeActiveDeployment={value}").json()["services"]
    assert all(("deployment" in a) is included for a in services)


@pytest.mark.parametrize("value", ["yes", "", "2", "tru"])
def test_it_rejects_another_value_naming_the_parameter(client, agents, api_key, value):
    response = get(client, api_key, f"?includeActiveDeployment={value}")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "includeActiveDeployment" in response.json()["error"]
    assert response.json()["code"] == "400"


def test_a_key_of_one_organization_never_sees_anothers_agents(client, agents, other_org):
    make_agent(other_org, "globex-secret-bot")
    other_key = ApiKey.issue(other_org)[1]
    names = [a["name"] for a in get(client, other_key).json()["services"]]
    assert names == ["globex-secret-bot"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer"},
        {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"},
        {"HTTP_AUTHORIZATION": "Bearer pk_not-a-real-key"},
        {"HTTP_AUTHORIZATION": "Bearer " + "x" * 500},
    ],
    ids=["missing", "empty", "wrong-scheme", "unknown", "huge"],
)
def test_it_answers_401_json_for_a_bad_key(client, agents, headers):
    response = client.get("/v1/agents", **headers)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == "401" and body["error"]


def test_a_revoked_key_is_refused(client, org, agents):
    record, secret = ApiKey.issue(org)
    record.revoked_at = timezone.now()
    record.save()
    assert get(client, secret).status_code == 401


def test_a_key_is_stored_hashed_and_its_use_recorded(client, org, agents):
    record, secret = ApiKey.issue(org)
    assert secret not in record.key_hash and record.key_prefix == secret[:10]
    get(client, secret)
    record.refresh_from_db()
    assert record.last_used_at is not None


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_a_wrong_method_is_a_json_405(client, api_key, method):
    response = getattr(client, method)("/v1/agents", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 405
    assert response.json()["code"] == "405"
    assert response["Allow"] == "GET"


def test_an_unknown_machine_path_is_a_json_404_even_in_debug(client, settings):
    settings.DEBUG = True
    response = client.get("/v1/agentz")
    assert response.status_code == 404
    assert response.json() == {"error": "No such endpoint: /v1/agentz", "code": "404"}


def test_every_v1_endpoint_goes_through_the_dashboards_one_key_door():
    """builtin_api reads no key itself: each /v1/agents view is v1_door's (auth.py's key_or_member_required)."""
    from pathlib import Path

    from dashboard.agents import builtin_api
    from tests.access.test_access_policy import url_patterns

    views = [p.callback for route, p, _ in url_patterns() if route.startswith("v1/agents")]
    assert len(views) == 5
    for view in views:
        assert (view.access_action, view.access_door, view.json_methods) == ("agents.api", "json", ("GET",))
    source = Path(builtin_api.__file__).read_text()
    assert source.count("key_or_member_required(") == 1
    assert not re.search(r"ApiKey|bearer_token|Authorization|HTTP_AUTHORIZATION", source)
