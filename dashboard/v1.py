"""The built-in agents API: Pipecat Cloud's `GET /v1/agents`, served from our models.

Teams that host their own bots (and the default install) point the dashboard's
agents service at this endpoint; it answers exactly as Pipecat Cloud does.
"""

from datetime import UTC, datetime

from dashboard.auth import bearer_token, json_error, json_methods
from dashboard.http import StrictJsonResponse
from dashboard.models import Agent, ApiKey, Deployment

BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


def bool_param(request, name: str) -> bool:
    """A true/false/1/0 query parameter (case-insensitive), false when absent.

    Raises ValueError with a message naming the parameter.
    """
    raw = request.GET.get(name, "false")
    value = BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise ValueError(f"{name} must be true or false, got {raw!r}.")
    return value


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
