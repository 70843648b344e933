"""Redaction before storage: what a caller says of their card, phone, e-mail, IBAN or SSN never reaches the database.

The detectors (rtvi_monitor/core/redaction.py) on their own, with properties proved
by Hypothesis; then through the real router: a bot's messages as stored, as
the API and its export give them, as a watching page receives them, and as
the session's state counts them; an organization's own patterns apply to its
bots only; the installation can turn the built-in detectors off.
"""

import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import strategies as st

from dashboard.org.models import ApiKey
from rtvi_monitor.core.redaction import DEFAULT, Redactor, compile_rule, iban_valid, luhn
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions.models import Event
from tests.sockets import bot_socket, browser_socket, receive, receive_until, rtvi, send, wrap


def redacted(text: str, redactor: Redactor = DEFAULT) -> tuple[str, dict]:
    counts = {}
    return redactor.text(text, counts), counts


@pytest.mark.parametrize(
    "said,stored,counts",
    [
        ("my card is 4111 1111 1111 1111, thanks", "my card is [card], thanks", {"card": 1}),
        ("4111-1111-1111-1111 or 5500005555555559", "[card] or [card]", {"card": 2}),
        ("write to ana.lopez+bills@example.co.uk.", "write to [email].", {"email": 1}),
        ("call +1 (415) 555-0100 or 07700 900123", "call [phone] or [phone]", {"phone": 2}),
        ("my number is 4155550100", "my number is [phone]", {"phone": 1}),
        ("IBAN DE89 3704 0044 0532 0130 00", "IBAN [iban]", {"iban": 1}),
        ("GB82WEST12345698765432 it is", "[iban] it is", {"iban": 1}),
        ("social 123-45-6789", "social [ssn]", {"ssn": 1}),
    ],
)
def test_each_built_in_detector_removes_what_it_is_for(said, stored, counts):
    assert redacted(said) == (stored, counts)


@pytest.mark.parametrize(
    "said",
    [
        "order 4111 1111 1111 1112 please",  # fails the Luhn check: an order number, not a card
        "order 1234567890123",  # 13 digits written together: an order or account number as often as a phone
        "it's 10:30, turn 3 of 10, $1,299.00, version 2.1.0",
        "2026-11-24T10:30:00Z and 2026-11-24 10:30:00",
        "msg-123456789 call_123456789 1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "DE89 3704 0044 0532 0130 01",  # the IBAN's check digits do not add up
        "a@b is not an address, nor is user@localhost",
        "2025-06-01T10:00:00.123+00:00",  # every user-transcription's timestamp
    ],
)
def test_what_only_looks_like_it_is_left_alone(said):
    assert redacted(said) == (said, {})


def test_the_checks_are_the_standard_ones():
    assert luhn("4111111111111111") and not luhn("4111111111111112")
    assert iban_valid("DE89 3704 0044 0532 0130 00") and not iban_valid("DE89 3704 0044 0532 0130 01")


def card_number(digits: list[int]) -> str:
    """A Luhn-valid number of these digits and a check digit."""
    body = "".join(map(str, digits))
    return next(body + d for d in "0123456789" if luhn(body + d))


words = st.text(alphabet=st.characters(categories=["L", "Zs", "P"]), max_size=40)


@given(words, st.lists(st.integers(0, 9), min_size=12, max_size=18), st.sampled_from(["", " ", "-"]), words)
def test_no_card_number_survives_whatever_is_around_it(before, digits, separator, after):
    number = card_number(digits)
    written = separator.join(number[i : i + 4] for i in range(0, len(number), 4))
    text, counts = redacted(f"{before} {written} {after}")
    assert number not in re.sub(r"\D", "", text)
    assert counts.get("card") == 1


@given(st.text(max_size=200))
def test_redaction_is_idempotent_and_keeps_text_without_digits_or_at_signs(text):
    once, _ = redacted(text)
    assert redacted(once)[0] == once
    if not any(c.isdigit() for c in text) and "@" not in text:
        assert once == text


def test_every_field_number_and_key_is_redacted_but_the_type_and_label():
    counts = {}
    message = {
        "label": "rtvi-ai",
        "type": "llm-function-call",
        "id": "4111111111111111",
        "extra": {"4155550100": "a key that is a number"},
        "data": {
            "function_name": "refund",
            "args": {"email": "a.b@example.com", "cards": ["4111 1111 1111 1111"], "card_number": 4111111111111111},
            "phone": 4155550123,
            "amount": 12.5,
            "ok": True,
        },
    }
    out = DEFAULT.message(message, counts)
    assert out["data"]["args"] == {"email": "[email]", "cards": ["[card]"], "card_number": "[card]"}
    assert out["data"]["phone"] == "[phone]" and out["data"]["amount"] == 12.5 and out["data"]["ok"] is True
    assert out["id"] == "[card]" and out["extra"] == {"[phone]": "a key that is a number"}
    assert out["type"] == "llm-function-call" and out["label"] == "rtvi-ai"
    assert counts == {"email": 1, "card": 3, "phone": 2}
    clean = {"label": "rtvi-ai", "type": "bot-llm-text", "id": "msg-1", "data": {"text": "Hello there", "n": 3}}
    assert DEFAULT.message(clean, {}) is clean  # nothing found: nothing copied


@pytest.mark.parametrize(
    "said,stored",
    [
        ("my card is ４１１１ １１１１ １１１１ １１１１.", "my card is [card]."),  # full-width digits
        ("رقمي ٤١٥٥٥٥٠١٠٠ شكرا", "رقمي [phone] شكرا"),  # Arabic-Indic digits
        ("4111 – 1111 – 1111 – 1111", "[card]"),  # an en dash, spaced
        ("4111--1111..1111  1111", "[card]"),  # several separators in a row
        ("call 415 555 0100", "call [phone]"),  # no-break spaces
    ],
)
def test_digits_and_separators_are_read_as_a_person_reads_them(said, stored):
    assert redacted(said)[0] == stored


@pytest.mark.parametrize(
    "name,pattern,problem",
    [
        ("member id", r"M-\d{6}", "name"),
        ("member-id", "M-(", "pattern"),
        ("member-id", "x*", "pattern"),
        ("member-id", "a" * 501, "pattern"),
        ("member-id", r"(\d)\1{5}", "pattern"),  # a backreference: RE2 cannot take it
        ("member-id", r"M-(?=\d)", "pattern"),  # a lookahead, nor that
    ],
)
def test_an_organizations_rule_is_checked_before_it_is_saved(name, pattern, problem):
    with pytest.raises(ValueError, match=f"^{problem}:"):
        compile_rule(name, pattern)
    with pytest.raises(ValidationError) as refused:
        RedactionRule(name=name, pattern=pattern).clean()
    assert problem in refused.value.message_dict


# --- through the real router ---------------------------------------------------------------------------------

pytestmark_live = pytest.mark.usefixtures("live_path")

SAID = "My card is 4111 1111 1111 1111 and my e-mail is ana@example.com, member M-123456."
CALL_ARGS = {"email": "ana@example.com", "phone": "+44 7700 900123", "note": "no PII here"}


async def stream_a_call(token: str, session_id: str) -> None:
    bot = bot_socket(session_id, token)
    assert (await bot.connect())[0]
    frames = [
        wrap(1, rtvi("user-transcription", {"text": SAID, "final": True, "user_id": "u", "timestamp": "t"})),
        wrap(
            2,
            rtvi(
                "llm-function-call",
                {"function_name": "lookup", "tool_call_id": "call_1", "args": CALL_ARGS},
            ),
        ),
    ]
    for frame in frames:
        await send(bot, frame)
        assert "ack" in await receive(bot)
    await send(bot, "not json, but my card is 4111 1111 1111 1111")  # garbage is stored too: redacted
    reply = await receive(bot)
    assert "error" in reply
    await bot.disconnect(code=1000)


@pytestmark_live
async def test_a_bots_messages_are_stored_relayed_exported_and_counted_redacted(org, ingest_token, staff_cookie):
    await sync_to_async(RedactionRule.objects.create)(organization=org, name="member-id", pattern=r"M-\d{6}")
    await stream_a_call(ingest_token, "redacted-1")

    rows = await sync_to_async(list)(Event.objects.filter(session__session_id="redacted-1").order_by("seq"))
    stored = " ".join(row.message for row in rows)
    for secret in ("4111 1111", "ana@example.com", "7700 900123", "M-123456"):
        assert secret not in stored
    assert "My card is [card] and my e-mail is [email], member [member-id]." in stored
    assert [json.loads(row.redacted) for row in rows] == [
        {"card": 1, "email": 1, "member-id": 1},
        {"email": 1, "phone": 1},
        {"card": 1},
    ]

    # A page that opens now has the words as stored, and the counts.
    page = browser_socket("/ws/sessions/redacted-1/", staff_cookie)
    assert (await page.connect())[0]
    snapshot = await receive(page)
    state = snapshot["state"]
    assert [t["text"] for t in state["transcript"]] == [
        "My card is [card] and my e-mail is [email], member [member-id]."
    ]
    assert state["counts"]["redacted"] == {"card": 2, "email": 2, "member-id": 1, "phone": 1}
    assert "4111 1111" not in json.dumps(snapshot)  # not "4111": a duration may hold those digits
    await page.disconnect()


@pytestmark_live
async def test_a_watching_page_receives_the_messages_redacted(org, ingest_token, staff_cookie):
    bot = bot_socket("redacted-live", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    page = browser_socket("/ws/sessions/redacted-live/", staff_cookie)
    assert (await page.connect())[0]
    await receive(page)  # the snapshot
    await send(bot, wrap(2, rtvi("user-transcription", {"text": SAID, "final": True, "user_id": "u"})))
    await receive(bot)
    frames = await receive_until(page, lambda f: f.get("type") == "batch", timeout=5)
    relayed = json.dumps(frames)
    assert "4111 1111" not in relayed and "ana@example.com" not in relayed and "[card]" in relayed
    await page.disconnect()
    await bot.disconnect(code=1000)


@pytestmark_live
async def test_a_callers_pseudonym_is_never_taken_for_a_phone_number(org, ingest_token, monkeypatch):
    """The dashboard writes a caller's user_id as "caller:" and 12 hex characters of its key; one key in 280
    starts with 12 digits, which read as a phone number: it is the dashboard's word, so redaction leaves it."""

    from rtvi_monitor.live import callers

    monkeypatch.setattr(callers, "caller_key", lambda organization_id, user_id: "415555010012" + "ab" * 14)
    await sync_to_async(RedactionRule.objects.create)(organization=org, name="anything", pattern=r"caller:\w+")
    bot = bot_socket("pseudonym", ingest_token)
    assert (await bot.connect())[0]
    said = {"text": "call me on 4155550100", "final": True, "user_id": "+1 415 555 0100", "timestamp": "t"}
    await send(bot, wrap(1, rtvi("user-transcription", said)))
    assert "ack" in await receive(bot)
    await bot.disconnect(code=1000)
    event = await sync_to_async(Event.objects.get)(session__session_id="pseudonym")
    data = json.loads(event.message)["data"]
    assert data["user_id"] == "caller:415555010012"  # neither [phone] nor the org's rule
    assert data["text"] == "call me on [phone]" and json.loads(event.redacted) == {"phone": 1}


def test_kept_keys_are_left_as_they_are_and_in_their_place():
    message = {"type": "user-transcription", "data": {"user_id": "caller:415555010012", "text": "4155550100"}}
    counts = {}
    out = DEFAULT.message(message, counts, keep=("user_id",))
    assert list(out["data"].items()) == [("user_id", "caller:415555010012"), ("text", "[phone]")]
    assert counts == {"phone": 1}
    clean = {"type": "user-transcription", "data": {"user_id": "caller:415555010012", "text": "hello"}}
    assert DEFAULT.message(clean, {}, keep=("user_id",)) is clean
    assert DEFAULT.message(message, {})["data"]["user_id"] == "caller:[phone]"  # what the keep is for


@pytestmark_live
async def test_an_organizations_rule_applies_to_its_own_bots_only(org, other_org, ingest_token):
    await sync_to_async(RedactionRule.objects.create)(organization=org, name="member-id", pattern=r"M-\d{6}")
    _, other_token = await sync_to_async(IngestToken.issue)(other_org, "other")
    for token, session_id in ((ingest_token, "ours"), (other_token, "theirs")):
        bot = bot_socket(session_id, token)
        assert (await bot.connect())[0]
        await send(bot, wrap(1, rtvi("user-transcription", {"text": "member M-123456", "final": True})))
        await receive(bot)
        await bot.disconnect(code=1000)
    ours = await sync_to_async(Event.objects.get)(session__session_id="ours", session__organization=org)
    theirs = await sync_to_async(Event.objects.get)(session__session_id="theirs", session__organization=other_org)
    assert "member [member-id]" in ours.message and "M-123456" in theirs.message


@pytestmark_live
async def test_the_built_in_detectors_can_be_turned_off_for_the_installation(org, ingest_token, settings):
    settings.REDACTION_BUILTIN = False
    bot = bot_socket("unredacted", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("user-transcription", {"text": SAID, "final": True})))
    await receive(bot)
    await bot.disconnect(code=1000)
    event = await sync_to_async(Event.objects.get)(session__session_id="unredacted")
    assert "4111 1111 1111 1111" in event.message and event.redacted == ""


@pytestmark_live
async def test_the_api_and_the_export_give_the_redacted_words(org, ingest_token, async_client):
    await stream_a_call(ingest_token, "redacted-api")
    _, key = await sync_to_async(ApiKey.issue)(org, "test")
    headers = {"Authorization": f"Bearer {key}"}
    detail = (await async_client.get("/api/sessions/redacted-api/", headers=headers)).json()
    assert detail["counts"]["redacted"] == {"card": 2, "email": 2, "phone": 1}
    assert detail["transcript"][0]["text"].startswith("My card is [card] and my e-mail is [email]")
    response = await async_client.get("/api/sessions/redacted-api/events.ndjson", headers=headers)
    export = (await sync_to_async(lambda: b"".join(response.streaming_content))()).decode()
    assert "4111 1111" not in export and "ana@example.com" not in export
    assert [json.loads(line).get("redacted") for line in export.splitlines()] == [
        {"card": 1, "email": 1},
        {"email": 1, "phone": 1},
        {"card": 1},
    ]


@pytest.mark.django_db
def test_trace_span_attributes_are_redacted_before_they_are_stored(client, org):
    """An LLM span's input and output (Pipecat's tracing records the prompt and the reply) carry the caller's words."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    from rtvi_monitor.sessions.models import Span
    from tests.otlp_samples import span

    RedactionRule.objects.create(organization=org, name="member-id", pattern=r"M-\d{6}")
    _, token = IngestToken.issue(org, "bot")
    llm = span(
        1,
        "llm",
        0,
        900,
        conversation__id="call-4155550100",
        input=SAID,
        output="I have noted 4111 1111 1111 1111.",
        tool__arguments=json.dumps(CALL_ARGS),
    )
    body = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[llm])])])
    response = client.post(
        "/v1/traces",
        body.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    stored = Span.objects.get()
    attributes = json.dumps(stored.attributes)
    for secret in ("4111 1111", "ana@example.com", "7700 900123", "M-123456"):
        assert secret not in attributes
    assert "[card]" in attributes and "[member-id]" in attributes and "[phone]" in attributes
    assert stored.conversation_id == "call-4155550100"  # an id, joined to its session as sent


def test_a_spans_name_keys_numbers_and_service_are_redacted_too(client, org):
    """Every value of every type, the keys, the span's name and the service's name."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    from rtvi_monitor.sessions.models import Span
    from tests.otlp_samples import span

    _, token = IngestToken.issue(org, "bot")
    tool = span(1, "tool lookup 4155550100", 0, 900, **{"card": 4111111111111111, "4155550123": "a key", "n": 3})
    service = KeyValue(key="service.name", value=AnyValue(string_value="bot for ana@example.com"))
    resource = Resource(attributes=[service])
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=[tool])])]
    )
    response = client.post(
        "/v1/traces",
        body.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    stored = Span.objects.get()
    assert stored.name == "tool lookup [phone]" and stored.service_name == "bot for [email]"
    assert stored.attributes == {"card": "[card]", "[phone]": "a key", "n": 3}


@pytestmark_live
async def test_what_is_wrong_with_a_message_never_stores_what_it_quotes(org, ingest_token):
    """A validation error names the bad value: a card number in the wrong place is not kept in the error either."""
    bot = bot_socket("quoted", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, {"seq": "4111 1111 1111 1111", "message": rtvi("bot-ready", {"version": "2.1.0"})})
    await send(bot, wrap(1, rtvi("user-transcription", {"text": "hi", "final": "ana@example.com"})))
    await receive(bot)
    await receive(bot)
    await bot.disconnect(code=1000)
    rows = await sync_to_async(list)(Event.objects.filter(session__session_id="quoted").order_by("seq"))
    assert [bool(row.error) for row in rows] == [True, True]
    assert "seq: expected a whole number" in rows[0].error and "[card]" in rows[0].error
    assert "[email]" in rows[1].error
    stored = json.dumps([[row.message, row.error] for row in rows])
    assert "4111 1111 1111 1111" not in stored and "ana@example.com" not in stored


@given(st.floats(min_value=0, max_value=99_999, allow_nan=False).filter(lambda v: not v.is_integer()))
def test_a_measurements_fraction_is_never_read_as_a_card_or_a_phone_number(value):
    """A latency of 0.24851226806640625 s has 17 digits after its point, Luhn-valid one time in ten: a number with a
    fraction is a measurement, never a card or a phone number (4111111111111111.0, whole, is still a card)."""
    counts: dict = {}
    assert DEFAULT.scalar(value, counts) == value and counts == {}


def test_the_floats_a_pipecat_bot_sends_stay_numbers_and_a_card_as_a_whole_float_does_not():
    times = [0.24851226806640625, 0.30000000000000004, 1750000000.123, 1764321234.5678912]
    message = {"type": "metrics", "data": {"ttfb": [{"processor": "tts", "value": t} for t in times]}}
    out = DEFAULT.message(message, {})
    assert [item["value"] for item in out["data"]["ttfb"]] == times
    assert DEFAULT.scalar(4111111111111111.0, {}) == "[card]"
