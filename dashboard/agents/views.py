"""Pages of the agents side: decorators, the agents services' calls (cached, never raising), the dashboard's
own figures, render."""

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.exceptions import BadRequest
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard.access.auth import member_required
from dashboard.agents import page as agent_page
from dashboard.agents import service as agents_service
from dashboard.web.http import BadParam, Query, arender
from rtvi_monitor.overview.figures import agent_overview


@dataclass(frozen=True)
class AgentRow:
    """An agent from the agents API with what the dashboard knows of its sessions."""

    agent: agents_service.AgentRecord
    stats: dict


def _wants_deployments(request) -> bool:
    """Whether the agents page lists each agent's deployment (?deployments=1, its checkbox); a bad value is a 400."""
    try:
        return Query(request.GET).boolean("deployments", default=False)
    except BadParam as exc:
        raise BadRequest(str(exc)) from None


@require_GET
@member_required("agents.read")
async def agent_list(request):
    organization = request.organization
    include = _wants_deployments(request)
    listing = await agents_service.get_agents(organization, include) if organization else None
    try:
        query = Query(request.GET).text("q")
    except BadParam as exc:
        raise BadRequest(str(exc)) from None
    figures = await sync_to_async(agent_overview)(organization, timezone.now()) if organization else []
    stats = {entry["agent_id"]: entry for entry in figures}
    agents = [AgentRow(agent, stats.get(agent.id, {})) for agent in (listing.search(query) if listing else [])]
    return await arender(
        request,
        "agents/agent_list.html",
        {"organization": organization, "listing": listing, "agents": agents, "query": query, "include": include},
    )


def _page_link(request, **changes) -> str:
    params = request.GET.copy()
    for name, value in changes.items():
        if value:
            params[name] = value
        else:
            params.pop(name, None)
    return f"?{params.urlencode()}"


@require_GET
@member_required("agents.read")
async def agent_detail(request, agent_id):
    """One agent: its status, the dashboard's figures, deployments side by side, the platform's sessions and logs.

    Every upstream answer comes through the cached agents service: none of
    them can keep the page waiting past AGENTS_PAGE_WAIT, and a failing one
    shows its last good answer with its age, or says what went wrong.
    """
    organization = request.organization
    if organization is None:
        raise Http404("Your account belongs to no organization.")
    listing = await agents_service.get_agents(organization, include_deployment=True)
    agent = listing.find(str(agent_id))
    if agent is None and not listing.error:
        raise Http404("No agent with that id in your organization.")
    context = {"listing": listing, "agent": agent}
    if agent is not None:
        context.update(
            await agent_page.context(
                organization,
                agent,
                request.GET,
                request.sees_contents,
                lambda **changes: _page_link(request, **changes),
            )
        )
    # Not in the list (which could not be fetched): the page says why, as a 404 (not this organization's, as far
    # as anybody knows).
    return await arender(request, "agents/agent_detail.html", context, status=404 if agent is None else 200)


@require_POST
@member_required("agents.read")
async def agent_refresh(request):
    organization = request.organization
    include = _wants_deployments(request)
    if organization:
        await agents_service.get_agents(organization, include, refresh=True)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("agent_list")
    return redirect(target)
