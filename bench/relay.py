"""Benchmark the live relay: N bots x R messages/s, two browsers per session.

For each target server, in the same run and with the same load generator:
- `dashboard`: the real server (daphne + dashboard.asgi): validation, state,
  batched storage in SQLite (or DATABASE_URL), relay after storage, acks;
- `bare`: bench/bare_relay.py, a stock Channels relay (one group_send per
  message, no storage);
- `plain`: bench/plain_relay.py, a plain `websockets` relay (the floor);
- `daphne`: bench/daphne_relay.py, the same relay as a bare ASGI app under
  daphne (the server's own floor: twisted and autobahn, no Django, no Channels);
- `daphne+acks`: that relay acking each bot frame ({"ack": seq}): the floor for
  bots without ranged acks, whose every message is three frames;
- `daphne+acks+tuned`: that on daphne with the dashboard's changes to it
  (dashboard/server/daphne_tuning.py): the floor as the dashboard runs daphne.

`--target servers` runs the dashboard under each ASGI server of `--servers`
(default daphne,daphne-stock,uvicorn,uvicorn-sansio,granian), then the plain
relay, in one run: `dashboard` is daphne as `make run` starts it (with its
tuning), `daphne-stock` the same with DAPHNE_TUNING=false, `uvicorn` uvicorn
with its `websockets` implementation (`uvicorn-sansio`: its
`websockets-sansio` one) and `granian` granian's ASGI interface, all three
serving bench/asgi_servers.py (dashboard.asgi's application with ASGI's
lifespan answered: the background work daphne starts with its reactor). They
need requirements-bench.txt installed.

Measures delivered messages/s, bot-to-browser latency p50/p99 (from the bot's
sent_at to the browser's receipt), loss and gaps, server CPU (% of one core)
and peak memory (VmHWM), and for the dashboard that every message was stored.

    .venv/bin/python bench/relay.py --bots 100 --rate 30 --seconds 20
    .venv/bin/python bench/relay.py --bots 100 --sweep 30,45,60,80 --seconds 15   # highest zero-loss rate
    .venv/bin/python bench/relay.py --processes 2 --target dashboard ...          # scale-out (REDIS_URL, DATABASE_URL)
    .venv/bin/python bench/relay.py --bots 100 --rate 300 --seconds 10 --unpaced --viewers 1   # throughput
    .venv/bin/python bench/relay.py --bots 100 --rate 30 --seconds 20 --viewers 1 --target servers   # ASGI servers

--unpaced: each bot sends its rate x seconds messages as fast as it can;
"delivered msg/s" is then what reached the browsers over the time from the
start to the last receipt.

--acks ranges (the default) has the bench's bots ask for ranged acks
(`?acks=ranges`, one frame per dashboard write) as the bot package does;
--acks each keeps the per-message acks of older bots. --client has each bot
be the bot package's DashboardClient (its batching: one frame per 50 ms),
paced only. --baseline DIR adds a target "baseline": the dashboard run from
another checkout (its own code and bot package), to compare two builds in
one run; --baseline-env NAME=VALUE gives the baseline's server a setting of
its own (`--baseline . --baseline-env REDACTION_BUILTIN=false`: this tree with
redaction off against on). --timeline prints each run's latency second by second from the
start of the clock (where in the run the tail is). After each rate the
dashboard's throughput is given as a share of the plain relay's and of the
stock Channels relay's measured in the same run.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import tests.server  # noqa: E402
from tests.server import DaphneServer, free_port  # noqa: E402

# One turn of a realistic Pipecat session (about a third tokens, a quarter metrics).
TURN = (
    [("user-started-speaking", None)]
    + [("user-transcription", {"text": "I would like to", "final": False, "timestamp": "t", "user_id": "u"})] * 2
    + [
        (
            "user-transcription",
            {"text": "I would like to change my booking", "final": True, "timestamp": "t", "user_id": "u"},
        )
    ]
    + [("user-stopped-speaking", None), ("bot-llm-started", None), ("user-llm-text", {"text": "change my booking"})]
    + [("bot-llm-text", {"text": " token"})] * 14
    + [("bot-tts-started", None), ("bot-started-speaking", None)]
    + [
        ("bot-tts-text", {"text": "Sure, which date?"}),
        ("bot-output", {"text": "Sure, which date?", "spoken": True, "aggregated_by": "sentence"}),
    ]
    + [("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.21}]})] * 5
    + [("metrics", {"processing": [{"processor": "CartesiaTTSService#0", "value": 0.08}]})] * 5
    + [("bot-tts-stopped", None), ("bot-stopped-speaking", None), ("bot-llm-stopped", None)]
)


def message(i: int) -> dict:
    type_, data = TURN[i % len(TURN)]
    msg = {"label": "rtvi-ai", "type": type_}
    if data is not None:
        msg["data"] = data
    return msg


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


WINDOW = 500  # --unpaced: messages a bot may have unacknowledged by the dashboard


@dataclass
class Viewer:
    seqs: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)  # when each latency was taken (--timeline)
    resyncs: int = 0
    last_at: float = 0.0  # when it last received a message


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_peak_mb(pid: int, size: str = "VmHWM") -> float:
    """Peak memory (VmHWM), or another size /proc/<pid>/status gives (VmRSS: now), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{size}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Target:
    """A running server (one or more processes) the load generator can reach."""

    name = ""
    token = ""
    cookie = ""

    def ws_urls(self) -> list[str]:
        raise NotImplementedError

    def pids(self) -> list[int]:
        raise NotImplementedError

    def stored(self, session_ids: list[str]) -> int | None:
        return None

    def stop(self) -> None:
        raise NotImplementedError


class BareTarget(Target):
    name = "bare"
    app = "bench.bare_relay:application"  # the ASGI app daphne serves

    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-p", str(self.port), self.app],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2)

    def ws_urls(self):
        return [f"ws://127.0.0.1:{self.port}"]

    def pids(self):
        return [self.process.pid]

    def stop(self):
        self.process.terminate()
        self.process.wait()


class PlainTarget(BareTarget):
    name = "plain"

    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "bench/plain_relay.py", "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)


class DaphneTarget(BareTarget):
    name = "daphne"
    app = "bench.daphne_relay:application"


class DaphneAcksTarget(BareTarget):
    name = "daphne+acks"
    app = "bench.daphne_relay:acking"


class DaphneAcksTunedTarget(BareTarget):
    name = "daphne+acks+tuned"
    app = "bench.daphne_relay:acking_tuned"


def family(pid: int) -> list[int]:
    """A process and all its descendants (granian serves from a worker process it starts)."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            pids += family(int(child))
    return pids


class UvicornServer(DaphneServer):
    """The dashboard under uvicorn and its `websockets` implementation (bench/asgi_servers.py: lifespan answered).

    One process, asyncio's loop and h11 as daphne has (no uvloop, no httptools), and no permessage-deflate,
    which daphne does not offer either: the same frames on the wire."""

    def command(self):
        return [
            sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(self.port),
            "--ws", "websockets", "--ws-per-message-deflate", "false", "--loop", "asyncio", "--http", "h11",
            "--lifespan", "on", "--no-access-log", "bench.asgi_servers:application",
        ]  # fmt: skip


class UvicornSansioServer(UvicornServer):
    """uvicorn's newer `websockets-sansio` implementation (which `--ws websockets` is to point at, its notice says)."""

    def command(self):
        command = super().command()
        command[command.index("websockets")] = "websockets-sansio"
        return command


class GranianServer(DaphneServer):
    """The dashboard under granian's ASGI interface (bench/asgi_servers.py: lifespan answered): one worker, one
    runtime thread, asyncio's loop."""

    def command(self):
        return [
            sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", "1", "--runtime-threads", "1", "--loop", "asyncio", "bench.asgi_servers:application",
        ]  # fmt: skip


SERVERS = {
    "daphne": (DaphneServer, {}),  # as `make run` starts it: dashboard/server/daphne_tuning.py installed
    "daphne-stock": (DaphneServer, {"DAPHNE_TUNING": "false"}),
    "uvicorn": (UvicornServer, {"DAPHNE_TUNING": "false"}),  # (twisted not imported for nothing)
    "uvicorn-sansio": (UvicornSansioServer, {"DAPHNE_TUNING": "false"}),
    "granian": (GranianServer, {"DAPHNE_TUNING": "false"}),
}


class DashboardTarget(Target):
    name = "dashboard"

    def __init__(
        self, processes: int = 1, code: str | None = None, extra_env: dict | None = None, server: str = "daphne"
    ):
        # Production settings (DEBUG off: no query logging), plain HTTP on loopback.
        env = {
            "DEBUG": "false",
            "SECRET_KEY": "bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECURE_SSL_REDIRECT": "false",
            "SESSION_END_GRACE": "5",
            "INGEST_RATE_LIMIT": "100000",
            **SERVERS[server][1],
            **(extra_env or {}),
        }
        server_class = SERVERS[server][0]
        self.code = Path(code).resolve() if code else None
        if self.code is not None:
            # Another checkout's server and bot package, ahead of this one's.
            env["PYTHONPATH"] = f"{self.code / 'sdk' / 'src'}{os.pathsep}{self.code}"
        with self.code_root():
            first = server_class(env=env).start()
            self.servers = [first] + [
                server_class(env=env, workdir=str(first.workdir)).start(migrate=False) for _ in range(processes - 1)
            ]
            self.token = first.issue("create_ingest_token", "Bench")
            self.cookie = "sessionid=" + first.manage("shell", "-c", STAFF).split()[-1]
        self.name = ("baseline" if self.code else "dashboard" if server == "daphne" else server) + (
            f" x{processes}" if processes > 1 else ""
        )
        self.db = first.env["SQLITE_PATH"] if not first.env.get("DATABASE_URL") else None

    @contextlib.contextmanager
    def code_root(self):
        """tests.server runs daphne and manage.py from its ROOT: point it at the other checkout meanwhile."""
        if self.code is None:
            yield
            return
        root, tests.server.ROOT = tests.server.ROOT, self.code
        try:
            yield
        finally:
            tests.server.ROOT = root

    def ws_urls(self):
        return [s.ws_url for s in self.servers]

    def pids(self):
        return [pid for s in self.servers for pid in family(s.process.pid)]

    def stored(self, session_ids):
        if self.db is None:
            with self.code_root():
                out = self.servers[0].manage(
                    "shell",
                    "-c",
                    f"from rtvi_monitor.models import Event; print(Event.objects.filter(session__session_id__in={session_ids!r}).count())",
                )
            return int(out.strip().splitlines()[-1])
        with sqlite3.connect(self.db) as db:
            marks = ",".join("?" * len(session_ids))
            sql = f"SELECT count(*) FROM rtvi_monitor_event e JOIN rtvi_monitor_session s ON e.session_id = s.id WHERE s.session_id IN ({marks})"
            return db.execute(sql, session_ids).fetchone()[0]

    def stop(self):
        for server in self.servers:
            server.stop()


STAFF = """
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_staff": True})
user.set_password("bench-password-1"); user.save()
roles = {"role": "admin"} if any(f.name == "role" for f in Membership._meta.get_fields()) else {}  # a baseline before roles
Membership.objects.update_or_create(user=user, organization=Organization.objects.get(name="Bench"), defaults=roles)
# A logged-in browser session, made directly: secure cookies cannot be set over plain HTTP.
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
session = SessionStore()
session.update({SESSION_KEY: str(user.pk), BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
                HASH_SESSION_KEY: user.get_session_auth_hash()})
session.create()
print(session.session_key)
"""


def acknowledged(raw: str) -> int:
    """How many messages one dashboard frame acknowledges: {"ack": n} one, {"acks": [[a, b], ...]} each run's."""
    if '"acks"' not in raw:
        return 1  # {"ack": n}, or an error that is final for its message
    return sum(last - first + 1 for first, last in json.loads(raw)["acks"])


def whole(frame: dict, pieces: list[str]) -> dict | None:
    """A browser's frame; None while it comes in {"type": "part"} pieces (too big for one message), as the page joins them."""
    if frame.get("type") != "part":
        return frame
    pieces.append(frame["data"])
    if not frame["last"]:
        return None
    joined = json.loads("".join(pieces))
    pieces.clear()
    return joined


HELLO = {"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "2.1.0"}}


class Load:
    """One load-generator process's bots and browsers: generate() runs them; bench/scale.py too, in phases."""

    open_timeout = 10  # seconds a browser waits for its socket to open (websockets' default)

    def __init__(self, info: dict, rate: float, seconds: float, unpaced: bool):
        self.info, self.urls, self.token, self.cookie = info, info["urls"], info["token"], info["cookie"]
        self.dashboard, self.rate, self.unpaced = info["dashboard"], rate, unpaced
        self.query = "?acks=ranges" if self.dashboard and info["acks"] == "ranges" else ""
        self.clients = {}  # --client: each bot's DashboardClient, made at its hello
        self.per_bot = int(rate * seconds)
        self.sockets = {}  # each bot's connection, open (and, on the dashboard, its session open) before the clock starts
        self.attach_ms: list[float] = []
        self.go = asyncio.Event()
        self.done = asyncio.Event()

    async def view(self, url: str, session_id: str, stats: Viewer, ready: asyncio.Event):
        headers = {"Cookie": self.cookie} if self.cookie else {}
        origin = url.replace("ws", "http", 1)
        acked = [0, time.time()]  # events counted and time at the last ack
        pieces: list[str] = []  # a frame that came as {"type": "part"} messages, so far
        async with websockets.connect(
            f"{url}/ws/sessions/{session_id}/",
            additional_headers=headers,
            origin=origin,
            max_queue=None,
            open_timeout=self.open_timeout,
        ) as socket:
            if not self.dashboard:
                ready.set()  # the relays send nothing until a bot does
            while True:
                try:
                    raw = await asyncio.wait_for(socket.recv(), 1)
                except TimeoutError:
                    if self.done.is_set():
                        return
                    continue
                now = time.time()
                frame = whole(json.loads(raw), pieces)
                if frame is None:
                    continue
                if frame.get("type") == "snapshot":
                    stats.seqs.extend(e["seq"] for e in frame["events"])  # what it had missed: no latency
                    ready.set()  # a page watches once it has its snapshot; the clock starts when all do
                elif "events" in frame:  # a batch (the dashboard: the reducer's patch and the stored events)
                    for event in frame["events"]:
                        if event.get("sent_at"):
                            stats.latencies.append(now - event["sent_at"])
                            stats.received_at.append(now)
                        stats.seqs.append(event["seq"])
                    stats.last_at = now
                    # Acknowledge as the dashboard's page does: every 200 versions or half second.
                    version = frame.get("to", stats.seqs[-1] if stats.seqs else 0)
                    if version - acked[0] >= 200 or now - acked[1] >= 0.5:
                        await socket.send(json.dumps({"ack": version}))
                        acked[:] = [version, now]
                elif frame.get("type") == "resync":
                    stats.resyncs += 1
                    await socket.send(json.dumps({"snapshot": True}))
                elif "seq" in frame:  # the bare and plain relays forward the bot's frame as is
                    stats.latencies.append(now - frame["sent_at"])
                    stats.received_at.append(now)
                    stats.seqs.append(frame["seq"])
                    stats.last_at = now

    async def watch(self, pages: list[tuple[str, str]]) -> tuple[list[Viewer], list[asyncio.Task]]:
        """A browser on each (url, session id); returns once every one watches (has its snapshot)."""
        viewer_stats, readies, tasks = [], [], []
        for url, session_id in pages:
            stats = Viewer()
            viewer_stats.append(stats)
            ready = asyncio.Event()
            readies.append(ready)
            tasks.append(asyncio.create_task(self.view(url, session_id, stats, ready)))
        for ready, task in zip(readies, tasks, strict=True):
            waiting = asyncio.ensure_future(ready.wait())
            await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
            if not ready.is_set():
                waiting.cancel()
                task.result()  # a browser that could not watch: its error, not a wait for ever
        return viewer_stats, tasks

    async def client_bot(self, index: int, session_id: str):
        """The bot package's client: send() at the rate, its batching and acks as a real bot has them."""
        client = self.clients[session_id]
        await self.go.wait()
        await asyncio.sleep(random.random() / self.rate)
        start = time.monotonic()
        for seq in range(2, self.per_bot + 2):
            delay = start + (seq - 2) / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            client.send(message(seq + index))
        return client

    async def bot(self, index: int, session_id: str):
        if session_id in self.clients:
            return await self.client_bot(index, session_id)
        async with self.sockets[session_id] as socket:
            acked = [0]  # messages acknowledged (by the dashboard; the relays send nothing)
            window = asyncio.Event()

            async def drain():
                async for raw in socket:
                    acked[0] += acknowledged(raw) if self.dashboard else 1
                    window.set()

            drainer = asyncio.create_task(drain())
            await self.go.wait()
            if not self.unpaced:
                await asyncio.sleep(random.random() / self.rate)  # spread the bots over one interval
            start = time.monotonic()
            for seq in range(2, self.per_bot + 2):  # seq 1 is the hello
                delay = start + (seq - 2) / self.rate - time.monotonic()
                if self.unpaced:
                    # As fast as it can, with at most WINDOW unacknowledged (as the bot client keeps its
                    # buffer): a server that stores before it acks is not flooded past what it can store.
                    while self.dashboard and seq - 2 - acked[0] >= WINDOW:
                        window.clear()
                        await window.wait()
                    if seq % 50 == 0:
                        await asyncio.sleep(0)  # the other bots of this process too
                elif delay > 0:
                    await asyncio.sleep(delay)
                frame = {"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message(seq + index)}
                await socket.send(json.dumps(frame))
            return drainer, socket

    async def attach(self, i: int, session_id: str):
        """A bot connects; on the dashboard it says hello (seq 1) and waits for the ack: its session is open."""
        url = self.urls[i % len(self.urls)]
        begun = time.monotonic()
        if self.info["client"]:
            # The bot package's client, whose first message (seq 1) is the hello.
            from rtvi_dashboard import DashboardClient

            client = self.clients[session_id] = DashboardClient(url, self.token, session_id)
            client.start()
            client.send(HELLO)
            assert await client.flush(60), f"{session_id}: the hello was not acknowledged"
        else:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            socket = self.sockets[session_id] = await websockets.connect(
                f"{url}/ws/ingest/{session_id}/{self.query}",
                additional_headers=headers,
                max_queue=None,
                open_timeout=60,
            )
            if self.dashboard:  # a browser may watch only a session that exists
                hello = {"seq": 1, "direction": "to-client", "sent_at": time.time(), "message": HELLO}
                await socket.send(json.dumps(hello))
                await socket.recv()
        self.attach_ms.append((time.monotonic() - begun) * 1000)

    async def settle(self, viewer_stats: list[Viewer], patience: float = 3) -> None:
        """Let the last relays arrive: until every viewer has everything, or nothing came for 3 s (patience); then stop them."""
        expected_each = self.per_bot
        while True:
            before = sum(len(v.seqs) for v in viewer_stats)
            if all(len(v.seqs) >= expected_each for v in viewer_stats):
                break
            await asyncio.sleep(patience)
            if sum(len(v.seqs) for v in viewer_stats) == before:
                break
        self.done.set()

    @staticmethod
    async def finish(finished: list) -> None:
        """The bots' ends, once everything was relayed: what bot() returned for each."""
        for result in finished:
            if isinstance(result, tuple):
                result[0].cancel()  # the drainer
            else:
                await result.close()  # a DashboardClient: everything was relayed, so acked


def tally(viewer_stats: list[Viewer], per_bot: int) -> dict:
    """What the browsers received of the bots' per_bot messages each: latencies, how many, gaps, resyncs."""
    expected = set(range(2, per_bot + 2))
    gaps = 0
    for v in viewer_stats:
        got = sorted(set(v.seqs) & expected)
        gaps += sum(1 for a, b in itertools.pairwise(got) if b != a + 1)
    return {
        "latencies": [x for v in viewer_stats for x in v.latencies],
        "received_at": [x for v in viewer_stats for x in v.received_at],
        "received": sum(len(set(v.seqs) & expected) for v in viewer_stats),
        "gaps": gaps,
        "resyncs": sum(v.resyncs for v in viewer_stats),
    }


async def generate(
    info: dict, indices: list[int], rate: float, seconds: float, viewers: int, tag: str, started, sent, unpaced
) -> dict:
    """One load-generator process: some of the bots, and their sessions' browsers."""
    load = Load(info, rate, seconds, unpaced)
    urls = load.urls
    # Every bot at once, as after a restart or a deploy; timed, then the paced run starts from attached bots.
    await asyncio.gather(*(load.attach(i, f"bench-{tag}-{i}") for i in indices))
    # Browsers of one session on every process, round robin: scale-out must deliver across them.
    viewer_stats, tasks = await load.watch(
        [(urls[(i + v) % len(urls)], f"bench-{tag}-{i}") for i in indices for v in range(viewers)]
    )
    bot_tasks = [asyncio.create_task(load.bot(i, f"bench-{tag}-{i}")) for i in indices]
    await asyncio.to_thread(started.wait)
    cpu_start = time.process_time()
    go_at = time.time()
    load.go.set()
    finished = await asyncio.gather(*bot_tasks)
    load_cpu = time.process_time() - cpu_start
    await asyncio.to_thread(sent.wait)
    await load.settle(viewer_stats)
    await asyncio.gather(*tasks)
    await load.finish(finished)
    return {
        **tally(viewer_stats, load.per_bot),
        "load_cpu": load_cpu,
        "go_at": go_at,
        "attach_ms": load.attach_ms,
        "last_at": max((v.last_at for v in viewer_stats), default=go_at),
    }


def _generator_process(args) -> dict:
    return asyncio.run(generate(*args))


def load_info(target: Target, acks: str = "ranges", client: bool = False) -> dict:
    """What a load-generator process needs of the target (picklable)."""
    return {
        "urls": target.ws_urls(),
        "token": target.token,
        "cookie": target.cookie,
        "dashboard": isinstance(target, DashboardTarget),
        "acks": acks,
        "client": client and isinstance(target, DashboardTarget),
    }


def run_load(
    target: Target,
    bots: int,
    rate: float,
    seconds: float,
    viewers: int,
    tag: str,
    generators: int,
    unpaced: bool,
    acks: str = "ranges",
    client: bool = False,
) -> dict:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    manager = context.Manager()
    started, sent = manager.Barrier(generators + 1), manager.Barrier(generators + 1)
    info = load_info(target, acks, client)
    shares = [list(range(g, bots, generators)) for g in range(generators)]
    with context.Pool(generators) as pool:
        pending = pool.map_async(
            _generator_process,
            [(info, share, rate, seconds, viewers, tag, started, sent, unpaced) for share in shares],
        )
        started.wait()
        pids = target.pids()
        cpu_before = sum(proc_cpu_seconds(p) for p in pids)
        wall_start = time.monotonic()
        time.sleep(seconds)
        sent.wait()
        wall = time.monotonic() - wall_start
        cpu = (sum(proc_cpu_seconds(p) for p in pids) - cpu_before) / wall * 100
        results = pending.get()
    manager.shutdown()

    per_bot = int(rate * seconds)
    latencies = [x for r in results for x in r["latencies"]]
    attach_ms = [x for r in results for x in r["attach_ms"]]
    received = sum(r["received"] for r in results)
    sent_total = bots * per_bot
    stored = target.stored([f"bench-{tag}-{i}" for i in range(bots)])
    span = max(r["last_at"] for r in results) - min(r["go_at"] for r in results)
    return {
        "target": target.name + (" (client)" if info["client"] else ""),
        "offered": float("inf") if unpaced else bots * rate,
        "delivered_per_s": received / (span if unpaced and span > 0 else seconds),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "lost": sent_total * viewers - received,
        "gaps": sum(r["gaps"] for r in results),
        "resyncs": sum(r["resyncs"] for r in results),
        "cpu_pct": cpu,
        "load_cpu_pct": sum(r["load_cpu"] for r in results) / wall * 100,
        "peak_mb": sum(proc_peak_mb(p) for p in pids),
        "stored": None if stored is None else stored - (bots if info["dashboard"] else 0),
        "sent": sent_total,
        "attach_p50_ms": percentile(attach_ms, 50),
        "attach_max_ms": max(attach_ms, default=float("nan")),
        "timeline": timeline(results),
    }


def timeline(results: list[dict], step: float = 1.0) -> list[tuple[float, int, float, float, float]]:
    """Latency by when it was received, in steps from the start of the clock: (from s, count, p50, p99, max ms)."""
    go_at = min(r["go_at"] for r in results)
    steps: dict[int, list[float]] = {}
    for r in results:
        for at, latency in zip(r["received_at"], r["latencies"], strict=True):
            steps.setdefault(int((at - go_at) // step), []).append(latency * 1000)
    return [
        (k * step, len(v), percentile(v, 50), percentile(v, 99), max(v)) for k, v in sorted(steps.items()) if k >= 0
    ]


def row(r: dict) -> str:
    stored = "n/a" if r["stored"] is None else f"{r['stored']}/{r['sent']}"
    return (
        f"| {r['target']} | {r['offered']:.0f} | {r['delivered_per_s']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
        f"{r['lost']} | {r['gaps']} | {r['resyncs']} | {r['cpu_pct']:.0f}% | {r['peak_mb']:.0f} | {stored} | "
        f"{r['load_cpu_pct']:.0f}% | {r['attach_p50_ms']:.0f} / {r['attach_max_ms']:.0f} |"
    )


HEADER = (
    "| server | offered msg/s | delivered msg/s (to browsers) | p50 ms | p99 ms | lost | gaps | resyncs | server CPU "
    "| peak MB | stored | load generator CPU | bots attached, p50 / max ms |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def machine() -> str:
    return (
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"REDIS_URL={'set' if os.getenv('REDIS_URL') else 'unset'}, DATABASE_URL={'set' if os.getenv('DATABASE_URL') else 'unset'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bots", type=int, default=100)
    parser.add_argument("--rate", type=float, default=30, help="messages per second per bot")
    parser.add_argument("--sweep", default="", help="comma-separated per-bot rates to try in turn")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--viewers", type=int, default=2)
    parser.add_argument(
        "--target",
        choices=[
            "all", "both", "floors", "servers", "dashboard", "bare", "plain", "daphne", "daphne+acks",
            "daphne+acks+tuned",
        ],
        default="all",
    )  # fmt: skip
    parser.add_argument(
        "--servers",
        default=",".join(SERVERS),
        help="--target servers: the ASGI servers to run the dashboard under, in this order (then the plain relay)",
    )
    parser.add_argument("--unpaced", action="store_true", help="bots send as fast as they can (throughput)")
    parser.add_argument("--processes", type=int, default=1, help="dashboard server processes (needs REDIS_URL)")
    parser.add_argument("--generators", type=int, default=2, help="load generator processes")
    parser.add_argument(
        "--acks", choices=["ranges", "each"], default="ranges", help="bench bots ask for ranged acks, or not"
    )
    parser.add_argument("--client", action="store_true", help="bots are the bot package's DashboardClient (batching)")
    parser.add_argument("--timeline", action="store_true", help="also print each run's latency second by second")
    parser.add_argument("--baseline", metavar="DIR", help="also run the dashboard from this checkout, as 'baseline'")
    parser.add_argument(
        "--baseline-env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a setting for the baseline's server only (with --baseline . : this tree with a setting changed,"
        " e.g. REDACTION_BUILTIN=false)",
    )
    args = parser.parse_args()
    baseline_env = dict(pair.split("=", 1) for pair in args.baseline_env)
    if args.client and args.unpaced:
        parser.error("--client is paced (a real bot sends as things happen)")

    rates = [float(r) for r in args.sweep.split(",")] if args.sweep else [args.rate]
    print(machine())
    print(f"{args.bots} bots, {args.viewers} browsers per session, {args.seconds:g} s per run")
    print(HEADER)
    kinds = {
        "all": ["dashboard", "bare", "plain"],
        "both": ["dashboard", "bare"],
        "floors": ["dashboard", "daphne", "daphne+acks", "daphne+acks+tuned", "plain"],
        "servers": ["dashboard" if server == "daphne" else server for server in args.servers.split(",")] + ["plain"],
    }.get(args.target, [args.target])
    if args.baseline:
        kinds.insert(0, "baseline")
    targets = {
        "dashboard": lambda: DashboardTarget(args.processes),
        "baseline": lambda: DashboardTarget(args.processes, code=args.baseline, extra_env=baseline_env),
        "bare": BareTarget,
        "plain": PlainTarget,
        "daphne": DaphneTarget,
        "daphne+acks": DaphneAcksTarget,
        "daphne+acks+tuned": DaphneAcksTunedTarget,
        **{
            server: (lambda server=server: DashboardTarget(args.processes, server=server))
            for server in SERVERS
            if server != "daphne"
        },
    }
    results: dict[float, dict[str, dict]] = {}
    for kind in kinds:
        for rate in rates:
            target = targets[kind]()
            try:
                tag = f"{kind}{rate:g}-{os.getpid()}-{int(time.time())}"  # fresh session ids, even in a shared database
                result = run_load(
                    target,
                    args.bots,
                    rate,
                    args.seconds,
                    args.viewers,
                    tag,
                    args.generators,
                    args.unpaced,
                    args.acks,
                    args.client,
                )
            finally:
                target.stop()
            results.setdefault(rate, {})[kind] = result
            print(row(result), flush=True)
            if args.timeline:
                cells = (f"{at:g}s {n} {p50:.0f}/{p99:.0f}/{top:.0f}" for at, n, p50, p99, top in result["timeline"])
                print(f"  {result['target']} by second (count p50/p99/max ms): " + ", ".join(cells), flush=True)
    for rate, by_kind in results.items():
        for line in ratios(by_kind):
            print(f"{args.bots} bots x {rate:g} msg/s: {line}")


def ratios(by_kind: dict[str, dict]) -> list[str]:
    """Each dashboard's delivered msg/s as a share of the relays' measured in the same run, and CPU per message."""
    lines = []
    for kind in ("baseline", "dashboard", *(server for server in SERVERS if server != "daphne")):
        mine = by_kind.get(kind)
        if mine is None:
            continue
        parts = []
        for relay, label in (
            ("plain", "plain websockets relay"),
            ("daphne", "bare ASGI relay under daphne"),
            ("daphne+acks", "bare ASGI relay under daphne acking each message"),
            ("daphne+acks+tuned", "same with the dashboard's daphne tuning"),
            ("bare", "stock Channels relay"),
            ("dashboard", "dashboard under daphne"),
        ):
            if relay == kind:
                continue
            if relay in by_kind:
                share = mine["delivered_per_s"] / by_kind[relay]["delivered_per_s"]
                parts.append(f"{share:.0%} of the {label}'s throughput")
        cpu_per_k = mine["cpu_pct"] / (mine["delivered_per_s"] / 1000) if mine["delivered_per_s"] else float("nan")
        parts.append(f"{cpu_per_k:.1f}% CPU per 1,000 msg/s delivered")
        lines.append(f"{mine['target']}: " + ", ".join(parts))
    return lines


if __name__ == "__main__":
    main()
