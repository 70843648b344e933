"""The Overview's figures: what the home page answers "is everything fine?" with, per organization and per
agent, over the last 24 hours: sessions, errors, latency, cost, audio, and each agent's health (silent,
retired, not ready) beside the no-sessions alert's own settings.
"""

from datetime import timedelta

from django.core.cache import cache
from django.db.models import Case, Count, F, Max, Q, Sum, Value, When
from django.db.models.functions import Coalesce

from dashboard.org.models import LatencyBudget
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.alerts.thresholds import DEFAULTS, settings_of
from rtvi_monitor.sessions.error_groups import error_groups
from rtvi_monitor.sessions.fleet import agent_turn_figures
from rtvi_monitor.sessions.models import FAILED_ENDS, HAS_ERRORS, Session
from rtvi_monitor.sessions.queries import histogram_percentile, latency_bucket


def overview(organization, now, listed=None) -> dict:
    """What the home page answers "is everything fine?" with: live sessions, what is wrong, and each agent.

    `listed`: the organization's agents as its agents API lists them (dashboard.agents.service.AgentRecord; the
    last good copy when the upstream fails), or None when there is no list to go by. Every listed agent
    has a row, sessions or not, beside the agents known only from sessions (see agents_with_health).
    """
    live = Session.objects.calls().filter(organization=organization, status=Session.Status.LIVE)
    last_hour = Session.objects.calls().filter(organization=organization, started_at__gte=now - timedelta(hours=1))
    badly = (
        Session.objects.calls()
        .filter(organization=organization, ended_at__gte=now - timedelta(hours=24))
        .filter(
            # The last: rows stored before end kinds were recorded.
            Q(end_kind__in=FAILED_ENDS) | Q(fatal=True) | Q(end_reason="server restarted")
        )
    )
    agents = agents_with_health(organization, now, agent_overview(organization, now), listed)
    since = day_start(now)
    # Every session's cost, those with no agent too (the agents' rows leave them out).
    cost = (
        Session.objects.calls()
        .filter(organization=organization, started_at__gte=since)
        .aggregate(total=Sum("cost_usd"))
    )
    return {
        # A bot that left is not a call; it is counted apart until its grace runs out.
        "live_count": live.filter(bot_left_at__isnull=True).count(),
        "away_count": live.filter(bot_left_at__isnull=False).count(),
        "sessions_last_hour": last_hour.count(),
        "error_sessions_last_hour": last_hour.filter(HAS_ERRORS).count(),
        "error_groups": error_groups(organization, now),
        "ended_badly": list(badly.select_related("agent").order_by("-ended_at")[:20]),
        "ended_badly_count": badly.count(),
        "agents": agents,
        "agents_listed": listed is not None,
        "cost_usd": cost["total"],
    }


HOURS = 24

PAST_HOURS_TTL = 120  # seconds the Overview's counts of earlier hours are reused


def day_start(now):
    """Where the Overview's 24 hours begin: the start of the hour 23 hours before this one."""
    return (now - timedelta(hours=HOURS - 1)).replace(minute=0, second=0, microsecond=0)


def agent_overview(organization, now) -> list[dict]:
    """Per agent, over the last 24 hours by the hour: sessions, turn latency p50/p95, errors, cost.

    Worst first: most sessions ending in a fatal error, then the highest share
    of sessions with errors, then the slowest p95. Latency is summarised from
    the sessions' own figures (turns are not stored one by one; p50: the
    median of their p50s; p95: the 95th percentile of their p95s), counted by
    the database in BUCKET_MS buckets: a day of 100,000 sessions is a few
    thousand rows, not 100,000 (docs/BENCHMARKS.md). The agents page and the
    agent page read the same figures.
    Agents are told apart by their agents API id (Session.agent_key), so an
    agent of Pipecat Cloud's list counts like a built-in one.
    """
    since = day_start(now)
    sessions = Session.objects.calls().filter(organization=organization).exclude(agent_key="")
    live = dict(
        sessions.filter(status=Session.Status.LIVE, bot_left_at__isnull=True)
        .values("agent_key")
        .annotate(n=Count("id"))
        .values_list("agent_key", "n")
    )
    agents: dict[str, dict] = {}

    def entry_of(agent_id, name) -> dict:
        """The agent's row, made blank (with its hours' latency histograms to fill) the first time."""
        if str(agent_id) not in agents:
            agents[str(agent_id)] = {
                **_blank_agent(str(agent_id), name, since),
                "live": live.get(agent_id, 0),
                "_p50": [{} for _ in range(HOURS)],
                "_p95": [{} for _ in range(HOURS)],
            }
        return agents[str(agent_id)]

    for counts in _window_counts(organization, sessions, since):
        _add_counts(counts, entry_of)
    for agent_id in live:  # live now, but started before the window
        entry_of(agent_id, None)
    heard = audio_figures(organization, since)
    for agent_id, figures in heard.items():
        if agent_id in agents:
            agents[agent_id]["audio"] = figures
    for entry in agents.values():
        _finish(entry)
    return sorted(
        agents.values(), key=lambda e: (-e["fatal"], -(e["error_rate"] or 0), -(e["p95"] or 0), e["name"] or "")
    )


def _window_counts(organization, sessions, since) -> tuple[dict, dict]:
    """The window's counts (_counts) in two stretches: the hours before this one, counted once per
    PAST_HOURS_TTL (per process cache), and this hour, on every load: a day of 100,000 sessions costs a
    load ~1/24th of a full count."""
    this_hour = since + timedelta(hours=HOURS - 1)
    key = f"overview:v2:{organization.pk}:{since.isoformat()}"  # v2: rows by agent_key
    past = cache.get(key)
    if past is None:
        past = _counts(sessions, since, since, this_hour)
        cache.set(key, past, PAST_HOURS_TTL)
    return past, _counts(sessions, since, this_hour, None)


def _add_counts(counts: dict, entry_of) -> None:
    """One stretch's counts added to each agent's row (`entry_of(agent_id, name)`: the row, made when new)."""
    for row in counts["totals"]:
        entry = entry_of(row["agent_key"], row["agent_name"])
        entry["hours"][row["hour"]]["sessions"] += row["sessions"]
        entry["sessions"] += row["sessions"]
        entry["with_errors"] += row["with_errors"]
        entry["fatal"] += row["fatal"]
        if row["cost"] is not None:
            entry["cost_usd"] = (entry["cost_usd"] or 0.0) + row["cost"]
    for name in ("_p50", "_p95"):
        for agent_id, hour, bucket, n in counts[name]:
            histogram = entry_of(agent_id, None)[name][hour]
            histogram[int(bucket)] = histogram.get(int(bucket), 0) + n


def _finish(entry: dict) -> None:
    """An agent's row made from its counts: p50 and p95 by the hour and over the day (from its latency
    histograms, which it then drops), its error rate and its hours' sessions."""
    p50s, p95s = entry.pop("_p50"), entry.pop("_p95")
    for hour, p50, p95 in zip(entry["hours"], p50s, p95s, strict=True):
        hour["p50"], hour["p95"] = histogram_percentile(p50, 50), histogram_percentile(p95, 95)
    entry["p50"] = histogram_percentile(_merged(p50s), 50)
    entry["p95"] = histogram_percentile(_merged(p95s), 95)
    entry["error_rate"] = entry["with_errors"] / entry["sessions"] if entry["sessions"] else None
    entry["hours_sessions"] = [hour["sessions"] for hour in entry["hours"]]


def audio_figures(organization, since) -> dict[str, dict]:
    """Per agent, over the recorded calls that ended since `since`: what the audio says of turn latency,
    beside what the same calls' messages report (medians of the calls' medians, rtvi_monitor/audio/store.py)."""
    from statistics import median

    from rtvi_monitor.audio.models import SessionAudio

    rows = SessionAudio.objects.filter(
        session__organization=organization, session__started_at__gte=since, voice_to_voice_p50__isnull=False
    ).values_list("session__agent_key", "voice_to_voice_p50", "reported_p50", "difference_p50")
    by_agent: dict[str, list] = {}
    for agent_key, *figures in rows:
        by_agent.setdefault(str(agent_key), []).append(figures)
    out = {}
    for agent_key, calls in by_agent.items():
        columns = [[v for v in column if v is not None] for column in zip(*calls, strict=True)]
        out[agent_key] = {
            "calls": len(calls),
            **{
                name: round(median(values), 3) if values else None
                for name, values in zip(("voice_to_voice_p50", "reported_p50", "difference_p50"), columns, strict=True)
            },
        }
    return out


# How dead an agent is, worst first: the Overview sorts by it before anything else.
NOT_READY, NO_DEPLOYMENT, SILENT, FINE, RETIRED = 0, 1, 2, 3, 4


def no_sessions_settings(organization) -> tuple[float, int]:
    """(threshold, window minutes) of "usually has sessions, has had none": the organization's own enabled
    organization-wide no_sessions_minutes alert rule when it has one, else that condition's defaults."""
    rule = (
        AlertRule.objects.filter(
            organization=organization, condition=AlertRule.Condition.NO_SESSIONS, enabled=True, agent__isnull=True
        )
        .order_by("pk")
        .first()
    )
    return settings_of(rule) if rule else DEFAULTS[AlertRule.Condition.NO_SESSIONS]


def silent_agents(organization, now) -> dict[str, dict]:
    """The agents that usually have sessions but have had none lately, by agent_key.

    The rule of the no_sessions_minutes alert (rtvi_monitor/alerts/rules.py), with its threshold and window
    (no_sessions_settings; by default 3 sessions, 30 minutes): an agent with at least `threshold`
    sessions started in the 24 hours before the last `window` minutes, none started within them, and
    none live. Each value: {"name": the name its sessions recorded, "before": sessions in those 24
    hours, "window_minutes": window}.

    The usual agents are counted by the database per agent and, like the Overview's earlier hours,
    reused for PAST_HOURS_TTL (their 24 hours then end up to that much earlier); whether they have a
    session now is asked on every load, one index lookup per usual agent. Over a day of 100,000
    sessions (bench/overview.py's, SQLite): ~80 ms once per PAST_HOURS_TTL, then ~3 ms a load (the
    alert's own evaluation reads every row; this is the Overview's, reloaded on every session change).
    """
    threshold, window = no_sessions_settings(organization)
    since = now - timedelta(minutes=window)
    sessions = Session.objects.calls().filter(organization=organization).exclude(agent_key="")
    key = f"overview:usual:v1:{organization.pk}:{threshold:g}:{window}"
    usual = cache.get(key)
    if usual is None:
        usual = {
            row["agent_key"]: (row["name"], row["before"])
            for row in sessions.filter(started_at__gte=since - timedelta(hours=24), started_at__lt=since)
            .values("agent_key")
            .annotate(before=Count("id"), name=Max("agent_name"))
            .filter(before__gte=threshold)
        }
        cache.set(key, usual, PAST_HOURS_TTL)
    if not usual:
        return {}
    # Ordered by start as the sessions page's index is: SQLite then reads only the live rows.
    live = set(sessions.filter(status=Session.Status.LIVE).order_by("-started_at").values_list("agent_key", flat=True))
    return {
        agent_id: {"name": name, "before": before, "window_minutes": window}
        for agent_id, (name, before) in usual.items()
        if agent_id not in live and not sessions.filter(agent_key=agent_id, started_at__gte=since).exists()
    }


def _blank_agent(agent_id: str, name: str, since) -> dict:
    """An agent's row with no session in the Overview's window: zeros and unknowns, shaped as agent_overview's."""
    return {
        "agent_id": agent_id,
        "name": name,
        "live": 0,
        "sessions": 0,
        "with_errors": 0,
        "fatal": 0,
        "cost_usd": None,
        "hours": [{"start": since + timedelta(hours=i), "sessions": 0, "p50": None, "p95": None} for i in range(HOURS)],
        "p50": None,
        "p95": None,
        "error_rate": None,
        "hours_sessions": [0] * HOURS,
    }


def agents_with_health(organization, now, figures: list[dict], listed) -> list[dict]:
    """Every agent the Overview shows, each with what is wrong with it, dead ones first.

    The rows are `figures` (agent_overview: the agents with sessions in the window) merged with
    `listed` (the agents API's records; None: no list to go by) by the agents API's id, which is
    what Session.agent_key keeps (rtvi_monitor/sessions/agent_link.py). A listed agent with no session gets a
    row of zeros and the API's name; an agent known only from sessions keeps the name they recorded
    and, when there is a list, `unlisted` (the list does not have it: renamed away or deleted).

    An agent is dead, its reasons in `problems` (worst first), when:
      (a) NOT_READY: the agents API lists it as deleted, so it cannot take sessions, yet bots used it
          in the window (calls meant for it now fail); the list's record has no `ready` of its own
          (that is in GET /agents/{name}, one call per agent, not made for the Overview);
      (b) NO_DEPLOYMENT: the agents API lists it with no active deployment;
      (c) SILENT: it usually has sessions but has had none lately (silent_agents: the
          no_sessions_minutes alert's rule).
    A deleted agent with no session in the window is `retired`: shown last, grey, not red (a team
    deletes agents on purpose; a permanent red row for one retired months ago would teach the on-call
    engineer to ignore red).
    `dead` is the worst of them (FINE when none, RETIRED for a retired one). Sorted by it, then as
    agent_overview sorts.
    """
    since = day_start(now)
    rows = {entry["agent_id"]: entry for entry in figures}
    records = {record.id: record for record in listed or ()}
    for record in records.values():
        if record.id not in rows:
            rows[record.id] = _blank_agent(record.id, record.name, since)
    silent = silent_agents(organization, now)
    for agent_id, quiet in silent.items():
        if agent_id not in rows:  # its sessions are all a little older than the window's first hour
            rows[agent_id] = _blank_agent(agent_id, quiet["name"], since)
    for agent_id, entry in rows.items():
        record = records.get(agent_id)
        # The agents API's name when it knows the agent (it may have been renamed), else the one sessions recorded.
        entry["name"] = record.name if record else entry["name"] or agent_id
        entry["listed"] = record is not None
        entry["unlisted"] = listed is not None and record is None
        problems = []
        deleted = record is not None and record.deleted_at
        entry["retired"] = bool(deleted) and not (entry["sessions"] or entry["live"])
        if deleted and not entry["retired"]:
            problems.append(
                (
                    NOT_READY,
                    "not ready: the agents API lists it as deleted, so it takes no sessions "
                    f"(it had {entry['sessions']} in the last 24 h)",
                )
            )
        if record is not None and not record.active_deployment_id:
            problems.append((NO_DEPLOYMENT, "no active deployment: the agents API has nothing to start a session on"))
        if agent_id in silent:
            quiet = silent[agent_id]
            problems.append(
                (
                    SILENT,
                    f"no session in the last {quiet['window_minutes']} min "
                    f"(it had {quiet['before']} in the 24 h before)",
                )
            )
        entry["problems"] = [text for _, text in problems]
        entry["dead"] = min((rank for rank, _ in problems), default=RETIRED if entry["retired"] else FINE)
    for budget in LatencyBudget.objects.filter(organization=organization, agent_id__in=list(rows)):
        rows[budget.agent_id]["budget"] = budget_status(organization, budget, now)
    return sorted(
        rows.values(),
        key=lambda e: (e["dead"], -e["fatal"], -(e["error_rate"] or 0), -(e["p95"] or 0), e["name"] or ""),
    )


def budget_status(organization, budget: LatencyBudget, now) -> dict:
    """An agent against its latency budget over the last 24 hours: its turns' p95 wait (every turn, as the agent
    page's turns), whether it is over, and the part that put it there: of what its slowest turns are made of
    (diagnosis.made_of, from its bots' breakdowns), the part furthest over its own budget, else, with no part
    over one (or none set), the largest part of the slowest turns. No culprit without breakdowns."""
    figures = agent_turn_figures(organization, budget.agent_id, "24h", now)
    p95 = figures["overall"]["latency"]["p95"]
    made = figures["overall"].get("made_of")
    culprit = None
    if made and made["parts"]:
        over = [
            (part["p95_ms"] - budget.parts[part["key"]], part)
            for part in made["parts"]
            if isinstance(budget.parts.get(part["key"]), int | float)
        ]
        worst = max(over, key=lambda item: item[0], default=None)
        if worst is not None and worst[0] > 0:
            culprit = {**worst[1], "budget_ms": budget.parts[worst[1]["key"]], "over_by_ms": round(worst[0], 1)}
        else:
            culprit = {**made["parts"][0], "budget_ms": None, "over_by_ms": None}
    return {
        "budget_ms": budget.p95_ms,
        "p95_ms": p95,
        "turns": figures["overall"]["latency"]["n"],
        "over": p95 is not None and p95 > budget.p95_ms,
        "culprit": culprit,
    }


def _counts(sessions, since, start, end) -> dict:
    """The sessions started in [start, end), counted by agent and hour of the window (from `since`)."""
    # The hour as a number, in SQL every database runs natively (SQLite's date functions are Python
    # callbacks in Django: 100,000 calls a query).
    hour = Case(
        *(When(started_at__gte=since + timedelta(hours=i), then=Value(i)) for i in range(HOURS - 1, 0, -1)),
        default=Value(0),
    )
    recent = sessions.filter(started_at__gte=start)
    if end is not None:
        recent = recent.filter(started_at__lt=end)
    recent = recent.annotate(hour=hour)
    counts = {
        "totals": list(
            recent.values("agent_key", "agent_name", "hour").annotate(
                sessions=Count("id"),
                with_errors=Count("id", filter=HAS_ERRORS),
                fatal=Count("id", filter=Q(fatal=True)),
                cost=Sum("cost_usd"),
            )
        )
    }
    for name, value in (("_p50", F("latency_p50_ms")), ("_p95", Coalesce("latency_p95_ms", "latency_p50_ms"))):
        counts[name] = list(
            recent.filter(latency_p50_ms__isnull=False)
            .annotate(bucket=latency_bucket(value))
            .values("agent_key", "hour", "bucket")
            .annotate(n=Count("id"))
            .values_list("agent_key", "hour", "bucket", "n")
        )
    return counts


def _merged(histograms: list[dict[int, int]]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for histogram in histograms:
        for bucket, n in histogram.items():
            merged[bucket] = merged.get(bucket, 0) + n
    return merged
