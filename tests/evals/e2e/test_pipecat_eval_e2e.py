"""The dashboard's exported scenarios run by the real `pipecat eval suite` against a real local Pipecat bot, offline.

The scenario files are the project's own (`rtvi_monitor.evals.scenario.document`, laid out as the agent's
suite zip lays them out); the bot is tests/evals/e2e/bot.py, spawned by the CLI with Pipecat's dev runner;
what is asserted is the CLI's results.jsonl (see harness.py). A worse deployment is the same bot with
E2E_BOT_WRONG=1 (other words, no function call) or E2E_BOT_DELAY_MS (a slow answer).
"""

import json
import time

import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.evals.results import FAILURE_KINDS

from tests.evals.e2e import harness
from tests.speech import need_espeak

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
    assert kinds[(0, "function_call")] == "missing_function_call"  # no call was made
    assert kinds[(0, "llm_response")] == "text_mismatch"
    assert kinds[(1, "llm_response")] == "text_mismatch"  # it answered, in other words
    assert record["events_seen"], "a failing record carries the bot's events"
    assert all(t["status"] == "failed" for t in record["turns"])  # stop_on_failure: false drives every turn


def test_within_ms_fails_under_a_slow_bot(tmp_path):
    folder = harness.write_scenario(
        tmp_path / "support-bot", "greeting", [harness.turn(1, "Hello there", within_ms=1500)]
    )
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
        for record in records:  # each attempt its own artifacts, numbered
            assert record["artifacts"]["log"].endswith(f"__{record['attempt']:03d}.log")
        links = [run.link(r) for r in records]
        assert len({link["pid"] for link in links}) == 3  # every attempt a fresh bot


def test_each_record_links_to_the_dashboard_session_its_bot_streamed(tmp_path):
    """With RTVI_DASHBOARD_URL and _TOKEN the bot streams its RTVI messages with the SDK's DashboardRTVIProcessor;
    each results.jsonl record names its session (harness.SuiteRun.dashboard_session), text and audio alike."""
    import uuid

    import httpx

    from tests.server import DaphneServer

    need_espeak()
    turns = order_turns()
    for one in turns:
        one["within_ms"] = 5000
    folder = harness.write_scenario(tmp_path / "support-bot", "order status", turns, audio=True)
    org = f"Evals-{uuid.uuid4().hex[:8]}"
    with DaphneServer() as server:
        token = server.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        key = server.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
        run = harness.run_suite(
            folder,
            tmp_path / "runs",
            name="streamed",
            env={"RTVI_DASHBOARD_URL": server.ws_url, "RTVI_DASHBOARD_TOKEN": token, "RTVI_DASHBOARD_EVAL_RUN": "e2e"},
        )
        assert run.returncode == 0 and len(run.records) == 2, explain(run)
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as api:
            for record in run.records:
                session = run.dashboard_session(record)
                assert run.link(record)["dashboard_session_id"] == session
                for _ in range(100):
                    detail = api.get(f"/api/sessions/{session}/").json()
                    if detail.get("status") == "ended":
                        break
                    time.sleep(0.1)
                events = [json.loads(x) for x in api.get(f"/api/sessions/{session}/events.ndjson").text.splitlines()]
                to_client = [e["message"]["type"] for e in events if e["direction"] == "to-client"]
                from_client = [e["message"] for e in events if e["direction"] == "from-client"]
                assert (detail["status"], detail["end_kind"]) == ("ended", "bot_finished")
                said = [m["data"]["content"] for m in from_client if m["type"] == "send-text"]
                if record["scenario"].endswith("/text"):
                    # Text modality: the harness's RTVI send-text reaches the bot as a client message (Pipecat puts it
                    # in the LLM context); the bot reports it as user-input of type chat, never as a transcription.
                    assert said == ["Where is my order 1234", "Thank you, goodbye"]
                    assert "user-transcription" not in to_client and "user-input" in to_client
                else:
                    # Audio modality: the clips arrive as RTVI raw-audio client messages; the bot's STT transcribes.
                    assert said == [] and "raw-audio" in {m["type"] for m in from_client}
                    assert {"user-transcription", "user-started-speaking", "user-stopped-speaking"} <= set(to_client)
                assert [t["text"] for t in detail["transcript"] if t["role"] == "user"] == [
                    "Where is my order 1234",
                    "Thank you, goodbye",
                ]
                assert "llm-function-call-in-progress" in to_client


async def test_the_bots_tts_speaks_with_espeak():
    """The bot's EspeakTTS, in a pipeline of its own: the eval scenarios here never hear it (the harness asks for
    skip_tts unless a scenario's judge listens), so it is checked directly."""
    from pipecat.frames.frames import EndFrame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from tests.evals.e2e.bot import EspeakTTS

    need_espeak()
    heard = []

    class Ear(FrameProcessor):
        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                heard.append(frame)
            await self.push_frame(frame, direction)

    worker = PipelineWorker(
        Pipeline([EspeakTTS(), Ear()]), params=PipelineParams(audio_out_sample_rate=24000), cancel_on_idle_timeout=False
    )
    await worker.queue_frames([TTSSpeakFrame("Your order has shipped."), EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
    assert heard and {f.sample_rate for f in heard} == {24000}
    seconds = sum(len(f.audio) for f in heard) / 2 / 24000
    assert 0.8 < seconds < 5, seconds
