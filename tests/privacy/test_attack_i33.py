"""Issue 33 attacked from outside: a hostile bot, hostile input, a viewer, a revoked credential, an org's pattern.

Streamed and single-message redaction through the real router (what is stored in Event rows and what a
watching operator's socket receives), OTLP spans, the org pattern form, hostile numbers in paths and
params, a revoked ingest token. Attacks that hold are kept as regression tests; the ones that do not
are strict xfails, each saying what gets through: the limits README's privacy section names.
"""

import asyncio
import json
import re
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from dashboard.asgi import application
from dashboard.org.models import ApiKey
from rtvi_monitor.core.redaction import normal
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions.models import Event, Session, Span
from tests.sockets import browser_socket, receive, rtvi, send, wrap

CARD = "4929 8125 6409 3167"  # Luhn-valid
WHOLE = CARD.replace(" ", "")
GROUPS = CARD.split()
TOKENS = ["my card is ", GROUPS[0], " " + GROUPS[1], " " + GROUPS[2], " " + GROUPS[3], ", thanks"]

live = pytest.mark.usefixtures("live_path")


def strings(value) -> list[str]:
    """Every string (and key) in a JSON value: what a caller's words can be in (times and seqs are numbers)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (key, *strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


# The dashboard's own times (a snapshot's "at", a session's start): ISO 8601 with microseconds, whose digits
# hold a group of CARD one time in a few hundred ("...T14:12:54.316783" holds 3167). Never a bot's words.
OWN_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?")


def leaked(texts) -> list[str]:
    """The texts that still hold a group of CARD, read as a person reads digits (any script)."""
    return [text for text in texts if not OWN_TIME.fullmatch(text) and any(group in normal(text) for group in GROUPS)]


def ingest_socket(session_id: str, token: str, stream: str | None = None) -> WebsocketCommunicator:
    path = f"/ws/ingest/{session_id}/" + (f"?stream={stream}" if stream else "")
    return WebsocketCommunicator(application, path, headers=[(b"authorization", f"Bearer {token}".encode())])


async def stored_texts(session_id: str) -> list[str]:
    rows = await sync_to_async(list)(Event.objects.filter(session__session_id=session_id).order_by("seq"))
    out = []
    for row in rows:
        try:
            out.extend(strings(json.loads(row.message)))
        except ValueError:
            out.append(row.message)
        out.append(row.error)
    return out


async def drain(page) -> list[dict]:
    frames = []
    while not await page.receive_nothing(timeout=0.5):
        frames.append(await receive(page))
    return frames


async def stream_through(session_id, token, cookie, sends) -> tuple[list[str], list[str]]:
    """`sends`: (stream, frame) pairs sent in order, each stream on its own bot socket; returns the texts stored
    and the texts a watching operator's socket received."""
    bots = {}
    for stream, _ in sends:
        if stream not in bots:
            bots[stream] = ingest_socket(session_id, token, stream)
            assert (await bots[stream].connect())[0]
    page = None
    if cookie:
        for _ in range(100):  # the bot's socket is accepted before its session is opened
            if await sync_to_async(Session.objects.filter(session_id=session_id).exists)():
                break
            await asyncio.sleep(0.02)
        page = browser_socket(f"/ws/sessions/{session_id}/", cookie)
        opened = await page.connect()
        assert opened[0], opened
        snapshot = await receive(page)
    counts = dict.fromkeys(bots, 0)
    for stream, frame in sends:
        await send(bots[stream], frame)
        counts[stream] += not (isinstance(frame, dict) and "seq" not in frame)  # a valid bare message: no reply
    for stream, bot in bots.items():
        for _ in range(counts[stream]):
            await receive(bot, timeout=5)  # one reply each: stored (or recorded invalid)
        if stream == "" and not counts[stream]:
            await asyncio.sleep(0.3)  # (bare messages: stored once released, unanswered)
    for bot in bots.values():
        await bot.disconnect(code=1000)
    relayed = []
    if page is not None:
        relayed = strings([snapshot, *await drain(page)])
        await page.disconnect()
    return await stored_texts(session_id), relayed


def pieces(kind: str, texts: list[str], **data) -> list[tuple[str, dict]]:
    return [("", wrap(seq, rtvi(kind, {"text": text, **data}))) for seq, text in enumerate(texts, start=1)]


@pytest.fixture
def fast_hold(settings):
    settings.REDACTION_HOLD_SECONDS = 0.2
    return settings


# --- streamed redaction: what holds ---------------------------------------------------------------------------

STREAMED = {
    "tts-words": pieces("bot-tts-text", TOKENS),
    "bot-output": pieces("bot-output", TOKENS, spoken=True),
    "bot-transcription": pieces("bot-transcription", TOKENS),
    "user-finals": pieces("user-transcription", TOKENS, final=True, user_id="caller-1"),
    "user-input-spoken": pieces("user-input", TOKENS),
    "arabic-indic-digits-cut-mid-group": pieces("bot-llm-text", ["card ", "٤٩٢٩ ٨١", "٢٥ ٦٤٠٩ ٣", "١٦٧", " ok"]),
    "mixed-scripts-per-group": pieces("bot-tts-text", ["card ", "٤٩٢٩", " 8125", " ６４０９", " ३१६७"]),
    "fullwidth-digits": pieces("bot-llm-text", ["card ", "４９２９", "－８１２５－", "６４０９－３１６７"]),
    "interleaved-with-other-types": [
        ("", wrap(1, rtvi("bot-tts-text", {"text": "card " + GROUPS[0]}))),
        ("", wrap(2, rtvi("metrics", {"processing": []}))),
        ("", wrap(3, rtvi("bot-llm-text", {"text": "unrelated"}))),
        ("", wrap(4, rtvi("server-message", {"note": "x"}))),
        ("", wrap(5, rtvi("bot-tts-text", {"text": " " + " ".join(GROUPS[1:3])}))),
        ("", wrap(6, rtvi("user-started-speaking"))),
        ("", wrap(7, rtvi("bot-tts-text", {"text": " " + GROUPS[3]}))),
    ],
    "bare-messages": [("", rtvi("bot-llm-text", {"text": text})) for text in TOKENS],
}


@live
@pytest.mark.parametrize("sends", STREAMED.values(), ids=STREAMED.keys())
async def test_a_card_streamed_in_pieces_is_neither_stored_nor_relayed(
    org, ingest_token, staff_cookie, fast_hold, sends
):
    stored, relayed = await stream_through("streamed", ingest_token, staff_cookie, sends)
    assert any("[card]" in text for text in stored)  # the positive control: it came, redacted
    assert not leaked(stored), leaked(stored)
    assert not leaked(relayed), leaked(relayed)


ANYWHERE = {
    "message-id": rtvi("bot-llm-text", {"text": "x"}, id=WHOLE),
    "key": rtvi("server-message", {WHOLE: 1}),
    "plus-prefixed-string": rtvi("server-message", {"n": "+" + WHOLE}),
    "integer": rtvi("llm-function-call", {"function_name": "pay", "tool_call_id": "c", "args": {"n": int(WHOLE)}}),
    "error-text": rtvi("error", {"message": f"card {CARD} declined", "fatal": False}),
    "server-message-nested": rtvi("server-message", {"a": [{"b": {"c": f"card {CARD}"}}]}),
    "unknown-type": rtvi("my-own-type", {"text": f"card {CARD}"}),
    "partial-transcription": rtvi("user-transcription", {"text": f"it is {CARD}", "final": False}),
    "typed-user-input": rtvi("user-input", {"text": f"it is {CARD}", "input_type": "text"}),
}


@live
@pytest.mark.parametrize("message", ANYWHERE.values(), ids=ANYWHERE.keys())
async def test_a_card_anywhere_in_one_message_is_neither_stored_nor_relayed(org, ingest_token, staff_cookie, message):
    stored, relayed = await stream_through("anywhere", ingest_token, staff_cookie, [("", wrap(1, message))])
    assert not leaked(stored), leaked(stored)
    assert not leaked(relayed), leaked(relayed)


RAW = {
    "not-json": f"not json, card {CARD}",
    "over-deep": "[" * 40 + json.dumps(f"card {CARD}") + "]" * 40,
    "cut-json": '{"type":"bot-llm-text","data":{"text":"card ' + CARD,
}


@live
@pytest.mark.parametrize("raw", RAW.values(), ids=RAW.keys())
async def test_a_card_in_a_frame_that_is_not_a_message_is_neither_stored_nor_relayed(
    org, ingest_token, staff_cookie, raw
):
    stored, relayed = await stream_through("raw", ingest_token, staff_cookie, [("", raw)])
    assert stored and not leaked(stored), stored
    assert not leaked(relayed), leaked(relayed)


# --- streamed redaction: what gets through --------------------------------------------------------------------

INVALID_WRAPPERS = {
    # A JavaScript client's Date.now(): milliseconds. Each row is recorded invalid ("sent_at: expected epoch
    # seconds near now"), and an invalid row's text is redacted alone (live/session.py accept), never joined.
    "sent-at-in-milliseconds": [
        ("", wrap(seq, rtvi("bot-llm-text", {"text": text}), sent_at=1_750_000_000_000))
        for seq, text in enumerate(TOKENS, start=1)
    ],
    "direction-misspelt": [
        ("", wrap(seq, rtvi("bot-llm-text", {"text": text}), direction="to_client"))
        for seq, text in enumerate(TOKENS, start=1)
    ],
    "seq-as-a-string": [
        ("", {"seq": str(seq), "message": rtvi("bot-llm-text", {"text": text})})
        for seq, text in enumerate(TOKENS, start=1)
    ],
}


@live
@pytest.mark.parametrize("sends", INVALID_WRAPPERS.values(), ids=INVALID_WRAPPERS.keys())
async def test_a_card_streamed_by_a_bot_with_a_wrapper_mistake_is_not_stored(org, ingest_token, fast_hold, sends):
    stored, _ = await stream_through("wrapper", ingest_token, None, sends)
    assert not leaked(stored), leaked(stored)


@live
@pytest.mark.xfail(
    strict=True,
    reason="live/joining.py: a session's streams are joined per (bot stream, type); a card whose groups come "
    "over two bot streams (?stream=) of one session is never joined and is stored group by group",
)
async def test_a_card_split_over_two_bot_streams_of_one_session_is_not_stored(org, ingest_token, fast_hold):
    sends = [
        ("a", wrap(1, rtvi("bot-llm-text", {"text": "card " + " ".join(GROUPS[:2])}))),
        ("b", wrap(1, rtvi("bot-llm-text", {"text": " " + " ".join(GROUPS[2:])}))),
    ]
    stored, _ = await stream_through("two-streams", ingest_token, None, sends)
    assert not leaked(stored), leaked(stored)


@live
async def test_a_card_read_out_while_the_bot_backchannels_is_not_stored(org, ingest_token, fast_hold):
    sends, seq = [], 0
    for group in GROUPS:
        for message in (
            rtvi("user-transcription", {"text": group + " ", "final": True, "user_id": "u"}),
            rtvi("bot-started-speaking"),
            rtvi("bot-tts-text", {"text": "mm-hmm"}),
            rtvi("bot-stopped-speaking"),
        ):
            seq += 1
            sends.append(("", wrap(seq, message)))
    stored, _ = await stream_through("backchannel", ingest_token, None, sends)
    assert not leaked(stored), leaked(stored)


@live
@pytest.mark.xfail(
    strict=True,
    reason="live/joining.py: a stream's stop forgets its context (Holdback._release pops the Joined), so a "
    "number whose tail comes in the LLM's next reply (after bot-llm-stopped/-started) is judged in halves",
)
async def test_a_card_whose_tail_comes_after_bot_llm_stopped_is_not_stored(org, ingest_token, fast_hold):
    sends = [
        ("", wrap(1, rtvi("bot-llm-text", {"text": "card " + " ".join(GROUPS[:2])}))),
        ("", wrap(2, rtvi("bot-llm-stopped"))),
        ("", wrap(3, rtvi("bot-llm-started"))),
        ("", wrap(4, rtvi("bot-llm-text", {"text": " " + " ".join(GROUPS[2:])}))),
    ]
    stored, _ = await stream_through("after-stop", ingest_token, None, sends)
    assert not leaked(stored), leaked(stored)


# --- single-message redaction: what gets through ------------------------------------------------------------

WRITTEN = {
    # The card regex takes the longest digit run (up to 19 digits) and, when that fails Luhn, never tries the
    # 16 digits inside it; the phone detector refuses more than 15: nothing is found.
    "followed-by-its-cvv": f"my card is {WHOLE} 123",
    "followed-by-its-expiry": f"my card is {CARD} 12 27",
    "preceded-by-a-short-number": f"ref 12 {CARD}",
    "with-a-decimal-point": f"amount {WHOLE}.0",
    # Separators: ASCII whitespace other than " " is not read as a space (normal() maps non-ASCII only).
    "groups-on-lines": "\n".join(GROUPS),
    "groups-tab-separated": "\t".join(GROUPS),
    "groups-comma-separated": ", ".join(GROUPS),  # as an LLM writes a number out for TTS
    "zero-width-spaces": "\u200b".join(GROUPS),
    "soft-hyphens": "\u00ad".join(GROUPS),
    "trailing-dash": f"card {WHOLE}- thanks",
}


@live
@pytest.mark.parametrize("text", WRITTEN.values(), ids=WRITTEN.keys())
async def test_a_card_written_so_is_not_stored(org, ingest_token, text):
    message = rtvi("user-transcription", {"text": text, "final": False})  # a partial: redacted alone, as it is
    stored, _ = await stream_through("written", ingest_token, None, [("", wrap(1, message))])
    assert not leaked(stored), leaked(stored)


@live
async def test_a_card_sent_as_a_float_is_not_stored(org, ingest_token):
    args = {"card_number": float(WHOLE)}
    message = rtvi("llm-function-call", {"function_name": "pay", "tool_call_id": "c1", "args": args})
    await stream_through("float", ingest_token, None, [("", wrap(1, message))])
    rows = await sync_to_async(list)(Event.objects.filter(session__session_id="float"))
    assert rows and all(WHOLE not in row.message for row in rows), [row.message for row in rows]


# --- OTLP spans -------------------------------------------------------------------------------------------------


def post_spans(client, token: str, spans, service="support-bot"):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    from tests.otlp_samples import attr

    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": [attr("service.name", service)]}, scope_spans=[ScopeSpans(spans=spans)]
            )
        ]
    )
    return client.post(
        "/v1/traces",
        request.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def stored_spans() -> list[str]:
    return [s for row in Span.objects.all() for s in (row.name, row.service_name, *strings(row.attributes)) if s]


@pytest.mark.django_db
def test_a_card_in_a_spans_name_service_attribute_key_or_integer_value_is_not_stored(client, ingest_token):
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from tests.otlp_samples import span

    one = span(1, f"charge card {CARD}", 0, 10, conversation__id="call-1", tool__result=f"ok {CARD}")
    one.attributes.append(KeyValue(key=f"card {CARD}", value=AnyValue(bool_value=True)))
    one.attributes.append(KeyValue(key="card.number", value=AnyValue(int_value=int(WHOLE))))
    answer = post_spans(client, ingest_token, [one], service=f"bot-for {CARD}")
    assert answer.status_code == 200, answer.content
    stored = stored_spans()
    assert any("[card]" in text for text in stored)  # the positive control
    assert not leaked(stored), leaked(stored)
    assert int(WHOLE) not in Span.objects.get().attributes.values()


@pytest.mark.django_db
def test_a_card_as_a_double_span_attribute_is_not_stored(client, ingest_token):
    from tests.otlp_samples import span

    assert post_spans(client, ingest_token, [span(1, "llm", 0, 10, card=float(WHOLE))]).status_code == 200
    assert float(WHOLE) not in Span.objects.get().attributes.values()


# --- hostile input ----------------------------------------------------------------------------------------------

BIG = "9" * 40


@pytest.mark.django_db
def test_numbers_too_big_for_any_column_in_paths_are_a_404_not_a_500(staff_client, org):
    from tests.access.test_roles import make_call

    make_call(org)
    for url in (
        f"/api/sessions/call-1/events/{BIG}/",
        f"/alerts/{BIG}/",
        f"/api/alerts/{BIG}/",
        f"/ingest/audio/call-1/user/{BIG}",
    ):
        assert staff_client.get(url).status_code in (302, 400, 404, 405), url
    for url in (f"/api/alerts/{BIG}/acknowledge/", f"/api/alerts/{BIG}/notes/", f"/alerts/{BIG}/act/"):
        assert staff_client.post(url).status_code in (302, 400, 404, 405), url


HOSTILE_VALUES = [BIG * 200, "-1", "1e400", "٣", "nan", "0x10", "\x00", " 1", "1.5", "²"]
HOSTILE_PARAMS = ["limit", "after", "before", "cursor", "points", "upto", "after_seq", "seq", "started_after"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        *("/api/sessions/", "/sessions/", "/api/sessions/call-1/events/", "/api/sessions/call-1/events.ndjson"),
        *("/api/alerts/", "/api/audit/", "/api/sessions/call-1/audio/peaks/", "/overview/panel/"),
    ],
)
def test_hostile_numbers_in_query_params_are_answered_never_a_500(staff_client, org, url):
    from tests.access.test_roles import make_call

    make_call(org)
    for name in HOSTILE_PARAMS:
        for value in HOSTILE_VALUES:
            status = staff_client.get(url, {name: value}).status_code
            assert status < 500, (url, name, value[:20], status)


@pytest.mark.parametrize(
    "header",
    [
        *("bytes=-", "bytes=" + BIG + "-", "bytes=-" + BIG, "bytes=5-1", "bytes=\u0663-\u0664", "bytes=0-1,2-3"),
        *("items=0-1", "bytes=1e3-", "bytes= 0-1", "bytes=-0", "bytes=99999-"),
    ],
)
def test_a_malformed_range_header_is_read_as_the_whole_or_refused_with_a_reason(header):
    from rtvi_monitor.audio.views import _byte_range

    answer = _byte_range(header, 1000)
    assert answer is None or isinstance(answer, str) or (0 <= answer[0] <= answer[1] < 1000), answer


@live
async def test_deeply_nested_json_from_a_bot_is_recorded_invalid_and_the_socket_stays(org, ingest_token):
    bot = ingest_socket("deep", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, '{"seq":1,"message":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}")
    reply = await receive(bot, timeout=5)
    assert "error" in reply
    await send(bot, wrap(2, rtvi("bot-ready", {"version": "1.0"})))
    assert (await receive(bot, timeout=5)).get("ack") == 2
    await bot.disconnect(code=1000)


# --- an organization's hostile pattern --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("pattern", [r"(\d)\1{3}", r"card(?=\d)", r"(?<=card )\d+", r"(?P<x>a)(?P=x)"])
def test_a_pattern_re2_cannot_take_is_refused_with_its_reason(staff_client, org, pattern):
    answer = staff_client.post("/settings/redaction/", {"name": "mine", "pattern": pattern, "enabled": "on"})
    assert answer.status_code in (200, 400)
    assert "linear" in answer.content.decode() and "not supported" in answer.content.decode()
    assert not RedactionRule.objects.exists()


@pytest.mark.django_db
def test_a_catastrophic_pattern_is_taken_and_costs_linear_time(staff_client, org):
    staff_client.post("/settings/redaction/", {"name": "evil", "pattern": "(a+)+$", "enabled": "on"})
    assert RedactionRule.objects.filter(name="evil").exists()
    redactor = RedactionRule.redactor_for(org.pk)
    started = time.perf_counter()
    assert redactor.text("a" * 100_000 + "!", {}) == "a" * 100_000 + "!"
    assert time.perf_counter() - started < 1.0


# --- a revoked ingest token ------------------------------------------------------------------------------------


@live
async def test_a_revoked_token_is_refused_for_traces_and_new_sockets_and_its_open_socket_closes(
    org, ingest_token, settings
):
    settings.BROWSER_ACCESS_CHECK = 0.1
    bot = ingest_socket("revoked", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "1.0"})))
    assert (await receive(bot)).get("ack") == 1
    await sync_to_async(IngestToken.objects.update)(revoked_at=timezone.now())
    frame = await receive(bot, timeout=3)
    assert frame.get("fatal") is True
    again = ingest_socket("revoked", ingest_token, stream="other")
    await again.connect()
    assert (await receive(again)).get("fatal") is True
    traces = await sync_to_async(post_spans)(Client(), ingest_token, [])
    assert traces.status_code in (401, 403)


# --- a viewer ---------------------------------------------------------------------------------------------------

WORD = "Zanzibarquux"  # a caller's word: in the bot's messages and its errors' text


@live
async def test_a_viewer_watching_the_live_list_while_a_bot_talks_and_fails_gets_none_of_its_words(
    org, ingest_token, settings
):
    from dashboard.org.models import Role
    from tests.conftest import make_member

    client = Client()
    await sync_to_async(client.force_login)(await sync_to_async(make_member)(org, "v", Role.VIEWER))
    listing = browser_socket("/ws/sessions/", f"sessionid={client.cookies['sessionid'].value}")
    assert (await listing.connect())[0]
    bot = ingest_socket("talks", ingest_token)
    assert (await bot.connect())[0]
    messages = [
        rtvi("user-transcription", {"text": f"I live in {WORD}", "final": True, "user_id": WORD}),
        rtvi("bot-llm-text", {"text": f"{WORD} it is"}),
        rtvi("error", {"message": f"lookup of {WORD} failed", "fatal": False}),
        rtvi("llm-function-call", {"function_name": WORD, "tool_call_id": "c", "args": {"city": WORD}}),
        rtvi("error", {"message": f"crashed on {WORD}", "fatal": True}),
    ]
    for seq, message in enumerate(messages, start=1):
        await send(bot, wrap(seq, message))
    for _ in messages:
        await receive(bot, timeout=5)
    await bot.disconnect(code=1000)
    frames = [await receive(listing)]
    frames += await drain(listing)
    await listing.disconnect()
    seen = json.dumps(frames)
    assert "talks" in seen  # the positive control: the viewer saw the session come and go
    assert WORD.lower() not in seen.lower(), seen
    urls = ("/", "/overview/panel/", "/sessions/", "/alerts/", "/api/sessions/", "/api/sessions/talks/", "/api/alerts/")
    viewer_pages = [(await sync_to_async(client.get)(url)).content.decode() for url in urls]
    assert not [page[:200] for page in viewer_pages if WORD.lower() in page.lower()]


# --- an erase ---------------------------------------------------------------------------------------------------


@live
async def test_after_an_erase_none_of_the_callers_words_is_reachable_through_the_api_or_pages(
    org, ingest_token, staff_client
):
    from tests.otlp_samples import span

    bot = ingest_socket("erase-me", ingest_token)
    assert (await bot.connect())[0]
    messages = [
        rtvi("user-transcription", {"text": f"I live in {WORD}", "final": True, "user_id": WORD}),
        rtvi("error", {"message": f"lookup of {WORD} failed", "fatal": False}),
    ]
    for seq, message in enumerate(messages, start=1):
        await send(bot, wrap(seq, message))
    for _ in messages:
        await receive(bot, timeout=5)
    llm = span(1, "llm", 0, 10, conversation__id="erase-me", gen_ai__prompt=f"caller lives in {WORD}")
    assert (await sync_to_async(post_spans)(Client(), ingest_token, [llm])).status_code == 200
    await bot.disconnect(code=1000)
    for _ in range(100):  # ended once its grace is over
        if await sync_to_async(Session.objects.filter(session_id="erase-me", status="ended").exists)():
            break
        await asyncio.sleep(0.05)
    key = (await sync_to_async(ApiKey.issue)(org, "eraser"))[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    search = await sync_to_async(api.get)("/api/sessions/", {"q": WORD})
    assert [s["id"] for s in search.json()["sessions"]] == ["erase-me"]  # the positive control
    erased = await sync_to_async(api.delete)("/api/sessions/erase-me/")
    assert erased.status_code == 200, erased.content

    reached = []
    for client, url, params in [
        (api, "/api/sessions/", {"q": WORD}),
        (api, "/api/sessions/", {"caller": WORD}),
        (api, "/api/sessions/erase-me/", {}),
        (api, "/api/sessions/erase-me/events/", {}),
        (api, "/api/sessions/erase-me/events.ndjson", {}),
        (api, "/api/sessions/erase-me/traces/", {}),
        (api, "/api/audit/", {}),
        (api, "/api/alerts/", {}),
        (staff_client, "/", {}),
        (staff_client, "/sessions/", {}),
        (staff_client, "/audit/", {}),
        (staff_client, "/overview/panel/", {}),
    ]:
        answer = await sync_to_async(client.get)(url, params)
        body = b"".join(answer.streaming_content) if answer.streaming else answer.content
        if WORD.lower() in body.decode().lower():
            reached.append(url)
    assert not reached
    assert not await sync_to_async(Span.objects.filter(conversation_id="erase-me").exists)()


@live
@pytest.mark.xfail(
    strict=True,
    reason="a limit, by design (README): pieces further apart than REDACTION_HOLD_SECONDS are judged apart, so a "
    "card whose groups come slower than the hold is stored group by group; here the hold is 0.2 s and the groups "
    "0.3 s apart (the default hold, 3 s, is set for a TTS service's words and a caller's finals at speaking pace)",
)
@pytest.mark.parametrize("kind", ["bot-tts-text", "user-transcription"])
async def test_a_card_spoken_slower_than_the_hold_is_not_stored(org, ingest_token, fast_hold, kind):
    bot = ingest_socket("slow", ingest_token)
    assert (await bot.connect())[0]
    for seq, text in enumerate(TOKENS, start=1):
        await send(bot, wrap(seq, rtvi(kind, {"text": text, "final": True})))
        await asyncio.sleep(0.3)
    for _ in TOKENS:
        await receive(bot, timeout=5)
    await bot.disconnect(code=1000)
    stored = await stored_texts("slow")
    assert not leaked(stored), leaked(stored)


# --- keys: a read key writing, another organization's key guessing ---------------------------------------------

WRITES = [
    ("delete", "/api/sessions/call-1/", None),
    ("delete", "/api/sessions/?caller=u", None),
    ("post", "/api/sessions/call-1/end/", {}),
    ("post", "/api/sessions/call-1/send-text/", {"content": "hi"}),
    ("post", "/api/alerts/rules/", {"name": "x", "condition": "fatal_error"}),
]
READS = [
    "/api/sessions/call-1/",
    "/api/sessions/call-1/events/",
    "/api/sessions/call-1/events/1/",
    "/api/sessions/call-1/events.ndjson",
    "/api/sessions/call-1/traces/",
    "/api/sessions/call-1/turns/",
    "/api/sessions/call-1/audio/",
    "/api/sessions/call-1/audio.wav",
    "/api/sessions/call-1/audio/peaks/",
]


@pytest.mark.django_db
def test_a_read_key_writes_nothing_and_another_organizations_key_reads_nothing(org, other_org):
    from tests.access.test_roles import make_call

    make_call(org)
    record, reader = ApiKey.issue(org, "reader")
    record.scopes = "read"
    record.save()
    stranger = ApiKey.issue(other_org, "stranger")[1]
    for method, url, body in WRITES:
        kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
        answer = getattr(Client(), method)(url, HTTP_AUTHORIZATION=f"Bearer {reader}", **kwargs)
        assert answer.status_code == 403, (method, url, answer.status_code)
        answer = getattr(Client(), method)(url, HTTP_AUTHORIZATION=f"Bearer {stranger}", **kwargs)
        # (its own organization's: a rule made there, nobody's calls erased there)
        assert answer.status_code in (400, 403, 404) or b"call-1" not in answer.content, (method, url)
    assert Session.objects.filter(session_id="call-1").exists()
    for url in READS:
        answer = Client().get(url, HTTP_AUTHORIZATION=f"Bearer {stranger}")
        assert answer.status_code == 404, (url, answer.status_code)


@live
async def test_a_revoked_bot_that_ignores_the_close_has_nothing_more_taken(org, ingest_token, settings):
    """Under daphne (autobahn), frames a client sends after the server's close frame still reach the consumer
    until the close handshake times out: a revoked bot must not have them stored."""
    settings.BROWSER_ACCESS_CHECK = 0.1
    bot = ingest_socket("ignores-close", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "1.0"})))
    assert (await receive(bot)).get("ack") == 1
    await sync_to_async(IngestToken.objects.update)(revoked_at=timezone.now())
    assert (await receive(bot, timeout=3)).get("fatal") is True
    assert (await bot.receive_output(2))["type"] == "websocket.close"
    for seq in (2, 3):
        await send(bot, wrap(seq, rtvi("bot-llm-text", {"text": f"after the revocation {seq}"})))
    assert await bot.receive_nothing(timeout=0.5)  # no ack
    await bot.disconnect(code=1000)
    stored = await stored_texts("ignores-close")
    assert not [text for text in stored if "after the revocation" in text], stored


@live
async def test_a_demoted_members_page_that_ignores_the_close_gets_no_more_snapshots(org, settings):
    """A page socket closed because its member was demoted to viewer (4403) can still send until the close
    handshake times out under daphne: a snapshot it asks for then (the call's contents) must not be sent."""
    from dashboard.org.models import Membership, Role
    from tests.access.test_roles import SAID, make_call
    from tests.conftest import make_member

    settings.BROWSER_ACCESS_CHECK = 0.1
    await sync_to_async(make_call)(org, "live-1", Session.Status.LIVE)
    client = Client()
    user = await sync_to_async(make_member)(org, "demoted", Role.OPERATOR)
    await sync_to_async(client.force_login)(user)
    page = browser_socket("/ws/sessions/live-1/", f"sessionid={client.cookies['sessionid'].value}")
    assert (await page.connect())[0]
    assert SAID in json.dumps(await receive(page))  # the positive control: an operator's snapshot
    await sync_to_async(Membership.objects.filter(user=user).update)(role=Role.VIEWER)
    while (await page.receive_output(3))["type"] != "websocket.close":
        pass
    await send(page, {"snapshot": True})
    after = []
    while not await page.receive_nothing(timeout=0.5):
        after.append(await page.receive_output())
    assert not [frame for frame in after if SAID in json.dumps(frame)], after
    await page.disconnect()


@pytest.mark.django_db
def test_a_members_export_ends_when_the_member_is_demoted_mid_stream(org, settings, monkeypatch):
    from dashboard.org.models import Membership, Role
    from tests.conftest import make_member
    from tests.session_samples import make_session

    settings.BROWSER_ACCESS_CHECK = 0
    monkeypatch.setattr("rtvi_monitor.sessions.api.CHUNK", 5)
    make_session(org)
    client = Client()
    user = make_member(org, "exporter", Role.OPERATOR)
    client.force_login(user)
    response = client.get("/api/sessions/call-1/events.ndjson")
    chunks = iter(response.streaming_content)
    first = next(chunks)
    Membership.objects.filter(user=user).update(role=Role.VIEWER)
    rest = b"".join(chunks).decode().splitlines()
    assert len(first.decode().splitlines()) == 5
    assert len(rest) <= 1, f"{len(rest)} more lines after the demotion"


@pytest.mark.django_db
def test_the_site_admin_refuses_a_backreference_with_re2s_reason(org, admin_client):
    answer = admin_client.post(
        "/admin/rtvi_monitor/redactionrule/add/",
        {"organization": org.pk, "name": "mine", "pattern": r"(\d)\1{3}", "enabled": "on"},
    )
    assert answer.status_code == 200  # the form again, with its error
    assert "linear" in answer.content.decode() and not RedactionRule.objects.exists()


@live
@pytest.mark.parametrize(
    "frame",
    [
        '{"seq":1,"message":{"label":"rtvi-ai","type":"server-message","data":{"n":' + "9" * 5000 + "}}}",
        '{"seq":' + "9" * 5000 + ',"message":{"label":"rtvi-ai","type":"bot-ready","data":{"version":"1"}}}',
        '{"seq":1,"message":{"label":"rtvi-ai","type":"server-message","data":{"n":1e400}}}',
        "[" + ",".join(["[" * 30 + "1" + "]" * 30] * 50) + "]",
        '{"seq":1,"message":{"label":"rtvi-ai","type":"bot-llm-text","data":{"text":"\\ud800 4929 8125 6409 3167"}}}',
    ],
    ids=["5000-digit-number", "5000-digit-seq", "1e400", "a-batch-of-deep-lists", "lone-surrogate-with-a-card"],
)
async def test_hostile_json_from_a_bot_is_answered_the_socket_stays_and_no_card_is_kept(org, ingest_token, frame):
    bot = ingest_socket("hostile-json", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, frame)
    assert await receive(bot, timeout=5)  # answered (an ack or an error), not dropped
    while not await bot.receive_nothing(timeout=0.2):
        await receive(bot)
    await send(bot, wrap(7, rtvi("bot-ready", {"version": "1.0"})))
    assert (await receive(bot, timeout=5)).get("ack") == 7
    await bot.disconnect(code=1000)
    stored = await stored_texts("hostile-json")
    assert not leaked(stored), leaked(stored)
