"""The writer keeps every live session's row within two SESSION_SUMMARY_INTERVALs of its state, however slowly its
flushes come: a flush spreads the sessions due (at most SUMMARIES_PER_FLUSH of them) but takes every one two
intervals old. At 1,000 bots, 10 a flush left the sessions list minutes old (docs/BENCHMARKS.md)."""

import asyncio

import pytest

from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.live.writer import SUMMARIES_PER_FLUSH, Writer


@pytest.fixture
def writer():
    loop = asyncio.new_event_loop()
    writer = Writer(loop)
    writer.task.cancel()  # never started: the test calls the writer's bookkeeping itself
    try:
        yield writer
    finally:
        loop.run_until_complete(asyncio.gather(writer.task, return_exceptions=True))
        loop.close()


def live_sessions(n: int) -> list[LiveSession]:
    return [LiveSession(pk=pk, organization_id=1, session_id=f"s{pk}", state=SessionState()) for pk in range(1, n + 1)]


def test_slow_flushes_summarise_every_session_two_intervals_old(writer, settings):
    settings.SESSION_SUMMARY_INTERVAL = 1.0
    sessions = live_sessions(300)
    for live in sessions:
        writer._mark_due(live)
    assert len(writer._due_summaries(now=100.0)) == 300  # never summarised: all of them are overdue
    for live in sessions:
        writer._mark_due(live)
    assert writer._due_summaries(now=100.5) == {}  # summarised half an interval ago: not due yet
    assert len(writer._due_summaries(now=101.5)) == SUMMARIES_PER_FLUSH  # due: spread
    assert len(writer._due_summaries(now=102.1)) == 300 - SUMMARIES_PER_FLUSH  # two intervals old: every one
    assert all(live.last_summary_at in (101.5, 102.1) for live in sessions)


def test_fast_flushes_spread_the_sessions_that_started_together(writer, settings):
    settings.SESSION_SUMMARY_INTERVAL = 1.0
    sessions = live_sessions(300)
    for live in sessions:
        writer._mark_due(live)
    writer._due_summaries(now=100.0)
    for live in sessions:
        writer._mark_due(live)
    now, taken, largest = 100.0, set(), 0
    while len(taken) < 300:
        now = round(now + 0.01, 2)  # a flush every 10 ms
        got = writer._due_summaries(now=now)
        largest = max(largest, len(got))
        assert not taken & set(got)  # each session once
        taken |= set(got)
    assert largest == SUMMARIES_PER_FLUSH  # never all at once
    assert now < 102.0  # every row again within two intervals
