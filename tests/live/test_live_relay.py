"""The live path on a real server (daphne in a subprocess), over real sockets.

`WebsocketCommunicator` shows things the wire does not (close reasons, for
one), so the closes and the end-to-end relay are checked here too.
"""

import asyncio
import json
import re
import time
import uuid

import httpx
import pytest
import websockets

from tests.server import DaphneServer
from tests.sockets import Page, rtvi, wrap

pytestmark = pytest.mark.timeout(120)
# Names new in every run, so a shared database (DATABASE_URL) never sees them twice.
RUN = uuid.uuid4().hex[:8]
ORG, OTHER, USER = f"Acme-{RUN}", f"Globex-{RUN}", f"ops-{RUN}"


@pytest.fixture(scope="module")
def server():
    env = {
        "SESSION_END_GRACE": "1",
        "SESSION_SUMMARY_INTERVAL": "0.2",
        "SESSION_SWEEP_INTERVAL": "0.5",
        "INGEST_RATE_BYTES": str(100 * 1024 * 1024),  # one test streams 80 MB as fast as it can
    }
    with DaphneServer(env=env) as running:
        running.ingest_token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.api_key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        running.other_token = running.manage("create_ingest_token", "--create", "--org", OTHER).splitlines()[-1]
        running.other_key = running.manage("create_api_key", "--create", "--org", OTHER).splitlines()[-1]
        running.manage("shell", "-c", STAFF_SETUP.format(user=USER, org=ORG))
        yield running


STAFF_SETUP = """
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
user = get_user_model().objects.create_user("{user}", password="live-test-password-1", is_staff=True)
Membership.objects.create(user=user, organization=Organization.objects.get(name="{org}"))
"""


def bot(server, session_id, token=None):
    return websockets.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/",
        additional_headers={"Authorization": f"Bearer {token or server.ingest_token}"},
    )


async def session_cookie(server) -> str:
    async with httpx.AsyncClient(base_url=server.url) as client:
        page = await client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = await client.post(
            "/login/", data={"username": USER, "password": "live-test-password-1", "csrfmiddlewaretoken": csrf}
        )
        assert response.status_code == 302
        return f"sessionid={client.cookies['sessionid']}"


def browser(server, path, cookie, origin=None):
    return websockets.connect(
        f"{server.ws_url}{path}", additional_headers={"Cookie": cookie}, origin=origin or server.url
    )


async def test_a_bad_token_gets_a_reason_frame_then_close_code_4401(server):
    async with bot(server, "live-bad-token", token="it_wrong") as socket:
        frame = json.loads(await socket.recv())
        assert frame == {"error": "Unknown or revoked ingest token.", "fatal": True}
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd.code == 4401


async def test_a_browser_from_another_origin_is_rejected_on_the_wire(server):
    cookie = await session_cookie(server)
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with browser(server, "/ws/sessions/", cookie, origin="https://evil.example"):
            pass
    assert refused.value.response.status_code == 403


async def test_a_browser_without_login_is_rejected_on_the_wire(server):
    with pytest.raises(websockets.InvalidStatus):
        async with browser(server, "/ws/sessions/", ""):
            pass


async def follow(socket, page: Page, until, timeout: float = 10) -> None:
    """A page's loop on a real socket: apply what fits, ask for a snapshot on a gap, acknowledge."""
    while not until(page):
        frame = json.loads(await asyncio.wait_for(socket.recv(), timeout))
        if page.take(frame) == "gap" or frame["type"] == "resync":
            await socket.send(json.dumps({"snapshot": True}))
        else:
            await socket.send(json.dumps({"ack": page.version}))


async def test_two_browsers_see_every_message_in_order_and_the_store_has_them_all(server):
    cookie = await session_cookie(server)
    count = 300
    async with bot(server, "live-two") as ingest:
        await ingest.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}))))
        assert json.loads(await ingest.recv()) == {"ack": 1}

        async def watch():
            page = Page()
            async with browser(server, "/ws/sessions/live-two/", cookie) as socket:
                ready.set()
                await follow(socket, page, lambda p: p.version >= count)
            return page

        ready = asyncio.Event()
        first = asyncio.create_task(watch())
        await ready.wait()
        ready.clear()
        second = asyncio.create_task(watch())
        await ready.wait()
        for seq in range(2, count + 1):
            await ingest.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": f" w{seq}"}))))
            if seq % 50 == 0:
                await asyncio.sleep(0.01)
        acks = set()
        while len(acks) < count - 1:
            acks.add(json.loads(await asyncio.wait_for(ingest.recv(), 10))["ack"])
        one, two = await asyncio.gather(first, second)
    assert one.state == two.state
    assert one.state["llm"]["current_tokens"] == "".join(f" w{seq}" for seq in range(2, count + 1))
    assert one.state["counts"]["total"] == count

    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"}) as api:
        lines = (await api.get("/api/sessions/live-two/events.ndjson")).text.splitlines()
        assert [json.loads(line)["seq"] for line in lines] == list(range(1, count + 1))
        # Another organization's key sees none of it.
        other = await api.get("/api/sessions/live-two/", headers={"Authorization": f"Bearer {server.other_key}"})
        assert other.status_code == 404


async def test_a_session_ends_after_its_bot_leaves_and_the_list_says_so(server):
    cookie = await session_cookie(server)
    async with browser(server, "/ws/sessions/", cookie) as watcher:
        assert json.loads(await watcher.recv())["type"] == "live"
        async with bot(server, "live-ending") as ingest:
            await ingest.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}))))
            await ingest.recv()
        kinds = []
        while "ended" not in kinds:
            frame = json.loads(await asyncio.wait_for(watcher.recv(), 10))
            rows = frame.get("sessions") or [frame["session"]]  # "updated": one write's rows in one frame
            if any(row["id"] == "live-ending" for row in rows):
                kinds.append(frame["type"])
    assert kinds[0] == "started" and kinds[-1] == "ended"
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"}) as api:
        body = (await api.get("/api/sessions/live-ending/")).json()
    assert body["status"] == "ended" and body["protocol_version"] == "2.1.0"


async def test_a_browser_resumes_without_gaps_after_the_server_restarts(server):
    cookie = await session_cookie(server)
    # (Words, not bare numbers: " 10 11 12 13 ..." joined is a phone number, and is redacted as one.)
    async with bot(server, "live-restart") as ingest:
        for seq in range(1, 21):
            await ingest.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": f" w{seq}"}))))
        for _ in range(20):
            await ingest.recv()
        await ingest.close(1001)  # going away, to come back (a 1000 close would end the session)
    async with browser(server, "/ws/sessions/live-restart/", cookie) as socket:
        snapshot = json.loads(await socket.recv())
        assert snapshot["state"]["version"] == 20
    server.restart()
    async with bot(server, "live-restart") as ingest:
        for seq in range(15, 31):  # a bot resends what it had not seen acknowledged
            await ingest.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": f" w{seq}"}))))
        for _ in range(16):
            await ingest.recv()
    async with browser(server, "/ws/sessions/live-restart/", cookie) as socket:
        snapshot = json.loads(await socket.recv())
    assert [e["seq"] for e in snapshot["events"]] == list(range(1, 31))
    assert snapshot["state"]["counts"]["total"] == 30
    assert snapshot["state"]["llm"]["current_tokens"] == "".join(f" w{seq}" for seq in range(1, 31))


async def test_a_session_whose_server_was_killed_ends_after_a_restart(server):
    """kill -9 mid-session: the restarted server's sweep ends it within the grace plus one sweep."""
    async with bot(server, "live-killed") as ingest:
        await ingest.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}))))
        await ingest.recv()
        server.process.kill()  # no shutdown hook, no disconnect: the session stays "live" in the database
        server.process.wait()
    server.start(migrate=False)
    restarted = time.monotonic()
    headers = {"Authorization": f"Bearer {server.api_key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        while (body := (await api.get("/api/sessions/live-killed/")).json())["status"] == "live":
            # The killed process must first stop counting as alive (3 sweeps + 5 s), then the grace runs out.
            assert time.monotonic() - restarted < 3 * 0.5 + 5 + 1 + 0.5 + 3, "the session never ended"
            await asyncio.sleep(0.2)
    assert body["end_reason"] == "server restarted"
    assert body["ended_at"] == body["last_event_at"]  # it ended when its bot was last heard, not at the sweep


async def read_frame(socket) -> tuple[dict, int]:
    """One frame as the page reads it (parts joined), and how many WebSocket messages carried it."""
    text, count = "", 0
    while True:
        raw = await asyncio.wait_for(socket.recv(), 30)
        count += 1
        assert len(raw.encode()) <= 1024 * 1024, "over daphne's 1 MiB"
        frame = json.loads(raw)
        if frame.get("type") != "part":
            return frame, count
        text += frame["data"]
        if frame["last"]:
            return json.loads(text), count


@pytest.mark.parametrize(("count", "size"), [(600, 1024), (400, 200 * 1024)], ids=["600x1KB", "400x200KB"])
async def test_a_session_of_any_length_opens_in_a_browser(server, count, size):
    cookie = await session_cookie(server)
    session_id = f"long-{count}-{RUN}"
    async with bot(server, session_id) as ingest:
        for seq in range(1, count + 1):
            message = rtvi("server-message", {"blob": "x" * size, "n": seq})
            await ingest.send(json.dumps(wrap(seq, message, sent_at=time.time())))
            if seq % 20 == 0:
                while json.loads(await ingest.recv())["ack"] != seq:
                    pass
        async with browser(server, f"/ws/sessions/{session_id}/", cookie) as socket:
            snapshot, messages = await read_frame(socket)
    assert snapshot["type"] == "snapshot" and messages > 1  # over one WebSocket message's worth: sent in parts
    state = snapshot["state"]
    assert state["counts"]["total"] == count
    newest, event = state["server_messages"][-1], snapshot["events"][-1]
    assert newest["seq"] == count and event["seq"] == count
    if size > 4096:  # long values are kept as previews, whole in the database
        assert newest["data"]["truncated"] and newest["data"]["length"] > size
        assert event["message"]["truncated"] and event["message"]["length"] > size
    else:
        assert newest["data"]["blob"] == "x" * size
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"}) as api:
        whole = (await api.get(f"/api/sessions/{session_id}/events/{count}/")).json()
    assert whole["message"]["data"]["blob"] == "x" * size  # one click away, whole
