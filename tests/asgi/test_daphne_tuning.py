"""dashboard/server/daphne_tuning.py: daphne's connections send at once when nothing is queued and lose nothing;
small frames unmask as autobahn unmasks them.

Each case runs tests/daphne_tuning_run.py (a real twisted reactor on asyncio,
as daphne runs it, real sockets read slowly from threads) with write-through
installed and, as the control, without: bytes arrive complete and in order
either way, including writes far larger than the socket buffer, writes
queued behind them, close after writes, and a peer that resets the
connection mid-stream, writes held in corked() blocks; with write-through
a small write on an idle connection leaves no write registration (it was
sent), without it every write is registered.
"""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

RUN = Path(__file__).resolve().parents[1] / "daphne_tuning_run.py"


def run(mode: str, plans: list[list]) -> dict:
    done = subprocess.run(
        [sys.executable, str(RUN), mode, json.dumps(plans)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def random_plans(seed: int, count: int) -> list[list]:
    """Writes of every size (empty, a few bytes, past the socket buffer), turns between some, then a close."""
    rng = random.Random(seed)
    plans = []
    for _ in range(count):
        ops = []
        for _ in range(rng.randint(1, 25)):
            size = rng.choice([0, 1, 7, 200, 4096, 70_000, 300_000, 2_000_000])
            if rng.random() < 0.2:
                ops.append(["cork", [rng.choice([0, 5, 300, 70_000, 2_000_000]) for _ in range(rng.randint(1, 6))]])
            else:
                ops.append(["write", size])
            if rng.random() < 0.4:
                ops.append(["turn"])
        plans.append([*ops, ["close"]])
    return plans


FIXED = [
    [["write", 20], ["close"]],  # one small frame, then close: delivered before the end
    [["write", 3_000_000], ["write", 5], ["write", 9], ["close"]],  # small writes queued behind a large one
    [["write", 5], ["turn"], ["write", 5], ["turn"], ["write", 5], ["close"]],  # idle between each
    [["write", 40], ["turn"], ["keep_writing"]],  # the client resets the connection
    [["cork", [30, 40, 50]], ["turn"], ["cork", [9]], ["close"]],  # acks held in a block, sent as one
    [["write", 3_000_000], ["cork", [5, 6]], ["write", 7], ["close"]],  # a block behind a queue, a write after
    [["cork_sequence", [11, 12]], ["close"]],  # a writeSequence after a held write: still in order
    [["write", 8], ["cork_close_waiting", [13, 14]]],  # closed in a block that waits: what it held is sent
]


@pytest.mark.parametrize("mode", ["on", "off"])
def test_every_byte_arrives_in_order(mode):
    plans = FIXED + random_plans(seed=26, count=12)
    result = run(mode, plans)
    for i, (plan, outcome) in enumerate(zip(plans, result["plans"], strict=True)):
        if plan[-1][0] == "cork_close_waiting":
            assert outcome["same"] and outcome["lost"], f"plan {i} ({mode}): {outcome}"
        elif plan[-1] == ["keep_writing"]:
            assert outcome["lost"], f"plan {i}: a reset connection is reported lost"
        else:
            assert outcome["same"], f"plan {i} ({mode}): {outcome}"
            assert outcome["lost"], f"plan {i}: closed after its writes"
    assert result["queued"] > 0  # writes past the socket buffer queue in both modes
    assert (result["held"] > 0) == (mode == "on")  # corked() holds writes only when installed


def test_small_writes_on_an_idle_connection_go_at_once_only_with_daphne_tuning():
    plans = [[["write", 100], ["turn"]] * 20 + [["close"]]] * 3
    on, off = run("on", plans), run("off", plans)
    assert on["at_once"] == 60 and on["queued"] == 0
    assert off["at_once"] == 0 and off["queued"] == 60


def test_install_is_idempotent_and_reported():
    code = (
        "from dashboard.server import daphne_tuning as t; from twisted.internet import tcp; "
        "from autobahn.websocket import protocol as p; "
        "original = tcp.Connection.write; assert not t.installed(); t.install(); t.install(); "
        "assert t.installed() and tcp.Connection.write is t._write and t._queued_write is original; "
        "assert p.create_xor_masker is t._create_xor_masker and t._native_masker is not t._create_xor_masker; "
        "assert p.hltype(t.install) == 'install' and p.hlval(3) == 3; "
        "assert p.WebSocketProtocol.fire is t._fire and t._native_fire is not t._fire; "
        "assert p.WebSocketProtocol.processData is t._process_data and t._native_process_data is not None; "
        "assert p.WebSocketProtocol.sendMessage is t._send_message and t._native_send_message is not None; "
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=RUN.parent.parent, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=4, max_size=4), st.binary(max_size=1023), st.lists(st.integers(0, 1023), max_size=4))
def test_small_frames_unmask_as_autobahn_does(mask, payload, cuts):
    """A frame under SMALL_FRAME bytes is unmasked by one integer XOR, in however many pieces it arrives:
    the same bytes and pointer as autobahn's native masker."""
    from autobahn.websocket.xormasker import create_xor_masker

    from dashboard.server.daphne_tuning import SMALL_FRAME, _SmallMasker

    assert len(payload) < SMALL_FRAME
    ours, theirs = _SmallMasker(mask), create_xor_masker(mask, len(payload))
    got, expected, start = b"", b"", 0
    for end in [*sorted(c for c in cuts if c <= len(payload)), len(payload)]:
        got += ours.process(payload[start:end])
        expected += theirs.process(payload[start:end])
        start = end
        assert ours.pointer() == theirs.pointer()
    assert got == expected
    ours.reset()
    assert ours.pointer() == 0


def test_an_event_nobody_listens_to_fires_as_a_fired_deferred_would(monkeypatch):
    """autobahn fires "message" after every frame; with no listener, `_fire` answers as the fired Deferred of []
    would (a callback at once, never an errback), and an event autobahn does not know is still refused; with a
    listener, autobahn's own fire runs it."""
    import txaio

    txaio.use_twisted()
    from autobahn.util import ObservableMixin

    from dashboard.server import daphne_tuning

    class Protocol(ObservableMixin):
        def __init__(self):
            self.set_valid_events(["message"])

    monkeypatch.setattr(daphne_tuning, "_native_fire", ObservableMixin.fire)  # what install() keeps
    quiet = Protocol()
    got, errors = [], []
    fired = daphne_tuning._fire(quiet, "message", b"payload", is_binary=False)
    txaio.add_callbacks(fired, got.append, errors.append)
    txaio.add_callbacks(fired, None, errors.append)
    fired.addCallback(got.append)
    assert got == [[], []] and errors == []
    with pytest.raises(RuntimeError, match="Invalid event"):
        daphne_tuning._fire(quiet, "nonsense")

    listened = Protocol()
    heard = []
    listened.on("message", lambda payload, is_binary: heard.append((payload, is_binary)))
    result = daphne_tuning._fire(listened, "message", b"payload", is_binary=True)
    assert heard == [(b"payload", True)] and result is not daphne_tuning._FIRED
