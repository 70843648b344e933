"""Where a session ends: when its bot has been gone longer than the grace period.

Every server process beats (a `ServerProcess` row, every SESSION_SWEEP_INTERVAL
seconds) and sweeps:

- a live session held by a process that stopped beating (killed, crashed,
  restarted) has lost its bot: it is marked away since its last message;
- a live session whose bot has been away longer than SESSION_END_GRACE is
  ended, at the time its bot left, with the reason it left.

A fatal error ends a session at once: the writer reports each session whose
stored rows carry one (`Writer.next_fatal`), and `end_fatal_ones` ends it.

Every session that ends here is told to the other features once, with
`session_ended` (live/signals.py: its row, final state in), which they subscribe
to in the wiring (rtvi_monitor/apps.py): the lifecycle calls none of them.

The grace only decides whether a reconnect continues the same session; the
session's end is when its bot left. A bot that closes its socket with 1000
(normal closure: its pipeline ended) is not coming back: its session ends at
once. How a session ended (`EndKind`, `end_of`) is told from its messages and
how its bot left: a fatal error; an operator's end from the dashboard; the
client's disconnect-bot (hung up); a server process that stopped; a 1000 close (finished); or anything else, a
dropped connection or another code, and no bot back within the grace (vanished).

Every process sweeps, and every update is conditional, so several processes
(or a bot coming back mid-sweep) are safe. The sweep runs when a process
starts and then on its interval, so a session whose process died ends within
the grace plus one interval of a restart.
"""

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from rtvi_dashboard.wire import CLOSE_NORMAL

from rtvi_monitor.live import relay, signals, writer
from rtvi_monitor.live.dbthread import CONNECT_THREAD, LIFECYCLE_THREAD, in_db_thread, start_once
from rtvi_monitor.live.models import ServerProcess
from rtvi_monitor.live.registry import SERVER_ID, registry
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.sessions import cost, events
from rtvi_monitor.sessions.models import EndKind, Event, Session, operator_end_reason, storable_json, summary_fields

logger = logging.getLogger(__name__)

FINISHED = CLOSE_NORMAL  # the close code of a bot whose pipeline ended: its session ends at once
# Why a bot is away (Session.end_reason while it is), as the sweep reads it.
LEFT = "bot disconnected"
LEFT_WITH_SERVER = "server restarted"


def end_of(state, left: str) -> tuple[str, str]:
    """How a session ended, and the words for it: (EndKind value, reason).

    `left` is how its bot left: LEFT, LEFT_WITH_SERVER, or "bot finished" (a
    1000 close). What the messages say comes first: a fatal error, then an
    operator's end the bot took (the dashboard's record of it,
    core/reducer/operators.py: the words name the operator), then the client's
    disconnect-bot (whatever the bot's socket did after the caller hung up, or
    an operator ended the call, it ended as they meant).
    """
    if state.fatal:
        kind = EndKind.FATAL_ERROR
    elif state.ended_by:
        # An operator's end the bot took, before any hang-up: however the bot then left, it was theirs.
        return EndKind.OPERATOR_ENDED.value, operator_end_reason(state.ended_by)
    elif state.hung_up_at is not None:
        kind = EndKind.CLIENT_HUNG_UP
    elif left == LEFT_WITH_SERVER:
        kind = EndKind.SERVER_RESTARTED
    elif left == EndKind.BOT_FINISHED.label:
        kind = EndKind.BOT_FINISHED
    else:
        kind = EndKind.BOT_VANISHED
    return kind.value, kind.label


_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def start() -> None:
    """Start beating and sweeping in this process's event loop (idempotent)."""
    start_once(_tasks, _run)


_following: dict[asyncio.AbstractEventLoop, tuple[writer.Writer, asyncio.Task]] = {}


def follow(w: writer.Writer) -> None:
    """End the sessions `w` (the running loop's writer) reports a fatal error of (idempotent: one task per writer)."""
    loop = asyncio.get_running_loop()
    followed, task = _following.get(loop, (None, None))
    if followed is w and task is not None and not task.done():
        return
    if task is not None:
        task.cancel()  # it waited on a writer that is gone
    for old in [lp for lp in _following if lp.is_closed()]:
        del _following[old]
    _following[loop] = (w, loop.create_task(end_fatal_ones(w), name="rtvi-fatal-ends"))


_wakes: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}
GATHER = 0.05  # seconds a wake waits for more bots that finish together (500 closing at once: a few sweeps)


def _wake() -> asyncio.Event:
    return _wakes.setdefault(asyncio.get_running_loop(), asyncio.Event())


def sweep_soon() -> None:
    """A bot finished (closed with 1000): sweep now rather than at the next interval, to end its session
    (the sweep runs since the bot's connection started the live path: live/process.py)."""
    _wake().set()


async def _run() -> None:
    wake = _wake()
    while True:
        try:
            await sweep()
        except Exception:
            logger.exception("Sweeping sessions failed; trying again in %s s", settings.SESSION_SWEEP_INTERVAL)
        try:
            await asyncio.wait_for(wake.wait(), _until_next_sweep(time.time()))
            await asyncio.sleep(GATHER)
        except TimeoutError:
            pass
        wake.clear()


_next_due: float | None = None  # epoch seconds when the next away session's grace runs out, as last swept


def _until_next_sweep(now: float) -> float:
    """SESSION_SWEEP_INTERVAL, or less when an away session's grace runs out sooner.

    So a session ends when its grace runs out, not up to a sweep later (500
    bots that left together, in one region's outage, end together at the grace).
    """
    delay = settings.SESSION_SWEEP_INTERVAL
    if _next_due is not None:
        delay = min(delay, max(0.05, _next_due - now + 0.01))
    return delay


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
        .update(bot_left_at=Coalesce(F("last_event_at"), F("started_at")), holder="", end_reason=LEFT_WITH_SERVER)
    )


_Lost = tuple[int, int]  # a session's pk and epoch
_Held = tuple[int, int, str, datetime | None]  # and its holder, and since when its bot is away


@dataclass
class _Doubts:
    """Where the database may disagree with which bots are connected here, as a sweep read it: live sessions held
    here with no bot here when the sweep looked (`lost`: pk, epoch), and sessions with a bot here that the database
    says are away or held elsewhere (`held`: pk, epoch, holder, bot_left_at)."""

    lost: list[_Lost]
    held: list[_Held]


def _doubts(connected: set[int]) -> _Doubts:
    """The rows `_settle` may correct, read on the lifecycle's thread; `connected` as the sweep saw it, before."""
    live = Session.objects.live()
    lost = live.filter(holder=SERVER_ID, bot_left_at__isnull=True).exclude(pk__in=connected)
    # A bot that finished (1000) is not brought back: nothing but its own close writes "bot finished".
    held = (
        live.filter(pk__in=connected)
        .exclude(holder=SERVER_ID, bot_left_at__isnull=True)
        .exclude(holder=SERVER_ID, end_reason=EndKind.BOT_FINISHED.label)
    )
    return _Doubts(
        list(lost.values_list("pk", "ingest_epoch")),
        list(held.values_list("pk", "ingest_epoch", "holder", "bot_left_at")),
    )


def _settle(lost: list[_Lost], held: list[_Held]) -> list[tuple[Session, str]]:
    """Correct the rows the event loop found wrong just now, each only if nothing changed it since it was read
    (its epoch, bumped by every bot connection; its holder and since when its bot is away). Returns each session
    corrected and what its lists are to hear ("away", "back").

    `lost`: a session this process holds with no bot here lost it without a disconnect we heard (a failed attach,
    a dropped handler): away from now. `held`: a bot connected here whose session was marked away (a beat that
    came late) is here: held again.

    Read, decided and written in three steps, because a bot connects and leaves meanwhile on other threads: a
    session whose bot left after the sweep looked was brought back by a sweep that decided from its first look,
    with no news to its lists, so that its bot, back within the grace, was not "back" and its lists said "bot
    away" while it was connected; one whose bot connected after the sweep looked was marked away the same way.
    """
    now = timezone.now()
    told = []
    for pk, epoch in lost:
        if (
            Session.objects.live()
            .filter(pk=pk, ingest_epoch=epoch, holder=SERVER_ID, bot_left_at__isnull=True)
            .update(bot_left_at=now, end_reason=LEFT)
        ):
            told.append((pk, "away"))
    for pk, epoch, holder, left_at in held:
        if (
            Session.objects.live()
            .filter(pk=pk, ingest_epoch=epoch, holder=holder, bot_left_at=left_at)
            .update(holder=SERVER_ID, bot_left_at=None, end_reason="")
        ):
            told.append((pk, "back"))
    rows = Session.objects.select_related("agent").in_bulk([pk for pk, _ in told])
    return [(rows[pk], event) for pk, event in told if pk in rows]


async def _reconcile(doubts: _Doubts) -> None:
    """The database agrees with which bots are connected here now; the lists hear of what changed."""
    global _next_due
    connected = connected_now()
    # No bot half-way through connecting here: one is, and its session's row may say either.
    lost = [(pk, epoch) for pk, epoch in doubts.lost if pk not in connected] if registry.connecting == 0 else []
    held = [row for row in doubts.held if row[0] in connected]
    if not lost and not held:
        return
    for session, event in await in_db_thread(_settle, lost, held, executor=LIFECYCLE_THREAD):
        if event == "away":  # its grace runs from now: the next sweep ends it then, if its bot is still away
            due = session.bot_left_at.timestamp() + settings.SESSION_END_GRACE
            _next_due = due if _next_due is None else min(_next_due, due)
        await relay.session_changed(session, event)


def heartbeat_timeout() -> float:
    """Seconds without a beat after which a process counts as gone."""
    return 3 * settings.SESSION_SWEEP_INTERVAL + 5


def _due(now: datetime) -> list[tuple[int, datetime, str]]:
    """Sessions to end: away past the grace, or whose bot finished (closed with 1000: no grace)."""
    cutoff = now - timedelta(seconds=settings.SESSION_END_GRACE)
    finished = Q(bot_left_at__isnull=False, end_reason=EndKind.BOT_FINISHED.label)
    return list(
        Session.objects.live()
        .filter(Q(bot_left_at__lt=cutoff) | finished)
        .values_list("pk", "bot_left_at", "end_reason")
    )


def _next_due_at(now: datetime) -> float | None:
    """When the grace of the next away session (not due yet) runs out, in epoch seconds; None if none is away."""
    cutoff = now - timedelta(seconds=settings.SESSION_END_GRACE)
    first = Session.objects.live().filter(bot_left_at__gte=cutoff).aggregate(first=Min("bot_left_at"))["first"]
    return first.timestamp() + settings.SESSION_END_GRACE if first else None


async def sweep() -> int:
    """Beat, then end every session whose bot has been away past the grace. Returns how many ended."""

    connected = connected_now()

    def step():
        now = timezone.now()
        _beat(now)
        doubts = _doubts(connected)
        orphans = _mark_orphans(now)
        return doubts, orphans, _due(now), _next_due_at(now)

    global _next_due
    doubts, orphans, due, _next_due = await in_db_thread(step, executor=LIFECYCLE_THREAD)
    if orphans:
        logger.info("%d live sessions lost their server process; they end after the grace period", orphans)
    await _reconcile(doubts)
    # A bot back on this process was seen by attach (which cleared bot_left_at already).
    due = [(pk, left_at, reason) for pk, left_at, reason in due if pk not in connected_now()]
    ended = 0
    for start in range(0, len(due), END_BATCH):
        ended += await _end_away(due[start : start + END_BATCH])
    return ended


END_BATCH = 200  # sessions a sweep ends with one read of their events and one transaction


def connected_now() -> set[int]:
    return {pk for pk, here in registry.sessions.items() if here.connections > 0}


async def _end_away(due: list[tuple[int, datetime, str]]) -> int:
    """End sessions whose bot has been away past the grace, at the time each left: in bulk.

    Their states are replayed from one read of their events, and stored in
    one transaction, on the lifecycle's thread: 500 bots that left together
    (a region outage) end within the grace and one sweep, and the writer's
    thread, where connected bots' acks wait, is not held up.
    """
    began = time.monotonic()
    finishing = registry.finishing  # sessions whose bot finished here, with their complete states
    kept = {pk: finishing.pop(pk, None) for pk, _, _ in due}
    kept = {
        pk: live
        for (pk, _, reason) in due
        if (live := kept[pk]) is not None and reason == EndKind.BOT_FINISHED.label and not live.ended
    }
    try:
        missing = [pk for pk, _, _ in due if pk not in kept]
        gone = await in_db_thread(_load_many, missing, executor=LIFECYCLE_THREAD) if missing else {}
    except Exception:  # the next sweep tries again
        finishing.update(kept)
        logger.exception("Could not load %d sessions to end; trying again at the next sweep", len(due))
        return 0
    gone.update(kept)
    ends = []
    for pk, left_at, reason in due:
        live = gone.get(pk)
        if live is None:
            continue
        try:
            # Loaded for this end alone, or a finished bot's, detached: nobody else holds its state, so no
            # copy (the sweep's main cost).
            ends.append(_final(live, reason or LEFT, left_at.timestamp(), shared=False))
        except Exception:  # one session that cannot be ended must not keep the others live
            logger.exception("Could not end session %s; trying again at the next sweep", pk)
    stored = await in_db_thread(_store_ends, ends, True, executor=LIFECYCLE_THREAD)
    for end, session in zip(ends, stored, strict=True):
        if session is not None and end.live.pk not in connected_now():
            await _relay_end(end, session)
    ended = sum(1 for session in stored if session is not None)
    logger.info("Ended %d sessions whose bots had left, in %.2f s", ended, time.monotonic() - began)
    return ended


def _load_many(pks: list[int]) -> dict[int, LiveSession]:
    """Sessions nobody here holds, with their states replayed from one read of their stored events."""
    sessions = {s.pk: s for s in Session.objects.filter(pk__in=pks)}
    stored: dict[int, list[dict]] = {pk: [] for pk in sessions}
    for event in Event.objects.filter(session_id__in=list(sessions)).order_by("session_id", "pk"):
        stored[event.session_id].append(events.event_from_db(event))
    loaded = {}
    for pk, session in sessions.items():
        state = events.replay(stored[pk])
        state.take_changes()  # browsers have this state already; the end's patch starts here
        loaded[pk] = LiveSession(pk, session.organization_id, session.session_id, state)
    return loaded


async def bot_left(
    live_session: LiveSession, epoch: int, close_code: int | None = None, left_at: datetime | None = None
) -> None:
    """The last bot connection of a session on this process closed: away, until the grace decides.

    `close_code` is how the socket closed (the bot's close frame's code; 1006 when the
    connection dropped without one); `left_at` when it closed (default: now). The
    grace counts from then, not from when a busy server got round to storing it.
    A bot that closed with 1000 (FINISHED) is not coming back: its session ends now (the sweep,
    woken for it, within GATHER seconds), at `left_at`.

    Only if no bot connected since (`epoch`, bumped by every connection, here or elsewhere).
    On the connecting bots' thread: 500 leaving at once do not hold up the writer's.
    """
    left_at = left_at or timezone.now()
    finished = close_code == FINISHED
    left = EndKind.BOT_FINISHED.label if finished else LEFT

    def store():
        updated = (
            Session.objects.live()
            .filter(pk=live_session.pk, holder=SERVER_ID, ingest_epoch=epoch)
            .update(bot_left_at=left_at, end_reason=left)
        )
        if not updated or finished:  # a finished one's lists hear of its end, not of its leaving
            return updated
        return Session.objects.select_related("agent").get(pk=live_session.pk)

    session = await in_db_thread(store, executor=CONNECT_THREAD)
    if not session:
        return
    if finished:
        # Its state is complete (the consumer flushed before detaching it) and nobody else holds it: the
        # sweep ends the session from it rather than replaying every stored event (500 finishing at once
        # read all their events back: a burst of hundreds of MB).
        registry.finishing[live_session.pk] = live_session
        # Ended by the sweep, woken for it: bots that finish together (a deploy, a region's calls at
        # the hour) end in bulk on the lifecycle's thread, not one by one on the writer's.
        sweep_soon()
    else:
        await relay.session_changed(session, "away")


async def release() -> None:
    """This process is stopping: its sessions' bots are away from now, and it stops counting as alive."""

    def store():
        now = timezone.now()
        Session.objects.live().filter(holder=SERVER_ID, bot_left_at__isnull=True).update(
            bot_left_at=now, holder="", end_reason=LEFT_WITH_SERVER
        )
        ServerProcess.objects.filter(id=SERVER_ID).update(heartbeat_at=datetime(2000, 1, 1, tzinfo=UTC))

    try:
        await in_db_thread(store)
    except Exception:
        logger.warning("Could not release this process's sessions; the sweep will", exc_info=True)


@dataclass
class _End:
    """A session's end, made ready: its final state and the Session fields that say so."""

    live: LiveSession
    at: float
    reason: str
    kind: str
    fields: dict
    ended_from: int | None = None  # the version it was ended from, when it is ended already (not shared)


def _final(live: LiveSession, left: str, at: float, shared: bool = True) -> _End:
    """The session's final state; `left` is how its bot left (`end_of`).

    A `shared` state (a bot's live session) is copied: the live one ends only
    if the session really does, under the writer's lock (`_relay_end`). One
    loaded for its end alone is ended in place (copying it was most of a
    sweep's time).
    """
    final, ended_from = live.final_state(shared)
    kind, reason = end_of(final, left)
    final.end(at, reason, kind)
    fields = summary_fields(final)
    fields["end_kind"] = kind
    fields["state"] = storable_json(final.to_dict())
    fields["usage"] = final.usage
    return _End(live, at, reason, kind, fields, ended_from)


def _store_ends(ends: list[_End], only_if_away: bool) -> list[Session | None]:
    """Mark the sessions ended with their final states, in one transaction; None for one that was not.

    With `only_if_away`, only those whose bot is still away (no process has it back).
    """
    ended: list[Session | None] = []
    with transaction.atomic():
        for end in ends:
            fields = dict(end.fields)
            fields["cost_usd"] = cost.session_cost(end.live.organization_id, fields.pop("usage"))
            queryset = Session.objects.filter(pk=end.live.pk, status=Session.Status.LIVE)
            if only_if_away:
                queryset = queryset.filter(bot_left_at__isnull=False)
            done = queryset.update(
                status=Session.Status.ENDED,
                ended_at=datetime.fromtimestamp(end.at, tz=UTC),
                end_reason=end.reason,
                holder="",
                **fields,
            )
            ended.append(done)
    rows = Session.objects.select_related("agent").in_bulk(
        [e.live.pk for e, done in zip(ends, ended, strict=True) if done]
    )
    for session in rows.values():
        signals.tell_ended(session)  # once per ended session, its final state stored (audio settles its recording)
    return [rows.get(end.live.pk) if done else None for end, done in zip(ends, ended, strict=True)]


async def _relay_end(end: _End, session: Session) -> None:
    """Browsers of the session get its end in order with the writer's relays; the lists get the row."""
    live = end.live

    def end_live():  # under the writer's lock: after every batch already folded, before the next
        version_from = live.end(end.at, end.reason, end.kind, end.ended_from)
        return relay.session_group(live.pk), relay.batch_message(live, [], version_from)

    await writer.get_writer().relay_in_order(end_live)
    await relay.session_changed(session, "ended")


async def end_session(live: LiveSession, left: str, ended_at: float | None = None, only_if_away: bool = False) -> None:
    """Store everything pending, then mark the session ended with its final state.

    `left` is how its bot left, if it did (`end_of`; a fatal error is read from
    the state). `ended_at` (epoch seconds) defaults to the last message's time.
    With `only_if_away`, only if its bot is still away (no process has it back).
    """
    await writer.get_writer().flush()
    at = ended_at if ended_at is not None else (live.state.last_at or time.time())
    end = _final(live, left, at)
    (session,) = await in_db_thread(_store_ends, [end], only_if_away)
    if session is not None:
        await _relay_end(end, session)


async def end_fatal_ones(w: writer.Writer) -> None:
    """The sessions `w` reports a fatal error of, once it is stored: each ended now (when it is still held here
    and not ended; one no longer held is ended by the sweep, its fatal error read back from storage)."""
    while True:
        pk = await w.next_fatal()
        live = registry.find(pk)
        if live is None or live.ended or not live.state.fatal:
            continue
        try:
            await end_session(live, "fatal error")
        except Exception:  # not a storage failure of the batch: the writer reports it again with its next rows
            logger.exception("Could not end session %s after its fatal error", live.session_id)
