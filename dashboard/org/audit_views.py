"""The audit log, read: a page for an organization's admins, JSON and NDJSON for scripts; one organization's."""

from django.http import StreamingHttpResponse
from django.shortcuts import render

from dashboard.access.auth import key_or_member_required, member_required
from dashboard.access.streams import REVOKED_MID_STREAM, while_key_valid
from dashboard.org import audit
from dashboard.org.models import AuditEntry
from dashboard.web.http import (
    BadParam,
    Query,
    StrictJsonResponse,
    json_error,
    json_methods,
    ndjson_closing,
    strict_dumps,
)

PAGE = 100  # entries a page
EXPORT_CHUNK = 1000
MAX_ID = 2**63 - 1  # an entry id: a BigAutoField


def filtered(organization, params):
    """The organization's entries, newest first, by `action`, `actor` (contains), `target`, `since`, `until`
    (ISO 8601 with a zone), `before` (an entry id, to page back). Raises BadParam naming a bad one."""
    query = Query(params)
    entries = AuditEntry.objects.filter(organization=organization)
    if action := query.choice("action", AuditEntry.Action.values):
        entries = entries.filter(action=action)
    if actor := query.text("actor"):
        entries = entries.filter(actor__icontains=actor)
    if target := query.text("target"):
        entries = entries.filter(target=target)
    if since := query.date_time("since", zone_required=True):
        entries = entries.filter(at__gte=since)
    if until := query.date_time("until", zone_required=True):
        entries = entries.filter(at__lt=until)
    if (before := query.whole_number("before", None, 0, MAX_ID)) is not None:
        entries = entries.filter(id__lt=before)
    return entries.order_by("-id")


@member_required("audit.read")
def audit_page(request):
    organization = request.organization
    error = ""
    try:
        entries = list(filtered(organization, request.GET)[: PAGE + 1])
    except BadParam as exc:
        error, entries = str(exc), []
    older = entries[PAGE - 1].pk if len(entries) > PAGE else None
    return render(
        request,
        "org/audit.html",
        {
            "organization": organization,
            "entries": entries[:PAGE],
            "older": older,
            "error": error,
            "actions": AuditEntry.Action.choices,
            "params": request.GET,
        },
    )


def _ndjson(entries):
    after_id = None
    while True:
        chunk = entries if after_id is None else entries.filter(id__lt=after_id)
        rows = list(chunk[:EXPORT_CHUNK])
        if not rows:
            return
        yield "".join(strict_dumps(row.as_json(), separators=(",", ":")) + "\n" for row in rows)
        after_id = rows[-1].pk


@json_methods("GET")
@key_or_member_required("audit.read")
def audit_json(request):
    """GET /api/audit/: entries newest first (filters as the page's; `before` pages back); ?format=ndjson: all."""
    try:
        entries = filtered(request.organization, request.GET)
        export = Query(request.GET).choice("format", ("json", "ndjson"), default="json") == "ndjson"
    except BadParam as exc:
        return json_error(str(exc), 400)
    if export:
        audit.record(request.organization, audit.Action.AUDIT_EXPORT, "audit log", request=request)
        lines = while_key_valid(request, _ndjson(entries), ndjson_closing(REVOKED_MID_STREAM))
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
        response["Content-Disposition"] = 'attachment; filename="audit.ndjson"'
        return response
    rows = list(entries[: PAGE + 1])
    return StrictJsonResponse(
        {
            "entries": [row.as_json() for row in rows[:PAGE]],
            "next_before": rows[PAGE - 1].pk if len(rows) > PAGE else None,
        }
    )
