"""The server boundary: what the dashboard changes of daphne and Channels, only on the versions it was written for.

dashboard/server/daphne_tuning.py replaces attributes of twisted and autobahn, and LeanDispatchMixin
(rtvi_monitor/consumers.py) Channels' consumer loop. On any version but the pinned one each
leaves the server stock and says so in one warning; the live path works the same either way.
The twisted and autobahn checks run in processes of their own: this one may have the tuning
installed already (tests/sockets.py imports dashboard.asgi).
"""

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import websockets
from asgiref.sync import sync_to_async

from dashboard.server import daphne_tuning
from rtvi_monitor.live import writer
from rtvi_monitor.live.consumers import LeanDispatchMixin
from rtvi_monitor.live.writer import _writers
from rtvi_monitor.sessions.models import Event
from tests.server import ROOT, DaphneServer
from tests.sockets import bot_socket, receive, rtvi, send, wrap  # (sets up Django's logging: before caplog's)

pytestmark = pytest.mark.timeout(120)


def pins() -> dict[str, str]:
    """requirements.txt's exact pins, by package name."""
    text = (Path(ROOT) / "requirements.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE))


def test_the_versions_written_for_are_the_pinned_ones():
    """A new pin of twisted, autobahn or Channels turns these changes off until they are checked against it."""
    pinned = pins()
    assert daphne_tuning.WRITTEN_FOR == {"Twisted": pinned["Twisted"], "autobahn": pinned["autobahn"]}
    assert LeanDispatchMixin.WRITTEN_FOR_CHANNELS == pinned["channels"]


# Run in a fresh interpreter: every attribute of the classes and module daphne_tuning changes, before and after
# install() (twice) with the versions given (sys.argv[1], JSON; "" for the installed ones), and the log lines.
INSTALL = """
import json, logging, sys
from autobahn.websocket import protocol
from twisted.internet import tcp, unix
from dashboard.server import daphne_tuning

records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG)
if sys.argv[1]:
    daphne_tuning.found_versions = lambda: json.loads(sys.argv[1])

OWNERS = {"tcp.Connection": tcp.Connection, "unix.Server": unix.Server, "unix.Client": unix.Client,
          "WebSocketProtocol": protocol.WebSocketProtocol, "autobahn.websocket.protocol": protocol}

def attributes():
    return {f"{owner}.{name}": id(value) for owner, obj in OWNERS.items() for name, value in vars(obj).items()}

before = attributes()
results = [daphne_tuning.install(), daphne_tuning.install()]
after = attributes()
with daphne_tuning.corked():
    held = daphne_tuning._held
print(json.dumps({
    "results": results,
    "installed": daphne_tuning.installed(),
    "changed": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
    "held": held is not None,
    "logs": [(r.levelname, r.name, r.getMessage()) for r in records],
}))
"""


def install_with(versions: dict | None) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", INSTALL, json.dumps(versions) if versions else ""],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "found",
    [
        {"Twisted": "25.5.0", "autobahn": daphne_tuning.WRITTEN_FOR["autobahn"]},
        {"Twisted": daphne_tuning.WRITTEN_FOR["Twisted"], "autobahn": "27.1.1"},
        {"Twisted": daphne_tuning.WRITTEN_FOR["Twisted"], "autobahn": None},
    ],
    ids=["twisted", "autobahn", "autobahn-missing"],
)
def test_on_other_versions_install_changes_nothing_and_says_so_once(found):
    result = install_with(found)
    assert result["changed"] == []  # not one attribute of twisted's or autobahn's replaced
    assert result["results"] == [False, False] and not result["installed"]
    assert not result["held"]  # corked() is a no-op
    [(level, name, line)] = result["logs"]  # one line, for two install() calls
    assert (level, name) == ("WARNING", "dashboard.server.daphne_tuning")
    assert "runs stock" in line
    for package, version in daphne_tuning.WRITTEN_FOR.items():
        assert f"{package} {version}" in line  # what it was written for
    for package, version in found.items():
        assert f"{package} {version or 'not installed'}" in line  # and what was found


def test_on_the_versions_written_for_install_changes_its_ten_attributes():
    result = install_with(None)  # the installed versions: the pinned ones
    assert result["results"] == [True, True] and result["installed"] and result["held"]
    assert result["logs"] == []
    ten = {
        "tcp.Connection.write",
        "tcp.Connection.writeSequence",
        "tcp.Connection.loseConnection",
        "tcp.Connection.abortConnection",
        "autobahn.websocket.protocol.create_xor_masker",
        "autobahn.websocket.protocol.hltype",
        "autobahn.websocket.protocol.hlval",
        "WebSocketProtocol.fire",
        "WebSocketProtocol.processData",
        "WebSocketProtocol.sendMessage",
    }
    # Unix sockets are given twisted's own methods back, explicitly (their writes may carry file descriptors).
    methods = ("write", "writeSequence", "loseConnection", "abortConnection")
    unix = {f"unix.{cls}.{name}" for cls in ("Server", "Client") for name in methods}
    assert set(result["changed"]) == ten | unix


class StockDaphne(DaphneServer):
    """daphne as `python -m daphne` runs it, in a process where twisted is read as a version the tuning was not
    written for."""

    def command(self) -> list[str]:
        code = (
            "import sys; from dashboard.server import daphne_tuning; "
            "daphne_tuning.found_versions = lambda: {**daphne_tuning.WRITTEN_FOR, 'Twisted': '25.5.0'}; "
            "from daphne.cli import CommandLineInterface; CommandLineInterface.entrypoint()"
        )
        return [sys.executable, "-c", code, *super().command()[3:]]


async def stream(server: DaphneServer, token: str, session_id: str, acks: str) -> list[dict]:
    """A bot streams three messages and waits for them to be acknowledged: what it was told."""
    query = "?acks=ranges" if acks == "ranges" else ""
    told = []
    async with websockets.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/{query}", additional_headers={"Authorization": f"Bearer {token}"}
    ) as socket:
        for seq in (1, 2, 3):
            message = {"label": "rtvi-ai", "type": "bot-llm-text", "data": {"text": f" token {seq}"}}
            await socket.send(
                json.dumps({"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message})
            )
        acked = 0
        while acked < 3:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
            told.append(frame)
            acked += 1 if "ack" in frame else sum(b - a + 1 for a, b in frame.get("acks", []))
    return told


@pytest.mark.parametrize("how", ["other-versions", "DAPHNE_TUNING=false"])
def test_a_stock_daphne_still_stores_and_acknowledges(how):
    server = (StockDaphne() if how == "other-versions" else DaphneServer(env={"DAPHNE_TUNING": "false"})).start()
    try:
        token = server.issue("create_ingest_token", "Stock")
        session_id = f"stock-{uuid.uuid4().hex[:8]}"
        assert asyncio.run(stream(server, token, session_id, "each")) == [{"ack": 1}, {"ack": 2}, {"ack": 3}]
        told = asyncio.run(stream(server, token, session_id + "-r", "ranges"))
        assert {seq for frame in told for a, b in frame["acks"] for seq in range(a, b + 1)} == {1, 2, 3}
        with sqlite3.connect(server.env["SQLITE_PATH"]) as db:
            stored = db.execute(
                "SELECT s.session_id, count(*) FROM rtvi_monitor_event e JOIN rtvi_monitor_session s"
                " ON e.session_id = s.id GROUP BY s.session_id ORDER BY s.session_id"
            ).fetchall()
        assert stored == [(session_id, 3), (session_id + "-r", 3)]
    finally:
        server.stop()
    said = [line for line in server.log_path.read_text().splitlines() if "runs stock" in line]
    assert len(said) == (1 if how == "other-versions" else 0), said


async def test_channels_own_dispatch_on_another_channels_version(live_path, ingest_token, monkeypatch, caplog):
    """The real ingest consumer on Channels' own loop: acknowledged and stored as on the lean one."""
    import channels.consumer

    monkeypatch.setattr(LeanDispatchMixin, "lean", None)  # read again, below
    monkeypatch.setattr(LeanDispatchMixin, "channels_version", staticmethod(lambda: "4.2.0"))
    closes = []
    own = channels.consumer.aclose_old_connections

    async def counted():
        closes.append(1)
        await own()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)  # Channels' dispatch, before each handler
    for session_id in ("stock-1", "stock-2"):
        socket = bot_socket(session_id, ingest_token)
        assert (await socket.connect())[0]
        await send(socket, wrap(1, rtvi("bot-llm-text", {"text": " hi"})))
        assert await receive(socket) == {"ack": 1}
        await socket.disconnect()
    assert closes  # Channels' own dispatch ran the handlers
    assert await sync_to_async(Event.objects.filter(session__session_id__in=["stock-1", "stock-2"]).count)() == 2
    said = [r for r in caplog.records if r.name == "rtvi_monitor.live.consumers" and r.levelname == "WARNING"]
    assert len(said) == 1, said  # one line for the process, not one per socket
    assert "written for channels 4.3.2, found 4.2.0" in said[0].getMessage()


async def test_the_lean_dispatch_on_the_version_written_for(live_path, ingest_token, monkeypatch, caplog):
    import channels.consumer

    monkeypatch.setattr(LeanDispatchMixin, "lean", None)
    closes = []
    monkeypatch.setattr(channels.consumer, "aclose_old_connections", lambda: closes.append(1))
    socket = bot_socket("lean-1", ingest_token)
    assert (await socket.connect())[0]
    await send(socket, wrap(1, rtvi("bot-llm-text", {"text": " hi"})))
    assert await receive(socket) == {"ack": 1}
    await socket.disconnect()
    assert closes == [] and LeanDispatchMixin.lean is True
    # The writer's batch of sends is the one the consumers handed it (it imports nothing of daphne's).
    assert _writers[asyncio.get_running_loop()].sends_together is daphne_tuning.corked
    assert "daphne_tuning" not in Path(writer.__file__).read_text()
    assert not [r for r in caplog.records if r.name == "rtvi_monitor.live.consumers" and r.levelname == "WARNING"]
