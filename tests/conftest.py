import os
import socket
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from django.core.cache import cache

from dashboard.agents.models import Agent, Deployment
from dashboard.org.models import ApiKey, Membership, Organization

# A streamed piece of text that ends in a number waits for its stream's next piece (rtvi_monitor/live/joining.py),
# 3 s by default; so does its ack. tests/privacy/test_streamed_redaction.py and test_attack_i33.py test that wait
# with waits of their own; elsewhere a final transcription that ends in a number ("M-123456.") would make its
# test wait 3 s for an ack. For every server the tests start (they read the environment), and, below, this process.
os.environ.setdefault("REDACTION_HOLD_SECONDS", "0.25")


@pytest.fixture(autouse=True)
def _short_redaction_hold(settings):
    settings.REDACTION_HOLD_SECONDS = float(os.environ["REDACTION_HOLD_SECONDS"])


IN_CI = os.getenv("CI", "").lower() == "true"
# The machine's real services, for the scale-out and database-specific tests.
REDIS_URL = os.getenv("TEST_REDIS_URL", "redis://127.0.0.1:6379/2")
DATABASE_URL = os.getenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def skip_or_fail(reason: str):
    """Missing Redis, PostgreSQL or Chromium: skip on a user's machine, fail in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _example_hosts_allowed(settings):
    """The faked upstreams' hosts (RFC 2606's .example, answered at the httpx layer) resolve nowhere here:
    they are allowed as a deployment allows its own (dashboard/net/guard.py), so no call looks them up."""
    settings.OUTBOUND_ALLOWED_HOSTS = [".example"]


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _audio_storage(settings, tmp_path_factory):
    """Recordings in a folder of the test run's own, never the checkout's var/audio."""
    settings.STORAGES = {
        **settings.STORAGES,
        "audio": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path_factory.mktemp("audio"))},
        },
    }


@pytest.fixture
def fast_retries(settings):
    settings.AGENTS_RETRY_BACKOFF = 0
    settings.AGENTS_RETRIES = 2
    return settings


@pytest.fixture
def short_waits(settings):
    """Agents API waits in tenths of a second, so that slow-upstream tests are fast."""
    settings.AGENTS_PAGE_WAIT = 0.2
    settings.AGENTS_DEADLINE = 1.0
    settings.AGENTS_FAILURE_BACKOFF = 30
    return settings


@pytest.fixture
def org(db):
    return Organization.objects.create(name="Acme Voice")


@pytest.fixture
def other_org(db):
    return Organization.objects.create(name="Globex Voice")


@pytest.fixture
def organization():
    """An organization whose agents API is the faked Pipecat Cloud (tests/agents_samples.py).

    Unsaved: the agents services need only its id and its agents API settings.
    """
    from tests.agents_samples import BASE, KEY

    return Organization(name="Acme", agents_api_base_url=BASE, agents_api_key=KEY)


def overflow(page, width: int) -> dict:
    """How wide the page is, and the elements that first poke out of a `width` screen (for the failure message)."""
    return page.evaluate(
        """(width) => ({
            scrollWidth: document.documentElement.scrollWidth,
            outside: [...document.querySelectorAll('body *')]
                .filter((e) => e.getBoundingClientRect().right > width + 0.5
                    && e.parentElement.getBoundingClientRect().right <= width + 0.5)
                .slice(0, 8).map((e) => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`),
        })""",
        width,
    )


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


def make_member(organization, username: str, role: str = "admin", password: str = "correct-horse-battery"):
    """A dashboard user (not Django staff: the dashboard never asks for it) with a role in the organization."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username=username).first()
    user = user or get_user_model().objects.create_user(username, password=password)
    Membership.objects.create(user=user, organization=organization, role=role)
    return user


@pytest.fixture
def staff_user(org):
    """The organization's admin (every role's pages and APIs)."""
    return make_member(org, "ops", "admin")


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def viewer_client(org):
    from django.test import Client

    client = Client()
    client.force_login(make_member(org, "watcher", "viewer"))
    return client


@pytest.fixture
def operator_client(org):
    from django.test import Client

    client = Client()
    client.force_login(make_member(org, "operator", "operator"))
    return client


CHROMIUM = "/usr/bin/chromium"
# Where browser tests leave their screenshots (to look at a failure). Not docs/screenshots: the
# README's pictures come from the demo (docs/screenshots/take.py), never from a test session, but for the
# eval gate's (docs/screenshots/eval-gate.png): the demo makes no eval run, and the one in
# tests/evals/test_browser_gate.py has every result through the public upload API, as CI sends them.
SCREENSHOTS = Path(os.getenv("TEST_SCREENSHOTS", Path(tempfile.gettempdir()) / "rtvi-test-screenshots"))
SCREENSHOTS.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright; skipped (or failed in CI) when missing.

    Module-scoped: Playwright's sync API keeps an event loop running in the
    main thread while it is open, which async tests elsewhere cannot share.
    """
    if not os.path.exists(CHROMIUM):
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def demo_server():
    """The real dashboard in daphne, seeded like `make run`: yields (server, username, password, api_key)."""
    from tests.server import DaphneServer

    server = DaphneServer().start()
    try:
        yield server, *server.seed_demo()
    finally:
        server.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    yield page
    context.close()


def log_in(page, server, username, password):
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def wait_until_firing(server, api_key: str, session_id: str, rules=(), seconds: float = 30) -> list[dict]:
    """The firing alerts that name `session_id`, once there is one (and every rule named in `rules` is among
    them), asked of the real server's API. A page rendered once (the alerts page) must be opened after this."""
    headers = {"Authorization": f"Bearer {api_key}"}
    deadline = time.monotonic() + seconds
    while True:
        answer = httpx.get(f"{server.url}/api/alerts/?status=firing", headers=headers)
        alerts = [alert for alert in answer.json()["alerts"] if session_id in alert.get("session_ids", [])]
        if alerts and set(rules) <= {alert["rule_name"] for alert in alerts}:
            return alerts
        assert time.monotonic() < deadline, f"no alert {set(rules) or ''} fired for {session_id}: {answer.text}"
        time.sleep(0.2)


@pytest.fixture
def live_settings(settings):
    """Fast timings for the live path."""
    settings.INGEST_FLUSH_INTERVAL = 0.02
    settings.SESSION_END_GRACE = 0.3
    settings.SESSION_SWEEP_INTERVAL = 0.1
    settings.SESSION_SUMMARY_INTERVAL = 0
    return settings


@pytest.fixture
def live_path(transactional_db, live_settings):
    """A clean live path: the registry is per process and outlives a test's database."""
    from rtvi_monitor.live.dbthread import AUDIO_THREAD, CONNECT_THREAD, DB_THREAD, LIFECYCLE_THREAD
    from rtvi_monitor.live.registry import registry

    registry.sessions.clear()
    registry.per_token.clear()
    registry.connecting = 0
    yield registry
    registry.sessions.clear()
    registry.per_token.clear()
    # The writer's thread keeps its connection; close it so the test database can go.
    from django.db import connection

    for thread in (DB_THREAD, LIFECYCLE_THREAD, CONNECT_THREAD, AUDIO_THREAD):
        thread.submit(lambda: connection.close()).result()


@pytest.fixture
def ingest_token(org):
    from rtvi_monitor.live.models import IngestToken

    return IngestToken.issue(org, "test bot")[1]


@pytest.fixture
def staff_cookie(staff_user, client):
    client.force_login(staff_user)
    return f"sessionid={client.cookies['sessionid'].value}"
