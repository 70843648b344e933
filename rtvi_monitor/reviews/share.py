"""The bad share: per agent, deployment and week, the share of reviewed calls whose call-level mark is bad.

A call is reviewed when it has a call-level mark; when several reviewers marked it, its latest mark is the
call's verdict (the team's current word on it: a call marked bad and later found good counts good). The week is
the call's (when it began), Monday to Sunday, UTC. Read from the marks alone (their agent, deployment and call
start are copied at mark time), so a call erased since still counts. A share is never without its base: each
row carries `bad` and `reviewed`, and its text is "33 % (1/3)".
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from dashboard.web.display import percent_text
from rtvi_monitor.reviews.models import Review, Verdict

WEEKS = 12


@dataclass(frozen=True)
class CallMark:
    """One call-level mark, as the share reads it."""

    session_key: str
    agent_key: str
    deployment_id: str
    started: datetime
    verdict: str
    order: tuple  # later marks sort after earlier ones: (created_at, id)


@dataclass(frozen=True)
class ShareRow:
    agent_key: str
    deployment_id: str
    week: date  # its Monday
    bad: int
    reviewed: int

    @property
    def share(self) -> float:
        return self.bad / self.reviewed

    @property
    def text(self) -> str:
        return f"{percent_text(self.share)} ({self.bad}/{self.reviewed})"

    def as_json(self) -> dict:
        return {
            "agent_key": self.agent_key,
            "deployment_id": self.deployment_id,
            "week": self.week.isoformat(),
            "bad": self.bad,
            "reviewed": self.reviewed,
            "share": self.share,
        }


def week_of(moment: datetime) -> date:
    day = timezone.localtime(moment, UTC).date() if timezone.is_aware(moment) else moment.date()
    return day - timedelta(days=day.weekday())


def shares(marks: Iterable[CallMark]) -> list[ShareRow]:
    """The rows of these call-level marks: each call counted once, by its latest mark; newest week first."""
    latest: dict[str, CallMark] = {}
    for one in marks:
        if one.session_key not in latest or latest[one.session_key].order < one.order:
            latest[one.session_key] = one
    counts: dict[tuple, list[int]] = {}
    for one in latest.values():
        bad_reviewed = counts.setdefault((one.agent_key, one.deployment_id, week_of(one.started)), [0, 0])
        bad_reviewed[0] += one.verdict == Verdict.BAD
        bad_reviewed[1] += 1
    rows = [ShareRow(agent, deployment, week, bad, n) for (agent, deployment, week), (bad, n) in counts.items()]
    return sorted(rows, key=lambda r: (r.agent_key, r.deployment_id, -r.week.toordinal()))


def bad_share(organization, weeks: int = WEEKS) -> list[ShareRow]:
    """The organization's rows for calls that began in the last `weeks` weeks (this one included)."""
    since = datetime.combine(week_of(timezone.now()) - timedelta(weeks=weeks - 1), datetime.min.time(), UTC)
    found = Review.objects.filter(organization=organization, turn__isnull=True, call_started_at__gte=since)
    fields = ("session_key", "agent_key", "deployment_id", "call_started_at", "verdict", "created_at", "pk")
    return shares(
        CallMark(key, agent, deployment, started, verdict, (at, pk))
        for key, agent, deployment, started, verdict, at, pk in found.values_list(*fields).iterator()
    )


def reason_counts(organization, weeks: int = WEEKS) -> list[tuple[str, int]]:
    """How many current marks (calls and turns) gave each reason, in the last `weeks` weeks: most first."""
    since = timezone.now() - timedelta(weeks=weeks)
    found = (
        Review.objects.filter(organization=organization, call_started_at__gte=since, reasons__isnull=False)
        .values("reasons__label")
        .annotate(n=Count("pk"))
        .order_by("-n", "reasons__label")
    )
    return [(row["reasons__label"], row["n"]) for row in found]
