"""What one flush of the writer stores, on the live path's database thread (live/dbthread.py).

`store` inserts a batch of rows with one multi-row INSERT (as few as the database's
limit on parameters allows), the callers first named in them, their sessions'
last_event_at and the due session summaries, in one transaction. A row the
database refuses for its data is stored alone, escaped, as an invalid record; a
seq another process took meanwhile is renumbered (`SeqTaken`); a database that
is down or locked raises (`UNAVAILABLE`), and the writer keeps the batch.

Plain data in and out: rows and the summaries' fields, never a live session
(the writer, live/writer.py, reads those on the event loop).
"""

import logging
import sqlite3

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Max

from rtvi_monitor.sessions import cost
from rtvi_monitor.sessions.events import Row
from rtvi_monitor.sessions.models import Event, Session, SessionCaller

logger = logging.getLogger(__name__)

UNAVAILABLE = (OperationalError, InterfaceError)  # the database itself, not the data: hold and retry
RENUMBER_TRIES = 100  # each lost try is a commit of another process's in between

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


class SeqTaken(Exception):
    """Another process stored under a seq this one gave (two processes held one session at once)."""


def _update_sql(fields: list[str], where: str) -> str:
    """UPDATE of Session columns, as raw SQL (the ORM cost more than the statement on every flush)."""
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(Session._meta.get_field(f).column)} = %s" for f in fields)
    where = where.format(pk=quote(Session._meta.pk.column))
    return f"UPDATE {quote(Session._meta.db_table)} SET {sets} WHERE {where}"


def _db_values(names: list[str], values: dict) -> list:
    """Column values as the ORM would send them (dates, JSON), each through its model field."""
    return [Session._meta.get_field(name).get_db_prep_save(values[name], connection) for name in names]


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


def store(batch: list[Row], summaries: dict[int, tuple], last_event_at) -> tuple[int, list[Session]]:
    """Insert the batch and the due summaries. Rows the database refuses for their data are stored escaped, alone.

    `summaries`: session pk -> (organization id, its summary's fields, its usage per model), as the
    writer took them. Returns how many rows had to be escaped, and the sessions whose rows were
    updated. A database that is down or locked raises, and the batch is kept for the next flush.
    """
    fields = {
        pk: {**summary, "cost_usd": cost.session_cost(organization_id, usage)}
        for pk, (organization_id, summary, usage) in summaries.items()
    }
    try:
        with transaction.atomic():
            if batch:
                _insert(batch, last_event_at)
                _callers(batch)
            _summaries(fields)  # in a savepoint: a refused one never rejects the batch
        escaped = 0
    except UNAVAILABLE:
        raise
    except Exception as exc:
        if isinstance(exc, SeqTaken):  # a bot of the session on another process too: renumbered, not refused
            logger.info("Another process stored under seqs this one gave; storing %d row by row", len(batch))
        else:
            logger.warning("A batch of %d RTVI messages was refused; storing row by row", len(batch), exc_info=True)
        escaped = _store_alone(batch, last_event_at)
        with transaction.atomic():
            _summaries_alone(fields)
    changed = list(Session.objects.select_related("agent").filter(pk__in=fields)) if fields else []
    return escaped, changed


def _store_alone(batch: list[Row], last_event_at) -> int:
    escaped = 0
    for row in batch:
        try:
            with transaction.atomic():
                _insert_renumbered(row, last_event_at)
                _callers([row])
            continue
        except UNAVAILABLE:
            raise
        except SeqTaken:
            # Never escaped for this: its text is fine, only no number could be had (RENUMBER_TRIES lost).
            row.refused = "could not be numbered: other processes kept storing in this session; send it again"
            row.reply = {"error": row.refused, "seq": row.bot_seq}
            logger.error("RTVI message %s of session pk %s found no free seq", row.bot_seq, row.session_pk)
            continue
        except Exception as exc:
            row.quarantine(type(exc).__name__)
        try:
            with transaction.atomic():
                _insert_renumbered(row, last_event_at)
                _callers([row])
            escaped += 1
        except UNAVAILABLE:
            raise
        except Exception as exc:
            # Not even escaped: it cannot be stored, and the bot is told so (nothing else is held up).
            row.refused = f"could not be stored ({type(exc).__name__}); not kept"
            row.reply = {"error": row.refused, "seq": row.bot_seq}
            logger.error("RTVI message %s of session pk %s could not be stored", row.seq, row.session_pk)
    return escaped


def _callers(rows: list[Row]) -> None:
    """The callers' keys first seen in these rows, with them (erasure by caller finds their sessions)."""
    links = [SessionCaller(session_id=row.session_pk, caller_key=row.caller) for row in rows if row.caller]
    if links:
        SessionCaller.objects.bulk_create(links, ignore_conflicts=True)


def _insert_renumbered(row: Row, last_event_at) -> None:
    """One row; if another process took its seq meanwhile, under the session's next free one.

    The session's row is locked first (SELECT ... FOR UPDATE on PostgreSQL;
    SQLite lets one writer in at a time anyway), so the processes that
    renumber one session take turns. A process's own batches do not take
    the lock; each seq they take makes the next read of the highest one
    higher, so every try but the last one lost to a commit of theirs.
    """
    if connection.features.has_select_for_update:
        list(Session.objects.select_for_update().filter(pk=row.session_pk).values_list("pk"))
    for _ in range(RENUMBER_TRIES):
        try:
            _insert([row], last_event_at)
            return
        except SeqTaken:
            taken = Event.objects.filter(session_id=row.session_pk).aggregate(m=Max("seq"))["m"] or 0
            row.seq = max(row.seq, taken) + 1
    raise SeqTaken()


def _summaries(fields: dict[int, dict]) -> None:
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
        _summaries_alone(fields)  # find the one refused; the others go through


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


def _insert(rows: list[Row], last_event_at) -> None:
    """The rows in as few statements as the database allows, and their sessions' last_event_at.

    One multi-row INSERT, not executemany: the sqlite3 driver lets go of
    the GIL for every row of an executemany, and under load each time
    waited up to a switch interval (5 ms) to get it back from the busy
    event loop: 150 rows made a 0.25-0.75 s flush (docs/BENCHMARKS.md, issue 15).
    """
    pks = sorted({row.session_pk for row in rows})
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
