"""A saved eval scenario: a call's turns, as the operator edited them, in an agent's suite.

It keeps the caller's words (its turns' `user` text, redacted as stored), so it is one of the places
rtvi_monitor/privacy/contents.py lists: erasing its call, or retention purging the call's contents, erases it
too. A team keeps its suites for good in its own repository, as `pipecat eval` runs them: the download.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from dashboard.org.models import Organization
from rtvi_monitor.evals.scenario import slug
from rtvi_monitor.sessions.models import Session


class Scenario(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="eval_scenarios")
    agent_key = models.CharField(max_length=100, help_text="The suite it belongs to: its call's agent (its API id).")
    agent_name = models.CharField(max_length=200, blank=True, help_text="The agent's name when it was saved.")
    name = models.SlugField(max_length=80, help_text="Its file's name in the suite, <name>.yaml.")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="eval_scenarios")
    turns = models.JSONField(default=list, help_text="The draft as edited (evals/scenario.py draft's shape).")
    note = models.TextField(max_length=2000, blank=True, help_text="Why it was made: what the call did wrong.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_by_name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent_key", "name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "agent_key", "name"], name="one_scenario_name_per_suite")
        ]

    def __str__(self) -> str:
        return f"{self.agent_key}/{self.name}"

    @property
    def folder(self) -> str:
        """Its suite's folder in a download: the agent's name as a file name."""
        return slug(self.agent_name or self.agent_key, "agent")

    @property
    def included(self) -> list[dict]:
        return [turn for turn in self.turns if turn.get("include", True)]


class EvalRun(models.Model):
    """One upload of a `pipecat eval` run's results.jsonl, against one deployment of one agent.

    Holds no words (rtvi_monitor/privacy/contents.py says so): of each result, what passed and what failed
    (the failure's kind, turn and expectation, never its reason, which quotes the bot and the scenario's
    caller), and how long each turn took. The words are in the run's own calls, its linked sessions.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="eval_runs")
    agent_key = models.CharField(max_length=100, db_index=True)
    agent_name = models.CharField(max_length=200, blank=True)
    deployment = models.CharField(
        max_length=100, help_text="What it ran against: a deployment id or a Pipecat Cloud environment, as named."
    )
    label = models.CharField(
        max_length=100, blank=True, help_text="The run's label (`--run`), as its bots named it (`?eval_run=`)."
    )
    uploaded_by = models.CharField(max_length=200, help_text="Who uploaded it: a member, or an API key by name.")
    uploaded_at = models.DateTimeField(default=timezone.now, db_index=True)
    results_count = models.PositiveIntegerField(default=0)
    passed_count = models.PositiveIntegerField(default=0)
    linked_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-uploaded_at", "-pk"]
        indexes = [models.Index(fields=["organization", "agent_key", "deployment"], name="evalrun_by_deployment")]

    def __str__(self) -> str:
        return f"{self.agent_key}@{self.deployment} ({self.uploaded_at:%Y-%m-%d %H:%M})"


class EvalResult(models.Model):
    """One line of a results.jsonl: one attempt of one scenario (EvalRun says what is kept of it)."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    scenario = models.CharField(max_length=200, help_text="The scenario's name, <file>/<scenario>.")
    attempt = models.PositiveIntegerField(default=1)
    passed = models.BooleanField()
    skipped = models.BooleanField(default=False)
    errored = models.BooleanField(default=False, help_text="The run could not be made (the harness's error).")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    failures = models.JSONField(
        default=list, help_text="[{turn_index, expectation_index, event_name, kind}]: no reason (it quotes words)."
    )
    turns = models.JSONField(default=list, help_text="[{turn_index, status, duration_ms}]")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_results")

    class Meta:
        ordering = ["scenario", "attempt", "pk"]

    def __str__(self) -> str:
        return f"{self.scenario}#{self.attempt} {'passed' if self.passed else 'failed'}"
