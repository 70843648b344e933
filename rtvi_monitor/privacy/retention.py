"""Retention: an organization's data is kept for as long as it says, then purged on the running server.

Per organization (dashboard.models.Organization, the admin), in days after a
call ended, each kind on its own, blank meaning "until deleted":

- `keep_messages_days`: an ended call's contents, wherever they are kept
  (rtvi_monitor/privacy/contents.py: its messages, final state, transcript text,
  the spans of its traces, its recording, cached copies, words in old
  alerts and audit details); its row and figures (duration, turns,
  latency, errors, cost) stay, and `contents_purged_at` says when;
- `keep_sessions_days`: the ended call itself, contents and all;
- `keep_spans_days`: trace spans (by their start);
- `keep_alerts_days`: resolved alerts and their deliveries;
- `keep_audio_days`: an ended call's recording (rtvi_monitor/audio/store.py), files and rows; blank: it goes
  with the call's messages (a recording is contents), and with the call.

Days may be fractions (0.25 is six hours). An agent may have its own
(dashboard.models.AgentRetention) for its calls' messages and its calls: it
replaces the organization's for that agent's calls, longer or shorter.

One process at a time purges (a lease, like the alert engine's), every
RETENTION_INTERVAL seconds, in rounds of at most RETENTION_BATCH rows of
each kind, on a thread of its own, so a purge of millions of rows never holds
the writer's thread or one long transaction: bots' acks and pages go on
between rounds. Each round that removed something is in the organization's
audit log ("purged", with what and how many).
"""

import asyncio
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.org import audit
from dashboard.org.models import Organization
from rtvi_monitor.alerts.models import Alert
from rtvi_monitor.alerts.rules import acquire
from rtvi_monitor.audio import store as audio
from rtvi_monitor.live.dbthread import RETENTION_THREAD, in_db_thread, start_once
from rtvi_monitor.live.registry import SERVER_ID
from rtvi_monitor.privacy import contents
from rtvi_monitor.sessions.models import Event, Session, Span

logger = logging.getLogger(__name__)
LEASE = "retention"


def _organizations():
    keeping = Q(agent_retention__isnull=False)
    for name in Organization.RETENTION_FIELDS:
        keeping |= Q(**{f"{name}__isnull": False})
    return Organization.objects.filter(keeping).distinct().prefetch_related("agent_retention")


def _scopes(organization, field: str):
    """(calls filter, days) pairs for one kind: each agent with its own days, then the rest of the organization."""
    own = [(r.agent_id, getattr(r, field)) for r in organization.agent_retention.all() if getattr(r, field) is not None]
    for agent_id, days in own:
        yield Q(agent_key=agent_id), days
    days = getattr(organization, field)
    if days is not None:
        yield ~Q(agent_key__in=[agent_id for agent_id, _ in own]), days


def _delete_ids(queryset, batch: int) -> int:
    ids = list(queryset.values_list("pk", flat=True)[:batch])
    if not ids:
        return 0
    return queryset.model.objects.filter(pk__in=ids).delete()[1].get(queryset.model._meta.label, 0)


def _delete_messages(pks, batch: int) -> tuple[int, list[int]]:
    """At most `batch` messages of these calls, in their order, each call's oldest first: (deleted, the calls
    now empty).

    Call by call, on the (session, seq) index: each statement deletes a range of one call's messages in a
    transaction of its own, and the check that a call is empty is one seek, so a round costs what it
    deletes however many messages are still to go, and never holds the database's write lock (SQLite's
    only one) for more than `batch` rows. (A round that scanned what was left took seconds per 5,000
    messages on PostgreSQL with 2 million to go; one that deleted 50 whole calls of 50,000 messages
    each held SQLite's lock for seconds: docs/BENCHMARKS.md.)
    """
    deleted, emptied = 0, []
    for pk in pks:
        budget = batch - deleted
        if budget <= 0:
            break
        messages = Event.objects.filter(session_id=pk)
        edge = list(messages.order_by("seq").values_list("seq", flat=True)[budget - 1 : budget])
        with transaction.atomic():
            deleted += (messages.filter(seq__lte=edge[0]) if edge else messages).delete()[0]
        if not edge or not messages.exists():
            emptied.append(pk)
    return deleted, emptied


def _ended_before(organization, calls: Q, cutoff):
    return Session.objects.filter(
        calls, organization=organization, status=Session.Status.ENDED, ended_at__lt=cutoff
    ).order_by("ended_at", "pk")


def _purge_messages(organization, calls: Q, cutoff, batch: int) -> tuple[int, int]:
    """Messages of `calls` ended before `cutoff`, at most `batch`: (deleted, calls whose contents are now gone)."""
    due = _ended_before(organization, calls, cutoff).filter(contents_purged_at__isnull=True)
    deleted, emptied = _delete_messages(due.values_list("pk", flat=True)[:batch], batch)
    if emptied:
        with transaction.atomic():
            contents.erase(Session.objects.filter(pk__in=emptied))
            Session.objects.filter(pk__in=emptied).update(contents_purged_at=timezone.now())
    return deleted, len(emptied)


def _purge_calls(organization, calls: Q, cutoff, batch: int) -> tuple[int, int]:
    """Calls ended before `cutoff`, their messages first (at most `batch`), then the emptied calls: (messages
    deleted, calls deleted)."""
    due = _ended_before(organization, calls, cutoff)
    deleted, emptied = _delete_messages(due.values_list("pk", flat=True)[:batch], batch)
    if emptied:
        with transaction.atomic():
            contents.erase(Session.objects.filter(pk__in=emptied))
            Session.objects.filter(pk__in=emptied).delete()
    return deleted, len(emptied)


def _purge_audio(organization, cutoff, batch: int) -> int:
    """Recordings of calls ended before `cutoff`, at most `batch` chunks: chunks deleted (files after commit)."""
    calls = (
        Session.objects.filter(
            organization=organization, status=Session.Status.ENDED, ended_at__lt=cutoff, audio__isnull=False
        )
        .order_by("ended_at", "pk")
        .values_list("pk", flat=True)
    )
    deleted = 0
    for pk in calls[:batch]:
        with transaction.atomic():
            deleted += audio.delete_audio([pk])
        if deleted >= batch:
            break
    return deleted


def purge_round(now=None, batch: int | None = None) -> dict:
    """One bounded round over every organization that keeps something for a while: what it removed, by org pk."""
    now = now or timezone.now()
    batch = batch or settings.RETENTION_BATCH
    removed: dict = {}
    for organization in _organizations():
        counts = {"messages": 0, "calls_emptied": 0, "calls": 0}
        for calls, days in _scopes(organization, "keep_messages_days"):
            messages, emptied = _purge_messages(organization, calls, now - timedelta(days=days), batch)
            counts["messages"] += messages
            counts["calls_emptied"] += emptied
        for calls, days in _scopes(organization, "keep_sessions_days"):
            messages, gone = _purge_calls(organization, calls, now - timedelta(days=days), batch)
            counts["messages"] += messages
            counts["calls"] += gone
        if organization.keep_audio_days is not None:
            counts["audio_chunks"] = _purge_audio(
                organization, now - timedelta(days=organization.keep_audio_days), batch
            )
        counts = {kind: n for kind, n in counts.items() if n}
        if organization.keep_spans_days is not None:
            cutoff_ns = int((now - timedelta(days=organization.keep_spans_days)).timestamp() * 1e9)
            if spans := _delete_ids(Span.objects.filter(organization=organization, start_ns__lt=cutoff_ns), batch):
                counts["spans"] = spans
        if organization.keep_alerts_days is not None:
            cutoff = now - timedelta(days=organization.keep_alerts_days)
            resolved = Alert.objects.filter(
                organization=organization, status=Alert.Status.RESOLVED, resolved_at__lt=cutoff
            )
            if alerts := _delete_ids(resolved, batch):
                counts["alerts"] = alerts
        if counts:
            audit.record(organization, audit.Action.PURGED, "retention", actor="retention", **counts)
            removed[organization.pk] = counts
    if removed:
        contents.settle()
    return removed


async def step() -> bool:
    """Purge until a round finds nothing (or the lease is lost); True if this process holds the lease."""
    interval = settings.RETENTION_INTERVAL
    holder = SERVER_ID
    lease = timedelta(seconds=max(60.0, 3 * interval))
    while await in_db_thread(acquire, LEASE, holder, lease, executor=RETENTION_THREAD):
        removed = await in_db_thread(purge_round, executor=RETENTION_THREAD)
        if not removed:
            return True
        logger.info("Retention purged %s", removed)
        await asyncio.sleep(settings.RETENTION_PAUSE)  # the writer and the pages between rounds
    return False


async def run() -> None:
    while True:
        try:
            await step()
        except Exception:
            logger.exception("The retention purge failed; trying again in %s s", settings.RETENTION_INTERVAL)
        await asyncio.sleep(settings.RETENTION_INTERVAL)


_tasks: dict = {}


def start() -> None:
    """Start purging in this process's event loop (idempotent); only the lease holder purges."""
    start_once(_tasks, run)
