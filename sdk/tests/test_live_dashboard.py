"""A real Pipecat pipeline, in this package's own environment, streaming into a live dashboard.

The dashboard runs in its own environment (DASHBOARD_PYTHON: the Python of a
venv with the server installed; `make sdk-test` passes the project's), so
this environment holds only what a bot installs: `pip install "./sdk[pipecat]"`.
Skipped without DASHBOARD_PYTHON, a failure under CI=true.
"""

import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("DASHBOARD_PYTHON", "")

if not PYTHON:
    if os.environ.get("CI") == "true":
        pytest.fail("DASHBOARD_PYTHON is not set: make sdk-test sets it to the dashboard's venv", pytrace=False)
    pytest.skip("DASHBOARD_PYTHON is not set (make sdk-test sets it)", allow_module_level=True)

pytest.importorskip("pipecat", reason='the [pipecat] extra: pip install "./sdk[pipecat]"')

from pipecat.frames.frames import (  # noqa: E402
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    Frame,
    InputTransportMessageFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402
from rtvi_dashboard.pipecat import DashboardRTVIProcessor  # noqa: E402


@pytest.fixture(scope="module")
def dashboard():
    """The dashboard's server (daphne), on its own SQLite file and a free port."""
    workdir = Path(tempfile.mkdtemp(prefix="rtvi-sdk-live-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "SQLITE_PATH": str(workdir / "db.sqlite3"), "PORT": str(port), "HOST": "127.0.0.1"}

    def manage(*args) -> str:
        done = subprocess.run([PYTHON, "manage.py", *args], cwd=REPOSITORY, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-1] if done.stdout else ""

    manage("migrate", "--noinput")
    token = manage("create_ingest_token", "--create", "--org", "Bots")
    key = manage("create_api_key", "--org", "Bots")
    log = open(workdir / "daphne.log", "wb")
    server = subprocess.Popen(
        [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dashboard.asgi:application"],
        cwd=REPOSITORY, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, (workdir / "daphne.log").read_text()
                time.sleep(0.05)
        yield {"ws": f"ws://127.0.0.1:{port}", "http": f"http://127.0.0.1:{port}", "token": token, "key": key}
    finally:
        server.terminate()
        server.wait(10)
        log.close()


class ScriptedBot(FrameProcessor):
    """The bot's LLM and TTS, scripted: a streamed answer to each final transcription, spoken."""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            for token in ("Your", " order", " ships", " today."):
                await self.push_frame(LLMTextFrame(text=token))
            await self.push_frame(LLMFullResponseEndFrame())
            await self.push_frame(BotStartedSpeakingFrame())
            await self.push_frame(BotStoppedSpeakingFrame())


def get(url: str, key: str):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


async def test_a_pipecat_bot_with_only_this_package_streams_into_the_dashboard(dashboard):
    rtvi = DashboardRTVIProcessor(dashboard_url=dashboard["ws"], token=dashboard["token"], session_id="sdk-live-1")
    worker = PipelineWorker(
        Pipeline([ScriptedBot()]),
        params=PipelineParams(enable_metrics=True),
        rtvi_processor=rtvi,
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker, frame):
        started.set()

    async def speak():
        await started.wait()
        ready = {"label": "rtvi-ai", "type": "client-ready", "id": "c1", "data": {"version": "2.1.0"}}
        for frame in (
            InputTransportMessageFrame(message=ready),
            UserStartedSpeakingFrame(),
            UserStoppedSpeakingFrame(),
            TranscriptionFrame(text="Where is my order?", user_id="u", timestamp="t"),
        ):
            await worker.queue_frame(frame)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        await worker.queue_frame(EndFrame())

    await asyncio.gather(WorkerRunner(handle_sigint=False).run(worker), speak())
    assert rtvi.dashboard.stats["acked"] == rtvi.dashboard.stats["sent"] > 0

    detail = json.loads(await asyncio.to_thread(get, f"{dashboard['http']}/api/sessions/sdk-live-1/", dashboard["key"]))
    assert detail["invalid_count"] == 0
    assert [(t["role"], t["text"]) for t in detail["transcript"]] == [
        ("user", "Where is my order?"),
        ("bot", "Your order ships today."),
    ]
    assert len(detail["turns"]) == 1

    # The pipeline ended, so the package closed with 1000: the session ended then, not after the
    # server's grace (30 s here), and it reads as finished, not as a failure.
    deadline, url = time.monotonic() + 5, f"{dashboard['http']}/api/sessions/sdk-live-1/"
    while detail["status"] != "ended":
        assert time.monotonic() < deadline, f"still {detail['status']} ({detail['bot']}) after the pipeline ended"
        await asyncio.sleep(0.1)
        detail = json.loads(await asyncio.to_thread(get, url, dashboard["key"]))
    assert (detail["end_kind"], detail["end_reason"], detail["failed"]) == ("bot_finished", "bot finished", False)
