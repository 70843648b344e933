"""python manage.py demo_bot: a simulated voice bot streaming into the dashboard.

It is a client of the public ingest socket, like any real bot. With no
--token it issues an ingest token for the organization; either way it reads
the token's organization's agents (setup, like reading a config file, so it
needs this server's database); each session goes to one of them, and
the agent's name picks how it behaves (rtvi_dashboard.demo.PERSONAS). The
messages themselves travel only over the socket.
"""

import asyncio
import os

from django.core.management.base import BaseCommand, CommandError
from rtvi_dashboard.demo import SCENARIOS, DemoBot

from dashboard.agents.models import Agent
from dashboard.org.models import Organization
from rtvi_monitor.live.models import IngestToken


class Command(BaseCommand):
    help = "Play realistic RTVI sessions into the dashboard through its ingest socket."

    def add_arguments(self, parser):
        port = os.getenv("PORT", "8000")
        parser.add_argument("--url", default=f"ws://{os.getenv('HOST', '127.0.0.1')}:{port}", help="Dashboard base URL")
        parser.add_argument("--token", default=os.getenv("RTVI_DASHBOARD_TOKEN", ""), help="Ingest token")
        parser.add_argument("--org", default="Demo Voice Co", help="Organization, when no --token is given")
        parser.add_argument("--agent", default="", help="Agent id (default: one of the organization's agents)")
        parser.add_argument("--sessions", type=int, default=0, help="Sessions to play (0: forever)")
        parser.add_argument("--concurrent", type=int, default=2, help="Sessions at once")
        parser.add_argument("--speed", type=float, default=1.0, help="Faster than real time when > 1")
        parser.add_argument("--scenario", choices=list(SCENARIOS), help="Play only this scenario (default: a mix)")
        parser.add_argument("--seed", type=int, help="Make the run reproducible (session ids aside)")
        parser.add_argument(
            "--record-audio",
            action="store_true",
            help="Also upload each call's audio (espeak-ng's speech) when the organization records calls",
        )

    def handle(self, *args, url, token, org, agent, sessions, concurrent, speed, scenario, seed, **options):
        record_audio = options["record_audio"]
        agents: list[tuple[str, str | None]] = []  # (id, name)
        organization = None
        if token:
            found = IngestToken.objects.find(token)
            organization = found.organization if found else None  # another server's token: no agents known here
        else:
            organization = Organization.objects.filter(name=org).first()
            if organization is None:
                raise CommandError(f"No organization {org!r}: run `manage.py seed_demo` or pass --token.")
            token = IngestToken.issue(organization, "demo bot")[1]
        if organization is not None:
            live = Agent.objects.filter(organization=organization, deleted_at__isnull=True).order_by("name")
            agents = [(str(pk), name) for pk, name in live.values_list("pk", "name")]
        if agent:
            agents = [a for a in agents if a[0] == agent] or [(agent, None)]
        self.stdout.write(f"Demo bot streaming to {url} ({'forever' if not sessions else f'{sessions} sessions'})")
        asyncio.run(self.play(url, token, agents, sessions, concurrent, speed, scenario, seed, record_audio))

    async def play(self, url, token, agents, sessions, concurrent, speed, scenario, seed, record_audio=False):
        played = 0

        async def worker(n):
            nonlocal played
            bot = DemoBot(url, token, speed=speed, seed=None if seed is None else seed + n, record_audio=record_audio)
            while not sessions or played < sessions:
                played += 1
                bot.agent_id, bot.agent_name = bot.random.choice(agents) if agents else (None, None)
                session_id = await bot.session(scenario=scenario)
                self.stdout.write(f"played {session_id}")

        await asyncio.gather(*(worker(n) for n in range(max(1, concurrent))))
