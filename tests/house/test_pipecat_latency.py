"""A real Pipecat pipeline's latency contributions (UserBotLatencyObserver) through the bot package into the real
server: each turn's breakdown arrives, is kept on its turn, sums to the wait, and shows on the turns API.

The services are scripted with set delays (no network): the VAD waits out 0.2 s of silence, the STT takes
0.06 s to finalise, the LLM 0.15 s to its first token (and says so in a TTFB metric), the TTS 0.1 s to its
first audio. The frames are the ones Pipecat's own services and transports push, in their order.
"""

import asyncio
import json
import sys
import time
import uuid

import httpx
import pytest

pipecat = pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.frames.frames import (  # noqa: E402
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    MetricsFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData  # noqa: E402
from pipecat.observers.user_bot_latency_observer import UserBotLatencyObserver  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402
from rtvi_dashboard.latency import LATENCY_TYPE  # noqa: E402
from rtvi_dashboard.pipecat import DashboardRTVIProcessor  # noqa: E402

from rtvi_monitor.core import contributions  # noqa: E402
from tests.server import DaphneServer  # noqa: E402

ORG = f"Acme-{uuid.uuid4().hex[:8]}"
pytestmark = pytest.mark.timeout(120)
STOP_SECS, STT_SECS, LLM_SECS, TTS_SECS = 0.2, 0.06, 0.15, 0.1


class DelayedLLM(FrameProcessor):
    """Asked when the user's turn is released: its first token LLM_SECS later, with its TTFB metric."""

    def __init__(self, answers):
        super().__init__(name="DelayedLLM#0")
        self.answers = answers

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame) and self.answers:
            await self.push_frame(LLMFullResponseStartFrame())
            await asyncio.sleep(LLM_SECS)
            await self.push_frame(MetricsFrame(data=[TTFBMetricsData(processor=self.name, model="canned-1", value=LLM_SECS)]))  # fmt: skip # noqa: E501
            for token in self.answers.pop(0):
                await self.push_frame(LLMTextFrame(text=token))
            await self.push_frame(LLMFullResponseEndFrame())


class DelayedTTS(FrameProcessor):
    """Its first audio TTS_SECS after the LLM's first text; the transport's bot-started-speaking right after."""

    def __init__(self):
        super().__init__(name="DelayedTTS#0")
        self.text = ""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            if not self.text:
                await self.push_frame(TTSStartedFrame())
                await asyncio.sleep(TTS_SECS)
                await self.push_frame(TTSAudioRawFrame(audio=b"\0\0" * 160, sample_rate=16000, num_channels=1))
                await self.push_frame(BotStartedSpeakingFrame())
            self.text += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame):
            await self.push_frame(TTSTextFrame(text=self.text.strip(), aggregated_by="sentence"))
            await self.push_frame(TTSStoppedFrame())
            await self.push_frame(BotStoppedSpeakingFrame())
            self.text = ""


@pytest.fixture(scope="module")
def server():
    with DaphneServer() as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        yield running


async def run_call(rtvi, observers=()) -> None:
    """Two spoken turns: speech, the VAD's stop STOP_SECS after the silence began, the final transcription
    STT_SECS later, then the turn released (user-stopped-speaking); the LLM and TTS answer with their delays."""
    pipeline = Pipeline([DelayedLLM([["It", " ships", " today."], ["You're", " welcome."]]), DelayedTTS()])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(enable_metrics=True),
        rtvi_processor=rtvi,
        observers=list(observers),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker, frame):
        started.set()

    async def speak():
        await started.wait()
        for said in ("Where is my order?", "Thanks!"):
            await worker.queue_frames([UserStartedSpeakingFrame(), VADUserStartedSpeakingFrame()])
            await asyncio.sleep(0.1)
            await asyncio.sleep(STOP_SECS)  # the silence the VAD waits out
            await worker.queue_frame(VADUserStoppedSpeakingFrame(stop_secs=STOP_SECS, timestamp=time.time()))
            await asyncio.sleep(STT_SECS)
            await worker.queue_frames([TranscriptionFrame(text=said, user_id="u", timestamp="t"), UserStoppedSpeakingFrame()])  # fmt: skip # noqa: E501
            await asyncio.sleep(LLM_SECS + TTS_SECS + 0.4)
        await worker.queue_frame(EndFrame())

    await asyncio.gather(WorkerRunner(handle_sigint=False).run(worker), speak())


async def read(server, session_id, path=""):
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        for _ in range(100):
            detail = (await api.get(f"/api/sessions/{session_id}/")).json()
            if detail["status"] == "ended":
                break
            await asyncio.sleep(0.05)
        lines = [json.loads(x) for x in (await api.get(f"/api/sessions/{session_id}/events.ndjson")).text.splitlines()]
        turns = (await api.get(f"/api/sessions/{session_id}/turns/")).json()
    return detail, lines, turns


@pytest.mark.parametrize("own_observer", [False, True], ids=["added by the package", "the bot's own"])
async def test_a_real_pipelines_contributions_reach_their_turns_and_sum_to_the_wait(server, own_observer):
    session_id = f"latency-{uuid.uuid4().hex[:6]}"
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id=session_id)
    observers = [UserBotLatencyObserver()] if own_observer else []
    await run_call(rtvi, observers)
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0
    if own_observer:
        assert rtvi.latency_observer is observers[0]  # the bot's own is used, none added beside it
    detail, lines, body = await read(server, session_id)

    breakdowns = [line for line in lines if (line["message"] or {}).get("type") == LATENCY_TYPE]
    assert len(breakdowns) == 2 and all(b["direction"] == "to-client" for b in breakdowns)
    assert detail["invalid_count"] == 0 and detail["unknown_count"] == 0  # valid, of a type the catalog knows
    # Stored as the bot sent it, each part as Pipecat named it; the parts sum to the total.
    for line in breakdowns:
        data = line["message"]["data"]
        # Rounded to the microsecond each: within a microsecond a part.
        assert abs(sum(p["duration_secs"] for p in data["contributions"]) - data["total_secs"]) < 1e-6 * len(
            data["contributions"]
        )
        assert not line.get("redacted")  # figures a redactor leaves alone: durations only, rounded to the µs
        assert {p["owner_kind"] for p in data["contributions"]} <= set(contributions.OWNER_KINDS)

    # On the turns API: each turn with its own breakdown, beside its five stages.
    assert len(body["turns"]) == 2 and body["contents"] is True
    for turn in body["turns"]:
        parts = {c["key"]: c for c in turn["contributions"]}
        assert {"endpointing_wait", "llm_inference", "speech_synthesis"} <= set(parts), parts
        assert parts["endpointing_wait"]["kind"] == "setting" and parts["endpointing_wait"]["ms"] == pytest.approx(
            STOP_SECS * 1000, abs=1
        )
        assert parts["llm_inference"]["owner"] == "DelayedLLM#0" and parts["llm_inference"]["kind"] == "service"
        assert parts["llm_inference"]["ms"] == pytest.approx(LLM_SECS * 1000, abs=40)
        assert parts["speech_synthesis"]["owner"] == "DelayedTTS#0"
        assert parts["speech_synthesis"]["ms"] == pytest.approx(TTS_SECS * 1000, abs=40)
        total = sum(c["ms"] for c in turn["contributions"])
        assert total == pytest.approx(turn["contributions_total_ms"], abs=0.01)
        # They sum to the wait: from the user's turn released, what the messages measure (within the tolerance).
        after_release = total - turn["contributions_user_turn_ms"]
        assert abs(after_release - turn["latency_ms"]) <= contributions.tolerance_ms(turn["latency_ms"])
        assert not any("contributions" in note for note in turn["notes"])
        assert len(turn["stages"]) == 5
    # The session page's live state keeps the same on its turns.
    assert [t["contributions"] for t in detail["turns"]] == [t["contributions"] for t in body["turns"]]


async def test_a_pipecat_without_the_observer_streams_as_before(server, monkeypatch):
    """An older Pipecat (no UserBotLatencyObserver module): no breakdown is sent, everything else is."""
    monkeypatch.setitem(sys.modules, "pipecat.observers.user_bot_latency_observer", None)  # import fails
    session_id = f"no-latency-{uuid.uuid4().hex[:6]}"
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id=session_id)
    await run_call(rtvi)
    assert rtvi.latency_observer is None
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0
    detail, lines, body = await read(server, session_id)
    assert not [line for line in lines if (line["message"] or {}).get("type") == LATENCY_TYPE]
    assert len(body["turns"]) == 2 and all(t["contributions"] is None for t in body["turns"])
    assert [t["text"] for t in detail["transcript"] if t["role"] == "user"] == ["Where is my order?", "Thanks!"]


async def test_latency_off_sends_none(server, monkeypatch):
    monkeypatch.setenv("RTVI_DASHBOARD_LATENCY", "0")
    session_id = f"latency-off-{uuid.uuid4().hex[:6]}"
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id=session_id)
    await run_call(rtvi)
    assert rtvi.latency_observer is None
    _, lines, _ = await read(server, session_id)
    assert not [line for line in lines if (line["message"] or {}).get("type") == LATENCY_TYPE]
