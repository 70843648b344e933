"""The Overview and /metrics with 100,000 sessions in the last 24 hours (server time), beside the sessions page.

.venv/bin/python bench/overview.py [--sessions 100000] [--error-share 0.1]

Every session started within the last 24 hours (the Overview's whole window:
the worst case for its per-agent charts); a share of them carries 1-3 error
messages (stored as the ingest stores them) with texts that group, 1 % of
those fatal. Times are the server's own (Server-Timing) in ms: the first call, then the median of 7 more.
Run with DATABASE_URL=... to measure PostgreSQL instead of SQLite.
"""

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.server import DaphneServer

FILL = """
import json, random, time
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Organization, Agent
from rtvi_monitor.models import Event, Session
org = Organization.objects.get(name="Demo Voice Co")
agents = list(Agent.objects.filter(organization=org, deleted_at__isnull=True))
link = lambda a: {"agent": a, "agent_key": str(a.pk), "agent_name": a.name}  # noqa: E731 (bulk_create skips save())
now = timezone.now()
rnd = random.Random(1)
texts = ["TTS websocket reconnected after {} ms", "STT stream stalled for {} s (request id 7f3a{}c)",
         "Function lookup_order failed: HTTP {}", "LLM rate limited, retried in {} ms"]
n, share = {n}, {share}
sessions, errors = [], []
for i in range(n):
    started = now - timedelta(seconds=86_000 * i / n)
    bad = rnd.random() < share
    fatal = bad and rnd.random() < 0.01
    sessions.append(Session(organization=org, session_id=f"ov-{i:06d}", status="ended", **link(rnd.choice(agents)),
        started_at=started, ended_at=started + timedelta(seconds=90), last_event_at=started + timedelta(seconds=90),
        end_reason="fatal error" if fatal else "bot disconnected", fatal=fatal, error_count=rnd.randint(1, 3) if bad else 0,
        turn_count=rnd.randint(1, 12), latency_p50_ms=rnd.uniform(500, 1500), latency_p95_ms=rnd.uniform(1500, 3000),
        cost_usd=rnd.uniform(0.01, 0.2)))
    if len(sessions) == 5000:
        Session.objects.bulk_create(sessions); sessions = []
Session.objects.bulk_create(sessions)
for session in Session.objects.filter(organization=org, error_count__gt=0).only("pk", "started_at", "error_count", "fatal"):
    for k in range(session.error_count):
        fatal = session.fatal and k == session.error_count - 1
        text = "LLM service returned 401 Unauthorized" if fatal else rnd.choice(texts).format(rnd.randint(1, 9999), k, k)
        message = {"label": "rtvi-ai", "type": "error", "data": {"error": text, "fatal": fatal}}
        errors.append(Event(session=session, seq=k + 1, direction="to-client", type="error",
            received_at=session.started_at.timestamp() + 10 + k, message=json.dumps(message)))
    if len(errors) >= 5000:
        Event.objects.bulk_create(errors); errors = []
Event.objects.bulk_create(errors)
print(Session.objects.count(), Event.objects.filter(type="error").count())
"""


def timed(client, url, n=8, **kwargs):
    """(last response, first call's ms, median/min/max ms of the n - 1 after it)."""
    times = []
    for _ in range(n):
        response = client.get(url, **kwargs)
        assert response.status_code == 200, (url, response.status_code)
        times.append(float(response.headers["Server-Timing"].split("dur=")[1]))
    later = times[1:]
    return response, times[0], statistics.median(later), min(later), max(later)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--error-share", type=float, default=0.1)
    args = parser.parse_args()
    with DaphneServer() as server:
        username, password, key = server.seed_demo()
        started = time.monotonic()
        fill = FILL.replace("{n}", str(args.sessions)).replace("{share}", str(args.error_share))
        sessions, errors = server.manage("shell", "-c", fill).split()[-2:]
        print(f"{sessions} sessions, {errors} error messages stored in {time.monotonic() - started:.0f} s")
        with httpx.Client(base_url=server.url, timeout=120) as client:
            page = client.get("/login/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            client.post("/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": csrf})
            rows = []
            for name, url, kwargs in [
                ("sessions page, first 50 (baseline)", "/sessions/", {}),
                ("Overview (whole page)", "/", {}),
                ("Overview panel (what the live page refetches)", "/overview/panel/", {}),
                ("GET /metrics", "/metrics", {"headers": {"Authorization": f"Bearer {key}"}}),
            ]:
                response, first, median, low, high = timed(client, url, **kwargs)
                rows.append((name, first, median, low, high, len(response.content)))
            base = rows[0][2]
            print("first: the first call (the Overview then counts the 23 earlier hours; reused for 2 min)")
            print(f"{'request':48} {'first':>8} {'median':>8} {'min':>8} {'max':>8} {'× baseline':>11} {'bytes':>8}")
            for name, first, median, low, high, size in rows:
                print(f"{name:48} {first:8.1f} {median:8.1f} {low:8.1f} {high:8.1f} {median / base:11.1f} {size:8d}")


if __name__ == "__main__":
    main()
