"""Benchmark the agents list page: warm and cold, and upstream calls under concurrency.

Starts the real server (daphne) on a throwaway SQLite database seeded with the
demo organization, whose agents API is the server's own /v1/agents. Server
time is read from the Server-Timing header; latency is measured by the client
over loopback.

    .venv/bin/python bench/agents.py [--warm 300] [--cold 10] [--concurrency 50] [--rounds 3]

With `--page agent`: one agent's page, /agents/<id>/, with 1,000 of its
sessions on the platform and 10,000 log lines (--sessions, --logs), against
two upstreams side by side: the built-in API (the server's own /v1, answering
from Session and Event rows seeded into its database) and a Pipecat Cloud
stand-in (a real HTTP server on a thread of this process, answering from
tests/platform_samples.py's generated data; the organization's
agents_api_base_url points at it). For each: the first load of an empty
platform cache (after a restart; the agent list and the templates warmed by
another agent's page), warm (every answer cached), cold (the answers expired:
PLATFORM_CACHE_TTL and AGENTS_CACHE_TTL of 2 s, slept past; they are served
stale while asked again), and a log search whose answer is not cached; then
the built-in API's own endpoints.

    .venv/bin/python bench/agents.py --page agent [--warm 300] [--cold 10] [--empty 5] [--sessions 1000] [--logs 10000]
"""

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

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


# --- --page agent: one agent's page, with 1,000 platform sessions and 10,000 log lines -------------

SHORT_TTL = 2  # seconds, PLATFORM_CACHE_TTL and AGENTS_CACHE_TTL of the cold phase
LONG_TTL = 3600  # the same of the warm phase: no answer expires while it runs
SEARCH_MATCHES = "timed out"  # a third of the lines have it
SEARCH_NOTHING = "no-such-text-anywhere"  # matched against every line, none has it


class StandIn:
    """Pipecat Cloud's agents API over HTTP, on a thread: tests/platform_samples.FakePipecatCloud behind a socket.

    Answers GET /v1/agents (the list, two agents: the benchmarked one and one whose page warms the server)
    and /v1/agents/<name>[/sessions[/<id>]|/logs] through the fake. Records each call's time in the stand-in.
    """

    def __init__(self, sessions: list[dict], logs: list[dict]):
        from tests.agents_samples import AGENT, KEY
        from tests.platform_samples import AGENT_NAME, AGENT_STATUS, DEPLOYMENT_ID, FakePipecatCloud

        self.key = KEY
        self.agent_id, self.agent_name = AGENT["id"], AGENT_NAME
        self.other_id, other_name = "0f1e2d3c-4b5a-4968-8776-655443322110", "warmup-bot"
        listed = {**AGENT, "activeDeploymentId": DEPLOYMENT_ID, "deployment": AGENT_STATUS["deployment"]}
        self.listing = {"services": [listed, {**listed, "id": self.other_id, "name": other_name}]}
        self.fake = FakePipecatCloud(
            sessions=sessions,
            logs=logs,
            agents={AGENT_NAME: AGENT_STATUS, other_name: {**AGENT_STATUS, "name": other_name}},
            details={},
            key=KEY,
        )
        self.times: dict[str, list[float]] = defaultdict(list)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                started = time.perf_counter()
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/agents":
                    if self.headers.get("Authorization") != f"Bearer {stand_in.key}":
                        status, body = 401, b'{"error": "Unauthorized", "code": "401"}'
                    else:
                        status, body = 200, json.dumps(stand_in.listing).encode()
                    route = "GET /v1/agents"
                else:
                    request = httpx.Request(
                        "GET",
                        f"http://stand-in{self.path}",
                        headers={"Authorization": self.headers.get("Authorization", "")},
                    )
                    response = stand_in.fake(request)
                    status, body = response.status_code, response.content
                    rest = path.split("/agents/", 1)[1].split("/")[1:]
                    query = "?query" if "query=" in self.path else ""
                    route = "GET /v1/agents/<name>" + "".join(f"/{p}" for p in rest[:1]) + query
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                stand_in.times[route].append((time.perf_counter() - started) * 1000)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Run in the server's environment (manage.py shell -c): the benchmarked agent's sessions, as the dashboard
# recorded them, and (built-in upstream) its bots' log lines; or (stand-in) the organization pointed at it.
SEED = """
import json
from datetime import datetime
from dashboard.models import Agent, Deployment, Organization
from rtvi_monitor.models import Event, Session

P = json.loads(open({path!r}).read())
org = Organization.objects.get(name="Demo Voice Co")
at = datetime.fromisoformat
if P["upstream"] == "built-in":
    agent = Agent.objects.create(organization=org, name=P["agent_name"], created_at=at(P["sessions"][0]["createdAt"]))
    spec = {{"region": "us-west", "autoScaling": {{"minAgents": 1, "maxAgents": 10}}}}
    for dep in (P["old_deployment"], P["deployment"]):
        Deployment.objects.create(id=dep, agent=agent, image=f"img/{{P['agent_name']}}:{{dep[:4]}}", manifest=spec)
    agent.active_deployment_id = P["deployment"]
    agent.save()
    agent_id, key, agent_fk = str(agent.pk), str(agent.pk), agent
    other = Agent.objects.filter(organization=org, name="support-concierge").first()
    other_id = str(other.pk)
else:
    org.agents_api_base_url, org.agents_api_key = P["stand_in_url"], P["stand_in_key"]
    org.save()
    agent_id, key, agent_fk, other_id = P["agent_id"], P["agent_id"], None, P["other_id"]
rows = []
for i, s in enumerate(P["sessions"]):
    old = s["deploymentId"] == P["old_deployment"]
    failed = s["completionStatus"] in ("HTTP_ERROR", 500)
    rows.append(Session(
        organization=org, agent=agent_fk, agent_key=key, agent_name=P["agent_name"], session_id=s["sessionId"],
        deployment_id=s["deploymentId"], status="ended", started_at=at(s["createdAt"]), ended_at=at(s["endedAt"]),
        last_event_at=at(s["endedAt"]), end_reason="fatal error" if failed else "bot disconnected",
        fatal=failed, error_count=int(failed) + (i % 5 == 0), turn_count=8,
        latency_p50_ms=(1200 if old else 700) + i % 97, latency_p95_ms=(1800 if old else 1000) + i % 193,
    ))
Session.objects.bulk_create(rows, batch_size=500)
events = []
if P["upstream"] == "built-in":
    pks = dict(Session.objects.filter(organization=org, agent_key=key).values_list("session_id", "pk"))
    seqs = {{}}
    for i, line in enumerate(P["logs"]):
        pk = pks[line["sessionId"]]
        seqs[pk] = seqs.get(pk, 0) + 1
        when = at(line["timestamp"][:26] + "+00:00").timestamp()
        if i % 3 == 2:
            kind, data = "error", {{"error": f"line {{i}}: the TTS service timed out", "fatal": False}}
        else:
            kind, data = "system-log", {{"text": line["log"], "level": "INFO" if i % 3 == 0 else "DEBUG"}}
        events.append(Event(
            session_id=pk, seq=seqs[pk], direction="to-client", type=kind, received_at=when,
            message=json.dumps({{"label": "rtvi-ai", "type": kind, "data": data}}),
        ))
    Event.objects.bulk_create(events, batch_size=2000)
print(json.dumps({{"agent_id": agent_id, "other_id": other_id, "sessions": len(rows), "events": len(events)}}))
"""


def generated(n_sessions: int, n_logs: int) -> tuple[list[dict], list[dict]]:
    """make_sessions/make_logs, all ended, the newest starting a minute ago and the lines of the last hours."""
    from tests.platform_samples import make_logs, make_sessions

    now = datetime.now(UTC).replace(microsecond=0)
    sessions = make_sessions(n_sessions, start=now - timedelta(minutes=n_sessions + 1), active=0)
    logs = make_logs(n_logs, sessions)
    # make_logs stamps from a fixed epoch: move the lines into the sessions' time, keeping their spacing.
    shift = (now - timedelta(minutes=n_sessions)) - datetime(2025, 10, 1, tzinfo=UTC)
    for line in logs:
        moved = datetime.fromisoformat(line["timestamp"][:26] + "+00:00") + shift
        line["timestamp"] = moved.strftime("%Y-%m-%dT%H:%M:%S.%f") + line["timestamp"][26:]
    return sessions, logs


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "max": max(values),
        "mean": statistics.mean(values),
    }


async def timed(client: httpx.AsyncClient, path: str, **kwargs) -> tuple[float, httpx.Response]:
    response = await client.get(path, **kwargs)
    if response.status_code != 200:
        raise SystemExit(f"GET {path}: HTTP {response.status_code}\n{response.text[:2000]}")
    return server_ms(response), response


def check_page(html: str, upstream: str) -> None:
    """The page must show what the upstream said: a bench of an error page measures nothing."""
    for problem in ("could not be fetched", "failed since", "has not answered within", "Nothing to show until"):
        if problem in html:
            raise SystemExit(f"{upstream}: the agent page says {problem!r}")
    if html.count('<li class="log-') < 100 or "HTTP_ERROR" not in html:
        raise SystemExit(f"{upstream}: the agent page lacks its log lines or sessions")


async def agent_page(args, upstream: str) -> dict:
    """One upstream's figures: first load (empty cache), warm, cold, uncached search; built-in endpoints."""
    from tests.platform_samples import AGENT_NAME, DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    sessions, logs = generated(args.sessions, args.logs)
    stand_in = StandIn(sessions, logs) if upstream == "stand-in" else None
    env = {"AGENTS_CACHE_TTL": str(LONG_TTL), "PLATFORM_CACHE_TTL": str(LONG_TTL)}
    server = DaphneServer(env={**env, "PLATFORM_ENDED_SESSION_TTL": str(LONG_TTL)})
    server.start()
    figures: dict = {}
    try:
        username, password, api_key = server.seed_demo()
        params = {
            "upstream": upstream,
            "agent_name": AGENT_NAME,
            "deployment": DEPLOYMENT_ID,
            "old_deployment": OLD_DEPLOYMENT_ID,
            "sessions": sessions,
            "logs": logs if upstream == "built-in" else [],
            **(
                {
                    "stand_in_url": stand_in.url,
                    "stand_in_key": stand_in.key,
                    "agent_id": stand_in.agent_id,
                    "other_id": stand_in.other_id,
                }
                if stand_in
                else {}
            ),
        }
        started = time.perf_counter()
        seed_file = server.workdir / "bench-seed.json"  # too big for a command line
        seed_file.write_text(json.dumps(params))
        seeded = json.loads(server.manage("shell", "-c", SEED.format(path=str(seed_file))).splitlines()[-1])
        figures["seeded"] = {**seeded, "seconds": time.perf_counter() - started}
        page = f"/agents/{seeded['agent_id']}/"
        warmup = f"/agents/{seeded['other_id']}/"

        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            await login(client, username, password)

            async def first_load(path: str = page) -> float:
                await timed(client, warmup)  # the agent list, templates, connections: the platform's calls stay cold
                ms, response = await timed(client, path)
                check_page(response.text, upstream)
                return ms

            # The first load of each (fresh) server: what the page costs when it must wait for the upstream.
            empty = [await first_load()]
            warm = []
            for _ in range(args.warm):
                ms, response = await timed(client, page)
                warm.append(ms)
            check_page(response.text, upstream)
            figures["html_kb"] = len(response.content) / 1024
            # A log search whose answer is not cached: the page waits for the logs call alone.
            searches = {}
            for query in (SEARCH_MATCHES, SEARCH_NOTHING):
                searches[query] = []
                for i in range(args.empty):
                    # A distinct query each time (the upstream matches the words; the cache key differs).
                    ms, response = await timed(client, page, params={"q": query, "log_session": "", "lo": str(i)})
                    searches[query].append(ms)
            for _ in range(args.empty - 1):
                server.restart()
                empty.append(await first_load())

            if upstream == "built-in":
                figures["endpoints"] = await endpoints(server, api_key, sessions)

            # Cold: answers expire after SHORT_TTL; each load after that serves them stale and asks again.
            server.env.update(AGENTS_CACHE_TTL=str(SHORT_TTL), PLATFORM_CACHE_TTL=str(SHORT_TTL))
            server.restart()
            await first_load()
            cold = []
            for _ in range(args.cold):
                await asyncio.sleep(SHORT_TTL + 0.5)
                ms, response = await timed(client, page)
                cold.append(ms)
            check_page(response.text, upstream)
    finally:
        server.stop()
        if stand_in:
            stand_in.stop()
    figures.update(
        empty=summary(empty),
        warm=summary(warm),
        cold=summary(cold),
        searches={query: summary(values) for query, values in searches.items()},
    )
    if stand_in:
        figures["stand_in"] = {route: summary(values) for route, values in sorted(stand_in.times.items())}
    return figures


async def endpoints(server: DaphneServer, api_key: str, sessions: list[dict]) -> dict:
    """The built-in API's own server time for the calls the agent page (and the session panel) make."""
    from tests.platform_samples import AGENT_NAME

    name = quote(AGENT_NAME, safe="")
    some_session = sessions[len(sessions) // 2]["sessionId"]
    calls = {
        "GET /v1/agents?includeActiveDeployment=true": "/v1/agents?includeActiveDeployment=true",
        "GET /v1/agents/<name>": f"/v1/agents/{name}",
        "GET /v1/agents/<name>/sessions?limit=25": f"/v1/agents/{name}/sessions?limit=25&offset=0&status=all&startType=all",
        "GET /v1/agents/<name>/sessions?limit=1000": f"/v1/agents/{name}/sessions?limit=1000&offset=0&status=all&startType=all",
        "GET /v1/agents/<name>/logs?limit=100": f"/v1/agents/{name}/logs?limit=100&offset=0&order=desc",
        "GET /v1/agents/<name>/logs?limit=100&offset=9900": f"/v1/agents/{name}/logs?limit=100&offset=9900&order=desc",
        f"GET /v1/agents/<name>/logs?query={SEARCH_MATCHES}": f"/v1/agents/{name}/logs?limit=100&offset=0&order=desc&query={quote(SEARCH_MATCHES)}",
        f"GET /v1/agents/<name>/logs?query={SEARCH_NOTHING}": f"/v1/agents/{name}/logs?limit=100&offset=0&order=desc&query={SEARCH_NOTHING}",
        "GET /v1/agents/<name>/logs?sessionId=...&limit=200&order=asc": f"/v1/agents/{name}/logs?limit=200&offset=0&order=asc&sessionId={some_session}",
        "GET /v1/agents/<name>/sessions/<id>": f"/v1/agents/{name}/sessions/{some_session}",
    }
    headers = {"Authorization": f"Bearer {api_key}"}
    out = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=60, headers=headers) as client:
        for label, path in calls.items():
            await timed(client, path)  # the first of each: connections, imports
            values = []
            for _ in range(30):
                ms, response = await timed(client, path)
                values.append(ms)
            out[label] = {**summary(values), "kb": len(response.content) / 1024}
    return out


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    return (
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def row(label: str, a: dict, b: dict, keys=("p50", "p95")) -> str:
    cells = [" / ".join(f"{d[k]:.1f}" for k in keys) for d in (a, b)]
    return f"| {label} | {cells[0]} | {cells[1]} |"


async def run_agent_page(args) -> None:
    load_before = os.getloadavg()
    started = time.perf_counter()
    results = {upstream: await agent_page(args, upstream) for upstream in ("built-in", "stand-in")}
    a, b = results["built-in"], results["stand-in"]
    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(
        f"load average before {load_before[0]:.1f} / after {os.getloadavg()[0]:.1f} (1 min; other work was running),"
        f" {time.perf_counter() - started:.0f} s in all"
    )
    print(
        f"data: {args.sessions} platform sessions of the agent, {args.logs} log lines; seeded in "
        f"{a['seeded']['seconds']:.1f} s (built-in: {a['seeded']['sessions']} sessions, {a['seeded']['events']} events) "
        f"and {b['seeded']['seconds']:.1f} s (stand-in: {b['seeded']['sessions']} sessions the dashboard monitored)"
    )
    print(f"page: {a['html_kb']:.0f} KB of HTML (built-in), {b['html_kb']:.0f} KB (stand-in)")
    print()
    print("Server time of GET /agents/<id>/ (Server-Timing, ms)")
    print()
    print("| | built-in API (own /v1) | Pipecat Cloud stand-in |")
    print("|---|---|---|")
    print(row(f"warm, p50 / p95 ({args.warm} requests)", a["warm"], b["warm"]))
    print(row(f"cold (TTLs of {SHORT_TTL} s expired), p50 / max ({args.cold})", a["cold"], b["cold"], ("p50", "max")))
    print(row(f"first load, empty platform cache, p50 / max ({args.empty})", a["empty"], b["empty"], ("p50", "max")))
    for query in (SEARCH_MATCHES, SEARCH_NOTHING):
        print(
            row(f"log search q={query!r}, uncached, p50 / max ({args.empty})",
                a["searches"][query], b["searches"][query], ("p50", "max"))
        )  # fmt: skip
    print()
    print("The built-in API's own server time (Server-Timing, 30 requests each, ms)")
    print()
    print("| call | p50 | p95 | max | body |")
    print("|---|---|---|---|---|")
    for label, d in a["endpoints"].items():
        print(f"| {label} | {d['p50']:.1f} | {d['p95']:.1f} | {d['max']:.1f} | {d['kb']:.0f} KB |")
    print()
    print("The stand-in's own time per call (in this process, ms)")
    print()
    print("| call | n | p50 | max |")
    print("|---|---|---|---|")
    for label, d in b["stand_in"].items():
        print(f"| {label} | {d['n']} | {d['p50']:.1f} | {d['max']:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--page", choices=("list", "agent"), default="list", help="the agents list, or one agent's page"
    )
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--empty", type=int, default=5, help="--page agent: first loads of an empty cache")
    parser.add_argument("--sessions", type=int, default=1000, help="--page agent: the agent's platform sessions")
    parser.add_argument("--logs", type=int, default=10_000, help="--page agent: its log lines")
    arguments = parser.parse_args()
    asyncio.run(run_agent_page(arguments) if arguments.page == "agent" else run(arguments))
