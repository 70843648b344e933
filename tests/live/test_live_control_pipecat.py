"""A real Pipecat pipeline with the bot package, acted on from a real dashboard server (daphne subprocess).

The bot: PipelineWorker with the package's DashboardRTVIProcessor, Pipecat's own LLM context
aggregators around a small fake LLM that records the context each inference is run on, and a scripted
TTS. The operator: the dashboard's HTTP API (a private key, as a script would; the browser's way is
tests/live/test_browser_live_control.py). Sent text reaches the LLM's context through Pipecat's own
send-text handling; the end ends the pipeline; both show in the session's messages, transcript and
the audit log. Then the same on two server processes sharing Redis: the request on one, the bot on
the other.
"""

import asyncio
import uuid

import httpx
import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")

from pipecat.frames.frames import (
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner
from rtvi_dashboard.client import DashboardClient
from rtvi_dashboard.pipecat import DashboardRTVIProcessor

from tests.conftest import REDIS_URL, reachable, skip_or_fail
from tests.house.test_pipecat_integration import BotsClient, ScriptedTTS
from tests.server import DaphneServer

ORG = f"Control-{uuid.uuid4().hex[:8]}"
pytestmark = pytest.mark.timeout(180)
SYSTEM = {"role": "system", "content": "You are the order line of Acme."}


class RecordingLLM(FrameProcessor):
    """An LLM that records the messages of every context it is asked to run on, and answers in tokens."""

    def __init__(self):
        super().__init__()
        self.contexts: list[list[dict]] = []
        self.ran = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if not isinstance(frame, LLMContextFrame):
            await self.push_frame(frame, direction)
            return
        self.contexts.append([dict(message) for message in frame.context.get_messages()])
        self.ran.set()
        await self.push_frame(LLMFullResponseStartFrame())
        for token in ("Your order", " is A-17."):
            await self.push_frame(LLMTextFrame(text=token))
        await self.push_frame(LLMFullResponseEndFrame())


def bot(server, session_id: str) -> tuple[PipelineWorker, RecordingLLM]:
    context = LLMContext(messages=[dict(SYSTEM)])
    aggregators = LLMContextAggregatorPair(context)
    llm = RecordingLLM()
    pipeline = Pipeline([aggregators.user(), llm, ScriptedTTS(), BotsClient(), aggregators.assistant()])
    client = DashboardClient(server.ws_url, server.token, session_id, batch_interval=0.01)
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(enable_metrics=True),
        rtvi_processor=DashboardRTVIProcessor(client=client),
        cancel_on_idle_timeout=False,
    )
    return worker, llm


def api(server, base: str | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base or server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=30)


async def until(check, timeout: float = 20, every: float = 0.1):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never true within {timeout} s")
        await asyncio.sleep(every)


@pytest.fixture(scope="module")
def server():
    with DaphneServer(env={"SESSION_END_GRACE": "2"}) as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        yield running


async def act_on_a_call(request_server, bot_server, session_id: str) -> None:
    """The whole story: the bot connects to `bot_server`, the operator acts through `request_server`."""
    worker, llm = bot(bot_server, session_id)
    running = asyncio.ensure_future(WorkerRunner(handle_sigint=False).run(worker))
    try:
        await story(request_server, session_id, worker, llm, running)
    finally:
        if not running.done():
            await worker.cancel()
            await asyncio.wait_for(running, 15)


async def story(request_server, session_id, worker, llm, running) -> None:
    base = f"/api/sessions/{session_id}"
    async with api(request_server) as http:

        async def available():
            response = await http.get(f"{base}/control/")
            return response.status_code == 200 and response.json()["available"]

        await until(available)
        text = "The caller asks for their order number."
        sent = await http.post(
            f"{base}/send-text/", json={"content": text, "options": {"run_immediately": True, "audio_response": True}}
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["ok"] is True and sent.json()["answer"] == "the bot took it"

        # Pipecat's own send-text handling put the words in the LLM's context, and ran it at once.
        await asyncio.wait_for(llm.ran.wait(), 10)
        assert llm.contexts[0] == [SYSTEM, {"role": "user", "content": text}]

        # The bot's answer is spoken and reaches the dashboard before the end, as a caller would hear it.
        async def answered():
            detail = (await http.get(f"{base}/")).json()
            return any(line["role"] == "bot" and "A-17" in line["text"] for line in detail["transcript"])

        await until(answered)
        ended = await http.post(f"{base}/end/", json={})
        assert ended.status_code == 200, ended.text
        await asyncio.wait_for(running, 15)  # the end ended the pipeline: the worker's run returned
        assert worker.has_finished()

        async def over():
            detail = (await http.get(f"{base}/")).json()
            return detail if detail["status"] == "ended" else None

        detail = await until(over)
        # The operator's end, the pipeline finished by it: theirs, named as the audit log names a script's key.
        assert detail["end_kind"] == "operator_ended" and detail["end_reason"].startswith("by API key ")
        transcript = detail["transcript"]
        # The operator's words are the operator's line (not the caller's), once, beside the end they made.
        operators = [(line["action"], line["text"]) for line in transcript if line["role"] == "operator"]
        assert operators == [("send-text", text), ("end", "")]
        assert not [line for line in transcript if line["role"] == "user" and line["text"] == text]
        events = (await http.get(f"{base}/events/", params={"limit": 500})).json()["events"]
        sent_text = [e for e in events if e["message"].get("type") == "send-text"]
        assert sent_text[0]["direction"] == "from-client"
        assert sent_text[0]["message"]["data"] == {
            "content": text,
            "options": {"run_immediately": True, "audio_response": True},
        }
        assert [e["stream"] for e in events if e["message"].get("type") == "server-message"] == ["dashboard"] * 2

        audit = (await http.get("/api/audit/", params={"target": session_id})).json()["entries"]
        acted = {e["action"]: e for e in audit if e["action"] in ("session_text_sent", "session_ended")}
        assert set(acted) == {"session_ended", "session_text_sent"}
        assert acted["session_text_sent"]["detail"]["text_length"] == len(text)
        assert acted["session_ended"]["detail"]["mode"] == "graceful"
        # The transcript's notes: who did what, named as the audit log names them, and what the bot said.
        who = acted["session_ended"]["actor"]
        assert who.startswith("API key ")
        # The dashboard's records are the operator's lines (who, and that the bot took it), not raw notes.
        lines = [line for line in transcript if line["role"] == "operator"]
        assert [(line["operator"], line["ok"]) for line in lines] == [(who, True), (who, True)]
        assert not detail["server_messages"]


async def test_sent_text_reaches_the_llm_context_and_the_end_ends_the_pipeline(server):
    await act_on_a_call(server, server, f"call-{uuid.uuid4().hex[:8]}")


async def test_a_bot_without_the_packages_control_is_refused_with_the_reason(server):
    session_id = f"plain-{uuid.uuid4().hex[:8]}"
    worker, _ = bot(server, session_id)
    worker.rtvi.dashboard.set_control(None)  # as a package too old to announce control
    running = asyncio.ensure_future(WorkerRunner(handle_sigint=False).run(worker))
    try:
        await refused_story(server, session_id)
    finally:
        await worker.cancel()
        await asyncio.wait_for(running, 15)


async def refused_story(server, session_id) -> None:
    async with api(server) as http:

        async def live():
            response = await http.get(f"/api/sessions/{session_id}/")
            return response.status_code == 200 and response.json()["bot"] == "connected"

        await until(live)
        status = (await http.get(f"/api/sessions/{session_id}/control/")).json()
        assert status["available"] is False and "does not take control frames" in status["reason"]
        refused = await http.post(f"/api/sessions/{session_id}/send-text/", json={"content": "hello"})
        assert refused.status_code == 409 and "does not take control frames" in refused.json()["error"]


@pytest.fixture(scope="module")
def cluster(server):
    """Two server processes sharing Redis and PostgreSQL (skipped, or failed in CI, without them)."""
    from tests.conftest import DATABASE_URL

    if not reachable("127.0.0.1", 6379):
        skip_or_fail("Redis is not reachable on 127.0.0.1:6379")
    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
    env = {"REDIS_URL": REDIS_URL, "DATABASE_URL": DATABASE_URL, "SESSION_END_GRACE": "2"}
    first = DaphneServer(env=env).start()
    second = DaphneServer(env=env, workdir=str(first.workdir)).start(migrate=False)
    try:
        org = f"control-{uuid.uuid4().hex[:8]}"
        first.token = second.token = first.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        first.key = second.key = first.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
        yield first, second
    finally:
        second.stop()
        first.stop()


@pytest.mark.services
async def test_the_request_on_one_server_process_reaches_the_bot_on_another(cluster):
    bot_server, request_server = cluster
    await act_on_a_call(request_server, bot_server, f"two-{uuid.uuid4().hex[:8]}")
