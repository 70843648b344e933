"""Where a session ends: when its bot has been gone longer than the grace period.

Every server process beats (a `ServerProcess` row, every SESSION_SWEEP_INTERVAL
seconds) and sweeps:

- a live session held by a process that stopped beating (killed, crashed,
  restarted) has lost its bot: it is marked away since its last message;
- a live session whose bot has been away longer than SESSION_END_GRACE is
  ended, at the time its bot left, with the reason it left.

The grace only decides whether a reconnect continues the same session; the
session's end is when its bot left. Every process sweeps, and every update is
conditional, so several processes (or a bot coming back mid-sweep) are safe.
The sweep runs when a process starts and then on its interval, so a session
whose process died ends within the grace plus one interval of a restart.
"""

import asyncio
import copy
import logging
import os
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from rtvi_monitor import cost, events, relay, writer
from rtvi_monitor.dbthread import LIFECYCLE_THREAD, in_db_thread, start_once
from rtvi_monitor.models import ServerProcess, Session, storable_json, summary_fields
from rtvi_monitor.registry import LiveSession, registry

logger = logging.getLogger(__name__)

SERVER_ID = uuid.uuid4().hex  # this process, for as long as it runs
_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def start() -> None:
    """Start beating and sweeping in this process's event loop (idempotent)."""
    start_once(_tasks, _run)


async def _run() -> None:
    while True:
        try:
            await sweep()
        except Exception:
            logger.exception("Sweeping sessions failed; trying again in %s s", settings.SESSION_SWEEP_INTERVAL)
        await asyncio.sleep(settings.SESSION_SWEEP_INTERVAL)


def _beat(now: datetime) -> None:
    ServerProcess.objects.update_or_create(
        id=SERVER_ID, defaults={"heartbeat_at": now, "host": socket.gethostname()[:200], "pid": os.getpid()}
    )


def _mark_orphans(now: datetime) -> int:
    """Sessions whose process stopped beating lost their bot when their last message came."""
    alive = ServerProcess.objects.filter(heartbeat_at__gte=now - timedelta(seconds=heartbeat_timeout()))
    return (
        Session.objects.live()
        .filter(bot_left_at__isnull=True)
        .exclude(holder__in=alive.values("id"))
        .update(bot_left_at=Coalesce(F("last_event_at"), F("started_at")), holder="", end_reason="server restarted")
    )


def _reconcile(now: datetime, connected: set[int], quiet: bool) -> None:
    """The database agrees with which bots are connected here.

    A session this process holds with no bot here lost it without a
    disconnect we heard (a failed attach, a dropped handler): away from now. A
    bot connected here whose session was marked away (a beat that came late)
    is here: held again.
    """
    if quiet:
        Session.objects.live().filter(holder=SERVER_ID, bot_left_at__isnull=True).exclude(pk__in=connected).update(
            bot_left_at=now, end_reason="bot disconnected"
        )
    if connected:
        Session.objects.live().filter(pk__in=connected).exclude(holder=SERVER_ID, bot_left_at__isnull=True).update(
            holder=SERVER_ID, bot_left_at=None, end_reason=""
        )


def heartbeat_timeout() -> float:
    """Seconds without a beat after which a process counts as gone."""
    return 3 * settings.SESSION_SWEEP_INTERVAL + 5


def _due(now: datetime) -> list[tuple[int, datetime, str]]:
    cutoff = now - timedelta(seconds=settings.SESSION_END_GRACE)
    return list(Session.objects.live().filter(bot_left_at__lt=cutoff).values_list("pk", "bot_left_at", "end_reason"))


async def sweep() -> int:
    """Beat, then end every session whose bot has been away past the grace. Returns how many ended."""

    connected = {pk for pk, here in registry.sessions.items() if here.connections > 0}
    quiet = registry.connecting == 0  # no bot half-way through connecting here

    def step():
        now = timezone.now()
        _beat(now)
        _reconcile(now, connected, quiet)
        orphans = _mark_orphans(now)
        return orphans, _due(now)

    orphans, due = await in_db_thread(step, executor=LIFECYCLE_THREAD)
    if orphans:
        logger.info("%d live sessions lost their server process; they end after the grace period", orphans)
    ended = 0
    for pk, left_at, reason in due:
        here = registry.sessions.get(pk)
        if here is not None and here.connections > 0:
            continue  # its bot is back on this process; attach cleared bot_left_at already
        reason = reason or "bot disconnected"
        try:
            # Its bot is not here: the state is what is stored (the registry holds connected sessions only).
            gone = await _load(pk)
            if gone is not None:
                await end_session(gone, reason, ended_at=left_at.timestamp(), only_if_away=True)
                ended += 1
        except Exception:  # one session that cannot be ended must not keep the others live
            logger.exception("Could not end session %s; trying again at the next sweep", pk)
    return ended


async def _load(pk: int) -> LiveSession | None:
    """A session nobody here holds, with its state replayed from what is stored."""

    def load():
        session = Session.objects.filter(pk=pk).first()
        return (session, events.load_state(pk)[0]) if session else (None, None)

    session, state = await in_db_thread(load)  # a long replay stays off the event loop
    if session is None:
        return None
    return LiveSession(pk, session.organization_id, session.session_id, state, {})


async def bot_left(live_session: LiveSession, epoch: int) -> None:
    """The last bot connection of a session on this process closed: away, until the grace decides.

    Only if no bot connected since (`epoch`, bumped by every connection, here or elsewhere).
    """

    def store():
        updated = (
            Session.objects.live()
            .filter(pk=live_session.pk, holder=SERVER_ID, ingest_epoch=epoch)
            .update(bot_left_at=timezone.now(), end_reason="bot disconnected")
        )
        return Session.objects.select_related("agent").get(pk=live_session.pk) if updated else None

    session = await in_db_thread(store)
    if session is not None:
        await relay.session_changed(session, "away")


async def release() -> None:
    """This process is stopping: its sessions' bots are away from now, and it stops counting as alive."""

    def store():
        now = timezone.now()
        Session.objects.live().filter(holder=SERVER_ID, bot_left_at__isnull=True).update(
            bot_left_at=now, holder="", end_reason="server restarted"
        )
        ServerProcess.objects.filter(id=SERVER_ID).update(heartbeat_at=datetime(2000, 1, 1, tzinfo=UTC))

    try:
        await in_db_thread(store)
    except Exception:
        logger.warning("Could not release this process's sessions; the sweep will", exc_info=True)


async def end_session(
    live: LiveSession, reason: str, ended_at: float | None = None, only_if_away: bool = False
) -> None:
    """Store everything pending, then mark the session ended with its final state.

    `ended_at` (epoch seconds) defaults to the last message's time. With
    `only_if_away`, only if its bot is still away (no process has it back).
    """
    await writer.get_writer().flush()
    at = ended_at if ended_at is not None else (live.state.last_at or time.time())
    # The final state is stored first; the live one ends only if the session really did
    # (a bot may come back mid-sweep, and then nothing changes).
    final = copy.deepcopy(live.state)
    final.end(at, reason)
    fields = summary_fields(final)
    fields["state"] = storable_json(final.to_dict())
    end = datetime.fromtimestamp(at, tz=UTC)

    def store():
        fields["cost_usd"] = cost.session_cost(live.organization_id, final.usage)
        queryset = Session.objects.filter(pk=live.pk, status=Session.Status.LIVE)
        if only_if_away:
            queryset = queryset.filter(bot_left_at__isnull=False)
        ended = queryset.update(status=Session.Status.ENDED, ended_at=end, end_reason=reason, holder="", **fields)
        return Session.objects.select_related("agent").get(pk=live.pk) if ended else None

    session = await in_db_thread(store)
    if session is None:
        return

    def end_live():  # under the writer's lock: after every batch already folded, before the next
        version_from = live.state.version
        live.state.end(at, reason)
        live.ended = True
        return relay.session_group(live.pk), relay.batch_message(live, [], version_from)

    await writer.get_writer().relay_in_order(end_live)
    await relay.session_changed(session, "ended")
