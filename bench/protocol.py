"""Validate-and-reduce throughput of the protocol core on one core.

Each message goes through what ingest does to it: JSON parsing and
validation (rtvi_monitor/core/protocol.py), then folding into its session's state
(rtvi_monitor/core/state.py). The messages are real Pipecat 1.14 sessions
(tests/rtvi_samples.py) in their real order, with the LLM's tokens split to
the size real LLMs stream so the mix matches the field notes': about a third
bot-llm-text tokens, a quarter metrics, the rest everything else. Sessions are
interleaved, as many bots streaming at once are.

    .venv/bin/python bench/protocol.py [--sessions 300] [--turns 6] [--repeat 5]
    .venv/bin/python bench/protocol.py --redact [--pii]

--redact also times the same stream with redaction before storage on
(rtvi_monitor/core/redaction.py, the built-in detectors as ingest applies them:
after validation, before the stored text is made and the state folds it)
against the same loop with it off, in the same run, and prints the ratio;
--pii puts a phone number, an e-mail address and a card number in every user
line, so the detectors have something to remove.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
import django

django.setup()  # rtvi_monitor.sessions.events reads the models (no database is touched)

from rtvi_monitor.core.protocol import validate  # noqa: E402
from rtvi_monitor.core.redaction import DEFAULT, NONE  # noqa: E402
from rtvi_monitor.core.state import Event, SessionState  # noqa: E402
from rtvi_monitor.sessions.events import redact, stored_form  # noqa: E402
from tests.rtvi_samples import m, pipecat_conversation_pairs  # noqa: E402

TOKEN_CHARS = 3  # real LLM tokens are pieces of words, not words


PII = " My number is +1 415 555 0100, e-mail ana.lopez@example.com, card 4111 1111 1111 1111."


def session(turns: int, pii: bool = False) -> list[tuple[str, str]]:
    """One real session as (direction, JSON text), its LLM tokens split to real size."""
    out = []
    for direction, message in pipecat_conversation_pairs(turns):
        if pii and message["type"] in ("user-transcription", "user-input") and isinstance(message.get("data"), dict):
            message = {**message, "data": {**message["data"], "text": str(message["data"].get("text", "")) + PII}}
        if message["type"] == "bot-llm-text":
            text = message["data"]["text"]
            pieces = [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]
            out += [(direction, json.dumps(m("bot-llm-text", {"text": piece}))) for piece in pieces]
        else:
            out.append((direction, json.dumps(message)))
    return out


def frames(sessions: int, turns: int, pii: bool = False) -> list[tuple[int, int, str, str]]:
    """(session index, seq, direction, text) for all sessions, interleaved round-robin."""
    template = session(turns, pii)
    return [(s, seq, direction, text) for seq, (direction, text) in enumerate(template, 1) for s in range(sessions)]


def run(stream: list[tuple[int, int, str, str]], sessions: int) -> float:
    states = [SessionState() for _ in range(sessions)]
    now = time.time()
    start = time.perf_counter()
    for index, seq, direction, text in stream:
        checked = validate(text)
        states[index].apply(Event(seq, direction, now, checked.message, checked.valid, checked.error))
    elapsed = time.perf_counter() - start
    assert all(s.counts["invalid"] == 0 and len(s.turns) > 0 for s in states)
    return elapsed


def run_stored(stream: list[tuple[int, int, str, str]], sessions: int, redactor) -> float:
    """As ingest does it: validate, redact (NONE: off), make the stored text, fold."""
    states = [SessionState() for _ in range(sessions)]
    now = time.time()
    start = time.perf_counter()
    for index, seq, direction, text in stream:
        checked, removed = redact(validate(text), redactor)
        checked, _ = stored_form(checked)
        states[index].apply(Event(seq, direction, now, checked.message, checked.valid, checked.error, removed))
    elapsed = time.perf_counter() - start
    assert all(s.counts["invalid"] == 0 and len(s.turns) > 0 for s in states)
    return elapsed


def run_validate_only(stream: list[tuple[int, int, str, str]]) -> float:
    start = time.perf_counter()
    for _, _, _, text in stream:
        validate(text)
    return time.perf_counter() - start


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300, help="sessions streaming at once")
    parser.add_argument("--turns", type=int, default=6, help="voice turns per session")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redact", action="store_true", help="also time redaction on against off (same run)")
    parser.add_argument("--pii", action="store_true", help="a phone number, e-mail and card in every user line")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    stream = frames(args.sessions, args.turns, args.pii)
    kinds = Counter(json.loads(text)["type"] for _, _, _, text in stream[:: args.sessions])
    per_session = sum(kinds.values())
    rates = [len(stream) / run(stream, args.sessions) for _ in range(args.repeat)]
    parse_rates = [len(stream) / run_validate_only(stream) for _ in range(args.repeat)]

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores (1 used), Python {platform.python_version()}")
    print(
        f"mix: {per_session} messages per session: bot-llm-text {kinds['bot-llm-text'] / per_session:.0%}, "
        f"metrics {kinds['metrics'] / per_session:.0%}, {len(kinds) - 2} other types"
    )
    print(
        f"{len(stream):,} messages over {args.sessions} sessions (parse + validate + reduce), {args.repeat} runs: "
        f"median {statistics.median(rates):,.0f} msg/s, best {max(rates):,.0f} msg/s on one core"
    )
    print(f"parse + validate alone: median {statistics.median(parse_rates):,.0f} msg/s")
    if args.redact:
        off, on = [], []
        for _ in range(args.repeat):  # interleaved, so both see the same machine
            off.append(len(stream) / run_stored(stream, args.sessions, NONE))
            on.append(len(stream) / run_stored(stream, args.sessions, DEFAULT))
        off_rate, on_rate = statistics.median(off), statistics.median(on)
        print(
            f"as ingest (validate + stored text + reduce){' with PII in every user line' if args.pii else ''}: "
            f"redaction off {off_rate:,.0f} msg/s, on {on_rate:,.0f} msg/s: "
            f"{on_rate / off_rate:.1%} of the throughput ({1 - on_rate / off_rate:.1%} lower)"
        )


if __name__ == "__main__":
    main()
