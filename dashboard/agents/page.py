"""An agent's page, put together: the platform's status, sessions and logs (cached, never raising), the
dashboard's own figures, deployments compared and turns, from the page's query. The view
(dashboard/agents/views.py, `agent_detail`) finds the agent and renders what `context` answers.
"""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.utils import timezone

from dashboard.agents import pipecat_cloud
from dashboard.agents.pipecat_cloud import SESSION_STATUSES, START_TYPES
from dashboard.org.models import LatencyBudget
from dashboard.web.http import BadParam, Query, default_first
from rtvi_monitor.evals import gate as eval_gate
from rtvi_monitor.overview.figures import agent_overview, budget_status, day_start
from rtvi_monitor.sessions import platform_join
from rtvi_monitor.sessions.fleet import TURN_PERIODS, agent_turn_figures

SESSIONS_PAGE = 25  # the platform's sessions shown at a time on an agent's page
LOGS_PAGE = 100  # its log lines


@dataclass(frozen=True)
class AgentPageParams:
    """The agent page's filters, read strictly (dashboard.web.http.Query): a bad one is named on the page and
    left at its default."""

    status: str = "all"
    start: str = "all"
    deployment: str = ""
    sessions_offset: int = 0
    query: str = ""
    log_session: str = ""
    logs_offset: int = 0
    turns: str = "24h"
    region: str = ""  # the turn figures' region ("": every region)
    before: str = ""  # the deployments compared ("": the default pair, rtvi_monitor/sessions/fleet.py _pair)
    after: str = ""


# The platform's session filters, as its API takes them (dashboard/agents/pipecat_cloud.py), "all" first: the
# page's <select>s offer these, and a bad value is named with them.
CHOICES = {"status": default_first(SESSION_STATUSES, "all"), "start": default_first(START_TYPES, "all")}
MAX_OFFSET = 999_999  # of the platform's sessions and log lines paged through


def _agent_page_params(params) -> tuple[AgentPageParams, dict[str, str]]:
    """The page's filters, and what is wrong with the bad ones, by parameter."""
    query = Query(params)
    readers = {
        "status": lambda: query.choice("status", CHOICES["status"], default="all"),
        "start": lambda: query.choice("start", CHOICES["start"], default="all"),
        "deployment": lambda: query.text("deployment", 100),
        "sessions_offset": lambda: query.whole_number("so", 0, 0, MAX_OFFSET),
        "query": lambda: query.text("q"),
        "log_session": lambda: query.session_id("log_session"),
        "logs_offset": lambda: query.whole_number("lo", 0, 0, MAX_OFFSET),
        "turns": lambda: query.choice("turns", TURN_PERIODS, default="24h"),
        "region": lambda: query.text("region", 100),
        "before": lambda: query.text("before", 100),
        "after": lambda: query.text("after", 100),
    }
    values, problems = {}, {}
    for field_name, read in readers.items():
        try:
            values[field_name] = read()
        except BadParam as exc:  # the field keeps its default
            problems[exc.name] = str(exc)
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


def _agent_figures(organization, agent, sessions_page, sample, now, params: AgentPageParams) -> dict:
    """The dashboard's side of an agent's page: its own figures, deployments compared, which sessions it has,
    its turns over the period, region and deployments `params` ask for (rtvi_monitor/sessions/fleet.py)."""
    mine = next((e for e in agent_overview(organization, now) if e["agent_id"] == agent.id), None)
    platform_rows = sessions_page.value.sessions if sessions_page.value else []
    return {
        "figures": mine,
        "figures_since": day_start(now),  # where the figures' (and the Overview's) 24 hours begin
        "turn_figures": agent_turn_figures(
            organization,
            agent.id,
            params.turns,
            now,
            agent.active_deployment_id,
            region=params.region,
            before=params.before,
            after=params.after,
        ),
        "deployments": platform_join.deployments(
            organization,
            agent.id,
            sample.value.sessions if sample.value else [],
            agent.active_deployment_id,
            now,
        ),
        "monitored": platform_join.monitored_ids(organization, [s.session_id for s in platform_rows]),
    }


async def _nothing():
    return None


def _budget(organization, agent_id: str, now) -> dict:
    """The agent's latency budget, as set and as it stands (rtvi_monitor/overview/figures.py budget_status)."""
    budget = LatencyBudget.objects.filter(organization=organization, agent_id=agent_id).first()
    if budget is None:
        return {"set": None, "status": None, "p95_s": "", "parts_text": ""}
    return {
        "set": budget,
        "status": budget_status(organization, budget, now),
        "p95_s": f"{budget.p95_ms / 1000:g}",
        "parts_text": "\n".join(f"{key} = {ms / 1000:g}" for key, ms in budget.parts.items()),
    }


async def context(organization, agent, query, sees_contents: bool, link: Callable[..., str]) -> dict:
    """What the agent page shows of `agent` for the query `query` (a QueryDict); `link(**changes)` is the
    page's own address with those parameters changed. Every upstream answer comes through the cached
    services: none keeps the page waiting past AGENTS_PAGE_WAIT."""
    params, problems = _agent_page_params(query)
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
        if sees_contents  # a bot's log lines may quote its callers: not for viewers
        else _nothing(),
    )
    ours = await sync_to_async(_agent_figures)(organization, agent, sessions_page, sample, now, params)
    # A bad period is named beside the turns it left at 24 hours, the other bad filters at the top.
    ours["turn_figures"]["problem"] = problems.pop("turns", None)
    ours["budget"] = await sync_to_async(_budget)(organization, agent.id, now)
    ours["eval_gate"] = await sync_to_async(eval_gate.overview)(
        organization, agent.id, agent.active_deployment_id or ""
    )
    page = sessions_page.value
    more_sessions = page is not None and page.next_offset is not None
    more_logs = logs is not None and logs.value is not None and logs.value.next_offset is not None
    return {
        **ours,
        "params": params,
        "problems": list(problems.values()),
        "choices": CHOICES,
        "status": status,
        "region": _region(agent, status.value),
        "sessions_page": sessions_page,
        "sample": sample,
        "logs": logs,
        "logs_hidden": not sees_contents,
        "window_days": platform_join.DEPLOYMENT_WINDOW.days,
        "turns_links": [(period, link(turns=period)) for period in TURN_PERIODS],
        "region_links": [("", link(region=None))]
        + [(region, link(region=region)) for region in ours["turn_figures"]["regions"]],
        "manifest_text": json.dumps(agent.deployment.manifest, indent=2, sort_keys=True) if agent.deployment else "",
        "sessions_next": link(so=params.sessions_offset + SESSIONS_PAGE) if more_sessions else "",
        "sessions_previous": link(so=max(0, params.sessions_offset - SESSIONS_PAGE)) if params.sessions_offset else "",
        "logs_next": link(lo=params.logs_offset + LOGS_PAGE) if more_logs else "",
        "logs_previous": link(lo=max(0, params.logs_offset - LOGS_PAGE)) if params.logs_offset else "",
    }
