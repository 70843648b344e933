"""POST /v1/traces through the real URLconf: OTLP protobuf and JSON, auth, bad input, the join to sessions and turns."""

import gzip

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions.models import Session, Span
from tests.otlp_samples import attr, conversation, otlp_json, span

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(org):
    return IngestToken.issue(org, "bot")[1]


def post(client, body: bytes, token: str | None, content_type="application/x-protobuf", **headers):
    if token:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client.post("/v1/traces", body, content_type=content_type, **headers)


def assert_joined(api_client, api_key):
    detail = api_client.get("/api/sessions/call-1/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    traces = detail["traces"]
    assert traces["spans"] == 7
    first, second = traces["turns"]
    assert (first["turn_number"], first["interrupted"], first["user_bot_latency_ms"]) == (1, False, 850.0)
    assert [s["name"] for s in first["spans"]] == ["stt", "llm", "tts"]
    llm = first["spans"][1]
    assert llm == {
        "name": "llm",
        "start_ms": 200.0,
        "duration_ms": 900.0,
        "ttfb_ms": 410.0,
        "model": "gpt-4o",
        "provider": "openai",
        "tokens": {"input_tokens": 812, "output_tokens": 33},
        "error": False,
    }
    assert (second["turn_number"], second["interrupted"], [s["name"] for s in second["spans"]]) == (2, True, ["llm"])


def test_protobuf_spans_are_stored_and_joined_to_the_sessions_turns(client, org, token, api_key):
    Session.objects.create(organization=org, session_id="call-1")
    response = post(client, conversation().SerializeToString(), token)
    assert response.status_code == 200 and response["Content-Type"] == "application/x-protobuf"
    assert Span.objects.count() == 7 and Span.objects.get(span_id="0000000000000004").service_name == "support-bot"
    assert_joined(client, api_key)
    # An exporter that retries sends the same batch again: nothing doubles.
    assert post(client, conversation().SerializeToString(), token).status_code == 200
    assert Span.objects.count() == 7


def test_json_and_gzip_are_taken_too(client, org, token, api_key):
    Session.objects.create(organization=org, session_id="call-1")
    response = post(client, otlp_json(conversation()), token, content_type="application/json")
    assert response.status_code == 200 and response.json() == {}
    Span.objects.all().delete()
    body = gzip.compress(conversation().SerializeToString())
    assert post(client, body, token, HTTP_CONTENT_ENCODING="gzip").status_code == 200
    assert_joined(client, api_key)


def test_a_session_without_traces_says_none(client, org, api_key):
    Session.objects.create(organization=org, session_id="quiet")
    assert client.get("/api/sessions/quiet/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()["traces"] is None


def test_another_organizations_spans_never_join(client, org, other_org, api_key):
    Session.objects.create(organization=org, session_id="call-1")
    theirs = IngestToken.issue(other_org, "their bot")[1]
    assert post(client, conversation().SerializeToString(), theirs).status_code == 200
    detail = client.get("/api/sessions/call-1/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    assert detail["traces"] is None


@pytest.mark.parametrize("credential", [None, "it_wrong", "private-key"])
def test_traces_need_an_ingest_token(client, org, api_key, credential):
    token = api_key if credential == "private-key" else credential
    response = post(client, conversation().SerializeToString(), token)
    assert response.status_code == 401 and "ingest token" in response.json()["error"]
    assert not Span.objects.exists()


def bad_span_request() -> ExportTraceServiceRequest:
    request = conversation()
    request.resource_spans[0].scope_spans[0].spans.append(span(9, "backwards", 500, 100, 1))
    return request


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status", "message"),
    [
        (b"\xff\xff\xff", "application/x-protobuf", {}, 400, "not a protobuf ExportTraceServiceRequest"),
        (b"not json", "application/json", {}, 400, "not JSON"),
        (b"[1, 2]", "application/json", {}, 400, "expected a JSON object"),
        (b'{"resourceSpans": 5}', "application/json", {}, 400, "not an OTLP ExportTraceServiceRequest"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "01"}]}]}]}',
            "application/json",
            {},
            400,
            "traceId 'zz' is not hex",
        ),
        (bad_span_request().SerializeToString(), "application/x-protobuf", {}, 400, "'backwards'): it ends before"),
        (b"{}", "text/plain", {}, 415, "send application/x-protobuf or application/json"),
        (b"\x1f\x8b broken", "application/x-protobuf", {"HTTP_CONTENT_ENCODING": "gzip"}, 400, "not valid gzip"),
        (b"x", "application/x-protobuf", {"HTTP_CONTENT_ENCODING": "br"}, 400, "send gzip or none"),
    ],
)
def test_bad_input_is_answered_and_nothing_of_it_is_stored(client, token, body, content_type, headers, status, message):
    response = post(client, body, token, content_type=content_type, **headers)
    assert response.status_code == status and message in response.json()["error"]
    assert not Span.objects.exists()  # all of a request or none of it


def test_a_body_too_big_is_refused_even_gzipped(client, token, settings):
    settings.OTLP_MAX_BYTES = 10_000
    assert post(client, b"x" * 10_001, token).status_code == 413
    bomb = gzip.compress(b"\x00" * 1_000_000)  # small on the wire, big inside
    response = post(client, bomb, token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "OTLP_MAX_BYTES" in response.json()["error"]


def test_only_post(client, token):
    assert client.get("/v1/traces", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 405


def test_the_traces_endpoint_and_the_page(client, staff_client, org, token, api_key):
    Session.objects.create(organization=org, session_id="call-1")
    post(client, conversation().SerializeToString(), token)
    traces = client.get("/api/sessions/call-1/traces/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()["traces"]
    assert [t["turn_number"] for t in traces["turns"]] == [1, 2]
    page = staff_client.get("/sessions/call-1/").content.decode()
    assert 'id="traces" data-url="/api/sessions/call-1/traces/"' in page


def test_span_ids_are_only_unique_within_their_trace(client, org, token, api_key):
    """Two traces of one session (a bot that restarted its tracer) may reuse span ids: turns keep their own spans."""
    Session.objects.create(organization=org, session_id="call-1")
    other_trace = bytes.fromhex("11111111111111111111111111111111")
    for request in (conversation(), conversation(trace=other_trace)):
        assert post(client, request.SerializeToString(), token).status_code == 200
    traces = client.get("/api/sessions/call-1/traces/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()["traces"]
    assert traces["spans"] == 14
    assert [len(turn["spans"]) for turn in traces["turns"]] == [3, 3, 1, 1]


def test_cycles_and_deep_chains_of_spans_cost_no_more_than_their_count(client, org, token, api_key):
    """A bot decides the parents: spans in a cycle, a turn inside a turn inside a turn… are read in bounded time."""
    Session.objects.create(organization=org, session_id="call-1")
    turns = [span(1, "turn", 0, 10, 0, conversation__id="call-1", turn__number=1)]
    turns += [span(i, "turn", i, i + 5, i - 1, turn__number=i) for i in range(2, 3000)]  # each inside the last
    loop = [span(5001, "a", 1, 2, 5002), span(5002, "b", 1, 2, 5001)]  # a cycle, under no turn
    request = ExportTraceServiceRequest(resource_spans=[{"scope_spans": [{"spans": turns + loop}]}])
    assert post(client, request.SerializeToString(), token).status_code == 200
    traces = client.get("/api/sessions/call-1/traces/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()["traces"]
    assert len(traces["turns"]) == 2999 and all(turn["spans"] == [] for turn in traces["turns"])


def test_what_json_and_the_databases_cannot_hold_is_refused_or_made_null(client, org, token):
    request = conversation()
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[4].attributes.append(attr("metrics.ttfb_bad", float("nan")))
    assert post(client, request.SerializeToString(), token).status_code == 200
    assert Span.objects.get(span_id="0000000000000005").attributes["metrics.ttfb_bad"] is None

    Span.objects.all().delete()
    spans[0].status.code = 70000  # the proto's enum is open: any int32 decodes
    response = post(client, request.SerializeToString(), token)
    assert response.status_code == 400 and "status.code" in response.json()["error"]
    spans[0].status.code = 0
    spans[0].parent_span_id = spans[0].span_id
    response = post(client, request.SerializeToString(), token)
    assert response.status_code == 400 and "its own parent" in response.json()["error"]
    assert not Span.objects.exists()


def test_a_gzip_body_cut_short_stores_nothing(client, token):
    body = gzip.compress(conversation().SerializeToString())
    response = post(client, body[: len(body) - 12], token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400 and "cut short" in response.json()["error"]
    response = post(client, body + b"trailing", token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400
    assert not Span.objects.exists()
