"""Alerts: rules evaluated continuously, each alert fired once, resolved when it clears, and delivered.

Every server process runs `run()` on its event loop, off the ingest path
(its own database thread; the writer is never touched). Each round, the
process that holds the "alerts" lease (a row in the shared database, taken
over only once its holder stops renewing it) evaluates every enabled rule and
sends the deliveries that are due; the others only try to take the lease.
A firing alert is unique per (rule, key) in the database too, so even a
lease handed over mid-round cannot fire one twice; each delivery is claimed
by a conditional update before it is sent.

Conditions (threshold and window_minutes default as in thresholds.py's DEFAULTS):

- fatal_error: a session had a fatal error within the window. One alert per
  rule; later fatal sessions join it; it resolves when a window passes with none.
- error_rate: the share of sessions started within the window that had an
  error is above `threshold` percent (at least MIN_SESSIONS sessions).
- turn_latency_p95_ms: an agent's turn latency by call p95 (core/figure_names.py BY_CALL: the 95th
  percentile of the sessions' own p95s) over the sessions active within the window is above `threshold`
  ms. One alert per agent.
- no_sessions_minutes: an agent that usually has sessions (at least
  `threshold` in the 24 hours before the window) has had none start within
  the window, and has none live. One alert per agent.
- agents_api_down: the agents API has been failing for `window_minutes`.
- deployment_regressed: an agent's active deployment is worse than the one before on a stage of the wait or
  the turn latency, at p50 or p95, beyond the interval from the calls themselves (the agent page's
  comparison, rtvi_monitor/sessions/fleet.py compare_calls, over the calls of the last 24 hours, or 7
  days for a window over a day). It judges once both have enough calls (compare.MIN_CALLS); one alert per
  agent; it resolves when no figure is worse (a rollback, a fix).

Each alert is delivered where its rule says (rtvi_monitor/alerts/notify.py:
the rule's webhook and e-mail, Slack, PagerDuty, Opsgenie) when it fires, when
somebody acknowledges it, and when it resolves; while it fires unacknowledged
and not silenced, again every `renotify_minutes` (`remind_due`). A silenced
alert sends nothing to people until its silence ends; PagerDuty and Opsgenie
still hear of its acknowledgement and resolution, so that their incident
closes with it. What people do about an alert is rtvi_monitor/alerts/actions.py.
"""

import asyncio
import logging
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from dashboard.agents import service as agents_service
from dashboard.agents.models import Agent
from dashboard.net import outbound
from dashboard.org.models import Organization
from dashboard.web.display import duration_text
from rtvi_monitor.alerts import notify as alert_channels
from rtvi_monitor.alerts.models import Alert, AlertChannel, AlertDelivery, AlertRule
from rtvi_monitor.alerts.notify import Target, slack_text
from rtvi_monitor.alerts.thresholds import settings_of
from rtvi_monitor.core.compare import MIN_CALLS
from rtvi_monitor.core.figure_names import BY_CALL
from rtvi_monitor.core.reducer.turns import percentile
from rtvi_monitor.live.dbthread import ALERTS_THREAD, in_db_thread, start_once
from rtvi_monitor.live.models import Lease
from rtvi_monitor.live.registry import SERVER_ID
from rtvi_monitor.sessions.error_groups import error_groups
from rtvi_monitor.sessions.fleet import agent_turn_figures
from rtvi_monitor.sessions.models import HAS_ERRORS, EndKind, Session

logger = logging.getLogger(__name__)

C = AlertRule.Condition
MIN_SESSIONS = 5  # error_rate and turn latency need this many sessions in the window: 1 of 1 is not a rate
SESSIONS_NAMED = 20  # session ids an alert names
LEASE = "alerts"
CLAIM = timedelta(seconds=60)  # a delivery being sent is held this long (far over a webhook's timeouts)
DELIVERIES_PER_ROUND = 20


@dataclass
class Finding:
    """A rule's condition holding for one key (an agent, or the organization): what to say about it."""

    key: str
    summary: str
    figures: dict
    session_ids: list[str] = field(default_factory=list)
    agent_id: str | None = None


# --- evaluation (database thread) ---------------------------------------------------


def _sessions(rule: AlertRule):
    queryset = Session.objects.calls().filter(organization_id=rule.organization_id)
    return queryset.filter(agent_key=rule.target_agent) if rule.target_agent else queryset


def _fatal_error(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    # When the fatal errors were received (not how long their sessions go on): the stored messages.
    groups = [
        g
        for g in error_groups(rule.organization, now, timedelta(minutes=window))
        if g.fatal and (not rule.target_agent or g.agent_id == rule.target_agent)
    ]
    if not groups:
        return []
    sessions = list(dict.fromkeys(sid for g in sorted(groups, key=lambda g: -g.last_at) for sid in g.sessions))
    agents = sorted({(g.agent_name or g.agent_id) if g.agent_id else "no agent" for g in groups})
    errors = sum(g.count for g in groups)
    # Counts and ids, never what the errors said: a bot's error can quote its caller, and an alert outlives
    # the call (resolved, kept for keep_alerts_days), goes to Slack, e-mail and PagerDuty, and is read by
    # viewers. Holding no words, it has nothing an erase or a purge must reach; the sessions named say the rest.
    many, plural, kinds = "s" if len(sessions) > 1 else "", "s" if errors > 1 else "", len(groups)
    summary = f"Fatal error in {len(sessions)} session{many} ({', '.join(agents)}): {errors} error{plural}"
    summary += f" of {kinds} kinds" if kinds > 1 else ""
    figures = {"sessions": len(sessions), "fatal_errors": errors, "kinds": kinds, "window_minutes": window}
    agent = rule.target_agent
    return [Finding("", summary, figures, sessions[:SESSIONS_NAMED], agent)]


# Hysteresis: a firing alert clears only once its figure is this share of its threshold or less,
# so a figure hovering at the threshold does not fire and resolve every round. The comparisons below and
# the words the pages show (levels_text) both take it from here.
CLEAR_AT = 0.8


def _above(figure: float, threshold: float, firing: bool) -> bool:
    """A rate or a latency holds: above the threshold to fire; once firing, above CLEAR_AT of it to stay."""
    return figure > (threshold * CLEAR_AT if firing else threshold)


def _at_least(count: int, threshold: float, firing: bool) -> bool:
    """A count holds: at least the threshold to fire; once firing, at least CLEAR_AT of it to stay."""
    return count >= (threshold * CLEAR_AT if firing else threshold)


def levels_text(rule: AlertRule) -> str:
    """When a rule's alert fires and when it resolves, in words, from the same comparisons and CLEAR_AT as
    the evaluation: "fires above 20 %; resolves at 16 % or below". The pages show it beside the figure an
    alert fired on, so that a figure between the two (18 %, still firing) reads as the rule, not a fault."""
    threshold, window = settings_of(rule)
    if rule.condition == C.ERROR_RATE:
        return f"fires above {threshold:g} %; resolves at {threshold * CLEAR_AT:g} % or below"
    if rule.condition == C.TURN_LATENCY_P95:
        fires, clears = duration_text(threshold), duration_text(threshold * CLEAR_AT)
        return f"fires above {fires}; resolves at {clears} or below"
    if rule.condition == C.ENDED_BADLY:
        # Whole sessions: the fewest that hold, and the most that are short of CLEAR_AT of the threshold.
        fires, clears = math.ceil(threshold), math.ceil(threshold * CLEAR_AT) - 1
        return f"fires at {fires} sessions or more in {window} min; resolves at {clears} or fewer"
    if rule.condition == C.FATAL_ERROR:
        return f"fires on a fatal error; resolves once {window} min pass with none"
    if rule.condition == C.NO_SESSIONS:
        return (
            f"fires when an agent with {threshold:g} or more sessions in the 24 h before has none for {window} min; "
            "resolves when it has one"
        )
    if rule.condition == C.DEPLOYMENT_REGRESSED:
        return (
            f"fires when an agent's active deployment is worse than the one before (a wait beyond its interval, a share"
            f" of calls with barge-ins, errors or bad ends beyond chance), once both have {MIN_CALLS} calls; resolves"
            " when nothing is worse"
        )
    return f"fires when the agents API has failed for {window} min; resolves when it answers"


def _error_rate(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding] | None:
    sessions = _sessions(rule).filter(started_at__gte=now - timedelta(minutes=window))
    total = sessions.count()
    if total < MIN_SESSIONS:
        return None  # too few sessions to say either way: nothing fires, nothing resolves
    bad = sessions.filter(HAS_ERRORS)
    with_errors = bad.count()
    percent = round(100 * with_errors / total, 1)
    if not _above(percent, threshold, "" in context.get("firing", ())):
        return []
    ids = list(bad.order_by("-started_at").values_list("session_id", flat=True)[:SESSIONS_NAMED])
    who = f" of {rule.target_agent_name}" if rule.target_agent else ""
    summary = f"{percent:g} % of sessions{who} had errors in the last {window} min ({with_errors} of {total})"
    figures = {"percent": percent, "with_errors": with_errors, "sessions": total, "threshold_percent": threshold}
    return [Finding("", summary, figures, ids, rule.target_agent)]


def _turn_latency(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    since = now - timedelta(minutes=window)
    rows = (
        _sessions(rule)
        .exclude(agent_key="")
        .filter(latency_p95_ms__isnull=False)
        .filter(Q(started_at__gte=since) | Q(last_event_at__gte=since))
        .values_list("agent_key", "agent_name", "session_id", "latency_p95_ms")
    )
    by_agent: dict[str, list] = {}
    for agent_id, name, session_id, p95 in rows:
        by_agent.setdefault(agent_id, []).append((p95, session_id, name or agent_id))
    findings = []
    for agent_id, sessions in by_agent.items():
        if len(sessions) < MIN_SESSIONS and agent_id not in context.get("firing", ()):
            continue  # the p95 of two calls is the slower one: too few to say the agent is slow
        sessions.sort(reverse=True)
        p95 = percentile(sorted(s[0] for s in sessions), 95)
        if p95 is None or not _above(p95, threshold, agent_id in context.get("firing", ())):
            continue
        name = sessions[0][2]
        summary = (
            # By call, as the Overview's figure of the same name: each session's own p95, then their 95th percentile.
            f"{name}: {BY_CALL.name.lower()} p95 {duration_text(p95)} over the last {window} min "
            f"(threshold {duration_text(threshold)})"
        )
        figures = {"p95_ms": round(p95, 1), "threshold_ms": threshold, "sessions": len(sessions)}
        slowest = [s[1] for s in sessions[:SESSIONS_NAMED]]
        findings.append(Finding(agent_id, summary, figures, slowest, agent_id))
    return findings


def _no_sessions(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    since = now - timedelta(minutes=window)
    baseline = (
        _sessions(rule)
        .exclude(agent_key="")
        .exclude(agent__deleted_at__isnull=False)  # a built-in agent deleted since
        .filter(started_at__gte=since - timedelta(hours=24), started_at__lt=since)
        .values_list("agent_key", "agent_name")
    )
    usual: dict[str, list] = {}
    for agent_id, name in baseline:
        usual.setdefault(agent_id, [name or agent_id, 0])[1] += 1
    recent = set(
        _sessions(rule)
        .filter(Q(started_at__gte=since) | Q(status=Session.Status.LIVE))
        .values_list("agent_key", flat=True)
    )
    findings = []
    for agent_id, (name, count) in usual.items():
        if count >= threshold and agent_id not in recent:
            summary = f"{name}: no session in the last {window} min (it had {count} in the 24 h before)"
            findings.append(
                Finding(agent_id, summary, {"sessions_before": count, "window_minutes": window}, [], agent_id)
            )
    return findings


def _ended_badly(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    """Sessions whose bot vanished or whose server process stopped, ended in the window.

    Fatal errors have their own condition (they name the error); these are
    the calls that stopped without anybody saying why.
    """
    kinds = (EndKind.BOT_VANISHED, EndKind.SERVER_RESTARTED)
    rows = list(
        _sessions(rule)
        .filter(status=Session.Status.ENDED, end_kind__in=kinds, ended_at__gte=now - timedelta(minutes=window))
        .order_by("-ended_at")
        .values_list("session_id", "end_kind")
    )
    if not _at_least(len(rows), threshold, "" in context.get("firing", ())):
        return []
    by_kind = {kind.label: sum(1 for _, k in rows if k == kind) for kind in kinds}
    how = ", ".join(f"{label}: {n}" for label, n in by_kind.items() if n)
    who = f" of {rule.target_agent_name}" if rule.target_agent else ""
    summary = f"{len(rows)} sessions{who} ended badly in the last {window} min ({how})"
    figures = {"sessions": len(rows), **{k.value: by_kind[k.label] for k in kinds}, "window_minutes": window}
    return [
        Finding(
            "",
            summary,
            figures,
            [sid for sid, _ in rows[:SESSIONS_NAMED]],
            rule.target_agent,
        )
    ]


def _agents_api_down(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    failing = context.get("agents_api", {}).get(rule.organization_id)
    if failing is None:
        return []
    since, error = failing
    minutes = (now.timestamp() - since) / 60
    if minutes < window:
        return []
    summary = f"The agents API has been failing for {minutes:.0f} min: {error}"
    return [Finding("", summary, {"failing_minutes": round(minutes, 1), "error": error})]


def _uuid(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


def _worse_words(row: dict) -> str:
    """One worse row of the deployment comparison in words, with the calls it took."""
    if row["change"]:
        found = row["change"]
        return (
            f"{row['label'].lower()} p{row['q']} ({duration_text(found['a'])} to {duration_text(found['b'])},"
            f" at least +{found['low']:.0f} ms; {found['calls'][1]} and {found['calls'][0]} calls)"
        )
    rate = row["rate"]
    return (
        f"{row['label'].lower()} ({rate['a']:.0%} to {rate['b']:.0%} of {rate['calls'][0]} and"
        f" {rate['calls'][1]} calls)"
    )


def _deployment_regressed(rule: AlertRule, now: datetime, threshold, window: int, context: dict) -> list[Finding]:
    period = "24h" if window <= 24 * 60 else "7d"
    active = context.get("active_deployments", {}).get(rule.organization_id, {})
    agents = (
        [(rule.target_agent, rule.target_agent_name)]
        if rule.target_agent
        else _sessions(rule)
        .exclude(agent_key="")
        .filter(started_at__gte=now - timedelta(days=1 if period == "24h" else 7))
        .values_list("agent_key", "agent_name")
        .distinct()
    )
    findings, seen = [], set()
    for agent_id, name in agents:
        if agent_id in seen:
            continue
        seen.add(agent_id)
        change = agent_turn_figures(rule.organization, agent_id, period, now, active.get(agent_id))["change"]
        worse = [row for row in (change or {}).get("rows", ()) if row["verdict"] == "worse"]
        if not worse:
            continue
        summary = (
            f"{name or agent_id}: deployment {change['after']} is worse than {change['before']} on "
            f"{_worse_words(worse[0])}" + (f" and {len(worse) - 1} more" if len(worse) > 1 else "")
        )
        figures = {
            "before": change["before"],
            "after": change["after"],
            "worse": [{"figure": r["figure"], "q": r["q"], **(r["change"] or r["rate"])} for r in worse],
        }
        findings.append(Finding(agent_id, summary, figures, [], agent_id))
    return findings


EVALUATE = {
    C.FATAL_ERROR: _fatal_error,
    C.ERROR_RATE: _error_rate,
    C.TURN_LATENCY_P95: _turn_latency,
    C.NO_SESSIONS: _no_sessions,
    C.AGENTS_API_DOWN: _agents_api_down,
    C.ENDED_BADLY: _ended_badly,
    C.DEPLOYMENT_REGRESSED: _deployment_regressed,
}


def evaluate_rule(rule: AlertRule, now: datetime, context: dict) -> tuple[int, int]:
    """Fire what newly holds, update what still does, resolve what cleared. Returns (fired, resolved)."""
    threshold, window = settings_of(rule)
    firing = {a.key: a for a in Alert.objects.filter(rule=rule, status=Alert.Status.FIRING)}
    found = EVALUATE[rule.condition](rule, now, threshold, window, {**context, "firing": set(firing)})
    if found is None:
        return 0, 0  # the condition cannot be judged now: what fires goes on firing
    findings = {f.key: f for f in found}
    # An alert names its agent's built-in row when it has one; an agent of Pipecat Cloud's list has none
    # (its id is the alert's key and its name is in the summary).
    built_in = {
        str(pk)
        for pk in Agent.objects.filter(
            organization_id=rule.organization_id, pk__in=[pk for pk in map(_uuid, (f.agent_id for f in found)) if pk]
        ).values_list("pk", flat=True)
    }
    fired = resolved = 0
    for key, finding in findings.items():
        alert = firing.get(key)
        if alert is not None:
            names = list(dict.fromkeys([*finding.session_ids, *alert.session_ids]))[: SESSIONS_NAMED * 5]
            Alert.objects.filter(pk=alert.pk).update(
                summary=finding.summary[:500], figures=finding.figures, session_ids=names
            )
            continue
        try:
            with transaction.atomic():
                alert = Alert.objects.create(
                    rule=rule,
                    organization_id=rule.organization_id,
                    agent_id=finding.agent_id if finding.agent_id in built_in else None,
                    key=key,
                    fired_at=now,
                    summary=finding.summary[:500],
                    figures=finding.figures,
                    session_ids=finding.session_ids,
                    notified_at=now,
                )
                _queue(rule, alert, "fired", now)
        except IntegrityError:
            continue  # another process fired it a moment ago: one alert, one delivery
        fired += 1
    for key, alert in firing.items():
        if key in findings:
            continue
        with transaction.atomic():
            if Alert.objects.filter(pk=alert.pk, status=Alert.Status.FIRING).update(
                status=Alert.Status.RESOLVED, resolved_at=now
            ):
                alert.refresh_from_db()  # its silence as it is now, not as the round began
                _queue(rule, alert, "resolved", now, silenced=alert.silenced(now) or alert.silenced_until_resolved)
                resolved += 1
    return fired, resolved


def _queue(
    rule: AlertRule, alert: Alert, event: str, now: datetime, *, silenced: bool = False, incidents_only: bool = False
) -> int:
    """A delivery of `event` to each of the rule's places that is told of it; while silenced only the incidents."""
    queued = 0
    for target in alert_channels.targets(rule):
        if event not in alert_channels.EVENTS[target.kind]:
            continue
        if (silenced or incidents_only) and not target.incident:
            continue
        AlertDelivery.objects.create(
            alert=alert,
            event=event,
            channel=target.kind,
            target=target.shown[:300],
            alert_channel=target.channel,
            next_attempt_at=now,
        )
        queued += 1
    return queued


def remind_due(now: datetime) -> int:
    """Re-notify every firing alert whose rule says so, that nobody acknowledged or silenced, once its time came.

    The time is `renotify_minutes` after it was last told (fired, or the last
    reminder); a silence that ended leaves it due at once. Claimed with a
    conditional update, so two processes never remind twice. Returns how many.
    """
    not_silenced = Q(silenced_until_resolved=False) & (Q(silenced_until__isnull=True) | Q(silenced_until__lte=now))
    due = (
        Alert.objects.filter(
            status=Alert.Status.FIRING,
            acknowledged_at__isnull=True,
            rule__enabled=True,
            rule__renotify_minutes__gt=0,
        )
        .filter(not_silenced)
        .select_related("rule")
    )
    reminded = 0
    for alert in due:
        last = alert.notified_at or alert.fired_at
        if now < last + timedelta(minutes=alert.rule.renotify_minutes):
            continue
        with transaction.atomic():
            if Alert.objects.filter(pk=alert.pk, status=Alert.Status.FIRING, notified_at=alert.notified_at).update(
                notified_at=now
            ):
                _queue(alert.rule, alert, "reminder", now)
                reminded += 1
    return reminded


def evaluate_all(now: datetime, context: dict) -> tuple[int, int]:
    """Every enabled rule of every organization; one failing rule never stops the others."""
    # A rule switched off stops firing (quietly: nobody is told about a rule they turned off, but
    # PagerDuty and Opsgenie close their incident).
    for alert in Alert.objects.filter(status=Alert.Status.FIRING, rule__enabled=False).select_related("rule"):
        with transaction.atomic():
            if Alert.objects.filter(pk=alert.pk, status=Alert.Status.FIRING).update(
                status=Alert.Status.RESOLVED, resolved_at=now
            ):
                _queue(alert.rule, alert, "resolved", now, incidents_only=True)
    fired = resolved = 0
    for rule in AlertRule.objects.filter(enabled=True).select_related("organization", "agent"):
        try:
            f, r = evaluate_rule(rule, now, context)
        except Exception:
            logger.exception("Evaluating alert rule %s (%s) failed", rule.pk, rule.name)
            continue
        fired, resolved = fired + f, resolved + r
    return fired, resolved


# --- the lease --------------------------------------------------------------------


def acquire(name: str, holder: str, ttl: timedelta) -> bool:
    """Take or renew the named lease for `ttl`; False while another live holder has it."""
    now = timezone.now()
    taken = (
        Lease.objects.filter(name=name)
        .filter(Q(holder=holder) | Q(expires_at__lt=now))
        .update(holder=holder, expires_at=now + ttl)
    )
    if taken:
        return True
    try:
        with transaction.atomic():
            Lease.objects.create(name=name, holder=holder, expires_at=now + ttl)
        return True
    except IntegrityError:
        return False


# --- deliveries ---------------------------------------------------------------------


def absolute(path: str) -> str:
    return f"{settings.DASHBOARD_URL}{path}"


def runbook_link(rule: AlertRule) -> str | None:
    """The rule's runbook as a link a notification can carry: a path of this dashboard made absolute."""
    url = rule.runbook_url
    return (absolute(url) if url.startswith("/") else url) or None


def dedup_key(alert: Alert) -> str:
    """PagerDuty's dedup_key and Opsgenie's alias: the same for every message about one alert."""
    return f"rtvi-{alert.organization_id}-alert-{alert.pk}"


def payload(delivery: AlertDelivery) -> dict:
    """What a webhook receives: the rule, the condition, the figures, the agent and the sessions; `text` for Slack."""
    return alert_payload(delivery.alert, delivery.event)


def alert_payload(alert: Alert, event: str) -> dict:
    rule = alert.rule
    link = absolute(reverse("alert_detail", args=[alert.pk]))
    body = {
        "event": event,
        "test": False,
        "status": alert.status,
        "organization": alert.organization.name,
        "severity": rule.effective_severity,
        "dedup_key": dedup_key(alert),
        "rule": _rule_part(rule),
        "alert": {
            "id": alert.pk,
            "summary": alert.summary,
            "fired_at": alert.fired_at.isoformat(),
            "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
            "url": link,
        },
        "runbook_url": runbook_link(rule),
        "acknowledged": (
            {"by": alert.acknowledged_by, "at": alert.acknowledged_at.isoformat()} if alert.acknowledged_at else None
        ),
        "assignee": alert.assignee.get_username() if alert.assignee_id and alert.assignee else None,
        "figures": alert.figures,
        "agent": {"id": str(alert.agent_id), "name": alert.agent.name} if alert.agent_id and alert.agent else None,
        "session_ids": alert.session_ids,
        "session_urls": [absolute(reverse("session_detail", args=[sid])) for sid in alert.session_ids[:SESSIONS_NAMED]],
    }
    return _with_text(body)


def _rule_part(rule: AlertRule) -> dict:
    """The rule as every notification names it."""
    threshold, window = settings_of(rule)
    return {
        "id": rule.pk,
        "name": rule.name,
        "condition": rule.condition,
        "threshold": threshold,
        "window_minutes": window,
    }


def _with_text(body: dict) -> dict:
    link = absolute(reverse("alert_list"))  # where what fires stands first
    text = slack_text(alert_channels.headline(body))
    if body["acknowledged"] and body["event"] == "acknowledged":
        text += slack_text(f" (by {body['acknowledged']['by']})")
    if body["runbook_url"] and body["event"] != "resolved":
        text += f" Runbook: <{body['runbook_url']}>" if alert_channels.is_absolute(body["runbook_url"]) else ""
    return {"text": text + (f" <{link}>" if link.startswith("http") else ""), **body}


def test_payload(rule: AlertRule, by: str) -> dict:
    """A clearly marked test message for `rule`'s places: no alert fires; every field a real one has."""
    now = timezone.now()
    body = {
        "event": "fired",
        "test": True,
        "status": "firing",
        "organization": rule.organization.name,
        "severity": AlertRule.Severity.INFO,
        "dedup_key": f"rtvi-{rule.organization_id}-test-{uuid.uuid4().hex[:12]}",
        "rule": _rule_part(rule),
        "alert": {
            "id": None,
            "summary": f"This is a test notification sent by {by} from the RTVI dashboard; nothing is firing.",
            "fired_at": now.isoformat(),
            "resolved_at": None,
            "url": absolute(reverse("alert_list")),
        },
        "runbook_url": runbook_link(rule),
        "acknowledged": None,
        "assignee": None,
        "figures": {},
        "agent": None,
        "session_ids": [],
        "session_urls": [],
    }
    return _with_text(body)


def claim_due(now: datetime, limit: int = 20) -> list[AlertDelivery]:
    """Deliveries due now, each claimed by this process with a conditional update (so sent once).

    Each comes with its `body` (the webhook payload) built here, on the
    database thread, so that sending it needs no database.
    """
    due = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING, next_attempt_at__lte=now).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    )
    claimed = []
    for pk in due.order_by("next_attempt_at").values_list("pk", flat=True)[:limit]:
        if (
            AlertDelivery.objects.filter(pk=pk, status=AlertDelivery.Status.PENDING)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .update(claimed_until=now + CLAIM)
        ):
            delivery = AlertDelivery.objects.select_related(
                "alert__rule", "alert__organization", "alert__agent", "alert__assignee", "alert_channel"
            ).get(pk=pk)
            delivery.body = payload(delivery)
            claimed.append(delivery)
    return claimed


def record(delivery: AlertDelivery, error: str, now: datetime) -> None:
    """The outcome of one attempt: sent, or retried after a doubling wait, or failed for good."""
    attempts = delivery.attempts + 1
    if not error:
        fields = {"status": AlertDelivery.Status.SENT, "sent_at": now, "last_error": ""}
    elif attempts >= settings.ALERT_DELIVERY_ATTEMPTS or error.startswith(REFUSED):
        fields = {"status": AlertDelivery.Status.FAILED, "last_error": error[:2000]}
    else:
        wait = min(3600.0, settings.ALERT_RETRY_BASE * 2 ** (attempts - 1))
        fields = {"next_attempt_at": now + timedelta(seconds=wait), "last_error": error[:2000]}
    AlertDelivery.objects.filter(pk=delivery.pk).update(attempts=attempts, claimed_until=None, **fields)


def send_email(target: str, body: dict) -> None:
    lines = [body["text"] if not body["test"] else alert_channels.headline(body), ""]
    if body["runbook_url"]:
        lines += [f"Runbook: {body['runbook_url']}", ""]
    if body["acknowledged"]:
        lines += [f"Acknowledged by {body['acknowledged']['by']} at {body['acknowledged']['at']}", ""]
    if body["figures"]:
        lines += ["Figures:", *(f"  {k}: {v}" for k, v in body["figures"].items())]
    if body["session_urls"]:
        lines += ["", "Sessions:", *(f"  {url}" for url in body["session_urls"])]
    state = "test" if body["test"] else body["event"]
    subject = f"[RTVI {state}] {body['rule']['name']}: {body['alert']['summary']}"[:200]
    send_mail(subject, "\n".join(lines), settings.DEFAULT_FROM_EMAIL, [target])


REFUSED = "refused: "  # an error no retry can mend


def target_of(delivery: AlertDelivery) -> Target | None:
    """Where a delivery goes: the rule's own webhook or e-mail (its target), or its channel (None once removed)."""
    if delivery.alert_channel_id is None:
        if delivery.channel in (AlertChannel.Kind.WEBHOOK, AlertChannel.Kind.EMAIL):
            return Target(delivery.channel, delivery.target, delivery.target)
        return None
    return alert_channels.of_channel(delivery.alert_channel)


async def post(request: alert_channels.Request) -> tuple[str, str]:
    """One request sent: ('', the receiver's answer) or (what went wrong, the answer if any).

    Through the outbound client (dashboard/net/outbound.py). A rule author's URL (`user_url`) is
    checked unless ALERT_WEBHOOK_ALLOW_PRIVATE: every address its host resolves to must be public (a
    rule's author must not reach the dashboard's own network: Redis, PostgreSQL, cloud metadata), and
    the POST goes to the address checked. PagerDuty's and Opsgenie's URLs are the operator's settings.
    A POST is tried again at once only if it was never sent (no connection); the delivery's own
    retries (ALERT_DELIVERY_ATTEMPTS) do the rest. No redirects: a public URL must not bounce it
    inside the network.
    """
    timeout = settings.ALERT_WEBHOOK_TIMEOUT
    try:
        response = await outbound.post(
            request.url,
            kind=request.kind,
            json=request.json,
            headers=request.headers,
            timeouts=outbound.Timeouts(connect=timeout, read=timeout, total=2 * timeout),
            retries=1,
            guard=request.user_url and not settings.ALERT_WEBHOOK_ALLOW_PRIVATE,
        )
    except outbound.Refused as exc:
        hint = "or set ALERT_WEBHOOK_ALLOW_PRIVATE=true to allow webhooks inside your network"
        return f"{REFUSED}{exc}, {hint}", ""
    except outbound.OutboundError as exc:
        return str(exc), ""
    answer = f"HTTP {response.status_code}: {response.text[:500]}"
    if response.is_success:
        return "", answer
    code = response.status_code
    refused = REFUSED if request.refuse_4xx and 400 <= code < 500 and code not in (408, 429) else ""
    return f"{refused}HTTP {code} from {request.name}" + (f": {response.text[:300]}" if refused else ""), answer


async def send(target: Target, body: dict, *, test: bool = False) -> tuple[str, list[str]]:
    """One message to one place: ('' or what went wrong, the receivers' answers)."""
    answers = []
    try:
        if target.kind == AlertChannel.Kind.EMAIL:
            await asyncio.to_thread(send_email, target.address, body)
            return "", [f"handed to the e-mail backend for {target.address}"]
        requests = (alert_channels.test_requests_for if test else alert_channels.requests_for)(target, body)
        for request in requests:
            error, answer = await post(request)
            answers.append(answer or error)
            if error:
                return error, answers
        return "", answers
    except Exception as exc:  # every way a delivery fails is recorded and retried
        return f"{type(exc).__name__}: {exc}"[:2000], answers


async def deliver(delivery: AlertDelivery) -> str:
    """Send one claimed delivery; returns '' when it went, or what went wrong."""
    target = target_of(delivery)
    if target is None:
        return f"{REFUSED}its channel was removed"
    error, _ = await send(target, delivery.body)
    return error


async def send_test(target: Target, body: dict) -> tuple[str, list[str]]:
    """A test message sent now (a test-send button): what went wrong if anything, and each answer."""
    return await send(target, body, test=True)


# --- the loop -----------------------------------------------------------------------


def _watched_organizations() -> list[Organization]:
    """Organizations with an agents_api_down or deployment_regressed rule: their agents API is asked about every
    round (its cached answer: the agents service's)."""
    watched = (C.AGENTS_API_DOWN, C.DEPLOYMENT_REGRESSED)
    ids = AlertRule.objects.filter(enabled=True, condition__in=watched).values("organization_id")
    return list(Organization.objects.filter(pk__in=ids))


async def failing_context(organizations) -> dict:
    """For agents_api_down rules: which organizations' agents API is failing, since when and how; for
    deployment_regressed, each agent's active deployment as the agents API says (its last good answer)."""
    failing, active = {}, {}
    for organization in organizations:
        status = await agents_service.failing_since(organization)
        if status is not None:
            failing[organization.pk] = status
        listing = await agents_service.get_agents(organization)
        active[organization.pk] = {a.id: a.active_deployment_id for a in listing.agents if a.active_deployment_id}
    return {"agents_api": failing, "active_deployments": active}


async def step() -> bool:
    """One round: if this process holds the lease, evaluate every rule and send what is due. True if it did."""
    interval = settings.ALERT_EVALUATE_INTERVAL
    holder = SERVER_ID
    if not await in_db_thread(acquire, LEASE, holder, timedelta(seconds=3 * interval), executor=ALERTS_THREAD):
        return False
    context = await failing_context(await in_db_thread(_watched_organizations, executor=ALERTS_THREAD))
    fired, resolved = await in_db_thread(lambda: evaluate_all(timezone.now(), context), executor=ALERTS_THREAD)
    reminded = await in_db_thread(lambda: remind_due(timezone.now()), executor=ALERTS_THREAD)
    if fired or resolved or reminded:
        logger.info("Alerts: %d fired, %d resolved, %d reminded", fired, resolved, reminded)
    lease = timedelta(seconds=3 * interval)
    for _ in range(DELIVERIES_PER_ROUND):
        # One at a time, each claimed just before it is sent and the lease renewed before each: a
        # slow receiver can neither outlast a claim nor let another process take over mid-send.
        if not await in_db_thread(acquire, LEASE, holder, lease, executor=ALERTS_THREAD):
            break
        claimed = await in_db_thread(lambda: claim_due(timezone.now(), limit=1), executor=ALERTS_THREAD)
        if not claimed:
            break
        (delivery,) = claimed
        error = await deliver(delivery)
        if error:
            logger.warning("Alert delivery %s (%s) failed: %s", delivery.pk, delivery.target, error)
        await in_db_thread(record, delivery, error, timezone.now(), executor=ALERTS_THREAD)
    return True


async def run() -> None:
    while True:
        try:
            await step()
        except Exception:
            logger.exception("Alert evaluation failed; trying again in %s s", settings.ALERT_EVALUATE_INTERVAL)
        await asyncio.sleep(settings.ALERT_EVALUATE_INTERVAL)


_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def start() -> None:
    """Start evaluating in this process's event loop (idempotent)."""
    start_once(_tasks, run)
