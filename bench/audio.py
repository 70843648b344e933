"""Benchmark call audio: the server's ingest of N calls' audio beside their RTVI traffic, and the bot's cost.

Server (one dashboard, this tree, production settings, SQLite or DATABASE_URL): the live path of
bench/relay.py (N bots x R msg/s, browsers watching) run alternately without and with each call's audio
uploaded beside it (two tracks, a chunk of CHUNK seconds each per track as the call goes, as the bot
package uploads them: real speech from espeak-ng with pauses), in the same run on the same server:
the live path's p50/p99 both ways, what the uploads took, the server's CPU, and what a call-minute
weighs in the audio storage.

Bot side: the bot package's AudioUploader for M concurrent calls in one process, real-time, against the
same server: the process's CPU per call (% of one core), beside an idle baseline of the same process.

    .venv/bin/python bench/audio.py --bots 100 --rate 30 --seconds 30 --rounds 2
    .venv/bin/python bench/audio.py --bot-side 50 --seconds 30 --skip-server
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from relay import DashboardTarget, percentile, run_load  # noqa: E402

RATE = 16000
IDLE = 99  # --uploader-nice 99: the uploader at SCHED_IDLE
CHUNK = 10.0  # the bot package's default (RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS)

ENABLE = (
    "from dashboard.models import Organization; Organization.objects.filter(name='Bench').update(record_audio=True)"
)


def speech_track(seconds: float, voice: str, offset: float) -> bytes:
    """A track of real speech and pauses (espeak-ng), `seconds` long, 16 kHz 16-bit."""
    import numpy as np

    from tests.speech import silence, speak

    lines = [
        "I would like to check the status of my order please.",
        "It was supposed to arrive on Monday but nothing came.",
        "Yes the number is four five one two.",
    ]
    parts, total = [silence(offset)], offset
    i = 0
    while total < seconds:
        words = speak(lines[i % len(lines)], voice=voice)
        parts += [words, silence(2.5)]
        total += len(words) / RATE + 2.5
        i += 1
    return np.concatenate(parts)[: int(seconds * RATE)].astype("<i2").tobytes()


async def upload_calls(
    base_url: str, token: str, session_ids: list[str], seconds: float, user: bytes, bot: bytes, chunk: float = CHUNK
):
    """Each call uploads its two tracks a chunk per `chunk` seconds, real-time, as the bot package does."""
    import httpx

    per = int(chunk * RATE) * 2
    timings, failures, busy = [], [], []
    limits = httpx.Limits(max_connections=len(session_ids) * 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:

        async def call(session_id: str, stagger: float):
            await asyncio.sleep(stagger)
            start = time.time()
            for index in range(int(seconds // chunk)):
                await asyncio.sleep(max(0.0, start + (index + 1) * chunk - time.time()))
                for track, pcm in (("user", user), ("bot", bot)):
                    body = pcm[index * per : (index + 1) * per]
                    headers = {
                        "Authorization": f"Bearer {token}",
                        "X-Audio-Sample-Rate": str(RATE),
                        "X-Audio-Start": f"{start + index * chunk:.6f}",
                    }
                    for _attempt in range(20):
                        began = time.monotonic()
                        try:
                            response = await client.put(
                                f"/ingest/audio/{session_id}/{track}/{index}", content=body, headers=headers
                            )
                        except httpx.HTTPError as exc:
                            failures.append(f"{type(exc).__name__} after {time.monotonic() - began:.1f} s")
                            break
                        if response.status_code == 404:  # the session's first message is not stored yet
                            await asyncio.sleep(0.5)
                            continue
                        if response.status_code == 503:  # AUDIO_MAX_PENDING: sent again later, as the package does
                            busy.append(1)
                            await asyncio.sleep(float(response.headers.get("Retry-After", "2")))
                            continue
                        timings.append(time.monotonic() - began)
                        if response.status_code not in (200, 201):
                            failures.append(f"{response.status_code} {response.text[:100]}")
                        break

        await asyncio.gather(*(call(s, i * chunk / len(session_ids)) for i, s in enumerate(session_ids)))
    return timings, failures, len(busy)


def _uploader_process(base_url, token, session_ids, seconds, user, bot, chunk, result, nice=0):
    # The uploads stand for bots on other machines: their client's CPU is not the server's.
    if nice == IDLE:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif nice:
        os.nice(nice)
    timings, failures, busy = asyncio.run(upload_calls(base_url, token, session_ids, seconds, user, bot, chunk))
    result.update({"timings": timings, "failures": failures, "busy": busy})


def server_side(args) -> None:
    target = DashboardTarget()
    server = target.servers[0]
    server.manage("shell", "-c", ENABLE)
    uploads_to = server
    if args.audio_process:
        # The proxy sends /ingest/audio/ to processes of its own (docs/DEPLOY.md): the same code and database.
        from tests.server import DaphneServer

        env = {k: v for k, v in server.env.items() if k != "PORT"}
        uploads_to = DaphneServer(env=env, workdir=str(server.workdir)).start(migrate=False)
        if args.audio_nice:
            # As `nice -n N daphne ...` would (docs/DEPLOY.md): every thread of the process, and those it makes.
            for task in Path(f"/proc/{uploads_to.process.pid}/task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), args.audio_nice)
        if args.audio_idle:
            # As `chrt --idle 0 daphne ...` would (docs/DEPLOY.md): the process runs only on CPU nothing else wants.
            for task in Path(f"/proc/{uploads_to.process.pid}/task").iterdir():
                os.sched_setscheduler(int(task.name), os.SCHED_IDLE, os.sched_param(0))
    user = speech_track(args.seconds + CHUNK, "en-us", 0.5)
    bot = speech_track(args.seconds + CHUNK, "en-gb", 4.0)
    rows = []
    try:
        for round_ in range(args.rounds):
            for with_audio in (False, True):
                tag = f"{'audio' if with_audio else 'plain'}{round_}-{os.getpid()}"
                sessions = [f"bench-{tag}-{i}" for i in range(args.bots)]
                manager = multiprocessing.get_context("spawn").Manager()
                shared = manager.dict()
                uploader = None
                if with_audio:
                    uploader = multiprocessing.get_context("spawn").Process(
                        target=_uploader_process,
                        args=(
                            uploads_to.url,
                            target.token,
                            sessions,
                            args.seconds,
                            user,
                            bot,
                            CHUNK,
                            shared,
                            args.uploader_nice,
                        ),
                    )
                    uploader.start()
                result = run_load(target, args.bots, args.rate, args.seconds, 1, tag, args.generators, False)
                if uploader is not None:
                    uploader.join()
                    timings, failures = shared["timings"], shared["failures"]
                    result["uploads"] = len(timings)
                    result["upload_p50_ms"] = percentile(timings, 50) * 1000
                    result["upload_p99_ms"] = percentile(timings, 99) * 1000
                    result["upload_busy"] = shared["busy"]
                    result["upload_failures"] = failures[:3] + ([f"... {len(failures)} in all"] if failures else [])
                manager.shutdown()
                result["audio"] = with_audio
                rows.append(result)
                print(row(result), flush=True)
        print()
        for with_audio in (False, True):
            mine = [r for r in rows if r["audio"] == with_audio]
            print(
                f"{'with audio   ' if with_audio else 'without audio'}: p50 {statistics.median(r['p50_ms'] for r in mine):.1f} ms, "
                f"p99 {statistics.median(r['p99_ms'] for r in mine):.1f} ms (median of {len(mine)} runs), "
                f"server CPU {statistics.median(r['cpu_pct'] for r in mine):.0f}%"
            )
        plain = statistics.median(r["p99_ms"] for r in rows if not r["audio"])
        heard = statistics.median(r["p99_ms"] for r in rows if r["audio"])
        print(f"live path p99 with audio / without, same run: {heard / plain:.3f}")
        weigh(server)
    finally:
        target.stop()
        if uploads_to is not server:
            uploads_to.stop()


def weigh(server) -> None:
    """What a call-minute weighs, stored: from the database (FLAC bytes over seconds of audio, both tracks)."""
    script = (
        "from rtvi_monitor.models import SessionAudio; from django.db.models import Sum; "
        "t = SessionAudio.objects.aggregate(b=Sum('stored_bytes'), s=Sum('seconds'), n=Sum('chunks')); "
        "import json; print(json.dumps(t))"
    )
    totals = json.loads(server.manage("shell", "-c", script).strip().splitlines()[-1])
    call_seconds = totals["s"] / 2  # two tracks per call
    print(
        f"stored: {totals['n']} chunks, {totals['b'] / 1e6:.1f} MB for {call_seconds / 60:.1f} call-minutes: "
        f"{totals['b'] / (call_seconds / 60) / 1e6:.3f} MB per call-minute (both tracks, FLAC, {RATE} Hz); "
        f"raw PCM would be {RATE * 2 * 2 * 60 / 1e6:.2f} MB"
    )


def row(r: dict) -> str:
    busy = f", {r['upload_busy']} answered 503 and sent again" if r.get("upload_busy") else ""
    upload = (
        f"{r['uploads']} PUTs, p50 {r['upload_p50_ms']:.0f} / p99 {r['upload_p99_ms']:.0f} ms"
        f"{busy}"
        f"{' FAILURES ' + str(r['upload_failures']) if r['upload_failures'] else ''}"
        if r.get("audio")
        else "—"
    )
    return (
        f"| {'with audio' if r.get('audio') else 'without audio'} | {r['delivered_per_s']:.0f} | {r['p50_ms']:.1f} | "
        f"{r['p99_ms']:.1f} | {r['lost']} | {r['cpu_pct']:.0f}% | {r['peak_mb']:.0f} | {upload} |"
    )


async def bot_side_load(url: str, token: str, calls: int, seconds: float, user: bytes, bot: bytes, record: bool):
    """`calls` concurrent calls' uploaders in this process (the bot package's AudioUploader), real-time."""
    from rtvi_dashboard.audio import AudioUploader
    from rtvi_dashboard.client import DashboardClient

    clients = [DashboardClient(url, token, f"botside-{record}-{os.getpid()}-{i}") for i in range(calls)]
    for client in clients:
        client.start()
        client.send({"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "1.0.0"}})
    await asyncio.sleep(1.0)
    uploaders = [AudioUploader(url, token, client.session_id) for client in clients]
    if record:
        await asyncio.gather(*(u.check() for u in uploaders))
    per = int(CHUNK * RATE) * 2
    cpu0, wall0 = time.process_time(), time.monotonic()
    start = time.time()
    for index in range(int(seconds // CHUNK)):
        await asyncio.sleep(max(0.0, start + (index + 1) * CHUNK - time.time()))
        if record:
            for uploader in uploaders:
                for track, pcm in (("user", user), ("bot", bot)):
                    uploader.submit(track, pcm[index * per : (index + 1) * per], RATE, start + index * CHUNK)
    if record:
        await asyncio.gather(*(u.close() for u in uploaders))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    for client in clients:
        await client.close()
    return cpu, wall


def bot_side(args) -> None:
    target = DashboardTarget()
    server = target.servers[0]
    server.manage("shell", "-c", ENABLE)
    user = speech_track(args.seconds + CHUNK, "en-us", 0.5)
    bot = speech_track(args.seconds + CHUNK, "en-gb", 4.0)
    try:
        figures = {}
        for record in (False, True):
            cpu, wall = asyncio.run(
                bot_side_load(server.ws_url, target.token, args.bot_side, args.seconds, user, bot, record)
            )
            figures[record] = cpu / wall
            print(
                f"bot process, {args.bot_side} calls, {'uploading audio' if record else 'messages only'}: {cpu / wall * 100:.1f}% of a core"
            )
        extra = (figures[True] - figures[False]) / args.bot_side * 100
        print(f"audio upload cost per concurrent call: {extra:.2f}% of a core (16 kHz, two tracks, {CHUNK:g} s chunks)")
        stored = (
            sqlite3.connect(server.env["SQLITE_PATH"])
            .execute("select count(*) from rtvi_monitor_audiochunk")
            .fetchone()[0]
        )
        print(f"chunks stored: {stored} of {args.bot_side * 2 * int(args.seconds // CHUNK)}")
    finally:
        target.stop()


def main() -> None:
    global CHUNK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bots", type=int, default=100)
    parser.add_argument("--rate", type=float, default=30, help="RTVI messages per second per bot")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=2, help="without/with audio pairs, alternated")
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--bot-side", type=int, default=0, metavar="CALLS", help="also measure the bot package's cost")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument(
        "--audio-process", action="store_true", help="uploads go to a second server process, as DEPLOY.md advises"
    )
    parser.add_argument(
        "--uploader-nice",
        type=int,
        default=0,
        help="the audio load generator's nice value, 99 for SCHED_IDLE (it stands for bots elsewhere: its CPU is not the server's)",
    )
    parser.add_argument(
        "--audio-idle", action="store_true", help="with --audio-process: run it at SCHED_IDLE (chrt --idle 0)"
    )
    parser.add_argument("--audio-nice", type=int, default=0, help="with --audio-process: its nice value (e.g. 10)")
    parser.add_argument(
        "--chunk-seconds", type=float, default=CHUNK, help="seconds of audio a chunk holds (10, as the bot package)"
    )
    args = parser.parse_args()
    CHUNK = args.chunk_seconds
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, DATABASE_URL={'set' if os.getenv('DATABASE_URL') else 'unset'}"
    )
    if not args.skip_server:
        print(
            f"{args.bots} calls x {args.rate:g} msg/s, 1 browser each, {args.seconds:g} s per run; audio: 2 tracks x {RATE} Hz, {CHUNK:g} s chunks; "
            f"uploads served {'by a process of their own' if args.audio_process else 'in the same process'}"
            f"{f' at nice {args.audio_nice}' if args.audio_nice else ''}{' at SCHED_IDLE' if args.audio_idle else ''}; "
            f"uploader at {'SCHED_IDLE' if args.uploader_nice == IDLE else f'nice {args.uploader_nice}'}"
        )
        print("| run | delivered msg/s | p50 ms | p99 ms | lost | server CPU | peak MB | audio uploads |")
        print("|---|---|---|---|---|---|---|---|")
        server_side(args)
    if args.bot_side:
        bot_side(args)


if __name__ == "__main__":
    main()
