"""The audit log, read: a page for an organization's admins, JSON and NDJSON for scripts; one organization's."""

from datetime import datetime

from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils.dateparse import parse_datetime

from dashboard import audit
from dashboard.auth import key_or_member_required, member_required
from dashboard.http import StrictJsonResponse, json_error, json_methods, strict_dumps
from dashboard.models import AuditEntry, Role

PAGE = 100  # entries a page
EXPORT_CHUNK = 1000


class BadFilter(ValueError):
    pass


def _when(params, name: str) -> datetime | None:
    raw = params.get(name, "").strip()
    if not raw:
        return None
    parsed = parse_datetime(raw)
    if parsed is None or parsed.tzinfo is None:
        raise BadFilter(f"{name}: expected an ISO 8601 time with its zone (2026-11-24T10:00:00Z), got {raw[:60]!r}")
    return parsed


def filtered(organization, params):
    """The organization's entries, newest first, by `action`, `actor` (contains), `target`, `since`, `until`."""
    entries = AuditEntry.objects.filter(organization=organization)
    action = params.get("action", "").strip()
    if action:
        if action not in AuditEntry.Action.values:
            raise BadFilter(f"action: expected one of {', '.join(AuditEntry.Action.values)}, got {action[:60]!r}")
        entries = entries.filter(action=action)
    if actor := params.get("actor", "").strip()[:200]:
        entries = entries.filter(actor__icontains=actor)
    if target := params.get("target", "").strip()[:200]:
        entries = entries.filter(target=target)
    if since := _when(params, "since"):
        entries = entries.filter(at__gte=since)
    if until := _when(params, "until"):
        entries = entries.filter(at__lt=until)
    before = params.get("before", "").strip()
    if before:
        if not (before.isascii() and before.isdigit()) or len(before) > 18:
            raise BadFilter(f"before: expected an entry id, got {before[:40]!r}")
        entries = entries.filter(id__lt=int(before))
    return entries.order_by("-id")


@member_required(role=Role.ADMIN)
def audit_page(request):
    organization = request.organization
    error = ""
    try:
        entries = list(filtered(organization, request.GET)[: PAGE + 1])
    except BadFilter as exc:
        error, entries = str(exc), []
    older = entries[PAGE - 1].pk if len(entries) > PAGE else None
    return render(
        request,
        "dashboard/audit.html",
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
@key_or_member_required(role=Role.ADMIN)
def audit_json(request):
    """GET /api/audit/: entries newest first (filters as the page's; `before` pages back); ?format=ndjson: all."""
    try:
        entries = filtered(request.organization, request.GET)
    except BadFilter as exc:
        return json_error(str(exc), 400)
    if request.GET.get("format") == "ndjson":
        audit.record(request.organization, audit.Action.AUDIT_EXPORT, "audit log", request=request)
        response = StreamingHttpResponse(_ndjson(entries), content_type="application/x-ndjson")
        response["Content-Disposition"] = 'attachment; filename="audit.ndjson"'
        return response
    rows = list(entries[: PAGE + 1])
    return StrictJsonResponse(
        {
            "entries": [row.as_json() for row in rows[:PAGE]],
            "next_before": rows[PAGE - 1].pk if len(rows) > PAGE else None,
        }
    )
