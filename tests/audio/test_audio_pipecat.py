"""A real Pipecat pipeline recording its call into the live dashboard (the bot package's DashboardAudioRecorder).

The pipeline has real transports with no network: the input transport's
microphone is a WAV that espeak-ng speaks (20 ms frames in real time, as a
caller's audio arrives), the output transport plays in real time as a network
transport paces its writes. Between them a scripted STT/LLM/TTS hears the
caller's speech at its place in the audio and answers with the bot's espeak-ng
speech (TTSAudioRawFrames). The package records through both of its paths:
DashboardRTVIProcessor(record_audio=True), and Pipecat's PIPECAT_SETUP_FILES
hook with RTVI_DASHBOARD_RECORD_AUDIO=1. What the dashboard stored is read
back: its chunk rows (through the server's own ORM, `manage.py shell`), the
speech its VAD found (`GET /api/sessions/<id>/audio/`) and the call as WAV.

Skipped without espeak-ng; a failure under CI=true.
"""

import asyncio
import io
import itertools
import json
import logging
import time
import uuid
import wave

import httpx
import numpy as np
import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InputTransportMessageFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIProcessor
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner
from rtvi_dashboard.audio import DashboardAudioRecorder
from rtvi_dashboard.pipecat import DashboardRTVIProcessor, place_recorder

from tests.server import DaphneServer
from tests.speech import need_espeak, silence, speak

ORG = f"Rec-{uuid.uuid4().hex[:8]}"  # new in every run, for shared databases
QUIET = f"Quiet-{uuid.uuid4().hex[:8]}"  # an organization that does not record calls (the default)
pytestmark = pytest.mark.timeout(120)
IN_RATE, OUT_RATE = 16000, 24000  # the caller's audio comes at 16 kHz; the pipeline plays (and records) at 24
CHUNK_SECONDS = 2  # short chunks, so that a short call has several
LOUD = 300  # a sample louder than this is speech (tests/speech.py trims espeak's silence at it)
CALLER, BOT = "Hi, I'd like to check on my order please.", "Of course. Could you give me the order number?"
RECORDING = (
    "from dashboard.models import Organization\nOrganization.objects.filter(name={org!r}).update(record_audio={on})"
)
ROWS = """
import json
from rtvi_monitor.models import AudioChunk, SessionAudio
where = {{"session__session_id": {sid!r}, "session__organization__name": {org!r}}}
chunks = AudioChunk.objects.filter(**where).order_by("track", "index").values("track", "index", "start", "samples")
audio = SessionAudio.objects.filter(**where).values("sample_rate", "origin", "end").first()
print(json.dumps({{"chunks": list(chunks), "audio": audio}}))
"""


class Microphone(BaseInputTransport):
    """An input transport whose caller is a WAV: 20 ms frames, pushed in real time once the transport is ready."""

    def __init__(self, samples: np.ndarray):
        super().__init__(TransportParams(audio_in_enabled=True, audio_in_sample_rate=IN_RATE))
        self.pcm = samples.astype("<i2").tobytes()
        self.pushed: list[tuple[float, int]] = []  # (when, samples pushed so far)
        self.done = asyncio.Event()
        self._feeder = None

    async def start(self, frame):
        await super().start(frame)
        await self.set_transport_ready(frame)
        self._feeder = self.create_task(self._feed())

    async def _feed(self):
        step, began = IN_RATE // 50, time.monotonic()
        for n, offset in enumerate(range(0, len(self.pcm) // 2, step)):
            await asyncio.sleep(max(0.0, began + n * 0.02 - time.monotonic()))
            audio = self.pcm[offset * 2 : (offset + step) * 2]
            await self.push_audio_frame(InputAudioRawFrame(audio=audio, sample_rate=IN_RATE, num_channels=1))
            self.pushed.append((time.time(), offset + len(audio) // 2))
        self.done.set()

    async def _stop_feeding(self):
        if self._feeder is not None:
            await self.cancel_task(self._feeder)
            self._feeder = None

    async def stop(self, frame):
        await self._stop_feeding()
        await super().stop(frame)

    async def cancel(self, frame):
        await self._stop_feeding()
        await super().cancel(frame)

    def heard_at(self, sample: int) -> float:
        """When this sample of the caller's audio passed: its frame's push time, less the samples after it."""
        for when, pushed in self.pushed:
            if pushed > sample:
                return when - (pushed - sample) / IN_RATE
        raise AssertionError(f"sample {sample} was never pushed")


class Speaker(BaseOutputTransport):
    """An output transport that plays in real time: each write takes its chunk's duration, as Pipecat's
    network transports pace theirs; a chunk passes on (to the recorder) as it is played."""

    def __init__(self):
        super().__init__(
            TransportParams(audio_out_enabled=True, audio_out_sample_rate=OUT_RATE, audio_out_end_silence_secs=0)
        )
        self.played: list[tuple[float, bytes]] = []
        self._playing_until = 0.0

    async def start(self, frame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame) -> bool:
        wait = max(0.0, self._playing_until - time.monotonic())
        await asyncio.sleep(wait)
        seconds = len(frame.audio) / 2 / frame.sample_rate
        self._playing_until = (self._playing_until if wait else time.monotonic()) + seconds
        self.played.append((time.time(), frame.audio))
        return True

    def first_speech_at(self) -> float:
        for when, audio in self.played:
            samples = np.frombuffer(audio, dtype="<i2")
            loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > LOUD)
            if len(loud):
                return when - (len(samples) - loud[0]) / OUT_RATE
        raise AssertionError("the bot never spoke")


class ScriptedVoiceBot(FrameProcessor):
    """STT, LLM and TTS, scripted on the caller's audio as it passes: the caller starts and stops speaking where
    the WAV's speech is, and 0.6 s after they stop the bot answers with its speech, streamed as a TTS does."""

    def __init__(self, speech: tuple[int, int], reply: np.ndarray):
        super().__init__()
        self.speech, self.reply = speech, reply
        self.heard = 0
        self.said = ""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if not isinstance(frame, InputAudioRawFrame):
            return
        before, self.heard = self.heard, self.heard + len(frame.audio) // 2
        start, end = self.speech
        if before < start <= self.heard:
            await self.push_frame(UserStartedSpeakingFrame())
        if before < end <= self.heard:
            await self.push_frame(UserStoppedSpeakingFrame())
            await self.push_frame(TranscriptionFrame(text=CALLER, user_id="caller", timestamp="t"))
        if before < end + int(0.6 * IN_RATE) <= self.heard:
            await self.push_frame(TTSStartedFrame())
            pcm, piece = self.reply.astype("<i2").tobytes(), OUT_RATE // 10 * 2
            for offset in range(0, len(pcm), piece):  # 100 ms at a time, faster than real time
                await self.push_frame(TTSAudioRawFrame(pcm[offset : offset + piece], OUT_RATE, 1))
            await self.push_frame(TTSTextFrame(text=BOT, text_type="sentence"))
            await self.push_frame(TTSStoppedFrame())
            self.said = BOT


@pytest.fixture(scope="module")
def server():
    need_espeak()
    with DaphneServer() as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        running.manage("shell", "-c", RECORDING.format(org=ORG, on=True))
        running.quiet_token = running.manage("create_ingest_token", "--create", "--org", QUIET).splitlines()[-1]
        yield running


class Call:
    """One call's audio and transports: the caller speaks after 0.8 s; the bot answers; a second of quiet ends it."""

    def __init__(self):
        lead = silence(0.8, IN_RATE)
        caller = speak(CALLER, "en-us+f3", IN_RATE)
        self.reply = speak(BOT, "en-gb+m3", OUT_RATE)
        tail = silence(0.6 + len(self.reply) / OUT_RATE + 1.0, IN_RATE)
        self.speech = (len(lead), len(lead) + len(caller))  # where the caller speaks, in samples of the WAV
        self.microphone = Microphone(np.concatenate([lead, caller, tail]))
        self.speaker = Speaker()
        self.bot = ScriptedVoiceBot(self.speech, self.reply)

    def pipeline(self, *after_output) -> Pipeline:
        return Pipeline([self.microphone, self.bot, self.speaker, *after_output])

    async def run(self, worker: PipelineWorker) -> None:
        await run_call(worker, self.microphone)


async def run_call(worker: PipelineWorker, microphone: Microphone) -> None:
    """The client says it is ready; the call lasts as long as the caller's audio; then the pipeline ends."""
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker, frame):
        started.set()

    async def hang_up():
        await started.wait()
        ready = {"label": "rtvi-ai", "type": "client-ready", "id": "c1", "data": {"version": "2.1.0"}}
        await worker.queue_frame(InputTransportMessageFrame(message=ready))
        await microphone.done.wait()
        await worker.queue_frame(EndFrame())

    await asyncio.gather(WorkerRunner(handle_sigint=False).run(worker), hang_up())


def worker_for(pipeline: Pipeline, rtvi: RTVIProcessor, **options) -> PipelineWorker:
    params = PipelineParams(audio_in_sample_rate=IN_RATE, audio_out_sample_rate=OUT_RATE)
    return PipelineWorker(pipeline, params=params, rtvi_processor=rtvi, cancel_on_idle_timeout=False, **options)


def stored(server, session_id: str) -> dict:
    return json.loads(server.manage("shell", "-c", ROWS.format(sid=session_id, org=ORG)).splitlines()[-1])


async def wav_of(server, session_id: str) -> tuple[np.ndarray, np.ndarray]:
    """The call as the dashboard plays it: (caller, bot) samples from the recording's origin."""
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        response = await api.get(f"/api/sessions/{session_id}/audio.wav", timeout=30)
    assert response.status_code == 200, response.text
    with wave.open(io.BytesIO(response.content)) as wav:
        assert (wav.getnchannels(), wav.getframerate()) == (2, OUT_RATE)
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return frames[:, 0], frames[:, 1]


def first_loud(samples: np.ndarray) -> int:
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > LOUD)
    assert len(loud), "no speech in the track"
    return int(loud[0])


async def check_recording(server, session_id: str, call: Call, recorder) -> None:
    """What the dashboard stored is the call: its chunks, its rate, its stamps, and the speech where it was."""
    assert recorder.uploader.pending == 0 and recorder.uploader.stats["sent"] == sum(recorder.chunks.values())
    rows = stored(server, session_id)
    assert rows["audio"]["sample_rate"] == OUT_RATE
    chunks = {track: [c for c in rows["chunks"] if c["track"] == track] for track in ("user", "bot")}
    call_seconds = len(call.microphone.pcm) / 2 / IN_RATE
    for track, rows_ in chunks.items():
        assert len(rows_) == recorder.chunks[track] >= int(call_seconds // CHUNK_SECONDS), track
        assert [c["index"] for c in rows_] == list(range(len(rows_))), track
        # Cut every CHUNK_SECONDS at the pipeline's rate (the last is what was left); a track holds what it had
        # then, which differs from the other's by at most one burst of the input's resampler.
        for chunk in rows_[:-1]:
            assert (CHUNK_SECONDS - 0.1) * OUT_RATE <= chunk["samples"] <= (CHUNK_SECONDS + 0.1) * OUT_RATE, chunk
        # Each chunk is stamped by its own clock, and they follow one another: no gap, no overlap, no drift
        # beyond one burst of the input's resampler (it hands the caller's audio over ~69 ms at a time).
        for before, after in itertools.pairwise(rows_):
            assert abs(after["start"] - (before["start"] + before["samples"] / OUT_RATE)) < 0.12, (before, after)
    # The first sample recorded is the caller's first frame, when it passed; the last, the call's end.
    first_frame_at = call.microphone.heard_at(0)
    assert abs(chunks["user"][0]["start"] - first_frame_at) < 0.1
    last = chunks["user"][-1]
    assert abs(last["start"] + last["samples"] / OUT_RATE - call.microphone.pushed[-1][0]) < 0.15

    # Where the speech is in the dashboard's WAV (chunks placed by their stamps) is when it passed, within 100 ms.
    caller, bot = await wav_of(server, session_id)
    origin = rows["audio"]["origin"]
    caller_on = call.microphone.heard_at(call.speech[0])
    caller_off = call.microphone.heard_at(call.speech[1])
    bot_on = call.speaker.first_speech_at()
    bot_off = bot_on + len(call.reply) / OUT_RATE
    assert abs(origin + first_loud(caller) / OUT_RATE - caller_on) < 0.1
    assert abs(origin + first_loud(bot) / OUT_RATE - bot_on) < 0.1
    assert not np.any(np.abs(bot[: int((bot_on - origin - 0.1) * OUT_RATE)].astype(np.int32)) > LOUD)  # no echo

    # The dashboard's voice activity detection finds each side's speech where it was fed and played.
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        summary = (await api.get(f"/api/sessions/{session_id}/audio/")).json()
    assert summary["recorded"] and summary["sample_rate"] == OUT_RATE
    speech = summary["analysis"]["speech"]
    assert speech["user"] and speech["bot"], speech
    assert abs(speech["user"][0][0] - caller_on) < 0.15 and abs(speech["user"][-1][1] - caller_off) < 0.45, speech
    assert abs(speech["bot"][0][0] - bot_on) < 0.15 and abs(speech["bot"][-1][1] - bot_off) < 0.45, speech
    (turn,) = summary["analysis"]["turns"]  # the caller stopped, the bot answered ~0.6 s later
    assert abs(turn["bot_started_at"] - turn["user_stopped_at"] - (bot_on - caller_off)) < 0.3, turn


async def test_a_pipeline_with_the_dashboards_processor_records_its_call(server, monkeypatch):
    monkeypatch.setenv("RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS", str(CHUNK_SECONDS))
    session_id = f"rec-{uuid.uuid4().hex[:8]}"
    call = Call()
    rtvi = DashboardRTVIProcessor(
        dashboard_url=server.ws_url, token=server.token, session_id=session_id, record_audio=True
    )
    assert isinstance(rtvi.recorder, DashboardAudioRecorder)
    pipeline = call.pipeline()
    await call.run(worker_for(pipeline, rtvi))
    # Placed by the processor while the worker set its pipeline up: right after the output transport.
    assert pipeline.processors[pipeline.processors.index(call.speaker) + 1] is rtvi.recorder
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0
    await check_recording(server, session_id, call, rtvi.recorder)


async def test_a_pipeline_records_its_call_with_no_code_change_through_pipecats_setup_files(server, monkeypatch):
    import rtvi_dashboard.setup

    session_id = f"rec-hook-{uuid.uuid4().hex[:8]}"
    for name, value in {
        "PIPECAT_SETUP_FILES": rtvi_dashboard.setup.__file__,
        "RTVI_DASHBOARD_URL": server.ws_url,
        "RTVI_DASHBOARD_TOKEN": server.token,
        "RTVI_DASHBOARD_RECORD_AUDIO": "1",
        "RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS": str(CHUNK_SECONDS),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RTVI_DASHBOARD_SESSION_ID", raising=False)
    call = Call()
    rtvi = RTVIProcessor()
    # The bot's pipeline nests its transports one level deeper: the hook finds the output transport there.
    inner = call.pipeline()
    await call.run(worker_for(Pipeline([inner]), rtvi, conversation_id=session_id))
    assert isinstance(rtvi.recorder, DashboardAudioRecorder)
    assert inner.processors[inner.processors.index(call.speaker) + 1] is rtvi.recorder
    await check_recording(server, session_id, call, rtvi.recorder)


async def test_a_bot_whose_organization_does_not_record_stops_recording_at_the_start(server, monkeypatch):
    monkeypatch.setenv("RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS", "1")
    session_id = f"rec-quiet-{uuid.uuid4().hex[:8]}"
    rtvi = DashboardRTVIProcessor(
        dashboard_url=server.ws_url, token=server.quiet_token, session_id=session_id, record_audio=True
    )
    stopped = []

    @rtvi.recorder.event_handler("on_recording_stopped")
    async def on_stopped(recorder):
        stopped.append(time.monotonic())

    microphone = Microphone(silence(2.5, IN_RATE))
    began = time.monotonic()
    await run_call(worker_for(Pipeline([microphone, Speaker()]), rtvi), microphone)
    # The dashboard said no at once: the recorder stopped buffering long before the call ended, sent nothing.
    assert rtvi.recorder.uploader.record is False and "recording is off" in rtvi.recorder.uploader.why
    assert stopped and stopped[0] - began < 1.5
    assert rtvi.recorder.chunks == {"user": 0, "bot": 0} and rtvi.recorder.uploader.stats["submitted"] == 0
    async with httpx.AsyncClient(base_url=server.url) as api:
        status = (
            await api.get(f"/ingest/audio/{session_id}/", headers={"Authorization": f"Bearer {server.quiet_token}"})
        ).json()
    assert status["record"] is False and status["tracks"] == {"user": [], "bot": []}


def test_a_recorder_is_placed_once_and_only_after_an_output_transport(caplog):
    """A bot that placed `rtvi.recorder` itself keeps it where it is; a pipeline with no output records nothing."""
    rtvi = DashboardRTVIProcessor(dashboard_url="ws://127.0.0.1:9", token="t", session_id="s", record_audio=True)
    speaker = Speaker()
    pipeline = Pipeline([Microphone(silence(0.1)), speaker, rtvi.recorder])
    worker = worker_for(pipeline, rtvi)
    assert place_recorder(worker, rtvi.recorder) and place_recorder(worker, rtvi.recorder)
    assert pipeline.processors.count(rtvi.recorder) == 1 and speaker.next is rtvi.recorder

    lone = DashboardRTVIProcessor(dashboard_url="ws://127.0.0.1:9", token="t", session_id="s", record_audio=True)
    with caplog.at_level(logging.WARNING, logger="rtvi_dashboard.pipecat"):
        assert not place_recorder(worker_for(Pipeline([FrameProcessor()]), lone), lone.recorder)
    assert "no output transport" in caplog.text
    assert DashboardRTVIProcessor(dashboard_url="ws://127.0.0.1:9", token="t", session_id="s").recorder is None
