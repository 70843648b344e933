"""Benchmark the retention purge: millions of events deleted while a bot streams with per-message acks and pages load.

Starts the real server (daphne + dashboard.asgi, bench/relay.py's DashboardTarget: production
settings, organization "Bench" with an ingest token and a logged-in admin) on a fresh database: a
PostgreSQL database this script creates and drops (`--db postgres`, the default; DATABASE_URL is set
for the server process as the project does) or a throwaway SQLite file (`--db sqlite`).

1. A reference call: a bot streams `--reference-messages` (2,000) messages and ends with 1000; its
   (recent, kept) page is one of the pages timed.
2. `--events` (10,000,000) events are inserted directly, set-based (generate_series on PostgreSQL,
   a recursive CTE on SQLite), in the table's real columns, into `--sessions` (5,000) calls of the
   organization that ended three days ago, each message one of a real Pipecat call's
   (tests/rtvi_samples.py, as bench/storage.py streams); then ANALYZE.
3. After `--settle-seconds` (15, not counted), a baseline (`--baseline-seconds`, 60): a healthy bot streams `--rate` (20) messages/s and asks for
   an ack per message (no `?acks=ranges`, as older bots do), each ack timed from its send; the
   session list (/sessions/), the reference call's page (/sessions/<id>/) and the JSON list
   (/api/sessions/) are loaded in turn, with the admin's cookie, each timed.
4. The organization's retention is set (`--kind sessions`: keep_sessions_days = 1, whole calls
   deleted, their events with them; `--kind messages`: keep_messages_days = 1, the calls' messages
   deleted, rows kept) and the server's own purge (rtvi_monitor/privacy/retention.py: every
   RETENTION_INTERVAL, `--retention-interval` 5 s, rounds of RETENTION_BATCH rows with
   RETENTION_PAUSE between) deletes them, while the bot and the pages go on as in 3, until every old
   call is purged or `--max-purge-minutes` (30) pass (then the figures are extrapolated and say so).

Reported: ack latency p50 / p99 / max, and each page's p50 / max, before and during the purge and
their ratio (same run: the ratio is what counts on a shared machine); the purge's duration (the
first to the last audited round) and rows/s.

    .venv/bin/python bench/purge.py --db postgres --events 10000000 --sessions 5000 --kind sessions
    .venv/bin/python bench/purge.py --db postgres --events 2000000 --sessions 1000 --kind messages
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.relay import DashboardTarget, percentile  # noqa: E402
from bench.storage import OPENING, TURNS, Counters, Database, call, message_at, wait_ended  # noqa: E402

SESSION_COLUMNS = (
    "session_id, status, started_at, ended_at, last_event_at, end_reason, ingest_epoch, protocol_version, "
    "client_about, bot_about, event_count, invalid_count, unknown_count, error_count, turn_count, "
    "interruption_count, latency_p50_ms, latency_p95_ms, latency_max_ms, fatal, transcript_text, state, "
    "agent_id, organization_id, bot_left_at, holder, cost_usd, agent_key, agent_name, deployment_id, end_kind, "
    "contents_purged_at"
)
EVENT_COLUMNS = (
    "session_id, seq, stream, bot_seq, direction, type, received_at, sent_at, message, valid, error, redacted"
)


def insert_old_calls(db: Database, sessions: int, per_session: int) -> float:
    """`sessions` calls that ended three days ago, `per_session` events each; returns the seconds it took."""
    started = time.monotonic()
    sqlite = db.kind == "sqlite"
    mark = "?" if sqlite else "%s"
    ended = datetime.now(UTC) - timedelta(days=3)
    messages = [(i, m["type"], json.dumps(m)) for i, m in enumerate(OPENING + TURNS)]
    transcript = "user: I would like to change my booking\nbot: Sure, which date?"
    with contextlib.closing(db.connect()) as conn:
        if not sqlite:
            conn.execute("SET synchronous_commit = off")
        org = conn.execute("SELECT id FROM dashboard_organization WHERE name = 'Bench'").fetchone()[0]

        def stamp(at: datetime):
            return at.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else at

        rows = []
        for i in range(sessions):
            end = ended - timedelta(seconds=i)
            begin = end - timedelta(seconds=per_session / 30)
            rows.append(
                (f"old-{i}", "ended", stamp(begin), stamp(end), stamp(end), "bot finished", 1, "2.2.0", "{}", "{}",
                 per_session, 0, 0, 0, per_session // 40, 0, 800.0, 1200.0, 1500.0, False, transcript, None,
                 None, org, None, "", 0.12, "", "", "", "bot_finished", None)
            )  # fmt: skip
        marks = ", ".join([mark] * 32)
        cursor = conn.cursor()
        cursor.executemany(f"INSERT INTO rtvi_monitor_session ({SESSION_COLUMNS}) VALUES ({marks})", rows)
        conn.execute("CREATE TEMP TABLE bench_msgs (i integer PRIMARY KEY, type text, message text)")
        cursor.executemany(f"INSERT INTO bench_msgs VALUES ({mark}, {mark}, {mark})", messages)
        if sqlite:
            conn.commit()
        ids = [
            r[0] for r in conn.execute("SELECT id FROM rtvi_monitor_session WHERE session_id LIKE 'old-%' ORDER BY id")
        ]
        base = ended.timestamp() - per_session / 30
        chunk = max(1, 1_000_000 // per_session)  # about a million rows a statement
        series = (
            f"(WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {per_session}) SELECT x FROM g)"
            if sqlite
            else f"(SELECT generate_series(1, {per_session}) AS x)"
        )
        n = len(messages)
        for k in range(0, len(ids), chunk):
            first, last = ids[k], ids[min(len(ids), k + chunk) - 1]
            conn.execute(
                f"INSERT INTO rtvi_monitor_event ({EVENT_COLUMNS}) "
                f"SELECT s.id, g.x, '', g.x, 'to-client', m.type, {base} + g.x / 30.0, {base} + g.x / 30.0 - 0.02, "
                f"m.message, {'1' if sqlite else 'true'}, '', '' "
                f"FROM rtvi_monitor_session s CROSS JOIN {series} g "
                f"JOIN bench_msgs m ON m.i = (g.x + s.id) % {n} "
                f"WHERE s.id BETWEEN {first} AND {last}"
            )
            if sqlite:
                conn.commit()
            done = min(len(ids), k + chunk) * per_session
            print(f"  inserted {done:,} events ({time.monotonic() - started:.0f} s)", flush=True)
        conn.execute("ANALYZE" if sqlite else "ANALYZE rtvi_monitor_event, rtvi_monitor_session")
        if sqlite:
            conn.commit()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        else:
            conn.execute("CHECKPOINT")  # the insert's WAL written out before the baseline, not during it
    return time.monotonic() - started


def remaining(db: Database, kind: str) -> int:
    """Old calls not purged yet."""
    where = "session_id LIKE 'old-%'" + (" AND contents_purged_at IS NULL" if kind == "messages" else "")
    with contextlib.closing(db.connect()) as conn:
        return conn.execute(f"SELECT count(*) FROM rtvi_monitor_session WHERE {where}").fetchone()[0]


def purge_rounds(db: Database) -> tuple:
    with contextlib.closing(db.connect()) as conn:
        return conn.execute(
            "SELECT min(at), max(at), count(*) FROM dashboard_auditentry WHERE action = 'purged'"
        ).fetchone()


def set_retention(db: Database, kind: str) -> None:
    field = "keep_sessions_days" if kind == "sessions" else "keep_messages_days"
    with contextlib.closing(db.connect()) as conn:
        conn.execute(f"UPDATE dashboard_organization SET {field} = 1 WHERE name = 'Bench'")
        if db.kind == "sqlite":
            conn.commit()


class Probe:
    """The healthy bot's acks and the pages' load times, by phase."""

    def __init__(self):
        self.phase = "baseline"
        self.acks: dict[str, list[float]] = {}
        self.pages: dict[tuple[str, str], list[float]] = {}
        self.unanswered = 0
        self.errors: list[str] = []


async def healthy_bot(url: str, token: str, rate: float, probe: Probe, stop: asyncio.Event) -> None:
    """One message every 1/rate s, one ack per message (an older bot): each ack's latency, in its phase."""
    pending: dict[int, tuple[float, str]] = {}
    async with websockets.connect(
        f"{url}/ws/ingest/healthy-{os.getpid()}/",
        additional_headers={"Authorization": f"Bearer {token}"},
        max_queue=None,
        open_timeout=60,
    ) as socket:

        async def drain():
            async for raw in socket:
                now = time.monotonic()
                frame = json.loads(raw)
                if "ack" not in frame:
                    probe.errors.append(raw[:200])
                    continue
                if (sent := pending.pop(frame["ack"], None)) is not None:
                    probe.acks.setdefault(sent[1], []).append(now - sent[0])

        drainer = asyncio.create_task(drain())
        start = time.monotonic()
        seq = 0
        while not stop.is_set():
            seq += 1
            delay = start + (seq - 1) / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            message = message_at(seq - 1, 0)
            pending[seq] = (time.monotonic(), probe.phase)
            await socket.send(
                json.dumps({"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message})
            )
        await asyncio.sleep(2)
        probe.unanswered = len(pending)
        for at, phase in pending.values():  # never acknowledged: counted at their age now
            probe.acks.setdefault(phase, []).append(time.monotonic() - at)
        drainer.cancel()


async def pages(base: str, cookie: str, paths: dict[str, str], probe: Probe, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=base, headers={"Cookie": cookie}, timeout=60) as client:
        while not stop.is_set():
            for name, path in paths.items():
                phase = probe.phase
                begun = time.monotonic()
                response = await client.get(path)
                elapsed = time.monotonic() - begun
                if response.status_code != 200:
                    probe.errors.append(f"{path}: {response.status_code}")
                probe.pages.setdefault((name, phase), []).append(elapsed)
            await asyncio.sleep(0.5)


def summary(values: list[float]) -> tuple[float, float, float]:
    return percentile(values, 50) * 1000, percentile(values, 99) * 1000, max(values, default=float("nan")) * 1000


async def measure(args, db: Database, target, reference: str, events: int) -> dict:
    server = target.servers[0]
    probe = Probe()
    stop = asyncio.Event()
    paths = {
        "session list (/sessions/)": "/sessions/",
        f"ended call's page (/sessions/{reference}/)": f"/sessions/{reference}/",
        "JSON list (/api/sessions/)": "/api/sessions/",
    }
    tasks = [
        asyncio.create_task(healthy_bot(server.ws_url, target.token, args.rate, probe, stop)),
        asyncio.create_task(pages(server.url, target.cookie, paths, probe, stop)),
    ]
    await asyncio.sleep(args.settle_seconds)
    probe.acks.clear()
    probe.pages.clear()
    await asyncio.sleep(args.baseline_seconds)
    total = await asyncio.to_thread(remaining, db, args.kind)
    probe.phase = "during"
    set_at = time.monotonic()
    await asyncio.to_thread(set_retention, db, args.kind)
    print(f"retention set ({args.kind}); {total:,} old calls to purge", flush=True)
    left = total
    last_print = set_at
    while left:
        await asyncio.sleep(2)
        left = await asyncio.to_thread(remaining, db, args.kind)
        now = time.monotonic()
        if now - last_print >= 30:
            last_print = now
            acks = probe.acks.get("during", [])
            print(
                f"  {now - set_at:.0f} s: {left:,} calls left (~{left * events // max(1, total):,} events); "
                f"acks so far p99 {percentile(acks, 99) * 1000:.0f} ms, max {max(acks, default=0) * 1000:.0f} ms",
                flush=True,
            )
        if now - set_at > args.max_purge_minutes * 60:
            print(f"  stopped after {args.max_purge_minutes:g} min with {left:,} calls left", flush=True)
            break
    waited = time.monotonic() - set_at
    probe.phase = "after"
    stop.set()
    await asyncio.gather(*tasks)
    return {"probe": probe, "total": total, "left": left, "waited": waited, "paths": paths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--events", type=int, default=10_000_000, help="old events to purge")
    parser.add_argument("--sessions", type=int, default=5_000, help="old (ended) calls holding them")
    parser.add_argument("--kind", choices=["sessions", "messages"], default="sessions", help="what retention purges")
    parser.add_argument("--rate", type=float, default=20, help="the healthy bot's messages/s")
    parser.add_argument("--reference-messages", type=int, default=2_000)
    parser.add_argument("--settle-seconds", type=float, default=15, help="bot and pages running, not counted")
    parser.add_argument("--baseline-seconds", type=float, default=60)
    parser.add_argument("--max-purge-minutes", type=float, default=30)
    parser.add_argument("--retention-interval", type=float, default=5, help="RETENTION_INTERVAL, s")
    parser.add_argument("--retention-batch", type=int, default=0, help="RETENTION_BATCH (0: the server's default)")
    parser.add_argument("--pg-db", default="bench_purge")
    parser.add_argument("--pg-user", default=os.getenv("USER", "root"))
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--keep-db", action="store_true", help="do not drop the PostgreSQL database at the end")
    args = parser.parse_args()
    per_session = args.events // args.sessions
    events = per_session * args.sessions

    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"command: {' '.join(sys.argv)}",
        flush=True,
    )
    db = Database(args.db, args.pg_db, args.pg_user, args.pg_host, args.pg_port)
    db.create()
    env = {"RETENTION_INTERVAL": str(args.retention_interval)}
    if args.retention_batch:
        env["RETENTION_BATCH"] = str(args.retention_batch)
    target = None
    try:
        target = DashboardTarget(1, extra_env=env)
        server = target.servers[0]
        db.sqlite_path = target.db
        reference = f"reference-{os.getpid()}"
        asyncio.run(call(server.ws_url, target.token, reference, 500, args.reference_messages / 500, 0, Counters()))
        wait_ended(db)
        print(f"inserting {events:,} events in {args.sessions:,} calls ended 3 days ago", flush=True)
        took = insert_old_calls(db, args.sessions, per_session)
        print(f"inserted in {took:.0f} s ({events / took:,.0f} rows/s)", flush=True)
        up_before = db.started()
        result = asyncio.run(measure(args, db, target, reference, events))
        first, last, rounds = purge_rounds(db)
        up_after = db.started()
    finally:
        if target is not None:
            target.stop()
        if not args.keep_db:
            db.drop()

    if up_before != up_after:
        print(f"WARNING: the database server restarted during the measurement (at {up_after}): figures disturbed")
    probe = result["probe"]
    print(
        f"\n{events:,} events in {args.sessions:,} old calls ({per_session:,} each), --kind {args.kind}, db {args.db}"
    )
    print(
        "| measure | baseline p50 / p99 / max ms | during the purge p50 / p99 / max ms | during / baseline (p50, p99, max) |"
    )
    print("|---|---|---|---|")
    rows = [
        (
            f"healthy bot's ack (one per message, {args.rate:g} msg/s)",
            probe.acks.get("baseline", []),
            probe.acks.get("during", []),
        )
    ]
    rows += [
        (name, probe.pages.get((name, "baseline"), []), probe.pages.get((name, "during"), []))
        for name in result["paths"]
    ]
    for name, before, during in rows:
        b, d = summary(before), summary(during)
        print(
            f"| {name} (n = {len(before)} / {len(during)}) | {b[0]:.1f} / {b[1]:.1f} / {b[2]:.1f} | "
            f"{d[0]:.1f} / {d[1]:.1f} / {d[2]:.1f} | {d[0] / b[0]:.2f} / {d[1] / b[1]:.2f} / {d[2] / b[2]:.2f} |"
        )
    during = probe.acks.get("during", [])
    over = sum(1 for x in during if x > 1)
    print(
        f"acks over 1 s while purging: {over} of {len(during)}; never acknowledged: {probe.unanswered}; errors: {probe.errors[:5]}"
    )
    purged_calls = result["total"] - result["left"]
    purged_events = purged_calls * per_session
    if first is not None and last is not None and rounds:
        span = (last - first).total_seconds() if not isinstance(first, str) else None
        if span is None:
            fmt = "%Y-%m-%d %H:%M:%S.%f"
            span = (datetime.strptime(last[:26], fmt) - datetime.strptime(first[:26], fmt)).total_seconds()
    else:
        span = float("nan")
    print(
        f"purge: {purged_calls:,} of {result['total']:,} calls ({purged_events:,} events) in {result['waited']:.0f} s from the "
        f"setting (the first to the last audited round: {span:.0f} s, {rounds} rounds): "
        f"{purged_events / result['waited']:,.0f} events/s from the setting"
    )
    if result["left"]:
        print(
            f"EXTRAPOLATED (not measured): all {events:,} events at that rate would take "
            f"{events / max(1, purged_events / result['waited']) / 60:,.0f} min (linear; where a round's cost "
            "grows with the rows left, the first rounds measured are the slowest: an upper bound at this size)"
        )


if __name__ == "__main__":
    main()
