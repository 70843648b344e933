"""Benchmark storage: bytes per session-hour and per message, and (--soak) whether retention keeps the size flat.

Starts the real server (daphne + dashboard.asgi, bench/relay.py's DashboardTarget: production
settings, an organization "Bench" with an ingest token) on a fresh database: a throwaway SQLite
file (`--db sqlite`) or a PostgreSQL database this script creates and drops (`--db postgres`,
`--pg-db`; DATABASE_URL is set for the server process as the project does).

Default mode: N bots (`--bots`, 20) each stream a realistic Pipecat call (tests/rtvi_samples.py's
recorded Pipecat 1.14 conversation: readiness, voice turns with transcription partials, LLM
tokens, TTS text, bot-output, speaking events, metrics, a function call every third turn) at
`--rate` messages/s (30), acknowledged as the bot package asks (`?acks=ranges`), for `--minutes`
(3); then each bot closes with 1000 (its call ended: the final state is frozen into the session
row) and, once every session has ended, the database's growth is measured:

- SQLite: the server stopped, `PRAGMA wal_checkpoint(TRUNCATE)`, the file's size (and -wal's);
- PostgreSQL: pg_database_size, and pg_total_relation_size (table + indexes + TOAST) of
  rtvi_monitor_event and rtvi_monitor_session, as left (with the dead row versions of the session
  rows' updates, about one a second per live call, until (auto)vacuum reuses them) and after
  VACUUM FULL (live rows only);

reported per message stored and per session-hour (bots x minutes / 60).

`--soak MINUTES`: the same bots for that long, but each call lasts `--call-seconds` (60) and the bot
then starts the next (a new session id), so there are ended calls to purge; the organization keeps
its calls `--keep-days` (0.002 days = 172.8 s, keep_sessions_days) and the server purges every
RETENTION_INTERVAL (`--retention-interval`, 10 s). The size is sampled every `--sample` seconds
(30): on SQLite the live bytes ((page_count - freelist_count) x page_size: the file itself never
shrinks); on PostgreSQL the event and session tables' relation sizes and their live rows.
PostgreSQL reuses the space of deleted rows once (auto)vacuum has marked it free, and without
VACUUM FULL its files do not shrink: "flat" there means a plateau, not a fall. Where the server
runs with `autovacuum = off`, `--vacuum SECONDS` has this script run a plain VACUUM of the two
tables that often instead. Reported: the series, and the size at the end against the size after
the first retention period (the first call's end + the keep + one interval).

    .venv/bin/python bench/storage.py --db sqlite --bots 20 --rate 30 --minutes 3
    .venv/bin/python bench/storage.py --db postgres --bots 20 --rate 30 --minutes 3
    .venv/bin/python bench/storage.py --db postgres --soak 30 --bots 20 --rate 30 --call-seconds 60 --keep-days 0.002 --vacuum 60
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.relay import DashboardTarget, percentile  # noqa: E402
from tests.rtvi_samples import pipecat_conversation_pairs  # noqa: E402

PG_ADMIN_URL = "postgresql://{user}@{host}:{port}/postgres"
TABLES = ("rtvi_monitor_event", "rtvi_monitor_session")


def call_messages(turns: int = 30) -> tuple[list[dict], list[dict]]:
    """(readiness, turns): a real Pipecat call's opening messages, then its voice turns, cycled for as long as a call lasts."""
    pairs = pipecat_conversation_pairs(turns)
    return [m for _, m in pairs[:3]], [m for _, m in pairs[3:]]


OPENING, TURNS = call_messages()


def message_at(index: int, offset: int) -> dict:
    """The call's index-th message (0-based): the opening, then the turns from `offset` (bots do not all say the same thing at once)."""
    if index < len(OPENING):
        return OPENING[index]
    return TURNS[(index - len(OPENING) + offset) % len(TURNS)]


# --- databases ---------------------------------------------------------------------------------


class Database:
    """The server's database: where it is, and its size."""

    def __init__(self, kind: str, pg_db: str, pg_user: str, pg_host: str, pg_port: int):
        self.kind = kind
        self.pg = {"user": pg_user, "host": pg_host, "port": pg_port}
        self.pg_db = pg_db
        self.sqlite_path: str | None = None
        self.url = f"postgresql://{pg_user}@{pg_host}:{pg_port}/{pg_db}" if kind == "postgres" else ""

    def create(self) -> None:
        """PostgreSQL: a fresh database (dropped first if a previous run left it); the server's DATABASE_URL."""
        if self.kind != "postgres":
            os.environ.pop("DATABASE_URL", None)
            return
        import psycopg

        with psycopg.connect(PG_ADMIN_URL.format(**self.pg), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.pg_db}"')
        os.environ["DATABASE_URL"] = self.url

    def drop(self) -> None:
        if self.kind != "postgres":
            return
        import psycopg

        with psycopg.connect(PG_ADMIN_URL.format(**self.pg), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)')

    def connect(self):
        if self.kind == "postgres":
            import psycopg

            return psycopg.connect(self.url, autocommit=True)
        return sqlite3.connect(self.sqlite_path, timeout=30)

    def started(self):
        """When the database server started (PostgreSQL): a restart during a run disturbs it."""
        if self.kind != "postgres":
            return None
        with self.connect() as db:
            return db.execute("SELECT pg_postmaster_start_time()").fetchone()[0]

    def autovacuum(self) -> str:
        if self.kind != "postgres":
            return ""
        with self.connect() as db:
            return db.execute("SHOW autovacuum").fetchone()[0]

    def vacuum(self, full: bool = False) -> None:
        """A plain VACUUM of the event and session tables (what autovacuum does, where it is off); or a FULL one
        (the tables rewritten with their live rows only: what the data itself takes)."""
        with self.connect() as db:
            db.execute(f"VACUUM {'FULL ' if full else ''}{', '.join(TABLES)}")

    def sizes(self, checkpoint: bool = False) -> dict:
        """Sizes in bytes and live rows. SQLite: file, -wal, live pages; PostgreSQL: database, tables."""
        if self.kind == "sqlite":
            with contextlib.closing(self.connect()) as db:
                if checkpoint:
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                page_size = db.execute("PRAGMA page_size").fetchone()[0]
                pages = db.execute("PRAGMA page_count").fetchone()[0]
                free = db.execute("PRAGMA freelist_count").fetchone()[0]
                rows = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
            wal = Path(self.sqlite_path + "-wal")
            file = Path(self.sqlite_path).stat().st_size
            return {
                "file": file,
                "wal": wal.stat().st_size if wal.exists() else 0,
                "live": (pages - free) * page_size,
                "rows": rows,
            }
        with self.connect() as db:
            database = db.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            tables = {t: db.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0] for t in TABLES}
            heap = {t: db.execute("SELECT pg_relation_size(%s)", (t,)).fetchone()[0] for t in TABLES}
            rows = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
            stats = db.execute(
                "SELECT n_dead_tup, autovacuum_count, vacuum_count FROM pg_stat_user_tables WHERE relname = %s",
                (TABLES[0],),
            ).fetchone()
        return {
            "database": database,
            "tables": sum(tables.values()),
            "by_table": tables,
            "event_heap": heap[TABLES[0]],
            "rows": rows,
            "event_dead": stats[0],
            "event_autovacuums": stats[1] + stats[2],
        }


# --- bots --------------------------------------------------------------------------------------


class Counters:
    def __init__(self):
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.latencies: list[float] = []  # ack latency of each message, s
        self.sessions: list[str] = []


async def call(url: str, token: str, session_id: str, rate: float, seconds: float, offset: int, counters: Counters):
    """One call: connect, stream `rate` msg/s for `seconds`, wait for every ack, close with 1000 (the call ended)."""
    sent_at: dict[int, float] = {}
    total = int(rate * seconds)
    all_acked = asyncio.Event()
    async with websockets.connect(
        f"{url}/ws/ingest/{session_id}/?acks=ranges",
        additional_headers={"Authorization": f"Bearer {token}"},
        max_queue=None,
        open_timeout=60,
    ) as socket:
        counters.sessions.append(session_id)

        async def drain():
            async for raw in socket:
                now = time.monotonic()
                frame = json.loads(raw)
                if "acks" in frame:
                    seqs = [s for first, last in frame["acks"] for s in range(first, last + 1)]
                elif "ack" in frame:
                    seqs = [frame["ack"]]
                else:
                    counters.errors += 1
                    continue
                for seq in seqs:
                    if (at := sent_at.pop(seq, None)) is not None:
                        counters.latencies.append(now - at)
                        counters.acked += 1
                if all_sent[0] and not sent_at:
                    all_acked.set()

        all_sent = [False]
        drainer = asyncio.create_task(drain())
        start = time.monotonic()
        for i in range(total):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            seq = i + 1
            frame = {"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message_at(i, offset)}
            sent_at[seq] = time.monotonic()
            await socket.send(json.dumps(frame))
            counters.sent += 1
        all_sent[0] = True
        if not sent_at:
            all_acked.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_acked.wait(), 60)
        drainer.cancel()
        await socket.close(code=1000)


async def bot(url: str, token: str, index: int, tag: str, rate: float, total_s: float, call_s: float, c: Counters):
    """A bot's calls one after another for `total_s` seconds, each `call_s` long (one call if call_s >= total_s)."""
    await asyncio.sleep(index / max(1, rate) / 20)  # spread the bots' first messages
    deadline = time.monotonic() + total_s
    k = 0
    while (left := deadline - time.monotonic()) > 1:
        await call(url, token, f"{tag}-{index}-{k}", rate, min(call_s, left), index * 7 + k * 13, c)
        k += 1


def wait_ended(db: Database, timeout: float = 60) -> int:
    """Until no session is live (every call's end stored); returns how many still are."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(db.connect()) as conn:
            live = conn.execute("SELECT count(*) FROM rtvi_monitor_session WHERE status = 'live'").fetchone()[0]
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(1)


def mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


# --- the two modes -----------------------------------------------------------------------------


def measure_growth(args, db: Database) -> None:
    target = DashboardTarget(1)
    server = target.servers[0]
    db.sqlite_path = target.db
    tag = f"storage-{os.getpid()}"
    counters = Counters()
    up_before = db.started()
    try:
        time.sleep(2)
        before = db.sizes(checkpoint=True)
        seconds = args.minutes * 60
        started = time.monotonic()
        asyncio.run(run_bots(server.ws_url, target.token, args, tag, seconds, seconds, counters))
        elapsed = time.monotonic() - started
        still_live = wait_ended(db)
        time.sleep(2)
        if db.kind == "postgres":
            after = db.sizes()
            db.vacuum(full=True)
            compact = db.sizes()
            if db.started() != up_before:
                print(f"WARNING: the database server restarted during the run (at {db.started()})")
    finally:
        target.stop()
    if db.kind == "sqlite":
        after = db.sizes(checkpoint=True)
    stored = after["rows"][TABLES[0]] - before["rows"][TABLES[0]]
    session_hours = args.bots * args.minutes / 60
    print(f"\n{args.bots} bots x {args.rate:g} msg/s x {args.minutes:g} min ({elapsed:.0f} s wall), db {db.kind}")
    print(
        f"sent {counters.sent:,}, acknowledged {counters.acked:,}, stored {stored:,} events, "
        f"errors {counters.errors}, sessions still live after the wait: {still_live}"
    )
    print(
        f"ack latency p50 {percentile(counters.latencies, 50) * 1000:.1f} ms, p99 {percentile(counters.latencies, 99) * 1000:.1f} ms, "
        f"max {max(counters.latencies, default=0) * 1000:.1f} ms"
    )
    if db.kind == "sqlite":
        measures = {
            "file (after checkpoint)": after["file"] + after["wal"] - before["file"] - before["wal"],
            "live pages": after["live"] - before["live"],
        }
    else:
        measures = {
            "pg_database_size": after["database"] - before["database"],
            "event + session tables (pg_total_relation_size)": after["tables"] - before["tables"],
            "the same after VACUUM FULL (live rows only)": compact["tables"] - before["tables"],
        }
        for t in TABLES:
            print(
                f"  {t}: {mb(after['by_table'][t] - before['by_table'][t])}, after VACUUM FULL "
                f"{mb(compact['by_table'][t] - before['by_table'][t])}"
            )
    print("| measure | growth | bytes / message | bytes / session-hour | GB / 1,000 session-hours |")
    print("|---|---|---|---|---|")
    for name, growth in measures.items():
        per_hour = growth / session_hours
        print(
            f"| {name} | {mb(growth)} | {growth / max(1, stored):,.0f} | {per_hour / 1e6:,.1f} MB | {per_hour * 1000 / 1e9:,.1f} |"
        )
    raw = sum(len(json.dumps(message_at(i, 0))) for i in range(1000)) / 1000
    print(
        f"(the messages' own JSON: {raw:.0f} bytes on average; a session-hour at {args.rate:g} msg/s is {args.rate * 3600:,.0f} messages)"
    )


async def run_bots(url, token, args, tag, total_s, call_s, counters, sampler=None):
    bots = [
        asyncio.create_task(bot(url, token, i, tag, args.rate, total_s, call_s, counters)) for i in range(args.bots)
    ]
    tasks = bots + ([asyncio.create_task(sampler())] if sampler else [])
    await asyncio.gather(*bots)
    for task in tasks[len(bots) :]:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def soak(args, db: Database) -> None:
    env = {"RETENTION_INTERVAL": str(args.retention_interval)}
    target = DashboardTarget(1, extra_env=env)
    server = target.servers[0]
    db.sqlite_path = target.db
    server.manage(
        "shell",
        "-c",
        f"from dashboard.models import Organization; Organization.objects.filter(name='Bench').update(keep_sessions_days={args.keep_days!r})",
    )
    keep_s = args.keep_days * 86400
    first_period = args.call_seconds + keep_s + args.retention_interval
    tag = f"soak-{os.getpid()}"
    counters = Counters()
    samples: list[tuple[float, dict, int, float]] = []  # (t, sizes, acked so far, ack p99 in the interval, s)
    size_key = "live" if db.kind == "sqlite" else "tables"
    print(
        f"soak: {args.bots} bots x {args.rate:g} msg/s, calls of {args.call_seconds:g} s, keep_sessions_days={args.keep_days:g} "
        f"({keep_s:.0f} s), RETENTION_INTERVAL={args.retention_interval:g} s, {args.soak:g} min, db {db.kind}; "
        f"first retention period ends at {first_period:.0f} s",
        flush=True,
    )
    if db.kind == "postgres":
        print(
            f"PostgreSQL autovacuum = {db.autovacuum()}; this script's own plain VACUUM of the two tables: "
            + (f"every {args.vacuum:g} s" if args.vacuum else "none"),
            flush=True,
        )

    if db.kind == "sqlite":
        print(
            "| t (s) | live bytes (page_count - freelist_count) x page_size | file + wal | events | sessions | acked | ack p99 ms (since last sample) |"
        )
        print("|---|---|---|---|---|---|---|")
    else:
        print(
            "| t (s) | event + session tables | event heap | pg_database_size | events | sessions | dead tuples | autovacuums | acked | ack p99 ms (since last sample) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
    start = time.monotonic()

    async def sampler():
        seen = 0
        while True:
            await asyncio.sleep(args.sample)
            s = await asyncio.to_thread(db.sizes)
            t = time.monotonic() - start
            window = counters.latencies[seen:]
            seen = len(counters.latencies)
            p99 = percentile(window, 99) * 1000 if window else float("nan")
            samples.append((t, s, counters.acked, p99))
            if db.kind == "sqlite":
                print(
                    f"| {t:.0f} | {mb(s['live'])} | {mb(s['file'] + s['wal'])} | {s['rows'][TABLES[0]]:,} | "
                    f"{s['rows'][TABLES[1]]} | {counters.acked:,} | {p99:.0f} |",
                    flush=True,
                )
            else:
                print(
                    f"| {t:.0f} | {mb(s['tables'])} | {mb(s['event_heap'])} | {mb(s['database'])} | {s['rows'][TABLES[0]]:,} | "
                    f"{s['rows'][TABLES[1]]} | {s['event_dead']:,} | {s['event_autovacuums']} | {counters.acked:,} | {p99:.0f} |",
                    flush=True,
                )

    async def vacuumer():
        while True:
            await asyncio.sleep(args.vacuum)
            await asyncio.to_thread(db.vacuum)

    async def background():
        tasks = [asyncio.create_task(sampler())]
        if args.vacuum and db.kind == "postgres":
            tasks.append(asyncio.create_task(vacuumer()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    up_before = db.started()
    try:
        asyncio.run(
            run_bots(server.ws_url, target.token, args, tag, args.soak * 60, args.call_seconds, counters, background)
        )
        if db.started() != up_before:
            print(f"WARNING: the database server restarted during the soak (at {db.started()})")
        purged = server.manage(
            "shell",
            "-c",
            "from dashboard.models import AuditEntry; from django.db.models import Count; "
            "print(AuditEntry.objects.filter(action='purged').count())",
        ).split()[-1]
    finally:
        target.stop()
    print(
        f"\nsent {counters.sent:,}, acknowledged {counters.acked:,}, errors {counters.errors}, calls {len(counters.sessions)}, "
        f"purge rounds audited {purged}; ack p50 {percentile(counters.latencies, 50) * 1000:.1f} ms, "
        f"p99 {percentile(counters.latencies, 99) * 1000:.1f} ms, max {max(counters.latencies, default=0) * 1000:.0f} ms"
    )
    after_first = [x for x in samples if x[0] >= first_period]
    if not after_first:
        print("the soak was shorter than the first retention period: nothing to compare")
        return
    ref = after_first[0]
    end = samples[-1]
    later = [x[1][size_key] for x in after_first]
    print(
        f"size ({'live bytes' if db.kind == 'sqlite' else 'event + session tables'}): after the first retention period "
        f"(t={ref[0]:.0f} s) {mb(ref[1][size_key])}, at the end (t={end[0]:.0f} s) {mb(end[1][size_key])}: "
        f"end / first = {end[1][size_key] / ref[1][size_key]:.2f}; from then on min {mb(min(later))}, max {mb(max(later))} "
        f"(max / first = {max(later) / ref[1][size_key]:.2f}); without retention it would have grown to about "
        f"{end[1][size_key] / max(1, end[1]['rows'][TABLES[0]]) * counters.acked / 1e6:,.0f} MB ({counters.acked:,} events)"
    )
    rows = [x[1]["rows"][TABLES[0]] for x in after_first]
    print(
        f"events kept: after the first period {rows[0]:,}, at the end {rows[-1]:,}, min {min(rows):,}, max {max(rows):,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--bots", type=int, default=20)
    parser.add_argument("--rate", type=float, default=30, help="messages per second per bot")
    parser.add_argument("--minutes", type=float, default=3, help="how long the bots stream (storage per session-hour)")
    parser.add_argument("--soak", type=float, default=0, metavar="MINUTES", help="soak with retention for this long")
    parser.add_argument("--call-seconds", type=float, default=60, help="--soak: each call's length")
    parser.add_argument("--keep-days", type=float, default=0.002, help="--soak: the organization's keep_sessions_days")
    parser.add_argument("--retention-interval", type=float, default=10, help="--soak: RETENTION_INTERVAL, s")
    parser.add_argument(
        "--vacuum",
        type=float,
        default=0,
        metavar="SECONDS",
        help="--soak, PostgreSQL: run a plain VACUUM of the event and session tables this often (stands in for autovacuum where it is off)",
    )
    parser.add_argument("--sample", type=float, default=30, help="--soak: seconds between size samples")
    parser.add_argument(
        "--pg-db", default="bench_storage", help="the PostgreSQL database made (and dropped) for the run"
    )
    parser.add_argument("--pg-user", default=os.getenv("USER", "root"))
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--keep-db", action="store_true", help="do not drop the PostgreSQL database at the end")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"command: {' '.join(sys.argv)}",
        flush=True,
    )
    db = Database(args.db, args.pg_db, args.pg_user, args.pg_host, args.pg_port)
    db.create()
    try:
        if args.soak:
            soak(args, db)
        else:
            measure_growth(args, db)
    finally:
        if not args.keep_db:
            db.drop()


if __name__ == "__main__":
    main()
