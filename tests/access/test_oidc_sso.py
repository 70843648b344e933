"""Single sign-on end to end: Debian's Chromium, the real dashboard in daphne, a real OpenID provider.

The provider is npm's oidc-provider (tests/oidc/provider.mjs, in Node): the browser goes through a
real authorization-code flow (the dashboard's button, the provider's login form and consent page,
the callback, the token, userinfo and JWKS calls from the dashboard to the provider). The accounts'
claims live in a JSON file the provider reads at each lookup, so a test changes someone's role
between two sign-ins. Without Node, oidc-provider (`make` installs node_modules) or Chromium these
tests skip, and fail under CI=true.
"""

import json
import os
import re
import secrets
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import SCREENSHOTS, log_in, skip_or_fail
from tests.server import ROOT, DaphneServer, free_port

PROVIDER = ROOT / "tests" / "oidc" / "provider.mjs"
ACME, GLOBEX = "Acme Voice", "Globex Voice"


def start_provider(port: int, client: dict, accounts: Path, log: Path) -> subprocess.Popen:
    node = shutil.which("node")
    if node is None:
        skip_or_fail("Node.js is not installed (apt-get install nodejs npm)")
    if not (ROOT / "node_modules" / "oidc-provider" / "package.json").exists():
        skip_or_fail("npm's oidc-provider is not installed (make installs node_modules)")
    env = {**os.environ, "OIDC_TEST_CLIENT": json.dumps(client), "OIDC_TEST_ACCOUNTS": str(accounts)}
    process = subprocess.Popen(
        [node, str(PROVIDER), str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=open(log, "ab")
    )
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if selector.select(timeout=0.1) and process.stdout.readline().startswith(b"ready "):
                return process
            if process.poll() is not None:
                break
    process.kill()
    raise RuntimeError(f"the OpenID provider did not start:\n{log.read_text()}")


class Sso:
    """The provider, the dashboard that trusts it, and the accounts file between them."""

    def __init__(self, issuer: str, server: DaphneServer, accounts: Path):
        self.issuer, self.server, self.accounts = issuer, server, accounts

    def set_accounts(self, accounts: dict) -> None:
        self.accounts.write_text(json.dumps(accounts))

    def shell(self, code: str) -> str:
        return self.server.manage("shell", "--no-imports", "-c", code).strip()

    def memberships(self, email: str) -> dict:
        """{organization: role} of the user the provider's account with `email` became."""
        return json.loads(
            self.shell(
                "import json; from dashboard.models import Membership; print(json.dumps({m.organization.name: m.role"
                f" for m in Membership.objects.filter(user__email={email!r})}}))"
            )
        )


@pytest.fixture(scope="module")
def sso():
    workdir = Path(tempfile.mkdtemp(prefix="rtvi-oidc-"))
    accounts = workdir / "accounts.json"
    accounts.write_text("{}")
    provider_port, dashboard_port = free_port(), free_port()
    client = {
        "client_id": "rtvi-dashboard",
        "client_secret": secrets.token_urlsafe(24),
        "redirect_uri": f"http://127.0.0.1:{dashboard_port}/oidc/callback/",
    }
    provider = start_provider(provider_port, client, accounts, workdir / "provider.log")
    server = DaphneServer(
        env={
            "OIDC_RP_CLIENT_ID": client["client_id"],
            "OIDC_RP_CLIENT_SECRET": client["client_secret"],
            "OIDC_ISSUER": f"http://127.0.0.1:{provider_port}",  # the endpoints: from its discovery
            "OIDC_RP_SCOPES": "openid email profile dashboard",  # "dashboard" releases org and role
            "OIDC_PROVIDER_NAME": "Test IdP",
        },
        port=dashboard_port,
        workdir=str(workdir),
    )
    try:
        server.start()
        sso = Sso(f"http://127.0.0.1:{provider_port}", server, accounts)
        sso.shell(
            "from dashboard.models import Organization;"
            f" [Organization.objects.create(name=n) for n in ({ACME!r}, {GLOBEX!r})]"
        )
        yield sso
    finally:
        server.stop()
        provider.terminate()
        provider.wait(10)


def to_the_provider(browser, sso: Sso):
    """A fresh browser, from the dashboard's login page to the provider's; returns (context, page)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.route("https://fonts.googleapis.com/**", lambda route: route.abort())  # the provider page's font
    page = context.new_page()
    page.goto(f"{sso.server.url}/login/")
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_selector("input[name=login]")  # the provider's own page, on its own port
    assert page.url.startswith(f"{sso.issuer}/")
    return context, page


def sign_in_with_sso(browser, sso: Sso, login: str):
    """The dashboard's button, the provider's login and consent, back to the dashboard; returns (context, page)."""
    context, page = to_the_provider(browser, sso)
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password: dev interactions")
    page.click("button[type=submit]")
    page.wait_for_selector("button[type=submit]:has-text('Continue')")  # consent
    page.click("button[type=submit]:has-text('Continue')")
    page.wait_for_url(f"{sso.server.url}/**")
    return context, page


def test_sso_signs_in_with_the_claimed_organization_and_role_and_the_provider_decides_the_role(browser, sso):
    sso.set_accounts(
        {
            # No role claim: the least privilege, viewer. "Initech" is no organization of this dashboard.
            "ana": {"email": "ana@example.com", "given_name": "Ana", "org": [ACME, "Initech"]},
        }
    )
    context, page = sign_in_with_sso(browser, sso, "ana")
    try:
        assert page.url == f"{sso.server.url}/"
        assert page.locator(".org-name").inner_text() == f"{ACME} · viewer"
        assert page.locator(".who").inner_text().startswith("oidc:")
        assert page.get_by_role("link", name="Audit").count() == 0
        assert page.goto(f"{sso.server.url}/audit/").status == 403  # the audit log is for admins
        page.screenshot(path=str(SCREENSHOTS / "oidc-viewer.png"), full_page=True)
    finally:
        context.close()
    assert sso.memberships("ana@example.com") == {ACME: "viewer"}
    assert sso.shell("from dashboard.models import Organization; print(Organization.objects.count())") == "2"

    # An admin of Globex adds Ana there by hand; then the provider makes her an admin of Acme.
    sso.shell(
        "from dashboard.models import Membership, Organization; from django.contrib.auth.models import User;"
        f" Membership.objects.create(user=User.objects.get(email='ana@example.com'),"
        f" organization=Organization.objects.get(name={GLOBEX!r}), role='operator')"
    )
    sso.set_accounts({"ana": {"email": "ana@example.com", "org": ACME, "role": "admin"}})
    context, page = sign_in_with_sso(browser, sso, "ana")
    try:
        # Two organizations now: the switcher, on Acme (the first by name).
        assert page.locator("#organization-switch option:checked").inner_text() == f"{ACME} (admin)"
        page.goto(f"{sso.server.url}/audit/")
        rows = page.locator("[data-testid=audit] tbody tr")
        actions = [rows.nth(i).get_attribute("data-action") for i in range(rows.count())]
        assert actions.count("sign_in") == 2, actions  # both sign-ins, each after its memberships were set
        assert "role_changed" in actions and "member_joined" in actions
        changed = page.locator("[data-testid=audit] tr[data-action=role_changed] td").all_inner_texts()
        assert changed[1] == "single sign-on (Test IdP)" and changed[4].startswith("oidc:")
    finally:
        context.close()
    # The provider decides Acme's role; Globex, which its claims do not name, is left alone.
    assert sso.memberships("ana@example.com") == {ACME: "admin", GLOBEX: "operator"}


def test_sso_refuses_an_account_that_names_no_organization_of_this_dashboard_and_says_why(browser, sso):
    sso.set_accounts({"bob": {"email": "bob@example.com", "org": ["Initech", "Umbrella"], "role": "admin"}})
    context, page = sign_in_with_sso(browser, sso, "bob")
    try:
        assert page.url == f"{sso.server.url}/login/?sso=no-organization"
        refused = page.get_by_test_id("sso-refused")
        assert "names no organization this dashboard knows" in refused.inner_text()
        page.screenshot(path=str(SCREENSHOTS / "oidc-refused.png"))
        page.goto(f"{sso.server.url}/")
        assert page.url.startswith(f"{sso.server.url}/login/")  # not signed in
    finally:
        context.close()
    assert (
        sso.shell(
            "from django.contrib.auth.models import User; print(User.objects.filter(email='bob@example.com').count())"
        )
        == "0"
    )
    assert sso.shell("from dashboard.models import Organization; print(Organization.objects.count())") == "2"


def test_sso_cancelled_at_the_provider_comes_back_to_the_login_page_saying_so(browser, sso):
    context, page = to_the_provider(browser, sso)
    try:
        page.get_by_role("link", name="[ Cancel ]").click()  # the provider answers error=access_denied
        page.wait_for_url(f"{sso.server.url}/login/?sso=failed")
        assert "Single sign-on did not complete" in page.get_by_test_id("sso-failed").inner_text()
    finally:
        context.close()


def test_password_logins_still_work_beside_sso(browser, sso):
    sso.shell(
        "from dashboard.models import Membership, Organization; from django.contrib.auth.models import User;"
        " u = User.objects.create_user('pat', password='correct-horse-battery');"
        f" Membership.objects.create(user=u, organization=Organization.objects.get(name={ACME!r}), role='operator')"
    )
    context = browser.new_context()
    try:
        page = context.new_page()
        log_in(page, sso.server, "pat", "correct-horse-battery")
        page.wait_for_url(f"{sso.server.url}/")
        assert page.locator(".who").inner_text() == "pat"
    finally:
        context.close()


def oidc_calls(sso: Sso) -> dict[str, float]:
    """The server's count of its calls to the provider through the one outbound client, by outcome (/metrics)."""
    if not hasattr(sso, "key"):
        sso.key = sso.server.manage("create_api_key", "--create", "--org", ACME).splitlines()[-1]
    text = httpx.get(f"{sso.server.url}/metrics", headers={"Authorization": f"Bearer {sso.key}"}).text
    found = re.findall(r'^rtvi_outbound_requests_total\{kind="oidc",outcome="([^"]+)"\} (\S+)$', text, re.M)
    return {outcome: float(value) for outcome, value in found}


def test_sso_calls_the_provider_through_the_one_outbound_client(browser, sso):
    """Token, keys and userinfo (mozilla-django-oidc would use `requests`) are counted as the client's calls."""
    sso.set_accounts({"dee": {"email": "dee@example.com", "org": ACME, "role": "viewer"}})
    before = oidc_calls(sso).get("2xx", 0)
    context, page = sign_in_with_sso(browser, sso, "dee")
    try:
        assert page.url == f"{sso.server.url}/"
    finally:
        context.close()
    assert oidc_calls(sso).get("2xx", 0) - before >= 3  # the token, the provider's keys and the userinfo


def test_a_code_the_provider_refuses_comes_back_to_the_login_page_not_a_server_error(browser, sso):
    """A made-up (or used) code: the provider answers the token call 400; the login page says SSO did not complete."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        asked = []  # the authorization request carries the dashboard's own state (kept in its session)
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{sso.server.url}/login/")
        page.get_by_role("button", name="Sign in with Test IdP").click()
        page.wait_for_selector("input[name=login]")
        authorize = next(url for url in asked if url.startswith(sso.issuer) and "state=" in url)
        state = parse_qs(urlsplit(authorize).query)["state"][0]
        before = oidc_calls(sso).get("4xx", 0)
        page.goto(f"{sso.server.url}/oidc/callback/?code=made-up-code&state={state}")
        assert page.url == f"{sso.server.url}/login/?sso=failed"
        assert "Single sign-on did not complete" in page.get_by_test_id("sso-failed").inner_text()
        assert oidc_calls(sso).get("4xx", 0) == before + 1  # the token call, sent once (a code is never sent twice)
    finally:
        context.close()
