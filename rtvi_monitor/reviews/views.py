"""The review pages and their JSON.

- `POST /sessions/<session_id>/review/`: mark the call or a turn (or `remove` one's own mark); back to its page.
- `GET /reviews/`: the queues with their progress, the bad share per agent, deployment and week, the reasons
  given; `POST` makes a queue.
- `GET /reviews/queues/<id>/`: the calls the queue matches, oldest unreviewed first; `POST` assigns or deletes.
- `GET|POST /reviews/reasons/`: the organization's reason list (its admins': `org.settings`).
- `GET|POST /api/sessions/<session_id>/reviews/`: a call's marks, and a mark (JSON; a key or a member).
- `GET /api/reviews/`: the queues' progress and the bad share.

Reading is a viewer's (`reviews.read`: verdicts, reasons and counts); marking and queues an operator's
(`reviews.write`). A mark's note is call contents: it is in a page or an answer only when the policy allows
`sessions.contents` (`request.can.sessions_contents`). Every change is audited (rtvi_monitor/reviews/marks.py,
queues.py), a refused attempt never.
"""

import json

from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard.access.auth import key_or_member_required, member_required
from dashboard.org import audit
from dashboard.web.http import StrictJsonResponse, json_error, json_methods
from rtvi_monitor.evals.expects import Expects
from rtvi_monitor.reviews import marks, queues, share
from rtvi_monitor.reviews.marks import Refused
from rtvi_monitor.sessions.models import EndKind
from rtvi_monitor.sessions.queries import organization_session


def _json_object(request) -> dict:
    try:
        data = json.loads(request.body or b"null")
    except ValueError:
        raise Refused("The body must be JSON: {turn, verdict, reasons, note}.") from None
    if not isinstance(data, dict):
        raise Refused("Send a JSON object: {turn, verdict, reasons, note}.")
    return data


def _refused_page(request, message: str, back: str):
    return render(request, "reviews/refused.html", {"message": message, "back": back}, status=400)


@require_POST
@member_required("reviews.write")
def session_review(request, session_id):
    session = organization_session(request.organization, session_id)
    back = reverse("session_detail", args=[session.session_id]) + "#reviews"
    reviewer = audit.who(request)[0]
    try:
        if "remove" in request.POST:
            marks.unmark(request, session, reviewer, marks.turn_of(request.POST.get("remove"), session))
            return redirect(back)
        data = {**request.POST.dict(), "reasons": request.POST.getlist("reason")}
        marks.mark(request, session, reviewer, marks.read_mark(data, request.organization, session))
    except Refused as refused:
        return _refused_page(request, str(refused), back)
    return redirect(back)


def _home_context(request, errors: list[str], form) -> dict:
    return {
        "queues": queues.queues_of(request.organization),
        "shares": share.bad_share(request.organization),
        "weeks": share.WEEKS,
        "reason_counts": share.reason_counts(request.organization),
        "members": queues.members_of(request.organization) if request.can.reviews_write else [],
        "end_kinds": EndKind.choices,
        "errors": errors,
        "form": form,
        "max_days": queues.MAX_DAYS,
    }


@member_required({"GET": "reviews.read", "POST": "reviews.write"})
def review_home(request):
    errors: list[str] = []
    if request.method == "POST":
        try:
            fields = queues.read_queue(request.POST)
            assignee = queues.member_of(request.organization, request.POST.get("assignee"))
            queue = queues.make_queue(request, request.organization, fields, assignee)
            return redirect("review_queue", queue.pk)
        except Refused as refused:
            errors.append(str(refused))
    context = _home_context(request, errors, request.POST if errors else {})
    return render(request, "reviews/home.html", context, status=400 if errors else 200)


@member_required({"GET": "reviews.read", "POST": "reviews.write"})
def queue_detail(request, pk):
    try:
        queue = queues.own_queue(request.organization, pk)
    except LookupError as missing:
        raise Http404(str(missing)) from None
    if request.method == "POST":
        if "delete" in request.POST:
            queues.delete(request, queue)
            return redirect("review_home")
        try:
            queues.assign(request, queue, queues.member_of(request.organization, request.POST.get("assignee")))
        except Refused as refused:
            return _refused_page(request, str(refused), reverse("review_queue", args=[queue.pk]))
        return redirect("review_queue", queue.pk)
    calls = queues.matching(queue)
    reviewed, total = calls.filter(reviewed=True).count(), calls.count()
    context = {
        "queue": queue,
        "filter": queues.describe_filter(queue),
        "calls": list(calls[: queues.SHOWN]),
        "shown": queues.SHOWN,
        "reviewed": reviewed,
        "total": total,
        "members": queues.members_of(request.organization) if request.can.reviews_write else [],
    }
    return render(request, "reviews/queue.html", context)


@member_required("org.settings")
def review_reasons(request):
    error = ""
    if request.method == "POST":
        try:
            marks.change_reasons(request, request.organization, request.POST)
            return redirect("review_reasons")
        except Refused as refused:
            error = str(refused)
    context = {
        "reasons": marks.reasons_of(request.organization),
        "error": error,
        "label_max": marks.LABEL_MAX,
        "expects": Expects.choices,
    }
    return render(request, "reviews/reasons.html", context, status=400 if error else 200)


@json_methods("GET", "POST", browser_form=True)
@key_or_member_required({"GET": "reviews.read", "POST": "reviews.write"})
def session_reviews_json(request, session_id):
    """GET: the call's marks (a note only for contents' readers). POST {"turn", "verdict", "reasons": [ids],
    "note"} marks it for the key or member (replacing their mark there); {"remove": true, "turn"} removes it."""
    session = organization_session(request.organization, session_id)
    sees_notes = request.can.sessions_contents
    if request.method == "POST":
        reviewer = audit.who(request)[0]
        try:
            data = _json_object(request)
            if data.get("remove") is True:
                removed = marks.unmark(request, session, reviewer, marks.turn_of(data.get("turn"), session))
                return StrictJsonResponse({"removed": removed})
            change, review = marks.mark(
                request, session, reviewer, marks.read_mark(data, request.organization, session)
            )
        except Refused as refused:
            return json_error(str(refused), 400)
        return StrictJsonResponse({"change": change, "mark": marks.as_json(review, sees_notes)})
    reasons = [
        {"id": r.pk, "label": r.label, "active": r.active, "expects": r.expects}
        for r in marks.reasons_of(request.organization)
    ]
    found = marks.marks_of(session)
    shown = [marks.as_json(review, sees_notes) for review in found]
    if sees_notes and any(review.note for review in found):  # a note is the call's contents: its read is audited
        audit.record_read(session.organization, session.session_id, "review notes", request=request)
    return StrictJsonResponse({"session_id": session.session_id, "marks": shown, "reasons": reasons})


@json_methods("GET")
@key_or_member_required("reviews.read")
def reviews_json(request):
    """GET: the queues with their progress, and the bad share per agent, deployment and week."""
    found = [
        {
            "id": row["queue"].pk,
            "name": row["queue"].name,
            "filter": queues.describe_filter(row["queue"]),
            "assignee": row["queue"].assignee.get_username() if row["queue"].assignee else None,
            "reviewed": row["reviewed"],
            "total": row["total"],
        }
        for row in queues.queues_of(request.organization)
    ]
    shares = [row.as_json() for row in share.bad_share(request.organization)]
    return StrictJsonResponse({"queues": found, "bad_share": shares})
