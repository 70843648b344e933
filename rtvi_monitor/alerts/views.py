"""Alerts for people and scripts: the alerts pages and their actions, and the JSON API.

Pages (a member's login): `/alerts/` (what fires, what fired, the rules),
`/alerts/<id>/` (one alert, its notes and deliveries), `/alerts/runbook/`
(docs/RUNBOOK.md), and `POST /alerts/<id>/act/`, the page's forms
(acknowledge, silence, assign, note; operators and admins).

JSON: `GET/POST /api/alerts/rules/` (creating takes a private API key),
`GET /api/alerts/`, `GET /api/alerts/<id>/`, and `POST /api/alerts/<id>/`
`acknowledge/`, `silence/`, `assign/`, `notes/` (a key with the write
scope, or an operator's or admin's browser session with its CSRF token).
The engine that fires alerts is rtvi_monitor/alerts/rules.py; what the actions do
is rtvi_monitor/alerts/actions.py.
"""

import json
import math
import re
import uuid
from functools import wraps
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import BadRequest, ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from dashboard.access.auth import key_or_member_required, member_required
from dashboard.agents.models import Agent
from dashboard.org import audit
from dashboard.web.http import (
    BadParam,
    Query,
    StrictJsonResponse,
    bearer_token,
    json_error,
    json_methods,
    whole_number,
)
from rtvi_monitor.alerts import actions as alert_actions
from rtvi_monitor.alerts import notify as alert_channels
from rtvi_monitor.alerts import thresholds
from rtvi_monitor.alerts.models import Alert, AlertRule, webhook_host
from rtvi_monitor.alerts.named import named_sessions
from rtvi_monitor.alerts.thresholds import settings_of

MAX_WINDOW = 7 * 24 * 60
MAX_PAGE = 10_000  # the `page` of an alert's sessions a URL may ask for (past the last: the last)
FIELDS = {
    "name",
    "condition",
    "agent",
    "threshold",
    "window_minutes",
    "webhook_url",
    "email",
    "enabled",
    "severity",
    "runbook_url",
    "renotify_minutes",
    "channels",
}


class BadRule(ValueError):
    """A rule the API cannot take; the message names the field."""


def _admin(request) -> bool:
    """Webhook addresses whole (a Slack hook's path is its password): `alerts.targets`, a key's or an admin's."""
    return request.can.alerts_targets


def channel_json(channel) -> dict:
    """A channel as the API shows it: its secret never whole."""
    return {"id": channel.pk, "kind": channel.kind, "target": channel.masked}


def rule_json(rule: AlertRule, whole: bool = True) -> dict:
    threshold, window = settings_of(rule)
    return {
        "id": rule.pk,
        "name": rule.name,
        "condition": rule.condition,
        "agent": rule.target_agent,
        "threshold": threshold,
        "window_minutes": window,
        "webhook_url": rule.webhook_url if whole else webhook_host(rule.webhook_url),
        "email": rule.email,
        "severity": rule.effective_severity,
        "runbook_url": rule.runbook_url or None,
        "renotify_minutes": rule.renotify_minutes,
        "channels": [channel_json(c) for c in rule.channels.all()],
        "enabled": rule.enabled,
        "created_at": rule.created_at.isoformat(),
    }


def _when(value):
    return value.isoformat() if value else None


def alert_json(alert: Alert, sees_contents: bool = True, whole: bool = True) -> dict:
    """An alert; for viewers without what a bot's error said, for non-admins without webhook addresses."""
    figures = alert.figures if sees_contents else {k: v for k, v in alert.figures.items() if k != "errors"}
    silenced = alert.silenced()
    return {
        "id": alert.pk,
        "rule": alert.rule_id,
        "rule_name": alert.rule.name,
        "condition": alert.rule.condition,
        "severity": alert.rule.effective_severity,
        "runbook_url": alert.rule.runbook_url or None,
        "status": alert.status,
        "agent": str(alert.agent_id) if alert.agent_id else None,
        "summary": alert.summary if sees_contents else alert.masked_summary,
        "figures": figures,
        "session_ids": alert.session_ids,
        "fired_at": alert.fired_at.isoformat(),
        "resolved_at": _when(alert.resolved_at),
        "acknowledged": {"by": alert.acknowledged_by, "at": _when(alert.acknowledged_at)}
        if alert.acknowledged_at
        else None,
        "silenced": {
            "until": _when(alert.silenced_until),
            "until_resolved": alert.silenced_until_resolved,
            "by": alert.silenced_by,
        }
        if silenced
        else None,
        "assignee": alert.assignee.get_username() if alert.assignee_id and alert.assignee else None,
        "notes": [
            {"id": n.pk, "author": n.author_name, "at": n.created_at.isoformat(), "text": n.text}
            for n in alert.notes.all()
        ],
        "deliveries": [
            {
                "event": d.event,
                "channel": d.channel,
                "target": d.target if whole or d.channel != "webhook" else webhook_host(d.target),
                "status": d.status,
                "attempts": d.attempts,
                "last_error": d.last_error,
                "sent_at": _when(d.sent_at),
            }
            for d in alert.deliveries.all()
        ],
    }


def _runbook(value) -> str:
    try:
        return alert_channels.check_runbook(value)
    except ValueError as exc:
        raise BadRule(str(exc)) from None


def parse_rule(organization, body) -> AlertRule:
    """An unsaved rule from a JSON body, or BadRule saying which field is wrong and why.

    Its channels (if any) are on `rule.new_channels`, unsaved.
    """
    if not isinstance(body, dict):
        raise BadRule("expected a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadRule(f"unknown field(s): {', '.join(unknown)}; expected some of {', '.join(sorted(FIELDS))}")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise BadRule("name: expected a non-empty string of at most 200 characters")
    condition = body.get("condition")
    if condition not in AlertRule.Condition.values:
        raise BadRule(f"condition: expected one of {', '.join(AlertRule.Condition.values)}, got {condition!r}")
    rule = AlertRule(organization=organization, name=name.strip(), condition=condition)
    if body.get("agent") is not None:
        try:
            rule.agent = Agent.objects.get(organization=organization, pk=uuid.UUID(str(body["agent"])))
        except (ValueError, Agent.DoesNotExist):
            raise BadRule(f"agent: no agent {body['agent']!r} in your organization") from None
    threshold = body.get("threshold")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
            raise BadRule("threshold: expected a number")
        if refused := thresholds.refusal(condition, threshold):
            raise BadRule(f"threshold: {refused}")
        rule.threshold = float(threshold)
    window = body.get("window_minutes")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
            raise BadRule(f"window_minutes: expected a whole number from 1 to {MAX_WINDOW}")
        rule.window_minutes = window
    try:
        webhook = body.get("webhook_url") or ""
        rule.webhook_url = alert_channels.check_url(webhook, "webhook_url", 200) if webhook else ""
    except ValueError as exc:
        raise BadRule(str(exc)) from None
    rule.email = _string(body, "email", 254, validate_email, "an e-mail address")
    severity = body.get("severity") or ""
    if severity and severity not in AlertRule.Severity.values:
        raise BadRule(f"severity: expected one of {', '.join(AlertRule.Severity.values)}, got {severity!r}")
    rule.severity = severity
    rule.runbook_url = _runbook(body.get("runbook_url"))
    renotify = body.get("renotify_minutes")
    if renotify is not None:
        if isinstance(renotify, bool) or not isinstance(renotify, int) or not 1 <= renotify <= MAX_WINDOW:
            raise BadRule(f"renotify_minutes: expected a whole number from 1 to {MAX_WINDOW}, or null (never)")
        rule.renotify_minutes = renotify
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise BadRule("enabled: expected true or false")
    rule.enabled = enabled
    rule.new_channels = _channels(rule, body.get("channels"))
    return rule


def _channels(rule: AlertRule, given) -> list:
    """`channels`: [{"kind": "pagerduty", "routing_key": "…"}, {"kind": "slack", "url": "…"}, …]."""
    if given is None:
        return []
    if not isinstance(given, list) or len(given) > 20:
        raise BadRule("channels: expected a list of at most 20 channels")
    made = []
    for i, channel in enumerate(given):
        if not isinstance(channel, dict):
            raise BadRule(f"channels[{i}]: expected an object with its kind")
        kind = channel.get("kind")
        asks = alert_channels.ASKS.get(kind)
        extra = sorted(set(channel) - {"kind", asks})
        if asks and extra:
            raise BadRule(f"channels[{i}]: unknown field(s) {', '.join(extra)}; a {kind} channel takes {asks}")
        try:
            made.append(alert_channels.new_channel(rule, kind, channel.get(asks) if asks else None))
        except ValueError as exc:
            raise BadRule(f"channels[{i}].{exc}") from None
    return made


def _string(body: dict, name: str, limit: int, validator, expected: str) -> str:
    """An optional string field checked by a Django validator; BadRule naming it when it fails."""
    value = body.get(name) or ""
    if value:
        try:
            if not isinstance(value, str) or len(value) > limit:
                raise ValidationError("")
            validator(value)
        except ValidationError:
            raise BadRule(f"{name}: expected {expected}") from None
    return value


def _json_body(request):
    try:
        return json.loads(request.body or b"null")
    except ValueError:
        return ValueError


@json_methods("GET", "POST", browser_form=True)
@key_or_member_required({"GET": "alerts.read", "POST": "alerts.rules"})
def alert_rules(request):
    """GET: the organization's rules. POST (private API key only): create one."""
    if request.method == "GET":
        rules = AlertRule.objects.filter(organization=request.organization).prefetch_related("channels")
        return StrictJsonResponse({"rules": [rule_json(r, _admin(request)) for r in rules]})
    if not bearer_token(request):
        # A browser session could be made to post by another site: creating rules takes the key.
        return json_error("Creating rules takes 'Authorization: Bearer <private API key>'.", 403)
    body = _json_body(request)
    if body is ValueError:
        return json_error("The body is not JSON.", 400)
    try:
        rule = parse_rule(request.organization, body)
    except BadRule as exc:
        return json_error(str(exc), 400)
    with transaction.atomic():
        rule.save()
        for channel in rule.new_channels:
            channel.rule = rule
            channel.save()
    audit.record(
        request.organization, audit.Action.RULE_CHANGED, f"alert rule: {rule.name}", request=request, created=True
    )
    return StrictJsonResponse(rule_json(rule), status=201)


def _alerts(organization):
    return (
        Alert.objects.filter(organization=organization)
        .select_related("rule", "agent", "assignee")
        .prefetch_related("deliveries", "notes")
    )


@json_methods("GET")
@key_or_member_required("alerts.read")
def alert_list_json(request):
    """GET /api/alerts/?status=firing|resolved: the newest 200 alerts, with their deliveries."""
    try:
        status = Query(request.GET).choice("status", Alert.Status.values)
    except BadParam as exc:
        return json_error(str(exc), 400)
    alerts = _alerts(request.organization)
    if status:
        alerts = alerts.filter(status=status)
    return StrictJsonResponse({"alerts": [alert_json(a, request.sees_contents, _admin(request)) for a in alerts[:200]]})


def _own_alert(request, pk: int) -> Alert | None:
    return _alerts(request.organization).filter(pk=pk).first()


@json_methods("GET")
@key_or_member_required("alerts.read")
def alert_detail_json(request, pk: int):
    """GET /api/alerts/<id>/: one alert with its notes and deliveries."""
    alert = _own_alert(request, pk)
    if alert is None:
        return json_error(f"No alert {pk} in your organization.", 404)
    return StrictJsonResponse(alert_json(alert, request.sees_contents, _admin(request)))


def _action(do):
    """A JSON action on one alert: POST, an operator, admin or key (write scope); the body a JSON object."""

    @json_methods("POST", browser_form=True)
    @key_or_member_required("alerts.work")
    @wraps(do)
    def view(request, pk: int):
        alert = _own_alert(request, pk)
        if alert is None:
            return json_error(f"No alert {pk} in your organization.", 404)
        body = _json_body(request)
        if body is None:
            body = {}
        if body is ValueError or not isinstance(body, dict):
            return json_error("The body is not a JSON object.", 400)
        try:
            do(request, alert, body)
        except alert_actions.Refused as exc:
            return json_error(str(exc), exc.status)
        return StrictJsonResponse(alert_json(_own_alert(request, pk), request.sees_contents, _admin(request)))

    return view


def _only(body: dict, allowed: set) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise alert_actions.Refused(
            f"unknown field(s): {', '.join(unknown)}; expected {', '.join(sorted(allowed)) or 'none'}"
        )


@_action
def alert_acknowledge(request, alert, body):
    """POST /api/alerts/<id>/acknowledge/ ({}): take a firing alert."""
    _only(body, set())
    alert_actions.acknowledge(alert, request)


@_action
def alert_silence(request, alert, body):
    """POST /api/alerts/<id>/silence/: {"minutes": 60}, {"until_resolved": true}, or {"minutes": 0} to lift it."""
    _only(body, {"minutes", "until_resolved"})
    until_resolved = body.get("until_resolved", False)
    if not isinstance(until_resolved, bool):
        raise alert_actions.Refused("until_resolved: expected true or false")
    if until_resolved == ("minutes" in body):
        raise alert_actions.Refused('Send "minutes" (0 lifts the silence) or "until_resolved": true, one of them.')
    alert_actions.silence(alert, request, minutes=body.get("minutes"), until_resolved=until_resolved)


@_action
def alert_assign(request, alert, body):
    """POST /api/alerts/<id>/assign/: {"user": "username"}, or {"user": null} for nobody."""
    _only(body, {"user"})
    if "user" not in body or not (body["user"] is None or isinstance(body["user"], str)):
        raise alert_actions.Refused("user: expected a member's username, or null for nobody")
    alert_actions.assign(alert, request, body["user"])


@_action
def alert_note(request, alert, body):
    """POST /api/alerts/<id>/notes/: {"text": "…"}."""
    _only(body, {"text"})
    alert_actions.add_note(alert, request, body.get("text"))


# --- pages ------------------------------------------------------------------------------


def _page_context(request) -> dict:
    operator = request.can.alerts_work
    return {
        "organization": request.organization,
        "can_act": operator,
        "members": alert_actions.members(request.organization) if operator else [],
        "silences": alert_actions.SILENCES,
        "now": timezone.now(),
    }


@require_GET
@member_required("alerts.read")
def alert_list(request):
    """The alerts page: what fires now, what fired before, and whether each delivery went."""
    organization = request.organization
    alerts = _alerts(organization)
    return render(
        request,
        "alerts/alert_list.html",
        {
            **_page_context(request),
            "firing": list(alerts.filter(status=Alert.Status.FIRING).order_by(*Alert.FIRING_ORDER)),
            "history": list(alerts.filter(status=Alert.Status.RESOLVED)[:100]),
            "rules": AlertRule.objects.filter(organization=organization)
            .select_related("agent")
            .prefetch_related("channels"),
        },
    )


@require_GET
@member_required("alerts.read")
def alert_detail(request, pk: int):
    """One alert: what it says, who has it, every session it names (`page`: a page of them), its notes and
    deliveries (where notifications link to)."""
    alert = get_object_or_404(_alerts(request.organization), pk=pk)
    try:
        number = Query(request.GET).whole_number("page", 1, 1, MAX_PAGE)
    except BadParam as exc:
        raise BadRequest(str(exc)) from None
    return render(
        request,
        "alerts/alert_detail.html",
        {**_page_context(request), "alert": alert, "one": [alert], "named": named_sessions(alert, number)},
    )


@require_POST
@member_required("alerts.work")
def alert_act(request, pk: int):
    """The pages' forms: `do` = acknowledge, silence (minutes or "resolved"; 0 lifts), assign (user), note (text)."""
    alert = get_object_or_404(_alerts(request.organization), pk=pk)
    do, post = request.POST.get("do", ""), request.POST
    try:
        if do == "acknowledge":
            alert_actions.acknowledge(alert, request)
            messages.success(request, f"Acknowledged: {alert.rule.name}.")
        elif do == "silence":
            chosen = post.get("minutes", "")
            if chosen == "resolved":
                alert_actions.silence(alert, request, until_resolved=True)
                messages.success(request, f"Silenced until it resolves: {alert.rule.name}.")
            else:
                minutes = whole_number(chosen, 6)  # None ("²", 5,000 digits): silence() says what it takes
                alert_actions.silence(alert, request, minutes=minutes)
                said = f"for {minutes} min" if minutes else "no longer"
                messages.success(request, f"Silenced {said}: {alert.rule.name}.")
        elif do == "assign":
            alert_actions.assign(alert, request, post.get("user") or None)
            messages.success(request, f"Owner of {alert.rule.name}: {post.get('user') or 'nobody'}.")
        elif do == "note":
            alert_actions.add_note(alert, request, post.get("text", ""))
            messages.success(request, f"Note added to {alert.rule.name}.")
        else:
            messages.error(request, f"Unknown action {do!r}: expected acknowledge, silence, assign or note.")
    except alert_actions.Refused as exc:
        messages.error(request, str(exc))
    back = post.get("next", "")
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, require_https=request.is_secure()):
        back = reverse("alert_list")
    return redirect(f"{back.split('#')[0]}#alert-{alert.pk}")


# --- the runbook ---------------------------------------------------------------------------

RUNBOOK = Path(settings.BASE_DIR) / "docs" / "RUNBOOK.md"


def slug(title: str) -> str:
    """A heading's anchor, as GitHub makes it: lower case, punctuation gone, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")


def _inline(text: str) -> str:
    """Escaped text with `code` spans and [links](http…) made markup; nothing else of the source is."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(f"<code>{escape(part)}</code>")
            continue
        pos, piece = 0, []
        for m in re.finditer(r"\[([^\]]+)\]\(((?:https?://|/|#)[^)\s]*)\)", part):
            piece.append(escape(part[pos : m.start()]))
            piece.append(f'<a href="{escape(m.group(2))}">{escape(m.group(1))}</a>')
            pos = m.end()
        piece.append(escape(part[pos:]))
        out.append(re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", "".join(piece)))
    return "".join(out)


def render_markdown(source: str) -> str:
    """The runbook's small Markdown (headings, paragraphs, lists, `code`, links) as HTML, every text escaped."""
    html, paragraph, items = [], [], []

    def flush():
        if paragraph:
            html.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if items:
            html.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in source.splitlines():
        stripped = line.strip()
        heading = re.match(r"(#{1,4})\s+(.*)", stripped)
        if heading:
            flush()
            level, title = min(len(heading.group(1)) + 1, 5), heading.group(2)
            html.append(f'<h{level} id="{slug(title)}">{_inline(title)}</h{level}>')
        elif re.match(r"[-*]\s+", stripped):
            if paragraph:
                flush()
            items.append(re.sub(r"^[-*]\s+", "", stripped))
        elif not stripped:
            flush()
        elif items and line.startswith("  "):
            items[-1] += " " + stripped
        else:
            if items:
                flush()
            paragraph.append(stripped)
    flush()
    return "\n".join(html)


@require_GET
@member_required("alerts.read")
def runbook(request):
    """docs/RUNBOOK.md: what to check for each condition (the demo rules' runbook links point here)."""
    text = RUNBOOK.read_text() if RUNBOOK.exists() else "# Runbook\n\nNo docs/RUNBOOK.md in this installation."
    return render(request, "alerts/runbook.html", {"runbook": mark_safe(render_markdown(text))})
