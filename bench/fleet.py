"""An agent page over a fleet's history: 100,000 calls and 2,000,000 turns in the last 7 days, beside the sessions page.

.venv/bin/python bench/fleet.py [--calls 100000] [--turns 20]

One agent of the demo organization took every call, spread over the last 7 days, under three deployments
(the oldest third, the middle, the newest) and two regions; each call ended with `--turns` turns whose kept
figures (rtvi_monitor/sessions/figures.py CallFigures, as a call's end keeps them) have five stages, the turn
latency and a breakdown of five parts. The server runs with TURN_STATS_CACHE_SECONDS=0, so every request
computes the agent's figures, trend and comparison afresh (cold): the worst case. Times are the server's own
(Server-Timing) in ms: the first call, then the median, min and max of 7 more.
Run with DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench (an empty database) for PostgreSQL.
"""

import argparse
import re
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overview import timed  # the same timing as the Overview's bench: a first call, then 7 more

from tests.server import DaphneServer

FILL = """
import random
from datetime import timedelta
from django.utils import timezone
from dashboard.agents.models import Agent
from dashboard.org.models import Organization
from rtvi_monitor.core.diagnosis import STAGE_NAMES
from rtvi_monitor.sessions import queries
from rtvi_monitor.sessions.models import CallFigures, Session
org = Organization.objects.get(name="Demo Voice Co")
agent = Agent.objects.filter(organization=org, deleted_at__isnull=True).order_by("name").first()
now, rnd, judged = timezone.now(), random.Random(1), queries.judged()
n, turns = {n}, {turns}
PARTS = [("endpointing_wait", "setting"), ("stt_finalize", "service"), ("llm_inference", "service"),
         ("speech_synthesis", "service"), ("pipeline", "pipeline")]
def summary(slow):
    values = {name: [] for name in STAGE_NAMES}
    values["latency"], breakdowns = [], []
    for number in range(1, turns + 1):
        parts = [[key, kind, round(rnd.uniform(50, 300) * (slow if key == "llm_inference" else 1), 1)] for key, kind in PARTS]
        total = round(sum(p[2] for p in parts), 1)
        for name in STAGE_NAMES:
            values[name].append(round(rnd.uniform(20, 400), 1))
        values["latency"].append(total)
        breakdowns.append([total, parts, number])
    counts = {"turns": turns, "complete": turns, "replies": turns, "interruptions": 1, "barge_ins": 1, "backchannels": 0}
    return {"counts": counts, "missing": dict.fromkeys(STAGE_NAMES, 0), "values": values, "breakdowns": breakdowns}
batch_s, batch_f = [], []
for i in range(n):
    started = now - timedelta(seconds=(7 * 86_400 - 60) * (n - i) / n)
    deployment = f"dep-{1 + 3 * i // n}"
    region = "eu-west" if i % 3 else "us-east"
    batch_s.append(Session(organization=org, session_id=f"fleet-{i:07d}", status="ended", agent=agent,
        agent_key=str(agent.pk), agent_name=agent.name, deployment_id=deployment, region=region, started_at=started,
        ended_at=started + timedelta(seconds=120), turn_count=turns, end_kind="bot_finished"))
    if len(batch_s) == 2000 or i == n - 1:
        made = Session.objects.bulk_create(batch_s)
        CallFigures.objects.bulk_create(CallFigures(session=s, organization=org, agent_key=s.agent_key,
            deployment_id=s.deployment_id, region=s.region, started_at=s.started_at, event_count=0, judged=judged,
            summary=summary(1.3 if s.deployment_id == "dep-3" else 1.0),
            flags={"barge_in": True, "errors": False, "ended_badly": False}) for s in made)
        batch_s = []
print(agent.pk, Session.objects.count(), CallFigures.objects.count())
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with DaphneServer(env={"TURN_STATS_CACHE_SECONDS": "0"}) as server:
        username, password, _ = server.seed_demo()
        started = time.monotonic()
        fill = FILL.replace("{n}", str(args.calls)).replace("{turns}", str(args.turns))
        agent, sessions, kept = server.manage("shell", "-c", fill).split()[-3:]
        print(f"{sessions} sessions, {kept} calls' figures ({int(kept) * args.turns:,} turns) stored in "
              f"{time.monotonic() - started:.0f} s")  # fmt: skip
        with httpx.Client(base_url=server.url, timeout=300) as client:
            page = client.get("/login/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            client.post("/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": csrf})
            rows = []
            for name, url in [
                ("sessions page, first 50 (baseline)", "/sessions/"),
                ("agent page, 24 h (default comparison)", f"/agents/{agent}/"),
                ("agent page, 7 d", f"/agents/{agent}/?turns=7d"),
                ("agent page, 7 d, one region", f"/agents/{agent}/?turns=7d&region=us-east"),
                ("agent page, 7 d, dep-1 against dep-3", f"/agents/{agent}/?turns=7d&before=dep-1&after=dep-3"),
            ]:
                response, first, median, low, high = timed(client, url)
                worse = response.text.count('data-verdict="worse"')
                rows.append((name, first, median, low, high, worse))
            base = rows[0][2]
            print(
                f"{'request':42} {'first':>8} {'median':>8} {'min':>8} {'max':>8} {'x baseline':>11} {'worse rows':>11}"
            )
            for name, first, median, low, high, worse in rows:
                print(f"{name:42} {first:8.1f} {median:8.1f} {low:8.1f} {high:8.1f} {median / base:11.1f} {worse:11d}")


if __name__ == "__main__":
    main()
