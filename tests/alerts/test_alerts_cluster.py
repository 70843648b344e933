"""Alerts with two server processes on the machine's real Redis and PostgreSQL: one fatal error, one webhook.

Both processes run the alert loop; the lease in the database lets one of
them evaluate at a time, and the firing alert is unique in the database, so
the webhook receiver (a real HTTP server on loopback) gets exactly one POST.
"""

import asyncio
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import websockets

from tests.conftest import DATABASE_URL, REDIS_URL, reachable, skip_or_fail
from tests.server import DaphneServer, free_port
from tests.sockets import rtvi, wrap

pytestmark = [pytest.mark.services, pytest.mark.timeout(180)]


class Receiver(ThreadingHTTPServer):
    """A webhook endpoint that keeps what it was sent."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.times: list[float] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler):
                length = int(handler.headers.get("Content-Length", 0))
                self.bodies.append(json.loads(handler.rfile.read(length)))
                self.times.append(time.time())
                handler.send_response(204)
                handler.end_headers()

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def cluster():
    if not reachable("127.0.0.1", 6379):
        skip_or_fail("Redis is not reachable on 127.0.0.1:6379")
    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
    env = {
        "REDIS_URL": REDIS_URL,
        "DATABASE_URL": DATABASE_URL,
        "ALERT_EVALUATE_INTERVAL": "0.5",
        "ALERT_WEBHOOK_ALLOW_PRIVATE": "true",  # the receiver is on loopback
    }
    first = DaphneServer(env=env).start()
    second = DaphneServer(env=env, workdir=str(first.workdir)).start(migrate=False)
    try:
        yield first, second
    finally:
        second.stop()
        first.stop()


async def test_a_fatal_error_is_delivered_once_across_two_processes(cluster):
    a, b = cluster
    org = f"alerts-{uuid.uuid4().hex[:8]}"
    token = a.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
    key = a.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
    receiver = Receiver()
    try:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as api:
            rule = {
                "name": "Fatal errors",
                "condition": "fatal_error",
                "webhook_url": f"http://127.0.0.1:{receiver.server_port}/hook",
            }
            assert (await api.post(f"{b.url}/api/alerts/rules/", json=rule)).status_code == 201

            session_id = f"fatal-{uuid.uuid4().hex[:6]}"
            headers = {"Authorization": f"Bearer {token}"}
            async with websockets.connect(f"{a.ws_url}/ws/ingest/{session_id}/", additional_headers=headers) as bot:
                await bot.send(json.dumps(wrap(1, rtvi("bot-ready", {"version": "2.1.0"}))))
                fatal = rtvi("error", {"error": "LLM service returned 401 Unauthorized", "fatal": True})
                await bot.send(json.dumps(wrap(2, fatal)))
                acks = [json.loads(await asyncio.wait_for(bot.recv(), 10)) for _ in range(2)]
                assert acks == [{"ack": 1}, {"ack": 2}]
                stored_at = time.time()

            deadline = time.monotonic() + 30  # a lease left by an earlier run's process expires within 15 s
            while not receiver.bodies and time.monotonic() < deadline:  # noqa: ASYNC110 (another thread fills it)
                await asyncio.sleep(0.2)
            assert receiver.bodies, "no webhook within 30 s"
            await asyncio.sleep(3)  # six more rounds on each process: nothing more is sent

            assert len(receiver.bodies) == 1
            (body,) = receiver.bodies
            assert body["rule"]["condition"] == "fatal_error" and body["session_ids"] == [session_id]
            assert "Fatal error in 1 session" in body["text"] and "Unauthorized" not in body["text"]  # no words: counts
            print(f"fatal error to webhook: {receiver.times[0] - stored_at:.2f} s")

            (alert,) = (await api.get(f"{a.url}/api/alerts/")).json()["alerts"]
            assert alert["status"] == "firing"
            assert [(d["channel"], d["status"], d["attempts"]) for d in alert["deliveries"]] == [("webhook", "sent", 1)]
    finally:
        receiver.shutdown()
