"""The agents side's models, for Django's registry: each is defined in, and imported from, its package.

org/models.py: organizations, members, invitations, keys, prices, retention, the audit log;
agents/models.py: the built-in agents API's agents and deployments.
"""

from dashboard.agents.models import Agent, Deployment
from dashboard.org.models import (
    AgentRetention,
    ApiKey,
    AuditEntry,
    Invitation,
    LatencyBudget,
    Membership,
    Organization,
    Price,
)

__all__ = [
    "Agent",
    "AgentRetention",
    "ApiKey",
    "AuditEntry",
    "Deployment",
    "Invitation",
    "LatencyBudget",
    "Membership",
    "Organization",
    "Price",
]
