"""Where messages are stored: one writer per server process, and its database thread.

Rows from every bot connection of the process wait in `Writer.pending`; one
INSERT stores them, with the due session summaries, in one transaction: as soon
as the previous write is done (group commit, INGEST_GROUP_COMMIT), or on a fixed
cadence (INGEST_FLUSH_INTERVAL) with it off. Then, in this order: the rows are folded
into their sessions' states, each session's browsers here get one batch
(live/relay.py), the bots get their acks ("ack" means stored), and the batches
go to the other processes' browsers (a shared channel layer). A session a fatal
error ended is handed to `end_fatal` (the lifecycle's, set by live/process.py).

A row the database refuses for its data is stored alone, escaped, as an
invalid record; a database that is down or locked keeps the batch, and bots
over INGEST_MAX_PENDING are told to resend later.
"""

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from rtvi_monitor import cost, metrics
from rtvi_monitor.dbthread import in_db_thread
from rtvi_monitor.events import Replier, Row
from rtvi_monitor.live.relay import (
    batch_message,
    relay,
    relay_elsewhere,
    relay_here,
    session_group,
    sessions_updated,
)
from rtvi_monitor.models import Event, Session, SessionCaller

if TYPE_CHECKING:
    from rtvi_monitor.live.session import LiveSession

logger = logging.getLogger(__name__)

SUMMARIES_PER_FLUSH = 10


UNAVAILABLE = (OperationalError, InterfaceError)  # the database itself, not the data: hold and retry


def _update_sql(fields: list[str], where: str) -> str:
    """UPDATE of Session columns, as raw SQL (the ORM cost more than the statement on every flush)."""
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(Session._meta.get_field(f).column)} = %s" for f in fields)
    where = where.format(pk=quote(Session._meta.pk.column))
    return f"UPDATE {quote(Session._meta.db_table)} SET {sets} WHERE {where}"


def _db_values(names: list[str], values: dict) -> list:
    """Column values as the ORM would send them (dates, JSON), each through its model field."""
    return [Session._meta.get_field(name).get_db_prep_save(values[name], connection) for name in names]


COLUMNS = (
    "session_id",
    "seq",
    "stream",
    "bot_seq",
    "direction",
    "type",
    "received_at",
    "sent_at",
    "message",
    "valid",
    "error",
    "redacted",
)


def _insert_sql(rows: int) -> str:
    """One INSERT of `rows` events (multi-row VALUES); a (session, seq) already taken is skipped, and counted."""
    values = ", ".join(["(" + ", ".join(["%s"] * len(COLUMNS)) + ")"] * rows)
    return (
        f"INSERT INTO {Event._meta.db_table} ({', '.join(COLUMNS)}) "
        f"VALUES {values} ON CONFLICT (session_id, seq) DO NOTHING"
    )


def _rows_per_insert() -> int:
    """How many events one INSERT may carry: the database's limit on parameters, at most 1,000 rows."""
    limit = connection.features.max_query_params or 9_000
    if connection.vendor == "sqlite" and hasattr(connection.connection, "getlimit"):
        limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)  # Django assumes 999
    return max(1, min(1_000, limit // len(COLUMNS)))


RENUMBER_TRIES = 100  # each lost try is a commit of another process's in between


class SeqTaken(Exception):
    """Another process stored under a seq this one gave (two processes held one session at once)."""


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
        # How a session a fatal error ended is ended (the lifecycle's end_fatal, set by live/process.py).
        self.end_fatal: Callable[[LiveSession], Awaitable[None]] | None = None
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
            last_event_at = timezone.now()
            try:
                quarantined, changed = await in_db_thread(self._store, batch, updates, last_event_at)
            except Exception:
                self.pending[:0] = batch  # keep order; nothing was acknowledged
                for live in updates.values():
                    self._mark_due(live)
                raise
            if quarantined:
                logger.warning("%d RTVI messages were stored escaped: the database refused them as sent", quarantined)
            # Fold what is stored into each session's state, in the order it came.
            sessions: dict[int, tuple[LiveSession, int]] = {}
            turns_before: dict[int, tuple[LiveSession, int]] = {}
            for row in batch:
                live = row.live
                if live.pk not in sessions:
                    sessions[live.pk] = (live, live.state.version)
                    turns_before[live.pk] = (live, live.state.turns.next_position())
                    self._mark_due(live)
                live.fold(row)
            metrics.record_batch([row for row in batch if not row.refused], turns_before)
            # Each session's patch is taken now, while the state holds this flush's rows and no
            # more. The next flush (a disconnecting bot's, beside this loop's) may store and fold
            # while this one relays, but relays after it: a relay that waits (on Redis) is never
            # overtaken, so a browser never gets version 301 before 299-300 and drops those.
            relays = self._batches(batch, sessions)
            await self.relaying.acquire()
        try:
            await self._after_store(batch, relays, changed)
        finally:
            self.relaying.release()
        await self._end_fatal(sessions)

    def _mark_due(self, live: "LiveSession") -> None:
        self.due[live.pk] = live

    def _due_summaries(self, now: float | None = None) -> dict[int, "LiveSession"]:
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

    @classmethod
    def _store(cls, batch: list[Row], updates: dict[int, "LiveSession"], last_event_at) -> tuple[int, list[Session]]:
        """Insert the batch and the due summaries. Rows the database refuses for their data are stored escaped, alone.

        Returns how many rows had to be escaped, and the sessions whose rows
        were updated. A database that is down or locked raises, and the batch
        is kept for the next flush.
        """
        fields = {
            pk: {**live.summary, "cost_usd": cost.session_cost(live.organization_id, live.usage)}
            for pk, live in updates.items()
        }
        try:
            with transaction.atomic():
                if batch:
                    cls._insert(batch, last_event_at)
                    cls._callers(batch)
                cls._summaries(fields)  # in a savepoint: a refused one never rejects the batch
            escaped = 0
        except UNAVAILABLE:
            raise
        except Exception as exc:
            if isinstance(exc, SeqTaken):  # a bot of the session on another process too: renumbered, not refused
                logger.info("Another process stored under seqs this one gave; storing %d row by row", len(batch))
            else:
                logger.warning("A batch of %d RTVI messages was refused; storing row by row", len(batch), exc_info=True)
            escaped = cls._store_alone(batch, last_event_at)
            with transaction.atomic():
                cls._summaries_alone(fields)
        changed = list(Session.objects.select_related("agent").filter(pk__in=fields)) if fields else []
        return escaped, changed

    @classmethod
    def _store_alone(cls, batch: list[Row], last_event_at) -> int:
        escaped = 0
        for row in batch:
            try:
                with transaction.atomic():
                    cls._insert_renumbered(row, last_event_at)
                    cls._callers([row])
                continue
            except UNAVAILABLE:
                raise
            except SeqTaken:
                # Never escaped for this: its text is fine, only no number could be had (RENUMBER_TRIES lost).
                row.refused = "could not be numbered: other processes kept storing in this session; send it again"
                row.reply = {"error": row.refused, "seq": row.bot_seq}
                logger.error("RTVI message %s of session %s found no free seq", row.bot_seq, row.live.session_id)
                continue
            except Exception as exc:
                row.quarantine(type(exc).__name__)
            try:
                with transaction.atomic():
                    cls._insert_renumbered(row, last_event_at)
                    cls._callers([row])
                escaped += 1
            except UNAVAILABLE:
                raise
            except Exception as exc:
                # Not even escaped: it cannot be stored, and the bot is told so (nothing else is held up).
                row.refused = f"could not be stored ({type(exc).__name__}); not kept"
                row.reply = {"error": row.refused, "seq": row.bot_seq}
                logger.error("RTVI message %s of session %s could not be stored", row.seq, row.live.session_id)
        return escaped

    @staticmethod
    def _callers(rows: list[Row]) -> None:
        """The callers' keys first seen in these rows, with them (erasure by caller finds their sessions)."""
        links = [SessionCaller(session_id=row.live.pk, caller_key=row.caller) for row in rows if row.caller]
        if links:
            SessionCaller.objects.bulk_create(links, ignore_conflicts=True)

    @classmethod
    def _insert_renumbered(cls, row: Row, last_event_at) -> None:
        """One row; if another process took its seq meanwhile, under the session's next free one.

        The session's row is locked first (SELECT ... FOR UPDATE on PostgreSQL;
        SQLite lets one writer in at a time anyway), so the processes that
        renumber one session take turns. A process's own batches do not take
        the lock; each seq they take makes the next read of the highest one
        higher, so every try but the last one lost to a commit of theirs.
        """
        if connection.features.has_select_for_update:
            list(Session.objects.select_for_update().filter(pk=row.live.pk).values_list("pk"))
        for _ in range(RENUMBER_TRIES):
            try:
                cls._insert([row], last_event_at)
                return
            except SeqTaken:
                taken = Event.objects.filter(session_id=row.live.pk).aggregate(m=Max("seq"))["m"] or 0
                row.seq = max(row.seq, taken) + 1
        raise SeqTaken()

    @classmethod
    def _summaries(cls, fields: dict[int, dict]) -> None:
        """The due summaries in one statement (executemany), in a savepoint; one by one if the database refuses it."""
        if not fields:
            return
        names = list(next(iter(fields.values())))  # every summary has summary_fields()'s keys, in its order
        params = [[*_db_values(names, values), pk] for pk, values in fields.items()]
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.executemany(_update_sql(names, "{pk} = %s"), params)
        except UNAVAILABLE:
            raise
        except Exception:
            cls._summaries_alone(fields)  # find the one refused; the others go through

    @staticmethod
    def _summaries_alone(fields: dict[int, dict]) -> None:
        for pk, values in fields.items():
            try:
                with transaction.atomic():
                    Session.objects.filter(pk=pk).update(**values)
            except UNAVAILABLE:
                raise
            except Exception:
                # The events are stored; a summary is derived, and comes again with the next one.
                logger.warning("The summary of session %s was refused", pk, exc_info=True)

    @classmethod
    def _insert(cls, rows: list[Row], last_event_at) -> None:
        """The rows in as few statements as the database allows, and their sessions' last_event_at.

        One multi-row INSERT, not executemany: the sqlite3 driver lets go of
        the GIL for every row of an executemany, and under load each time
        waited up to a switch interval (5 ms) to get it back from the busy
        event loop: 150 rows made a 0.25-0.75 s flush (docs/BENCHMARKS.md, issue 15).
        """
        pks = sorted({row.live.pk for row in rows})
        with connection.cursor() as cursor:
            size = _rows_per_insert()
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                cursor.execute(_insert_sql(len(chunk)), [p for row in chunk for p in row.as_params()])
                if cursor.rowcount != len(chunk):
                    raise SeqTaken()
            cursor.execute(
                _update_sql(["last_event_at"], "{pk} IN (" + ", ".join(["%s"] * len(pks)) + ")"),
                [*_db_values(["last_event_at"], {"last_event_at": last_event_at}), *pks],
            )

    @staticmethod
    def _batches(batch: list[Row], sessions: dict[int, tuple["LiveSession", int]]) -> list[tuple[str, dict]]:
        """Each session's relay of a stored batch: the reducer's patch since `version_from`, and the stored events."""
        by_session: dict[int, list[Row]] = {pk: [] for pk in sessions}
        for row in batch:
            if not row.refused:
                by_session[row.live.pk].append(row)
        relays = []
        for pk, rows in by_session.items():
            live, version_from = sessions[pk]
            rows.sort(key=lambda row: row.seq)
            try:
                relays.append(
                    (session_group(pk), batch_message(live, [row.as_event_json() for row in rows], version_from))
                )
            except Exception:  # its browsers see the gap in versions and resync; the acks still go
                logger.exception("The relay of session %s could not be made", live.session_id)
        return relays

    async def _after_store(
        self,
        batch: list[Row],
        relays: list[tuple[str, dict]],
        changed: list[Session],
    ) -> None:
        # This process's browsers first: an operator's page is what the live path is for, and a bot's ack
        # only lets it forget what it keeps to resend (a frame per message for older bots: a flush's acks
        # took as long to send as its relays, and every relay waited behind them). Then the acks, then the
        # other processes' browsers (with Redis: a publish each, which the acks need not wait for).
        replies: dict[Replier, list[dict]] = {}
        for row in batch:
            if row.holds:
                row.live.stored(row)
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

    async def _end_fatal(self, sessions: dict[int, tuple["LiveSession", int]]) -> None:
        """Sessions a fatal error ended: handed to `end_fatal` now (which flushes again, so not while relaying)."""
        if self.end_fatal is None:
            return
        for live, _ in sessions.values():
            if live.state.fatal and not live.ended:
                try:
                    await self.end_fatal(live)
                except Exception:  # not a storage failure of the batch: the sweep ends it later
                    logger.exception("Could not end session %s after its fatal error", live.session_id)


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
