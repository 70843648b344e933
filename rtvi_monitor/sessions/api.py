"""JSON for scripts: sessions, one session's derived state, and its messages (NDJSON, pages, one by one)."""

import asyncio
import json
from functools import wraps

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dashboard.access import policy as access
from dashboard.access.auth import key_or_member_required
from dashboard.access.streams import REVOKED_MID_STREAM, while_key_valid
from dashboard.org import audit
from dashboard.web.http import (
    MAX_OFFSET,
    BadParam,
    Query,
    StrictJsonResponse,
    bearer_token,
    json_error,
    json_methods,
    ndjson_closing,
    strict_dumps,
)
from rtvi_monitor.core import protocol
from rtvi_monitor.live import control
from rtvi_monitor.privacy.erase import erase_caller, erase_session
from rtvi_monitor.sessions.events import event_from_db, stored_message
from rtvi_monitor.sessions.metrics import registry_for
from rtvi_monitor.sessions.models import Event, caller_keys
from rtvi_monitor.sessions.platform_join import session_platform
from rtvi_monitor.sessions.queries import filter_sessions, organization_session, session_detail, session_turns
from rtvi_monitor.sessions.traces import session_traces

MAX_LIMIT = 500


def with_session(view=None, *, export: bool = False):
    """The organization's session named in the URL, passed to the view (a JSON 404 when there is none).

    A read of its contents is in the audit log (dashboard/org/audit.py), once a minute per reader; with
    `export`, as an export, every time. Who may read them is the view's door's (dashboard/access/policy.py).
    """
    if view is None:
        return lambda view: with_session(view, export=export)

    @wraps(view)
    def wrapper(request, session_id, *args, **kwargs):
        session = organization_session(request.organization, session_id)
        if export:
            audit.record(session.organization, audit.Action.SESSION_EXPORT, session.session_id, request=request)
        elif request.method != "DELETE" and request.sees_contents:
            audit.record_read(session.organization, session.session_id, f"api: {view.__name__}", request=request)
        return view(request, session, *args, **kwargs)

    return wrapper


@json_methods("GET", "DELETE", browser_form=True)
@key_or_member_required({"GET": "sessions.figures", "DELETE": "sessions.erase"})
def session_list(request):
    """GET /api/sessions/?agent=&status=&has_errors=&fatal=&started_after=&started_before=&q=&caller=&limit=&offset=

    The filters are sessions.filter_sessions's; `limit` from 1 (50 when absent; over MAX_LIMIT, MAX_LIMIT),
    `offset` from 0; a bad one is a 400 naming it (dashboard.web.http.Query).

    DELETE /api/sessions/?caller=<user_id> (private API key with write): erase every ended session in
    which a bot reported that user_id (a caller's request to be forgotten); live ones are listed
    and kept until they end. In the audit log, by the caller's key, never the id itself.
    """
    if request.method == "DELETE":
        return erase_callers_sessions(request)
    try:
        queryset = filter_sessions(request.organization, request.GET, request.sees_contents)
        query = Query(request.GET)
        # A limit over MAX_LIMIT is cut to it, not refused: scripts ask for "as many as you give".
        limit = min(query.whole_number("limit", 50, 1, MAX_OFFSET), MAX_LIMIT)
        offset = query.whole_number("offset", 0, 0, MAX_OFFSET)
    except BadParam as exc:
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


@json_methods("GET", "DELETE", browser_form=True)
@key_or_member_required({"GET": "sessions.figures", "DELETE": "sessions.erase"})
@with_session
def session_detail_json(request, session):
    """GET /api/sessions/<session_id>/: the session, everything derived from its messages, and its platform record.

    `platform` is what the agents API says of the session (null when it does
    not know it): see rtvi_monitor/sessions/platform_join.py.

    DELETE (private API key only): erase the session, its messages and its trace spans, for good (a
    caller's request to be forgotten); a live call is refused (409) until it ends. In the audit log.
    """
    if request.method == "DELETE":
        return erase(request, session)
    if not request.sees_contents:  # a viewer: its figures alone
        return StrictJsonResponse({**session.row(), "contents": "hidden: they need the operator role"})
    detail = session_detail(session)
    detail["platform"] = async_to_sync(platform_within_page_wait)(request.organization, session)
    return StrictJsonResponse(detail)


def erase_callers_sessions(request) -> StrictJsonResponse:
    if not bearer_token(request):
        return json_error("Erasing takes 'Authorization: Bearer <private API key>'.", 403)
    try:
        user_id = Query(request.GET).text("caller", exact=True)  # as the bot sent it: spaces and all
    except BadParam as exc:
        return json_error(str(exc), 400)
    if not user_id.strip():
        return json_error("caller: the user_id whose sessions to erase is required (?caller=...)", 400)
    result = erase_caller(request.organization, user_id)
    audit.record(
        request.organization,
        audit.Action.SESSION_ERASED,
        f"caller {caller_keys(request.organization.pk, user_id)[0][:12]}…",
        request=request,
        **result,
    )
    return StrictJsonResponse(result)


def erase(request, session) -> StrictJsonResponse:
    if not bearer_token(request):
        # A browser session could be made to send it by another site: erasing takes the key.
        return json_error("Erasing a session takes 'Authorization: Bearer <private API key>'.", 403)
    erased = erase_session(session)
    if erased is None:
        return json_error(f"Session {session.session_id!r} is live: erase it once the call has ended.", 409)
    audit.record(session.organization, audit.Action.SESSION_ERASED, session.session_id, request=request, **erased)
    return StrictJsonResponse({"erased": session.session_id, **erased})


async def platform_within_page_wait(organization, session) -> dict | None:
    """The session's platform record, or what keeps it: the API never waits on the upstream past AGENTS_PAGE_WAIT."""
    try:
        async with asyncio.timeout(settings.AGENTS_PAGE_WAIT):
            return await session_platform(organization, session)
    except TimeoutError:
        return {"session": None, "error": "The agents API is still being asked; ask again in a few seconds."}


@json_methods("GET")
@key_or_member_required("sessions.contents")  # its log lines may quote the caller
async def session_platform_json(request, session_id):
    """GET /api/sessions/<session_id>/platform/: the platform's record and log lines of the session (or null).

    What the session page fetches after it has loaded: the agents API may be
    slow, and the page never waits on it.
    """
    session = await sync_to_async(organization_session)(request.organization, session_id)
    await audit.arecord_read(session.organization_id, session.session_id, "api: platform", request=request)
    return StrictJsonResponse({"platform": await platform_within_page_wait(request.organization, session)})


@json_methods("GET")
@key_or_member_required("sessions.contents")
@with_session
def session_traces_json(request, session):
    """GET /api/sessions/<session_id>/traces/: what the bot's OpenTelemetry traces say of each turn (or null)."""
    return StrictJsonResponse({"traces": session_traces(session.organization_id, session.session_id)})


@json_methods("GET")
@key_or_member_required("sessions.figures")
def session_turns_json(request, session_id):
    """GET /api/sessions/<session_id>/turns/: each turn taken apart (rtvi_monitor/core/diagnosis.py): its stages' waits,
    what is missing from it and why, its interruptions (barge-in or backchannel, how much of the reply was said).

    Every member: a viewer gets the timings without what anybody said (`contents`: false).
    """
    session = organization_session(request.organization, session_id)
    if request.sees_contents:
        audit.record_read(session.organization, session.session_id, "api: turns", request=request)
    return StrictJsonResponse(session_turns(session, request.sees_contents))


CHUNK = 2000


def _ndjson_lines(session_pk: int):
    after = 0
    while True:
        rows = list(
            Event.objects.filter(session_id=session_pk, seq__gt=after)
            .order_by("seq")
            .values_list(
                "seq", "stream", "bot_seq", "direction", "received_at", "message", "valid", "error", "redacted"
            )[:CHUNK]
        )
        if not rows:
            return
        lines = []
        for seq, stream, bot_seq, direction, received_at, message, valid, error, redacted in rows:
            line = {
                "seq": seq,
                "stream": stream,
                "bot_seq": bot_seq,
                "direction": direction,
                "received_at": received_at,
                "message": stored_message(message),
            }
            if not valid:
                line["valid"], line["error"] = False, error
            if redacted:  # what redaction removed from it before it was stored
                line["redacted"] = json.loads(redacted)
            lines.append(strict_dumps(line, separators=(",", ":")) + "\n")
        yield "".join(lines)
        after = rows[-1][0]


@json_methods("GET")
@key_or_member_required("sessions.contents")
@with_session(export=True)
def session_events_ndjson(request, session):
    """GET /api/sessions/<session_id>/events.ndjson: every stored message in seq order."""
    lines = while_key_valid(request, _ndjson_lines(session.pk), ndjson_closing(REVOKED_MID_STREAM))
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="session-{session.session_id}.ndjson"'
    return response


EVENTS_PAGE = 100  # messages in a page when `limit` is not given
SEQ_MAX = 2**63 - 1  # the column is a BigIntegerField


def _page_params(params) -> dict:
    """The events page's query parameters, checked; raises BadParam naming a bad one."""
    query = Query(params)
    return {
        "after": query.whole_number("after", None, 0, SEQ_MAX),
        "before": query.whole_number("before", None, 0, SEQ_MAX),
        "limit": query.whole_number("limit", EVENTS_PAGE, 1, MAX_LIMIT),
        "type": query.text("type", protocol.MAX_TYPE),
        "direction": query.choice("direction", protocol.DIRECTIONS) or "",
    }


@json_methods("GET")
@key_or_member_required("sessions.contents")
@with_session
def session_events_page(request, session):
    """GET /api/sessions/<session_id>/events/?after=&before=&limit=&type=&direction=: a page of stored messages.

    Messages in seq order, long ones as previews (whole at events/<seq>/).
    With `after`: the first `limit` messages after that seq (before `before`,
    if given). Without it: the last `limit` before `before`, or the newest
    ones. `type` and `direction` filter. `next_after` and `prev_before` are
    the cursors of the next page each way (the page's last and first seq),
    null when the session has no more such messages that way. Keyset on
    the unique (session, seq) index: a page deep in a 100,000-message
    session costs what the first does.
    """
    try:
        params = _page_params(request.GET)
    except BadParam as exc:
        return json_error(str(exc), 400)
    matching = Event.objects.filter(session=session)
    if params["type"]:
        matching = matching.filter(type=params["type"])
    if params["direction"]:
        matching = matching.filter(direction=params["direction"])
    after, before, limit = params["after"], params["before"], params["limit"]
    window = matching
    if after is not None:
        window = window.filter(seq__gt=after)
    if before is not None:
        window = window.filter(seq__lt=before)
    if after is not None:  # forwards from `after`
        rows = list(window.order_by("seq")[:limit])
    else:  # backwards from `before`, or from the newest
        rows = list(window.order_by("-seq")[:limit])[::-1]
    # Whether the session has more that way: each one seek on the index (a scan while filtering).
    more_forward = bool(rows) and matching.filter(seq__gt=rows[-1].seq).exists()
    more_back = bool(rows) and matching.filter(seq__lt=rows[0].seq).exists()
    return StrictJsonResponse(
        {
            "events": [event_from_db(e, preview=True) for e in rows],
            "next_after": rows[-1].seq if more_forward else None,
            "prev_before": rows[0].seq if more_back else None,
        }
    )


@json_methods("GET")
@key_or_member_required("sessions.contents")
@with_session
def session_event(request, session, seq):
    """GET /api/sessions/<session_id>/events/<seq>/: one stored message, whole (pages show long ones as previews)."""
    event = Event.objects.filter(session=session, seq=seq).first()
    if event is None:
        return json_error(f"Session {session.session_id!r} has no message with seq {seq}.", 404)
    return StrictJsonResponse(event_from_db(event))


@json_methods("GET")
@key_or_member_required("sessions.figures")
def prometheus(request):
    """GET /metrics: the organization's metrics in Prometheus' text format (private API key or a member)."""
    return HttpResponse(generate_latest(registry_for(request.organization)), content_type=CONTENT_TYPE_LATEST)


# --- Acting on a live call (rtvi_monitor/live/control.py): end it, send text into it -----------------------


async def _find(request, session_id: str):
    return await sync_to_async(organization_session)(request.organization, session_id)


def _control_answer(session, action: str, outcome: control.Outcome) -> StrictJsonResponse:
    body = {"ok": outcome.ok, "session": session.session_id, "action": action, "id": outcome.detail.get("id")}
    if outcome.ok:
        body["answer"] = outcome.detail.get("answer", "the bot took it")
        return StrictJsonResponse(body)
    return StrictJsonResponse({**body, "error": outcome.error, "code": str(outcome.status)}, status=outcome.status)


@json_methods("GET")
@key_or_member_required("sessions.figures")
async def session_control_json(request, session_id):
    """GET /api/sessions/<session_id>/control/: whether the call can be ended or sent text now, and why not.

    {"available": bool, "reason": "...", "actions": [...], "version": n, "allowed": bool,
    "allowed_reason": "..."}: `available` asks the bot's server process whether its bot takes control
    frames; `allowed` is whether the caller may (operators, admins and keys with write).
    """
    session = await _find(request, session_id)
    answer = await control.availability(session)
    refused = access.refusal(request.actor, "calls.control", method="POST")
    answer["allowed"] = refused is None
    answer["allowed_reason"] = refused or ""
    answer["timeout_seconds"] = control.timeout()
    return StrictJsonResponse(answer)


# What the audit log says of the bot's answer, by the API's status: never the words of an error (a bot's
# refusal can quote the text it was sent, or the call). Those are in the session's own messages, erased
# and purged with it; the log, served to every admin at GET /api/audit/, keeps none (rtvi_monitor/privacy/contents.py).
OUTCOMES = {
    200: "taken",
    500: "failed in the dashboard",
    502: "refused by the bot",
    503: "server process unreachable",
    504: "no answer in time",
}


async def _act_on_call(request, session_id, action: str, parse, ask, record: str, details):
    """What end/ and send-text/ share: the session, the body (`parse`: (body, problem)),
    the bot asked (`ask`), and the audit entry for whatever the bot answered (a 409 never reached it)."""
    session = await _find(request, session_id)
    body, problem = parse(request.body)
    if problem:
        return json_error(problem, 400)
    outcome = await ask(session, audit.who(request)[0], body)
    if outcome.status != 409:
        await audit.arecord(
            session.organization_id,
            record,
            session.session_id,
            request=request,
            **details(body),
            ok=outcome.ok,
            status=outcome.status,
            outcome=OUTCOMES.get(outcome.status, "failed"),
        )
    return _control_answer(session, action, outcome)


@json_methods("POST", browser_form=True)
@key_or_member_required("calls.control")
async def session_end(request, session_id):
    """POST /api/sessions/<session_id>/end/ {"cancel": false}: ask the bot to end the call.

    Gracefully (its pipeline's EndFrame: what is queued is still spoken) or, with "cancel": true, at once
    (Pipecat's CancelFrame). 200 when the bot took it (the session ends as its bot disconnects), 409 when
    it cannot be asked (ended, away, no control), 502 when it refused, 504 when it did not answer in time.
    Operators and admins, or a key with write; a browser sends its CSRF token. In the audit log.
    """
    return await _act_on_call(
        request,
        session_id,
        "end",
        control.end_body,
        lambda session, operator, body: control.end(session, operator, cancel=body["cancel"]),
        audit.Action.SESSION_ENDED,
        lambda body: {"mode": "cancel" if body["cancel"] else "graceful"},
    )


@json_methods("POST", browser_form=True)
@key_or_member_required("calls.control")
async def session_send_text(request, session_id):
    """POST /api/sessions/<session_id>/send-text/ {"content": "...", "options": {...}}: text into the call.

    RTVI send-text as the spec defines it: `options.run_immediately` (default true: the bot is
    interrupted and its LLM runs on the text now) and `options.audio_response` (default true: false,
    the answer is not spoken). The bot hands it to its RTVI processor as a client's would be. Statuses as
    for end/. The audit log keeps the text's length and options, not the text: that is in the session's
    own messages, under its retention and redaction.
    """
    return await _act_on_call(
        request,
        session_id,
        "send-text",
        control.send_text_body,
        lambda session, operator, body: control.send_text(session, operator, body["content"], body["options"]),
        audit.Action.SESSION_TEXT_SENT,
        lambda body: {"text_length": len(body["content"]), **body["options"]},
    )
