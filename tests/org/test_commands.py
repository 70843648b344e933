"""Management commands: create_api_key and seed_demo."""

import pytest
from django.core.management import call_command

from dashboard.agents.models import Agent
from dashboard.org.models import ApiKey, Membership, Organization

pytestmark = pytest.mark.django_db


def run(*args) -> list[str]:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue().strip().splitlines()


def test_create_api_key_creates_the_org_when_asked_and_prints_a_working_key_last(client):
    key = run("create_api_key", "--create", "--org", "Initech")[-1]
    assert Organization.objects.filter(name="Initech").exists()
    assert ApiKey.objects.find(key).organization.name == "Initech"
    assert client.get("/v1/agents", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200


def test_create_api_key_reuses_an_existing_org():
    run("create_api_key", "--create", "--org", "Initech")
    run("create_api_key", "--org", "Initech")
    assert Organization.objects.filter(name="Initech").count() == 1
    assert ApiKey.objects.filter(organization__name="Initech").count() == 2


def test_seed_demo_is_idempotent_and_prints_the_key_last(client, tmp_path, settings):
    settings.BASE_DIR = tmp_path
    first = run("seed_demo")
    second = run("seed_demo")
    assert first[-1] == second[-1]
    assert [line for line in first if line.startswith("Login:")] == [
        line for line in second if line.startswith("Login:")
    ]
    assert Organization.objects.count() == 1 and Agent.objects.count() == 4
    assert ApiKey.objects.count() == 1
    response = client.get("/v1/agents?includeActiveDeployment=true", HTTP_AUTHORIZATION=f"Bearer {first[-1]}")
    services = response.json()["services"]
    assert len(services) == 4 and sum(a["deletedAt"] is not None for a in services) == 1


def test_the_seeded_login_works(client, tmp_path, settings):
    settings.BASE_DIR = tmp_path
    login = next(line for line in run("seed_demo") if line.startswith("Login:"))
    username, password = login.removeprefix("Login: ").split(" / ")
    assert client.login(username=username, password=password)
    assert Membership.objects.get(user__username=username).organization.name == "Demo Voice Co"
