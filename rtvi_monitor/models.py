"""Live sessions and the RTVI messages they carried.

A bot streams its messages over the ingest socket; each becomes an `Event`
row, stored once per (session, seq). The `Session` row keeps what lists and
filters need (status, counts, latency summary, transcript text for search);
the full derived state is recomputed from the events by `rtvi_monitor.state`,
and frozen into `Session.state` when the session ends.
"""

import re

from django.db import models
from django.utils import timezone

from dashboard.models import Agent, Organization, Secret

# Not only dots ("." and ".." cannot be put in a URL); \Z, since $ lets a trailing newline through.
SESSION_ID_RE = re.compile(r"^(?!\.+\Z)[A-Za-z0-9_.:-]{1,100}\Z")


class IngestToken(Secret):
    """Lets a bot stream its RTVI messages into the dashboard, for one organization."""

    PREFIX = "it_"

    class Meta:
        verbose_name = "ingest token"


class SessionQuerySet(models.QuerySet):
    def live(self):
        return self.filter(status=Session.Status.LIVE)

    def find(self, organization, session_id: str):
        """The organization's session with this id, or None (also for no organization)."""
        if organization is None:
            return None
        return self.select_related("agent").filter(organization=organization, session_id=session_id).first()


class Session(models.Model):
    class Status(models.TextChoices):
        LIVE = "live"
        ENDED = "ended"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sessions")
    # The bot's own id for the session (a Daily room, a call SID, a UUID…):
    # unique within the organization, chosen by the bot in the ingest URL.
    session_id = models.CharField(max_length=100)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="sessions")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.LIVE, db_index=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)
    # Bumped on every bot connection.
    ingest_epoch = models.PositiveIntegerField(default=0)
    # The server process the bot is connected to (ServerProcess.id), and when
    # its bot left. A live session whose bot left more than SESSION_END_GRACE
    # ago, or whose process stopped beating, is ended by the sweep
    # (rtvi_monitor/lifecycle.py), whichever process runs it.
    holder = models.CharField(max_length=40, blank=True, db_index=True)
    bot_left_at = models.DateTimeField(null=True, blank=True)

    protocol_version = models.CharField(max_length=32, blank=True)
    client_about = models.JSONField(default=dict, blank=True)
    bot_about = models.JSONField(default=dict, blank=True)

    event_count = models.PositiveIntegerField(default=0)
    invalid_count = models.PositiveIntegerField(default=0)
    unknown_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    turn_count = models.PositiveIntegerField(default=0)
    interruption_count = models.PositiveIntegerField(default=0)
    latency_p50_ms = models.FloatField(null=True, blank=True)
    latency_p95_ms = models.FloatField(null=True, blank=True)
    latency_max_ms = models.FloatField(null=True, blank=True)
    fatal = models.BooleanField(default=False)
    transcript_text = models.TextField(blank=True, help_text="Final transcript, for search.")
    state = models.JSONField(null=True, blank=True, help_text="Derived state, frozen when the session ends.")

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [models.UniqueConstraint(fields=["organization", "session_id"], name="session_id_unique_in_org")]
        indexes = [models.Index(fields=["organization", "status", "-started_at"], name="session_list_idx")]

    def __str__(self) -> str:
        return self.session_id

    @property
    def bot_state(self) -> str | None:
        """ "connected", "away" (left within the grace period) or None once ended."""
        if self.status != self.Status.LIVE:
            return None
        return "away" if self.bot_left_at else "connected"

    @property
    def duration_seconds(self) -> float | None:
        end = self.ended_at or self.last_event_at
        return (end - self.started_at).total_seconds() if end else None


class Event(models.Model):
    """One RTVI message as received, valid or not, in the bot's order (seq)."""

    # Rows are written by rtvi_monitor.writer with one executemany per batch
    # (the ORM costs ~0.45 ms a row); keep the column list there in step.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    direction = models.CharField(max_length=12)  # "to-client" (bot sent it) or "from-client"
    type = models.CharField(max_length=64, blank=True)
    received_at = models.FloatField(help_text="Epoch seconds when the dashboard received it.")
    sent_at = models.FloatField(null=True, blank=True, help_text="Epoch seconds the bot stamped, if any.")
    message = models.TextField(help_text="The message as JSON, or the raw text when it was not JSON.")
    valid = models.BooleanField(default=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="event_seq_unique_in_session")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class ServerProcess(models.Model):
    """A server process that holds bot connections; it beats while it runs."""

    id = models.CharField(max_length=40, primary_key=True)
    host = models.CharField(max_length=200, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} ({self.id})"
