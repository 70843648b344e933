"""The session page's model: a snapshot plus the reducer's patches is the reducer's state.

For real Pipecat-shaped sessions, split at every message: the first k fold
into a SessionState whose to_dict() and bases() are the page's snapshot; the
rest come in batches, each with the patch take_changes() made. Applying the
patches to the snapshot, with static/js/model.js (in node) and with
rtvi_monitor.core.patches.apply_changes, must give exactly the reducer's final
to_dict(): the page renders the server's state and derives nothing.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rtvi_monitor.core.patches import apply_changes
from rtvi_monitor.core.protocol import validate
from rtvi_monitor.core.reducer import limits as state_module
from rtvi_monitor.core.state import Event, SessionState
from tests.conftest import skip_or_fail
from tests.rtvi_samples import barge_in_turn, chat_turn, legacy_v1_turn, pipecat_conversation_pairs

MODEL_CHECK = Path(__file__).resolve().parents[1] / "js" / "model_check.mjs"
T0 = 1_750_000_000.0
END = "end"  # a step that is no message: the server ends the session (its bot left)
BATCH_SIZES = (1, 5)


def events(pairs, step=0.1):
    out = []
    for i, (direction, message) in enumerate(pairs):
        checked = validate(message)
        out.append(Event(i + 1, direction, T0 + i * step, checked.message, checked.valid, checked.error))
    return out


def operator_turns():
    """A conversation, then an operator's text (the dashboard's record and the bot's report of it, the record
    first), the bot speaking it, and the operator's end: reducer/operators.py's lines."""
    out = events(pipecat_conversation_pairs())
    record = {
        "label": "rtvi-ai",
        "type": "server-message",
        "id": "dashboard-c1",
        "data": {
            "text": "operator ann sent text (12 characters; run now, spoken): the bot took it",
            "dashboard": {
                "action": "send-text",
                "id": "c1",
                "operator": "ann",
                "ok": True,
                "content": "Please hold.",
                "options": {"run_immediately": True, "audio_response": True},
            },
        },
    }
    echo = {"label": "rtvi-ai", "type": "send-text", "id": "dashboard-c1", "data": {"content": "Please hold."}}
    spoken = [
        {"label": "rtvi-ai", "type": "bot-started-speaking"},
        {"label": "rtvi-ai", "type": "bot-tts-text", "data": {"text": "Please hold."}},
        {"label": "rtvi-ai", "type": "bot-stopped-speaking"},
    ]
    ended = {
        "label": "rtvi-ai",
        "type": "server-message",
        "id": "dashboard-c2",
        "data": {
            "text": "x",
            "dashboard": {"action": "end", "id": "c2", "operator": "ann", "ok": True, "cancel": False},
        },
    }
    steps = [("dashboard", "to-client", record), ("", "from-client", echo)]
    steps += [("", "to-client", m) for m in spoken] + [("dashboard", "to-client", ended)]
    for stream, direction, message in steps:
        seq = len(out) + 1
        checked = validate(message)
        out.append(Event(seq, direction, T0 + seq * 0.1, checked.message, checked.valid, checked.error, None, stream))
    return [*out, END]


SAMPLES = {
    "operator": operator_turns,
    "pipecat-ended": lambda: [*events(pipecat_conversation_pairs()), END],
    "pipecat-1x-client": lambda: events(pipecat_conversation_pairs(client_version="1.0.0")),
    "pipecat-word-timestamps": lambda: events(pipecat_conversation_pairs(word_timestamps=True)),
    "barge-in": lambda: events(
        barge_in_turn("Where is my order?", ["Let me check that for you.", "It ships today."], 2)
    ),
    "chat": lambda: events(chat_turn("Book a table", "For how many?")),
    "legacy-v1": lambda: events(legacy_v1_turn("Hi", ["Hello.", "How can I help?"])),
    "legacy-v1-words": lambda: events(legacy_v1_turn("Hi", ["Hello.", "How can I help?"], words=True)),
}


def run(state: SessionState, step) -> None:
    if step == END:
        state.end(state.last_at + 1, "bot disconnected")
    else:
        state.apply(step)


def roundtrip(value):
    """What the browser receives: the value through JSON."""
    return json.loads(json.dumps(value))


def cases(steps: list, batch_sizes=BATCH_SIZES) -> list[dict]:
    """For every split point and batch size: the snapshot, the batches after it, and the reducer's final state."""
    out = []
    for batch_size in batch_sizes:
        for k in range(len(steps) + 1):
            state = SessionState()
            for step in steps[:k]:
                run(state, step)
            snapshot = roundtrip({"state": state.to_dict(), "bases": state.bases()})
            state.take_changes()  # the stream starts here
            batches = []
            for i in range(k, len(steps), batch_size):
                before = state.version
                for step in steps[i : i + batch_size]:
                    run(state, step)
                batches.append({"from": before, "to": state.version, "changes": state.take_changes()})
            out.append(
                {
                    "name": f"split at {k}, batches of {batch_size}",
                    "snapshot": snapshot,
                    "batches": roundtrip(batches),
                    "expected": roundtrip(state.to_dict()),
                    "bases": state.bases(),
                }
            )
    return out


@pytest.fixture(scope="module")
def node():
    path = shutil.which("node")
    if path is None:
        skip_or_fail("node is not installed (apt-get install nodejs): the page's model.js is checked with it")
    return path


def check_in_node(node: str, all_cases: list[dict], tmp_path: Path) -> None:
    data = tmp_path / "cases.json"
    data.write_text(json.dumps([{k: c[k] for k in ("name", "snapshot", "batches")} for c in all_cases]))
    done = subprocess.run([node, str(MODEL_CHECK), str(data)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["name"] for r in results] == [c["name"] for c in all_cases]
    for case, result in zip(all_cases, results, strict=True):
        assert result["fits"] == ["apply"] * len(case["batches"]), case["name"]
        assert result["version"] == case["expected"]["version"], case["name"]
        assert result["state"] == case["expected"], case["name"]


def check_in_python(all_cases: list[dict]) -> None:
    for case in all_cases:
        state, bases = case["snapshot"]["state"], case["snapshot"]["bases"]
        for batch in case["batches"]:
            apply_changes(state, bases, batch["changes"])
        assert state == case["expected"], case["name"]
        assert bases == case["bases"], case["name"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_page_model_from_any_snapshot_ends_as_the_reducers_state(sample, node, tmp_path):
    check_in_node(node, cases(SAMPLES[sample]()), tmp_path)


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_reference_apply_changes_ends_as_the_reducers_state(sample):
    check_in_python(cases(SAMPLES[sample]()))


@pytest.fixture
def small_caps(monkeypatch):
    monkeypatch.setattr(state_module, "MAX_ITEMS", 3)
    monkeypatch.setattr(state_module, "MAX_INTERVALS", 2)
    monkeypatch.setattr(state_module, "MAX_POINTS", 2)


def dropped_somewhere(bases) -> bool:
    if isinstance(bases, dict):
        return any(dropped_somewhere(b) for b in bases.values())
    return bases > 0


# Batches of 50: more items than a cap come (and go) between two patches.
CAPPED_BATCH_SIZES = (*BATCH_SIZES, 50)


def test_lists_past_their_caps_drop_from_the_front_in_the_page_model_too(small_caps, node, tmp_path):
    all_cases = cases(SAMPLES["pipecat-ended"](), CAPPED_BATCH_SIZES)
    assert dropped_somewhere(all_cases[-1]["bases"])  # the caps bit: lists did drop from the front
    assert len(all_cases[-1]["expected"]["transcript"]) == 3
    check_in_node(node, all_cases, tmp_path)


def test_lists_past_their_caps_drop_from_the_front_in_the_reference_too(small_caps):
    check_in_python(cases(SAMPLES["pipecat-ended"]()))


def test_more_items_than_a_cap_between_two_patches_in_the_reference(small_caps):
    check_in_python(cases(SAMPLES["pipecat-ended"](), (50,)))
