"""JSON for scripts: sessions, one session's derived state, and its messages as NDJSON."""

from functools import wraps

from django.http import HttpResponse, StreamingHttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dashboard.auth import key_or_staff_required
from dashboard.http import StrictJsonResponse, json_error, json_methods, strict_dumps
from rtvi_monitor.events import event_from_db, stored_message
from rtvi_monitor.metrics import registry_for
from rtvi_monitor.models import Event, Session
from rtvi_monitor.sessions import BadFilter, filter_sessions, session_detail

MAX_LIMIT = 500


def with_session(view):
    """The organization's session named in the URL, passed to the view; a JSON 404 when there is none."""

    @wraps(view)
    def wrapper(request, session_id, *args, **kwargs):
        session = Session.objects.find(request.organization, session_id)
        if session is None:
            return json_error(f"No session {session_id!r} in your organization.", 404)
        return view(request, session, *args, **kwargs)

    return wrapper


def _int_param(request, name: str, default: int, maximum: int) -> int:
    raw = request.GET.get(name, "")
    if not raw:
        return default
    if not raw.isdigit():
        raise BadFilter(f"{name}: expected a whole number, got {raw!r}")
    return min(int(raw), maximum)


@json_methods("GET")
@key_or_staff_required
def session_list(request):
    """GET /api/sessions/?agent=&status=&has_errors=&fatal=&started_after=&started_before=&q=&limit=&offset="""
    try:
        queryset = filter_sessions(request.organization, request.GET)
        limit = _int_param(request, "limit", 50, MAX_LIMIT)
        offset = _int_param(request, "offset", 0, 10**9)
    except BadFilter as exc:
        return json_error(str(exc), 400)
    page = list(queryset[offset : offset + limit + 1])
    more = len(page) > limit
    return StrictJsonResponse(
        {
            "sessions": [s.row() for s in page[:limit]],
            "offset": offset,
            "limit": limit,
            "next_offset": offset + limit if more else None,
        }
    )


@json_methods("GET")
@key_or_staff_required
@with_session
def session_detail_json(request, session):
    """GET /api/sessions/<session_id>/: the session and everything derived from its messages."""
    return StrictJsonResponse(session_detail(session))


CHUNK = 2000


def _ndjson_lines(session_pk: int):
    after = 0
    while True:
        rows = list(
            Event.objects.filter(session_id=session_pk, seq__gt=after)
            .order_by("seq")
            .values_list("seq", "direction", "received_at", "message", "valid", "error")[:CHUNK]
        )
        if not rows:
            return
        lines = []
        for seq, direction, received_at, message, valid, error in rows:
            line = {"seq": seq, "direction": direction, "received_at": received_at, "message": stored_message(message)}
            if not valid:
                line["valid"], line["error"] = False, error
            lines.append(strict_dumps(line, separators=(",", ":")) + "\n")
        yield "".join(lines)
        after = rows[-1][0]


@json_methods("GET")
@key_or_staff_required
@with_session
def session_events_ndjson(request, session):
    """GET /api/sessions/<session_id>/events.ndjson: every stored message in seq order."""
    response = StreamingHttpResponse(_ndjson_lines(session.pk), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="session-{session.session_id}.ndjson"'
    return response


@json_methods("GET")
@key_or_staff_required
@with_session
def session_event(request, session, seq):
    """GET /api/sessions/<session_id>/events/<seq>/: one stored message, whole (pages show long ones as previews)."""
    event = Event.objects.filter(session=session, seq=seq).first()
    if event is None:
        return json_error(f"Session {session.session_id!r} has no message with seq {seq}.", 404)
    return StrictJsonResponse(event_from_db(event))


@json_methods("GET")
@key_or_staff_required
def prometheus(request):
    """GET /metrics: the organization's metrics in Prometheus' text format (private API key or staff)."""
    return HttpResponse(generate_latest(registry_for(request.organization)), content_type=CONTENT_TYPE_LATEST)
