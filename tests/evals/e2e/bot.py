"""A real Pipecat bot for the end-to-end eval tests: run by Pipecat's own dev runner, offline.

    python bot.py --port 7900 [--runner-body body.json]      # what `pipecat eval suite` spawns

It is the pipeline of a cascade bot, built the way `pipecat init` builds one, with its services
replaced by local, deterministic ones:

    transport.input() -> ScriptedSTT -> user aggregator (Silero VAD) -> ScriptedLLM -> EspeakTTS
        -> transport.output() -> assistant aggregator

- ScriptedLLM (an LLMService): answers from SCRIPT, keyed by the words the user said, streaming the
  answer as LLMTextFrames between LLMFullResponseStart/EndFrame. An order question makes a real
  function call (`lookup_order(order_id=...)`, run by Pipecat's function-call machinery, so the RTVI
  observer reports `llm-function-call-in-progress` with its arguments); the answer then comes from the
  call's result. E2E_BOT_DELAY_MS delays each answer (a slower deployment); E2E_BOT_WRONG=1 answers
  wrong (other words, no function call).
- EspeakTTS (a TTSService): runs espeak-ng and yields its audio as TTSAudioRawFrames. Under `pipecat
  eval` in text modality the harness asks the bot to skip TTS (`skip_tts`), so it speaks only when a
  scenario's judge listens (judge.modality: audio) or for a client that is not the eval harness.
- ScriptedSTT (a SegmentedSTTService): there is no offline speech recognizer here, so for each
  segment Silero's VAD closes, it emits the NEXT line of the script it was given: the
  runner body's `user_lines` (the harness writes the scenario's `user:` lines there), else
  E2E_STT_LINES (lines separated by `|`), else DEFAULT_USER_LINES. Segments shorter than
  MIN_SEGMENT_SECONDS are dropped (a click is not a turn). It tests that the caller's audio
  reaches the bot, that VAD ends a turn on it, and that the turn runs through the bot's own
  transcription path (TranscriptionFrame, RTVI user-input/user-transcription); it does not test
  recognition.

The dashboard: with RTVI_DASHBOARD_URL and RTVI_DASHBOARD_TOKEN in the environment the worker's RTVI
processor is the SDK's DashboardRTVIProcessor, so every RTVI message both ways is streamed to the
dashboard under a session id (the SDK's: under `pipecat eval suite` with RTVI_DASHBOARD_EVAL_RUN, one derived from
the path of the bot's own log, which the run's results.jsonl record names as `artifacts.log`, so
`rtvi_dashboard.evals.eval_session_id(record["artifacts"]["log"])` is the record's session). The bot also
prints one line, `E2E-LINK {json}`, with that session id, the runner's session id, the runner body and the path of
its own log (the file `pipecat eval suite` gave it as stdout, which results.jsonl names as
`artifacts.log`), so each results record can be joined to its dashboard session.
"""

import asyncio
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.evals.transport import EvalTransportParams
from pipecat.frames.frames import (
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.runner.types import RunnerArguments
from pipecat.runner.utils import create_transport
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.services.settings import LLMSettings, STTSettings, TTSSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

ESPEAK = shutil.which("espeak-ng")
MIN_SEGMENT_SECONDS = 0.25
ORDERS = {"1234": {"order_id": "1234", "status": "shipped", "arrives": "Friday"}}
WRONG_ANSWER = "I am not able to help with that right now."
DEFAULT_USER_LINES = ["Hello there", "Where is my order 1234", "Thank you, goodbye"]

# What the user said (all of these words, lower case) -> what the bot does. `call` makes that function
# call with the arguments taken from the user's words; the answer then comes from `answer_after_call`.
SCRIPT = [
    {"words": ["order"], "call": "lookup_order"},
    {"words": ["hello"], "answer": "Hello! I can look up your orders. What is your order number?"},
    {"words": ["thank"], "answer": "You are welcome. Goodbye!"},
]
FALLBACK = "Sorry, I did not catch that. Could you say it again?"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def plan(user_text: str, wrong: bool = False) -> dict:
    """What the bot does for `user_text`: {"answer": text} or {"call": name, "args": {...}}."""
    if wrong:
        return {"answer": WRONG_ANSWER}
    words = _words(user_text)
    for entry in SCRIPT:
        if all(any(w.startswith(k) for w in words) for k in entry["words"]):
            if entry.get("call") == "lookup_order":
                digits = re.findall(r"\d+", user_text)
                return {"call": "lookup_order", "args": {"order_id": digits[0] if digits else ""}}
            return {"answer": entry["answer"]}
    return {"answer": FALLBACK}


def answer_after_call(result) -> str:
    if isinstance(result, dict) and result.get("status"):
        return f"Your order {result['order_id']} has {result['status']} and arrives {result['arrives']}."
    return "I could not find that order."


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ScriptedLLM(LLMService):
    """An LLM that answers from SCRIPT (see the module). Streams its answer word by word."""

    def __init__(self, *, delay_ms: int = 0, wrong: bool = False, **kwargs):
        unset = dict.fromkeys(f.name for f in dataclasses.fields(LLMSettings) if f.name not in ("extra",))
        super().__init__(
            settings=LLMSettings(**{**unset, "model": "scripted-1", "filter_incomplete_user_turns": False}), **kwargs
        )
        self.delay_ms = delay_ms
        self.wrong = wrong

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            await self.start_processing_metrics()
            try:
                await self._respond(frame.context)
            finally:
                await self.stop_processing_metrics()
                await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)

    async def _respond(self, context: LLMContext):
        messages = context.get_messages()
        last = messages[-1] if messages else {}
        role = last.get("role") if isinstance(last, dict) else None
        await self.start_ttfb_metrics()
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        if role == "tool":
            try:
                result = json.loads(_text_of(last.get("content")))
            except (TypeError, ValueError):
                result = None
            await self._stream(answer_after_call(result))
            return
        user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
        step = plan(_text_of(user.get("content")) if user else "", self.wrong)
        logger.info(f"ScriptedLLM: user={_text_of(user.get('content')) if user else None!r} -> {step}")
        if "call" in step:
            await self.stop_ttfb_metrics()
            await self.run_function_calls(
                [
                    FunctionCallFromLLM(
                        function_name=step["call"],
                        tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                        arguments=step["args"],
                        context=context,
                    )
                ]
            )
            return
        await self._stream(step["answer"])

    async def _stream(self, text: str):
        await self.stop_ttfb_metrics()
        for i, word in enumerate(text.split(" ")):
            await self._push_llm_text(word if i == 0 else " " + word)
            await asyncio.sleep(0.01)


async def lookup_order(params: FunctionCallParams):
    order = ORDERS.get(str(params.arguments.get("order_id", "")))
    await params.result_callback(order or {"error": "not found"})


class EspeakTTS(TTSService):
    """Text to speech by espeak-ng (a subprocess), resampled to the pipeline's output rate."""

    def __init__(self, *, voice: str = "en-us", **kwargs):
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            settings=TTSSettings(model=None, voice=voice, language=None),
            **kwargs,
        )
        self._voice = voice

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str):
        if ESPEAK is None:
            logger.error("EspeakTTS: espeak-ng is not installed")
            return
        await self.start_tts_usage_metrics(text)
        wav = await asyncio.to_thread(
            lambda: subprocess.run(  # noqa: ASYNC221 (in a thread)
                [ESPEAK, "-v", self._voice, "-s", "170", "--stdout", text], capture_output=True, check=True
            ).stdout
        )
        await self.stop_ttfb_metrics()
        rate = int.from_bytes(wav[24:28], "little")
        start = wav.index(b"data") + 8
        samples = np.frombuffer(wav[start : start + (len(wav) - start) // 2 * 2], dtype="<i2").astype(np.float64)
        out_rate = self.sample_rate
        count = int(len(samples) * out_rate / rate)
        audio = np.interp(np.arange(count) * (rate / out_rate), np.arange(len(samples)), samples).astype("<i2")
        chunk = out_rate // 10 * 2  # 100 ms
        data = audio.tobytes()
        for at in range(0, len(data), chunk):
            yield TTSAudioRawFrame(
                audio=data[at : at + chunk], sample_rate=out_rate, num_channels=1, context_id=context_id
            )


class ScriptedSTT(SegmentedSTTService):
    """For each speech segment the VAD closes, the next of `lines` (see the module)."""

    def __init__(self, lines: list[str], **kwargs):
        super().__init__(trailing_silence_secs=0.0, settings=STTSettings(model="scripted", language=None), **kwargs)
        self._lines = list(lines)
        self.heard: list[float] = []

    @property
    def wants_wav_segments(self) -> bool:
        return False

    def can_generate_metrics(self) -> bool:
        return False

    async def run_stt(self, audio: bytes):
        seconds = len(audio) / 2 / max(1, self.sample_rate)
        if seconds < MIN_SEGMENT_SECONDS:
            logger.info(f"ScriptedSTT: {seconds:.2f}s segment dropped")
            return
        self.heard.append(seconds)
        if not self._lines:
            logger.warning(f"ScriptedSTT: {seconds:.2f}s segment past the end of the script")
            return
        text = self._lines.pop(0)
        logger.info(f"ScriptedSTT: {seconds:.2f}s segment -> {text!r}")
        yield TranscriptionFrame(text=text, user_id="", timestamp=time_now_iso8601(), finalized=True)


def own_log_path() -> str | None:
    """Where this process's stdout goes: `pipecat eval suite` hands each bot `<logs>/<prefix>.log` (printed in the
    E2E-LINK line, for the tests)."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return target if target.startswith("/") and target.endswith(".log") else None


def user_lines(runner_args: RunnerArguments) -> list[str]:
    body = runner_args.body if isinstance(runner_args.body, dict) else {}
    if isinstance(body.get("user_lines"), list):
        return [str(line) for line in body["user_lines"]]
    if os.environ.get("E2E_STT_LINES"):
        return [line.strip() for line in os.environ["E2E_STT_LINES"].split("|")]
    return list(DEFAULT_USER_LINES)


def rtvi_processor(runner_args: RunnerArguments):
    """The SDK's dashboard processor when the environment names a dashboard, else None (Pipecat's own). The bot
    passes the runner's session id, as the SDK's README has every bot do; under an eval run
    (RTVI_DASHBOARD_EVAL_RUN) the SDK itself takes the run's id instead (rtvi_dashboard.evals)."""
    if not (os.environ.get("RTVI_DASHBOARD_URL") and os.environ.get("RTVI_DASHBOARD_TOKEN")):
        return None
    from rtvi_dashboard.pipecat import DashboardRTVIProcessor

    return DashboardRTVIProcessor(session_id=runner_args.session_id)


async def bot(runner_args: RunnerArguments):
    delay_ms = int(os.environ.get("E2E_BOT_DELAY_MS") or 0)
    wrong = os.environ.get("E2E_BOT_WRONG", "") in ("1", "true", "yes")
    transport = await create_transport(
        runner_args,
        {"eval": lambda: EvalTransportParams(audio_in_enabled=True, audio_out_enabled=True)},
    )
    log = own_log_path()
    rtvi = rtvi_processor(runner_args)
    link = {
        "dashboard_session_id": rtvi.dashboard.session_id if rtvi is not None else None,
        "runner_session_id": runner_args.session_id,
        "body": runner_args.body,
        "log": log,
        "pid": os.getpid(),
        "delay_ms": delay_ms,
        "wrong": wrong,
    }
    print(f"E2E-LINK {json.dumps(link)}", flush=True)

    stt = ScriptedSTT(user_lines(runner_args))
    llm = ScriptedLLM(delay_ms=delay_ms, wrong=wrong)
    llm.register_function("lookup_order", lookup_order)
    tts = EspeakTTS()
    tools = ToolsSchema(
        standard_tools=[
            FunctionSchema(
                name="lookup_order",
                description="Look an order up by its number.",
                properties={"order_id": {"type": "string", "description": "The order number"}},
                required=["order_id"],
            )
        ]
    )
    context = LLMContext(tools=tools)
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.5)),
            user_turn_strategies=UserTurnStrategies(stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.3)]),
        ),
    )
    pipeline = Pipeline([transport.input(), stt, user_aggregator, llm, tts, transport.output(), assistant_aggregator])
    extra = {"rtvi_processor": rtvi} if rtvi is not None else {}
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True), **extra)

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)
    await runner.run()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pipecat.runner.run import main

    main()
