"""The dashboard's exported scenarios run by the real `pipecat eval suite` against a real local Pipecat bot, offline.

The scenario files are the project's own (`rtvi_monitor.evals.scenario.document`, laid out as the agent's
suite zip lays them out); the bot is tests/evals/e2e/bot.py, spawned by the CLI with Pipecat's dev runner;
what is asserted is the CLI's results.jsonl (see harness.py). A worse deployment is the same bot with
E2E_BOT_WRONG=1 (other words, no function call) or E2E_BOT_DELAY_MS (a slow answer).
"""

import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.evals.results import FAILURE_KINDS  # noqa: E402

from tests.evals.e2e import harness  # noqa: E402
from tests.speech import need_espeak  # noqa: E402

pytestmark = pytest.mark.timeout(180)

ORDER_CALL = [{"name": "lookup_order", "args": {"order_id": "1234"}}]


def order_turns():
    """A caller asks after an order (the bot looked it up, then answered) and says goodbye."""
    return [
        harness.turn(1, "Where is my order 1234", calls=ORDER_CALL, latency_ms=900, contains="arrives Friday"),
        harness.turn(2, "Thank you, goodbye", latency_ms=700, contains="welcome"),
    ]


@pytest.fixture(autouse=True)
def _cli():
    harness.need_pipecat_cli()


def explain(run) -> str:
    return run.explain()


def test_text_scenario_passes_against_the_bot_and_fails_against_a_wrong_one(tmp_path):
    folder = harness.write_scenario(tmp_path / "support-bot", "order status", order_turns())
    good = harness.run_suite(folder, tmp_path / "runs", modality="text", name="good", label="good")
    wrong = harness.run_suite(
        folder, tmp_path / "runs", modality="text", name="wrong", label="wrong", env={"E2E_BOT_WRONG": "1"}
    )

    assert good.returncode == 0, explain(good)
    [record] = good.records
    assert record["scenario"] == "order-status/text" and record["kind"] == "script" and record["attempt"] == 1
    assert record["passed"] is True and record["failures"] == [] and record["error"] is None, explain(good)
    first, second = record["turns"]
    assert [e["event_name"] for e in first["expectations"]] == ["function_call", "llm_response"]
    assert first["expectations"][0]["matched"] == "lookup_order"
    assert "arrives Friday" in first["expectations"][1]["matched"]
    assert "welcome" in second["expectations"][0]["matched"]
    link = good.link(record)
    assert link["log"] == record["artifacts"]["log"]  # the bot's own stdout is the record's log
    assert link["body"]["scenario_file"] == "order-status.yaml"
    assert link["dashboard_session_id"] is None  # no dashboard in the environment: none streamed

    assert wrong.returncode == 1, explain(wrong)
    [record] = wrong.records
    assert record["passed"] is False and record["error"] is None, explain(wrong)
    kinds = {(f["turn_index"], f["event_name"]): f["kind"] for f in record["failures"]}
    assert set(kinds.values()) <= set(FAILURE_KINDS)
    assert kinds[(0, "function_call")] in ("missing_function_call", "timeout")  # no call was made
    assert kinds[(1, "llm_response")] == "text_mismatch"  # it answered, in other words
    assert record["events_seen"], "a failing record carries the bot's events"
    assert all(t["status"] == "failed" for t in record["turns"])  # stop_on_failure: false drives every turn


def test_within_ms_fails_under_a_slow_bot(tmp_path):
    folder = harness.write_scenario(tmp_path / "support-bot", "greeting", [harness.turn(1, "Hello there", within_ms=1500)])
    fast = harness.run_suite(folder, tmp_path / "runs", modality="text", name="fast")
    slow = harness.run_suite(folder, tmp_path / "runs", modality="text", name="slow", env={"E2E_BOT_DELAY_MS": "3000"})

    assert [r["passed"] for r in fast.records] == [True], explain(fast)
    [record] = slow.records
    assert record["passed"] is False, explain(slow)
    [failure] = record["failures"]
    assert failure["event_name"] == "llm_response" and failure["kind"] == "timeout"
    assert "1500ms" in failure["reason"]
    assert slow.link(record)["delay_ms"] == 3000


def test_audio_scenario_passes_against_the_bot(tmp_path):
    need_espeak()
    turns = order_turns()
    for one in turns:  # the caller's speech takes its time: the allowance is the operator's to set
        one["within_ms"] = 5000
    folder = harness.write_scenario(tmp_path / "support-bot", "order status", turns, audio=True)
    assert (folder / "audio" / "order-status" / "turn-1.wav").is_file()

    run = harness.run_suite(folder, tmp_path / "runs", modality="audio", name="audio")

    assert run.returncode == 0, explain(run)
    [record] = run.records
    assert record["scenario"] == "order-status/audio" and record["passed"] is True, explain(run)
    first, second = record["turns"]
    assert first["expectations"][0]["matched"] == "lookup_order"
    assert "arrives Friday" in first["expectations"][1]["matched"]
    assert "welcome" in second["expectations"][0]["matched"]
    log = harness.Path(record["artifacts"]["log"]).read_text()
    assert "ScriptedSTT:" in log and "segment -> 'Where is my order 1234'" in log  # heard by the bot's VAD


def test_repeats_give_a_record_per_attempt(tmp_path):
    folder = harness.write_scenario(tmp_path / "support-bot", "order status", order_turns())
    harness.write_scenario(folder, "greeting", [harness.turn(1, "Hello there", contains="orders")])

    run = harness.run_suite(folder, tmp_path / "runs", modality="text", repeat=3, name="sweep")

    assert run.returncode == 0, explain(run)
    by = run.by_scenario()
    assert sorted(by) == ["greeting/text", "order-status/text"], explain(run)
    for scenario, records in by.items():
        assert sorted(r["attempt"] for r in records) == [1, 2, 3], scenario
        assert all(r["passed"] for r in records), explain(run)
        logs = {r["artifacts"]["log"] for r in records}
        assert len(logs) == 3 and all(log.endswith(f"__{r['attempt']:03d}.log") for r, log in zip(records, [r["artifacts"]["log"] for r in records]))
        links = [run.link(r) for r in records]
        assert len({link["pid"] for link in links}) == 3  # every attempt a fresh bot
