"""Issue 36 attacked from outside: eval runs' uploads, their links to calls, the gate (API and pages), the bots'
tags and a client's raw audio, as another organization, a weaker key, a hostile file or a hostile bot would try.

Through the real URLconf (django.test.Client) and the real socket router (tests/sockets.py). Each test says
what must hold; the first two link tests failed before rtvi_monitor/evals/runs.py `_eval_calls`, the raw-audio
ones before rtvi_monitor/sessions/events.py `without_audio` took every field of such a message.
"""

import base64
import json
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client
from django.utils import timezone

from dashboard.asgi import application
from dashboard.org.models import ApiKey
from rtvi_monitor.evals import runs
from rtvi_monitor.evals.models import EvalResult, EvalRun
from rtvi_monitor.sessions.models import Event, Session
from tests.conftest import make_member
from tests.evals.test_eval_runs import jsonl, key_client, record, upload
from tests.session_samples import make_session
from tests.sockets import bot_socket, receive, rtvi, send, wrap

REASON = "expected 'refund' in: Sorry, the caller's card 4111 is declined"


@pytest.fixture
def agent_call(org):
    return make_session(org, "call-7", agent_key="support", agent_name="Support line", status="ended")


def gate_of(client, agent="support", **params):
    return client.get(f"/api/evals/{agent}/gate/?{urlencode(params)}")


def linked_to(session_id: str) -> int:
    return EvalResult.objects.filter(session__session_id=session_id).count()


# --- who may upload and read -----------------------------------------------------------------------------


def test_another_organizations_key_or_operator_cannot_upload_for_our_agent(org, other_org, agent_call):
    for theirs in (key_client(other_org), _browser(other_org, "operator")):
        answer = upload(theirs, jsonl([record()]))
        assert answer.status_code == 400 and "No agent 'support'" in answer.json()["error"]
        answer = upload(theirs, jsonl([record()]), agent="Support%20line")  # by our agent's name: the same
        assert answer.status_code == 400
    assert not EvalRun.objects.exists()
    assert upload(key_client(org), jsonl([record()])).status_code == 201  # the same file, ours: kept


def _browser(organization, role: str) -> Client:
    client = Client()
    client.force_login(make_member(organization, f"{role}-{organization.pk}", role))
    return client


def test_a_read_key_a_revoked_key_an_expired_key_and_a_viewer_cannot_upload(org, agent_call):
    assert upload(key_client(org, "read"), jsonl([record()])).status_code == 403
    revoked_record, revoked_secret = ApiKey.issue(org, "ci-old")
    ApiKey.objects.filter(pk=revoked_record.pk).update(revoked_at=timezone.now())
    assert upload(Client(HTTP_AUTHORIZATION=f"Bearer {revoked_secret}"), jsonl([record()])).status_code == 401
    expired_record, expired_secret = ApiKey.issue(org, "ci-expired")
    ApiKey.objects.filter(pk=expired_record.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert upload(Client(HTTP_AUTHORIZATION=f"Bearer {expired_secret}"), jsonl([record()])).status_code == 401
    assert upload(_browser(org, "viewer"), jsonl([record()])).status_code == 403
    assert upload(Client(HTTP_AUTHORIZATION="Bearer pk_not-a-key"), jsonl([record()])).status_code == 401
    assert not EvalRun.objects.exists()
    assert upload(_browser(org, "operator"), jsonl([record()])).status_code == 201  # an operator may


def test_another_organization_with_an_agent_of_the_same_name_sees_only_its_own_runs(org, other_org, agent_call):
    make_session(other_org, "their-call", agent_key="support", agent_name="Support line", status="ended")
    assert upload(key_client(org), jsonl([record(passed=False)]), deployment="ours-v2").status_code == 201
    assert upload(key_client(other_org), jsonl([record()]), deployment="theirs-v1").status_code == 201
    theirs_runs = key_client(other_org, "read").get("/api/evals/support/runs/").json()["runs"]
    assert [r["deployment"] for r in theirs_runs] == ["theirs-v1"]
    ours_runs = key_client(org, "read").get("/api/evals/support/runs/").json()["runs"]
    assert [r["deployment"] for r in ours_runs] == ["ours-v2"]
    seen = gate_of(key_client(other_org, "read"), candidate="ours-v2", baseline="theirs-v1").json()
    assert seen["verdict"] == "insufficient" and seen["reasons"] == ["no eval results uploaded for ours-v2"]
    page = _browser(other_org, "admin").get("/evals/support/gate/").content.decode()
    assert "ours-v2" not in page and "theirs-v1" in page


def test_the_gate_and_runs_need_a_key_with_read_or_a_member(org, agent_call):
    assert upload(key_client(org), jsonl([record()])).status_code == 201
    writer_only = key_client(org, "write")
    assert gate_of(writer_only, candidate="v2", baseline="v1").status_code == 403
    assert writer_only.get("/api/evals/support/runs/").status_code == 403
    assert Client().get("/api/evals/support/runs/").status_code == 401
    assert Client().get("/evals/support/gate/").status_code in (302, 401)
    assert _browser(org, "viewer").get("/evals/support/gate/").status_code == 200


# --- links: never across organizations, never to a caller's call -------------------------------------


def _eval_call(org, session_id, run="ci-1", agent="support", scenario=""):
    return make_session(org, session_id, agent_key=agent, status="ended", eval_run=run, eval_scenario=scenario)


def test_another_organization_naming_our_calls_links_nothing_of_ours(org, other_org, agent_call):
    _eval_call(org, "eval-ours-1")
    _eval_call(org, "eval-ours-2", scenario="refund")
    make_session(other_org, "their-call", agent_key="support", status="ended")
    named = [
        record(attempt=1, rtvi_dashboard_session="eval-ours-1"),
        record(attempt=2, rtvi_dashboard_session="call-7"),
    ]
    body = upload(key_client(other_org), jsonl(named), run="ci-1").json()
    assert body["linked"] == 0, body
    # By the order of the run's calls, with our run's label and scenario: still none of ours.
    body = upload(key_client(other_org), jsonl([record("refund/text")]), run="ci-1").json()
    assert body["linked"] == 0, body
    assert linked_to("eval-ours-1") == linked_to("eval-ours-2") == linked_to("call-7") == 0
    # Ours, the same way, are linked: the refusal above is the organization's, not the file's.
    body = upload(key_client(org), jsonl(named[:1]), run="ci-1").json()
    assert body["linked"] == 1 and linked_to("eval-ours-1") == 1


def test_a_result_never_links_to_a_callers_call_whatever_it_names(org, agent_call):
    """A caller's call (no eval run tagged it) is not an eval's: named by an upload, it stays unlinked, so its
    turns never count in the gate's waits and the gate's page never opens it as an eval run's call."""
    body = upload(key_client(org), jsonl([record(rtvi_dashboard_session="call-7")]), deployment="v2").json()
    assert body["linked"] == 0, body
    assert linked_to("call-7") == 0
    _eval_call(org, "eval-1")
    body = upload(key_client(org), jsonl([record(rtvi_dashboard_session="eval-1")]), deployment="v2").json()
    assert body["linked"] == 1 and linked_to("eval-1") == 1


def test_a_result_never_links_to_another_agents_eval_call(org, agent_call):
    make_session(org, "billing-call", agent_key="billing", agent_name="Billing", status="ended")
    _eval_call(org, "eval-billing", agent="billing")
    body = upload(key_client(org), jsonl([record(rtvi_dashboard_session="eval-billing")]), run="ci-1").json()
    assert body["linked"] == 0 and linked_to("eval-billing") == 0
    # Two agents' CI runs with one label: each links its own agent's calls only (here: none match support's).
    body = upload(key_client(org), jsonl([record("x/y")]), run="ci-1").json()
    assert body["linked"] == 0 and linked_to("eval-billing") == 0
    body = upload(key_client(org), jsonl([record("x/y")]), agent="billing", run="ci-1").json()
    assert body["linked"] == 1 and linked_to("eval-billing") == 1


def test_a_named_id_that_is_not_a_session_id_is_refused_before_any_lookup(org, agent_call):
    for bad in ("../../etc/passwd", "a" * 101, "eval 1", "<b>", "eval-1\n", 7, ["eval-1"], {"id": "eval-1"}):
        answer = upload(key_client(org), jsonl([record(rtvi_dashboard_session=bad)]))
        assert answer.status_code == 400 and "must be a session id" in answer.json()["error"], bad
    assert not EvalRun.objects.exists()


# --- hostile names in URLs and on the pages -------------------------------------------------------------


@pytest.mark.parametrize(
    "agent",
    [
        "<script>alert(1)</script>",
        quote("<img src=x onerror=alert(1)>", safe=""),
        "a" * 5000,
        "%E2%80%AEsupport",  # right-to-left override
        "ｓｕｐｐｏｒｔ",  # full-width look-alike of ours
        "..%2F..%2Fadmin",
        "%00",
        "support%0A",
    ],
)
def test_hostile_agent_keys_in_urls_answer_404_and_never_ours(org, agent_call, agent):
    assert upload(key_client(org), jsonl([record()]), deployment="v1").status_code == 201
    viewer, reader = _browser(org, "viewer"), key_client(org, "read")
    for answer in (
        viewer.get(f"/evals/{agent}/gate/"),
        reader.get(f"/api/evals/{agent}/runs/"),
        reader.get(f"/api/evals/{agent}/gate/?candidate=v1&baseline=v0"),
    ):
        assert answer.status_code == 404, (agent, answer.status_code)
        if answer["Content-Type"].startswith("text/html"):
            assert b"<script>alert" not in answer.content and b"<img src=x" not in answer.content
        else:  # JSON may quote what was asked for: never sniffed as a page
            assert answer["Content-Type"].startswith("application/json")
            assert answer["X-Content-Type-Options"] == "nosniff"
        assert b"ours" not in answer.content and b"v1" not in answer.content


def test_hostile_names_on_the_gate_page_are_text_never_markup(org, agent_call):
    hostile = '<img src=x onerror="alert(1)">'
    make_session(org, "call-h", agent_key="h1", agent_name=hostile, status="ended")
    assert upload(key_client(org), jsonl([record()]), agent=quote(hostile), deployment="v1").status_code == 201
    bad = record("<script>alert(2)</script>/x", passed=False)
    bad["failures"][0]["event_name"] = "<svg onload=alert(3)>"
    assert upload(key_client(org), jsonl([bad]), agent="h1", deployment="v2").status_code == 201
    viewer = _browser(org, "viewer")
    for url in (
        "/evals/h1/gate/?candidate=v2&baseline=v1",
        "/evals/h1/gate/?" + urlencode({"candidate": "<script>alert(4)</script>", "baseline": "v1"}),
        "/evals/h1/gate/?" + urlencode({"candidate": "v2", "baseline": '"><script>alert(5)</script>'}),
    ):
        page = viewer.get(url)
        assert page.status_code in (200, 400), page.status_code
        html = page.content.decode()
        assert "<script>alert" not in html and "<svg onload" not in html and "<img src=x" not in html, url
        assert "&lt;script&gt;alert(" in html or "&lt;svg onload" in html
    # Deployment and run names follow the bots' tag rule: markup, newlines, look-alikes and overlong are refused.
    for deployment in ("<b>v2</b>", "v2\u2010rc", "ｖ２", "v2\u200b", "v" * 101, "v2;rm -rf", "v2\x00"):
        answer = upload(key_client(org), jsonl([record()]), agent="h1", deployment=quote(deployment))
        assert answer.status_code == 400 and "deployment" in answer.json()["error"], deployment
    answer = upload(key_client(org), jsonl([record()]), agent="h1", deployment="v2", run=quote("ci\u202e41"))
    assert answer.status_code == 400 and "run" in answer.json()["error"]


# --- hostile files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"attempt": 10**30}, "'attempt' must be a whole number"),
        ({"attempt": True}, "'attempt' must be a whole number"),
        ({"attempt": 1.0}, "'attempt' must be a whole number"),
        ({"attempt": -1}, "'attempt' must be a whole number"),
        ({"duration_ms": 2**31}, "'duration_ms' must be a whole number"),
        ({"duration_ms": -5}, "'duration_ms' must be a whole number"),
        ({"duration_ms": False}, "'duration_ms' must be a whole number"),
        ({"passed": 1}, "'passed' must be true or false"),
        ({"passed": None}, "'passed' must be true or false"),
        ({"scenario": "x" * 201, "name": "x"}, "'scenario' must name"),
        ({"scenario": {"a": 1}}, "'scenario' must name"),
        ({"failures": "all of them"}, "'failures' must be a list"),
        ({"failures": [{"kind": "x", "turn_index": 10**20}]}, "turn_index"),
        ({"failures": [{"kind": "x", "turn_index": True}]}, "turn_index"),
        ({"failures": [{"kind": "A" * 41}]}, "failure's 'kind'"),
        ({"failures": [["not", "an", "object"]]}, "each of 'failures' must be an object"),
        ({"turns": [{"turn_index": 0, "status": "passed", "duration_ms": 1e3}]}, "'duration_ms' must be a whole"),
        ({"turns": {"0": "passed"}}, "'turns' must be a list"),
        ({"kind": "simulation", "metrics": "judge"}, "'metrics' must be a list"),
    ],
)
def test_hostile_values_refuse_the_whole_file_saying_why(org, agent_call, change, says):
    answer = upload(key_client(org), jsonl([record(), {**record(attempt=2), **change}]))
    assert answer.status_code == 400, answer.content
    assert "line 2" in answer.json()["error"] and says in json.dumps(answer.json()), answer.json()
    assert not EvalRun.objects.exists() and not EvalResult.objects.exists()


@pytest.mark.parametrize(
    "line",
    [
        b'{"scenario": "a/b", "passed": true, "attempt": NaN}',
        b'{"scenario": "a/b", "passed": true, "duration_ms": Infinity}',
        b'{"scenario": "a/b", "passed": true, "duration_ms": -Infinity}',
        b'{"scenario": "a/b", "passed": true, "duration_ms": 1e400}',
        b'{"scenario": "a/b", "passed": true, "attempt": ' + b"9" * 5000 + b"}",
        b'{"scenario": "a/b", "passed": true, "turns": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"scenario": "a/b", "passed": true, "failures": [' + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"]}",
        b'{"scenario": "a/b", "passed": true}' * 2,
        b'"just a string"',
        b"null",
    ],
)
def test_numbers_json_has_not_and_nesting_beyond_reason_are_refused_not_a_500(org, agent_call, line):
    answer = upload(key_client(org), line + b"\n")
    assert answer.status_code == 400, answer.content[:300]
    assert "line 1" in answer.json()["error"]
    assert not EvalRun.objects.exists()


def test_a_huge_failures_list_is_kept_to_its_first_fifty_and_unknown_keys_are_dropped(org, agent_call):
    failed = record(passed=False)
    failed["failures"] = [
        {"turn_index": 0, "expectation_index": n % 5, "kind": "text_mismatch", "reason": REASON} for n in range(40_000)
    ]
    failed["turns"] = [{"turn_index": n, "status": "failed", "duration_ms": n, "text": REASON} for n in range(5000)]
    assert upload(key_client(org), jsonl([failed])).status_code == 201
    kept = EvalResult.objects.get()
    assert len(kept.failures) == runs.MAX_FAILURES and len(kept.turns) == 200
    assert set(kept.failures[0]) == {"turn_index", "expectation_index", "event_name", "kind"}
    assert set(kept.turns[0]) == {"turn_index", "status", "duration_ms"}


def test_too_many_records_or_bytes_are_refused_and_nothing_is_kept(org, agent_call):
    line = b'{"scenario":"a/b","passed":true}\n'
    answer = upload(key_client(org), line * (runs.MAX_RECORDS + 1))
    assert answer.status_code == 400 and "at most 10,000" in answer.json()["error"]
    big = b" " * (runs.MAX_BYTES + 1)
    answer = upload(key_client(org), big)
    assert answer.status_code == 413 and "20,971,520 bytes" in answer.json()["error"]
    assert upload(Client(), big).status_code == 401  # who it is, before its size
    assert not EvalRun.objects.exists()


def test_a_long_suites_file_past_djangos_body_limit_is_taken_up_to_its_own(org, agent_call, settings):
    """A results.jsonl with events_seen for its failures is easily past Django's 2.5 MB DATA_UPLOAD_MAX_MEMORY_SIZE:
    the upload takes up to runs.MAX_BYTES, as its docstring says, not a 413 from the middleware."""
    failed = record(passed=False)
    failed["events_seen"] = [{"type": "bot-output", "text": "x" * 1000} for _ in range(30)]
    data = jsonl([{**failed, "attempt": n} for n in range(1, 201)])
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < len(data) < runs.MAX_BYTES
    answer = upload(key_client(org), data)
    assert answer.status_code == 201, answer.content[:300]
    assert answer.json()["results"] == 200
    # The rest of the API keeps Django's limit.
    assert key_client(org).post("/api/sessions/", data, content_type="application/json").status_code == 413


def test_a_hostile_event_name_is_kept_short_and_a_simulations_metric_cannot_smuggle_its_reason(org, agent_call):
    failed = record(passed=False)
    failed["failures"][0]["event_name"] = REASON * 10
    simulation = {
        "scenario": "sim/refund",
        "kind": "simulation",
        "passed": False,
        "metrics": [{"name": "polite", "passed": False, "failure_kind": "judge_no", "reason": REASON}],
    }
    assert upload(key_client(org), jsonl([failed, simulation])).status_code == 201
    stored = json.dumps(list(EvalResult.objects.values("failures", "turns", "scenario")))
    assert "4111" not in stored and "declined" not in stored
    assert all(len(f["event_name"]) <= 60 for r in EvalResult.objects.all() for f in r.failures)


# --- the gate's statistics on hostile sizes ---------------------------------------------------------


def _upload_ok(org, records, deployment):
    answer = upload(key_client(org), jsonl(records), deployment=deployment)
    assert answer.status_code == 201, answer.content[:500]


def test_ten_thousand_scenarios_a_side_are_judged_quickly_and_without_a_false_alarm(org, agent_call):
    for deployment in ("v1", "v2"):
        _upload_ok(org, [{"scenario": f"s/{n}", "passed": n % 3 > 0} for n in range(runs.MAX_RECORDS)], deployment)
    started = time.monotonic()
    verdict = gate_of(key_client(org, "read"), candidate="v2", baseline="v1")
    assert verdict.status_code == 200
    body = verdict.json()
    assert body["verdict"] == "pass" and len(body["scenarios"]) == runs.MAX_RECORDS
    page = _browser(org, "viewer").get("/evals/support/gate/?candidate=v2&baseline=v1")
    assert page.status_code == 200
    assert time.monotonic() - started < 60


def test_one_scenario_ten_thousand_times_and_many_turns_are_judged(org, agent_call):
    many = [
        {
            "scenario": "s/x",
            "attempt": n,
            "passed": True,
            "turns": [{"turn_index": t, "status": "passed", "duration_ms": 900 + t} for t in range(200)],
        }
        for n in range(1, 201)
    ]
    _upload_ok(org, many, "v1")
    _upload_ok(
        org, [{**r, "turns": [{**t, "duration_ms": t["duration_ms"] + 2000} for t in r["turns"]]} for r in many], "v2"
    )
    _upload_ok(org, [{"scenario": "s/y", "attempt": n, "passed": True} for n in range(1, 10_001)], "v1")
    _upload_ok(org, [{"scenario": "s/y", "attempt": n, "passed": n > 1} for n in range(1, 10_001)], "v2")
    started = time.monotonic()
    body = gate_of(key_client(org, "read"), candidate="v2", baseline="v1").json()
    assert time.monotonic() - started < 60
    assert body["verdict"] == "worse"
    waits = {row["name"]: row for row in body["waits"]}
    assert waits["turn"]["worse"] and waits["turn"]["baseline"]["n"] == 40_000
    ys = next(row for row in body["scenarios"] if row["name"] == "s/y")
    assert not ys["worse"] and 0 < ys["p_value"] < 1  # one failure in 10,000: not beyond chance


def test_a_side_of_only_skipped_or_errored_runs_neither_crashes_nor_passes(org, agent_call):
    _upload_ok(org, [record(attempt=n) for n in range(1, 6)], "v1")
    _upload_ok(org, [{**record(attempt=n), "skipped": True, "passed": False} for n in range(1, 6)], "v2-skip")
    body = gate_of(key_client(org, "read"), candidate="v2-skip", baseline="v1").json()
    assert body["verdict"] == "insufficient" and body["reasons"] == ["no eval results uploaded for v2-skip"]
    page = _browser(org, "viewer").get("/evals/support/gate/?candidate=v2-skip&baseline=v1")
    assert page.status_code == 200 and 'data-verdict="insufficient"' in page.content.decode()
    # A run the harness could not make is a failure, not a pass: ten of them make the candidate worse.
    errored = [
        {**record(attempt=n), "passed": False, "failures": [], "error": "bot never connected"} for n in range(1, 11)
    ]
    _upload_ok(org, [record(attempt=n) for n in range(6, 11)], "v1")
    _upload_ok(org, errored, "v2-crash")
    body = gate_of(key_client(org, "read"), candidate="v2-crash", baseline="v1").json()
    assert body["verdict"] == "worse" and body["kinds"] == [{"kind": "error", "baseline": 0, "candidate": 10}]


# --- no words stored, none shown ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_sqlite_files_hold_no_reason_no_events_seen_and_no_artifact_path(transactional_db, org, agent_call):
    secret_log = "/srv/ci/secret-run-7f3a/bot__refund.log"
    failed = record(passed=False, artifacts={"log": secret_log, "recording": "/srv/ci/secret-run-7f3a/a.wav"})
    failed["events_seen"] = [{"type": "bot-output", "text": "zebra-quartz said the caller's card 4111"}]
    failed["failures"][0]["reason"] = "expected 'refund' in: the caller said zebra-quartz-9931"
    failed["turns"][0]["expectations"][0]["matched"] = "zebra-quartz matched text"
    simulation = {
        "scenario": "sim/x",
        "kind": "simulation",
        "passed": False,
        "metrics": [{"name": "polite", "passed": False, "reason": "zebra-quartz was rude", "score": 0.1}],
        "transcript": [{"role": "user", "content": "zebra-quartz transcript"}],
    }
    assert upload(key_client(org), jsonl([failed, simulation]), deployment="v2").status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(FULL)")
    name = connection.settings_dict["NAME"]
    files = [p for p in Path(name).parent.glob(Path(name).name + "*") if p.is_file()]
    stored = b"".join(p.read_bytes() for p in files)
    assert b"text_mismatch" in stored  # what is kept is there: the read can find it
    for words in (b"zebra-quartz", b"secret-run-7f3a", b"4111", b"bot__refund.log"):
        assert words not in stored, words


def test_the_gate_page_and_json_show_a_viewer_no_words(org, agent_call):
    failed = record(passed=False)
    failed["events_seen"] = [{"type": "bot-output", "text": "zebra-quartz"}]
    _upload_ok(org, [record(attempt=n) for n in range(1, 6)], "v1")
    _upload_ok(org, [failed, {**failed, "attempt": 2}], "v2")
    viewer = _browser(org, "viewer")
    for url in ("/evals/support/gate/", "/evals/support/gate/?candidate=v2&baseline=v1"):
        html = viewer.get(url).content.decode()
        assert "text_mismatch" in html
        assert "4111" not in html and "zebra-quartz" not in html and "/tmp/evals" not in html and "declined" not in html
    body = json.dumps(gate_of(key_client(org, "read"), candidate="v2", baseline="v1").json())
    assert "4111" not in body and "zebra-quartz" not in body and "text_mismatch" in body


# --- the bots' tags ----------------------------------------------------------------------------------


async def _tagged(token, query: str) -> tuple[WebsocketCommunicator, bool]:
    socket = WebsocketCommunicator(
        application, f"/ws/ingest/t1/?{query}", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    return socket, (await socket.connect())[0]


@pytest.mark.usefixtures("live_path")
@pytest.mark.parametrize(
    "query",
    [
        "eval_run=" + quote("ci\u201041"),  # a Unicode hyphen
        "eval_run=" + quote("ｃｉ-41"),  # full-width letters
        "deployment=" + quote("v\u0662"),  # an Arabic-Indic two
        "deployment=" + quote("v2\u200b"),  # a zero-width space
        "eval_scenario=" + quote("refund\u2044x"),  # a fraction slash
        "eval_run=" + quote("ci\u00a041"),  # a no-break space
        "eval_run=ci-41&eval_run=" + quote("\u0441i-41"),  # Cyrillic es, as the second of two
        "deployment=" + quote("v2\u0000"),
    ],
)
async def test_tags_with_unicode_look_alikes_are_refused_and_no_session_is_made(org, ingest_token, query):
    socket, connected = await _tagged(ingest_token, query)
    if connected:
        frame = await receive(socket)
        assert frame["fatal"] and "use 1-100 characters" in frame["error"], frame
        assert (await socket.receive_output(timeout=3))["type"] == "websocket.close"
    assert not await sync_to_async(Session.objects.filter(session_id="t1").exists)()


@pytest.mark.usefixtures("live_path")
async def test_a_bots_tag_for_a_real_call_cannot_be_made_an_eval_by_an_empty_tag(org, ingest_token):
    """`?eval_run=` empty is a caller's call, not an eval's: the fleet keeps it."""
    socket, connected = await _tagged(ingest_token, "eval_run=")
    assert connected
    await send(socket, wrap(1, rtvi("client-ready")))
    frame = await receive(socket)
    await socket.disconnect()
    session = await sync_to_async(Session.objects.filter(session_id="t1").first)()
    if session is not None:
        assert session.eval_run == "" and await sync_to_async(Session.objects.calls().filter(pk=session.pk).exists)()
    else:
        assert frame.get("fatal"), frame


# --- a client's raw audio, hidden where a careless reader would not look -----------------------------

SOUND = base64.b64encode(bytes(range(256)) * 8).decode()
CLUE = SOUND[100:160]


def _nested(value, depth: int):
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "message",
    [
        {"label": "rtvi-ai", "type": "raw-audio", "id": "1", "data": SOUND},
        {"label": "rtvi-ai", "type": "raw-audio", "id": "1", "data": [SOUND]},
        {"label": "rtvi-ai", "type": "raw-audio-batch", "id": "1", "data": {"batch": [[SOUND]]}},
        {"label": "rtvi-ai", "type": "raw-audio", "id": "1", "data": {"inner": {"base64Audio": SOUND}}},
        {"label": "rtvi-ai", "type": "raw-audio", "id": "1", "data": {"sampleRate": 16000}, "audio": SOUND},
        {"label": "rtvi-ai", "type": "raw-audio", "id": SOUND, "data": {"sampleRate": 16000}},
        {"label": SOUND, "type": "raw-audio", "id": "1", "data": {"base64Audio": SOUND}},
        {"type": "raw-audio", "data": {"base64Audio": SOUND}},  # invalid (no label): stored as it came
        {"label": "rtvi-ai", "type": "raw-audio", "id": "1", "data": {"deep": _nested(SOUND, 40)}},  # too deep to read
    ],
)
@pytest.mark.usefixtures("live_path")
async def test_a_clients_sound_is_not_stored_wherever_a_raw_audio_message_hides_it(org, ingest_token, message):
    socket = bot_socket("audio-hidden", ingest_token)
    assert (await socket.connect())[0]
    await send(socket, wrap(1, message, direction="from-client"))
    frame = await receive(socket)  # its ack, or what is wrong with it (recorded as invalid): stored either way
    assert frame.get("ack") == 1 or frame.get("seq") == 1, frame
    await socket.disconnect()
    stored = await sync_to_async(lambda: list(Event.objects.values_list("message", "error")))()
    assert stored, frame
    assert all(CLUE not in json.dumps(row) for row in stored), stored[0][0][:300]
    assert all("audio_not_stored" in json.dumps(row) for row in stored)


@pytest.mark.usefixtures("live_path")
async def test_a_normal_raw_audio_message_keeps_its_numbers_and_its_sound_is_its_size(org, ingest_token):
    socket = bot_socket("audio-ok", ingest_token)
    assert (await socket.connect())[0]
    message = rtvi("raw-audio", {"base64Audio": SOUND, "sampleRate": 16000, "numChannels": 1})
    await send(socket, wrap(1, message, direction="from-client"))
    assert (await receive(socket)).get("ack") == 1
    await socket.disconnect()
    (text,) = await sync_to_async(lambda: list(Event.objects.values_list("message", flat=True)))()
    data = json.loads(text)["data"]
    assert data == {"sampleRate": 16000, "numChannels": 1, "audio_not_stored": {"base64Audio": len(SOUND)}}


# --- an agent named by the organization's agents API ---------------------------------------------------


def test_an_agents_api_id_no_page_can_name_is_refused_not_a_500(org, httpx_mock):
    """An upstream agents API may list an id with a slash (no path segment): the upload refuses it as no
    agent of ours, as a bot's ?agent= does (rtvi_monitor/sessions/agent_link.py _storable), never a 500 from
    the answer's gate URL; a plain id from the same API is taken."""
    from tests.agents_samples import AGENT, BASE, KEY, URL

    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    slashed = {**AGENT, "id": "team/support", "name": "slashed"}
    httpx_mock.add_response(url=URL, json={"services": [slashed, AGENT]}, is_reusable=True)
    answer = upload(key_client(org), jsonl([record()]), agent="slashed")
    assert answer.status_code == 400 and "No agent 'slashed'" in answer.json()["error"]
    assert not EvalRun.objects.exists()
    answer = upload(key_client(org), jsonl([record()]), agent=AGENT["name"])
    assert answer.status_code == 201 and answer.json()["agent"] == AGENT["id"]
