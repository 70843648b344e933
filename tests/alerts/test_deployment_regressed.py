"""Issue 37's alert: "deployment regressed" fires for an agent whose active deployment waits longer than the one
before beyond the interval from the calls (the agent page's comparison), once both have enough calls; it names
the figure, the change and the calls it took; it resolves when the deployment is rolled back."""

from datetime import timedelta

import pytest
from django.utils import timezone

from rtvi_monitor.alerts import rules as alerts
from rtvi_monitor.alerts.models import Alert, AlertRule
from rtvi_monitor.core.compare import MIN_CALLS
from tests import rtvi_samples as samples
from tests.core.test_turns import agent_sessions

pytestmark = pytest.mark.django_db
AGENT = {"id": "agent-support", "name": "support"}


@pytest.fixture(autouse=True)
def _fresh_figures(settings):
    settings.TURN_STATS_CACHE_SECONDS = 0
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True


def evaluate(rule, active: str):
    rule = AlertRule.objects.select_related("organization", "agent").get(pk=rule.pk)
    context = {"active_deployments": {rule.organization_id: {AGENT["id"]: active}}}
    return alerts.evaluate_rule(rule, timezone.now(), context)


def test_a_slower_active_deployment_fires_once_it_has_enough_calls_and_resolves_on_rollback(org):
    rule = AlertRule.objects.create(
        organization=org,
        name="regressed",
        condition=AlertRule.Condition.DEPLOYMENT_REGRESSED,
        webhook_url="https://hooks.example.com/x",
    )
    pairs = samples.pipecat_conversation_pairs(2)
    agent_sessions(org, AGENT, "v1", "old", pairs, step=0.05, count=MIN_CALLS, age=timedelta(hours=3))
    agent_sessions(org, AGENT, "v2", "new", pairs, step=0.10, count=MIN_CALLS - 1)
    assert evaluate(rule, "v2") == (0, 0)  # too few calls of v2 to say
    agent_sessions(org, AGENT, "v2", "more", pairs, step=0.10, count=1)
    assert evaluate(rule, "v2") == (1, 0)
    (alert,) = Alert.objects.all()
    assert alert.summary.startswith("support: deployment v2 is worse than v1 on ")
    assert f"{MIN_CALLS} and {MIN_CALLS} calls" in alert.summary
    assert alert.figures["after"] == "v2" and alert.figures["worse"][0]["low"] > 0
    assert evaluate(rule, "v2") == (0, 0)  # still firing: one alert
    # Rolled back: v1 is active again; against v2 it is better, not worse.
    assert evaluate(rule, "v1") == (0, 1)


def test_a_deployment_that_waits_the_same_never_fires(org):
    rule = AlertRule.objects.create(
        organization=org,
        name="regressed",
        condition=AlertRule.Condition.DEPLOYMENT_REGRESSED,
        webhook_url="https://hooks.example.com/x",
    )
    pairs = samples.pipecat_conversation_pairs(2)
    agent_sessions(org, AGENT, "v1", "old", pairs, step=0.05, count=MIN_CALLS, age=timedelta(hours=3))
    agent_sessions(org, AGENT, "v2", "new", pairs, step=0.05, count=MIN_CALLS)
    assert evaluate(rule, "v2") == (0, 0)
    assert alerts.levels_text(rule).startswith("fires when an agent's active deployment is worse")
