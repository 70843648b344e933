"""The agents service: an organization's agents from its agents API, cached.

The upstream is Pipecat Cloud's `GET /v1/agents` or the dashboard's own built-in copy of it
(dashboard/agents/builtin_api.py); both speak the same contract. `fetch_agents` makes the call through
dashboard/agents/upstream.py's `fetch_json` (retries, deadline, one AgentsAPIError whose message tells an
operator what to do); pages call `get_agents`, which serves from the cache layer there (`cached`): one
upstream call per TTL however many requests arrive at once, the last good list when the upstream fails,
and never a page kept waiting on the upstream for more than AGENTS_PAGE_WAIT.
"""

import functools
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache

from dashboard.agents.upstream import CacheSpec, Freshness, ShapeError, cache_keys, cached, fetch_json, field, timestamp


@dataclass(frozen=True)
class DeploymentRecord:
    id: str
    service_id: str
    manifest: dict
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def image(self) -> str:
        """The container image, wherever the manifest keeps it."""
        spec = self.manifest.get("spec")
        image = (spec.get("image") if isinstance(spec, dict) else None) or self.manifest.get("image")
        return image if isinstance(image, str) else ""


@dataclass(frozen=True)
class AgentRecord:
    id: str
    name: str
    active_deployment_id: str | None
    organization_id: str
    created_at: datetime | None
    updated_at: datetime | None
    deleted_at: datetime | None
    region: str = ""
    deployment: DeploymentRecord | None = None

    @property
    def status(self) -> str:
        return "deleted" if self.deleted_at else "active"


@dataclass(frozen=True)
class AgentList(Freshness):
    """What a page shows: the agents, when they were fetched, and any error since."""

    agents: list[AgentRecord]
    fetched_at: float | None  # epoch seconds of the last successful fetch
    error: str = ""  # the latest failure, when the list is stale or missing
    from_cache: bool = False
    include_deployment: bool = False

    def search(self, query: str) -> list[AgentRecord]:
        """The agents whose name or id contains `query` (any case); all of them for an empty query."""
        needle = query.strip().lower()
        return [a for a in self.agents if needle in a.name.lower() or needle in a.id] if needle else list(self.agents)

    def find(self, agent_id: str) -> AgentRecord | None:
        return next((agent for agent in self.agents if agent.id == agent_id), None)


# --- Parsing ---------------------------------------------------------------


def parse_deployment(obj: Any, where: str) -> DeploymentRecord | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ShapeError(f"{where}: expected an object, got {type(obj).__name__}")
    manifest = obj.get("manifest")
    return DeploymentRecord(
        id=field(obj, "id", (str,), where),
        service_id=str(obj.get("serviceId") or ""),
        manifest=manifest if isinstance(manifest, dict) else {},
        created_at=timestamp(obj, "createdAt", where),
        updated_at=timestamp(obj, "updatedAt", where),
    )


def parse_agents(body: Any) -> list[AgentRecord]:
    """Validate an agents API body into records; extra fields are ignored (the API grows)."""
    if not isinstance(body, dict):
        raise ShapeError(f"expected a JSON object with 'services', got {type(body).__name__}")
    services = body.get("services")
    if not isinstance(services, list):
        raise ShapeError("'services' is missing or not a list")
    agents = []
    for i, obj in enumerate(services):
        where = f"services[{i}]"
        if not isinstance(obj, dict):
            raise ShapeError(f"{where}: expected an object, got {type(obj).__name__}")
        agents.append(
            AgentRecord(
                id=field(obj, "id", (str,), where),
                name=field(obj, "name", (str,), where),
                active_deployment_id=field(obj, "activeDeploymentId", (str,), where, nullable=True),
                organization_id=field(obj, "organizationId", (str,), where),
                created_at=timestamp(obj, "createdAt", where),
                updated_at=timestamp(obj, "updatedAt", where),
                deleted_at=timestamp(obj, "deletedAt", where),
                region=str(obj.get("region") or ""),
                deployment=parse_deployment(obj.get("deployment"), f"{where}.deployment"),
            )
        )
    return agents


# --- Fetching --------------------------------------------------------------


async def fetch_agents(base_url: str, api_key: str, include_deployment: bool = False) -> list[AgentRecord]:
    """One call to `GET {base_url}/agents` (see fetch_json: retries, deadline, one AgentsAPIError)."""
    params = {"includeActiveDeployment": "true"} if include_deployment else {}
    return await fetch_json(base_url, api_key, "/agents", parse_agents, params)


def _keys(organization_id: str, include_deployment: bool) -> dict[str, str]:
    return cache_keys(f"agents:{organization_id}:{int(include_deployment)}")


# --- The agent list --------------------------------------------------------


def _from_entry(entry: dict, **kwargs) -> AgentList:
    agents = []
    for a in entry["agents"]:
        deployment = DeploymentRecord(**a["deployment"]) if a.get("deployment") else None
        agents.append(AgentRecord(**{**a, "deployment": deployment}))
    return AgentList(agents=agents, fetched_at=entry["fetched_at"], **kwargs)


async def _fetch_payload(organization, include_deployment: bool) -> dict:
    base_url, api_key = organization.agents_api
    agents = await fetch_agents(base_url, api_key, include_deployment)
    return {"agents": [asdict(a) for a in agents]}


def _agents_ttl(payload: dict) -> float:
    return settings.AGENTS_CACHE_TTL


async def failing_since(organization) -> tuple[float, str] | None:
    """When the organization's agents API started failing (epoch seconds) and its latest error; None if it is not.

    Asks the upstream when the cached answer is due (get_agents), so a
    failure is noticed even while nobody has a page open.
    """
    listing = await get_agents(organization)
    if not listing.error:
        return None
    failure = await cache.aget(_keys(str(organization.pk), False)["failure"])
    if failure is None:
        return None  # slow to answer a page, not failing
    return failure.get("since", failure["at"]), failure["error"]


async def get_agents(organization, include_deployment: bool = False, refresh: bool = False) -> AgentList:
    """The organization's agents: cached, never raising, and never slow however slow the upstream.

    Served by `cached` (see there: AGENTS_CACHE_TTL, stale-on-error,
    failure back-off, AGENTS_PAGE_WAIT, one fetch at a time); with no list
    to show, an empty one with the error.
    """
    spec = CacheSpec(
        keys=_keys(str(organization.pk), include_deployment),
        fetch=functools.partial(_fetch_payload, organization, include_deployment),
        fresh_ttl=_agents_ttl,
    )
    found = await cached(spec, refresh)
    if found.entry is None:
        return AgentList(agents=[], fetched_at=None, error=found.error, include_deployment=include_deployment)
    return _from_entry(
        found.entry, error=found.error, from_cache=found.from_cache, include_deployment=include_deployment
    )
