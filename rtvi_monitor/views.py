"""Session pages: the list (live on top, history below) and one session, live or ended."""

from datetime import datetime

from django.core.exceptions import BadRequest
from django.db.models import Q
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from dashboard.auth import organization_of, staff_required
from dashboard.models import Agent
from rtvi_monitor.models import Session
from rtvi_monitor.sessions import BadFilter, filter_sessions

PAGE_SIZE = 50


def _page(queryset, cursor: str):
    """Keyset pagination on (started_at, pk): as fast on page 2,000 as on page 1."""
    if cursor:
        stamp, _, pk = cursor.rpartition("_")
        try:
            started = datetime.fromisoformat(stamp)
            pk = int(pk)
        except ValueError:
            raise BadRequest("before: not a cursor this page made") from None
        queryset = queryset.filter(Q(started_at__lt=started) | Q(started_at=started, pk__lt=pk))
    rows = list(queryset[: PAGE_SIZE + 1])
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    next_cursor = f"{rows[-1].started_at.isoformat()}_{rows[-1].pk}" if more else ""
    return rows, next_cursor


@require_GET
@staff_required
def session_list(request):
    organization = organization_of(request.user)
    error, sessions, next_cursor = "", [], ""
    if organization is not None:
        try:
            sessions, next_cursor = _page(filter_sessions(organization, request.GET), request.GET.get("before", ""))
        except BadFilter as exc:
            error = str(exc)
    params = request.GET.copy()
    params["before"] = next_cursor
    return render(
        request,
        "rtvi_monitor/session_list.html",
        {
            "organization": organization,
            "sessions": sessions,
            "error": error,
            "filters": request.GET,
            "agents": Agent.objects.filter(organization=organization) if organization else [],
            "next_url": f"?{params.urlencode()}" if next_cursor else "",
            "config": {"ws": "/ws/sessions/", "session_url": reverse("session_list")},
        },
    )


@require_GET
@staff_required
def session_detail(request, session_id):
    session = Session.objects.find(organization_of(request.user), session_id)
    if session is None:
        raise Http404("No such session in your organization.")
    return render(
        request,
        "rtvi_monitor/session_detail.html",
        {
            "session": session,
            "config": {
                "session_id": session.session_id,
                "ws": f"/ws/sessions/{session.session_id}/",
                "events_url": reverse("api_session_events", args=[session.session_id]),
                "state_url": reverse("api_session_detail", args=[session.session_id]),
            },
        },
    )
