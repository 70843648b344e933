"""The bot package's DashboardClient (rtvi_dashboard) and the demo bot against the real server (daphne)."""

import asyncio
import json
import time
import uuid

import httpx
import pytest
from rtvi_dashboard import DashboardClient
from rtvi_dashboard.demo import DemoBot

from tests.server import DaphneServer, free_port
from tests.sockets import rtvi

ORG = f"Acme-{uuid.uuid4().hex[:8]}"  # new in every run, for shared databases
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server():
    with DaphneServer(env={"SESSION_END_GRACE": "1", "BROWSER_ACCESS_CHECK": "0.2"}) as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        yield running


def stored(server, session_id) -> list[dict]:
    response = httpx.get(
        f"{server.url}/api/sessions/{session_id}/events.ndjson", headers={"Authorization": f"Bearer {server.key}"}
    )
    return [json.loads(line) for line in response.text.splitlines()] if response.status_code == 200 else []


async def test_every_message_sent_is_stored_once_in_order(server):
    client = DashboardClient(server.ws_url, server.token, "client-basic")
    client.start()
    for i in range(500):
        client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
    assert await client.flush(20)
    await client.close()
    lines = await asyncio.to_thread(stored, server, "client-basic")
    assert [line["seq"] for line in lines] == list(range(1, 501))
    assert client.stats["acked"] == 500 and client.stats["dropped"] == 0


async def test_send_never_blocks_or_raises_while_the_dashboard_is_down():
    client = DashboardClient(f"ws://127.0.0.1:{free_port()}", "it_x", "nobody-home", max_buffer=100)
    client.start()
    started = time.perf_counter()
    for i in range(1000):
        client.send(rtvi("bot-llm-text", {"text": str(i)}))
    assert time.perf_counter() - started < 1.0
    await asyncio.sleep(0.5)
    assert client.stats["dropped"] == 900 and not client.stats["connected"]
    assert client.send({"not": {1, 2}}) is None  # not JSON: refused quietly
    assert not await client.flush(0.2)
    await client.close(0.1)


REVOKE = (
    "from django.utils import timezone; from rtvi_monitor.models import IngestToken; "
    "IngestToken.objects.filter(key_prefix={prefix!r}).update(revoked_at=timezone.now())"
)


async def test_a_bot_whose_token_is_revoked_is_closed_and_does_not_come_straight_back(server):
    token = (await asyncio.to_thread(server.manage, "create_ingest_token", "--org", ORG)).splitlines()[-1]
    client = DashboardClient(server.ws_url, token, "client-revoked")
    client.start()
    client.send(rtvi("bot-llm-text", {"text": "hi"}))
    assert await client.flush(5)
    await asyncio.to_thread(server.manage, "shell", "-c", REVOKE.format(prefix=token[:10]))
    for _ in range(100):  # the server checks every 0.2 s
        if not client.stats["connected"]:
            break
        await asyncio.sleep(0.05)
    assert not client.stats["connected"] and "4401" in client.last_error
    await asyncio.sleep(1.5)  # a fatal close waits 30 s before it tries again, not the usual 0.2 s
    assert client.stats["reconnects"] == 1 and not client.stats["connected"]
    await client.close(0.1)


async def test_closing_leaves_no_task_pending(server):
    """A task left pending is destroyed with the client, and asyncio logs "Task was destroyed but it is pending!"."""
    before = asyncio.all_tasks()
    client = DashboardClient(server.ws_url, server.token, "client-close")
    client.start()
    client.send(rtvi("bot-llm-text", {"text": "hi"}))
    assert await client.flush(5)
    await client.close()  # cancels the client while it waits for something to send
    await asyncio.sleep(0.05)  # cancelled tasks finish on the loop's next turns
    assert asyncio.all_tasks() - before == set()


async def test_a_server_restart_loses_nothing_and_duplicates_nothing(server):
    client = DashboardClient(server.ws_url, server.token, "client-restart")
    client.start()
    for i in range(100):
        client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
    assert await client.flush(10)
    await asyncio.to_thread(server.stop)
    for i in range(100, 200):  # sent while the dashboard is away
        client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
    await asyncio.sleep(0.5)
    await asyncio.to_thread(server.start, False)
    assert await client.flush(30)
    await client.close()
    assert [line["seq"] for line in await asyncio.to_thread(stored, server, "client-restart")] == list(range(1, 201))
    assert client.stats["reconnects"] >= 1


async def test_the_demo_bot_plays_a_whole_session_through_the_public_socket(server):
    bot = DemoBot(server.ws_url, server.token, speed=50, seed=3)
    session_id = await bot.session(turns=3, scenario="clean", script="order_status")
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {server.key}"}) as api:
        body = (await api.get(f"{server.url}/api/sessions/{session_id}/")).json()
    assert body["invalid_count"] == 0 and body["event_count"] > 100
    users = [t["text"] for t in body["transcript"] if t["role"] == "user"]
    assert users == [
        "Hi, I'd like to check on my order",
        "It's four five seven two",
        "Can I change the delivery address",
    ]
    bots = [t["text"] for t in body["transcript"] if t["role"] == "bot"]
    assert bots[0] == "Of course. Could you give me the order number?"
    assert len(body["turns"]) == 3 and body["latency"]["p50"] > 0
    assert body["function_calls"][0]["function_name"] == "lookup_order"
    assert body["metrics"]["ttfb"] and body["client_messages"][0]["status"] == "answered"


async def test_after_the_database_was_locked_every_message_is_stored_once():
    """The dashboard refuses (retry) while it cannot store; the client resends; nothing is lost or doubled."""
    import sqlite3

    with DaphneServer(env={"INGEST_MAX_PENDING": "100"}) as server:
        token = server.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        server.key = server.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        client = DashboardClient(server.ws_url, token, "client-locked")
        client.start()
        for i in range(300):
            client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
        assert await client.flush(20)
        lock = sqlite3.connect(server.env["SQLITE_PATH"], timeout=30)
        lock.execute("BEGIN EXCLUSIVE")  # another writer holds the database for a while
        try:
            for i in range(300, 1500):
                client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
                if i % 100 == 0:
                    await asyncio.sleep(0.25)
            await asyncio.sleep(2)
        finally:
            lock.rollback()
            lock.close()
        assert await client.flush(30), client.stats
        await client.close()
        assert client.stats["retries"] > 0  # it was told to resend, and did
        lines = await asyncio.to_thread(stored, server, "client-locked")
    assert [line["seq"] for line in lines] == list(range(1, 1501))
    assert [line["message"]["data"]["text"] for line in lines] == [f" w{i}" for i in range(1500)]


async def test_messages_that_can_never_be_stored_are_dropped_with_a_reason_and_the_rest_flow(server):
    """Too big, too deep, not JSON: dropped (or answered as invalid) once, never resent in a reconnect loop."""
    client = DashboardClient(server.ws_url, server.token, "client-unstorable")
    client.start()
    deep: list = []
    for _ in range(3000):  # deeper than json.dumps (or anyone) will go
        deep = [deep]
    kept = []
    for i in range(400):
        if i % 40 == 10:
            assert client.send(rtvi("server-message", {"blob": "x" * 300_000})) is None  # over the frame limit
        elif i % 40 == 20:
            assert client.send(rtvi("server-message", {"deep": deep})) is None  # RecursionError inside: no raise
        elif i % 40 == 30:
            assert client.send({"label": "rtvi-ai", "type": "server-message", "data": {"v": float("nan")}}) is None
        else:
            kept.append(i)
            client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
    nested = {
        "label": "rtvi-ai",
        "type": "server-message",
        "data": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
    }
    assert client.send(nested) is not None  # the dashboard answers it as invalid, stored: final
    assert await client.flush(20), client.stats
    await client.close()
    assert client.stats["reconnects"] == 0
    assert client.stats["too_big"] == 10 and client.stats["unserializable"] == 20
    lines = await asyncio.to_thread(stored, server, "client-unstorable")
    texts = [line["message"]["data"]["text"] for line in lines if line.get("valid", True)]
    assert texts == [f" w{i}" for i in kept]
    # (Not the last line stored: the last token, " w399", ends in digits and waited for more after it.)
    assert (
        [line["error"] for line in lines if line.get("error")]
        == [line["error"] for line in lines if "nested deeper than 32 levels" in (line.get("error") or "")]
        != []
    )


def test_after_a_refusal_the_stream_is_taken_again_only_from_the_first_seq_refused(settings):
    """A bot goes on sending while it waits to resend what was refused: those frames wait too, so that room coming
    back never stores a later seq before an earlier one (the store's order is the transcript's)."""
    from rtvi_monitor.live.admission import Admission

    settings.INGEST_MAX_PENDING = 10
    admission = Admission()
    frames = lambda first, last: [{"seq": seq, "message": {}} for seq in range(first, last + 1)]  # noqa: E731
    assert admission.busy(frames(1, 5), backlog=0) is None
    assert admission.busy(frames(6, 10), backlog=50)["seqs"] == list(range(6, 11))  # storage behind: refused
    assert admission.busy(frames(11, 15), backlog=0)["retry"]  # room again, but 6..10 are owed first
    assert admission.busy(frames(6, 15), backlog=0) is None  # the resend from the gap: taken, in order
    assert admission.busy(frames(16, 20), backlog=0) is None
    assert admission.busy([{"message": {}}], backlog=0) is None  # bare messages have no order to keep
