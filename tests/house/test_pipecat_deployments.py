"""Two deployments of one agent that differ only in the VAD's stop time are told apart on the agent page, and
the comparison blames the setting, not the services.

A real Pipecat pipeline with Pipecat's own UserBotLatencyObserver streams each call through the bot package
into the real server. The services are scripted with set delays (no network), spread as real services' are
and the same for each v1 call as for its v2 twin; only the silence the VAD waits out before it says the user
stopped differs: 0.2 s in deployment v1, 0.5 s in v2
(the agent's active one). Calls of both run at once, interleaved and in step (the replies of a v1 call and of
the v2 call started with it come at the same moments), so that load falls on both sides alike.
The agent page, read as an operator reads it, calls the VAD's part (a setting) worse by about 300 ms at p50
and p95, and the LLM's and the TTS's parts no different.
"""

import asyncio
import html
import json
import random
import re
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
from rtvi_dashboard.pipecat import DashboardRTVIProcessor  # noqa: E402

from tests.server import DaphneServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)
RUN = uuid.uuid4().hex[:6]
ORG = f"Vad-{RUN}"
USER, PASSWORD = f"vad-op-{RUN}", "vad-pair-password-1"
STOP_SECS = {"v1": 0.2, "v2": 0.5}  # the only difference between the two deployments
LONGEST_STOP = max(STOP_SECS.values())
CALLS = 52  # a side: at least compare.MIN_CALLS (50)
AT_ONCE = 16  # calls running at a time, v1 and v2 interleaved
TURNS = ("Where is my order?", "Thanks!"), (["It", " ships", " today."], ["You're", " welcome."])
SEED = """
import json
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from dashboard.models import Agent, ApiKey, Deployment, Membership, Organization

org = Organization.objects.get(name={org!r})
_, org.agents_api_key = ApiKey.issue(org, "agents")  # its agents API: this server's own, the built-in /v1
org.save(update_fields=["agents_api_key"])
user = get_user_model().objects.create_user({user!r}, password={password!r})
Membership.objects.create(user=user, organization=org, role="operator")
now = timezone.now()
agent = Agent.objects.create(organization=org, name="vad-desk-{run}", created_at=now - timedelta(days=2))
v1 = Deployment.objects.create(agent=agent, image="img/vad-desk:v1", manifest={{}}, created_at=now - timedelta(days=2))
v2 = Deployment.objects.create(agent=agent, image="img/vad-desk:v2", manifest={{}}, created_at=now - timedelta(days=1))
agent.active_deployment = v2
agent.save()
print(json.dumps({{"agent": str(agent.pk), "v1": str(v1.pk), "v2": str(v2.pk)}}))
"""


@pytest.fixture(scope="module")
def server():
    """A real server with an organization, its operator, and its built-in agent of two deployments (v2 active)."""
    with DaphneServer() as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--org", ORG).splitlines()[-1]
        seed = SEED.format(org=ORG, user=USER, password=PASSWORD, run=RUN)
        running.seeded = json.loads(running.manage("shell", "-c", seed).splitlines()[-1])
        yield running


def service_delays(pair: int) -> dict[str, list[float]]:
    """A pair's services' delays, each turn's, in seconds: the STT's to its final transcription, the LLM's to its
    first token, the TTS's to its first audio. Spread as real services' are (a fixed delay would leave the
    percentiles to the machine's hiccups), the same for both calls of the pair."""
    rng = random.Random(pair)
    spread = {"stt": (0.06, 0.04), "llm": (0.15, 0.1), "tts": (0.1, 0.06)}
    return {name: [low + rng.uniform(0, wide) for _ in TURNS[0]] for name, (low, wide) in spread.items()}


class ScriptedLLM(FrameProcessor):
    """As test_pipecat_latency's DelayedLLM: asked when the user's turn is released, its first token its turn's
    delay later, with its TTFB metric."""

    def __init__(self, delays: list[float]):
        super().__init__(name="DelayedLLM#0")
        self.answers, self.delays = [list(answer) for answer in TURNS[1]], list(delays)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame) and self.answers:
            delay = self.delays.pop(0)
            await self.push_frame(LLMFullResponseStartFrame())
            await asyncio.sleep(delay)
            await self.push_frame(MetricsFrame(data=[TTFBMetricsData(processor=self.name, model="canned-1", value=delay)]))  # fmt: skip # noqa: E501
            for token in self.answers.pop(0):
                await self.push_frame(LLMTextFrame(text=token))
            await self.push_frame(LLMFullResponseEndFrame())


class ScriptedTTS(FrameProcessor):
    """As test_pipecat_latency's DelayedTTS: its first audio its turn's delay after the LLM's first text."""

    def __init__(self, delays: list[float]):
        super().__init__(name="DelayedTTS#0")
        self.text, self.delays = "", list(delays)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            if not self.text:
                await self.push_frame(TTSStartedFrame())
                await asyncio.sleep(self.delays.pop(0))
                await self.push_frame(TTSAudioRawFrame(audio=b"\0\0" * 160, sample_rate=16000, num_channels=1))
                await self.push_frame(BotStartedSpeakingFrame())
            self.text += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame):
            await self.push_frame(TTSTextFrame(text=self.text.strip(), aggregated_by="sentence"))
            await self.push_frame(TTSStoppedFrame())
            await self.push_frame(BotStoppedSpeakingFrame())
            self.text = ""


async def run_call(rtvi, stop_secs: float, delays: dict[str, list[float]]) -> None:
    """Two spoken turns, as test_pipecat_latency's calls, the VAD's stop `stop_secs` after the silence began.

    The user speaks LONGEST_STOP - stop_secs longer, so that calls of both deployments started together send the
    same frames at the same moments, their VAD's stop and replies too: whatever load the machine is under, both
    sides meet it alike."""
    pipeline = Pipeline([ScriptedLLM(delays["llm"]), ScriptedTTS(delays["tts"])])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(enable_metrics=True),
        rtvi_processor=rtvi,
        observers=[UserBotLatencyObserver()],
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker, frame):
        started.set()

    async def speak():
        await started.wait()
        for turn, said in enumerate(TURNS[0]):
            await worker.queue_frames([UserStartedSpeakingFrame(), VADUserStartedSpeakingFrame()])
            await asyncio.sleep(0.1 + LONGEST_STOP - stop_secs)  # the speech: longer as the VAD's wait is shorter
            await asyncio.sleep(stop_secs)  # the silence the VAD waits out
            await worker.queue_frame(VADUserStoppedSpeakingFrame(stop_secs=stop_secs, timestamp=time.time()))
            await asyncio.sleep(delays["stt"][turn])
            await worker.queue_frames([TranscriptionFrame(text=said, user_id="u", timestamp="t"), UserStoppedSpeakingFrame()])  # fmt: skip # noqa: E501
            await asyncio.sleep(0.75)  # the reply: its LLM's and TTS's delays, then some
        await worker.queue_frame(EndFrame())

    await asyncio.gather(WorkerRunner(handle_sigint=False).run(worker), speak())


async def run_calls(server) -> list[str]:
    """CALLS calls of each deployment, AT_ONCE at a time, interleaved; the session ids, once every one ended."""
    seeded, gate = server.seeded, asyncio.Semaphore(AT_ONCE)
    # In pairs, each pair's first call v1 then v2 by turns: neither side always first on the event loop.
    pairs = [list(STOP_SECS) if i % 2 == 0 else list(reversed(STOP_SECS)) for i in range(CALLS)]
    plan = [(f"vad-{RUN}-{name}-{i:02d}", name, i) for i, pair in enumerate(pairs) for name in pair]

    async def one(session_id: str, name: str, pair: int) -> None:
        async with gate:
            rtvi = DashboardRTVIProcessor(
                dashboard_url=server.ws_url,
                token=server.token,
                session_id=session_id,
                agent_id=seeded["agent"],
                tags={"deployment": seeded[name]},
            )
            await run_call(rtvi, STOP_SECS[name], service_delays(pair))
            assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0

    await asyncio.gather(*(one(*call) for call in plan))
    ids = [session_id for session_id, *_ in plan]
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        for session_id in ids:
            for _ in range(100):
                if (await api.get(f"/api/sessions/{session_id}/")).json()["status"] == "ended":
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"{session_id} did not end")
    return ids


def agent_page(server) -> str:
    """The agent page as its operator sees it, signed in through the login form."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        login = client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        client.post("/login/", data={"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": csrf})
        page = client.get(f"/agents/{server.seeded['agent']}/")
        assert page.status_code == 200, page.text[:500]
        return page.text


ROW = re.compile(r'<tr[^>]*data-figure="([^"]+)" data-verdict="([^"]+)">(.*?)</tr>', re.S)
CHANGE = re.compile(r"(-?\d+) ms \((-?\d+) to (-?\d+)\)")


def comparison(page: str) -> dict[str, dict]:
    """The deployment-change table's rows by figure (`part:endpointing_wait-p50`): its cells and verdict."""
    table = re.search(r'<table class="data" data-testid="deployment-change">(.*?)</table>', page, re.S)
    assert table, "the agent page shows no comparison of its deployments"
    rows = {}
    for figure, verdict, body in ROW.findall(table.group(1)):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]  # fmt: skip # noqa: E501
        row = {"verdict": verdict, "cells": cells}
        found = CHANGE.fullmatch(cells[3]) if len(cells) > 3 else None
        if found:
            row["change"], row["low"], row["high"] = (int(x) for x in found.groups())
        rows[html.unescape(figure)] = row
    return rows


@pytest.fixture(scope="module")
def compared(server) -> tuple[str, dict[str, dict], str]:
    """The agent page once every call of both deployments ended: its page, its comparison's rows, and those as text."""
    asyncio.run(run_calls(server))
    page = agent_page(server)
    rows = comparison(page)
    return page, rows, "\n".join(f"{figure}: {row['cells']}" for figure, row in rows.items())


def test_the_active_deployment_is_compared_against_the_one_before(server, compared):
    page, rows, report = compared
    heading = re.search(r'<h3 id="h-change">(.*?)</h3>', page, re.S).group(1)
    now, before = heading.split(" against ")
    assert server.seeded["v2"][:8] in now and server.seeded["v1"][:8] in before  # v2, the active one, is "now"
    assert rows["latency-p50"]["cells"][4] == f"{CALLS} / {CALLS}", report  # every call of each side read


def test_a_longer_vad_stop_is_blamed_on_the_setting_not_the_services(compared):
    _, rows, report = compared
    for q in ("p50", "p95"):
        vad = rows[f"part:endpointing_wait-{q}"]
        assert vad["cells"][0] == f"endpointing_wait (its bots' breakdown) {q}", report
        assert vad["verdict"] == "worse", report
        assert vad["change"] == pytest.approx(300, abs=15) and vad["low"] > 0, report
        assert vad["cells"][1:3] == ["200 ms", "500 ms"], report
        for service in ("part:llm_inference", "part:speech_synthesis"):
            assert rows[f"{service}-{q}"]["verdict"] == "no difference shown", report


def test_the_whole_wait_shows_the_longer_stop_and_the_turn_latency_does_not(compared):
    """The messages' turn latency starts at user-stopped-speaking, which Pipecat sends once the VAD's wait is over:
    a longer stop time cannot move it. The bots' breakdowns measure from the user's silence: their total, the
    whole wait the caller had, is longer by the stop time."""
    _, rows, report = compared
    for q in ("p50", "p95"):
        assert rows[f"latency-{q}"]["verdict"] == "no difference shown", report
        whole = rows[f"breakdown_total-{q}"]
        assert whole["verdict"] == "worse" and whole["change"] == pytest.approx(300, abs=40), report
