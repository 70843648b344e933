"""Scale: N bots x R msg/s on one server, browsers on the Overview: memory per live session and per browser.

One server run per entry of --processes, each measured in phases:

1. idle: the server after a warm-up (a few bots, a session page and an Overview
   for a few seconds, then gone: code, templates and caches loaded) and after
   logging the Overview's browsers in (each its own login, as a person's);
2. bots: every bot attached at once (as after a deploy), then each streaming
   bench/relay.py's realistic Pipecat turn at --rate;
3. + session viewers: --viewers-sessions sessions get one session page each
   (bench/relay.py's viewer: snapshot, batches, acks), for the bot-to-browser
   latency;
4. + Overview: --overview browsers open the Overview as a browser does
   (static/js/overview.js): GET /, its session socket (/ws/sessions/), and a
   fetch of the panel (/overview/panel/) whenever the socket says something,
   at most one every 2 s and never two at once, and every 30 s regardless.

Each phase is measured for --phase seconds, from a few seconds after its
bots or browsers attached (the bots stream on through all of it). Memory is
the server's RSS (VmRSS, summed over its processes), sampled twice a second
and averaged over each measured window: KB per live session = (bots - idle) /
N; per browser = (with them - before them, less the sessions' own growth
between the two, measured in phase 2) / their number. Latencies, acks and CPU
are those of phase 4, the whole load; "bots alone" those of phase 2.

Runs: "embedded" is one process on the defaults (SQLite, in-memory channel
layer); a number N is N processes on REDIS_URL and DATABASE_URL (each run on a
fresh PostgreSQL database made beside DATABASE_URL's, dropped after), bots and
browsers spread over the processes as bench/relay.py --processes does. Redis
pub/sub is server-wide, whatever the database number: give the bench a Redis
of its own (here port 6391) when tests may run against the machine's.

    .venv/bin/python bench/scale.py --bots 100 --phase 10 --processes embedded          # quick check
    redis-server --port 6391 --bind 127.0.0.1 --daemonize yes --save "" --appendonly no
    export REDIS_URL=redis://127.0.0.1:6391/0 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/scale.py --bots 1000 --rate 3 --overview 20 --viewers-sessions 50 --processes embedded,1,2
"""

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import random
import re
import resource
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.relay import (
    DashboardTarget,
    Load,
    load_info,
    machine,
    percentile,
    proc_cpu_seconds,
    proc_peak_mb,
    tally,
    whole,
)

WARM_BOTS = 10
MIN_GAP = 2.0  # static/js/overview.js: at most one panel fetch per 2 s
EVERY = 30.0  # and one every 30 s whatever the socket says
OPEN_TIMEOUT = 180  # seconds a page may take to open (its socket accepted, its first data in) before the run fails


# -- The bots: bench/relay.py's, their sockets timed --------------------------------------------


class Timed:
    """A bot's socket that times its messages: send to the dashboard's ack (an ack means stored), and pacing."""

    def __init__(self, socket, rate: float):
        self.socket, self.rate = socket, rate
        self.sent: dict[int, float] = {}
        self.first: tuple[int, float] | None = None
        self.last = 1  # the last seq sent (1: the hello, sent before this wrapper)
        self.acks: list[tuple[float, float]] = []  # (acked at, seconds since sent), a message each
        self.lags: list[tuple[float, float]] = []  # (sent at, seconds later than the bot's schedule)

    async def __aenter__(self):
        await self.socket.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self.socket.__aexit__(*exc)

    async def send(self, text: str) -> None:
        now = time.time()
        seq = json.loads(text)["seq"]
        self.sent[seq] = now
        if self.first is None:
            self.first = (seq, now)
        self.lags.append((now, now - self.first[1] - (seq - self.first[0]) / self.rate))
        await self.socket.send(text)
        self.last = seq  # sent (a send the closing socket refused is not)

    def __aiter__(self):
        return self.replies()

    async def replies(self):
        async for raw in self.socket:
            now = time.time()
            reply = json.loads(raw)
            runs = reply.get("acks") or ([[reply["ack"]] * 2] if isinstance(reply.get("ack"), int) else [])
            for first, last in runs:
                for seq in range(first, last + 1):
                    sent = self.sent.pop(seq, None)
                    if sent is not None:
                        self.acks.append((now, now - sent))
            yield raw


class Reopening(Load):
    """bench/relay.py's bots and session pages, which connect again when the server drops them, as the bot package
    and the pages do (daphne closes a socket its application has not accepted in 5 s: a server that busy does)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.open_timeout = OPEN_TIMEOUT  # a page waits; how long it took to watch is measured
        self.retries: Counter = Counter()

    async def again(self, kind: str, attempt, *args):
        delay = 0.5
        while True:
            try:
                return await attempt(*args)
            except (OSError, TimeoutError, websockets.InvalidHandshake, websockets.ConnectionClosedError) as error:
                # InvalidMessage: the server closed the connection before answering the handshake.
                self.retries[f"{kind} {type(error).__name__}"] += 1
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            delay = min(delay * 2, 10.0)

    async def attach(self, i: int, session_id: str):
        return await self.again("bot", super().attach, i, session_id)

    async def view(self, url: str, session_id: str, stats, ready: asyncio.Event):
        return await self.again("session page", super().view, url, session_id, stats, ready)


async def scale_generate(info: dict, indices: list[int], rate: float, viewed: dict, tag: str, sync):
    """One load-generator process: its share of the bots from the start, its sessions' viewers from phase 3.

    The bots stream until the main process has measured every phase (its "stop").
    """
    barriers = sync["attached"], sync["viewers"], sync["watching"], sync["stop"]
    try:
        sync["pids"].append(os.getpid())
        load = Reopening(info, rate, 86400, False)
        await asyncio.gather(*(load.attach(i, f"bench-{tag}-{i}") for i in indices))
        timed = {session_id: Timed(socket, rate) for session_id, socket in load.sockets.items()}
        load.sockets.update(timed)
        bot_tasks = [asyncio.create_task(load.bot(i, f"bench-{tag}-{i}")) for i in indices]
        await asyncio.to_thread(barriers[0].wait)
        load.go.set()
        await asyncio.to_thread(barriers[1].wait)
        urls = load.urls
        # One browser a session, on the bot's process or the other, in turn: scale-out delivers across them.
        # Ten at a time: people open pages, not a storm (a socket daphne has not accepted in 5 s it drops).
        pages = [(urls[(i + k) % len(urls)], f"bench-{tag}-{i}") for i, k in viewed.items()]
        viewers, tasks = [], []
        for start in range(0, len(pages), 10):
            some, watching = await load.watch(pages[start : start + 10])
            viewers += some
            tasks += watching
        await asyncio.to_thread(barriers[2].wait)
        await asyncio.to_thread(barriers[3].wait)
        # Each bot's call is over: its socket closed (1000); its next send ends it.
        await asyncio.gather(*(bot.socket.close() for bot in timed.values()))
        await asyncio.gather(*bot_tasks, return_exceptions=True)
        await load.settle(viewers, patience=15)  # a server behind relays on after the bots stop
        await asyncio.gather(*tasks)
    except BaseException:
        for barrier in barriers:
            barrier.abort()  # the main process stops waiting, and shows this error
        raise
    sent = {session_id: bot.last - 1 for session_id, bot in timed.items()}  # seq 2 to last: after the hello
    # What went before a viewer's snapshot (the session's last BROWSER_RECENT_EVENTS) was never its to receive.
    due = sum(
        sent[session_id] - (min((s for s in v.seqs if s >= 2), default=2) - 2)
        for (_, session_id), v in zip(pages, viewers, strict=True)
    )
    received = tally(viewers, load.per_bot)
    return {
        **received,
        "lost": due - received["received"],
        "sent": sum(sent.values()),
        "acks": [x for t in timed.values() for x in t.acks],
        "lags": [x for t in timed.values() for x in t.lags],
        "attach_ms": load.attach_ms,
        "retries": load.retries,
    }


def _scale_process(args) -> dict:
    return asyncio.run(scale_generate(*args))


# -- The Overview's browsers -------------------------------------------------------------------


async def log_in(base: str, username: str, password: str) -> str:
    """A browser's login through the login form; returns its session cookie ("sessionid=...").

    The server's cookies are Secure (production settings) and this is plain HTTP on loopback, so they
    are read off Set-Cookie and sent back by hand, as a browser behind the TLS proxy would.
    """
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        form = await http.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        jar = SimpleCookie()
        for header in form.headers.get_list("set-cookie"):
            jar.load(header)
        http.cookies.clear()
        answer = await http.post(
            "/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Cookie": f"csrftoken={jar['csrftoken'].value}", "Origin": base, "Referer": f"{base}/login/"},
        )
        for header in answer.headers.get_list("set-cookie"):
            jar.load(header)
        if answer.status_code != 302 or "sessionid" not in jar:
            raise RuntimeError(f"login refused: HTTP {answer.status_code}")
        return f"sessionid={jar['sessionid'].value}"


@dataclass
class Browser:
    """One browser on the Overview: what its session socket brought, and its refreshes of the panel."""

    cookie: str
    page_ms: float = math.nan
    frames: list[tuple[float, int]] = field(default_factory=list)  # (received at, characters)
    kinds: Counter = field(default_factory=Counter)
    refreshes: list[tuple[float, float, int]] = field(default_factory=list)  # (at, ms, HTTP status)
    updated: list[tuple[float, int]] = field(default_factory=list)  # (at, 1): an "updated" frame, a session's row
    failures: Counter = field(default_factory=Counter)  # the socket's failed opens and closes, by kind
    largest: int = 0  # characters of the largest message (the "live" list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # listed and refreshed once: it watches


async def overview(http_url: str, browser: Browser, done: asyncio.Event) -> None:
    """What static/js/overview.js (and live.js) does on the network, with the page's own URLs."""
    headers = {"Cookie": browser.cookie, "Accept": "text/html"}
    async with httpx.AsyncClient(base_url=http_url, timeout=120) as http:
        begun = time.monotonic()
        page = await http.get("/", headers=headers)
        browser.page_ms = (time.monotonic() - begun) * 1000
        if page.status_code != 200:
            raise RuntimeError(f"the Overview answered HTTP {page.status_code}")
        panel_url = re.search(r'data-panel-url="([^"]+)"', page.text).group(1)
        ws_path = re.search(r'data-ws="([^"]+)"', page.text).group(1)
        due = asyncio.Event()

        async def refresh():
            last = -math.inf
            while True:
                await due.wait()
                await asyncio.sleep(max(0.0, last + MIN_GAP - time.monotonic()))
                due.clear()
                last = time.monotonic()
                answer = await http.get(panel_url, headers=headers)
                browser.refreshes.append((time.time(), (time.monotonic() - last) * 1000, answer.status_code))
                if "live" in browser.kinds or "changed" in browser.kinds:  # the list, or a change ping (?changes=1)
                    browser.ready.set()

        async def every():
            while True:
                await asyncio.sleep(EVERY)
                due.set()

        timers = [asyncio.create_task(refresh()), asyncio.create_task(every())]
        try:
            await keep_open(http_url.replace("http", "ws", 1) + ws_path, http_url, browser, due, done)
        finally:
            for task in timers:
                task.cancel()


async def keep_open(url: str, origin: str, browser: Browser, due: asyncio.Event, done: asyncio.Event) -> None:
    """live.js: the socket, opened again after a jittered back-off (0.5 s, doubling to 10 s) when it fails or closes."""
    delay, stop = 0.5, asyncio.ensure_future(done.wait())
    try:
        while not done.is_set():
            try:
                socket = await websockets.connect(
                    url,
                    additional_headers={"Cookie": browser.cookie},
                    origin=origin,
                    open_timeout=OPEN_TIMEOUT,
                    max_size=None,  # a browser takes any size
                    max_queue=None,
                )
            except (OSError, TimeoutError, websockets.InvalidHandshake) as error:
                # InvalidMessage: the server closed the connection before answering the handshake.
                browser.failures[f"open: {type(error).__name__}"] += 1
            else:
                delay = 0.5
                reading = asyncio.ensure_future(listen(socket, browser, due))
                await asyncio.wait([reading, stop], return_when=asyncio.FIRST_COMPLETED)
                if done.is_set():
                    await socket.close()
                    await reading
                    return
                reading.result()
                browser.failures[f"closed: {socket.close_code}"] += 1
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            delay = min(delay * 2, 10.0)
    finally:
        stop.cancel()


async def listen(socket, browser: Browser, due: asyncio.Event) -> None:
    """The Overview's socket as the page reads it: every frame schedules a refresh; the rows' updates noted."""
    pieces: list[str] = []
    with contextlib.suppress(websockets.ConnectionClosed):
        async for raw in socket:
            now = time.time()
            browser.frames.append((now, len(raw)))
            browser.largest = max(browser.largest, len(raw))
            due.set()  # overview.js: every frame schedules a refresh
            frame = whole(json.loads(raw), pieces)
            if frame is None:
                continue
            browser.kinds[frame.get("type")] += 1
            if frame.get("type") == "updated":  # a write's rows in one frame ("session": one, before)
                browser.updated.append((now, len(frame.get("sessions") or [frame.get("session")])))


# -- The server's memory and CPU, sampled -----------------------------------------------------


class Probe:
    """The server's RSS and CPU seconds (summed over its processes), and the load generators' CPU, twice a second."""

    def __init__(self, pids: list[int]):
        self.pids, self.generators = pids, []
        self.samples: list[tuple[float, float, float, dict[int, float]]] = []  # (at, RSS MB, server CPU s, generators')

    async def run(self) -> None:
        while True:
            generators = {}
            for pid in self.generators:
                with contextlib.suppress(OSError):  # a generator that has just exited
                    generators[pid] = proc_cpu_seconds(pid)
            rss = sum(proc_peak_mb(p, "VmRSS") for p in self.pids)
            self.samples.append((time.time(), rss, sum(proc_cpu_seconds(p) for p in self.pids), generators))
            await asyncio.sleep(0.5)

    def between(self, window: tuple[float, float]) -> list:
        return [s for s in self.samples if window[0] <= s[0] <= window[1]]

    def rss(self, window) -> float:
        return statistics.fmean(s[1] for s in self.between(window))

    def growth(self, window) -> float:
        """MB per second, least squares over the window."""
        inside = self.between(window)
        return statistics.linear_regression([s[0] for s in inside], [s[1] for s in inside]).slope

    def cpu(self, window) -> tuple[float, float]:
        """The server's CPU and the busiest load generator's, % of one core, over the window."""
        inside = self.between(window)
        first, last = inside[0], inside[-1]
        wall = last[0] - first[0]
        busiest = max((last[3][p] - first[3].get(p, last[3][p]) for p in last[3]), default=math.nan)
        return (last[2] - first[2]) / wall * 100, busiest / wall * 100


# -- One run --------------------------------------------------------------------------------------


def within(pairs: list[tuple[float, float]], window: tuple[float, float]) -> list[float]:
    return [value for at, value in pairs if window[0] <= at <= window[1]]


def middle(window: tuple[float, float]) -> float:
    return (window[0] + window[1]) / 2


async def drained(target: DashboardTarget, session_ids: list[str], sent: int) -> tuple[int | None, float]:
    """The bots' messages the server stored (hellos aside), once it stored what it still held: a server behind stores
    on after the bots stop. Returns (count, seconds it took after the run), or (None, 0) if it cannot say."""
    began, last = time.monotonic(), -1
    while True:
        stored = await asyncio.to_thread(target.stored, session_ids)
        if stored is None:
            return None, 0.0
        stored -= len(session_ids)
        if stored >= sent or stored == last or time.monotonic() - began > 300:
            return stored, time.monotonic() - began
        last = stored
        await asyncio.sleep(5)


def timeline(probe: Probe, windows: dict[str, tuple[float, float]]) -> str:
    """The server's RSS second by second from the idle window on, each phase's measured window marked."""
    start = windows["idle"][0]
    cells = []
    for second in range(int(probe.samples[-1][0] - start) + 1):
        inside = probe.between((start + second, start + second + 1))
        if inside:
            marks = [name for name, (a, b) in windows.items() if a <= start + second + 0.5 <= b]
            cells.append(f"{second}s {inside[0][1]:.1f}" + (f" [{marks[0]}]" if marks else ""))
    return ", ".join(cells)


async def warm_up(target: DashboardTarget, cookie: str, rate: float, tag: str) -> None:
    """A few bots, a session page and an Overview on every process for a few seconds: code and templates loaded."""
    load = Reopening(load_info(target), rate, 5, False)
    ids = [(i, f"warm-{tag}-{i}") for i in range(WARM_BOTS)]
    await asyncio.gather(*(load.attach(i, session_id) for i, session_id in ids))
    viewers, tasks = await load.watch([(load.urls[i % len(load.urls)], session_id) for i, session_id in ids[:2]])
    done = asyncio.Event()
    browsers = [Browser(cookie) for _ in target.servers]
    pages = [asyncio.create_task(overview(s.url, b, done)) for s, b in zip(target.servers, browsers, strict=True)]
    bots = [asyncio.create_task(load.bot(i, session_id)) for i, session_id in ids]
    load.go.set()
    finished = await asyncio.gather(*bots)
    await load.settle(viewers)
    await asyncio.gather(*tasks)
    await load.finish(finished)
    await asyncio.gather(*(b.ready.wait() for b in browsers))
    done.set()
    await asyncio.gather(*pages)


async def measure(target: DashboardTarget, args, tag: str) -> dict:
    probe = Probe(target.pids())
    sampler = asyncio.create_task(probe.run())
    base = target.servers[0].url

    def note(text: str) -> None:
        print(f"  {target.name}: {text}", file=sys.stderr, flush=True)

    cookies = [await log_in(base, "bench", "bench-password-1") for _ in range(args.overview + 1)]
    note(f"{len(cookies)} browsers logged in; warming up")
    await warm_up(target, cookies.pop(), args.rate, tag)
    await asyncio.sleep(12)  # the warm-up's sessions ended (SESSION_END_GRACE, the sweep)
    idle = (time.time(), time.time() + 5)
    await asyncio.sleep(5)

    generators = min(args.generators, args.bots)
    context = multiprocessing.get_context("spawn")
    manager = context.Manager()
    sync = {name: manager.Barrier(generators + 1) for name in ("attached", "viewers", "watching", "stop")}
    sync["pids"] = manager.list()
    info = load_info(target)
    shares = [list(range(g, args.bots, generators)) for g in range(generators)]
    viewed = {k * args.bots // args.viewers_sessions: k for k in range(args.viewers_sessions)}  # spread
    phase, settle = args.phase, min(5.0, args.phase / 4)
    jobs = [(info, share, args.rate, {i: k for i, k in viewed.items() if i in share}, tag, sync) for share in shares]
    done = asyncio.Event()
    browsers = [Browser(cookie) for cookie in cookies]
    pages: list[asyncio.Task] = []
    with context.Pool(generators) as pool:
        pending = [pool.apply_async(_scale_process, (job,)) for job in jobs]

        async def meet(name: str) -> float:
            try:
                await asyncio.to_thread(sync[name].wait)
            except threading.BrokenBarrierError:
                for generator in pending:  # the generator that failed: its own error
                    with contextlib.suppress(threading.BrokenBarrierError, multiprocessing.TimeoutError):
                        generator.get(timeout=60)
                raise
            return time.time()

        try:
            note(f"attaching {args.bots} bots")
            attach_began = time.time()
            go = await meet("attached")
            probe.generators = list(sync["pids"])
            note(f"bots attached in {go - attach_began:.1f} s; streaming")
            bots = (go + settle, go + settle + phase)
            await asyncio.sleep(bots[1] - time.time())
            asked = await meet("viewers")
            start = await meet("watching")
            viewers_open, viewing = start - asked, (start + settle, start + settle + phase)
            note(f"{args.viewers_sessions} session viewers watching after {viewers_open:.1f} s")
            await asyncio.sleep(viewing[1] - time.time())

            servers, asked = target.servers, time.time()
            pages = [
                asyncio.create_task(overview(servers[k % len(servers)].url, b, done)) for k, b in enumerate(browsers)
            ]
            ready = asyncio.gather(*(b.ready.wait() for b in browsers))
            await asyncio.wait([ready, *pages], timeout=OPEN_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            for page in pages:
                if page.done():
                    page.result()  # an Overview that failed to open: its error
            if not ready.done():
                raise RuntimeError(f"the Overview's browsers were not all watching after {OPEN_TIMEOUT} s")
            overview_open = time.time() - asked
            note(f"{len(browsers)} browsers on the Overview after {overview_open:.1f} s")
            await asyncio.sleep(settle)
            watching, clients_cpu = (time.time(), time.time() + phase), time.process_time()
            await asyncio.sleep(phase)
            clients_cpu = (time.process_time() - clients_cpu) / (time.time() - watching[0]) * 100
            done.set()
            await asyncio.gather(*pages)
            await meet("stop")
            results = [await asyncio.to_thread(generator.get) for generator in pending]
        except BaseException:
            for name in ("attached", "viewers", "watching", "stop"):
                sync[name].abort()  # the generators stop waiting
            done.set()
            await asyncio.gather(*pages, return_exceptions=True)
            raise
    manager.shutdown()
    sampler.cancel()
    peak = sum(proc_peak_mb(p) for p in target.pids())
    sent = sum(r["sent"] for r in results)
    stored, drain = await drained(target, [f"bench-{tag}-{i}" for i in range(args.bots)], sent)

    # Memory: each level against the one before it, the growth the window before had (the sessions') taken out.
    grow = probe.growth(bots)
    levels = [probe.rss(idle), probe.rss(bots), probe.rss(viewing), probe.rss(watching)]
    expected_viewing = levels[1] + grow * (middle(viewing) - middle(bots))
    expected_watching = levels[2] + probe.growth(viewing) * (middle(watching) - middle(viewing))
    latencies = [(at, x) for r in results for at, x in zip(r["received_at"], r["latencies"], strict=True)]
    acks = [x for r in results for x in r["acks"]]
    refreshes = [x for b in browsers for x in b.refreshes]
    span = watching[1] - watching[0]
    frames = [n for b in browsers for n in within(b.frames, watching)]
    return {
        "name": target.name,
        "idle_mb": levels[0],
        "bots_mb": levels[1],
        "kb_session": (levels[1] - levels[0]) * 1024 / args.bots,
        "growth_kb_min": grow * 1024 * 60 / args.bots,
        "viewing_mb": levels[2],
        "kb_viewer": (levels[2] - expected_viewing) * 1024 / max(1, args.viewers_sessions),
        "watching_mb": levels[3],
        "kb_browser": (levels[3] - expected_watching) * 1024 / max(1, args.overview),
        "peak_mb": peak,
        "latency": [x * 1000 for x in within(latencies, watching)],
        "acks_bots": [x * 1000 for x in within(acks, bots)],
        "acks": [x * 1000 for x in within(acks, watching)],
        "lags": [x * 1000 for r in results for x in within(r["lags"], watching)],
        "lost": sum(r["lost"] for r in results),
        "gaps": sum(r["gaps"] for r in results),
        "resyncs": sum(r["resyncs"] for r in results),
        "stored": "n/a" if stored is None else f"{stored}/{sent}",
        "drain": drain,
        "cpu_bots": probe.cpu(bots),
        "cpu": probe.cpu(watching),
        "attach_ms": [x for r in results for x in r["attach_ms"]],
        "retries": sum((r["retries"] for r in results), Counter()),
        "attach_s": go - attach_began,
        "page_ms": [b.page_ms for b in browsers],
        "refresh_ms": [ms for at, ms, status in refreshes if watching[0] <= at <= watching[1]],
        "refresh_errors": sum(1 for _, _, status in refreshes if status != 200),
        "refreshes_per_min": len(within([(at, 0) for at, _, _ in refreshes], watching)) / len(browsers) / span * 60,
        "frames_per_s": len(frames) / len(browsers) / span,
        "kb_per_s": sum(frames) / 1024 / len(browsers) / span,
        "rows_per_s": sum(sum(within(b.updated, watching)) for b in browsers) / len(browsers) / span,
        "kinds": sum((b.kinds for b in browsers), Counter()),
        "clients_cpu": clients_cpu,
        "failures": sum((b.failures for b in browsers), Counter()),
        "largest": max(b.largest for b in browsers),
        "viewers_open": viewers_open,
        "overview_open": overview_open,
        "timeline": timeline(probe, {"idle": idle, "bots": bots, "viewers": viewing, "Overview": watching}),
    }


# -- Databases and runs ----------------------------------------------------------------------------


def fresh_database(url: str, name: str) -> str:
    """A new PostgreSQL database beside the one of `url`, on the same server; returns its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(kind: str, args, number: int) -> dict:
    tag = f"scale{number}-{os.getpid()}-{int(time.time())}"
    env = {"INGEST_MAX_CONNECTIONS_PER_TOKEN": str(max(1000, args.bots))}
    database = None
    if kind == "embedded":
        processes, label = 1, "1 process, SQLite + in-memory layer"
        env.update(REDIS_URL="", DATABASE_URL="")
    else:
        processes = int(kind)
        label = f"{processes} process{'es' if processes > 1 else ''}, Redis + PostgreSQL"
        database = f"{urlsplit(os.environ['DATABASE_URL']).path.strip('/')}_scale_{os.getpid()}_{number}"
        env["DATABASE_URL"] = fresh_database(os.environ["DATABASE_URL"], database)
    try:
        target = DashboardTarget(processes, extra_env=env)
        try:
            target.name = label
            return asyncio.run(measure(target, args, tag))
        finally:
            target.stop()
    finally:
        if database:
            drop_database(os.environ["DATABASE_URL"], database)


def pair(values: list[float]) -> str:
    """p50 / p99 of values (ms), with how many there were."""
    if not values:
        return "none in the window"
    return f"{percentile(values, 50):.0f} / {percentile(values, 99):.0f} (n={len(values):,})"


def tables(results: list[dict], args) -> str:
    n, v, o = args.bots, args.viewers_sessions, args.overview
    memory = [
        f"| server | idle MB | {n:,} bots MB | KB per live session | session growth, KB per session-minute "
        f"| + {v} session viewers MB | KB per session viewer | + {o} Overview browsers MB | KB per Overview browser "
        "| peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    load = [
        "| server | bot-to-browser p50 / p99 ms | bot's ack (stored) p50 / p99 ms: bots alone → all | lost | gaps "
        "| resyncs | stored (s it took after the run) | server CPU: bots alone → all | busiest load generator CPU "
        "| bots' send lag p99 / max ms | bots attached in s (each p50 / max ms) | session pages all watching in s "
        "| connected again |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    browsers = [
        "| server | Overview page load p50 / max ms | all listed and refreshed in s | panel refreshes per browser-minute "
        "| panel fetch p50 / p99 ms | panel errors | socket frames/s per browser | socket KB/s per browser "
        "| session rows updated/s (each row every ~s) | frames by type | largest frame KB | socket failures "
        "| the browsers' CPU (this process) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in results:
        memory.append(
            f"| {r['name']} | {r['idle_mb']:.0f} | {r['bots_mb']:.0f} | {r['kb_session']:.0f} | {r['growth_kb_min']:.1f} "
            f"| {r['viewing_mb']:.0f} | {r['kb_viewer']:.0f} | {r['watching_mb']:.0f} | {r['kb_browser']:.0f} "
            f"| {r['peak_mb']:.0f} |"
        )
        retries = ", ".join(f"{kind} {count}" for kind, count in r["retries"].most_common())
        lag = percentile(r["lags"], 99)
        load.append(
            f"| {r['name']} | {pair(r['latency'])} | {pair(r['acks_bots'])} → {pair(r['acks'])} | {r['lost']} "
            f"| {r['gaps']} | {r['resyncs']} | {r['stored']} ({r['drain']:.0f}) "
            f"| {r['cpu_bots'][0]:.0f}% → {r['cpu'][0]:.0f}% | {r['cpu'][1]:.0f}% "
            f"| {lag:.0f} / {max(r['lags'], default=math.nan):.0f} "
            f"| {r['attach_s']:.1f} ({percentile(r['attach_ms'], 50):.0f} / {max(r['attach_ms']):.0f}) "
            f"| {r['viewers_open']:.1f} | {retries or 'none'} |"
        )
        kinds = ", ".join(f"{kind} {count}" for kind, count in r["kinds"].most_common())
        failures = ", ".join(f"{kind} {count}" for kind, count in r["failures"].most_common())
        every = f"{n / r['rows_per_s']:.0f}" if r["rows_per_s"] else "-"
        browsers.append(
            f"| {r['name']} | {percentile(r['page_ms'], 50):.0f} / {max(r['page_ms']):.0f} | {r['overview_open']:.1f} "
            f"| {r['refreshes_per_min']:.1f} | {pair(r['refresh_ms'])} | {r['refresh_errors']} "
            f"| {r['frames_per_s']:.0f} | {r['kb_per_s']:.1f} | {r['rows_per_s']:.0f} ({every}) | {kinds} "
            f"| {r['largest'] / 1024:.0f} | {failures or 'none'} | {r['clients_cpu']:.0f}% |"
        )
        acks = percentile(r["acks"], 99)
        if acks > 2000 or r["drain"] > 10:
            notes.append(
                f"{r['name']}: the server did not keep up: its acks took up to {acks / 1000:.0f} s (p99) and it was "
                f"still storing {r['drain']:.0f} s after the bots stopped; its memory held what waited (the "
                "per-session and per-browser figures include it)."
            )
        if lag > 100:
            notes.append(
                f"{r['name']}: the bots sent late (p99 {lag:.0f} ms behind their schedule): the load generators were "
                "short of CPU, so the load offered was less than asked."
            )
    return "\n".join(["", *memory, "", *load, "", *browsers, *(["", *notes] if notes else [])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bots", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=3, help="messages per second per bot")
    parser.add_argument("--overview", type=int, default=20, help="browsers on the Overview")
    parser.add_argument("--viewers-sessions", type=int, default=50, help="sessions with one session page each")
    parser.add_argument("--phase", type=float, default=30, help="seconds of each phase: bots, + viewers, + Overview")
    parser.add_argument(
        "--processes",
        help="runs: 'embedded' (one process, SQLite, in-memory layer) or N (processes on REDIS_URL and DATABASE_URL);"
        " default embedded,1,2 with REDIS_URL and DATABASE_URL set, else embedded",
    )
    parser.add_argument("--generators", type=int, default=2, help="load generator processes")
    parser.add_argument("--timeline", action="store_true", help="also print each run's RSS (MB) second by second")
    args = parser.parse_args()
    shared = bool(os.getenv("REDIS_URL") and os.getenv("DATABASE_URL"))
    kinds = (args.processes or ("embedded,1,2" if shared else "embedded")).split(",")
    if any(k != "embedded" and not k.isdigit() for k in kinds):
        parser.error("--processes: 'embedded' or numbers of processes, comma-separated")
    if any(k != "embedded" for k in kinds) and not shared:
        parser.error(
            "runs of N processes need REDIS_URL and DATABASE_URL (PostgreSQL), e.g. "
            "REDIS_URL=redis://127.0.0.1:6391/0 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test"
        )
    if args.viewers_sessions > args.bots:
        parser.error("--viewers-sessions: at most one viewer per bot's session")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # bots, browsers and the servers' sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    print(machine())
    print(
        f"{args.bots:,} bots x {args.rate:g} msg/s, {args.viewers_sessions} sessions with a session page each, "
        f"{args.overview} browsers on the Overview, {args.phase:g} s phases, {args.generators} load generators; "
        f"command: {' '.join(['.venv/bin/python', 'bench/scale.py', *sys.argv[1:]])}",
        flush=True,
    )
    results, failed = [], []
    for number, kind in enumerate(kinds):
        try:
            results.append(run(kind, args, number))
        except Exception as error:  # the other runs still go; the failure is told below the tables
            traceback.print_exc()
            failed.append(f"run {kind!r} failed: {type(error).__name__}: {error}")
    print(tables(results, args))
    for line in failed:
        print(f"\n{line}")
    if args.timeline:
        for r in results:
            print(
                f"\n{r['name']}, RSS MB by second from the idle window ([phase]: its measured window): {r['timeline']}"
            )


if __name__ == "__main__":
    main()
