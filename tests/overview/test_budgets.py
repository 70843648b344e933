"""Issue 37, part 4: an agent's latency budget, set by an admin on its page, and the Overview naming an agent over
it with the part of the wait that put it there (from its bots' breakdowns)."""

import pytest
from django.test import Client

from dashboard.org.models import AuditEntry, LatencyBudget
from rtvi_monitor.sessions.models import Session
from tests.conftest import make_member
from tests.core.test_turns import cloud, store  # noqa: F401 (cloud: a fixture)
from tests.sessions.test_turns_contributions import pairs

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(org, cloud):  # noqa: F811
    """Three calls of the agent, each two turns (100 ms waits by their messages) with breakdowns: the slowest turn's
    wait is the LLM's 3 s."""
    for n in range(3):
        store(
            org,
            f"call-{n}",
            pairs(),
            step=0.05,
            status=Session.Status.ENDED,
            agent_key=cloud["id"],
            agent_name=cloud["name"],
        )
    return cloud


def budget(client, agent_id, **form):
    return client.post(f"/agents/{agent_id}/budget/", form)


def test_an_admin_sets_a_budget_and_the_overview_names_the_part_over_its_own(staff_client, org, calls):
    answer = budget(staff_client, calls["id"], p95="0.05", parts="llm_inference = 0.5\nendpointing_wait = 1")
    assert answer.status_code == 302 and answer["Location"].endswith("#h-budget")
    saved = LatencyBudget.objects.get()
    assert (saved.p95_ms, saved.parts) == (50.0, {"llm_inference": 500.0, "endpointing_wait": 1000.0})
    entry = AuditEntry.objects.filter(action=AuditEntry.Action.SETTINGS_CHANGED).latest("pk")
    assert entry.target == f"latency budget of {calls['id']}"
    overview = staff_client.get("/").content.decode()
    assert 'data-testid="over-budget"' in overview
    why = overview[overview.index('data-testid="over-budget-why"') :][:600]
    assert "<code>llm_inference</code>" in why and "over its 500 ms" in why
    page = staff_client.get(f"/agents/{calls['id']}/").content.decode()
    assert 'data-testid="budget-status" data-over="yes"' in page


def test_under_budget_nothing_is_said_and_without_part_budgets_the_largest_part_is_named(staff_client, calls):
    budget(staff_client, calls["id"], p95="60")
    assert 'data-testid="over-budget"' not in staff_client.get("/").content.decode()
    budget(staff_client, calls["id"], p95="0.05")
    why = staff_client.get("/").content.decode()
    assert "the largest part of the slowest turns" in why


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"p95": "fast"}, "must be a number of seconds"),
        ({"p95": "0"}, "must be a number of seconds"),
        ({"p95": "1", "parts": "llm = soon"}, "Part line 1"),
        ({"p95": "1", "parts": "<b>x</b> = 1"}, "Part line 1"),
        ({"p95": "1", "parts": "x = 100000"}, "Part line 1"),
    ],
)
def test_a_bad_budget_is_refused_with_the_reason_and_nothing_is_kept(staff_client, calls, form, says):
    answer = budget(staff_client, calls["id"], **form)
    assert answer.status_code == 302
    assert says in staff_client.get(answer["Location"]).content.decode()
    assert not LatencyBudget.objects.exists()


def test_only_an_admin_may_set_one_and_another_organization_never_sees_ours(org, other_org, calls):
    for role in ("viewer", "operator"):
        client = Client()
        client.force_login(make_member(org, f"b-{role}", role))
        assert budget(client, calls["id"], p95="1").status_code == 403
    theirs = Client()
    theirs.force_login(make_member(other_org, "their-admin", "admin"))
    assert budget(theirs, calls["id"], p95="0.05").status_code == 302  # their own budget for that id, not ours
    assert LatencyBudget.objects.get().organization == other_org
    mine = Client()
    mine.force_login(make_member(org, "b-admin", "admin"))
    assert 'data-testid="over-budget"' not in mine.get("/").content.decode()


def test_removing_the_budget(staff_client, calls):
    budget(staff_client, calls["id"], p95="0.05")
    budget(staff_client, calls["id"], delete="1")
    assert not LatencyBudget.objects.exists()
