"""Queries over stored sessions, shared by the JSON API and the pages."""

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import IntegerField, Q, QuerySet
from django.db.models.functions import Cast, Floor
from django.http import Http404

from dashboard.web.http import BadParam, Query
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


def thresholds() -> dict:
    """What a turn's interruptions are judged by (settings): the diagnosis's arguments, shown beside its figures."""
    return {
        "backchannel_seconds": settings.TURN_BACKCHANNEL_SECONDS,
        "backchannel_words": settings.TURN_BACKCHANNEL_WORDS,
    }


def judged() -> str:
    """The thresholds as a key: a call's summary judged by others is computed again (its cache key, its kept
    figures: rtvi_monitor/sessions/figures.py)."""
    return f"{settings.TURN_BACKCHANNEL_SECONDS:g}:{settings.TURN_BACKCHANNEL_WORDS}"


def session_turns(session: Session, contents: bool = True) -> dict:
    """GET /api/sessions/<id>/turns/: each turn of the session taken apart (turns.diagnose), with the
    thresholds it was judged by; without what anybody said unless `contents`."""
    live = session.status == Session.Status.LIVE
    traces = session_traces(session.organization_id, session.session_id)
    diagnosis = turns.diagnose(turn_events(session.pk), traces, live=live, **thresholds())
    if not contents:
        diagnosis = turns.without_words(diagnosis)
    return {
        "session_id": session.session_id,
        "live": live,
        "contents": contents,
        "thresholds": thresholds(),
        "stage_names": [{"stage": stage, "label": label} for stage, _, _, label in turns.STAGES],
        **diagnosis,
    }


def summarise(session_pk: int, session_id: str, organization_id, ended: bool, traced: bool) -> dict:
    """A session's turns in a few figures (diagnosis.summary: counts, each stage's values, the bots' breakdowns),
    from its stored messages and, when `traced`, its spans."""
    traces = session_traces(organization_id, session_id) if traced else None
    diagnosis = turns.diagnose(turn_events(session_pk), traces, live=not ended, **thresholds())
    return {k: v for k, v in diagnosis.items() if k != "turns"}


def _session_summary(session_pk: int, session_id: str, organization_id, ended: bool, key: str, traced: bool) -> dict:
    cached = cache.get(key) if ended else None
    if cached is not None:
        return cached
    result = summarise(session_pk, session_id, organization_id, ended, traced)
    if ended:
        cache.set(key, result, SUMMARY_TTL)
    return result


def traced_sessions(organization_id, session_ids: list[str]) -> set[str]:
    """Which of these sessions have spans of their own (one query; stage_values reads their traces)."""
    from rtvi_monitor.sessions.models import Span

    found = Span.objects.filter(organization_id=organization_id, conversation_id__in=session_ids)
    return set(found.values_list("conversation_id", flat=True).distinct())


def stage_values(session_pk: int, session_id: str, organization_id, event_count: int, traced: bool) -> dict:
    """An ended session's waits (ms) per stage of its turns and its turn latency (diagnosis.summary's values),
    from its cached summary; `traced`: it has spans (traced_sessions)."""
    key = summary_cache_key(session_pk, event_count)
    return _session_summary(session_pk, session_id, organization_id, True, key, traced)["values"]


def summary_cache_key(session_pk: int, event_count: int) -> str:
    """Where an ended session's turn summary is cached: by its message count (a reopened one is read again) and
    the thresholds it was judged by (rtvi_monitor/privacy/contents.py erases it)."""
    return f"turns:summary:v4:{session_pk}:{event_count}:{judged()}"


def sessions_of_caller(organization, user_id: str):
    """The organization's sessions in which a bot reported this `user_id` (found by its key, models.caller_keys)."""
    from rtvi_monitor.sessions.models import caller_keys

    keys = caller_keys(organization.pk, user_id[:200])
    return Session.objects.filter(organization=organization, callers__caller_key__in=keys).distinct()
