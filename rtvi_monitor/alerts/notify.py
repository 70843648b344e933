"""Where a rule's alerts go, and what each place is sent: plain functions, no I/O.

A rule sends to its own `webhook_url` and `email` (the first two kinds
below) and to its AlertChannel rows. Every message starts as the generic
webhook body (`alerts.payload`: the rule, the alert, its figures, agent,
sessions, links); each kind turns it into its own request here, and
rtvi_monitor/alerts/rules.py sends them.

| kind | is told | request |
|---|---|---|
| webhook | fired, reminder, acknowledged, resolved | the generic body, POSTed to the rule's URL |
| email | fired, reminder, resolved | Django's e-mail backend (alerts.send_email) |
| slack | fired, reminder, acknowledged, resolved | an incoming webhook: `text` and `blocks` |
| pagerduty | fired, acknowledged, resolved | Events API v2: trigger, acknowledge, resolve one dedup_key |
| opsgenie | fired, acknowledged, resolved | create, then acknowledge or close by alias |

PagerDuty and Opsgenie escalate by their own policies, so they get no
reminders; they get the acknowledgement and the resolution even while the
alert is silenced, so that their incident follows the dashboard's.
"""

import re
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email

from dashboard.net import guard
from rtvi_monitor.alerts.models import AlertChannel, AlertRule

Kind = AlertChannel.Kind
INCIDENTS = (Kind.PAGERDUTY, Kind.OPSGENIE)  # they keep an incident of their own: it must follow the alert
EVENTS = {
    Kind.WEBHOOK: ("fired", "reminder", "acknowledged", "resolved"),
    Kind.SLACK: ("fired", "reminder", "acknowledged", "resolved"),
    Kind.EMAIL: ("fired", "reminder", "resolved"),
    Kind.PAGERDUTY: ("fired", "acknowledged", "resolved"),
    Kind.OPSGENIE: ("fired", "acknowledged", "resolved"),
}
STATES = {"fired": "FIRING", "reminder": "STILL FIRING", "acknowledged": "ACKNOWLEDGED", "resolved": "RESOLVED"}
PRIORITY = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}  # Opsgenie's, from the severity


@dataclass(frozen=True)
class Target:
    """One place a rule's alerts go: the rule's own webhook or e-mail, or one of its channels."""

    kind: str
    shown: str  # what a page may show: never a key or a Slack hook's path
    address: str = ""  # a URL or an e-mail address
    secret: str = ""  # a routing key or an API key
    channel: AlertChannel | None = None

    @property
    def incident(self) -> bool:
        return self.kind in INCIDENTS


def of_channel(channel: AlertChannel) -> Target:
    address = channel.secret if channel.kind == Kind.SLACK else channel.target
    secret = channel.secret if channel.kind in INCIDENTS else ""
    return Target(channel.kind, channel.masked, address, secret, channel)


def targets(rule: AlertRule) -> list[Target]:
    """Every place `rule` sends to: its webhook_url, its email, then its channels."""
    found = []
    if rule.webhook_url:
        found.append(Target(Kind.WEBHOOK, rule.webhook_url, rule.webhook_url))
    if rule.email:
        found.append(Target(Kind.EMAIL, rule.email, rule.email))
    return found + [of_channel(channel) for channel in rule.channels.all()]


@dataclass
class Request:
    """One HTTP request a message becomes."""

    url: str
    json: dict
    headers: dict = field(default_factory=dict)
    user_url: bool = False  # a URL a rule's author gave: checked against the private network, and pinned
    refuse_4xx: bool = False  # a 4xx (but 408, 429) will not mend with retries: the message is refused
    name: str = ""  # how messages name the receiver
    kind: str = Kind.WEBHOOK  # the outbound metrics' kind of target (dashboard/net/outbound.py)


def slack_text(text: str) -> str:
    """Text as Slack shows it, not as markup: a bot's error cannot ping a channel or disguise a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def is_absolute(url: str | None) -> bool:
    return bool(url) and urlsplit(url).scheme in ("http", "https")


def headline(body: dict) -> str:
    state = "TEST" if body.get("test") else STATES.get(body["event"], body["event"].upper())
    return f"[{state}] {body['rule']['name']}: {body['alert']['summary']}"


def slack(body: dict, url: str) -> Request:
    """An incoming webhook's message: `text` (the notification's words) and Block Kit blocks."""
    alert, rule = body["alert"], body["rule"]
    facts = [f"*Severity:* {body['severity']}"]
    if body.get("agent"):
        facts.append(f"*Agent:* {slack_text(body['agent']['name'])}")
    if body.get("acknowledged"):
        facts.append(f"*Acknowledged by* {slack_text(body['acknowledged']['by'])}")
    if body.get("assignee"):
        facts.append(f"*Owner:* {slack_text(body['assignee'])}")
    if body.get("session_ids"):
        facts.append(f"*Sessions:* {len(body['session_ids'])}")
    buttons = [
        {"type": "button", "text": {"type": "plain_text", "text": text}, "url": link}
        for text, link in (("Open in the dashboard", alert["url"]), ("Runbook", body.get("runbook_url")))
        if is_absolute(link)
    ]
    state = "TEST" if body.get("test") else STATES.get(body["event"], body["event"].upper())
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": f"{state}: {rule['name']}"[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_text(alert["summary"])[:3000]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]},
    ]
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    text = slack_text(headline(body)) + (f" <{alert['url']}>" if is_absolute(alert["url"]) else "")
    return Request(url, {"text": text, "blocks": blocks}, user_url=True, refuse_4xx=True, name="Slack", kind=Kind.SLACK)


PAGERDUTY_ACTIONS = {"fired": "trigger", "reminder": "trigger", "acknowledged": "acknowledge", "resolved": "resolve"}


def pagerduty(body: dict, routing_key: str, action: str | None = None) -> Request:
    """An Events API v2 event: trigger (with the payload and links), acknowledge or resolve one dedup_key."""
    action = action or PAGERDUTY_ACTIONS[body["event"]]
    event = {"routing_key": routing_key, "event_action": action, "dedup_key": body["dedup_key"]}
    if action == "trigger":
        agent = (body.get("agent") or {}).get("name")
        event["payload"] = {
            "summary": headline(body)[:1024],
            "severity": body["severity"],
            "source": agent or body["organization"],
            "component": agent or "",
            "group": body["organization"],
            "class": body["rule"]["condition"],
            "timestamp": body["alert"]["fired_at"],
            "custom_details": {
                "rule": body["rule"],
                "figures": body["figures"],
                "session_ids": body["session_ids"],
                "session_urls": body["session_urls"],
                "runbook_url": body.get("runbook_url"),
                "test": bool(body.get("test")),
            },
        }
        event["client"] = "RTVI dashboard"
        if is_absolute(body["alert"]["url"]):
            event["client_url"] = body["alert"]["url"]
        event["links"] = [
            {"href": href, "text": text}
            for text, href in (
                ("Alert in the RTVI dashboard", body["alert"]["url"]),
                ("Runbook", body.get("runbook_url")),
            )
            if is_absolute(href)
        ]
    return Request(settings.ALERT_PAGERDUTY_URL, event, refuse_4xx=True, name="PagerDuty", kind=Kind.PAGERDUTY)


def opsgenie(body: dict, key: str, action: str | None = None) -> Request:
    """Opsgenie's Alert API: create (alias stable per alert), or acknowledge or close that alias."""
    action = action or {"acknowledged": "acknowledge", "resolved": "close"}.get(body["event"], "create")
    base, alias = settings.ALERT_OPSGENIE_URL, body["dedup_key"]
    headers = {"Authorization": f"GenieKey {key}"}
    if action != "create":
        by = (body.get("acknowledged") or {}).get("by") if action == "acknowledge" else None
        note = f"Acknowledged in the RTVI dashboard by {by}" if by else "Resolved in the RTVI dashboard"
        json = {"source": "RTVI dashboard", "note": note, **({"user": by[:100]} if by else {})}
        url = f"{base}/v2/alerts/{quote(alias, safe='')}/{action}?identifierType=alias"
        return Request(url, json, headers, refuse_4xx=True, name="Opsgenie", kind=Kind.OPSGENIE)
    agent = (body.get("agent") or {}).get("name")
    details = {"rule": body["rule"]["name"], "condition": body["rule"]["condition"], "dashboard": body["alert"]["url"]}
    if body.get("runbook_url"):
        details["runbook"] = body["runbook_url"]
    if body["session_ids"]:
        details["sessions"] = ", ".join(body["session_ids"][:10])
    details.update({f"figure.{k}": str(v)[:200] for k, v in body["figures"].items()})
    lines = [body["alert"]["summary"], "", f"Dashboard: {body['alert']['url']}"]
    if body.get("runbook_url"):
        lines.append(f"Runbook: {body['runbook_url']}")
    lines += [f"Session: {url}" for url in body["session_urls"][:10]]
    json = {
        "message": headline(body)[:130],
        "alias": alias[:512],
        "description": "\n".join(lines)[:15000],
        "details": details,
        "source": "RTVI dashboard",
        "priority": PRIORITY.get(body["severity"], "P3"),
        "tags": [t for t in ("rtvi", body["rule"]["condition"], "test" if body.get("test") else "") if t],
        **({"entity": agent[:512]} if agent else {}),
    }
    return Request(f"{base}/v2/alerts", json, headers, refuse_4xx=True, name="Opsgenie", kind=Kind.OPSGENIE)


def requests_for(target: Target, body: dict) -> list[Request]:
    """The HTTP requests one message to `target` takes (none for e-mail, which is not HTTP)."""
    if target.kind == Kind.SLACK:
        return [slack(body, target.address)]
    if target.kind == Kind.PAGERDUTY:
        return [pagerduty(body, target.secret)]
    if target.kind == Kind.OPSGENIE:
        return [opsgenie(body, target.secret)]
    if target.kind == Kind.WEBHOOK:
        return [Request(target.address, body, user_url=True, name=target.address)]
    return []


def test_requests_for(target: Target, body: dict) -> list[Request]:
    """A test: an incident opened and closed at once (nobody is left with a test incident), else one message."""
    if target.kind == Kind.PAGERDUTY:
        return [pagerduty(body, target.secret, "trigger"), pagerduty(body, target.secret, "resolve")]
    if target.kind == Kind.OPSGENIE:
        return [opsgenie(body, target.secret, "create"), opsgenie(body, target.secret, "close")]
    return requests_for(target, body)


# --- a new channel, checked ---------------------------------------------------------------

KEY = re.compile(r"[A-Za-z0-9_-]{8,200}")
ASKS = {  # what each kind is given, as a form and the API name it
    Kind.SLACK: "url",
    Kind.WEBHOOK: "url",
    Kind.EMAIL: "email",
    Kind.PAGERDUTY: "routing_key",
    Kind.OPSGENIE: "api_key",
}


def private_address(host: str) -> bool:
    """Whether `host` is an IP address no call goes to by default (dashboard/net/guard.py); a name is not."""
    return bool(guard.blocked(host))


def check_url(url: str, name: str = "url", limit: int = 300) -> str:
    """A user-given http(s) URL that does not name the dashboard's own network; ValueError naming `name`."""
    try:
        if not isinstance(url, str) or len(url) > limit:
            raise ValidationError("")
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise ValueError(f"{name}: expected an http(s) URL of at most {limit} characters") from None
    host = urlsplit(url).hostname or ""
    allowed = guard.allowed()  # OUTBOUND_ALLOWED_HOSTS
    if (
        not settings.ALERT_WEBHOOK_ALLOW_PRIVATE
        and (host == "localhost" or private_address(host))
        and not (allowed.names_host(host) or allowed.covers(host))
    ):
        # Names are checked again when a message is sent (dashboard/net/guard.py): they may resolve to anything later.
        raise ValueError(f"{name}: a private or loopback address; set ALERT_WEBHOOK_ALLOW_PRIVATE=true to allow it")
    return url


def new_channel(rule: AlertRule, kind, value) -> AlertChannel:
    """An unsaved channel of `rule` from its kind and the one thing it is given; ValueError saying what is wrong."""
    if kind not in Kind.values:
        raise ValueError(f"kind: expected one of {', '.join(Kind.values)}, got {kind!r}")
    asks = ASKS[kind]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{asks}: a {Kind(kind).label} channel needs its {asks.replace('_', ' ')}")
    value = value.strip()
    if asks == "url":
        url = check_url(value)
        if kind == Kind.SLACK:
            return AlertChannel(rule=rule, kind=kind, secret=url)  # a Slack hook's URL is its password
        return AlertChannel(rule=rule, kind=kind, target=url)
    if asks == "email":
        try:
            validate_email(value)
        except ValidationError:
            raise ValueError("email: expected an e-mail address") from None
        return AlertChannel(rule=rule, kind=kind, target=value[:254])
    if not KEY.fullmatch(value):
        raise ValueError(f"{asks}: expected 8 to 200 letters, digits, '-' or '_'")
    return AlertChannel(rule=rule, kind=kind, secret=value)


def check_runbook(value: str) -> str:
    """A runbook link: an http(s) URL, or a path of this dashboard ("/alerts/runbook/#fatal-errors")."""
    if not value:
        return ""
    if not isinstance(value, str) or len(value) > 500:
        raise ValueError("runbook_url: expected an http(s) URL or a path starting with /, of at most 500 characters")
    if value.startswith("/") and not value.startswith("//") and not re.search(r"[\s\\]", value):
        return value
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError:
        raise ValueError("runbook_url: expected an http(s) URL or a path starting with /") from None
    return value
