"""Queries over stored sessions, shared by the JSON API and the pages."""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import IntegerField, Q, QuerySet
from django.db.models.functions import Cast, Floor
from django.http import Http404

from dashboard.web.http import BadParam, Query
from rtvi_monitor.core import compare, figure_names
from rtvi_monitor.core import diagnosis as turns
from rtvi_monitor.sessions import events
from rtvi_monitor.sessions.models import FAILED_ENDS, HAS_ERRORS, EndKind, Session
from rtvi_monitor.sessions.traces import session_traces

# The sessions list's filters that take one of a few values: filter_sessions reads them, its errors list
# them (the API's 400, the page's banner), and the sessions page's <select>s offer them.
FILTER_CHOICES = {"status": tuple(Session.Status.values), "end": tuple(EndKind.values)}
AGENT_KEY_MAX = 100  # characters of an agent filter: an agents API id


def organization_session(organization, session_id: str) -> Session:
    """The organization's session with this id (its agent joined), the one way a page or a JSON view finds the
    session its URL names: Http404 when it has none, nor tells another organization's apart from none. A page
    answers Django's 404; a JSON view (dashboard.web.http.json_methods) a JSON 404 in these words."""
    session = Session.objects.find(organization, session_id)
    if session is None:
        raise Http404(f"No session {session_id!r} in your organization.")
    return session


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


BUCKET_MS = 10  # the resolution of the Overview's latency percentiles


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


def latency_bucket(value):
    """floor(value / BUCKET_MS) natively: SQLite's CAST truncates (the same for latencies, never
    negative) while Floor may be a Python callback there; PostgreSQL's CAST rounds, its FLOOR is native."""
    if connection.vendor == "postgresql":
        return Floor(value / BUCKET_MS)
    return Cast(value / BUCKET_MS, IntegerField())


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


def stage_values(session_pk: int, session_id: str, organization_id, event_count: int) -> dict[str, list[float]]:
    """An ended session's waits (ms) per stage of its turns and its turn latency (diagnosis.summary's values),
    from its cached summary as the agent's figures read it."""
    from rtvi_monitor.sessions.models import Span

    traced = Span.objects.filter(organization_id=organization_id, conversation_id=session_id).exists()
    key = summary_cache_key(session_pk, event_count)
    return _session_summary(session_pk, session_id, organization_id, True, key, traced)["values"]


COMPARED = (*turns.STAGE_NAMES, "latency")
COMPARED_PERCENTILES = (50, 95)
LABELS = {stage: label for stage, _, _, label in turns.STAGES} | {"latency": figure_names.TURN_LATENCY.name}


def _pair(figures: dict, active: str | None) -> tuple[str, str] | None:
    """The deployments to compare: the active one (else the newest) against the one before it, by their calls."""
    order = [d["deployment_id"] for d in figures["deployments"] if d["deployment_id"]]
    after = active if active in order else (order[0] if order else None)
    before = next((d for d in order if d != after), None)
    return (before, after) if after and before else None


PART = "part:"  # a breakdown part's values among a call's, beside the stages' (`part:llm_inference`)
FLAGS = "flags"  # a call's yes-or-no figures among its values: a barge-in, errors, a bad end
RATES = {
    "barge_in": "Calls with a barge-in",
    "errors": "Calls with errors",
    "ended_badly": "Calls that ended badly",
}
MOST_PARTS = 8  # the parts compared: the most common both deployments' breakdowns name


def call_values(summary: dict) -> dict[str, list[float]]:
    """One call's values per figure: its stages' and turn latency's, and each part its bots' breakdowns name."""
    values = dict(summary["values"])
    for _, parts in summary.get("breakdowns", ()):
        for key, _, ms in parts:
            values.setdefault(PART + key, []).append(ms)
    return values


def _compared(calls: dict, before: str, after: str) -> list[str]:
    """The figures compared: the stages, the turn latency, and the parts both sides' breakdowns name most."""
    named: dict[str, list[int]] = {}
    for side, deployment in enumerate((before, after)):
        for values in calls.get(deployment, []):
            for name in values:
                if name.startswith(PART):
                    named.setdefault(name, [0, 0])[side] += 1
    shared = sorted((n for n, counts in named.items() if all(counts)), key=lambda n: -min(named[n]))
    return [*COMPARED, *shared[:MOST_PARTS]]


def _verdict(change: dict | None) -> str:
    if change is None:
        return "too few calls"
    return "worse" if change["low"] > 0 else "better" if change["high"] < 0 else "no difference shown"


def _rate_row(flag: str, before: list[dict], after: list[dict], family: int, alpha: float = 0.05) -> dict:
    """The share of calls with `flag` before and now, "worse" or "better" by Fisher's exact test each way at
    alpha / family / 2 (the table's intervals' level, so the family's rate holds); at least MIN_CALLS a side."""
    a = [call[FLAGS][flag] for call in before if call.get(FLAGS, {}).get(flag) is not None]
    b = [call[FLAGS][flag] for call in after if call.get(FLAGS, {}).get(flag) is not None]
    row = {"figure": f"rate:{flag}", "label": RATES[flag], "q": None, "change": None, "rate": None}
    if len(a) < compare.MIN_CALLS or len(b) < compare.MIN_CALLS:
        return {**row, "verdict": "too few calls"}
    ka, kb = sum(a), sum(b)
    worse_p = compare.fewer_passes_p(len(a) - ka, len(a), len(b) - kb, len(b))  # fewer calls without it
    better_p = compare.fewer_passes_p(ka, len(a), kb, len(b))  # fewer calls with it
    level = alpha / family / 2
    verdict = "worse" if worse_p <= level else "better" if better_p <= level else "no difference shown"
    rate = {"a": ka / len(a), "b": kb / len(b), "calls": [len(a), len(b)], "p": min(worse_p, better_p)}
    return {**row, "rate": rate, "verdict": verdict}


def deployment_change(scope_key: str, figures: dict, active: str | None) -> dict | None:
    """Issue 37's comparison: each stage of the wait, the turn latency and each part of the bots' breakdowns
    (a setting's such as the VAD's stop time apart from the services'), at p50 and p95, of the active
    deployment against the one before, with an interval from the calls themselves (core/compare.py
    percentile_change: the bootstrap over calls, every interval of the table widened together so that two
    deployments that behave the same are called worse or better at most 5 % of the time in all). Worse or
    better only when the whole interval is. Cached as the figures are."""
    pair = _pair(figures, active)
    if pair is None:
        return None
    before, after = pair
    key = f"{scope_key}:change:v3:" + hashlib.sha256(f"{before}\n{after}".encode()).hexdigest()
    found = cache.get(key)
    if found is not None:
        return found
    calls = figures.get("calls_by_deployment") or {}
    names = _compared(calls, before, after)
    family = len(names) * len(COMPARED_PERCENTILES) + len(RATES)
    rows = [_rate_row(flag, calls.get(before, []), calls.get(after, []), family) for flag in RATES]
    for name in names:
        a = [values.get(name) or [] for values in calls.get(before, [])]
        b = [values.get(name) or [] for values in calls.get(after, [])]
        label = LABELS.get(name) or f"{name[len(PART) :]} (its bots' breakdown)"
        for q in COMPARED_PERCENTILES:
            change = compare.percentile_change(a, b, q, family=family, seed=q)
            rows.append({"figure": name, "label": label, "q": q, "change": change, "verdict": _verdict(change)})
    found = {"before": before, "after": after, "rows": rows, "min_calls": compare.MIN_CALLS, "family": family}
    cache.set(key, found, settings.TURN_STATS_CACHE_SECONDS)
    return found


def summary_cache_key(session_pk: int, event_count: int) -> str:
    """Where an ended session's turn summary is cached: by its message count (a reopened one is read again) and
    the thresholds it was judged by (rtvi_monitor/privacy/contents.py erases it)."""
    judged = f"{settings.TURN_BACKCHANNEL_SECONDS:g}:{settings.TURN_BACKCHANNEL_WORDS}"
    return f"turns:summary:v4:{session_pk}:{event_count}:{judged}"


ROW_FIELDS = (
    "pk", "session_id", "status", "deployment_id", "event_count", "started_at", "error_count", "fatal", "end_kind",
)  # fmt: skip


def _figures_of(organization, sessions, period: str) -> dict:
    """The figures agent_turn_figures caches: the newest TURN_STATS_MAX_SESSIONS of `sessions`, each taken apart."""
    from rtvi_monitor.sessions.models import Span

    total = sessions.count()
    rows = list(sessions.order_by("-started_at", "-pk").values_list(*ROW_FIELDS)[: settings.TURN_STATS_MAX_SESSIONS])
    traced = set(
        Span.objects.filter(organization=organization, conversation_id__in=[row[1] for row in rows])
        .values_list("conversation_id", flat=True)
        .distinct()
    )
    by_deployment: dict[str, list] = {}
    calls_by_deployment: dict[str, list] = {}
    seen: dict[str, list] = {}
    summaries = []
    for pk, session_id, status, deployment_id, event_count, started_at, errors, fatal, end_kind in rows:
        ended = status == Session.Status.ENDED
        summary_key = summary_cache_key(pk, event_count)
        summary = _session_summary(pk, session_id, organization.pk, ended, summary_key, session_id in traced)
        summaries.append(summary)
        by_deployment.setdefault(deployment_id, []).append(summary)
        # As HAS_ERRORS counts a session with errors, and FAILED_ENDS one that ended badly.
        flags = {"barge_in": summary["counts"]["barge_ins"] > 0, "errors": errors > 0 or fatal}
        flags["ended_badly"] = None if not ended else end_kind in FAILED_ENDS
        calls_by_deployment.setdefault(deployment_id, []).append({**call_values(summary), FLAGS: flags})
        span = seen.setdefault(deployment_id, [started_at, started_at])
        span[0], span[1] = min(span[0], started_at), max(span[1], started_at)
    deployments = [
        {"deployment_id": deployment_id, "first_at": seen[deployment_id][0], "last_at": seen[deployment_id][1],
         **turns.aggregate(items)}
        for deployment_id, items in by_deployment.items()
    ]  # fmt: skip
    deployments.sort(key=lambda d: d["last_at"], reverse=True)
    return {
        "period": period,
        "total": total,
        "read": len(rows),
        "overall": turns.aggregate(summaries),
        "deployments": deployments,
        # Each deployment's calls, each its turns' values per figure: what deployment_change resamples.
        "calls_by_deployment": calls_by_deployment,
    }


def agent_turn_figures(organization, agent_key: str, period: str, now, active_deployment_id: str | None = None) -> dict:
    """An agent's turns over a period ("24h" or "7d"): interruption and backchannel rates, each stage's p50/p95,
    overall and per deployment (the one recorded when each session's bot connected), newest deployment first.

    Computed from the stored messages of at most TURN_STATS_MAX_SESSIONS of its newest sessions of the
    period (`read` of `total`); each ended session's summary is cached for a day (keyed by its message
    count, so a reopened one is read again), and the whole answer for TURN_STATS_CACHE_SECONDS. `period`
    is one of TURN_PERIODS (the agent page reads its `turns` parameter as a choice of them).
    """
    judged = f"{settings.TURN_BACKCHANNEL_SECONDS:g}:{settings.TURN_BACKCHANNEL_WORDS}"  # a new threshold, new figures
    scope = f"{organization.pk}\n{agent_key}\n{period}\n{settings.TURN_STATS_MAX_SESSIONS}\n{judged}"
    # v3: turn latency of spoken turns only; v4: what the waits are made of (the bots' breakdowns)
    key = "turns:agent:v4:" + hashlib.sha256(scope.encode()).hexdigest()
    figures = cache.get(key)
    if figures is None:
        since = now - TURN_PERIODS[period]
        sessions = Session.objects.calls().filter(organization=organization, agent_key=agent_key, started_at__gte=since)
        figures = _figures_of(organization, sessions, period)
        cache.set(key, figures, settings.TURN_STATS_CACHE_SECONDS)
    for deployment in figures["deployments"]:
        deployment["active"] = bool(active_deployment_id) and deployment["deployment_id"] == active_deployment_id
    return {
        **figures,
        "change": deployment_change(key, figures, active_deployment_id),
        "periods": list(TURN_PERIODS),
        "capped": figures["read"] < figures["total"],
        "thresholds": _thresholds(),
    }


def sessions_of_caller(organization, user_id: str):
    """The organization's sessions in which a bot reported this `user_id` (found by its key, models.caller_keys)."""
    from rtvi_monitor.sessions.models import caller_keys

    keys = caller_keys(organization.pk, user_id[:200])
    return Session.objects.filter(organization=organization, callers__caller_key__in=keys).distinct()
