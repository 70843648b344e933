"""What people do about an alert: acknowledge it, silence it, give it an owner, write a note.

Plain functions, called by the alerts page's forms and by the JSON API
(rtvi_monitor/alerts/views.py) alike. Each checks what it is given (raising
Refused with words for the person, and the HTTP status), changes the alert
with a conditional update, and writes the audit log.

- Acknowledging says "I have it": it stops re-notification, and PagerDuty,
  Opsgenie, Slack and webhooks are told (the incident platforms even while
  the alert is silenced).
- A silence mutes the alert's notifications to people for a time, or until
  it resolves; minutes 0 lifts it. It does not acknowledge.
- The owner is a member of the alert's organization (any role), or nobody.
- A note is plain text, shown as text.
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dashboard.org import audit
from dashboard.org.models import Membership
from rtvi_monitor.alerts import rules as alerts
from rtvi_monitor.alerts.models import Alert, AlertNote

MAX_SILENCE_MINUTES = 7 * 24 * 60
MAX_NOTE = 4000
SILENCES = [(30, "30 min"), (60, "1 h"), (240, "4 h"), (1440, "24 h")]  # what the page offers


class Refused(ValueError):
    """An action that cannot be done: the message says why; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _target(alert: Alert) -> str:
    return f"alert {alert.pk}: {alert.rule.name}"


def acknowledge(alert: Alert, request) -> Alert:
    """Take a firing alert: who and when are kept, re-notification stops, the channels are told."""
    if alert.status != Alert.Status.FIRING:
        raise Refused("This alert has resolved already; only a firing alert can be acknowledged.", 409)
    if alert.acknowledged_at:
        raise Refused(f"{alert.acknowledged_by} acknowledged this alert already.", 409)
    actor, _, _ = audit.who(request)
    now = timezone.now()
    with transaction.atomic():
        done = Alert.objects.filter(pk=alert.pk, status=Alert.Status.FIRING, acknowledged_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=actor[:200]
        )
        if not done:
            raise Refused("This alert changed meanwhile (resolved, or acknowledged by somebody else).", 409)
        alert.refresh_from_db()
        alerts._queue(alert.rule, alert, "acknowledged", now, silenced=alert.silenced(now))
    audit.record(alert.organization_id, audit.Action.ALERT_ACKNOWLEDGED, _target(alert), request=request)
    return alert


def silence(alert: Alert, request, *, minutes: int | None = None, until_resolved: bool = False) -> Alert:
    """Mute the alert's notifications for `minutes` (0: lift the silence), or until it resolves."""
    if until_resolved:
        if alert.status != Alert.Status.FIRING:
            raise Refused("This alert has resolved already: there is nothing left to silence.", 409)
        fields = {"silenced_until": None, "silenced_until_resolved": True}
        said = {"until": "resolved"}
    else:
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 <= minutes <= MAX_SILENCE_MINUTES:
            raise Refused(f"minutes: expected a whole number from 0 (lift the silence) to {MAX_SILENCE_MINUTES}.")
        if minutes and alert.status != Alert.Status.FIRING:
            raise Refused("This alert has resolved already: there is nothing left to silence.", 409)
        until = timezone.now() + timedelta(minutes=minutes) if minutes else None
        fields = {"silenced_until": until, "silenced_until_resolved": False}
        said = {"minutes": minutes, "until": until.isoformat() if until else None}
    actor, _, _ = audit.who(request)
    lifted = not until_resolved and not minutes
    Alert.objects.filter(pk=alert.pk).update(silenced_by="" if lifted else actor[:200], **fields)
    alert.refresh_from_db()
    audit.record(alert.organization_id, audit.Action.ALERT_SILENCED, _target(alert), request=request, **said)
    return alert


def assign(alert: Alert, request, username: str | None) -> Alert:
    """Give the alert an owner: a member of its organization by username, or nobody (None or "")."""
    user = None
    if username:
        user = (
            get_user_model()
            .objects.filter(
                username=username,
                pk__in=Membership.objects.filter(organization_id=alert.organization_id).values("user_id"),
            )
            .first()
        )
        if user is None:
            raise Refused(f"user: {username!r} is not a member of {alert.organization.name}.")
    Alert.objects.filter(pk=alert.pk).update(assignee=user)
    alert.refresh_from_db()
    audit.record(
        alert.organization_id,
        audit.Action.ALERT_ASSIGNED,
        _target(alert),
        request=request,
        assignee=user.get_username() if user else None,
    )
    return alert


def add_note(alert: Alert, request, text) -> AlertNote:
    """A note by whoever asks (a member, or an API key by its name)."""
    if not isinstance(text, str) or not text.strip():
        raise Refused("text: expected the note's text, a non-empty string.")
    text = text.strip()
    if len(text) > MAX_NOTE:
        raise Refused(f"text: a note is at most {MAX_NOTE} characters; this one has {len(text)}.")
    actor, user, _ = audit.who(request)
    note = AlertNote.objects.create(alert=alert, author=user, author_name=actor[:200], text=text)
    audit.record(alert.organization_id, audit.Action.ALERT_NOTE, _target(alert), request=request, note=note.pk)
    return note


def members(organization) -> list[str]:
    """The usernames an alert of `organization` may be assigned to."""
    return list(
        Membership.objects.filter(organization=organization)
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )
