"""An agent's page, put together: the platform's status, sessions and logs (cached, never raising), the
dashboard's own figures, deployments compared and turns, from the page's query. The view
(dashboard/views.py, `agent_detail`) finds the agent and renders what `context` answers.
"""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.utils import timezone

from dashboard import pipecat_cloud, platform_join
from rtvi_monitor.sessions import TURN_PERIODS, agent_overview, agent_turn_figures

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


async def _nothing():
    return None


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
    ours = await sync_to_async(_agent_figures)(
        organization, agent, sessions_page, sample, now, query.get("turns", "24h")
    )
    page = sessions_page.value
    more_sessions = page is not None and page.next_offset is not None
    more_logs = logs is not None and logs.value is not None and logs.value.next_offset is not None
    return {
        **ours,
        "params": params,
        "problems": problems,
        "choices": CHOICES,
        "status": status,
        "region": _region(agent, status.value),
        "sessions_page": sessions_page,
        "sample": sample,
        "logs": logs,
        "logs_hidden": not sees_contents,
        "window_days": platform_join.DEPLOYMENT_WINDOW.days,
        "turns_links": [(period, link(turns=period)) for period in TURN_PERIODS],
        "manifest_text": json.dumps(agent.deployment.manifest, indent=2, sort_keys=True) if agent.deployment else "",
        "sessions_next": link(so=params.sessions_offset + SESSIONS_PAGE) if more_sessions else "",
        "sessions_previous": link(so=max(0, params.sessions_offset - SESSIONS_PAGE)) if params.sessions_offset else "",
        "logs_next": link(lo=params.logs_offset + LOGS_PAGE) if more_logs else "",
        "logs_previous": link(lo=max(0, params.logs_offset - LOGS_PAGE)) if params.logs_offset else "",
    }
