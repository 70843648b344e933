"""The agents side's JSON: the built-in agents API (`GET /v1/agents`, as Pipecat Cloud answers it,
served from our models) and `GET /api/agents/` (the cached list the dashboard fetched, for scripts).

Teams that host their own bots (and the default install) point the dashboard's
agents service at this endpoint; it answers exactly as Pipecat Cloud does.
"""

from datetime import UTC, datetime

from dashboard import agents as agents_service
from dashboard.agents import AgentRecord, DeploymentRecord
from dashboard.auth import bearer_token, key_or_member_required
from dashboard.http import StrictJsonResponse, bool_param, json_error, json_methods
from dashboard.models import Agent, ApiKey


def iso_ms(dt: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and Z, the spec's timestamp format."""
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def record_of(agent: Agent, include_deployment: bool) -> AgentRecord:
    """One of our agents as the agents client's typed record: the built-in API serves what it reads."""
    deployment = agent.active_deployment if include_deployment else None
    return AgentRecord(
        id=str(agent.id),
        name=agent.name,
        active_deployment_id=str(agent.active_deployment_id) if agent.active_deployment_id else None,
        organization_id=str(agent.organization_id),
        created_at=agent.created_at,
        updated_at=agent.updated_at,
        deleted_at=agent.deleted_at,
        deployment=DeploymentRecord(
            id=str(deployment.id),
            service_id=str(deployment.agent_id),
            manifest=deployment.manifest,
            created_at=deployment.created_at,
            updated_at=deployment.updated_at,
        )
        if deployment
        else None,
    )


def agent_json(agent: AgentRecord, include_deployment: bool) -> dict:
    """An agent in Pipecat Cloud's shape (camelCase, ISO 8601 times with milliseconds and Z)."""
    record = {
        "id": agent.id,
        "name": agent.name,
        "activeDeploymentId": agent.active_deployment_id,
        "organizationId": agent.organization_id,
        "createdAt": iso_ms(agent.created_at),
        "updatedAt": iso_ms(agent.updated_at),
        "deletedAt": iso_ms(agent.deleted_at),
    }
    if include_deployment:
        deployment = agent.deployment
        record["deployment"] = (
            {
                "id": deployment.id,
                "serviceId": deployment.service_id,
                "manifest": deployment.manifest,
                "createdAt": iso_ms(deployment.created_at),
                "updatedAt": iso_ms(deployment.updated_at),
            }
            if deployment
            else None
        )
    return record


@json_methods("GET")
def agents(request):
    """GET /v1/agents: the key's organization's agents, as `{"services": [...]}`."""
    token = bearer_token(request)
    if not token:
        return json_error("Missing 'Authorization: Bearer <private API key>' header.", 401)
    key = ApiKey.objects.find(token)
    if key is None:
        return json_error("Unknown, revoked or expired API key.", 401)
    if not key.allows("read"):
        return json_error(f"This API key's scopes are {key.scopes!r}; GET needs 'read'.", 403)

    try:
        include = bool_param(request, "includeActiveDeployment")
    except ValueError as exc:
        return json_error(str(exc), 400)

    key.touch()
    queryset = Agent.objects.filter(organization=key.organization).order_by("created_at", "id")
    if include:
        queryset = queryset.select_related("active_deployment")
    return StrictJsonResponse({"services": [agent_json(record_of(a, include), include) for a in queryset]})


@json_methods("GET")
@key_or_member_required
async def agents_json(request):
    """GET /api/agents/: the cached list for scripts, with its age and any upstream error."""
    try:
        include = bool_param(request, "includeActiveDeployment")
        refresh = bool_param(request, "refresh")
    except ValueError as exc:
        return json_error(str(exc), 400)
    listing = await agents_service.get_agents(request.organization, include, refresh=refresh)
    return StrictJsonResponse(
        {
            "agents": [{**agent_json(a, include), "status": a.status, "region": a.region} for a in listing.agents],
            **listing.freshness_json(),
        }
    )
