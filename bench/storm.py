"""Benchmark storms: N bots connecting at once beside a healthy one, then all of them leaving at once.

Starts the real server (daphne + dashboard.asgi) on a throwaway SQLite
database (or DATABASE_URL). A healthy bot sends one message every 50 ms and
times each ack; then N bots connect at once (a restart, a deploy), each on a
session of its own, and each has one message acknowledged. Reported: how
long the N took to attach, and the healthy bot's acks while they did (the
target: none over 1 s). Then the N leave together, `--leave finished` (each
closes with 1000, as a bot whose pipeline ended: the session should end at once)
or `--leave dropped` (each connection just goes, as in an outage: the session
ends after SESSION_END_GRACE and a sweep): how long until every one of their
sessions has ended, and the healthy bot's acks meanwhile.

    .venv/bin/python bench/storm.py --bots 500 --leave finished
    .venv/bin/python bench/storm.py --bots 500 --leave dropped --baseline /tmp/before   # another checkout first

With --baseline DIR the same storm runs first against the server of that
checkout (its own code), so two builds are compared in one run.
"""

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import tests.server  # noqa: E402
from tests.server import DaphneServer  # noqa: E402
from tests.sockets import rtvi, wrap  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def storm(server: DaphneServer, bots: int, token: str, key: str, leave: str) -> dict:
    headers = {"Authorization": f"Bearer {token}"}
    timings: list[tuple[float, float]] = []  # (ack latency, when)
    stop = asyncio.Event()

    async def healthy():
        async with websockets.connect(f"{server.ws_url}/ws/ingest/healthy/", additional_headers=headers) as bot:
            seq = 0
            while not stop.is_set():
                seq += 1
                started = time.monotonic()
                await bot.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": " x"}), sent_at=time.time())))
                while json.loads(await bot.recv()).get("ack") != seq:
                    pass
                timings.append((time.monotonic() - started, time.monotonic()))
                await asyncio.sleep(0.05)

    beside = asyncio.create_task(healthy())
    await asyncio.sleep(1.0)
    began = time.monotonic()
    sockets = await asyncio.gather(
        *[
            websockets.connect(f"{server.ws_url}/ws/ingest/storm-{i}/", additional_headers=headers, open_timeout=120)
            for i in range(bots)
        ]
    )
    ready = rtvi("bot-ready", {"version": "1.0.0"})
    await asyncio.gather(*[s.send(json.dumps(wrap(1, ready, sent_at=time.time()))) for s in sockets])
    await asyncio.gather(*[s.recv() for s in sockets])
    attached = time.monotonic() - began
    await asyncio.sleep(1.0)
    during = [latency for latency, at in timings if at >= began]
    left = time.monotonic()
    if leave == "dropped":
        for socket in sockets:
            socket.transport.abort()  # no close frame: the server sees the connection lost
    else:
        await asyncio.gather(*[s.close() for s in sockets])  # 1000
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as api:
        while True:
            body = (await api.get("/api/sessions/", params={"status": "live", "limit": 500})).json()
            if not any(row["id"].startswith("storm-") for row in body["sessions"]):
                break
            if time.monotonic() - left > 120:
                raise SystemExit("the sessions did not end within 120 s")
            await asyncio.sleep(0.1)
    ended = time.monotonic() - left
    stop.set()
    await beside
    leaving = [latency for latency, at in timings if at >= left]
    return {
        "attached_s": attached,
        "acks": len(during),
        "ack_p50_s": percentile(during, 0.5),
        "ack_max_s": max(during),
        "ended_s": ended,
        "leave_ack_max_s": max(leaving) if leaving else float("nan"),
    }


def run(bots: int, code: str | None, grace: float, sweep: float, leave: str) -> dict:
    env = {
        "SESSION_END_GRACE": str(grace),
        "SESSION_SWEEP_INTERVAL": str(sweep),
        "INGEST_MAX_CONNECTIONS_PER_TOKEN": str(bots + 10),
    }
    server = DaphneServer(env=env)
    if code:  # the server of another checkout: its manage.py, its code
        tests.server.ROOT = Path(code).resolve()
    try:
        with server:
            token = server.issue("create_ingest_token", "storm")
            key = server.issue("create_api_key", "storm")
            return asyncio.run(storm(server, bots, token, key, leave))
    finally:
        tests.server.ROOT = ROOT


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bots", type=int, default=500)
    parser.add_argument("--grace", type=float, default=2.0, help="SESSION_END_GRACE")
    parser.add_argument("--sweep", type=float, default=1.0, help="SESSION_SWEEP_INTERVAL")
    parser.add_argument("--leave", choices=("finished", "dropped"), default="finished", help="how the N leave")
    parser.add_argument("--baseline", metavar="DIR", help="first run the server of this checkout")
    args = parser.parse_args()
    print(
        f"# {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, {args.bots} bots,"
        f" leaving {args.leave}, grace {args.grace} s + sweep {args.sweep} s"
    )
    targets = ([("baseline", args.baseline)] if args.baseline else []) + [("dashboard", None)]
    print("target     attach s  healthy acks  ack p50 s  ack max s  all ended s  ack max while leaving s")
    for name, code in targets:
        r = run(args.bots, code, args.grace, args.sweep, args.leave)
        print(
            f"{name:<10} {r['attached_s']:8.2f}  {r['acks']:12d}  {r['ack_p50_s']:9.3f}  {r['ack_max_s']:9.3f}"
            f"  {r['ended_s']:11.2f}  {r['leave_ack_max_s']:23.3f}"
        )


if __name__ == "__main__":
    main()
