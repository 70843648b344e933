"""The bad share, for any sequence of marks and removals by several reviewers on calls and turns (Hypothesis), through
the services the pages call: one current mark per (call, turn, reviewer), a call counted once by its latest
call-level mark, each share exactly bad/reviewed and never without that base."""

from datetime import timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtvi_monitor.reviews import marks, share
from rtvi_monitor.reviews.models import Review
from tests.conftest import make_member
from tests.reviews.test_reviews import call

CALLS, REVIEWERS = 5, 3
OPERATIONS = st.lists(
    st.tuples(
        st.integers(0, CALLS - 1),  # which call
        st.integers(0, REVIEWERS - 1),  # who
        st.sampled_from([None, 1]),  # the whole call, or its first turn
        st.sampled_from(["good", "bad", "remove"]),
    ),
    max_size=25,
)


@pytest.fixture
def world(org):
    now = timezone.now()
    sessions = [
        call(org, f"c{i}", agent_key=f"a{i % 2}", deployment_id=f"d{i % 3}", started_at=now - timedelta(days=4 * i))
        for i in range(CALLS)
    ]
    users = [make_member(org, f"rev{i}", "operator") for i in range(REVIEWERS)]
    return org, sessions, users


def request_of(org, user):
    request = RequestFactory().post("/")
    request.user, request.organization = user, org
    return request


def monday(moment):
    day = moment.date()
    return day - timedelta(days=day.weekday())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_the_share_is_bad_over_reviewed_of_each_calls_latest_mark(world, operations):
    org, sessions, users = world
    Review.objects.all().delete()
    current: dict[tuple, tuple[str, int]] = {}  # (call, turn, reviewer) -> (verdict, when)
    for step, (i, who, turn, what) in enumerate(operations):
        request, session = request_of(org, users[who]), sessions[i]
        name = users[who].get_username()
        if what == "remove":
            marks.unmark(request, session, name, turn)
            current.pop((i, turn, who), None)
        else:
            marks.mark(request, session, name, marks.Mark(turn, what, (), ""))
            current[(i, turn, who)] = (what, step)

    assert Review.objects.count() == len(current)  # marking again replaced; removing removed
    latest: dict[int, tuple[str, int]] = {}
    for (i, turn, _), (verdict, step) in current.items():
        if turn is None and (i not in latest or latest[i][1] < step):
            latest[i] = (verdict, step)
    expected: dict[tuple, list[int]] = {}
    for i, (verdict, _) in latest.items():
        s = sessions[i]
        counts = expected.setdefault((s.agent_key, s.deployment_id, monday(s.started_at)), [0, 0])
        counts[0] += verdict == "bad"
        counts[1] += 1

    rows = share.bad_share(org)
    assert {(r.agent_key, r.deployment_id, r.week): [r.bad, r.reviewed] for r in rows} == expected
    for row in rows:
        assert row.reviewed >= 1 and 0 <= row.bad <= row.reviewed
        assert row.share == row.bad / row.reviewed
        assert row.text.endswith(f"({row.bad}/{row.reviewed})")  # never a share without its base
        assert row.as_json()["reviewed"] == row.reviewed and row.as_json()["bad"] == row.bad


@given(
    st.lists(
        st.tuples(st.sampled_from("xyz"), st.sampled_from(["good", "bad"]), st.integers(0, 10**6)),
        max_size=30,
        unique_by=lambda t: t[2],
    )
)
def test_the_pure_share_counts_each_call_once_by_its_latest_mark(given_marks):
    start = timezone.now()
    rows = share.shares(share.CallMark(key, "a", "d", start, verdict, (n,)) for key, verdict, n in given_marks)
    latest = {}
    for key, verdict, _ in sorted(given_marks, key=lambda t: t[2]):
        latest[key] = verdict
    if not latest:
        assert rows == []
        return
    (row,) = rows
    assert (row.bad, row.reviewed) == (list(latest.values()).count("bad"), len(latest))
