"""Seed a demo organization: agents with deployments, a private API key, an ingest token and a staff login.

Idempotent: a second run reuses what the first made. The login and the ingest
token are kept in var/demo-login.json (git-ignored, 0600) so `make run` can
print them every time; the API key is the organization's own agents API key.
It prints `Organization: NAME (ID)`, `Login: USER / PASSWORD`, `Ingest token:
TOKEN`, and the key alone on the last line.
"""

import json
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from dashboard.agents.models import Agent, Deployment
from dashboard.org.models import ApiKey, Membership, Organization, Price, Role
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.live.models import IngestToken

ORG_NAME = "Demo Voice Co"
USERNAME = "demo"
AGENTS = [
    # name, image tag, days since created, deleted
    ("support-concierge", "v42", 40, False),
    ("appointment-booker", "v7", 12, False),
    ("outbound-survey", "v3", 3, False),
    ("legacy-ivr", "v1", 90, True),
]


PRICES = {
    "gpt-4o": {"usd_per_million_input_tokens": 2.5, "usd_per_million_output_tokens": 10},
    "gpt-4o-mini": {"usd_per_million_input_tokens": 0.15, "usd_per_million_output_tokens": 0.6},
    "claude-sonnet-4": {"usd_per_million_input_tokens": 3, "usd_per_million_output_tokens": 15},
    "sonic-2": {"usd_per_thousand_characters": 0.04},
    "eleven_flash_v2_5": {"usd_per_thousand_characters": 0.06},
    "nova-3": {"usd_per_audio_minute": 0.0043},
}
# The demo's rules, tuned to what the demo bot plays (rtvi_dashboard.demo: about 180 calls an hour over three
# agents; 3 % end in a fatal error, 15 % have an error, 5 % drop, 10 % have one slow turn, and a function call
# makes a turn take 2-5 s): its normal traffic stays quiet, its deliberate failures fire. Fatal errors fire on
# each one; the error rate (15 % as a rule) and the dropped calls (about 2 in 15 min) only on a burst; slow
# turns only for the agent whose calls are slow (outbound-survey, its p95 around 5 s), never for one slow call.
RUNBOOK = "/alerts/runbook/"
RULES = [
    ("Fatal errors", "fatal_error", {"renotify_minutes": 30, "runbook_url": f"{RUNBOOK}#fatal-errors"}),
    (
        "Errors in over a fifth of calls",
        "error_rate",
        {"threshold": 20, "window_minutes": 15, "runbook_url": f"{RUNBOOK}#errors-in-many-calls"},
    ),
    (
        "Slow turns (p95 over 5 s)",
        "turn_latency_p95_ms",
        {"threshold": 5000, "window_minutes": 15, "runbook_url": f"{RUNBOOK}#slow-turns"},
    ),
    (
        "Calls dropping (4 in 15 min)",
        "ended_badly",
        {"threshold": 4, "window_minutes": 15, "runbook_url": f"{RUNBOOK}#calls-ending-badly"},
    ),
]
# Rules earlier seeds made that fired on the demo's normal traffic: a new seed replaces them.
RETIRED = ["Slow turns (p95 over 2 s)", "Errors in over a quarter of calls"]


def manifest(name: str, tag: str) -> dict:
    """A manifest shaped like Pipecat Cloud's: nested, and bigger than a page wants to show raw."""
    return {
        "apiVersion": "v1",
        "kind": "Agent",
        "metadata": {"name": name, "namespace": "demo-voice-co"},
        "spec": {
            "image": f"registry.example.com/demo-voice-co/{name}:{tag}",
            "imagePullSecretSet": "registry-creds",
            "secretSet": f"{name}-secrets",
            "agentProfile": "agent-1x",
            "enableKrisp": name != "outbound-survey",
            "region": "us-west",
            "autoScaling": {"minAgents": 1, "maxAgents": 20},
            "integratedKeysProxy": {"enabled": True},
        },
    }


class Command(BaseCommand):
    help = "Create (or reuse) the demo organization, agents, API key and staff login."

    @transaction.atomic
    def handle(self, *args, **options):
        organization, made = Organization.objects.get_or_create(name=ORG_NAME)
        if made:
            # The demo's calls are the demo bot's synthetic voices: recording is on here, to show the player.
            # A real organization starts with it off (Settings → Recording).
            organization.record_audio = True
            organization.keep_audio_days = 7
            organization.save(update_fields=["record_audio", "keep_audio_days"])
        now = timezone.now()
        for name, tag, age_days, deleted in AGENTS:
            agent, created = Agent.objects.get_or_create(
                organization=organization, name=name, defaults={"created_at": now - timedelta(days=age_days)}
            )
            if created:
                deployment = Deployment.objects.create(
                    agent=agent,
                    image=manifest(name, tag)["spec"]["image"],
                    manifest=manifest(name, tag),
                    created_at=now - timedelta(days=age_days / 2),
                )
                agent.active_deployment = deployment
                agent.deleted_at = now - timedelta(days=1) if deleted else None
                agent.save()

        # The organization's agents API key doubles as the demo's private key:
        # the built-in API then serves the dashboard's own agent pages.
        if not ApiKey.objects.find(organization.agents_api_key):
            _, organization.agents_api_key = ApiKey.issue(organization, "demo")
            organization.save(update_fields=["agents_api_key"])

        # Example prices (list prices at the time of writing, to be edited in the admin) and
        # alert rules shown on the Overview and the alerts page; no webhook or e-mail is set.
        for model, prices in PRICES.items():
            Price.objects.get_or_create(organization=organization, model=model, defaults=prices)
        AlertRule.objects.filter(organization=organization, name__in=RETIRED).delete()
        for name, condition, fields in RULES:
            rule, made = AlertRule.objects.get_or_create(
                organization=organization, name=name, condition=condition, defaults=fields
            )
            if not made and not rule.runbook_url:
                rule.runbook_url = fields["runbook_url"]
                rule.save(update_fields=["runbook_url"])

        username, password = self.staff_login(organization)
        self.stdout.write(f"Organization: {organization.name} ({organization.pk})")
        self.stdout.write(f"Agents: {organization.agents.count()}")
        self.stdout.write(f"Login: {username} / {password}")
        self.stdout.write(f"Ingest token: {self.ingest_token(organization)}")
        self.stdout.write(organization.agents_api_key)

    def ingest_token(self, organization) -> str:
        """The demo organization's ingest token for bots, kept in var/demo-login.json (0600) so that every
        `make run` prints the same one while it is valid (only its hash is in the database)."""
        path = settings.BASE_DIR / "var" / "demo-login.json"
        saved = json.loads(path.read_text()) if path.exists() else {}
        token = saved.get("ingest_token", "")
        found = IngestToken.objects.find(token) if token else None
        if found is None or found.organization_id != organization.pk:
            _, token = IngestToken.issue(organization, "demo")
            saved["ingest_token"] = token
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(saved))
            path.chmod(0o600)
        return token

    def staff_login(self, organization) -> tuple[str, str]:
        path = settings.BASE_DIR / "var" / "demo-login.json"
        User = get_user_model()
        user = User.objects.filter(username=USERNAME).first()
        saved = json.loads(path.read_text()) if path.exists() else {}
        password = saved.get("password", "")
        if user is None or not password or not user.check_password(password):
            password = secrets.token_urlsafe(9)
            user = user or User(username=USERNAME)
            user.set_password(password)
            user.is_staff = True
            user.is_superuser = True  # the demo login also opens /admin/
            user.save()
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps({**saved, "username": USERNAME, "password": password}))
            path.chmod(0o600)
        Membership.objects.update_or_create(user=user, organization=organization, defaults={"role": Role.ADMIN})
        return USERNAME, password
