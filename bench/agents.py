"""Benchmark the agents list page: warm and cold, and upstream calls under concurrency.

Starts the real server (daphne) on a throwaway SQLite database seeded with the
demo organization, whose agents API is the server's own /v1/agents. Server
time is read from the Server-Timing header; latency is measured by the client
over loopback.

    .venv/bin/python bench/agents.py [--warm 300] [--cold 10] [--concurrency 50] [--rounds 3]
"""

import argparse
import asyncio
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.server import DaphneServer

TTL = 2


def server_ms(response: httpx.Response) -> float:
    return float(response.headers["Server-Timing"].split("dur=")[1])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def upstream_calls(server: DaphneServer) -> int:
    return sum(1 for line in server.access_log.read_text().splitlines() if "GET /v1/agents" in line)


async def login(client: httpx.AsyncClient, username: str, password: str) -> None:
    page = await client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = await client.post(
        "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302, "login failed"


async def run(args) -> None:
    server = DaphneServer(env={"AGENTS_CACHE_TTL": str(TTL)})
    server.start()
    try:
        seeded = server.manage("seed_demo").splitlines()
        username, password = (
            next(line for line in seeded if line.startswith("Login:")).removeprefix("Login: ").split(" / ")
        )
        limits = httpx.Limits(max_connections=args.concurrency)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:
            await login(client, username, password)

            await client.get("/agents/")  # fill the cache
            warm_server, warm_total = [], []
            for _ in range(args.warm):
                started = time.perf_counter()
                response = await client.get("/agents/")
                warm_total.append((time.perf_counter() - started) * 1000)
                warm_server.append(server_ms(response))
                if "support-concierge" not in response.text:
                    raise SystemExit("the page did not list the demo agents")

            cold_server, cold_total = [], []
            for _ in range(args.cold):
                await asyncio.sleep(TTL + 0.3)
                started = time.perf_counter()
                response = await client.get("/agents/")
                cold_total.append((time.perf_counter() - started) * 1000)
                cold_server.append(server_ms(response))

            rounds = []
            for _ in range(args.rounds):
                await asyncio.sleep(TTL + 0.3)
                before = upstream_calls(server)
                started = time.perf_counter()
                responses = await asyncio.gather(*(client.get("/agents/") for _ in range(args.concurrency)))
                elapsed = (time.perf_counter() - started) * 1000
                await asyncio.sleep(0.3)  # let the access log flush
                ok = sum(r.status_code == 200 and "support-concierge" in r.text for r in responses)
                rounds.append((upstream_calls(server) - before, ok, elapsed))
    finally:
        server.stop()

    print(
        f"machine: {platform.node()} {platform.machine()}, {Path('/proc/cpuinfo').read_text().count('processor')} cores, "
        f"Python {platform.python_version()}"
    )
    print(
        f"warm  ({args.warm} requests): server p50 {pct(warm_server, 50):.2f} ms, p95 {pct(warm_server, 95):.2f} ms;"
        f" client p50 {pct(warm_total, 50):.2f} ms, p95 {pct(warm_total, 95):.2f} ms"
    )
    print(
        f"cold  ({args.cold} requests): server p50 {pct(cold_server, 50):.2f} ms, max {max(cold_server):.2f} ms;"
        f" client p50 {pct(cold_total, 50):.2f} ms"
    )
    for i, (calls, ok, elapsed) in enumerate(rounds, 1):
        print(
            f"cold burst {i}: {args.concurrency} concurrent requests, {ok} ok, {calls} upstream call(s), "
            f"{elapsed:.0f} ms for all"
        )
    print(f"warm server-time mean {statistics.mean(warm_server):.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args()))
