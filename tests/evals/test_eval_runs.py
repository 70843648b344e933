"""Issue 36, part 3 and 4 through the real URLconf: an eval run's results.jsonl uploaded with a write key, linked
to the calls its bots streamed, and the gate's verdict between two deployments (API and pages).

The records are the shape Pipecat 1.14's `pipecat eval` writes (pipecat/evals/suite.py `_scenario_record`);
tests/evals/e2e runs the real harness and uploads its own file.
"""

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from pipecat.evals.results import FAILURE_KINDS
from rtvi_dashboard.wire import TAG_RE

from dashboard.org.models import ApiKey, AuditEntry
from rtvi_monitor.evals import runs
from rtvi_monitor.evals.models import EvalResult, EvalRun
from rtvi_monitor.sessions.models import Session
from tests.conftest import make_member
from tests.evals.test_scenario_export import signed_in
from tests.session_samples import error_event, make_session


def record(scenario="refund/refund", attempt=1, passed=True, kind=None, turn_ms=900, **extra) -> dict:
    failures = (
        []
        if passed
        else [
            {
                "turn_index": 0,
                "expectation_index": 1,
                "event_name": "response",
                "kind": kind or "text_mismatch",
                "reason": "expected 'refund' in: Sorry, the caller's card 4111 is declined",
            }
        ]
    )
    return {
        "bot": "bot.py",
        "name": scenario,
        "scenario": scenario,
        "kind": "script",
        "attempt": attempt,
        "passed": passed,
        "skipped": None,
        "error": None,
        "duration_ms": 2100,
        "failures": failures,
        "turns": [
            {
                "turn_index": 0,
                "status": "passed" if passed else "failed",
                "duration_ms": turn_ms,
                "expectations": [{"expectation_index": 0, "event_name": "response", "passed": passed, "matched": "x"}],
            }
        ],
        "artifacts": {"log": "/tmp/evals/bot__refund.log"},
        **({"events_seen": [{"type": "bot-output", "text": "the caller's card 4111"}]} if not passed else {}),
        **extra,
    }


def jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def key_client(org, scopes="read,write") -> Client:
    record, secret = ApiKey.issue(org, "ci")
    record.scopes = scopes
    record.save()
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def upload(client, data: bytes, agent="support", deployment="v2", run=""):
    query = f"agent={agent}&deployment={deployment}" + (f"&run={run}" if run else "")
    return client.post(f"/api/evals/runs/?{query}", data, content_type="application/x-ndjson")


@pytest.fixture
def agent_call(org):
    return make_session(org, "call-7", agent_key="support", agent_name="Support line", status="ended")


def test_a_write_key_uploads_a_run_and_only_what_holds_no_words_is_kept(org, agent_call):
    answer = upload(key_client(org), jsonl([record(), record(attempt=2, passed=False)]), deployment="v2", run="ci-41")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["results"], body["passed"], body["deployment"], body["label"]) == (2, 1, "v2", "ci-41")
    assert body["url"].endswith("/evals/support/gate/")
    run = EvalRun.objects.get()
    assert (run.agent_key, run.agent_name, run.uploaded_by.startswith("API key")) == ("support", "Support line", True)
    failed = EvalResult.objects.get(passed=False)
    assert failed.failures == [
        {"turn_index": 0, "expectation_index": 1, "event_name": "response", "kind": "text_mismatch"}
    ]
    stored = json.dumps([list(EvalResult.objects.values()), list(EvalRun.objects.values())], default=str)
    assert "4111" not in stored and "refund'" not in stored and "/tmp/evals" not in stored
    entry = AuditEntry.objects.get(action=AuditEntry.Action.EVAL_RUN_UPLOADED)
    assert entry.target == "support@v2" and "4111" not in json.dumps(entry.detail)


def test_every_failure_kind_pipecat_names_is_taken(org, agent_call):
    records = [record(attempt=n, passed=False, kind=kind) for n, kind in enumerate(FAILURE_KINDS, 1)]
    assert upload(key_client(org), jsonl(records)).status_code == 201
    assert {r.failures[0]["kind"] for r in EvalResult.objects.all()} == set(FAILURE_KINDS)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "no record"),
        (b"{not json}\n", "line 1: not JSON"),
        (jsonl([record(), {**record(), "passed": "yes"}]), "line 2: 'passed' must be true or false"),
        (jsonl([{**record(), "attempt": 0}]), "'attempt' must be a whole number, at least 1"),
        (jsonl([{**record(), "kind": "vibes"}]), "'kind' must be one of script, simulation"),
        (jsonl([{**record(), "scenario": "", "name": ""}]), "'scenario' must name the scenario"),
        (jsonl([record(passed=False, kind="<script>")]), "failure's 'kind'"),
        (jsonl([{**record(), "turns": [{"turn_index": 0, "status": "meh"}]}]), "status"),
        (b"\xff\xfe", "not UTF-8"),
        (jsonl([[1, 2]]), "must be a JSON object"),
        (b"[" * 100_000 + b"\n", "line 1"),
    ],
)
def test_a_file_that_is_not_a_results_jsonl_is_refused_saying_where_and_nothing_is_kept(org, agent_call, data, says):
    answer = upload(key_client(org), data)
    assert answer.status_code == 400
    assert says in json.dumps(answer.json()), answer.json()
    assert not EvalRun.objects.exists() and not EvalResult.objects.exists()
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.EVAL_RUN_UPLOADED).exists()


def test_the_upload_names_what_it_needs_and_who_may(org, agent_call, other_org):
    writer = key_client(org)
    assert "Name the agent" in upload(writer, jsonl([record()]), agent="").json()["error"]
    assert "No agent 'nobody'" in upload(writer, jsonl([record()]), agent="nobody").json()["error"]
    assert "deployment" in upload(writer, jsonl([record()]), deployment="").json()["error"]
    assert "deployment" in upload(writer, jsonl([record()]), deployment="v2%0Aevil").json()["error"]
    assert upload(writer, jsonl([record()]), agent="Support%20line").status_code == 201  # by its name too
    assert upload(key_client(org, "read"), jsonl([record()])).status_code == 403
    assert upload(signed_in(org, "viewer", "v"), jsonl([record()])).status_code == 403
    # Another organization's key knows no agent "support": ours is not told apart from none.
    assert upload(key_client(other_org), jsonl([record()])).status_code == 400
    assert EvalRun.objects.filter(organization=other_org).count() == 0
    assert Client().post("/api/evals/runs/?agent=support&deployment=v2", b"{}", "application/json").status_code == 401


def test_an_operators_browser_upload_needs_its_csrf_token(org, agent_call):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_member(org, "op", "operator"))
    refused = upload(client, jsonl([record()]))
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    assert not EvalRun.objects.exists()


def test_results_link_to_the_calls_their_bots_named_attempt_by_attempt(org, agent_call):
    for n, (scenario, started) in enumerate([("refund", 3), ("refund", 1), ("late", 2)]):
        make_session(
            org,
            f"eval-{n}",
            agent_key="support",
            status="ended",
            eval_run="ci-41",
            eval_scenario=scenario,
            started_at=agent_call.started_at.replace(second=started),
        )
    make_session(org, "other-run", agent_key="support", eval_run="ci-40", eval_scenario="refund")
    records = [record("refund/text", 2), record("refund/text", 1), record("late/text", 1), record("gone/text", 1)]
    body = upload(key_client(org), jsonl(records), run="ci-41").json()
    assert body["linked"] == 3
    assert body["unlinked"] == ["gone/text: 1 attempts, 0 calls of run 'ci-41' naming it"]
    linked = {(r.scenario, r.attempt): r.session.session_id for r in EvalResult.objects.exclude(session=None)}
    # Attempt 1 is the scenario's call that started first.
    assert linked == {("refund/text", 1): "eval-1", ("refund/text", 2): "eval-0", ("late/text", 1): "eval-2"}


def test_calls_that_do_not_number_the_attempts_are_left_unlinked_not_guessed(org, agent_call):
    make_session(org, "eval-a", agent_key="support", status="ended", eval_run="r1", eval_scenario="refund")
    body = upload(key_client(org), jsonl([record("refund/text", 1), record("refund/text", 2)]), run="r1").json()
    assert body["linked"] == 0 and "2 attempts, 1 calls" in body["unlinked"][0]


# --- the gate -------------------------------------------------------------------------------------------


def runs_of(org, deployment: str, passes: int, runs_: int, turn_ms: int = 900, scenario="s/refund"):
    records = [record(scenario, n, passed=n <= passes, turn_ms=turn_ms + n) for n in range(1, runs_ + 1)]
    assert upload(key_client(org), jsonl(records), deployment=deployment).status_code == 201


def gate(client, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return client.get(f"/api/evals/support/gate/?{query}")


def test_the_gate_blocks_a_candidate_that_fails_more_and_passes_one_that_does_not(org, agent_call):
    runs_of(org, "v1", 10, 10)
    runs_of(org, "v2-good", 9, 10)
    runs_of(org, "v2-bad", 2, 10)
    reader = key_client(org, "read")
    good = gate(reader, candidate="v2-good", baseline="v1").json()
    bad = gate(reader, candidate="v2-bad", baseline="v1").json()
    assert good["verdict"] == "pass", good["reasons"]
    assert bad["verdict"] == "worse"
    assert (
        bad["reasons"] == [bad["reasons"][0]]
        and "s/refund passes 2 of 10 runs on v2-bad, 10 of 10 on v1" in bad["reasons"][0]
    )
    assert bad["kinds"] == [{"kind": "text_mismatch", "baseline": 0, "candidate": 8}]


def test_the_gate_blocks_a_slower_candidate_on_the_evals_own_clock(org, agent_call):
    runs_of(org, "v1", 10, 10, turn_ms=900)
    runs_of(org, "v2-slow", 10, 10, turn_ms=2400)
    runs_of(org, "v2-same", 10, 10, turn_ms=905)
    reader = key_client(org, "read")
    slow = gate(reader, candidate="v2-slow", baseline="v1").json()
    assert slow["verdict"] == "worse"
    assert any("Scenario turn" in reason and "p50 2405 ms on v2-slow" in reason for reason in slow["reasons"])
    same = gate(reader, candidate="v2-same", baseline="v1").json()
    assert same["verdict"] == "pass"  # 5 ms later every time: beyond chance, not beyond what matters
    assert "less than 50 ms" in same["waits"][0]["note"]


def test_the_gate_says_when_it_cannot_tell_and_what_it_needs(org, agent_call):
    runs_of(org, "v1", 5, 5)
    reader = key_client(org, "read")
    missing = gate(reader, candidate="v9", baseline="v1").json()
    assert missing["verdict"] == "insufficient" and missing["reasons"] == ["no eval results uploaded for v9"]
    assert "Name the candidate" in gate(reader).json()["error"]
    assert "both 'v1'" in gate(reader, candidate="v1", baseline="v1").json()["error"]
    assert gate(reader, candidate="v1", baseline="v1", extra="x").status_code == 400
    assert gate(key_client(org, "read"), candidate="a&candidate=b").status_code == 400  # given twice
    assert Client().get("/api/evals/support/gate/?candidate=v1").status_code == 401


def test_another_organization_sees_no_gate_of_ours(org, agent_call, other_org):
    runs_of(org, "v1", 5, 5)
    runs_of(org, "v2", 0, 5)
    theirs = key_client(other_org, "read")
    assert gate(theirs, candidate="v2", baseline="v1").status_code == 404
    assert signed_in(other_org, "admin", "boss").get("/evals/support/gate/").status_code == 404
    assert theirs.get("/api/evals/support/runs/").status_code == 404
    assert len(key_client(org, "read").get("/api/evals/support/runs/").json()["runs"]) == 2


def test_the_gate_page_and_the_agent_table_show_the_verdict_to_a_viewer(org, agent_call):
    runs_of(org, "v1", 10, 10)
    runs_of(org, "v2-bad", 1, 10)
    viewer = signed_in(org, "viewer", "watcher")
    page = viewer.get("/evals/support/gate/?candidate=v2-bad&baseline=v1")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-verdict="worse"' in html and "1/10" in html and "10/10" in html
    assert "4111" not in html
    assert viewer.get("/evals/support/gate/?candidate=v2-bad&baseline=v2-bad").status_code == 400


def test_checked_names_follow_the_bots_tag_rule():
    for name in ("v2", "production", "ci 41/refund", "a" * 100):
        assert runs.checked_name(name, "x") == name and re.match(TAG_RE, name)
    for name in ("", " ", " v2", "v2 ", "a" * 101, "v2\n", "<b>", "v2;rm"):
        with pytest.raises(runs.Refused):
            runs.checked_name(name, "x")


# --- an eval run's calls are no caller's: the fleet's figures, errors, alerts and /metrics leave them out --


def fleet(org, now) -> dict:
    """What the fleet's pages, alerts and /metrics make of the organization's calls now."""
    from rtvi_monitor.alerts import rules as alerts
    from rtvi_monitor.alerts.models import AlertRule
    from rtvi_monitor.overview.figures import overview
    from rtvi_monitor.sessions.error_groups import error_groups

    figures = overview(org, now)
    rule, _ = AlertRule.objects.get_or_create(
        organization=org,
        name="fatal",
        condition=AlertRule.Condition.FATAL_ERROR,
        defaults={"webhook_url": "https://hooks.example.com/x", "window_minutes": 10},
    )
    rule = AlertRule.objects.select_related("organization", "agent").get(pk=rule.pk)
    metrics = key_client(org, "read").get("/metrics").content.decode()
    return {
        "last_hour": figures["sessions_last_hour"],
        "errors": len(error_groups(org, now, timedelta(hours=1))),
        "alert_fired": alerts.evaluate_rule(rule, now, {})[0],
        "metrics_lines": sum(
            line.startswith("rtvi_sessions") and 'agent="support"' in line for line in metrics.splitlines()
        ),
    }


def test_an_eval_runs_calls_are_not_the_fleets_figures_alerts_or_metrics(org, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    now = timezone.now()
    made = Session.objects.create(
        organization=org,
        session_id="eval-1",
        agent_key="support",
        fatal=True,
        error_count=1,
        last_event_at=now,
        eval_run="ci-41",
        deployment_id="v2-bad",
        end_kind="error",
        ended_at=now,
        status="ended",
    )
    error_event(made, 1, "the candidate crashed on purpose", fatal=True)
    assert fleet(org, now) == {"last_hour": 0, "errors": 0, "alert_fired": 0, "metrics_lines": 0}
    # The same call made by a caller is all of those.
    Session.objects.filter(pk=made.pk).update(eval_run="")
    seen = fleet(org, now)
    assert seen["last_hour"] == 1 and seen["errors"] == 1 and seen["alert_fired"] == 1 and seen["metrics_lines"] > 0


def test_a_record_that_names_its_call_is_linked_to_it_exactly_whatever_the_order(org, agent_call):
    from rtvi_dashboard.evals import eval_session_id, with_sessions

    logs = [f"/tmp/runs/logs/bot.py__refund__refund__text__00{n}.log" for n in (1, 2)]
    for log in reversed(logs):  # started in the other order: the names, not the order, say which is which
        make_session(org, eval_session_id(log), agent_key="support", status="ended", eval_run="ci-9")
    records = [record("refund/text", n, artifacts={"log": log}) for n, log in enumerate(logs, 1)]
    body = upload(key_client(org), with_sessions(jsonl(records)), run="ci-9").json()
    assert body["linked"] == 2 and body["unlinked"] == []
    for result in EvalResult.objects.all():
        assert result.session.session_id == eval_session_id(logs[result.attempt - 1])
    wrong = jsonl([{**record(), "rtvi_dashboard_session": "../../etc"}])
    assert "must be a session id" in upload(key_client(org), wrong).json()["error"]
