"""Validate-and-reduce throughput of the protocol core on one core.

The mix is a real Pipecat conversation's (tests/rtvi_samples.py), reshaped to
the field notes' proportions: a third bot-llm-text tokens, a quarter metrics,
the rest everything else. Each message goes through what ingest does to it:
JSON parsing, validation, and folding into the session state.

    .venv/bin/python bench/protocol.py [--messages 200000]
"""

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rtvi_monitor.protocol import validate
from rtvi_monitor.state import Event, SessionState
from tests.rtvi_samples import pipecat_conversation


def mix(count: int) -> list[str]:
    pairs = pipecat_conversation(6)
    tokens = [m for _, m in pairs if m["type"] == "bot-llm-text"]
    metrics = [m for _, m in pairs if m["type"] == "metrics"]
    others = [m for _, m in pairs if m["type"] not in ("bot-llm-text", "metrics")]
    rnd = random.Random(7)
    out = []
    for _ in range(count):
        r = rnd.random()
        pool = tokens if r < 1 / 3 else metrics if r < 1 / 3 + 1 / 4 else others
        out.append(json.dumps(rnd.choice(pool)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=100, help="messages are spread over this many session states")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})  # one core
    frames = mix(args.messages)
    states = [SessionState() for _ in range(args.sessions)]
    start = time.perf_counter()
    now = time.time()
    for seq, frame in enumerate(frames, 1):
        checked = validate(frame)
        states[seq % args.sessions].apply(Event(seq, "to-client", now, checked.message, checked.valid, checked.error))
    elapsed = time.perf_counter() - start
    cpu = (
        Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(" \t:")
        if Path("/proc/cpuinfo").exists()
        else "?"
    )
    print(f"machine: {cpu}, Python {platform.python_version()}")
    print(
        f"{args.messages} messages (parse + validate + reduce) in {elapsed:.2f} s: {args.messages / elapsed:,.0f} msg/s on one core"
    )


if __name__ == "__main__":
    main()
