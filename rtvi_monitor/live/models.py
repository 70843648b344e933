"""The live path's own records: the ingest tokens bots connect with, the server processes that held
sessions (a restart ends theirs), and the leases that let one process at a time do shared work.
"""

from django.db import models
from django.utils import timezone

from dashboard.org.models import Secret


class IngestToken(Secret):
    """Lets a bot stream its RTVI messages into the dashboard, for one organization."""

    PREFIX = "it_"

    class Meta:
        verbose_name = "ingest token"


class ServerProcess(models.Model):
    """A server process that holds bot connections; it beats while it runs."""

    id = models.CharField(max_length=40, primary_key=True)
    host = models.CharField(max_length=200, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} ({self.id})"


class Lease(models.Model):
    """A named lock in the shared database: one server process at a time does the work it names."""

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=40)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder} until {self.expires_at:%H:%M:%S}"
