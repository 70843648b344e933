"""Scale-out on the machine's real Redis and PostgreSQL: two server processes sharing them.

Skipped with the reason when Redis or PostgreSQL is unreachable on a user's
machine; with CI=true that is a failure (.ci/run starts both).
"""

import asyncio
import json
import os
import uuid

import httpx
import pytest
import websockets

from tests.conftest import DATABASE_URL, REDIS_URL, reachable, skip_or_fail
from tests.server import DaphneServer
from tests.sockets import Page, rtvi, wrap

pytestmark = [pytest.mark.services, pytest.mark.timeout(180)]


STAFF = """
from django.contrib.auth import get_user_model
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from dashboard.models import Membership, Organization
org, _ = Organization.objects.get_or_create(name="{org}")
user, _ = get_user_model().objects.get_or_create(username="{org}-ops", defaults={{"is_staff": True}})
Membership.objects.update_or_create(user=user, organization=org)
session = SessionStore()
session.update({{SESSION_KEY: str(user.pk), BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
                HASH_SESSION_KEY: user.get_session_auth_hash()}})
session.create()
print(session.session_key)
"""


@pytest.fixture(scope="module")
def cluster():
    if not reachable("127.0.0.1", 6379):
        skip_or_fail("Redis is not reachable on 127.0.0.1:6379")
    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
    env = {"REDIS_URL": REDIS_URL, "DATABASE_URL": DATABASE_URL, "SESSION_END_GRACE": "2", "AGENTS_CACHE_TTL": "60"}
    first = DaphneServer(env=env).start()
    second = DaphneServer(env=env, workdir=str(first.workdir)).start(migrate=False)
    try:
        org = f"scale-{uuid.uuid4().hex[:8]}"
        first.org = org
        first.token = first.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        first.key = first.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
        first.cookie = "sessionid=" + first.manage("shell", "-c", STAFF.format(org=org)).split()[-1]
        yield first, second
    finally:
        second.stop()
        first.stop()


def browser(server, path, cookie):
    return websockets.connect(f"{server.ws_url}{path}", additional_headers={"Cookie": cookie}, origin=server.url)


async def watch(server, session_id, cookie, count, ready) -> Page:
    """A session page's model on `server`: patches applied, a snapshot asked for on any gap."""
    page = Page()
    async with browser(server, f"/ws/sessions/{session_id}/", cookie) as sock:
        ready.set()
        while page.version < count:
            frame = json.loads(await asyncio.wait_for(sock.recv(), 15))
            if page.take(frame) == "gap" or frame.get("type") == "resync":
                await sock.send(json.dumps({"snapshot": True}))
            elif page.state is not None:
                await sock.send(json.dumps({"ack": page.version}))
    return page


async def test_a_bot_on_one_process_reaches_browsers_on_both_and_postgresql(cluster):
    a, b = cluster
    session_id, count = f"two-{uuid.uuid4().hex[:6]}", 300
    async with browser(a, "/ws/sessions/", a.cookie) as list_a, browser(b, "/ws/sessions/", a.cookie) as list_b:
        for session_list in (list_a, list_b):
            assert json.loads(await session_list.recv())["type"] == "live"
        headers = {"Authorization": f"Bearer {a.token}"}
        async with websockets.connect(f"{a.ws_url}/ws/ingest/{session_id}/", additional_headers=headers) as bot:
            await bot.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}))))
            assert json.loads(await bot.recv()) == {"ack": 1}
            for session_list in (list_a, list_b):  # the session list updates on both processes
                started = json.loads(await asyncio.wait_for(session_list.recv(), 10))
                assert started["type"] == "started" and started["session"]["id"] == session_id

            ready_a, ready_b = asyncio.Event(), asyncio.Event()
            on_a = asyncio.create_task(watch(a, session_id, a.cookie, count, ready_a))
            on_b = asyncio.create_task(watch(b, session_id, a.cookie, count, ready_b))
            await ready_a.wait()
            await ready_b.wait()
            for seq in range(2, count + 1):
                await bot.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": f" w{seq}"}))))
            acks = {json.loads(await asyncio.wait_for(bot.recv(), 15))["ack"] for _ in range(count - 1)}
            assert acks == set(range(2, count + 1))
            got_a, got_b = await asyncio.gather(on_a, on_b)
    assert got_a.seqs == got_b.seqs == list(range(1, count + 1))
    assert got_a.state == got_b.state  # both processes' pages show the same derived state
    assert got_a.state["llm"]["current_tokens"] == "".join(f" w{seq}" for seq in range(2, count + 1))

    # Stored in PostgreSQL, readable through either process.
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {a.key}"}) as api:
        lines = (await api.get(f"{b.url}/api/sessions/{session_id}/events.ndjson")).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, count + 1))
    assert "postgresql" in a.manage("shell", "-c", "from django.db import connection; print(connection.vendor)")


async def test_the_agents_cache_is_shared_across_processes(cluster):
    a, b = cluster
    a.manage(
        "shell",
        "-c",
        f"from dashboard.models import Organization; Organization.objects.filter(name='{a.org}')"
        f".update(agents_api_base_url='{a.url}/v1', agents_api_key='{a.key}')",
    )
    before = sum("GET /v1/agents" in line for s in (a, b) for line in s.access_log.read_text().splitlines())
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {a.key}"}, timeout=30) as api:
        results = await asyncio.gather(*(api.get(f"{s.url}/api/agents/") for s in (a, b) for _ in range(10)))
    assert all(r.status_code == 200 and r.json()["error"] is None for r in results)
    await asyncio.sleep(0.5)
    after = sum("GET /v1/agents" in line for s in (a, b) for line in s.access_log.read_text().splitlines())
    assert after - before == 1


def restart_redis():
    """Stop the machine's Redis and start it again (as .ci/run and the machine page start it)."""
    import shutil
    import subprocess
    import tempfile
    import time

    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        skip_or_fail("redis-server/redis-cli are not installed here, so Redis cannot be restarted")
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "shutdown", "nosave"], capture_output=True, timeout=10)
    deadline = time.monotonic() + 10
    while reachable("127.0.0.1", 6379) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield  # Redis is down
    workdir = tempfile.mkdtemp(prefix="redis-")
    subprocess.run(
        ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379", "--save", "",
         "--appendonly", "no", "--dir", workdir, "--logfile", f"{workdir}/redis.log"],
        check=True, timeout=10,
    )  # fmt: skip
    while not reachable("127.0.0.1", 6379):
        time.sleep(0.1)


async def test_a_redis_restart_loses_no_acknowledged_message(cluster):
    a, b = cluster
    session_id, count = f"redis-{uuid.uuid4().hex[:6]}", 300
    headers = {"Authorization": f"Bearer {a.token}"}
    async with websockets.connect(f"{a.ws_url}/ws/ingest/{session_id}/", additional_headers=headers) as bot:

        async def send(seqs):
            for seq in seqs:
                await bot.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": f" w{seq}"}))))
            return {json.loads(await asyncio.wait_for(bot.recv(), 20))["ack"] for _ in seqs}

        assert await send([1]) == {1}
        ready = asyncio.Event()
        watcher = asyncio.create_task(watch(b, session_id, a.cookie, count, ready))
        await ready.wait()
        assert await send(range(2, 101)) == set(range(2, 101))
        restart = restart_redis()
        next(restart)  # Redis is down: storage (PostgreSQL) still acknowledges
        assert await send(range(101, 201)) == set(range(101, 201))
        next(restart, None)  # Redis is back
        await asyncio.sleep(1)
        assert await send(range(201, count + 1)) == set(range(201, count + 1))
        got = await asyncio.wait_for(watcher, 60)
    # The browser was made whole from the database: a snapshot after the relays Redis lost.
    assert got.seqs == list(range(1, count + 1))
    assert got.state["llm"]["current_tokens"] == "".join(f" w{seq}" for seq in range(1, count + 1))
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {a.key}"}) as api:
        lines = (await api.get(f"{b.url}/api/sessions/{session_id}/events.ndjson")).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, count + 1))


async def test_a_postgresql_restart_loses_no_message_the_bot_sent(cluster):
    import shutil
    import subprocess

    from rtvi_dashboard import DashboardClient

    if not shutil.which("pg_ctlcluster"):
        skip_or_fail("pg_ctlcluster is not installed here, so PostgreSQL cannot be restarted")
    a, b = cluster
    session_id = f"pg-{uuid.uuid4().hex[:6]}"
    client = DashboardClient(a.ws_url, a.token, session_id)
    client.start()
    for i in range(100):
        client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
    assert await client.flush(20)
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    restart = asyncio.create_task(
        asyncio.to_thread(
            subprocess.run, ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True
        )
    )
    for i in range(100, 300):  # sent while PostgreSQL goes down and comes back
        client.send(rtvi("bot-llm-text", {"text": f" w{i}"}))
        await asyncio.sleep(0.01)
    await restart
    assert await client.flush(60), client.stats
    await client.close()
    assert client.stats["dropped"] == 0
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {a.key}"}) as api:
        lines = (await api.get(f"{b.url}/api/sessions/{session_id}/events.ndjson")).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 301))
    assert a.process.poll() is None and b.process.poll() is None  # both servers lived through it


async def test_two_clients_of_one_session_on_two_processes_lose_nothing(cluster):
    """Each process numbers the session's messages from what it loaded: a seq the other took is renumbered."""
    a, b = cluster
    session_id, count = f"split-{uuid.uuid4().hex[:6]}", 150
    headers = {"Authorization": f"Bearer {a.token}"}

    async def stream(server, name):
        url = f"{server.ws_url}/ws/ingest/{session_id}/?stream={name}"
        async with websockets.connect(url, additional_headers=headers) as bot:
            for seq in range(1, count + 1):
                await bot.send(json.dumps(wrap(seq, rtvi("server-message", {"from": name, "n": seq}))))
                if seq % 10 == 0:
                    await asyncio.sleep(0.01)  # interleave with the other process's writes
            got = set()
            while len(got) < count:
                reply = json.loads(await asyncio.wait_for(bot.recv(), 15))
                assert "error" not in reply, reply
                got.add(reply["ack"])

    await asyncio.gather(stream(a, "on-a"), stream(b, "on-b"))
    async with httpx.AsyncClient(base_url=a.url, headers={"Authorization": f"Bearer {a.key}"}) as api:
        lines = (await api.get(f"/api/sessions/{session_id}/events.ndjson")).text.splitlines()
    events = [json.loads(line) for line in lines]
    assert sorted((e["stream"], e["bot_seq"]) for e in events) == sorted(
        (name, n) for name in ("on-a", "on-b") for n in range(1, count + 1)
    )
    assert len({e["seq"] for e in events}) == 2 * count  # the dashboard's seqs: each once
