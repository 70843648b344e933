"""The Overview: the home page that answers "is anything wrong right now?" (firing alerts, error groups,
sessions that ended badly, every agent's health, the agents API's freshness), and its panel, which the
page fetches again when the session socket says something changed.
"""

import asyncio
import time

from asgiref.sync import sync_to_async
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access.auth import member_required
from dashboard.agents import service as agents_service
from dashboard.web.http import arender
from rtvi_monitor.alerts import actions as alert_actions
from rtvi_monitor.alerts.models import Alert
from rtvi_monitor.live import relay
from rtvi_monitor.overview.figures import overview

# One computation of an organization's figures serves every Overview of it that asks while it runs or after
# it, until the next change ping (live/relay.py ChangePings: every open Overview of the organization is
# pinged at once, and each fetches): a page that fetches after a ping never gets figures computed before
# that ping, so nothing it was told of is missing. Never reused longer than SHARE_SECONDS either, for what
# changes with time alone. Per process and event loop.
SHARE_SECONDS = 2.0
_shared: dict[tuple, tuple[float, asyncio.Future]] = {}


async def _shared_figures(organization, listing, listed) -> tuple[dict, object]:
    """(the Overview's figures, when they were computed), shared as said above."""
    key = (organization.pk, listing.fetched_at, asyncio.get_running_loop())
    began = time.monotonic()
    held = _shared.get(key)
    if held is not None and held[0] >= relay.pings.since(organization.pk) and began - held[0] <= SHARE_SECONDS:
        return await asyncio.shield(held[1])
    for old in [k for k, (at, _) in _shared.items() if began - at > SHARE_SECONDS]:
        del _shared[old]
    future = asyncio.get_running_loop().create_future()
    _shared[key] = (began, future)
    try:
        figures = (await sync_to_async(overview)(organization, timezone.now(), listed), timezone.now())
    except BaseException as exc:
        _shared.pop(key, None)
        future.set_exception(exc)
        future.exception()  # retrieved: the one who asked raises it below
        raise
    future.set_result(figures)
    return figures


async def _overview_context(request) -> dict | None:
    organization = request.organization
    if organization is None:
        return None
    # Cached and never raising, as on the agents page: the last good list (with its age) when the upstream
    # fails, and none at all (the agents known from sessions alone) when there has never been one.
    listing = await agents_service.get_agents(organization)
    listed = listing.agents if listing.fetched_at is not None else None
    summary, generated_at = await _shared_figures(organization, listing, listed)
    for group in summary["error_groups"]:
        known = listing.find(group.agent_id) if group.agent_id else None
        group.agent_name = known.name if known else group.agent_name
    firing = await sync_to_async(list)(
        Alert.objects.filter(organization=organization, status=Alert.Status.FIRING)
        .select_related("rule", "assignee")
        .order_by(*Alert.FIRING_ORDER)
    )
    return {
        "organization": organization,
        "summary": summary,
        "listing": listing,
        "firing": firing,
        "silences": alert_actions.SILENCES,  # an operator silences a firing alert from here as on its page
        "generated_at": generated_at,
    }


@require_GET
@member_required("sessions.figures")
async def home(request):
    """Is anything wrong right now? Alerts, error groups, sessions that ended badly, every agent, the agents API."""
    context = await _overview_context(request)
    if context is None:
        return redirect("session_list")
    return await arender(request, "overview/home.html", context)


@require_GET
@member_required("sessions.figures")
async def overview_panel(request):
    """The Overview's content alone: what its page fetches when the session socket says something changed."""
    context = await _overview_context(request)
    if context is None:
        raise Http404("Your account belongs to no organization.")
    return await arender(request, "overview/_overview.html", context)
