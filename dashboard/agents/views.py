"""Pages of the agents side: decorators, the agents services' calls (cached, never raising), the dashboard's
own figures, render."""

import re
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.contrib import messages
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
from dashboard.org import audit
from dashboard.org.models import AuditEntry, LatencyBudget
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


BUDGET_PART = re.compile(r"^\s*([A-Za-z0-9_.:-]{1,64})\s*=\s*([0-9]+(?:\.[0-9]+)?)\s*$")
MAX_BUDGET_SECONDS = 600


def budget_from(form) -> tuple[float | None, dict, list[str]]:
    """A latency budget's p95 (ms) and parts ({key: ms}) as the agent page's form typed them (seconds), and what is
    wrong with them."""
    errors: list[str] = []
    p95 = None
    try:
        seconds = float(form.get("p95", "").strip())
        if not 0.001 <= seconds <= MAX_BUDGET_SECONDS:
            raise ValueError
        p95 = round(seconds * 1000, 3)
    except ValueError:
        errors.append(f"The p95 budget must be a number of seconds from 0.001 to {MAX_BUDGET_SECONDS}.")
    parts = {}
    for number, line in enumerate(form.get("parts", "").splitlines()[:100], 1):
        if not line.strip():
            continue
        found = BUDGET_PART.match(line)
        if not found or not 0.001 <= float(found[2]) <= MAX_BUDGET_SECONDS:
            errors.append(f"Part line {number}: write it as <part key> = <seconds>, e.g. llm_inference = 0.6.")
            continue
        parts[found[1]] = round(float(found[2]) * 1000, 3)
    return p95, parts, errors


@require_POST
@member_required("org.settings")
def agent_budget(request, agent_id):
    """POST /agents/<agent_id>/budget/: the agent's latency budget (admins), or `delete`; in the audit log."""
    organization = request.organization
    target = reverse("agent_detail", args=[agent_id]) + "#h-budget"
    if request.POST.get("delete"):
        deleted, _ = LatencyBudget.objects.filter(organization=organization, agent_id=agent_id).delete()
        if deleted:
            audit.record(
                organization,
                AuditEntry.Action.SETTINGS_CHANGED,
                f"latency budget of {agent_id}",
                request=request,
                removed=True,
            )
        return redirect(target)
    p95, parts, errors = budget_from(request.POST)
    if errors:
        for error in errors:
            messages.error(request, error)
        return redirect(target)
    LatencyBudget.objects.update_or_create(
        organization=organization,
        agent_id=agent_id[:200],
        defaults={"agent_name": request.POST.get("agent_name", "")[:200], "p95_ms": p95, "parts": parts},
    )
    audit.record(
        organization,
        AuditEntry.Action.SETTINGS_CHANGED,
        f"latency budget of {agent_id}",
        request=request,
        p95_ms=p95,
        parts=len(parts),
    )
    messages.success(request, "Latency budget saved.")
    return redirect(target)
