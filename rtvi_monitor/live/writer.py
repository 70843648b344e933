"""Where messages are stored: one writer per server process, and its database thread.

Rows from every bot connection of the process wait in `Writer.pending` (they come in
through live/intake.py); one INSERT stores them, with the due session summaries, in
one transaction (live/storage.py, on dbthread.py's thread): as soon as the previous
write is done (group commit, INGEST_GROUP_COMMIT), or on a fixed cadence
(INGEST_FLUSH_INTERVAL) with it off. Then, in this order: the rows are folded into
their sessions' states (each found by its key, `Row.session_pk`, in the registry),
each session's browsers here get one batch (live/relay.py), the bots get their acks
("ack" means stored), and the batches go to the other processes' browsers (a shared
channel layer). A session whose stored rows carry a fatal error is reported
(`next_fatal`): the lifecycle, which owns ends, ends it. The writer calls nothing above it.

A database that is down or locked keeps the batch, and bots over
INGEST_MAX_PENDING are told to resend later.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from rtvi_monitor.live import storage
from rtvi_monitor.live.dbthread import in_db_thread
from rtvi_monitor.live.registry import registry
from rtvi_monitor.live.relay import (
    batch_message,
    relay,
    relay_elsewhere,
    relay_here,
    session_group,
    sessions_updated,
)
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.sessions import metrics
from rtvi_monitor.sessions.events import Replier, Row
from rtvi_monitor.sessions.models import Session

logger = logging.getLogger(__name__)

SUMMARIES_PER_FLUSH = 10
_NOT_LOOKED_UP = object()


class Writer:
    """Batches rows into one INSERT per flush; then folds them into the state, acks bots and relays."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pending: list[Row] = []
        self.lock = asyncio.Lock()  # one flush stores and folds at a time
        # Relays go out in the order their flushes stored: taken before `lock` is let go.
        self.relaying = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task = loop.create_task(self._run())
        self.failures = 0
        self.due: dict[int, LiveSession] = {}  # sessions whose row awaits a summary update
        # Sessions whose stored rows carry a fatal error, for the lifecycle to end (`next_fatal`); each once
        # until it is taken (a flush that comes before the lifecycle ends it does not report it again).
        self.fatal: asyncio.Queue[int] = asyncio.Queue()
        self.fatal_reported: set[int] = set()
        self.group_commit = settings.INGEST_GROUP_COMMIT  # read per row: once here, not through settings' proxy
        self.flush_rows = settings.INGEST_FLUSH_ROWS
        # A flush's sends to sockets are made inside one of these: the consumers hand over the server's way.
        self.sends_together: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    @property
    def backlog(self) -> int:
        return len(self.pending)

    def add(self, row: Row) -> None:
        self.pending.append(row)
        if self.group_commit or len(self.pending) >= self.flush_rows:
            self.wake.set()

    async def next_fatal(self) -> int:
        """The key of the next session whose stored rows carry a fatal error (for the lifecycle, which ends it)."""
        pk = await self.fatal.get()
        self.fatal_reported.discard(pk)
        return pk

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = started = loop.time()
        while True:
            if settings.INGEST_GROUP_COMMIT:
                # Group commit: rows are stored as soon as the previous write is done, those that came
                # meanwhile together in the next; with none waiting, the due summaries every interval.
                if not self.pending:
                    try:
                        await asyncio.wait_for(self.wake.wait(), settings.INGEST_FLUSH_INTERVAL)
                    except TimeoutError:
                        pass
                # At most one write per INGEST_FLUSH_GAP: what comes within it joins (a write per message
                # at low rates would cost a transaction and a relay each); at least one turn of the loop.
                await asyncio.sleep(max(0.0, started + settings.INGEST_FLUSH_GAP - loop.time()))
                started = loop.time()
            else:
                # On a fixed cadence (not "interval after the last flush ended"), or sooner when
                # INGEST_FLUSH_ROWS are waiting.
                next_at = max(next_at + settings.INGEST_FLUSH_INTERVAL, loop.time())
                try:
                    await asyncio.wait_for(self.wake.wait(), max(0.0, next_at - loop.time()))
                except TimeoutError:
                    pass
            self.wake.clear()
            try:
                await self.flush()
            except Exception:
                self.failures += 1
                logger.exception("Storing %d RTVI messages failed; retrying", len(self.pending))
                await asyncio.sleep(min(5.0, 0.1 * 2 ** min(self.failures, 6)))
            else:
                self.failures = 0

    async def flush(self) -> None:
        """Store what is pending, then acknowledge and relay it.

        A caller cancelled meanwhile (a bot's disconnect past daphne's close
        timeout) does not cancel the flush: rows stored are always folded,
        acknowledged and relayed, whoever asked for them to be.
        """
        task = asyncio.ensure_future(self._timed_flush())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_failure)
            raise

    async def _timed_flush(self) -> None:
        metrics.BACKLOG.set(len(self.pending))
        with metrics.FLUSH.time():
            await self._flush()

    async def relay_in_order(self, make: Callable[[], tuple[str, dict]]) -> None:
        """A relay that changes a session's state outside a batch (its end): made under the store
        lock and sent in order with the flushes' relays."""
        async with self.lock:
            group, message = make()
            await self.relaying.acquire()
        try:
            await relay(group, message)
        finally:
            self.relaying.release()

    async def _flush(self) -> None:
        async with self.lock:
            # Summaries come from the state as folded so far (they are 1 Hz figures)
            # and go in the same transaction as the batch: one round trip a flush.
            updates = self._due_summaries()
            if not self.pending and not updates:
                return
            batch, self.pending = self.pending, []
            summaries = {pk: (live.organization_id, live.summary, live.usage) for pk, live in updates.items()}
            try:
                quarantined, changed = await in_db_thread(storage.store, batch, summaries, timezone.now())
            except Exception:
                self.pending[:0] = batch  # keep order; nothing was acknowledged
                for live in updates.values():
                    self._mark_due(live)
                raise
            if quarantined:
                logger.warning("%d RTVI messages were stored escaped: the database refused them as sent", quarantined)
            sessions, versions = self._fold(batch)
            # Each session's patch is taken now, while the state holds this flush's rows and no
            # more. The next flush (a disconnecting bot's, beside this loop's) may store and fold
            # while this one relays, but relays after it: a relay that waits (on Redis) is never
            # overtaken, so a browser never gets version 301 before 299-300 and drops those.
            relays = self._batches(batch, sessions, versions)
            await self.relaying.acquire()
        try:
            await self._after_store(batch, sessions, relays, changed)
        finally:
            self.relaying.release()
        self._report_fatal(sessions)

    def _fold(self, batch: list[Row]) -> tuple[dict[int, LiveSession], dict[int, int]]:
        """Fold what is stored into each session's state, in the order it came. Returns the sessions (by key, as
        the registry holds them) and the version each was at before. A session no longer held here (its bot
        left meanwhile) is not folded: whoever loads it next reads these rows back from the database."""
        sessions: dict[int, LiveSession] = {}
        versions: dict[int, int] = {}
        turns_before: dict[int, tuple[LiveSession, int]] = {}
        seen: dict = {}
        for row in batch:
            pk = row.session_pk
            live = seen.get(pk, _NOT_LOOKED_UP)
            if live is _NOT_LOOKED_UP:
                live = seen[pk] = registry.find(pk)
                if live is not None:
                    sessions[pk] = live
                    versions[pk] = live.state.version
                    turns_before[pk] = (live, live.state.turns.next_position())
                    self._mark_due(live)
            if live is not None:
                live.fold(row)
        metrics.record_batch([row for row in batch if not row.refused and row.session_pk in sessions], turns_before)
        return sessions, versions

    def _mark_due(self, live: LiveSession) -> None:
        self.due[live.pk] = live

    def _due_summaries(self, now: float | None = None) -> dict[int, LiveSession]:
        """Sessions whose row is due an update, their fields computed now.

        Sessions that started together would otherwise all be summarised in the same flush, every
        interval: a flush takes at most SUMMARIES_PER_FLUSH of those due, to spread them, but every
        session whose row is two intervals old, however many: when flushes come slowly (1,000 bots),
        10 a flush left the sessions list minutes behind.
        """
        now = time.monotonic() if now is None else now
        interval = settings.SESSION_SUMMARY_INTERVAL
        updates: dict[int, LiveSession] = {}
        for pk, live in list(self.due.items()):
            age = now - live.last_summary_at
            if age < interval or (len(updates) >= SUMMARIES_PER_FLUSH and age < 2 * interval):
                continue
            del self.due[pk]
            live.take_summary(now)
            updates[pk] = live
        return updates

    @staticmethod
    def _batches(
        batch: list[Row], sessions: dict[int, LiveSession], versions: dict[int, int]
    ) -> list[tuple[str, dict]]:
        """Each session's relay of a stored batch, (group, message): the reducer's patch since its version before
        the batch, and the stored events."""
        by_session: dict[int, list[Row]] = {pk: [] for pk in sessions}
        for row in batch:
            if not row.refused and row.session_pk in by_session:
                by_session[row.session_pk].append(row)
        relays = []
        for pk, rows in by_session.items():
            live = sessions[pk]
            rows.sort(key=lambda row: row.seq)
            try:
                relays.append(
                    (session_group(pk), batch_message(live, [row.as_event_json() for row in rows], versions[pk]))
                )
            except Exception:  # its browsers see the gap in versions and resync; the acks still go
                logger.exception("The relay of session %s could not be made", live.session_id)
        return relays

    async def _after_store(
        self,
        batch: list[Row],
        sessions: dict[int, LiveSession],
        relays: list[tuple[str, dict]],
        changed: list[Session],
    ) -> None:
        # This process's browsers first: an operator's page is what the live path is for, and a bot's ack
        # only lets it forget what it keeps to resend (a frame per message for older bots: a flush's acks
        # took as long to send as its relays, and every relay waited behind them). Then the acks, then the
        # other processes' browsers (with Redis: a publish each, which the acks need not wait for).
        replies: dict[Replier, list[dict]] = {}
        for row in batch:
            if row.holds and (live := sessions.get(row.session_pk)) is not None:
                live.stored(row)
            for replier in row.repliers:
                if row.reply is not None:
                    replies.setdefault(replier, []).append(row.reply)
        with self.sends_together():  # each connection's frames in one send (a bot's acks: one each, older bots)
            for group, message in relays:
                await relay_here(group, message)
            for replier, payloads in replies.items():
                try:
                    await replier.reply(payloads)
                except Exception:  # the bot went away; it resends what was not acknowledged
                    logger.debug("Could not acknowledge to a closed ingest socket", exc_info=True)
        for group, message in relays:
            await relay_elsewhere(group, message)
        if changed:
            await sessions_updated(changed)  # one relay per organization, not one per session

    def _report_fatal(self, sessions: dict[int, LiveSession]) -> None:
        """Sessions a fatal error ended, among those this flush folded: reported once each until taken."""
        for pk, live in sessions.items():
            if live.state.fatal and not live.ended and pk not in self.fatal_reported:
                self.fatal_reported.add(pk)
                self.fatal.put_nowait(pk)


def _log_failure(task: asyncio.Task) -> None:
    """A flush nobody waits for any more: its failure is logged (the writer's loop retries what it kept)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("A flush failed after its caller went away", exc_info=task.exception())


_writers: dict[asyncio.AbstractEventLoop, Writer] = {}


def get_writer() -> Writer:
    """The writer of the running event loop (one per server process); live/process.py starts what goes with it."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None or writer.task.done():
        for old in [lp for lp in _writers if lp.is_closed()]:
            del _writers[old]
        writer = _writers[loop] = Writer(loop)
    return writer
