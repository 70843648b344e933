"""Queries over stored sessions, shared by the JSON API and the pages."""

import uuid
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from rtvi_monitor import events
from rtvi_monitor.models import Session
from rtvi_monitor.state import percentile


class BadFilter(ValueError):
    """A filter value that cannot be understood; the message names the parameter."""


def _datetime(params, name: str) -> datetime | None:
    raw = params.get(name, "").strip()
    if not raw:
        return None
    value = parse_datetime(raw.replace(" ", "+"))
    if value is None:
        raise BadFilter(f"{name}: expected an ISO 8601 date-time like 2025-06-01T12:00:00Z, got {raw!r}")
    # A browser's datetime-local has no zone: read it in the dashboard's TIME_ZONE.
    return value if timezone.is_aware(value) else timezone.make_aware(value)


def _boolean(params, name: str) -> bool | None:
    raw = params.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("true", "1", "on"):
        return True
    if raw in ("false", "0"):
        return False
    raise BadFilter(f"{name}: expected true or false, got {raw!r}")


def filter_sessions(organization, params) -> QuerySet:
    """The organization's sessions, filtered by agent, status, time range and transcript text.

    `params` is a QueryDict (or dict): agent, status (live/ended), has_errors
    (any error or a fatal one), fatal, started_after, started_before, q.
    Raises BadFilter naming a bad parameter.
    """
    queryset = Session.objects.filter(organization=organization).select_related("agent")
    agent = params.get("agent", "").strip()
    if agent:
        try:
            queryset = queryset.filter(agent_id=uuid.UUID(agent))
        except ValueError:
            raise BadFilter(f"agent: expected an agent id (UUID), got {agent!r}") from None
    status = params.get("status", "").strip()
    if status:
        if status not in Session.Status.values:
            raise BadFilter(f"status: expected one of {', '.join(Session.Status.values)}, got {status!r}")
        queryset = queryset.filter(status=status)
    has_errors = _boolean(params, "has_errors")
    if has_errors is not None:
        with_errors = Q(error_count__gt=0) | Q(fatal=True)
        queryset = queryset.filter(with_errors) if has_errors else queryset.exclude(with_errors)
    fatal = _boolean(params, "fatal")
    if fatal is not None:
        queryset = queryset.filter(fatal=fatal)
    if after := _datetime(params, "started_after"):
        queryset = queryset.filter(started_at__gte=after)
    if before := _datetime(params, "started_before"):
        queryset = queryset.filter(started_at__lt=before)
    if q := params.get("q", "").strip():
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
    }


def agent_stats(organization, since) -> dict[str, dict]:
    """Per agent id: live sessions now, and turn latency over sessions started since `since`.

    Latency is summarised from the sessions' own figures: p50 is the median of
    their p50s, p95 the 95th percentile of their p95s (turns are not stored one
    by one, so this is the cheap, honest summary).
    """
    stats: dict[str, dict] = {}
    rows = Session.objects.filter(organization=organization, agent__isnull=False).filter(
        Q(status=Session.Status.LIVE) | Q(started_at__gte=since)
    )
    for agent_id, status, started_at, p50, p95 in rows.values_list(
        "agent_id", "status", "started_at", "latency_p50_ms", "latency_p95_ms"
    ):
        entry = stats.setdefault(str(agent_id), {"live": 0, "sessions": 0, "p50s": [], "p95s": []})
        entry["live"] += status == Session.Status.LIVE
        if started_at >= since:
            entry["sessions"] += 1
            if p50 is not None:
                entry["p50s"].append(p50)
                entry["p95s"].append(p95 if p95 is not None else p50)
    for entry in stats.values():
        entry["p50"] = percentile(sorted(entry.pop("p50s")), 50)
        entry["p95"] = percentile(sorted(entry.pop("p95s")), 95)
    return stats


def overview(organization, now) -> dict:
    """What the home page answers "is everything fine?" with."""
    recent_errors = (
        Session.objects.filter(organization=organization, started_at__gte=now - timedelta(hours=1))
        .filter(Q(error_count__gt=0) | Q(fatal=True))
        .select_related("agent")
        .order_by("-started_at")[:20]
    )
    live = Session.objects.filter(organization=organization, status=Session.Status.LIVE)
    return {
        # A bot that left is not a call; it is counted apart until its grace runs out.
        "live_count": live.filter(bot_left_at__isnull=True).count(),
        "away_count": live.filter(bot_left_at__isnull=False).count(),
        "sessions_last_hour": Session.objects.filter(
            organization=organization, started_at__gte=now - timedelta(hours=1)
        ).count(),
        "error_sessions": list(recent_errors),
        "agent_stats": agent_stats(organization, now - timedelta(days=1)),
    }


def latency_by_agent(stats: dict[str, dict], name_of) -> list[dict]:
    """agent_stats() as rows for a page: each named by `name_of(agent_id)`, sorted by name."""
    rows = [{"agent_id": agent_id, "name": name_of(agent_id), **entry} for agent_id, entry in stats.items()]
    return sorted(rows, key=lambda row: row["name"])
