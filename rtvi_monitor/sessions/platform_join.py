"""The platform's view of an agent's sessions beside the dashboard's own.

The agents API (Pipecat Cloud, or the dashboard's built-in copy) knows how a
session ran on the platform: its deployment, whether it cold-started, how
long the bot took to start, how it completed, its CPU and memory, its log
lines. The dashboard knows what the bot said: turns, latency, errors. Both
name a session by the same id when the bot uses the platform's session id as
its own (Pipecat Cloud gives it to the bot in its runner arguments). This
module joins the two:

- `deployments`: per deployment of an agent, the dashboard's latency and
  error figures beside the platform's cold starts and failures (a canary
  view: a new deployment judged against the previous one);
- `session_platform`: one session's platform record and log lines, for the
  session page and `GET /api/sessions/<id>/`.

Records are written back in the agents API's own shape (camelCase), so a
script reads the same fields whichever side it asks.
"""

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, Max, Min
from django.db.models.functions import Coalesce

from dashboard.agents import pipecat_cloud
from dashboard.agents import service as agents_service
from dashboard.web.display import iso_ms
from rtvi_monitor.sessions.models import HAS_ERRORS, Session
from rtvi_monitor.sessions.queries import BUCKET_MS, histogram_percentile, latency_bucket

# The deployments view reads the agent's sessions of this window, on both sides.
DEPLOYMENT_WINDOW = timedelta(days=7)
# At most this many of the platform's sessions are read for it (one upstream call, newest first).
PLATFORM_SAMPLE = 1000
# A session's log lines shown with its platform record.
SESSION_LOG_LINES = 200


@dataclass
class DeploymentFigures:
    """One deployment of an agent: the platform's sessions and the dashboard's, over DEPLOYMENT_WINDOW."""

    deployment_id: str  # "" for sessions whose deployment nobody recorded
    active: bool = False
    sessions: int = 0  # known to either side
    monitored: int = 0  # of which the dashboard has the conversation
    with_errors: int = 0
    platform_sessions: int = 0
    failed: int = 0
    cold_known: int = 0
    cold: int = 0
    first_at: datetime | None = None
    last_at: datetime | None = None
    # Latency as the Overview counts it: the sessions' own p50s and p95s in BUCKET_MS buckets.
    p50_buckets: dict[int, int] = field(default_factory=dict, repr=False)
    p95_buckets: dict[int, int] = field(default_factory=dict, repr=False)

    def seen(self, first: datetime | None, last: datetime | None = None) -> None:
        for at in (first, last or first):
            if at is not None:
                self.first_at = at if self.first_at is None else min(self.first_at, at)
                self.last_at = at if self.last_at is None else max(self.last_at, at)

    def count_latency(self, p50_bucket: int, p95_bucket: int, n: int = 1) -> None:
        self.p50_buckets[p50_bucket] = self.p50_buckets.get(p50_bucket, 0) + n
        self.p95_buckets[p95_bucket] = self.p95_buckets.get(p95_bucket, 0) + n

    @property
    def p50(self) -> float | None:
        # The sessions' own figures, summarised as the Overview does: the median of their p50s...
        return histogram_percentile(self.p50_buckets, 50)

    @property
    def p95(self) -> float | None:
        # ... and the 95th percentile of their p95s.
        return histogram_percentile(self.p95_buckets, 95)

    @property
    def error_rate(self) -> float | None:
        return self.with_errors / self.monitored if self.monitored else None

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.platform_sessions if self.platform_sessions else None

    @property
    def cold_start_rate(self) -> float | None:
        return self.cold / self.cold_known if self.cold_known else None


def _bucket_of(value: float) -> int:
    return int(value // BUCKET_MS)


def deployments(
    organization, agent_key: str, platform_sessions: list, active_deployment_id: str | None, now: datetime
) -> list[DeploymentFigures]:
    """Per deployment, newest first: the dashboard's sessions of the agent joined by id with the platform's.

    A session's deployment is decided once: the platform's word for it when
    the platform names one, else what the dashboard recorded when its bot
    connected (the agent's active deployment then). Latency and errors come
    from the dashboard's sessions, cold starts and failures from the
    platform's; a session known to both counts once. The dashboard's
    sessions are counted by the database (a week of a busy agent is many
    rows); only those the platform also knows (at most PLATFORM_SAMPLE) are
    read one by one.
    """
    since = now - DEPLOYMENT_WINDOW
    by_id = {s.session_id: s for s in platform_sessions if s.created_at is None or s.created_at >= since}
    table: dict[str, DeploymentFigures] = {}

    def figures(deployment_id: str) -> DeploymentFigures:
        if deployment_id not in table:
            table[deployment_id] = DeploymentFigures(deployment_id, active=deployment_id == active_deployment_id)
        return table[deployment_id]

    ours = Session.objects.filter(organization=organization, agent_key=agent_key, started_at__gte=since)
    known = {
        row[0]: row
        for row in ours.filter(session_id__in=list(by_id)).values_list(
            "session_id", "deployment_id", "latency_p50_ms", "latency_p95_ms", "error_count", "fatal"
        )
    }
    for record in by_id.values():
        mine = known.get(record.session_id)
        row = figures(record.deployment_id or (mine[1] if mine else ""))
        row.sessions += 1
        row.platform_sessions += 1
        row.failed += record.failed
        if record.cold_start is not None:
            row.cold_known += 1
            row.cold += record.cold_start
        row.seen(record.created_at)
        if mine:
            _, _, p50, p95, errors, fatal = mine
            row.monitored += 1
            row.with_errors += bool(errors or fatal)
            if p50 is not None:
                row.count_latency(_bucket_of(p50), _bucket_of(p95 if p95 is not None else p50))
    rest = ours.exclude(session_id__in=list(known))
    for deployment_id, n, with_errors, first, last in (
        rest.values("deployment_id")
        .annotate(
            n=Count("id"),
            with_errors=Count("id", filter=HAS_ERRORS),
            first=Min("started_at"),
            last=Max("started_at"),
        )
        .values_list("deployment_id", "n", "with_errors", "first", "last")
    ):
        row = figures(deployment_id)
        row.sessions += n
        row.monitored += n
        row.with_errors += with_errors
        row.seen(first, last)
    for deployment_id, p50_bucket, p95_bucket, n in (
        rest.filter(latency_p50_ms__isnull=False)
        .annotate(
            p50_bucket=latency_bucket(F("latency_p50_ms")),
            p95_bucket=latency_bucket(Coalesce("latency_p95_ms", "latency_p50_ms")),
        )
        .values("deployment_id", "p50_bucket", "p95_bucket")
        .annotate(n=Count("id"))
        .values_list("deployment_id", "p50_bucket", "p95_bucket", "n")
    ):
        figures(deployment_id).count_latency(int(p50_bucket), int(p95_bucket), n)
    return sorted(table.values(), key=lambda r: (r.deployment_id == "", -(r.last_at or since).timestamp()))


def monitored_ids(organization, session_ids: list[str]) -> set[str]:
    """Which of these session ids the dashboard has (so the platform's rows link to them)."""
    return set(
        Session.objects.filter(organization=organization, session_id__in=session_ids).values_list(
            "session_id", flat=True
        )
    )


def session_json(record) -> dict:
    """A platform session in the agents API's shape, resource metrics included when the record has them."""
    metrics = record.resource_metrics
    return {
        "sessionId": record.session_id,
        "deploymentId": record.deployment_id,
        "createdAt": iso_ms(record.created_at),
        "endedAt": iso_ms(record.ended_at),
        "botStartSeconds": record.bot_start_seconds,
        "coldStart": record.cold_start,
        "completionStatus": record.completion_status,
        "failed": record.failed,
        "durationSeconds": record.duration_seconds,
        "resourceMetrics": metrics_json(metrics) if metrics else None,
        "meetingIds": list(record.meeting_ids),
    }


def metrics_json(metrics) -> dict:
    return {
        "sampleCount": metrics.sample_count,
        **{f"cpuMillicores{p.upper()}": v for p, v in metrics.cpu_millicores.items()},
        **{f"memoryBytes{p.upper()}": v for p, v in metrics.memory_bytes.items()},
    }


def log_json(line) -> dict:
    return {"log": line.text, "timestamp": line.timestamp_raw, "level": line.level}


def session_cache_keys(organization, session: Session) -> list[str]:
    """The cache entries session_platform fills for this session (the platform's record and log lines of it),
    under each name the agent may have been asked by: the one the session recorded, its built-in row's."""
    names = {session.agent_name, session.agent.name if session.agent_id and session.agent else ""} - {""}
    keys = []
    for name in sorted(names):
        try:
            keys += pipecat_cloud.session_cache_keys(organization, name, session.session_id, SESSION_LOG_LINES)
        except ValueError:  # a name or id no request could have been made with
            continue
    return keys


async def session_platform(organization, session: Session) -> dict | None:
    """What the agents API says of this session: its record and log lines; None when it does not know it.

    Only a session linked to an agent can be asked about (the API is per
    agent). The agent's current name comes from the agent list (names
    change), else the one the session recorded. An upstream failure is an
    object with `error` (and the last good record, if any): the page says
    the platform could not be asked rather than that it does not know.
    """
    if not session.agent_key:
        return None
    listing = await agents_service.get_agents(organization)
    known = listing.find(session.agent_key)
    name = known.name if known else session.agent_name
    if not name:
        return None
    record, logs = await asyncio.gather(
        pipecat_cloud.get_platform_session(organization, name, session.session_id),
        pipecat_cloud.get_logs(organization, name, session_id=session.session_id, limit=SESSION_LOG_LINES, order="asc"),
    )
    if record.value is None and not record.error:
        return None
    return {
        "agentName": name,
        "session": session_json(record.value) if record.value else None,
        **record.freshness_json(),
        "logs": [log_json(line) for line in logs.value.logs] if logs.value else [],
        "logsTotal": logs.value.total if logs.value else None,
        "logsError": logs.error or None,
    }
