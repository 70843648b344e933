"""The audio uploader (rtvi_dashboard.audio.AudioUploader) against a live dashboard.

The dashboard runs in its own environment (DASHBOARD_PYTHON, as in
test_live_dashboard.py); this one holds only the package. What the dashboard
stored is read back through the bot's own check (`GET /ingest/audio/<session>/`).
Skipped without DASHBOARD_PYTHON, a failure under CI=true.
"""

import asyncio
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from rtvi_dashboard import DashboardClient
from rtvi_dashboard.audio import AudioUploader, http_base
from rtvi_dashboard.demo import DemoBot

REPOSITORY = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("DASHBOARD_PYTHON", "")
RATE = 16000
SET_RECORDING = (
    "from dashboard.models import Organization as O; O.objects.filter(name={org!r}).update(record_audio={on})"
)


def tone(seconds: float, level: int) -> bytes:
    """A chunk of PCM (s16le) that differs by level: a square wave, so chunks are told apart by content."""
    period = 40
    half = [level.to_bytes(2, "little", signed=True)] * (period // 2)
    low = [(-level).to_bytes(2, "little", signed=True)] * (period // 2)
    samples = int(seconds * RATE)
    return b"".join((half + low) * (samples // period + 1))[: samples * 2]


@pytest.fixture(scope="module")
def dashboard():
    """The dashboard's server (daphne) on its own SQLite file, audio folder and port; two organizations."""
    if not PYTHON:
        if os.environ.get("CI") == "true":
            pytest.fail("DASHBOARD_PYTHON is not set: make sdk-test sets it to the dashboard's venv", pytrace=False)
        pytest.skip("DASHBOARD_PYTHON is not set (make sdk-test sets it)")
    workdir = Path(tempfile.mkdtemp(prefix="rtvi-sdk-audio-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "SQLITE_PATH": str(workdir / "db.sqlite3"),
        "AUDIO_ROOT": str(workdir / "audio"),
        "PORT": str(port),
        "HOST": "127.0.0.1",
    }

    def manage(*args) -> str:
        done = subprocess.run([PYTHON, "manage.py", *args], cwd=REPOSITORY, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-1] if done.stdout else ""

    manage("migrate", "--noinput")
    tokens = {org: manage("create_ingest_token", "--create", "--org", org) for org in ("Recorded", "Quiet")}
    manage("shell", "-c", SET_RECORDING.format(org="Recorded", on=True))
    key = manage("create_api_key", "--create", "--org", "Recorded")
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
        yield {"ws": f"ws://127.0.0.1:{port}", "port": port, "tokens": tokens, "key": key, "manage": manage}
    finally:
        server.terminate()
        server.wait(10)
        log.close()


async def start_session(dashboard, session_id: str, org: str = "Recorded") -> None:
    """A session exists once its bot's first message is stored."""
    client = DashboardClient(dashboard["ws"], dashboard["tokens"][org], session_id)
    client.start()
    client.send({"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "1.0.0"}})
    assert await client.flush(10)
    await client.close(finished=False)


async def stored(dashboard, session_id: str, org: str = "Recorded") -> dict:
    """What the dashboard holds of the session's audio, as a resuming bot asks it."""
    probe = AudioUploader(dashboard["ws"], dashboard["tokens"][org], session_id)
    assert await probe.check() is not None
    return {track: [list(run) for run in runs] for track, runs in probe.stored.items()}


class LossyProxy:
    """A TCP proxy to the dashboard that loses the answer to the first PUT: the chunk is stored, the bot never hears."""

    def __init__(self, port: int):
        self.port = port
        self.lose = 1
        self.requests: list[str] = []

    async def handle(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(length[1])) if length else b""
            self.requests.append(" ".join(head.split(b"\r\n", 1)[0].decode().split(" ")[:2]))
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.port)
            upstream_writer.write(head + body)
            await upstream_writer.drain()
            answer = await upstream_reader.read()  # urllib asks for Connection: close
            upstream_writer.close()
            if head.startswith(b"PUT") and self.lose:
                self.lose -= 1
                return  # stored upstream; the answer is lost on the way back
            writer.write(answer)
            await writer.drain()
        finally:
            writer.close()


def test_the_http_base_is_the_dashboards_url_over_http():
    assert http_base("wss://dash.example.com/") == "https://dash.example.com"
    assert http_base("ws://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert http_base("https://dash.example.com/rtvi") == "https://dash.example.com/rtvi"
    with pytest.raises(ValueError):
        http_base("dash.example.com")


async def test_chunks_go_in_order_and_a_resend_after_a_lost_answer_is_stored_once(dashboard):
    session_id = f"audio-{uuid.uuid4().hex[:8]}"
    await start_session(dashboard, session_id)
    proxy = LossyProxy(dashboard["port"])
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        uploader = AudioUploader(url, dashboard["tokens"]["Recorded"], session_id)
        start = time.time() - 10
        for n in range(2):
            for track, level in (("user", 1000 + n), ("bot", 2000 + n)):
                assert uploader.submit(track, tone(1.0, level), RATE, start + n)
        assert await uploader.close(timeout=20)
    finally:
        server.close()
        await server.wait_closed()
    puts = [r for r in proxy.requests if r.startswith("PUT")]
    path = f"/ingest/audio/{session_id}"
    assert puts == [f"PUT {path}/user/0", f"PUT {path}/user/0", f"PUT {path}/bot/0", f"PUT {path}/user/1", f"PUT {path}/bot/1"]  # fmt: skip # noqa: E501
    assert (uploader.stats["sent"], uploader.stats["duplicates"], uploader.stats["retries"]) == (4, 1, 1)
    assert await stored(dashboard, session_id) == {"user": [[0, 1]], "bot": [[0, 1]]}

    # A chunk index that holds other content is refused (409): the uploader drops it, and goes on.
    other = AudioUploader(dashboard["ws"], dashboard["tokens"]["Recorded"], session_id)
    other.base_index = {"user": 0, "bot": 0}  # as a bot that lost count would
    other.submit("user", tone(1.0, 1000), RATE, start)  # the same content: a duplicate
    other.submit("user", tone(1.0, 7777), RATE, start + 1)  # other content under index 1
    other.submit("user", tone(1.0, 1002), RATE, start + 2)
    assert await other.close(timeout=20)
    assert (other.stats["sent"], other.stats["duplicates"], other.stats["conflicts"]) == (2, 1, 1)
    assert await stored(dashboard, session_id) == {"user": [[0, 2]], "bot": [[0, 1]]}


async def test_a_restarted_bot_sends_only_what_is_new_after_what_is_stored(dashboard):
    session_id = f"audio-{uuid.uuid4().hex[:8]}"
    await start_session(dashboard, session_id)
    first = AudioUploader(dashboard["ws"], dashboard["tokens"]["Recorded"], session_id)
    start = time.time() - 60
    for n in range(3):
        first.submit("user", tone(1.0, 100 + n), RATE, start + n)
        first.submit("bot", tone(1.0, 200 + n), RATE, start + n)
    assert await first.close(timeout=20)

    # The bot's process restarts: a new uploader for the same session continues after the stored chunks.
    second = AudioUploader(dashboard["ws"], dashboard["tokens"]["Recorded"], session_id)
    assert await second.check() is True
    assert second.stored == {"user": [(0, 2)], "bot": [(0, 2)]}
    assert second.base_index == {"user": 3, "bot": 3}
    for n in range(3, 5):
        second.submit("user", tone(1.0, 100 + n), RATE, start + n)
        second.submit("bot", tone(1.0, 200 + n), RATE, start + n)
    assert await second.close(timeout=20)
    assert (second.stats["sent"], second.stats["duplicates"], second.stats["conflicts"]) == (4, 0, 0)
    assert await stored(dashboard, session_id) == {"user": [[0, 4]], "bot": [[0, 4]]}


async def test_audio_that_comes_before_its_session_waits_with_back_off(dashboard):
    session_id = f"audio-{uuid.uuid4().hex[:8]}"
    uploader = AudioUploader(dashboard["ws"], dashboard["tokens"]["Recorded"], session_id)
    assert await uploader.check() is True  # the organization records; the session is not there yet
    uploader.submit("user", tone(1.0, 500), RATE, time.time() - 1)
    await asyncio.sleep(3.5)
    # 404 with Retry-After: 2, then back-off (0.5 s, 1 s, 2 s...): a few tries in 3.5 s, not a busy loop.
    assert 1 <= uploader.stats["retries"] <= 3, uploader.stats
    assert uploader.pending == 1 and uploader.stats["sent"] == 0
    await start_session(dashboard, session_id)
    deadline = time.monotonic() + 15
    while uploader.stats["sent"] == 0:
        assert time.monotonic() < deadline, uploader.stats
        await asyncio.sleep(0.1)
    assert await uploader.close(timeout=5)
    assert await stored(dashboard, session_id) == {"user": [[0, 0]], "bot": []}


async def test_recording_stops_when_the_organization_does_not_record(dashboard, caplog):
    session_id = f"audio-{uuid.uuid4().hex[:8]}"
    await start_session(dashboard, session_id)
    # Asked at the start: the organization records, so the bot does.
    uploader = AudioUploader(dashboard["ws"], dashboard["tokens"]["Recorded"], session_id)
    assert await uploader.check() is True
    uploader.submit("user", tone(1.0, 300), RATE, time.time() - 5)
    deadline = time.monotonic() + 15
    while uploader.stats["sent"] == 0:
        assert time.monotonic() < deadline, uploader.stats
        await asyncio.sleep(0.05)

    # The organization turns recording off mid-call: the next upload is refused (403), and recording stops.
    await asyncio.to_thread(dashboard["manage"], "shell", "-c", SET_RECORDING.format(org="Recorded", on=False))
    try:
        with caplog.at_level(logging.WARNING, logger="rtvi_dashboard.audio"):
            uploader.submit("user", tone(1.0, 301), RATE, time.time() - 4)
            uploader.submit("bot", tone(1.0, 302), RATE, time.time() - 4)
            deadline = time.monotonic() + 15
            while not uploader.stopped:
                assert time.monotonic() < deadline, uploader.stats
                await asyncio.sleep(0.05)
    finally:
        await asyncio.to_thread(dashboard["manage"], "shell", "-c", SET_RECORDING.format(org="Recorded", on=True))
    assert not uploader.recording and uploader.pending == 0
    assert "recording is off for this organization" in uploader.why
    assert any("recording stopped" in r.getMessage() and "403" in r.getMessage() for r in caplog.records)
    assert uploader.submit("user", tone(1.0, 303), RATE, time.time()) is False  # nothing more is taken
    assert await uploader.close(timeout=5)
    assert await stored(dashboard, session_id) == {"user": [[0, 0]], "bot": []}

    # An organization that does not record says so at the start: the bot records nothing.
    quiet_id = f"audio-{uuid.uuid4().hex[:8]}"
    await start_session(dashboard, quiet_id, "Quiet")
    quiet = AudioUploader(dashboard["ws"], dashboard["tokens"]["Quiet"], quiet_id)
    assert await quiet.check() is False
    assert "recording is off" in quiet.why
    assert quiet.submit("user", tone(1.0, 1), RATE, time.time()) is False
    assert await quiet.close(timeout=1)


async def test_a_refused_token_stops_recording_at_once(dashboard):
    uploader = AudioUploader(dashboard["ws"], "it_not-a-token", f"audio-{uuid.uuid4().hex[:8]}")
    uploader.submit("user", tone(0.5, 9), RATE, time.time())
    assert await uploader.close(timeout=10)  # nothing left: the 401 dropped it
    assert uploader.stopped and uploader.stats["sent"] == 0 and uploader.stats["retries"] == 0


async def test_memory_is_bounded_when_the_dashboard_is_away(caplog):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uploader = AudioUploader(f"ws://127.0.0.1:{port}", "it_x", "away-1", max_queued_seconds=3)
    with caplog.at_level(logging.WARNING, logger="rtvi_dashboard.audio"):
        for n in range(6):
            uploader.submit("user" if n % 2 else "bot", tone(1.0, n + 1), RATE, time.time() + n)
    assert uploader.pending == 3 and uploader.stats["dropped"] == 3
    assert [c.pcm for c in uploader._queue] == [tone(1.0, n + 1) for n in (3, 4, 5)]  # the newest kept
    assert any("dropped the oldest" in r.getMessage() for r in caplog.records)
    assert not await uploader.close(timeout=0.5)  # nothing could be sent


def api(dashboard, path: str) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{dashboard['port']}{path}", headers={"Authorization": f"Bearer {dashboard['key']}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def messages(dashboard, session_id: str) -> list[dict]:
    """Every message of the session as the events API pages them (each with the bot's sent_at)."""
    events, after = [], 0
    while after is not None:
        page = json.loads(api(dashboard, f"/api/sessions/{session_id}/events/?after={after}&limit=500"))
        events += page["events"]
        after = page["next_after"]
    return events


def spoken(events: list[dict], role: str) -> list[tuple[float, float]]:
    """When the messages say `role` ("user", "bot") was speaking: from each started-speaking to its stop."""
    spans, began = [], None
    for event in events:
        kind = event["type"]
        if kind == f"{role}-started-speaking" and began is None:
            began = event["sent_at"]
        elif kind == f"{role}-stopped-speaking" and began is not None:
            spans.append((began, event["sent_at"]))
            began = None
    return spans


async def test_the_demo_bots_audio_lies_where_its_messages_say_each_side_spoke(dashboard):
    if shutil.which("espeak-ng") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("espeak-ng is not installed (apt-get install espeak-ng)", pytrace=False)
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    bot = DemoBot(dashboard["ws"], dashboard["tokens"]["Recorded"], seed=7, record_audio=True)
    # Two turns of a booking; the caller barges in on the bot's first answer with their second line.
    session_id = await bot.session(2, scenario="barge_in", script="booking")

    events = messages(dashboard, session_id)
    user, said = spoken(events, "user"), spoken(events, "bot")
    assert len(user) == 2 and len(said) == 2, (user, said)
    assert abs(said[0][1] - user[1][0]) < 0.01  # the barge-in: the bot stops as the caller starts
    status = await stored(dashboard, session_id)
    call_seconds = events[-1]["sent_at"] - events[0]["sent_at"]
    # Chunks of 5 s from the start of the call to its end, every one of them.
    (first, last), *others = status["user"]
    assert status["bot"] == status["user"] and not others and first == 0, status
    assert abs(last + 1 - call_seconds / 5) <= 1, (status, call_seconds)

    summary = json.loads(api(dashboard, f"/api/sessions/{session_id}/audio/"))
    assert summary["recorded"] and summary["sample_rate"] == 16000
    speech = summary["analysis"]["speech"]  # what the dashboard's voice activity detection heard, where
    for role, spans in (("user", user), ("bot", said)):
        runs = speech[role]
        # Every run of speech lies within a span the messages give that side, and every span has speech,
        # beginning as it begins.
        for start, end in runs:
            assert any(a - 0.1 <= start and end <= b + 0.1 for a, b in spans), (role, (start, end), spans)
        for a, b in spans:
            inside = [run for run in runs if a - 0.1 <= run[0] and run[1] <= b + 0.1]
            assert inside and abs(inside[0][0] - a) < 0.15, (role, (a, b), runs)
