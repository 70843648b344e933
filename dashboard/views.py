"""Pages of the agents side. Each view: decorators, one service call, render."""

import json
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard import agents as agents_service
from dashboard.auth import aorganization_of, staff_required
from rtvi_monitor.models import Alert
from rtvi_monitor.sessions import agent_stats, overview


@dataclass(frozen=True)
class AgentRow:
    """An agent from the agents API with what the dashboard knows of its sessions."""

    agent: agents_service.AgentRecord
    stats: dict


# Templates read request.user and messages lazily, through the ORM: render in
# a thread so that async views can use them.
arender = sync_to_async(render)


def _wants_deployments(request) -> bool:
    return request.GET.get("deployments", "") in ("1", "true", "on")


async def _organization_or_none(request):
    return await aorganization_of(await request.auser())


async def _overview_context(request) -> dict | None:
    organization = await _organization_or_none(request)
    if organization is None:
        return None
    summary = await sync_to_async(overview)(organization, timezone.now())
    listing = await agents_service.get_agents(organization)
    for agent in summary["agents"]:
        agent["name"] = agent["name"] or listing.name_of(agent["agent_id"])
    names = {agent["agent_id"]: agent["name"] for agent in summary["agents"]}
    for group in summary["error_groups"]:
        if group.agent_id:
            group.agent_name = names.get(group.agent_id) or listing.name_of(group.agent_id)
    firing = await sync_to_async(list)(
        Alert.objects.filter(organization=organization, status=Alert.Status.FIRING).select_related("rule")
    )
    return {
        "organization": organization,
        "summary": summary,
        "listing": listing,
        "firing": firing,
        "generated_at": timezone.now(),
    }


@require_GET
@staff_required
async def home(request):
    """Is anything wrong right now? Alerts, error groups, sessions that ended badly, every agent, the agents API."""
    context = await _overview_context(request)
    if context is None:
        return redirect("session_list")
    return await arender(request, "dashboard/home.html", context)


@require_GET
@staff_required
async def overview_panel(request):
    """The Overview's content alone: what its page fetches when the session socket says something changed."""
    context = await _overview_context(request)
    if context is None:
        raise Http404("Your account belongs to no organization.")
    return await arender(request, "dashboard/_overview.html", context)


@require_GET
@staff_required
async def agent_list(request):
    organization = await _organization_or_none(request)
    include = _wants_deployments(request)
    listing = await agents_service.get_agents(organization, include) if organization else None
    query = request.GET.get("q", "").strip()
    stats = await sync_to_async(agent_stats)(organization, timezone.now() - timedelta(days=1)) if organization else {}
    agents = [AgentRow(agent, stats.get(agent.id, {})) for agent in (listing.search(query) if listing else [])]
    return await arender(
        request,
        "dashboard/agent_list.html",
        {"organization": organization, "listing": listing, "agents": agents, "query": query, "include": include},
    )


@require_GET
@staff_required
async def agent_detail(request, agent_id):
    organization = await _organization_or_none(request)
    if organization is None:
        raise Http404("Your account belongs to no organization.")
    listing = await agents_service.get_agents(organization, include_deployment=True)
    agent = listing.find(str(agent_id))
    if agent is None and not listing.error:
        raise Http404("No agent with that id in your organization.")
    manifest_text = (
        json.dumps(agent.deployment.manifest, indent=2, sort_keys=True) if agent and agent.deployment else ""
    )
    return await arender(
        request, "dashboard/agent_detail.html", {"listing": listing, "agent": agent, "manifest_text": manifest_text}
    )


@require_POST
@staff_required
async def agent_refresh(request):
    organization = await _organization_or_none(request)
    include = _wants_deployments(request)
    if organization:
        await agents_service.get_agents(organization, include, refresh=True)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("agent_list")
    return redirect(target)
