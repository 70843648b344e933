"""An operator marks a call bad with two reasons in Debian's Chromium against the real server (daphne), at 1280 and
390 px, and sees the bad share move on /reviews/; a viewer of the same organization sees the verdict and reasons
and never the note, and is offered no form."""

import uuid

import pytest

from tests.conftest import SCREENSHOTS, log_in, overflow

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
RUN = uuid.uuid4().hex[:6]
OPERATOR, VIEWER = f"revop-{RUN}", f"revview-{RUN}"
PASSWORD = "review-test-password-1"
NOTE = "caller asked twice for the refund"
SETUP = """
from django.contrib.auth import get_user_model
from django.utils import timezone
from dashboard.models import Membership, Organization
from rtvi_monitor.reviews.models import Review
from tests.session_samples import make_session
org = Organization.objects.create(name={org!r})
for username, role in {rows!r}:
    user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=org, role=role)
fields = dict(agent_key="support", agent_name="Support line", deployment_id="dep-1", status="ended", turn_count=3)
for width in (1280, 390):
    make_session(org, f"bad-{{width}}", **fields)
    good = make_session(org, f"good-{{width}}", **fields)
    Review.objects.create(
        organization=org, session=good, session_key=good.session_id, verdict="good", reviewer_name="earlier",
        agent_key="support", deployment_id="dep-1", call_started_at=good.started_at,
    )
"""


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    running = DaphneServer().start()
    try:
        rows = [(OPERATOR, "operator"), (VIEWER, "viewer")]
        running.manage("shell", "-c", SETUP.format(org=f"Reviews-{RUN}", rows=rows, password=PASSWORD))
        yield running
    finally:
        running.stop()


@pytest.fixture
def at_width(browser, request):
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    yield context.new_page(), request.param
    context.close()


def share_text(page) -> str:
    return page.locator("[data-testid=share-row][data-agent=support] [data-testid=share]").first.text_content()


def base(text: str) -> tuple[int, int]:
    """(bad, reviewed) of a share's text, "33 % (1/3)": a share is never shown without them."""
    bad, reviewed = text.split("(")[1].rstrip(")").split("/")
    return int(bad), int(reviewed)


@pytest.mark.parametrize("at_width", [1280, 390], indirect=True)
def test_an_operator_marks_a_call_bad_with_two_reasons_and_sees_the_share_move(server, at_width):
    page, width = at_width
    log_in(page, server, OPERATOR, PASSWORD)
    page.goto(f"{server.url}/reviews/")
    before = share_text(page)
    page.goto(f"{server.url}/sessions/bad-{width}/")
    form = page.get_by_test_id("review-form")
    form.locator("input[name=verdict][value=bad]").check()
    form.get_by_label("wrong answer").check()
    form.get_by_label("ignored a barge-in").check()
    form.locator("#review-note").fill(NOTE)
    assert overflow(page, width)["scrollWidth"] <= width, overflow(page, width)
    form.get_by_role("button", name="Save the mark").click()
    page.wait_for_url(f"**/sessions/bad-{width}/#reviews")
    mark = page.get_by_test_id("review-mark").first
    assert "bad" in mark.text_content() and "wrong answer, ignored a barge-in" in mark.text_content()
    assert NOTE in mark.text_content()
    page.get_by_test_id("reviews").screenshot(path=str(SCREENSHOTS / f"review-mark-{width}.png"))
    page.goto(f"{server.url}/reviews/")
    after = share_text(page)
    assert base(after) == (base(before)[0] + 1, base(before)[1] + 1), (before, after)  # one more call, bad
    assert overflow(page, width)["scrollWidth"] <= width, overflow(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"reviews-{width}.png"), full_page=True)


@pytest.mark.parametrize("at_width", [1280], indirect=True)
def test_a_viewer_sees_the_verdict_and_reasons_never_the_note(server, at_width):
    page, _ = at_width
    log_in(page, server, VIEWER, PASSWORD)
    page.goto(f"{server.url}/sessions/good-1280/")
    assert page.get_by_test_id("review-form").count() == 0
    assert "good" in page.get_by_test_id("review-mark").first.text_content()
    page.goto(f"{server.url}/sessions/bad-1280/")
    assert NOTE not in page.content()
    assert page.get_by_test_id("review-form").count() == 0
