"""Alerts: the rules an organization sets, the channels they notify, the alerts they fire, their notes
and every delivery's outcome.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from dashboard.agents.models import Agent
from dashboard.org.models import Organization


class AlertRule(models.Model):
    """When to tell somebody: a condition over the organization's sessions (or its agents API), and where to send it.

    What `threshold` and `window_minutes` mean depends on the condition
    (rtvi_monitor/alerts.py evaluates them; the README has the table).
    """

    class Condition(models.TextChoices):
        FATAL_ERROR = "fatal_error", "a session had a fatal error"
        ERROR_RATE = "error_rate", "share of sessions with errors above threshold %"
        TURN_LATENCY_P95 = "turn_latency_p95_ms", "an agent's turn latency p95 above threshold ms"
        NO_SESSIONS = "no_sessions_minutes", "an agent that usually has sessions has had none"
        AGENTS_API_DOWN = "agents_api_down", "the agents API has been failing"
        ENDED_BADLY = "ended_badly", "sessions ended badly (bot vanished, server restarted) at least threshold times"
        DEPLOYMENT_REGRESSED = "deployment_regressed", "an agent's active deployment is worse than the one before"

    class Severity(models.TextChoices):
        CRITICAL = "critical"
        ERROR = "error"
        WARNING = "warning"
        INFO = "info"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=200)
    condition = models.CharField(max_length=32, choices=Condition.choices)
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, help_text="Only this agent; blank: every agent."
    )
    # An agent of the agents API with no built-in row (a Pipecat Cloud agent): its id and its name then.
    agent_key = models.CharField(
        max_length=200, blank=True, default="", help_text="Only this agent of the agents API (by id); blank: any."
    )
    agent_label = models.CharField(max_length=200, blank=True, default="")
    threshold = models.FloatField(null=True, blank=True, help_text="Blank: the condition's default.")
    window_minutes = models.PositiveIntegerField(null=True, blank=True, help_text="Blank: the condition's default.")
    webhook_url = models.URLField(blank=True, help_text="JSON POST (Slack-compatible: it has a `text` field).")
    email = models.EmailField(blank=True)
    severity = models.CharField(
        max_length=8,
        choices=Severity.choices,
        blank=True,
        help_text="How bad it is (PagerDuty's severity, Opsgenie's priority). Blank: by the condition.",
    )
    runbook_url = models.CharField(
        "runbook link",
        max_length=500,
        blank=True,
        help_text="What to check when it fires: an http(s) address, or a path of this dashboard (/alerts/runbook/#…).",
    )
    renotify_minutes = models.PositiveIntegerField(
        "re-notify every (minutes)",
        null=True,
        blank=True,
        help_text="While it fires, unacknowledged and not silenced, tell again this often. Blank: never.",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def target_agent(self) -> str | None:
        """The id of the one agent the rule watches (a built-in row's, or an agents API id), or None: every agent."""
        return self.agent_key or (str(self.agent_id) if self.agent_id else None)

    @property
    def target_agent_name(self) -> str:
        if self.agent_id and self.agent is not None:
            return self.agent.name
        return self.agent_label or self.agent_key

    # What a condition's alerts are worth when the rule does not say.
    SEVERITY_OF = {
        Condition.FATAL_ERROR: Severity.CRITICAL,
        Condition.ERROR_RATE: Severity.ERROR,
        Condition.ENDED_BADLY: Severity.ERROR,
        Condition.AGENTS_API_DOWN: Severity.ERROR,
        Condition.TURN_LATENCY_P95: Severity.WARNING,
        Condition.NO_SESSIONS: Severity.WARNING,
    }

    @property
    def effective_severity(self) -> str:
        return self.severity or self.SEVERITY_OF.get(self.condition, self.Severity.ERROR)


class AlertChannel(models.Model):
    """One more place a rule's alerts go, beside the rule's own webhook_url and email.

    `target` is what may be shown (an address, an e-mail); `secret` is what
    may not (a PagerDuty routing key, an Opsgenie API key, a Slack hook's
    URL): it is sent upstream and never shown back whole (`masked`).
    """

    class Kind(models.TextChoices):
        SLACK = "slack", "Slack (incoming webhook)"
        WEBHOOK = "webhook", "webhook (JSON POST)"
        EMAIL = "email", "e-mail"
        PAGERDUTY = "pagerduty", "PagerDuty (Events API v2)"
        OPSGENIE = "opsgenie", "Opsgenie"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="channels")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=300, blank=True)
    secret = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.masked}"

    @property
    def masked(self) -> str:
        """The channel as pages and the API show it: never the whole secret."""
        if self.kind == self.Kind.SLACK:
            return f"{webhook_host(self.secret).removesuffix(' (webhook)')} …{self.secret[-4:]}"
        if self.kind in (self.Kind.PAGERDUTY, self.Kind.OPSGENIE):
            return f"key …{self.secret[-4:]}" if len(self.secret) > 8 else "key …"
        return self.target


class Alert(models.Model):
    """A rule that fired: one row while it stays firing (for its agent), resolved when the condition clears."""

    class Status(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="alerts")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # What one alert of the rule is about: an agent's id, or "" for the organization.
    key = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.FIRING)
    fired_at = models.DateTimeField(default=timezone.now, db_index=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    summary = models.CharField(max_length=500)
    figures = models.JSONField(default=dict, blank=True)
    session_ids = models.JSONField(default=list, blank=True)
    # The workflow (rtvi_monitor/alert_actions.py): who took it and when, a silence, an owner.
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True)
    silenced_until = models.DateTimeField(null=True, blank=True)
    silenced_until_resolved = models.BooleanField(default=False)
    silenced_by = models.CharField(max_length=200, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # When its channels were last told it fires (the fired message, then each reminder).
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-fired_at"]
        constraints = [
            # Deduplication the database enforces, whichever process evaluates.
            models.UniqueConstraint(
                fields=["rule", "key"], condition=models.Q(status="firing"), name="one_firing_alert_per_rule_key"
            )
        ]

    def __str__(self) -> str:
        return self.summary

    # How firing alerts are listed (the alerts page, the Overview): those nobody has acknowledged first, then
    # the newest: what still needs somebody comes before what somebody has.
    FIRING_ORDER = (models.F("acknowledged_at").asc(nulls_first=True), "-fired_at", "-pk")

    @property
    def masked_summary(self) -> str:
        """The summary without what a bot's error said (for viewers): a fatal error's text can quote a caller."""
        if self.rule.condition == AlertRule.Condition.FATAL_ERROR and "): " in self.summary:
            return self.summary.split("): ", 1)[0] + ")"
        return self.summary

    def silenced(self, now=None) -> bool:
        """Whether it is silenced now: until it resolves, or until a time not yet come."""
        if self.silenced_until_resolved:
            return self.status == self.Status.FIRING
        return self.silenced_until is not None and self.silenced_until > (now or timezone.now())


class AlertNote(models.Model):
    """A member's note on an alert: what they found, what they did. Plain text, shown as text."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="notes")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    author_name = models.CharField(max_length=200)
    text = models.TextField(max_length=4000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.author_name}: {self.text[:60]}"


class AlertDelivery(models.Model):
    """One message about an alert (it fired, or it resolved) to one place, retried with back-off."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # gave up after ALERT_DELIVERY_ATTEMPTS

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    # "fired", "reminder" (still firing, re-notified), "acknowledged" or "resolved"
    event = models.CharField(max_length=16)
    # The rule's own "webhook" or "email", or an AlertChannel's kind (slack, pagerduty, opsgenie…)
    channel = models.CharField(max_length=16)
    target = models.CharField(max_length=300)  # as shown: an AlertChannel's secret never is
    alert_channel = models.ForeignKey(
        AlertChannel, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # Whoever is sending it holds it until then: two processes never send it both.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"{self.event} → {self.channel} {self.target}: {self.status}"


def webhook_host(url: str) -> str:
    """A webhook's address as non-admins see it: its host (the rest, a Slack hook's path, works as a password)."""
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname if url else ""
    return f"{host} (webhook)" if host else ""
