"""The agents side's own JSON: `GET /api/agents/`, the cached list the dashboard fetched (for scripts).

The built-in agents API that the default install reads (`/v1/agents...`, as Pipecat Cloud answers it)
is dashboard/agents/builtin_api.py.
"""

from dashboard.access.auth import key_or_member_required
from dashboard.agents import service as agents_service
from dashboard.agents.builtin_api import agent_json
from dashboard.web.http import StrictJsonResponse, bool_param, json_error, json_methods


@json_methods("GET")
@key_or_member_required("agents.read")
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
