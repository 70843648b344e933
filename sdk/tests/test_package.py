"""The bot package on its own, as a bot installs it: no Django, no server code.

A small ingest endpoint made with `websockets` stands in for the dashboard
(acknowledging like it once stored: {"acks": [[first, last], ...]} a frame
when the bot asks for ranged acks, else {"ack": seq} a message, as dashboards
before ranged acks do); the dashboard's own test
suite streams into the real server (tests/live/test_bot_client.py,
tests/house/test_pipecat_integration.py).
"""

import asyncio
import json
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import pytest
import rtvi_dashboard
import websockets
from rtvi_dashboard import DashboardClient
from rtvi_dashboard.wire import CLOSE_BAD_TOKEN, ack_ranges, valid_range


class Endpoint:
    """Accepts bot connections; stores each (seq, message) once and acknowledges it; can drop a connection."""

    def __init__(self):
        self.stored: dict[int, dict] = {}
        self.paths: list[str] = []
        self.tokens: list[str] = []
        self.drop_after: int | None = None  # close the connection after this many frames
        self.refuse = False
        self.knows_ranges = True  # False: a dashboard from before ranged acks (ignores ?acks=ranges)
        self.replies: list[dict] = []
        self.close_codes: list[int | None] = []  # how each bot connection was closed by the bot

    async def handle(self, socket):
        try:
            await self.serve(socket)
        finally:
            received = socket.protocol.close_rcvd
            if received is not None:
                self.close_codes.append(received.code)

    async def serve(self, socket):
        self.paths.append(socket.request.path)
        self.tokens.append(socket.request.headers.get("Authorization", ""))
        if self.refuse:
            await socket.close(CLOSE_BAD_TOKEN)
            return
        ranged = self.knows_ranges and "acks=ranges" in socket.request.path
        frames = 0
        async for text in socket:
            frames += 1
            frame = json.loads(text)
            items = frame["batch"] if "batch" in frame else [frame]
            for item in items:
                self.stored.setdefault(item["seq"], item)
            replies = [{"acks": ack_ranges(i["seq"] for i in items)}] if ranged else [{"ack": i["seq"]} for i in items]
            for reply in replies:
                self.replies.append(reply)
                await socket.send(json.dumps(reply))
            if self.drop_after is not None and frames >= self.drop_after:
                self.drop_after = None
                await socket.close()
                return


@pytest.fixture
async def endpoint():
    endpoint = Endpoint()
    async with websockets.serve(endpoint.handle, "127.0.0.1", 0) as server:
        endpoint.url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        yield endpoint


def rtvi(type_: str, data=None) -> dict:
    return {"label": "rtvi-ai", "type": type_, "data": data or {}}


def test_the_package_imports_nothing_of_the_server():
    code = "import sys, rtvi_dashboard, rtvi_dashboard.wire, rtvi_dashboard.demo, rtvi_dashboard.setup; print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rtvi_monitor', 'channels')))"  # noqa: E501
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )
    assert rtvi_dashboard.__version__ == "0.1.0"


async def test_every_message_is_numbered_sent_and_acknowledged(endpoint):
    client = DashboardClient(endpoint.url, "it_secret", "call-1", "agent-7")
    client.start()
    for i in range(50):
        client.send(rtvi("bot-llm-text", {"text": f" {i}"}))
    client.send(rtvi("client-ready", {"version": "2.1.0"}), "from-client")
    await asyncio.sleep(0)
    assert await client.flush(5)
    await client.close()
    assert sorted(endpoint.stored) == list(range(1, 52))
    assert [endpoint.stored[i]["message"]["data"]["text"] for i in range(1, 51)] == [f" {i}" for i in range(50)]
    assert endpoint.stored[51]["direction"] == "from-client"
    assert endpoint.paths[0] == f"/ws/ingest/call-1/?agent=agent-7&acks=ranges&stream={client.stream}"
    assert endpoint.tokens[0] == "Bearer it_secret"
    assert client.stats["acked"] == client.stats["sent"] == 51 and client.stats["dropped"] == 0
    # Ranged acks: a frame per write of the endpoint (here, per frame of the client), not per message.
    assert all("acks" in reply for reply in endpoint.replies) and len(endpoint.replies) < 51


async def test_a_dashboard_that_acks_each_message_works_as_before(endpoint):
    endpoint.knows_ranges = False
    client = DashboardClient(endpoint.url, "it_secret", "call-old")
    client.start()
    for i in range(40):
        client.send(rtvi("bot-llm-text", {"text": f" {i}"}))
    assert await client.flush(5)
    await client.close()
    assert sorted(endpoint.stored) == list(range(1, 41)) and client.stats["acked"] == 40
    assert endpoint.replies == [{"ack": seq} for seq in range(1, 41)]


def test_ack_ranges_are_the_fewest_runs_and_checked():
    assert ack_ranges([5, 1, 2, 3, 7, 3]) == [[1, 3], [5, 5], [7, 7]]
    assert ack_ranges([]) == []
    assert valid_range([1, 2**53 - 1]) and valid_range([4, 4])
    for bad in ([2, 1], [0, 3], [1], [1, 2, 3], [True, 2], [1.0, 2], "1-2", [1, 2**53]):
        assert not valid_range(bad)


async def test_a_ranged_ack_acknowledges_only_what_it_covers():
    """A run wider than the buffer (or nonsense) costs nothing and acks only seqs inside it."""
    client = DashboardClient("ws://127.0.0.1:9", "it_x", "call-ranges")
    for i in range(10):
        client.send(rtvi("bot-llm-text", {"text": str(i)}))
    client._outbox.acknowledge_ranges([[2, 3], [9, 2**53 - 1], [5, 4], "x", [7, 7.5]])
    assert sorted(client._outbox.unacked) == [1, 4, 5, 6, 7, 8]
    assert client.stats["acked"] == 4


async def test_a_lost_connection_loses_nothing(endpoint):
    endpoint.drop_after = 1
    client = DashboardClient(endpoint.url, "it_secret", "call-2")
    client.start()
    for i in range(30):
        client.send(rtvi("bot-tts-text", {"text": str(i)}))
        await asyncio.sleep(0.005)
    assert await client.flush(10)
    await client.close()
    assert sorted(endpoint.stored) == list(range(1, 31))
    assert len(endpoint.paths) >= 2  # it reconnected
    # As the same stream: the dashboard recognises what it resends.
    assert len({parse_qs(urlsplit(path).query)["stream"][0] for path in endpoint.paths}) == 1


async def test_each_client_is_a_stream_of_its_own(endpoint):
    """A restarted bot (a new client of the same session) numbers from 1 in a stream the dashboard tells apart."""
    streams = set()
    for _ in range(2):
        client = DashboardClient(endpoint.url, "it_secret", "call-restarted")
        client.start()
        client.send(rtvi("bot-ready"))
        assert await client.flush(5)
        await client.close()
        streams.add(client.stream)
    named = {parse_qs(urlsplit(path).query)["stream"][0] for path in endpoint.paths}
    assert len(streams) == 2 and named == streams
    assert all(1 <= len(stream) <= 64 for stream in streams)


async def test_close_tells_the_dashboard_the_session_is_over_or_only_that_the_bot_goes(endpoint):
    """1000 when the pipeline ended (the dashboard ends the session now); 1001 for a bot going down mid-call."""
    for finished in (True, False):
        client = DashboardClient(endpoint.url, "it_secret", f"call-{finished}")
        client.start()
        client.send(rtvi("bot-ready"))
        assert await client.flush(5)
        await client.close(finished=finished)
    for _ in range(50):
        if len(endpoint.close_codes) == 2:
            break
        await asyncio.sleep(0.02)
    assert endpoint.close_codes == [1000, 1001]


async def test_a_refused_token_never_slows_or_fails_the_bot(endpoint):
    endpoint.refuse = True
    client = DashboardClient(endpoint.url, "it_wrong", "call-3")
    client.start()
    client.send(rtvi("bot-ready"))  # never raises, never blocks
    assert not await client.flush(0.5)
    await client.close(0.5)
    assert endpoint.stored == {}


def test_the_setup_file_prints_its_own_path():
    out = subprocess.run([sys.executable, "-m", "rtvi_dashboard.setup"], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("rtvi_dashboard/setup.py")


pipecat = pytest.importorskip("pipecat", reason='the [pipecat] extra: pip install "./sdk[pipecat]"')


class Recorder:
    """Stands in for a DashboardClient."""

    def __init__(self):
        self.sent: list[tuple[dict, str]] = []
        self.started = self.closed = False

    def start(self):
        self.started = True

    def send(self, message, direction="to-client"):
        self.sent.append((message, direction))

    async def close(self, timeout=10, finished=True):
        self.closed = True

    def set_control(self, handler):  # the operators' actions: what the package applies (tested server side)
        self.control = handler


async def test_the_processor_is_configured_from_the_environment(monkeypatch):
    from rtvi_dashboard.pipecat import DashboardRTVIProcessor

    monkeypatch.setenv("RTVI_DASHBOARD_URL", "wss://dashboard.example.com")
    monkeypatch.setenv("RTVI_DASHBOARD_TOKEN", "it_env")
    monkeypatch.setenv("RTVI_DASHBOARD_AGENT_ID", "agent-env")
    monkeypatch.delenv("RTVI_DASHBOARD_SESSION_ID", raising=False)
    rtvi = DashboardRTVIProcessor(session_id="runner-session")
    assert rtvi.dashboard.url == (
        "wss://dashboard.example.com/ws/ingest/runner-session/?agent=agent-env&acks=ranges"
        f"&stream={rtvi.dashboard.stream}"
    )
    assert rtvi.dashboard.token == "it_env"
    assert len(DashboardRTVIProcessor().dashboard.session_id) == 32  # nobody said: a new UUID


async def test_the_setup_hook_attaches_to_the_workers_own_rtvi_processor(monkeypatch):
    from pipecat.processors.frameworks.rtvi import RTVIProcessor
    from pipecat.processors.frameworks.rtvi.models import ServerMessage
    from rtvi_dashboard import pipecat as integration
    from rtvi_dashboard import setup

    recorder = Recorder()
    made = {}

    def client_from_env(session_id=None, *args):
        made["session_id"] = session_id
        made["clients"] = made.get("clients", 0) + 1
        return recorder

    monkeypatch.setattr(integration, "client_from_env", client_from_env)

    class Worker:
        _conversation_id = "conv-42"
        rtvi = RTVIProcessor()

    monkeypatch.delenv("RTVI_DASHBOARD_TOKEN", raising=False)
    await setup.setup_pipeline_worker(Worker())
    assert not recorder.started  # no token: not monitored, and it says so

    monkeypatch.setenv("RTVI_DASHBOARD_TOKEN", "it_env")
    monkeypatch.delenv("RTVI_DASHBOARD_SESSION_ID", raising=False)
    worker = Worker()
    await setup.setup_pipeline_worker(worker)
    assert recorder.started and made["session_id"] == "conv-42"
    await setup.setup_pipeline_worker(worker)  # twice: attached once, and no second client is started
    assert made["clients"] == 1
    message = ServerMessage(data={"hello": "world"})
    try:
        await worker.rtvi.push_transport_message(message)
    except Exception:
        pass  # the processor is not in a running pipeline; what matters is what the dashboard got
    assert recorder.sent == [(message.model_dump(exclude_none=True), "to-client")]


async def test_a_worker_with_no_conversation_id_gets_the_sessions_for_its_traces(monkeypatch):
    from pipecat.processors.frameworks.rtvi import RTVIProcessor
    from rtvi_dashboard import pipecat as integration
    from rtvi_dashboard import setup

    monkeypatch.setattr(integration, "client_from_env", lambda session_id=None, *args: Recorder())
    monkeypatch.setenv("RTVI_DASHBOARD_TOKEN", "it_env")
    monkeypatch.setenv("RTVI_DASHBOARD_SESSION_ID", "from-env")

    class Observer:
        _conversation_id = None

    class Worker:
        _conversation_id = None
        _turn_trace_observer = Observer()
        rtvi = RTVIProcessor()

    worker = Worker()
    await setup.setup_pipeline_worker(worker)
    # Pipecat's tracing would have made up its own id: the spans now carry the session's.
    assert worker._conversation_id == worker._turn_trace_observer._conversation_id == "from-env"


def test_tags_name_the_deployment_and_the_eval_run_in_the_ingest_url_and_a_bad_one_fails_at_once(monkeypatch):
    client = DashboardClient(
        "ws://x", "t", "s1", tags={"deployment": "v42", "eval_run": "ci 41", "eval_scenario": "suite/refund"}
    )
    query = parse_qs(urlsplit(client.url).query)
    assert (query["deployment"], query["eval_run"], query["eval_scenario"]) == (["v42"], ["ci 41"], ["suite/refund"])
    assert "deployment" not in parse_qs(
        urlsplit(DashboardClient("ws://x", "t", "s1", tags={"deployment": ""}).url).query
    )
    for bad in ({"deployment": "v2\n"}, {"eval_run": "x" * 101}, {"colour": "red"}, {"eval_scenario": " a"}):
        with pytest.raises(ValueError, match="tag"):
            DashboardClient("ws://x", "t", "s1", tags=bad)


def test_the_eval_command_reads_the_dashboards_address_as_http():
    from rtvi_dashboard.evals import base_url

    assert base_url("wss://dash.example.com/") == "https://dash.example.com"
    assert base_url("ws://127.0.0.1:8000") == "http://127.0.0.1:8000"
    with pytest.raises(SystemExit, match="address"):
        base_url("dash.example.com")
