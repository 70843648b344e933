import os

import pytest
from django.core.cache import cache

from dashboard.models import Agent, ApiKey, Deployment, Membership, Organization

IN_CI = os.getenv("CI", "").lower() == "true"


def skip_or_fail(reason: str):
    """Missing Redis, PostgreSQL or Chromium: skip on a user's machine, fail in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def fast_retries(settings):
    settings.AGENTS_RETRY_BACKOFF = 0
    settings.AGENTS_RETRIES = 2
    return settings


@pytest.fixture
def org(db):
    return Organization.objects.create(name="Acme Voice")


@pytest.fixture
def other_org(db):
    return Organization.objects.create(name="Globex Voice")


def make_agent(organization, name, *, deleted=False, manifest=None):
    agent = Agent.objects.create(organization=organization, name=name)
    deployment = Deployment.objects.create(agent=agent, image=f"img/{name}:1", manifest=manifest or {"image": name})
    agent.active_deployment = deployment
    if deleted:
        from django.utils import timezone

        agent.deleted_at = timezone.now()
    agent.save()
    return agent


@pytest.fixture
def agents(org):
    return [make_agent(org, "support-bot"), make_agent(org, "sales-bot"), make_agent(org, "old-bot", deleted=True)]


@pytest.fixture
def api_key(org):
    """The secret of a private API key of `org`."""
    return ApiKey.issue(org, "test")[1]


@pytest.fixture
def staff_user(org, django_user_model):
    user = django_user_model.objects.create_user("ops", password="correct-horse-battery", is_staff=True)
    Membership.objects.create(user=user, organization=org)
    return user


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client
