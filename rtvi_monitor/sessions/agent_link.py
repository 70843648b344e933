"""Which agent a bot's session belongs to: the `?agent=` of its ingest URL, looked up once when it connects.

A bot names its agent by id or by name. The organization's built-in agents
(dashboard.models.Agent) are looked up in the database; otherwise the
organization's agent list as its agents API serves it (Pipecat Cloud, or any
upstream of the same contract, through the cached agents service). Either
way the session keeps the agents API's id of the agent (`Session.agent_key`),
its name, and its active deployment at that moment (`Session.deployment_id`),
so that pages link it to its agent and compare deployments whichever
upstream serves the list.
"""

import uuid
from dataclasses import dataclass

from channels.db import database_sync_to_async

from dashboard.agents import service as agents_service
from dashboard.agents.models import Agent


@dataclass(frozen=True)
class AgentLink:
    key: str  # the agent's id in the organization's agents API
    name: str
    deployment_id: str  # its active deployment when the bot connected; "" when unknown
    agent: Agent | None = None  # the built-in agent, when it is one
    region: str = ""  # where the agents API says it runs ("" when it does not say)


def as_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@database_sync_to_async
def _built_in(organization, given: str) -> AgentLink | None:
    agents = Agent.objects.filter(organization=organization)
    pk = as_uuid(given)
    agent = (agents.filter(pk=pk).first() if pk else None) or agents.filter(name=given).first()
    if agent is None:
        return None
    deployment = str(agent.active_deployment_id) if agent.active_deployment_id else ""
    return AgentLink(str(agent.pk), agent.name, deployment, agent)


def _storable(record) -> bool:
    """An id a session can keep and a page can link to (a path segment of at most 100 characters)."""
    return 0 < len(record.id) <= 100 and "/" not in record.id


def _fits(deployment_id: str | None) -> str:
    """The deployment id, or "" (unknown) rather than a cut one when it is too long to keep."""
    return deployment_id if deployment_id and len(deployment_id) <= 100 else ""


async def resolve(organization, given: str | None) -> tuple[AgentLink | None, str]:
    """The agent a bot named, and a warning for the bot when it names none of the organization's."""
    if not given:
        return None, ""
    given = given.strip()[:200]
    link = await _built_in(organization, given)
    if link is not None:
        return link, ""
    listing = await agents_service.get_agents(organization)
    record = listing.find(given) or next((a for a in listing.agents if a.name == given), None)
    if record is not None and _storable(record):
        link = AgentLink(record.id, record.name[:200], _fits(record.active_deployment_id), region=_fits(record.region))
        return link, ""
    why = f" (its agents API: {listing.error})" if listing.error and not listing.agents else ""
    return None, (
        f"agent {given[:100]!r} is not an agent of your organization{why}; the session is recorded without one"
    )
