"""A real Pipecat pipeline (PipelineWorker, RTVIProcessor, RTVIObserver) streaming to the real dashboard.

The LLM and TTS are scripted processors that push the frames Pipecat's
services push (streamed tokens, TTS text, speaking state, metrics in
seconds); no network. The bot's "client" is the end of the pipeline, where a
transport would pick up the RTVI frames.
"""

import asyncio
import functools
import json
import os
import re
import uuid
from types import SimpleNamespace

import httpx
import pytest

pipecat = pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.frames.frames import (  # noqa: E402
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    Frame,
    InputTransportMessageFrame,
    InterimTranscriptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    MetricsFrame,
    OutputTransportMessageUrgentFrame,
    TranscriptionFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.processors.frameworks.rtvi import RTVIObserverParams, RTVIProcessor  # noqa: E402
from pipecat.utils.tracing.service_decorators import traced_llm  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402
from rtvi_dashboard.pipecat import DashboardRTVIProcessor  # noqa: E402

from tests.rtvi_samples import as_stored, pseudonymous  # noqa: E402
from tests.server import ROOT, DaphneServer  # noqa: E402

ORG = f"Acme-{uuid.uuid4().hex[:8]}"  # new in every run, for shared databases
pytestmark = pytest.mark.timeout(120)
AGENT = """
from dashboard.models import Agent, Organization
print(Agent.objects.get_or_create(organization=Organization.objects.get(name={org!r}), name={name!r})[0].pk)
"""


class ScriptedLLM(FrameProcessor):
    """Answers each final transcription by streaming canned tokens, with a TTFB metric in seconds.

    Traced as Pipecat's LLM services are: its answer runs under Pipecat's own `traced_llm`, with the
    tracing setup an AIService takes from the worker, so an LLM span hangs under each turn's span.
    """

    def __init__(self, answers: list[list[str]]):
        super().__init__()
        self.answers = answers
        self._full_model_name = "canned-1"

    async def setup(self, setup):
        await super().setup(setup)
        self._tracing_enabled = setup.enable_tracing  # as pipecat.services.ai_service.AIService does
        self._tracing_context = setup.tracing_context

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame) and self.answers:
            await self._answer(None)

    @traced_llm
    async def _answer(self, context):
        await self.push_frame(LLMFullResponseStartFrame())
        await self.push_frame(
            MetricsFrame(data=[TTFBMetricsData(processor="ScriptedLLM#0", model="canned-1", value=0.21)])
        )
        for token in self.answers.pop(0):
            await self.push_frame(LLMTextFrame(text=token))
        await self.push_frame(LLMFullResponseEndFrame())


class ScriptedTTS(FrameProcessor):
    """Speaks each LLM response: TTS started, the spoken text, bot speaking, TTS stopped."""

    def __init__(self):
        super().__init__()
        self.text = ""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.text += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame):
            await self.push_frame(TTSStartedFrame())
            await self.push_frame(
                MetricsFrame(data=[TTFBMetricsData(processor="ScriptedTTS#0", model="tone", value=0.12)])
            )
            await self.push_frame(BotStartedSpeakingFrame())
            await self.push_frame(TTSTextFrame(text=self.text.strip(), aggregated_by="sentence"))
            await self.push_frame(TTSStoppedFrame())
            await self.push_frame(BotStoppedSpeakingFrame())
            self.text = ""


class BotsClient(FrameProcessor):
    """Where the transport would take RTVI frames to the bot's own client: records them."""

    def __init__(self):
        super().__init__()
        self.received: list[dict] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, OutputTransportMessageUrgentFrame):
            self.received.append(frame.message)
        await self.push_frame(frame, direction)


def client_message(type_: str, data=None, id_="c1") -> InputTransportMessageFrame:
    return InputTransportMessageFrame(message={"label": "rtvi-ai", "type": type_, "id": id_, "data": data or {}})


@pytest.fixture(scope="module")
def server():
    with DaphneServer() as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        yield running


def scripted_pipeline(bots_client) -> Pipeline:
    return Pipeline([ScriptedLLM([["It", " ships", " today."], ["You're", " welcome."]]), ScriptedTTS(), bots_client])


async def run_bot(rtvi, client_version: str = "2.1.0", **worker_options) -> BotsClient:
    bots_client = BotsClient()
    worker = PipelineWorker(
        scripted_pipeline(bots_client),
        params=PipelineParams(enable_metrics=True, enable_usage_metrics=True),
        rtvi_processor=rtvi,
        cancel_on_idle_timeout=False,
        **worker_options,
    )
    await drive(worker, client_version)
    return bots_client


async def drive(worker, client_version: str = "2.1.0") -> None:
    """Run the worker through a two-turn call its client starts, then end its pipeline."""
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker, frame):
        started.set()

    async def speak():
        await started.wait()
        frames = [client_message("client-ready", {"version": client_version, "about": {"library": "test-client"}})]
        for heard, said in (("where is my", "Where is my order?"), ("thanks", "Thanks!")):
            frames += [
                UserStartedSpeakingFrame(),
                InterimTranscriptionFrame(text=heard, user_id="u", timestamp="t"),
                UserStoppedSpeakingFrame(),
                TranscriptionFrame(text=said, user_id="u", timestamp="t"),
            ]
        frames.append(client_message("client-message", {"t": "ping", "d": {}}, "m1"))
        for frame in frames:
            await worker.queue_frame(frame)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        await worker.queue_frame(EndFrame())

    await asyncio.gather(WorkerRunner(handle_sigint=False).run(worker), speak())


def readme_bot_snippet() -> tuple[dict[str, str], str]:
    """The README's "Connect a Pipecat bot": the variables its `export` line sets, and its one-line change."""
    section = (ROOT / "README.md").read_text().split("### Connect a Pipecat bot", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    shell = next(code for lang, code in blocks if lang == "sh" and "export RTVI_DASHBOARD_URL" in code)
    python = next(code for lang, code in blocks if lang == "python" and "DashboardRTVIProcessor(" in code)
    return dict(re.findall(r"\b(RTVI_DASHBOARD_\w+)=(\S+)", shell)), python


async def test_the_readmes_snippet_with_the_readmes_variables_streams_a_real_bot_as_its_agent(server, monkeypatch):
    """The README's export line and Python, run as written: the names it sets are the ones the package reads."""
    exports, snippet = readme_bot_snippet()
    assert set(exports) == {"RTVI_DASHBOARD_URL", "RTVI_DASHBOARD_TOKEN", "RTVI_DASHBOARD_AGENT_ID"}, exports
    agent = exports["RTVI_DASHBOARD_AGENT_ID"]
    agent_id = server.manage("shell", "-c", AGENT.format(org=ORG, name=agent)).split()[
        -1
    ]  # the agent the README names, in this organization: the bot names it by name
    for name, value in (("RTVI_DASHBOARD_URL", server.ws_url), ("RTVI_DASHBOARD_TOKEN", server.token)):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RTVI_DASHBOARD_AGENT_ID", agent)
    session_id = f"readme-{uuid.uuid4().hex[:6]}"
    bots_client = BotsClient()
    namespace = {
        "os": os,
        "runner_args": SimpleNamespace(session_id=session_id),
        "pipeline": scripted_pipeline(bots_client),
        "PipelineWorker": functools.partial(PipelineWorker, cancel_on_idle_timeout=False),
        "PipelineParams": PipelineParams,
    }
    exec(snippet, namespace)  # the README's own lines, run as a bot runs them
    await drive(namespace["worker"])
    assert namespace["rtvi"].dashboard.stats["acked"] == namespace["rtvi"].dashboard.stats["sent"] > 0

    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        for _ in range(100):  # the pipeline ended: the package closed with 1000, and the session ends at once
            detail = (await api.get(f"/api/sessions/{session_id}/")).json()
            if detail["status"] == "ended":
                break
            await asyncio.sleep(0.05)
    assert (detail["agent_id"], detail["agent_name"]) == (agent_id, agent)
    assert [t["text"] for t in detail["transcript"] if t["role"] == "user"] == ["Where is my order?", "Thanks!"]
    assert (detail["status"], detail["end_kind"]) == ("ended", "bot_finished")


async def test_every_rtvi_message_of_a_real_pipeline_reaches_the_dashboard(server):
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id="pipecat-1")
    bots_client = await run_bot(rtvi)
    assert rtvi.dashboard.stats["dropped"] == 0
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0

    sent_to_client = bots_client.received
    types = [m["type"] for m in sent_to_client]
    assert {
        "bot-ready",
        "user-transcription",
        "bot-llm-text",
        "bot-transcription",
        "bot-started-speaking",
        "metrics",
    } <= set(types)

    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        lines = [json.loads(x) for x in (await api.get("/api/sessions/pipecat-1/events.ndjson")).text.splitlines()]
        detail = (await api.get("/api/sessions/pipecat-1/")).json()
    to_client = [line["message"] for line in lines if line["direction"] == "to-client"]
    from_client = [line["message"] for line in lines if line["direction"] == "from-client"]
    # Everything the bot's client received, stored in the same order; and what the client sent.
    assert [as_stored(m) for m in to_client] == [as_stored(m) for m in sent_to_client] and pseudonymous(to_client)
    assert [m["type"] for m in from_client] == ["client-ready", "client-message"]
    assert detail["invalid_count"] == 0 and detail["protocol_version"]
    assert [t["text"] for t in detail["transcript"] if t["role"] == "user"] == ["Where is my order?", "Thanks!"]
    assert [t["text"] for t in detail["transcript"] if t["role"] == "bot"] == ["It ships today.", "You're welcome."]
    assert len(detail["turns"]) == 2
    assert detail["llm"]["current_tokens"] == "You're welcome."  # the last reply's tokens once, not twice
    assert detail["metrics"]["ttfb"]


async def test_a_bot_is_monitored_with_no_code_change_through_pipecats_setup_files(server, monkeypatch):
    """The bot keeps Pipecat's own RTVIProcessor; PIPECAT_SETUP_FILES names the package's setup file."""
    import rtvi_dashboard.setup

    monkeypatch.setenv("PIPECAT_SETUP_FILES", rtvi_dashboard.setup.__file__)
    monkeypatch.setenv("RTVI_DASHBOARD_URL", server.ws_url)
    monkeypatch.setenv("RTVI_DASHBOARD_TOKEN", server.token)
    monkeypatch.delenv("RTVI_DASHBOARD_SESSION_ID", raising=False)
    rtvi = RTVIProcessor()
    bots_client = await run_bot(rtvi, conversation_id="pipecat-setup-1")  # the session id, as the runner gives it
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0

    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        lines = (await api.get("/api/sessions/pipecat-setup-1/events.ndjson")).text.splitlines()
    to_client = [json.loads(line)["message"] for line in lines if json.loads(line)["direction"] == "to-client"]
    assert [as_stored(m) for m in to_client] == [as_stored(m) for m in bots_client.received]
    assert pseudonymous(to_client)


DEPRECATED = {"user-transcription", "bot-llm-text", "bot-tts-text"}  # Pipecat 1.13 deprecated them; 2.0 drops them
STYLES = {
    # As Pipecat 2.0 will send it: user text only in user-input, bot text in bot-output and the raw-text types.
    "2.x": (
        "2.2.0",
        RTVIObserverParams(
            user_transcription_enabled=False,
            bot_llm_enabled=False,
            bot_tts_enabled=False,
            stt_raw_text_enabled=True,
            llm_raw_text_enabled=True,
            tts_raw_text_enabled=True,
        ),
    ),
    # As older bots send it: only the deprecated messages, no user-input or bot-output.
    "deprecated only": ("1.0.0", RTVIObserverParams(bot_output_enabled=False, user_input_enabled=False)),
    # Pipecat 1.14's defaults for a 2.2 client with raw text on: both, the same text twice.
    "both": ("2.2.0", RTVIObserverParams(llm_raw_text_enabled=True, tts_raw_text_enabled=True)),
}


@pytest.mark.parametrize("style", STYLES)
async def test_the_transcript_is_the_same_whichever_rtvi_style_a_real_pipeline_sends(server, style):
    version, params = STYLES[style]
    session_id = f"style-{style.replace(' ', '-').replace('.', '')}"
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id=session_id)
    bots_client = await run_bot(rtvi, client_version=version, rtvi_observer_params=params)
    types = {m["type"] for m in bots_client.received}
    # (The scripted TTS frames make Pipecat send bot-transcription, not bot-output or TTS text.)
    if style == "2.x":
        assert not types & DEPRECATED and {"user-input", "stt-raw-text", "llm-raw-text"} <= types
    elif style == "deprecated only":
        assert {"user-transcription", "bot-llm-text"} <= types and "user-input" not in types
    else:
        assert {"user-transcription", "bot-llm-text", "user-input", "llm-raw-text"} <= types

    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        detail = (await api.get(f"/api/sessions/{session_id}/")).json()
    assert detail["invalid_count"] == 0 and detail["unknown_count"] == 0
    assert [t["text"] for t in detail["transcript"] if t["role"] == "user"] == ["Where is my order?", "Thanks!"]
    assert [t["text"] for t in detail["transcript"] if t["role"] == "bot"] == ["It ships today.", "You're welcome."]
    assert len(detail["turns"]) == 2
    assert detail["llm"]["current_tokens"] == "You're welcome."  # the last reply's tokens once, not twice


async def test_a_real_pipelines_traces_join_its_session_and_turns(server):
    """Pipecat's own tracing (enable_tracing) exporting with OpenTelemetry's OTLP/HTTP exporter to /v1/traces."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from pipecat.utils.tracing.setup import setup_tracing

    # The three lines a bot adds (beside conversation_id=its session id on the worker):
    exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces", headers={"Authorization": f"Bearer {server.token}"})
    assert setup_tracing(service_name="support-bot", exporter=exporter)
    rtvi = DashboardRTVIProcessor(dashboard_url=server.ws_url, token=server.token, session_id="traced-1")
    await run_bot(rtvi, enable_tracing=True, conversation_id="traced-1")
    assert await asyncio.to_thread(trace.get_tracer_provider().force_flush)

    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        detail = (await api.get("/api/sessions/traced-1/")).json()
    traces = detail["traces"]
    assert traces is not None and traces["spans"] >= 3  # the conversation and its turns
    assert [t["turn_number"] for t in traces["turns"]] == [1, 2]
    assert all(t["duration_ms"] > 0 for t in traces["turns"])
    # Each turn's LLM span, made by Pipecat's traced_llm, under the turn it answered.
    for turn in traces["turns"]:
        (llm,) = [span for span in turn["spans"] if span["name"] == "llm"]
        assert llm["model"] == "canned-1" and llm["duration_ms"] >= 0
