"""The sessions JSON API through the real URLconf: auth, scoping, filters, detail, NDJSON."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import make_agent
from tests.session_samples import make_session

pytestmark = pytest.mark.django_db


def api(client, path, key):
    return client.get(path, HTTP_AUTHORIZATION=f"Bearer {key}")


def test_the_session_api_needs_a_key_or_a_staff_login(client, org):
    make_session(org)
    for path in ("/api/sessions/", "/api/sessions/call-1/", "/api/sessions/call-1/events.ndjson"):
        response = client.get(path)
        assert response.status_code == 401 and response.json()["code"] == "401"
        assert api(client, path, "pk_bogus").status_code == 401


def test_a_staff_login_reads_the_api(staff_client, org):
    make_session(org)
    assert staff_client.get("/api/sessions/").json()["sessions"][0]["id"] == "call-1"


def test_the_detail_has_the_derived_state(client, org, api_key, agents):
    make_session(org, agent=agents[0])
    body = api(client, "/api/sessions/call-1/", api_key).json()
    assert body["id"] == "call-1" and body["agent_id"] == str(agents[0].pk)
    assert body["status"] == "live" and body["protocol_version"] == "2.1.0"
    assert body["started_at"] and body["ended_at"] is None
    assert body["event_count"] == 18 and body["invalid_count"] == 1
    transcript = [(t["role"], t["text"], t["final"]) for t in body["transcript"]]
    assert ("user", "Where is my order?", True) in transcript
    assert not any(text == "where is my" for _, text, _ in transcript)
    assert [t["text"].strip() for t in body["transcript"] if t["role"] == "bot"] == ["It ships today."]
    (turn,) = body["turns"]
    assert turn["latency_ms"] == pytest.approx(3000)
    assert body["latency"]["p50"] == pytest.approx(3000)
    assert body["metrics"] and body["errors"][0]["message"] == "TTS hiccup"
    assert "function_calls" in body


def test_an_ended_session_serves_its_frozen_state(client, org, api_key):
    make_session(org, status="ended", ended_at=timezone.now(), state={"transcript": [], "counts": {"total": 99}})
    body = api(client, "/api/sessions/call-1/", api_key).json()
    assert body["status"] == "ended" and body["event_count"] == 99


def test_events_ndjson_streams_every_stored_message_in_order(client, org, api_key):
    make_session(org)
    response = api(client, "/api/sessions/call-1/events.ndjson", api_key)
    assert response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, 19))
    assert lines[0]["direction"] == "from-client" and lines[0]["message"]["type"] == "client-ready"
    assert {"seq", "direction", "received_at", "message"} <= set(lines[0])
    assert lines[-1]["message"] == "not json at all" and lines[-1]["valid"] is False


def test_an_organization_never_sees_anothers_sessions(client, org, other_org, api_key):
    make_session(other_org, "globex-call")
    assert api(client, "/api/sessions/", api_key).json()["sessions"] == []
    for path in ("/api/sessions/globex-call/", "/api/sessions/globex-call/events.ndjson"):
        assert api(client, path, api_key).status_code == 404


def test_the_list_filters_by_agent_status_time_and_text(client, org, api_key):
    support, sales = make_agent(org, "support"), make_agent(org, "sales")
    now = timezone.now()
    make_session(org, "a", agent=support, transcript_text="user: refund please", started_at=now - timedelta(hours=3))
    make_session(
        org, "b", agent=sales, transcript_text="user: new plan", status="ended", started_at=now - timedelta(hours=1)
    )
    make_session(org, "c", agent=support, transcript_text="user: REFUND again", started_at=now)

    def ids(query):
        response = api(client, f"/api/sessions/?{query}", api_key)
        assert response.status_code == 200, response.content
        return [s["id"] for s in response.json()["sessions"]]

    assert ids("") == ["c", "b", "a"]
    assert ids(f"agent={support.pk}") == ["c", "a"]
    assert ids("status=ended") == ["b"]
    assert ids("q=refund") == ["c", "a"]
    after = (now - timedelta(hours=2)).isoformat()
    assert ids(f"started_after={after.replace('+', '%2B')}") == ["c", "b"]
    assert ids(f"started_before={after.replace('+', '%2B')}") == ["a"]
    assert ids("limit=1") == ["c"]
    assert api(client, "/api/sessions/?limit=1", api_key).json()["next_offset"] == 1


def test_the_list_filters_sessions_with_errors_and_fatal_ones(client, org, api_key):
    make_session(org, "clean", error_count=0)
    make_session(org, "noisy", error_count=3)
    make_session(org, "dead", error_count=1, fatal=True)

    def ids(query):
        response = api(client, f"/api/sessions/?{query}", api_key)
        assert response.status_code == 200, response.content
        return sorted(s["id"] for s in response.json()["sessions"])

    assert ids("has_errors=true") == ["dead", "noisy"]
    assert ids("has_errors=false") == ["clean"]
    assert ids("fatal=true") == ["dead"]
    assert ids("fatal=false&has_errors=true") == ["noisy"]


def test_the_list_filters_sessions_by_how_they_ended(client, org, api_key):
    make_session(org, "live")
    make_session(org, "hung-up", status="ended", end_kind="client_hung_up", end_reason="client hung up")
    make_session(org, "finished", status="ended", end_kind="bot_finished", end_reason="bot finished")
    make_session(org, "vanished", status="ended", end_kind="bot_vanished", end_reason="bot vanished")
    make_session(org, "fatal", status="ended", end_kind="fatal_error", end_reason="fatal error", fatal=True)
    make_session(org, "restarted", status="ended", end_kind="server_restarted", end_reason="server restarted")

    def ids(query):
        response = api(client, f"/api/sessions/?{query}", api_key)
        assert response.status_code == 200, response.content
        return sorted(s["id"] for s in response.json()["sessions"])

    assert ids("end=bot_vanished") == ["vanished"]
    assert ids("end=client_hung_up") == ["hung-up"]
    assert ids("failed=true") == ["fatal", "restarted", "vanished"]
    assert ids("failed=false") == ["finished", "hung-up", "live"]
    response = api(client, "/api/sessions/?end=dropped", api_key)
    assert response.status_code == 400 and "end: expected one of client_hung_up" in response.json()["error"]


def test_the_sessions_page_filters_sessions_with_errors(staff_client, org):
    make_session(org, "clean", status="ended", error_count=0)
    make_session(org, "noisy", status="ended", error_count=3)
    html = staff_client.get("/sessions/?has_errors=true").content.decode()
    assert "noisy" in html and ">clean<" not in html
    assert 'name="has_errors" value="true" checked' in html


@pytest.mark.parametrize(
    "query,words",
    [
        ("has_errors=maybe", "has_errors"),
        ("fatal=2", "fatal"),
        ("status=dead", "status"),
        ("agent=" + "x" * 101, "agent"),
        ("started_after=yesterday", "started_after"),
        ("limit=x", "limit"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(client, org, api_key, query, words):
    response = api(client, f"/api/sessions/?{query}", api_key)
    assert response.status_code == 400 and words in response.json()["error"]
