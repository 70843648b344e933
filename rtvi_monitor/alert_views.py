"""Alerts for people and scripts: the alerts page, and `GET/POST /api/alerts/rules/` and `GET /api/alerts/`.

Rules are edited in the admin or through the API (a private API key; a
member's browser session may read). The engine that fires them is
rtvi_monitor/alerts.py.
"""

import json
import math
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard import audit
from dashboard.auth import bearer_token, key_or_member_required, member_required
from dashboard.http import StrictJsonResponse, json_error, json_methods
from dashboard.models import Agent, Role
from rtvi_monitor.alerts import DEFAULTS, private_address, settings_of
from rtvi_monitor.models import Alert, AlertRule, webhook_host

MAX_WINDOW = 7 * 24 * 60
FIELDS = {"name", "condition", "agent", "threshold", "window_minutes", "webhook_url", "email", "enabled"}


class BadRule(ValueError):
    """A rule the API cannot take; the message names the field."""


def _admin(request) -> bool:
    """A key, or an admin's login: sees webhook addresses whole (a Slack hook's path is its password)."""
    membership = getattr(request, "membership", None)
    return membership is None or membership.role == Role.ADMIN


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
        "enabled": rule.enabled,
        "created_at": rule.created_at.isoformat(),
    }


def alert_json(alert: Alert, sees_contents: bool = True, whole: bool = True) -> dict:
    """An alert; for viewers without what a bot's error said, for non-admins without webhook addresses."""
    figures = alert.figures if sees_contents else {k: v for k, v in alert.figures.items() if k != "errors"}
    return {
        "id": alert.pk,
        "rule": alert.rule_id,
        "rule_name": alert.rule.name,
        "condition": alert.rule.condition,
        "status": alert.status,
        "agent": str(alert.agent_id) if alert.agent_id else None,
        "summary": alert.summary if sees_contents else alert.masked_summary,
        "figures": figures,
        "session_ids": alert.session_ids,
        "fired_at": alert.fired_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
        "deliveries": [
            {
                "event": d.event,
                "channel": d.channel,
                "target": d.target if whole or d.channel != "webhook" else webhook_host(d.target),
                "status": d.status,
                "attempts": d.attempts,
                "last_error": d.last_error,
                "sent_at": d.sent_at.isoformat() if d.sent_at else None,
            }
            for d in alert.deliveries.all()
        ],
    }


def parse_rule(organization, body) -> AlertRule:
    """An unsaved rule from a JSON body, or BadRule saying which field is wrong and why."""
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
        if threshold < 0 or (condition == AlertRule.Condition.ERROR_RATE and threshold > 100):
            raise BadRule("threshold: out of range (error_rate takes a percentage, 0-100; others are ≥ 0)")
        if DEFAULTS[condition][0] is None:
            raise BadRule(f"threshold: {condition} takes none (its window_minutes says when it fires)")
        rule.threshold = float(threshold)
    window = body.get("window_minutes")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
            raise BadRule(f"window_minutes: expected a whole number from 1 to {MAX_WINDOW}")
        rule.window_minutes = window
    rule.webhook_url = _string(
        body, "webhook_url", 200, URLValidator(schemes=["http", "https"]), "an http(s) URL of at most 200 characters"
    )
    host = urlsplit(rule.webhook_url).hostname or ""
    if rule.webhook_url and not settings.ALERT_WEBHOOK_ALLOW_PRIVATE and (host == "localhost" or private_address(host)):
        # Names are checked again when a webhook is sent: they may resolve to anything later.
        raise BadRule("webhook_url: a private or loopback address; set ALERT_WEBHOOK_ALLOW_PRIVATE=true to allow it")
    rule.email = _string(body, "email", 254, validate_email, "an e-mail address")
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise BadRule("enabled: expected true or false")
    rule.enabled = enabled
    return rule


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


@json_methods("GET", "POST")
@key_or_member_required
def alert_rules(request):
    """GET: the organization's rules. POST (private API key only): create one."""
    if request.method == "GET":
        rules = AlertRule.objects.filter(organization=request.organization)
        return StrictJsonResponse({"rules": [rule_json(r, _admin(request)) for r in rules]})
    if not bearer_token(request):
        # A browser session could be made to post by another site: creating rules takes the key.
        return json_error("Creating rules takes 'Authorization: Bearer <private API key>'.", 403)
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        return json_error("The body is not JSON.", 400)
    try:
        rule = parse_rule(request.organization, body)
    except BadRule as exc:
        return json_error(str(exc), 400)
    rule.save()
    audit.record(
        request.organization, audit.Action.RULE_CHANGED, f"alert rule: {rule.name}", request=request, fields=["created"]
    )
    return StrictJsonResponse(rule_json(rule), status=201)


@json_methods("GET")
@key_or_member_required
def alert_list_json(request):
    """GET /api/alerts/?status=firing|resolved: the newest 200 alerts, with their deliveries."""
    status = request.GET.get("status", "")
    alerts = Alert.objects.filter(organization=request.organization)
    if status:
        if status not in Alert.Status.values:
            return json_error(f"status: expected one of {', '.join(Alert.Status.values)}, got {status!r}", 400)
        alerts = alerts.filter(status=status)
    alerts = alerts.select_related("rule").prefetch_related("deliveries")[:200]
    return StrictJsonResponse({"alerts": [alert_json(a, request.sees_contents, _admin(request)) for a in alerts]})


@require_GET
@member_required
def alert_list(request):
    """The alerts page: what fires now, what fired before, and whether each delivery went."""
    organization = request.organization
    alerts = (
        Alert.objects.filter(organization=organization).select_related("rule", "agent").prefetch_related("deliveries")
    )
    return render(
        request,
        "rtvi_monitor/alert_list.html",
        {
            "organization": organization,
            "firing": [a for a in alerts.filter(status=Alert.Status.FIRING)],
            "history": list(alerts.filter(status=Alert.Status.RESOLVED)[:100]),
            "rules": AlertRule.objects.filter(organization=organization).select_related("agent"),
        },
    )
