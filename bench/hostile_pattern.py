"""One organization's redaction patterns never delay another's acks (issue 33). Run by hand, never as a test.

One real server (tests/server.py's DaphneServer: daphne + dashboard.asgi, its own SQLite, loopback only),
three organizations on it:

- B, honest: --bots bots sending --rate messages/s each, paced, the realistic turn of bench/relay.py;
- A, hostile: has saved the rule `(a+)+$` (a RedactionRule, as an admin would) and streams crafted texts
  ("a" * N + "!", the catastrophic input for a backtracking engine) as a caller's partial transcriptions
  (--final: final ones, joined into the caller's stream) from --hostile-bots bots, each frame a batch of
  --per-batch such messages filling the largest frame the server takes (INGEST_MAX_FRAME_BYTES), each bot
  sending its next frame as soon as the last one is answered (--hostile-window frames in flight; with
  --hostile-rate, no more than that many frames a second: a load the server can keep up with);
- C, the control: no rule, the very same frames (what A's load costs the server without its pattern).

B streams through the whole run; its ack latency (from the message's sent_at to the ack's receipt) is taken
in phases of --seconds each, --gap seconds apart (not counted, so the frames in flight at a phase's end do
not count in the next): (a) B alone; (b) B while A streams; (c) B while C streams (--no-control: no (c)).
Printed: each phase's B and A/C throughput and ack latency p50/p99/max, the server's CPU, that every
message was acked and stored, that A's rule was live (a probe "aaaa" from each of A's bots must be stored
as "[slow]"), and B's p99 in (b) against (a) (and against (c): the pattern's own share).

Before issue 33 (patterns on Python's `re`), the rule plus one such message held another organization's bot
21.9 s for an ack; on RE2 the scan is linear.

    .venv/bin/python bench/hostile_pattern.py
    .venv/bin/python bench/hostile_pattern.py --bots 20 --rate 30 --seconds 15 --hostile-bots 4
    .venv/bin/python bench/hostile_pattern.py --hostile-rate 2        # A: 4 bots x 2 frames/s, about 2 MB/s
    .venv/bin/python bench/hostile_pattern.py --acks each --per-batch 8 --hostile-window 2
    .venv/bin/python bench/hostile_pattern.py --final                 # the texts joined into the caller's stream

The server runs with INGEST_RATE_LIMIT and INGEST_RATE_BYTES raised (--rate-bytes) so the hostile bots
are held back only by how fast they are answered: at the defaults (2 MB/s a connection) they would be
closed with 4429 within seconds. The whole run is bounded: about 3 x --seconds + 2 x --gap plus set-up,
and every wait has a timeout.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import shutil
import sys
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from relay import HELLO, message, percentile, proc_cpu_seconds, proc_peak_mb  # noqa: E402
from rtvi_dashboard.wire import MAX_FRAME_BYTES  # noqa: E402

from tests.server import DaphneServer  # noqa: E402

RULE_NAME = "slow"
RULE = "(a+)+$"
PROBE = "aaaa"  # matches the rule whole: stored as "[slow]" when A's rule is live
ACK_PATIENCE = 30  # seconds a bot waits for its last acks before giving up (and saying so)

CREATE_RULE = """
from dashboard.models import Organization
from rtvi_monitor.redaction.models import RedactionRule
rule = RedactionRule(organization=Organization.objects.get(name={org!r}), name={name!r}, pattern={pattern!r})
rule.full_clean()  # as the admin saves it: compile_rule's checks (RE2 takes it)
rule.save()
print(RedactionRule.objects.filter(organization__name={org!r}).count())
"""

STORED = """
from rtvi_monitor.models import Event
for prefix in {prefixes!r}:
    events = Event.objects.filter(session__session_id__startswith=prefix)
    print(prefix, events.count(), events.filter(message__contains={marker!r}).count())
"""


def hostile_text(per_batch: int, max_frame: int, final: bool) -> str:
    """The crafted text: "a" * N + "!", N as large as lets per_batch of them fit one frame (in UTF-8 bytes)."""
    item = {"seq": 10**12, "direction": "to-client", "sent_at": time.time(), "message": crafted("", final)}
    overhead = len(json.dumps({"batch": [item] * per_batch}).encode())
    n = (max_frame - overhead) // per_batch - 1 - 64  # 64: slack for the seqs' and times' digits
    return "a" * n + "!"


def crafted(text: str, final: bool = False) -> dict:
    """A caller's words as a transcription: a partial (redacted alone), or a final (joined into its stream)."""
    return {"label": "rtvi-ai", "type": "user-transcription", "data": {"text": text, "final": final, "timestamp": "t"}}


class Acks:
    """One bot's messages and their acks: sent_at by seq, and (sent_at, latency) for each acked."""

    def __init__(self):
        self.sent: dict[int, float] = {}
        self.latencies: list[tuple[float, float]] = []
        self.acked = 0
        self.errors = 0
        self.error_texts: list[str] = []  # the first few, as they came
        self.last_ack_at = 0.0
        self.changed = asyncio.Event()

    def take(self, raw: str) -> None:
        now = time.time()
        frame = json.loads(raw)
        if "acks" in frame:
            seqs = [s for first, last in frame["acks"] for s in range(first, last + 1)]
        elif "ack" in frame:
            seqs = [frame["ack"]]
        else:  # an error: final for its message(s) ("seq"/"seqs"), or about none
            self.errors += 1
            if len(self.error_texts) < 3:
                self.error_texts.append(raw[:300])
            seqs = [s for s in [frame.get("seq"), *frame.get("seqs", [])] if isinstance(s, int)]
            if frame.get("retry"):  # refused for now (storage behind): not acked, and this bench does not resend
                for seq in seqs:
                    self.sent.pop(seq, None)
                seqs = []
        for seq in seqs:
            sent_at = self.sent.pop(seq, None)
            if sent_at is not None:
                self.latencies.append((sent_at, now - sent_at))
                self.acked += 1
        self.last_ack_at = now
        self.changed.set()

    async def drain(self, socket) -> None:
        async for raw in socket:
            self.take(raw)

    async def settle(self) -> bool:
        """Wait for every message's ack (ACK_PATIENCE at most); whether all came."""
        deadline = time.monotonic() + ACK_PATIENCE
        while self.sent and time.monotonic() < deadline:
            self.changed.clear()
            with_timeout = asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
            try:
                await with_timeout
            except TimeoutError:
                break
        return not self.sent


async def attach(url: str, token: str, session_id: str, query: str):
    """A bot's socket, its session open (the hello, seq 1, acknowledged)."""
    socket = await websockets.connect(
        f"{url}/ws/ingest/{session_id}/{query}",
        additional_headers={"Authorization": f"Bearer {token}"},
        max_queue=None,
        max_size=None,
        open_timeout=60,
    )
    await socket.send(json.dumps({"seq": 1, "direction": "to-client", "sent_at": time.time(), "message": HELLO}))
    while True:  # a warning may come first
        frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
        if "ack" in frame or "acks" in frame:
            return socket
        if frame.get("fatal"):
            raise RuntimeError(f"{session_id}: refused: {frame}")


async def honest_bot(socket, index: int, rate: float, go_at: float, end_at: float) -> dict:
    acks = Acks()
    drainer = asyncio.create_task(acks.drain(socket))
    start = go_at + random.random() / rate  # the bots spread over one interval
    seq = 2
    while (due := start + (seq - 2) / rate) < end_at:
        if (delay := due - time.time()) > 0:
            await asyncio.sleep(delay)
        sent_at = time.time()
        acks.sent[seq] = sent_at
        await socket.send(
            json.dumps({"seq": seq, "direction": "to-client", "sent_at": sent_at, "message": message(seq + index)})
        )
        seq += 1
    complete = await acks.settle()
    await socket.close()
    drainer.cancel()
    return {
        "sent": seq - 2,
        "acked": acks.acked,
        "errors": acks.errors,
        "error_texts": acks.error_texts,
        "complete": complete,
        "lat": acks.latencies,
    }


async def hostile_bot(socket, conf: dict, start_at: float, stop_at: float) -> dict:
    """A's (or C's) bot: its probe, then from start_at to stop_at its crafted frames, each as soon as fewer than
    --hostile-window are unanswered (and, with --hostile-rate, no sooner than its turn)."""
    per_batch, window, rate = conf["per_batch"], conf["window"], conf["frame_rate"]
    acks = Acks()
    drainer = asyncio.create_task(acks.drain(socket))
    # The probe: a text the rule matches whole, so the stored row says whether the rule was live.
    acks.sent[2] = time.time()
    await socket.send(
        json.dumps({"seq": 2, "direction": "to-client", "sent_at": acks.sent[2], "message": crafted(PROBE)})
    )
    await acks.settle()
    acks.latencies.clear()
    acks.acked = 0
    item = crafted(conf["text"], conf["final"])
    seq, sent, frames = 3, 0, 0
    start_at += random.random() / rate if rate else 0.0  # paced: the bots spread over one interval
    await asyncio.sleep(max(0.0, start_at - time.time()))
    while time.time() < stop_at:
        if rate:
            await asyncio.sleep(max(0.0, min(start_at + frames / rate, stop_at) - time.time()))
        # As fast as the socket is answered: the next frame once fewer than `window` are unanswered.
        while len(acks.sent) >= window * per_batch and time.time() < stop_at:
            acks.changed.clear()
            with_timeout = asyncio.wait_for(acks.changed.wait(), max(0.01, stop_at - time.time()))
            try:
                await with_timeout
            except TimeoutError:
                break
        if time.time() >= stop_at:
            break
        sent_at = time.time()
        batch = []
        for _ in range(per_batch):
            acks.sent[seq] = sent_at
            batch.append({"seq": seq, "direction": "to-client", "sent_at": sent_at, "message": item})
            seq += 1
        await socket.send(json.dumps({"batch": batch}))
        sent += per_batch
        frames += 1
    complete = await acks.settle()
    await socket.close()
    drainer.cancel()
    return {
        "sent": sent,
        "acked": acks.acked,
        "errors": acks.errors,
        "error_texts": acks.error_texts,
        "complete": complete,
        "lat": acks.latencies,
        "last_ack_at": acks.last_ack_at,
    }


def generator(kind: str, conf: dict, ready, go, go_value, results) -> None:
    """One load-generator process: B's bots, or A's (or C's) hostile ones."""

    async def run():
        query = "?acks=ranges" if conf["acks"] == "ranges" else ""
        sockets = await asyncio.gather(
            *(attach(conf["url"], conf["token"], f"{conf['prefix']}-{i}", query) for i in range(conf["bots"]))
        )
        await asyncio.to_thread(ready.wait)
        await asyncio.to_thread(go.wait)
        go_at = go_value.value
        if kind == "honest":
            jobs = [honest_bot(s, i, conf["rate"], go_at, go_at + conf["end"]) for i, s in enumerate(sockets)]
        else:
            start_at, stop_at = go_at + conf["start"], go_at + conf["stop"]
            jobs = [hostile_bot(s, conf, start_at, stop_at) for s in sockets]
        return await asyncio.gather(*jobs)

    results.put((kind, conf["prefix"], asyncio.run(run())))


def summary(bots: list[dict], since: float, until: float) -> dict:
    """Messages sent in [since, until): how many were acked, their ack latency, the throughput."""
    lat = [latency for bot in bots for sent_at, latency in bot["lat"] if since <= sent_at < until]
    return {
        "acked": len(lat),
        "per_s": len(lat) / (until - since),
        "p50": percentile(lat, 50) * 1000,
        "p99": percentile(lat, 99) * 1000,
        "max": max(lat, default=float("nan")) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bots", type=int, default=20, help="organization B's bots (paced)")
    parser.add_argument("--rate", type=float, default=30, help="messages per second per B bot")
    parser.add_argument("--seconds", type=float, default=15, help="length of each phase")
    parser.add_argument("--gap", type=float, default=2, help="uncounted seconds between phases")
    parser.add_argument("--hostile-bots", type=int, default=4, help="organization A's bots (and C's)")
    parser.add_argument("--per-batch", type=int, default=4, help="crafted messages per hostile frame")
    parser.add_argument("--hostile-window", type=int, default=1, help="hostile frames unanswered at once, per bot")
    parser.add_argument(
        "--hostile-rate",
        type=float,
        default=0,
        help="hostile frames per second per bot, at most (0: as fast as they are answered)",
    )
    parser.add_argument(
        "--acks", choices=["ranges", "each"], default="ranges", help="every bot asks ranged acks, or not"
    )
    parser.add_argument(
        "--control", action=argparse.BooleanOptionalAction, default=True, help="phase (c): C, the same frames, no rule"
    )
    parser.add_argument(
        "--final",
        action="store_true",
        help="the crafted texts as final transcriptions (joined into the caller's stream), not partials",
    )
    parser.add_argument("--rate-bytes", type=int, default=1 << 30, help="the server's INGEST_RATE_BYTES")
    args = parser.parse_args()

    max_frame = int(os.environ.get("INGEST_MAX_FRAME_BYTES", MAX_FRAME_BYTES))
    text = hostile_text(args.per_batch, max_frame, args.final)
    seconds, gap = args.seconds, args.gap
    phases = [("(a) B alone", 0.0), ("(b) B + A, rule (a+)+$", seconds + gap)]
    if args.control:
        phases.append(("(c) B + C, no rule", 2 * (seconds + gap)))
    end = phases[-1][1] + seconds

    env = {
        "DEBUG": "false",
        "SECRET_KEY": "bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "SESSION_END_GRACE": "5",
        "INGEST_RATE_LIMIT": "100000",
        "INGEST_RATE_BYTES": str(args.rate_bytes),
    }
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"B: {args.bots} bots x {args.rate:g} msg/s paced ({args.acks} acks); A and C: {args.hostile_bots} bots, "
        f"frames of {args.per_batch} x ('a' * {len(text) - 1} + '!'), window {args.hostile_window}"
        f"{f', at most {args.hostile_rate:g} frames/s each' if args.hostile_rate else ', as fast as answered'}; "
        f"frame limit {max_frame} B; phases of {seconds:g} s, {gap:g} s apart"
    )
    server = DaphneServer(env=env).start()
    workers = []
    tag = f"{os.getpid()}-{int(time.time())}"
    try:
        tokens = {org: server.issue("create_ingest_token", f"Hostile bench {org} {tag}") for org in "ABC"}
        rules = server.manage(
            "shell", "-c", CREATE_RULE.format(org=f"Hostile bench A {tag}", name=RULE_NAME, pattern=RULE)
        )
        print(f"A's rules: {rules.split()[-1]} ([{RULE_NAME}] {RULE})")
        base = {"url": server.ws_url, "acks": args.acks}
        confs = {
            "honest": {
                **base,
                "token": tokens["B"],
                "prefix": f"hb-B-{tag}",
                "bots": args.bots,
                "rate": args.rate,
                "end": end,
            },
        }
        hostile = {
            "text": text,
            "final": args.final,
            "per_batch": args.per_batch,
            "window": args.hostile_window,
            "frame_rate": args.hostile_rate,
            "bots": args.hostile_bots,
        }
        confs["A"] = {**base, **hostile, "token": tokens["A"], "prefix": f"hb-A-{tag}"}
        confs["A"].update(start=phases[1][1], stop=phases[1][1] + seconds)
        if args.control:
            confs["C"] = {**base, **hostile, "token": tokens["C"], "prefix": f"hb-C-{tag}"}
            confs["C"].update(start=phases[2][1], stop=phases[2][1] + seconds)

        context = multiprocessing.get_context("spawn")
        ready, go = context.Barrier(len(confs) + 1), context.Barrier(len(confs) + 1)
        go_value, results = context.Value("d", 0.0), context.Queue()
        workers += [
            context.Process(
                target=generator, args=("honest" if key == "honest" else "hostile", conf, ready, go, go_value, results)
            )
            for key, conf in confs.items()
        ]
        for worker in workers:
            worker.start()
        ready.wait(120)  # every bot attached
        pid = server.process.pid
        go_value.value = go_at = time.time() + 0.5
        go.wait(10)
        cpu = []
        for _, offset in phases:
            time.sleep(max(0.0, go_at + offset - time.time()))
            before = proc_cpu_seconds(pid)
            time.sleep(max(0.0, go_at + offset + seconds - time.time()))
            cpu.append((proc_cpu_seconds(pid) - before) / seconds * 100)
        got = {}
        for _ in workers:
            _, prefix, bots = results.get(timeout=end + 3 * ACK_PATIENCE)
            got[prefix] = bots
        for worker in workers:
            worker.join(10)
        peak_mb = proc_peak_mb(pid)
        prefixes = [conf["prefix"] for conf in confs.values()]
        stored = {}
        for line in server.manage(
            "shell", "-c", STORED.format(prefixes=prefixes, marker=f'"text":"[{RULE_NAME}]"')
        ).split("\n"):
            if line.startswith("hb-"):  # (the shell says first what it imported)
                prefix, count, marked = line.split()
                stored[prefix] = (int(count), int(marked))
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)  # hundreds of MB of "aaaa"

    honest = got[confs["honest"]["prefix"]]
    print()
    print(
        "| phase | B acked msg/s | B p50 ms | B p99 ms | B max ms | A/C acked msg/s | A/C MB/s | "
        "A/C p50 ms | A/C p99 ms | A/C max ms | server CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    b_p99 = []
    for (label, offset), server_cpu in zip(phases, cpu, strict=True):
        since, until = go_at + offset, go_at + offset + seconds
        b = summary(honest, since, until)
        b_p99.append(b["p99"])
        other = {"(b)": "A", "(c)": "C"}.get(label[:3])
        if other:
            h = summary(got[confs[other]["prefix"]], since, until)
            mb_s = h["per_s"] * len(text) / 1e6
            hostile_cells = f"{h['per_s']:.0f} | {mb_s:.1f} | {h['p50']:.1f} | {h['p99']:.1f} | {h['max']:.1f}"
        else:
            hostile_cells = "- | - | - | - | -"
        print(
            f"| {label} | {b['per_s']:.0f} | {b['p50']:.1f} | {b['p99']:.1f} | {b['max']:.1f} | "
            f"{hostile_cells} | {server_cpu:.0f}% |"
        )
    print()
    all_acked = True
    for key, conf in confs.items():
        bots = got[conf["prefix"]]
        sent, acked = sum(b["sent"] for b in bots), sum(b["acked"] for b in bots)
        errors = sum(b["errors"] for b in bots)
        count, marked = stored.get(conf["prefix"], (0, 0))
        # Stored: each bot's hello, and for A and C their probe, beside what they sent.
        expected = sent + len(bots) * (1 if key == "honest" else 2)
        complete = all(b["complete"] for b in bots) and acked == sent and count == expected
        all_acked &= complete
        who = "B" if key == "honest" else key
        line = f"{who}: sent {sent}, acked {acked}, error replies {errors}, stored {count}/{expected}"
        if key != "honest":
            last = max(b["last_ack_at"] for b in bots) - (go_at + conf["stop"])
            line += f", probes stored as [{RULE_NAME}] {marked}/{len(bots)}, last ack {last:.2f} s after its phase"
        print(line + ("" if complete else "  <-- NOT ALL ACKED/STORED"))
        for text in {t for b in bots for t in b["error_texts"]}:
            print(f"  {who}'s error reply: {text}")
    print(f"every message acked and stored: {'yes' if all_acked else 'NO'}; server peak memory {peak_mb:.0f} MB")
    print(f"B's p99 with A's rule against B alone: {b_p99[1] / b_p99[0]:.2f}x ({b_p99[1]:.1f} / {b_p99[0]:.1f} ms)")
    if args.control:
        print(
            f"B's p99 with A's rule against the same load without it (C): {b_p99[1] / b_p99[2]:.2f}x "
            f"({b_p99[1]:.1f} / {b_p99[2]:.1f} ms)"
        )


if __name__ == "__main__":
    main()
