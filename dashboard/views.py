"""Pages of the agents side: decorators, the agents services' calls (cached, never raising), the dashboard's
own figures, render."""

import asyncio
import json
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard import agents as agents_service
from dashboard import pipecat_cloud, platform_join
from dashboard.auth import member_required
from rtvi_monitor.models import Alert
from rtvi_monitor.sessions import TURN_PERIODS, agent_overview, agent_turn_figures, overview


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


async def _overview_context(request) -> dict | None:
    organization = request.organization
    if organization is None:
        return None
    # Cached and never raising, as on the agents page: the last good list (with its age) when the upstream
    # fails, and none at all (the agents known from sessions alone) when there has never been one.
    listing = await agents_service.get_agents(organization)
    listed = listing.agents if listing.fetched_at is not None else None
    summary = await sync_to_async(overview)(organization, timezone.now(), listed)
    for group in summary["error_groups"]:
        known = listing.find(group.agent_id) if group.agent_id else None
        group.agent_name = known.name if known else group.agent_name
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
@member_required
async def home(request):
    """Is anything wrong right now? Alerts, error groups, sessions that ended badly, every agent, the agents API."""
    context = await _overview_context(request)
    if context is None:
        return redirect("session_list")
    return await arender(request, "dashboard/home.html", context)


@require_GET
@member_required
async def overview_panel(request):
    """The Overview's content alone: what its page fetches when the session socket says something changed."""
    context = await _overview_context(request)
    if context is None:
        raise Http404("Your account belongs to no organization.")
    return await arender(request, "dashboard/_overview.html", context)


@require_GET
@member_required
async def agent_list(request):
    organization = request.organization
    include = _wants_deployments(request)
    listing = await agents_service.get_agents(organization, include) if organization else None
    query = request.GET.get("q", "").strip()
    figures = await sync_to_async(agent_overview)(organization, timezone.now()) if organization else []
    stats = {entry["agent_id"]: entry for entry in figures}
    agents = [AgentRow(agent, stats.get(agent.id, {})) for agent in (listing.search(query) if listing else [])]
    return await arender(
        request,
        "dashboard/agent_list.html",
        {"organization": organization, "listing": listing, "agents": agents, "query": query, "include": include},
    )


SESSIONS_PAGE = 25  # the platform's sessions shown at a time on an agent's page
LOGS_PAGE = 100  # its log lines


@dataclass(frozen=True)
class AgentPageParams:
    """The agent page's filters, read strictly: a bad one is named on the page and left at its default."""

    status: str = "all"
    start: str = "all"
    deployment: str = ""
    sessions_offset: int = 0
    query: str = ""
    log_session: str = ""
    logs_offset: int = 0


CHOICES = {"status": ("all", "active", "ended"), "start": ("all", "cold", "warm")}


def _agent_page_params(params) -> tuple[AgentPageParams, list[str]]:
    values, problems = {}, []
    for name, choices in CHOICES.items():
        raw = params.get(name, "all")
        if raw in choices:
            values[name] = raw
        else:
            problems.append(f"{name}: expected one of {', '.join(choices)}, got {raw[:40]!r}")
    for name, field_name in (("so", "sessions_offset"), ("lo", "logs_offset")):
        raw = params.get(name, "0") or "0"
        if raw.isascii() and raw.isdigit() and len(raw) < 7:
            values[field_name] = int(raw)
        else:
            problems.append(f"{name}: expected a whole number under 1,000,000, got {raw[:40]!r}")
    for name, field_name, limit in (
        ("deployment", "deployment", 100),
        ("q", "query", 200),
        ("log_session", "log_session", 100),
    ):
        raw = params.get(name, "").strip()
        if len(raw) > limit:
            problems.append(f"{name}: at most {limit} characters")
        else:
            values[field_name] = raw
    return AgentPageParams(**values), problems


def _region(agent, status) -> str:
    """Where the agent runs: the platform's status, else the agent record, else its deployment's manifest."""
    if status and status.region:
        return status.region
    if agent.region:
        return agent.region
    manifest = agent.deployment.manifest if agent.deployment else {}
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    region = manifest.get("region") or spec.get("region")
    return region if isinstance(region, str) else ""


def _agent_figures(organization, agent, sessions_page, sample, now, turns_period: str = "24h") -> dict:
    """The dashboard's side of an agent's page: its own figures, deployments compared, which sessions it has,
    its turns over `turns_period` (rtvi_monitor/turns.py)."""
    mine = next((e for e in agent_overview(organization, now) if e["agent_id"] == agent.id), None)
    platform_rows = sessions_page.value.sessions if sessions_page.value else []
    return {
        "figures": mine,
        "turn_figures": agent_turn_figures(organization, agent.id, turns_period, now, agent.active_deployment_id),
        "deployments": platform_join.deployments(
            organization,
            agent.id,
            sample.value.sessions if sample.value else [],
            agent.active_deployment_id,
            now,
        ),
        "monitored": platform_join.monitored_ids(organization, [s.session_id for s in platform_rows]),
    }


def _page_link(request, **changes) -> str:
    params = request.GET.copy()
    for name, value in changes.items():
        if value:
            params[name] = value
        else:
            params.pop(name, None)
    return f"?{params.urlencode()}"


async def _nothing():
    return None


@require_GET
@member_required
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
        params, problems = _agent_page_params(request.GET)
        now = timezone.now()
        status, sessions_page, sample, logs = await asyncio.gather(
            pipecat_cloud.get_agent_status(organization, agent.name),
            pipecat_cloud.get_platform_sessions(
                organization,
                agent.name,
                limit=SESSIONS_PAGE,
                offset=params.sessions_offset,
                status=params.status,
                start_type=params.start,
                deployment_id=params.deployment or None,
            ),
            # The newest sessions, whatever the time: one cache key, so an outage shows the last good
            # sample (deployments() keeps those of its window).
            pipecat_cloud.get_platform_sessions(organization, agent.name, limit=platform_join.PLATFORM_SAMPLE),
            pipecat_cloud.get_logs(
                organization,
                agent.name,
                limit=LOGS_PAGE,
                offset=params.logs_offset,
                query=params.query or None,
                session_id=params.log_session or None,
            )
            if request.sees_contents  # a bot's log lines may quote its callers: not for viewers
            else _nothing(),
        )
        ours = await sync_to_async(_agent_figures)(
            organization, agent, sessions_page, sample, now, request.GET.get("turns", "24h")
        )
        page = sessions_page.value
        more_sessions = page is not None and page.next_offset is not None
        more_logs = logs is not None and logs.value is not None and logs.value.next_offset is not None
        context.update(
            ours,
            params=params,
            problems=problems,
            choices=CHOICES,
            status=status,
            region=_region(agent, status.value),
            sessions_page=sessions_page,
            sample=sample,
            logs=logs,
            logs_hidden=not request.sees_contents,
            window_days=platform_join.DEPLOYMENT_WINDOW.days,
            turns_links=[(period, _page_link(request, turns=period)) for period in TURN_PERIODS],
            manifest_text=json.dumps(agent.deployment.manifest, indent=2, sort_keys=True) if agent.deployment else "",
            sessions_next=_page_link(request, so=params.sessions_offset + SESSIONS_PAGE) if more_sessions else "",
            sessions_previous=_page_link(request, so=max(0, params.sessions_offset - SESSIONS_PAGE))
            if params.sessions_offset
            else "",
            logs_next=_page_link(request, lo=params.logs_offset + LOGS_PAGE) if more_logs else "",
            logs_previous=_page_link(request, lo=max(0, params.logs_offset - LOGS_PAGE)) if params.logs_offset else "",
        )
    return await arender(request, "dashboard/agent_detail.html", context)


@require_POST
@member_required
async def agent_refresh(request):
    organization = request.organization
    include = _wants_deployments(request)
    if organization:
        await agents_service.get_agents(organization, include, refresh=True)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("agent_list")
    return redirect(target)
