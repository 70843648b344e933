"""Queries over stored sessions, shared by the JSON API and the pages."""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Case, Count, F, IntegerField, Max, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Cast, Coalesce, Floor

from dashboard.web.http import BadParam, Query
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.alerts.rules import DEFAULTS, settings_of
from rtvi_monitor.core import diagnosis as turns
from rtvi_monitor.sessions import events
from rtvi_monitor.sessions.error_groups import error_groups
from rtvi_monitor.sessions.models import FAILED_ENDS, HAS_ERRORS, EndKind, Session
from rtvi_monitor.sessions.traces import session_traces

# The sessions list's filters that take one of a few values: filter_sessions reads them, its errors list
# them (the API's 400, the page's banner), and the sessions page's <select>s offer them.
FILTER_CHOICES = {"status": tuple(Session.Status.values), "end": tuple(EndKind.values)}
AGENT_KEY_MAX = 100  # characters of an agent filter: an agents API id


def filter_sessions(organization, params, contents: bool = True) -> QuerySet:
    """The organization's sessions, filtered by agent, status, time range and transcript text.

    `params` is a QueryDict (or dict), read as a form sends it (dashboard.web.http.Query): agent, status
    (FILTER_CHOICES), has_errors (any error or a fatal one), fatal, end (how it ended: FILTER_CHOICES),
    failed (ended badly: a failed end kind or a fatal error), started_after, started_before (ISO 8601;
    without a zone, in TIME_ZONE), q (transcript text) and caller (a user_id the bot reported): these two
    only when `contents`, the one asking may read them.
    Raises BadParam naming a bad parameter.
    """
    query = Query(params)
    queryset = Session.objects.filter(organization=organization).select_related("agent")
    if agent := query.text("agent", AGENT_KEY_MAX):
        queryset = queryset.filter(agent_key=agent)
    if status := query.choice("status", FILTER_CHOICES["status"]):
        queryset = queryset.filter(status=status)
    has_errors = query.boolean("has_errors")
    if has_errors is not None:
        queryset = queryset.filter(HAS_ERRORS) if has_errors else queryset.exclude(HAS_ERRORS)
    fatal = query.boolean("fatal")
    if fatal is not None:
        queryset = queryset.filter(fatal=fatal)
    if end := query.choice("end", FILTER_CHOICES["end"]):
        queryset = queryset.filter(end_kind=end)
    failed = query.boolean("failed")
    if failed is not None:
        badly = Q(end_kind__in=FAILED_ENDS) | Q(fatal=True)
        queryset = queryset.filter(badly) if failed else queryset.exclude(badly)
    if after := query.date_time("started_after"):
        queryset = queryset.filter(started_at__gte=after)
    if before := query.date_time("started_before"):
        queryset = queryset.filter(started_at__lt=before)
    if (caller := query.text("caller", exact=True)).strip():  # as the bot sent it: spaces and all
        if not contents:  # who called is a caller's detail too
            raise BadParam("caller", "finding a caller's calls needs the operator role; yours is viewer")
        queryset = queryset.filter(pk__in=sessions_of_caller(organization, caller).values("pk"))
    if q := query.text("q"):
        if not contents:  # a search of what callers said answers with what they said: not for viewers
            raise BadParam("q", "searching transcripts needs the operator role; yours is viewer")
        queryset = queryset.filter(transcript_text__icontains=q)
    return queryset.order_by("-started_at", "-pk")


def session_detail(session: Session) -> dict:
    """Everything the API says about one session: its row and its derived state.

    Live sessions are replayed from the database (the reducer is deterministic,
    so this is what the ingesting process holds); ended ones keep their final
    state.
    """
    state = session.state if session.state is not None else events.load_state(session.pk)[0].to_dict()
    counts = state.get("counts") or {}
    return {
        **session.row(),
        **state,
        "event_count": counts.get("total", session.event_count),
        "invalid_count": counts.get("invalid", session.invalid_count),
        "unknown_count": counts.get("unknown", session.unknown_count),
        # What the bot's OpenTelemetry traces say of each turn (POST /v1/traces), when it exports them.
        "traces": session_traces(session.organization_id, session.session_id),
    }


def overview(organization, now, listed=None) -> dict:
    """What the home page answers "is everything fine?" with: live sessions, what is wrong, and each agent.

    `listed`: the organization's agents as its agents API lists them (dashboard.agents.service.AgentRecord; the
    last good copy when the upstream fails), or None when there is no list to go by. Every listed agent
    has a row, sessions or not, beside the agents known only from sessions (see agents_with_health).
    """
    live = Session.objects.filter(organization=organization, status=Session.Status.LIVE)
    last_hour = Session.objects.filter(organization=organization, started_at__gte=now - timedelta(hours=1))
    badly = Session.objects.filter(organization=organization, ended_at__gte=now - timedelta(hours=24)).filter(
        # The last: rows stored before end kinds were recorded.
        Q(end_kind__in=FAILED_ENDS) | Q(fatal=True) | Q(end_reason="server restarted")
    )
    agents = agents_with_health(organization, now, agent_overview(organization, now), listed)
    since = day_start(now)
    # Every session's cost, those with no agent too (the agents' rows leave them out).
    cost = Session.objects.filter(organization=organization, started_at__gte=since).aggregate(total=Sum("cost_usd"))
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
BUCKET_MS = 10  # the resolution of the Overview's latency percentiles


def day_start(now):
    """Where the Overview's 24 hours begin: the start of the hour 23 hours before this one."""
    return (now - timedelta(hours=HOURS - 1)).replace(minute=0, second=0, microsecond=0)


def histogram_percentile(buckets: dict[int, int], p: float) -> float | None:
    """The p-th percentile (nearest rank, as `percentile`) of values counted in BUCKET_MS buckets: a bucket's middle."""
    total = sum(buckets.values())
    if not total:
        return None
    rank = min(total - 1, max(0, round(p / 100 * (total - 1))))
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen > rank:
            return bucket * BUCKET_MS + BUCKET_MS / 2
    return None  # not reached


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
    this_hour = since + timedelta(hours=HOURS - 1)
    sessions = Session.objects.filter(organization=organization).exclude(agent_key="")
    live = dict(
        sessions.filter(status=Session.Status.LIVE, bot_left_at__isnull=True)
        .values("agent_key")
        .annotate(n=Count("id"))
        .values_list("agent_key", "n")
    )
    # The hours before this one are counted once per PAST_HOURS_TTL (per process cache) and
    # this hour on every load: a day of 100,000 sessions costs a load ~1/24th of a full count.
    key = f"overview:v2:{organization.pk}:{since.isoformat()}"  # v2: rows by agent_key
    past = cache.get(key)
    if past is None:
        past = _counts(sessions, since, since, this_hour)
        cache.set(key, past, PAST_HOURS_TTL)
    current = _counts(sessions, since, this_hour, None)
    agents: dict[str, dict] = {}

    def entry_of(agent_id, name) -> dict:
        entry = agents.get(str(agent_id))
        if entry is None:
            entry = agents[str(agent_id)] = {
                "agent_id": str(agent_id),
                "name": name,
                "live": live.get(agent_id, 0),
                "sessions": 0,
                "with_errors": 0,
                "fatal": 0,
                "cost_usd": None,
                "hours": [
                    {"start": since + timedelta(hours=i), "sessions": 0, "p50": None, "p95": None} for i in range(HOURS)
                ],
                "_p50": [{} for _ in range(HOURS)],
                "_p95": [{} for _ in range(HOURS)],
            }
        return entry

    for counts in (past, current):
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
                histogram = agents[str(agent_id)][name][hour]
                histogram[int(bucket)] = histogram.get(int(bucket), 0) + n
    for agent_id in live:
        if str(agent_id) not in agents:  # live now, but started before the window
            entry_of(agent_id, None)
    heard = audio_figures(organization, since)
    for agent_id, figures in heard.items():
        if agent_id in agents:
            agents[agent_id]["audio"] = figures
    for entry in agents.values():
        p50s, p95s = entry.pop("_p50"), entry.pop("_p95")
        for hour, p50, p95 in zip(entry["hours"], p50s, p95s, strict=True):
            hour["p50"], hour["p95"] = histogram_percentile(p50, 50), histogram_percentile(p95, 95)
        entry["p50"] = histogram_percentile(_merged(p50s), 50)
        entry["p95"] = histogram_percentile(_merged(p95s), 95)
        entry["error_rate"] = entry["with_errors"] / entry["sessions"] if entry["sessions"] else None
        entry["hours_sessions"] = [hour["sessions"] for hour in entry["hours"]]
    return sorted(
        agents.values(), key=lambda e: (-e["fatal"], -(e["error_rate"] or 0), -(e["p95"] or 0), e["name"] or "")
    )


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
    sessions = Session.objects.filter(organization=organization).exclude(agent_key="")
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
    return sorted(
        rows.values(),
        key=lambda e: (e["dead"], -e["fatal"], -(e["error_rate"] or 0), -(e["p95"] or 0), e["name"] or ""),
    )


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


def latency_bucket(value):
    """floor(value / BUCKET_MS) natively: SQLite's CAST truncates (the same for latencies, never
    negative) while Floor may be a Python callback there; PostgreSQL's CAST rounds, its FLOOR is native."""
    if connection.vendor == "postgresql":
        return Floor(value / BUCKET_MS)
    return Cast(value / BUCKET_MS, IntegerField())


def _merged(histograms: list[dict[int, int]]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for histogram in histograms:
        for bucket, n in histogram.items():
            merged[bucket] = merged.get(bucket, 0) + n
    return merged


def erase_session(session: Session) -> dict | None:
    """Erase the session from every place its contents are kept (rtvi_monitor/privacy/contents.py), then its row, in
    one transaction: what was erased ({"messages": n, "spans": n, and each other place that changed}).

    None, and nothing deleted, while it is live: its bot would go on streaming into a session that
    no longer exists (end the call first; a bot that reconnects later starts a new one).
    """
    from django.db import transaction

    from rtvi_monitor.privacy import contents

    with transaction.atomic():
        locked = Session.objects.select_for_update().filter(pk=session.pk, status=Session.Status.ENDED).first()
        if locked is None:
            return None
        erased = contents.erase([locked])
        locked.delete()
    contents.settle()
    return _erased(erased)


def _erased(counts: dict) -> dict:
    """What an erase says it did: messages and spans always, the other places when they changed (the row's
    own fields went with it)."""
    others = {"audio_chunks" if k == "audio" else k: n for k, n in counts.items() if n and k != "derived"}
    return {"messages": 0, "spans": 0, **others}


def sessions_of_caller(organization, user_id: str):
    """The organization's sessions in which a bot reported this `user_id` (found by its key, models.caller_keys)."""
    from rtvi_monitor.sessions.models import caller_keys

    keys = caller_keys(organization.pk, user_id[:200])
    return Session.objects.filter(organization=organization, callers__caller_key__in=keys).distinct()


def erase_caller(organization, user_id: str) -> dict:
    """Erase every ended session of one caller: what went, and the live ones left (erase again once they end)."""
    erased, live, messages, spans = [], [], 0, 0
    for session in sessions_of_caller(organization, user_id).order_by("started_at"):
        result = erase_session(session)
        if result is None:
            live.append(session.session_id)
            continue
        erased.append(session.session_id)
        messages += result["messages"]
        spans += result["spans"]
    return {"erased": erased, "live": live, "messages": messages, "spans": spans}


# --- turns: why a turn went wrong (rtvi_monitor/core/diagnosis.py) ------------------------------------------

TURN_PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
SUMMARY_TTL = 24 * 3600  # seconds an ended session's turn summary is reused (it no longer changes)


def turn_events(session_pk: int) -> list:
    """A session's stored messages that turns.diagnose reads, in the order they were stored, as the reducer's events."""
    from rtvi_monitor.core.state import Event as StateEvent
    from rtvi_monitor.sessions.models import Event

    rows = (
        Event.objects.filter(session_id=session_pk, type__in=turns.TYPES, valid=True)
        .order_by("pk")
        .values_list("seq", "direction", "received_at", "sent_at", "message")
    )
    out = []
    for seq, direction, received_at, sent_at, text in rows.iterator(chunk_size=2000):
        message = events.stored_message(text)
        if isinstance(message, dict):
            out.append(StateEvent(seq, direction, events.event_time(sent_at, received_at), message))
    return out


def _thresholds() -> dict:
    return {
        "backchannel_seconds": settings.TURN_BACKCHANNEL_SECONDS,
        "backchannel_words": settings.TURN_BACKCHANNEL_WORDS,
    }


def session_turns(session: Session, contents: bool = True) -> dict:
    """GET /api/sessions/<id>/turns/: each turn of the session taken apart (turns.diagnose), with the
    thresholds it was judged by; without what anybody said unless `contents`."""
    live = session.status == Session.Status.LIVE
    traces = session_traces(session.organization_id, session.session_id)
    diagnosis = turns.diagnose(turn_events(session.pk), traces, live=live, **_thresholds())
    if not contents:
        diagnosis = turns.without_words(diagnosis)
    return {
        "session_id": session.session_id,
        "live": live,
        "contents": contents,
        "thresholds": _thresholds(),
        "stage_names": [{"stage": stage, "label": label} for stage, _, _, label in turns.STAGES],
        **diagnosis,
    }


def _session_summary(session_pk: int, session_id: str, organization_id, ended: bool, key: str, traced: bool) -> dict:
    cached = cache.get(key) if ended else None
    if cached is not None:
        return cached
    traces = session_traces(organization_id, session_id) if traced else None
    diagnosis = turns.diagnose(turn_events(session_pk), traces, live=not ended, **_thresholds())
    result = {k: v for k, v in diagnosis.items() if k != "turns"}
    if ended:
        cache.set(key, result, SUMMARY_TTL)
    return result


def summary_cache_key(session_pk: int, event_count: int) -> str:
    """Where an ended session's turn summary is cached: by its message count (a reopened one is read again) and
    the thresholds it was judged by (rtvi_monitor/privacy/contents.py erases it)."""
    judged = f"{settings.TURN_BACKCHANNEL_SECONDS:g}:{settings.TURN_BACKCHANNEL_WORDS}"
    return f"turns:summary:v2:{session_pk}:{event_count}:{judged}"


def agent_turn_figures(organization, agent_key: str, period: str, now, active_deployment_id: str | None = None) -> dict:
    """An agent's turns over a period ("24h" or "7d"): interruption and backchannel rates, each stage's p50/p95,
    overall and per deployment (the one recorded when each session's bot connected), newest deployment first.

    Computed from the stored messages of at most TURN_STATS_MAX_SESSIONS of its newest sessions of the
    period (`read` of `total`); each ended session's summary is cached for a day (keyed by its message
    count, so a reopened one is read again), and the whole answer for TURN_STATS_CACHE_SECONDS. `period`
    is one of TURN_PERIODS (the agent page reads its `turns` parameter as a choice of them).
    """
    from rtvi_monitor.sessions.models import Span

    judged = f"{settings.TURN_BACKCHANNEL_SECONDS:g}:{settings.TURN_BACKCHANNEL_WORDS}"  # a new threshold, new figures
    scope = f"{organization.pk}\n{agent_key}\n{period}\n{settings.TURN_STATS_MAX_SESSIONS}\n{judged}"
    key = "turns:agent:v2:" + hashlib.sha256(scope.encode()).hexdigest()
    figures = cache.get(key)
    if figures is None:
        since = now - TURN_PERIODS[period]
        sessions = Session.objects.filter(organization=organization, agent_key=agent_key, started_at__gte=since)
        total = sessions.count()
        rows = list(
            sessions.order_by("-started_at", "-pk").values_list(
                "pk", "session_id", "status", "deployment_id", "event_count", "started_at"
            )[: settings.TURN_STATS_MAX_SESSIONS]
        )
        traced = set(
            Span.objects.filter(organization=organization, conversation_id__in=[row[1] for row in rows])
            .values_list("conversation_id", flat=True)
            .distinct()
        )
        by_deployment: dict[str, list] = {}
        seen: dict[str, list] = {}
        summaries = []
        for pk, session_id, status, deployment_id, event_count, started_at in rows:
            ended = status == Session.Status.ENDED
            summary_key = summary_cache_key(pk, event_count)
            summary = _session_summary(pk, session_id, organization.pk, ended, summary_key, session_id in traced)
            summaries.append(summary)
            by_deployment.setdefault(deployment_id, []).append(summary)
            span = seen.setdefault(deployment_id, [started_at, started_at])
            span[0], span[1] = min(span[0], started_at), max(span[1], started_at)
        deployments = [
            {
                "deployment_id": deployment_id,
                "first_at": seen[deployment_id][0],
                "last_at": seen[deployment_id][1],
                **turns.aggregate(items),
            }
            for deployment_id, items in by_deployment.items()
        ]
        deployments.sort(key=lambda d: d["last_at"], reverse=True)
        figures = {
            "period": period,
            "total": total,
            "read": len(rows),
            "overall": turns.aggregate(summaries),
            "deployments": deployments,
        }
        cache.set(key, figures, settings.TURN_STATS_CACHE_SECONDS)
    for deployment in figures["deployments"]:
        deployment["active"] = bool(active_deployment_id) and deployment["deployment_id"] == active_deployment_id
    return {
        **figures,
        "periods": list(TURN_PERIODS),
        "capped": figures["read"] < figures["total"],
        "thresholds": _thresholds(),
    }
