"""The deploy gate in Debian's Chromium against the real server, at 1280 and 390 px: runs uploaded for three
deployments through the API (as CI does), the agent's gate page comparing a bad candidate (worse, with the
scenario that failed and its call one click away) and a good one (not worse), picked from the form. A viewer sees
the verdict and its figures (they hold no words); nothing of a failure's reason reaches any page."""

import json
import uuid

import httpx
import pytest

from tests.conftest import SCREENSHOTS, log_in, overflow
from tests.evals.test_eval_runs import jsonl, record

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
RUN = uuid.uuid4().hex[:6]
VIEWER, OPERATOR = f"gateview-{RUN}", f"gateop-{RUN}"
PASSWORD = "gate-test-password-1"

SETUP = """
from django.contrib.auth import get_user_model
from dashboard.models import ApiKey, Membership, Organization
from tests.session_samples import make_session
org = Organization.objects.create(name={org!r})
for username, role in {rows!r}:
    user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=org, role=role)
make_session(org, "call-7", agent_key="support", agent_name="Support line", status="ended")
for n in range(1, 11):
    make_session(org, f"eval-bad-{{n}}", agent_key="support", status="ended", eval_run="ci-bad",
                 eval_scenario="late-order", deployment_id="v2-bad")
record, secret = ApiKey.issue(org, "ci")
record.scopes = "read,write"
record.save()
print("SECRET=" + secret)
"""


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    running = DaphneServer().start()
    try:
        rows = [(VIEWER, "viewer"), (OPERATOR, "operator")]
        out = running.manage("shell", "-c", SETUP.format(org=f"Gate-{RUN}", rows=rows, password=PASSWORD))
        secret = next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("SECRET="))
        uploads = (("v1", 10, "ci-good-1", 900), ("v2-good", 10, "ci-good-2", 950), ("v2-bad", 3, "ci-bad", 2600))
        for deployment, passes, label, turn_ms in uploads:
            body = jsonl(record("late-order/text", n, passed=n <= passes, turn_ms=turn_ms + n) for n in range(1, 11))
            answer = httpx.post(
                f"{running.url}/api/evals/runs/",
                params={"agent": "support", "deployment": deployment, "run": label},
                content=body,
                headers={"Authorization": f"Bearer {secret}"},
            )
            assert answer.status_code == 201, answer.text
        yield running
    finally:
        running.stop()


@pytest.fixture
def at_width(browser, request):
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    yield context.new_page(), request.param
    context.close()


@pytest.mark.parametrize("at_width", [1280, 390], indirect=True)
def test_an_operator_sees_the_bad_candidate_blocked_and_opens_the_call_that_failed(server, at_width):
    page, width = at_width
    log_in(page, server, OPERATOR, PASSWORD)
    page.goto(f"{server.url}/evals/support/gate/?candidate=v2-bad&baseline=v1")
    verdict = page.get_by_test_id("gate-verdict")
    assert verdict.get_attribute("data-verdict") == "worse"
    assert "late-order/text passes 3 of 10 runs on v2-bad, 10 of 10 on v1" in verdict.text_content()
    assert "Scenario turn" in page.get_by_test_id("gate-waits").text_content()
    assert overflow(page, width)["scrollWidth"] <= width, overflow(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"eval-gate-{width}.png"), full_page=True)
    failed = page.get_by_test_id("gate-results").locator("tbody tr", has_text="text_mismatch").first
    failed.get_by_role("link").click()
    page.wait_for_url("**/sessions/eval-bad-*/")
    # The good candidate, chosen in the form: not worse.
    page.goto(f"{server.url}/evals/support/gate/")
    page.select_option("select[name=candidate]", "v2-good")
    page.select_option("select[name=baseline]", "v1")
    page.get_by_role("button", name="Compare").click()
    assert page.get_by_test_id("gate-verdict").get_attribute("data-verdict") == "pass"


@pytest.mark.parametrize("at_width", [1280, 390], indirect=True)
def test_a_viewer_sees_the_verdict_and_figures_and_no_words(server, at_width):
    page, width = at_width
    log_in(page, server, VIEWER, PASSWORD)
    page.goto(f"{server.url}/evals/support/gate/?candidate=v2-bad&baseline=v1")
    assert page.get_by_test_id("gate-verdict").get_attribute("data-verdict") == "worse"
    assert "text_mismatch" in page.get_by_test_id("gate-kinds").text_content()
    assert overflow(page, width)["scrollWidth"] <= width, overflow(page, width)
    html = json.dumps(page.content())
    assert "4111" not in html and "declined" not in html  # the failures' reasons were never kept
