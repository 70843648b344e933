"""The sessions page with 100,000 sessions: first page, a deep page, and a transcript search.

.venv/bin/python bench/sessions_page.py [--sessions 100000]
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
import random
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Organization, Agent
from rtvi_monitor.models import Session
org = Organization.objects.get(name="Demo Voice Co")
agents = list(Agent.objects.filter(organization=org))
link = lambda a: {"agent": a, "agent_key": str(a.pk), "agent_name": a.name}  # noqa: E731 (bulk_create skips save())
now = timezone.now()
rnd = random.Random(1)
words = ["order", "refund", "address", "booking", "weather", "invoice", "password", "delivery"]
batch = []
for i in range({n}):
    batch.append(Session(organization=org, session_id=f"hist-{i:06d}", status="ended", **link(rnd.choice(agents)),
        started_at=now - timedelta(seconds=30 * i), ended_at=now - timedelta(seconds=30 * i - 25),
        turn_count=rnd.randint(1, 12), latency_p50_ms=rnd.uniform(500, 1500), latency_p95_ms=rnd.uniform(1500, 3000),
        transcript_text="user: " + " ".join(rnd.choices(words, k=6))))
    if len(batch) == 5000:
        Session.objects.bulk_create(batch); batch = []
Session.objects.bulk_create(batch)
print(Session.objects.count())
"""


def timed(client, url, n=5):
    times = []
    for _ in range(n):
        response = client.get(url)
        assert response.status_code == 200, response.status_code
        times.append(float(response.headers["Server-Timing"].split("dur=")[1]))
    return response, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    with DaphneServer() as server:
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        started = time.monotonic()
        count = server.manage("shell", "-c", FILL.replace("{n}", str(args.sessions))).split()[-1]
        print(f"{count} sessions stored in {time.monotonic() - started:.0f} s (SQLite)")
        with httpx.Client(base_url=server.url, timeout=60) as client:
            page = client.get("/login/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            client.post("/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": csrf})
            response, first = timed(client, "/sessions/")
            print(f"first page: {first:.1f} ms server time (median of 5)")
            url = "/sessions/"
            for _ in range(200):  # walk 200 pages deep (10,000 sessions)
                next_url = re.search(r'href="(\?[^"]*before=[^"]+)"', response.text).group(1).replace("&amp;", "&")
                url = "/sessions/" + next_url
                response = client.get(url)
            _, deep = timed(client, url)
            print(f"page 201 (sessions 10,001-10,050) by keyset cursor: {deep:.1f} ms server time")
            _, search = timed(client, "/sessions/?q=refund")
            print(f"transcript search 'refund' (first page): {search:.1f} ms server time")
            _, rare = timed(client, "/sessions/?q=no-such-words")
            print(f"transcript search with no match (scans every row): {rare:.1f} ms server time")


if __name__ == "__main__":
    main()
