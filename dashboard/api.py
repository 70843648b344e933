"""The agents side's JSON: the built-in agents API (`GET /v1/agents`, as Pipecat Cloud answers it,
served from our models) and `GET /api/agents/` (the cached list the dashboard fetched, for scripts).

Teams that host their own bots (and the default install) point the dashboard's
agents service at this endpoint; it answers exactly as Pipecat Cloud does.
"""

from datetime import UTC, datetime

from dashboard import agents as agents_service
from dashboard.auth import bearer_token, key_or_staff_required
from dashboard.http import StrictJsonResponse, bool_param, json_error, json_methods
from dashboard.models import Agent, ApiKey, Deployment


def iso_ms(dt: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and Z, the spec's timestamp format."""
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def deployment_record(deployment: Deployment) -> dict:
    return {
        "id": str(deployment.id),
        "serviceId": str(deployment.agent_id),
        "manifest": deployment.manifest,
        "createdAt": iso_ms(deployment.created_at),
        "updatedAt": iso_ms(deployment.updated_at),
    }


def agent_record(agent: Agent, include_deployment: bool) -> dict:
    record = {
        "id": str(agent.id),
        "name": agent.name,
        "activeDeploymentId": str(agent.active_deployment_id) if agent.active_deployment_id else None,
        "organizationId": str(agent.organization_id),
        "createdAt": iso_ms(agent.created_at),
        "updatedAt": iso_ms(agent.updated_at),
        "deletedAt": iso_ms(agent.deleted_at),
    }
    if include_deployment:
        deployment = agent.active_deployment
        record["deployment"] = deployment_record(deployment) if deployment else None
    return record


@json_methods("GET")
def agents(request):
    """GET /v1/agents: the key's organization's agents, as `{"services": [...]}`."""
    token = bearer_token(request)
    if not token:
        return json_error("Missing 'Authorization: Bearer <private API key>' header.", 401)
    key = ApiKey.objects.find(token)
    if key is None:
        return json_error("Unknown or revoked API key.", 401)

    try:
        include = bool_param(request, "includeActiveDeployment")
    except ValueError as exc:
        return json_error(str(exc), 400)

    key.touch()
    queryset = Agent.objects.filter(organization=key.organization).order_by("created_at", "id")
    if include:
        queryset = queryset.select_related("active_deployment")
    return StrictJsonResponse({"services": [agent_record(a, include) for a in queryset]})


def _agent_json(agent: agents_service.AgentRecord) -> dict:
    return {
        "id": agent.id,
        "name": agent.name,
        "status": agent.status,
        "activeDeploymentId": agent.active_deployment_id,
        "organizationId": agent.organization_id,
        "region": agent.region,
        "createdAt": agent.created_at.isoformat() if agent.created_at else None,
        "updatedAt": agent.updated_at.isoformat() if agent.updated_at else None,
        "deletedAt": agent.deleted_at.isoformat() if agent.deleted_at else None,
        "deployment": (
            {
                "id": agent.deployment.id,
                "serviceId": agent.deployment.service_id,
                "manifest": agent.deployment.manifest,
                "createdAt": agent.deployment.created_at.isoformat() if agent.deployment.created_at else None,
                "updatedAt": agent.deployment.updated_at.isoformat() if agent.deployment.updated_at else None,
            }
            if agent.deployment
            else None
        ),
    }


@json_methods("GET")
@key_or_staff_required
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
            "agents": [_agent_json(a) for a in listing.agents],
            "fetchedAt": listing.fetched_datetime.isoformat() if listing.fetched_at else None,
            "ageSeconds": round(listing.age_seconds, 3) if listing.fetched_at else None,
            "stale": listing.stale,
            "error": listing.error or None,
        }
    )
