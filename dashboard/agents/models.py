"""The built-in agents API's agents and their deployments (the contract Pipecat Cloud serves at
`/v1/agents`), for teams that host their own bots.
"""

import uuid

from django.db import models
from django.utils import timezone

from dashboard.org.models import Organization


class Agent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    active_deployment = models.ForeignKey(
        "Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="agent_name_unique_in_org")]

    def __str__(self) -> str:
        return self.name


class Deployment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="deployments")
    image = models.CharField(max_length=300, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent.name} @ {self.image or self.id}"
