"""Session pages: the list (live on top, history below) and one session, live or ended."""

from datetime import datetime

from asgiref.sync import async_to_sync
from django.core.exceptions import BadRequest
from django.db.models import Q
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from dashboard.access.auth import member_required
from dashboard.agents import service as agents_service
from dashboard.org import audit
from dashboard.web.http import BadParam, Query, whole_number
from rtvi_monitor.audio.comparison import audio_summary
from rtvi_monitor.audio.models import SessionAudio
from rtvi_monitor.reviews.marks import session_panel
from rtvi_monitor.sessions.models import FAILED_ENDS, EndKind, Session
from rtvi_monitor.sessions.queries import filter_sessions, organization_session

PAGE_SIZE = 50
# The history: sessions that ended. A live one (its bot away within the grace included) is in the live table.
HISTORY = Q(status=Session.Status.ENDED)
NOT_FILTERS = ("before", "after", "part", "status")  # the page's parameters that say where, not which
MAX_PK = 2**63 - 1  # a session's id (a BigAutoField)


def _cursor(session: Session) -> str:
    """Where a page starts or ends: the session's place in the list's order, (started_at, pk)."""
    return f"{session.started_at.isoformat()}_{session.pk}"


def _key(cursor: str, name: str) -> tuple[datetime, int]:
    stamp, _, raw_pk = cursor.rpartition("_")
    pk = whole_number(raw_pk, 19)
    try:
        if len(stamp) > 40 or pk is None or pk > MAX_PK:  # bounded before either is converted
            raise ValueError(cursor)
        return datetime.fromisoformat(stamp), pk
    except ValueError:
        raise BadRequest(f"{name}: not a cursor this page made") from None


def _page(queryset, before: str = "", after: str = "") -> tuple[list[Session], str, str]:
    """Keyset pagination on (started_at, pk), newest first, both ways: as fast on page 2,000 as on page 1.

    `before` gives the page of sessions just older than a cursor, `after` the page of sessions
    just newer than one (read oldest first, then shown newest first); with neither, the newest page.
    Returns the rows, then the cursors for the older page and the newer page ("" when there is
    none). Newer pages are cursors too, not offsets, so that sessions starting meanwhile never
    shift the pages a user walks back through.
    """
    if before and after:
        raise BadRequest("before and after: give one cursor, not both")
    if after:
        started, pk = _key(after, "after")
        newer_side = Q(started_at__gt=started) | Q(started_at=started, pk__gt=pk)
        rows = list(queryset.filter(newer_side).order_by("started_at", "pk")[: PAGE_SIZE + 1])
        more_newer = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE][::-1]
        more_older = True  # the session at the cursor, at least, is older
    else:
        if before:
            started, pk = _key(before, "before")
            queryset = queryset.filter(Q(started_at__lt=started) | Q(started_at=started, pk__lt=pk))
        rows = list(queryset[: PAGE_SIZE + 1])
        more_older = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        more_newer = bool(before)  # the session at the cursor, at least, is newer
    older = _cursor(rows[-1]) if rows and more_older else ""
    newer = _cursor(rows[0]) if rows and more_newer else ""
    return rows, older, newer


@require_GET
@member_required("sessions.figures")
def session_list(request):
    """The sessions page: the live sessions (its socket fills them), then the history, filtered and paged.

    With ?part=history, the history alone: what the page fetches when a session ends or comes back, so
    that a session is listed once, in Live or in the history, and the server says where.
    """
    organization = request.organization
    history = _history(request) if organization is not None else {}
    if request.GET.get("part") == "history":
        return render(request, "sessions/_history.html", history)
    # Whichever upstream serves the organization's agents (its sessions are keyed by their ids).
    agents = async_to_sync(agents_service.get_agents)(organization).agents if organization else []
    agent = history.get("agent", "")
    return render(
        request,
        "sessions/session_list.html",
        {
            **history,
            "organization": organization,
            "filters": request.GET,
            "ends": EndKind.choices,
            "agents": agents,
            # A filter on an agent the list does not have (any more): still shown as the one applied.
            "unlisted_agent": agent if agent and all(a.id != agent for a in agents) else "",
            "config": {
                "ws": "/ws/sessions/",
                "session_url": reverse("session_list"),
            },
        },
    )


def _history(request) -> dict:
    """The history's page the request asks for: ended sessions only (HISTORY), filtered, newest first.

    A live session, its bot away within the grace included, is in the live table: it joins the history
    when it ends, and leaves it if its bot comes back after the end (the session reopens).
    """
    error, sessions, older, newer = "", [], "", ""
    before = after = agent = ""
    try:
        query = Query(request.GET)
        before, after = query.text("before"), query.text("after")
        # Its status is "ended" by rule: a status asked for (the Overview's link to the live ones) is not the history's.
        params = request.GET.copy()
        params.pop("status", None)
        matching = filter_sessions(request.organization, params, request.sees_contents).filter(HISTORY)
        agent = query.text("agent")  # filter_sessions took it
        sessions, older, newer = _page(matching, before, after)
    except BadParam as exc:
        error = str(exc)
    newer_url = _page_url(request.GET, after=newer) if newer else ""
    if not sessions and (before or after):
        # A page past either end (its rows deleted since, a cursor from other filters): back to the newest.
        newer_url = _page_url(request.GET)
    return {
        "sessions": sessions,
        "error": error,
        "agent": agent,
        "filtered": any(value for name, value in request.GET.items() if name not in NOT_FILTERS),
        # The list runs newest first: the next page is older, the previous one newer.
        "next_url": _page_url(request.GET, before=older) if older else "",
        "previous_url": newer_url,
    }


def _page_url(params, **cursor: str) -> str:
    """The query string of another page of the same filtered list: the filters kept, one cursor (or none)."""
    params = params.copy()
    for name in ("before", "after", "part"):  # a cursor is given anew; a page's link is to the whole page
        params.pop(name, None)
    params.update(cursor)
    return f"?{params.urlencode()}"


@require_GET
@member_required("sessions.figures")
def session_detail(request, session_id):
    session = organization_session(request.organization, session_id)
    # The review card (rtvi_monitor/reviews/marks.py): a note only to those who read the call's contents.
    reviews = session_panel(
        session,
        reviewer_name=audit.who(request)[0],
        sees_notes=request.can.sessions_contents,
        may_mark=request.can.reviews_write,
    )
    if not request.sees_contents:
        # A viewer: the call's figures, server-rendered, and no socket (which carries its contents).
        recording = SessionAudio.objects.filter(session=session).first()
        heard = audio_summary(recording, session) if recording else None
        context = {"session": session, "heard": heard, "reviews": reviews}
        return render(request, "sessions/session_figures.html", context)
    audit.record_read(session.organization, session.session_id, "page", request=request)
    # The recording's figures are every member's; its sound (the player, the waveform, the file) only the
    # listeners' (access.py `audio.listen`, as for the API). A page without the URLs has no player and asks
    # for no audio.
    sid = session.session_id
    audio = {"url": reverse("api_session_audio", args=[sid])}
    if request.can.audio_listen:
        audio["peaks_url"] = reverse("api_session_audio_peaks", args=[sid])
        audio["wav_url"] = reverse("api_session_audio_wav", args=[sid])
        audio["played_url"] = reverse("api_session_audio_played", args=[sid])  # the audit log's "listened"
    return render(
        request,
        "sessions/session_detail.html",
        {
            "session": session,
            "config": {
                "session_id": session.session_id,
                "ws": f"/ws/sessions/{session.session_id}/",
                "events_url": reverse("api_session_events", args=[session.session_id]),
                "state_url": reverse("api_session_detail", args=[session.session_id]),
                "audio": audio,
                # The end kinds that failed (a red pill), for the state's end before the row says it.
                "failed_ends": sorted(FAILED_ENDS),
            },
            "reviews": reviews,
        },
    )
