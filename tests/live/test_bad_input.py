"""Whatever a bot sends, the answer is a clear error or a stored record, and nobody else notices.

Each bad input goes to a real server (daphne, over real sockets) on SQLite and
on PostgreSQL. For each: the reply says what was wrong (briefly), the socket
stays usable, a healthy bot on the same server keeps getting acks within a
second, and at the end every message that was acknowledged is stored, once,
with what was sent.
"""

import asyncio
import json
import os
import time
import uuid

import httpx
import pytest
import websockets

from tests.conftest import DATABASE_URL, reachable, skip_or_fail
from tests.server import DaphneServer
from tests.sockets import rtvi, wrap

pytestmark = pytest.mark.timeout(300)

NOW = time.time()
TEXT = rtvi("bot-llm-text", {"text": " ok"})


def deep(levels: int) -> str:
    return '{"label":"rtvi-ai","type":"server-message","data":' + "[" * levels + "]" * levels + "}"


def msg_text(type_: str, data_json: str) -> str:
    return f'{{"label":"rtvi-ai","type":"{type_}","data":{data_json}}}'


def wrapped_text(seq, message_json: str, **extra) -> str:
    fields = {"seq": seq, "direction": "to-client", "sent_at": NOW, **extra}
    head = json.dumps(fields)[:-1]
    return head + ', "message": ' + message_json + "}"


TOKENS_1E308 = msg_text("metrics", '{"tokens":[{"processor":"llm","prompt_tokens":1e308,"total_tokens":1e308}]}')

# (name, frame text, what the first reply's error must say; None: acknowledged)
CASES = [
    ("not JSON", "hello, dashboard", "not JSON"),
    ("empty frame", "", "not JSON"),
    ("a JSON array", "[1, 2, 3]", "expected a JSON object"),
    ("JSON null", "null", "expected a JSON object"),
    ("a bare number", "42", "expected a JSON object"),
    ("a bare string", '"hi"', "expected a JSON object"),
    ("no type", '{"label": "rtvi-ai"}', "type: expected a non-empty string"),
    ("another label", '{"label": "other", "type": "bot-ready"}', 'label: expected "rtvi-ai"'),
    ("a numeric type", '{"label": "rtvi-ai", "type": 7}', "type: expected a non-empty string"),
    ("a 100 KB type", json.dumps(rtvi("x" * 100_000)), "type: longer than 64"),
    ("a 65-character type", json.dumps(rtvi("y" * 65)), "type: longer than 64"),
    ("NaN in about", msg_text("client-ready", '{"about": {"x": NaN}}'), "NaN is not JSON"),
    ("Infinity", msg_text("server-message", '{"v": Infinity}'), "Infinity is not JSON"),
    ("-Infinity", msg_text("server-message", '{"v": -Infinity}'), "-Infinity is not JSON"),
    ("1e400", msg_text("server-message", '{"v": 1e400}'), "out of range"),
    ("two 1e308 token totals", f'{{"batch": [{TOKENS_1E308}, {TOKENS_1E308}]}}', "expected a number up to 1e15"),
    ("seq 2**63", wrapped_text(2**63, json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq 10**30", wrapped_text(10**30, json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq 0", wrapped_text(0, json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq -1", wrapped_text(-1, json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq as text", wrapped_text("seven", json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq true", wrapped_text(True, json.dumps(TEXT)), "seq: expected a whole number"),
    ("seq 1.5", wrapped_text(1.5, json.dumps(TEXT)), "seq: expected a whole number"),
    ("sent_at 1e20", "SEQ:sent_at=1e20", "sent_at: expected epoch seconds near now"),
    ("sent_at as text", "SEQ:sent_at=yesterday", "sent_at: expected epoch seconds near now"),
    ("sent_at negative", "SEQ:sent_at=-5", "sent_at: expected epoch seconds near now"),
    ("direction sideways", "SEQ:direction=sideways", "direction: expected"),
    ("nested 2,000 deep", deep(2000), "nested deeper than"),
    ("nested 40 deep", deep(40), "nested deeper than 32"),
    ("NUL in raw text", "not json \u0000 at all", "not JSON"),
    # Valid messages whose text no database column takes as it is: stored, acknowledged.
    (
        "NUL in a JSON string",
        wrapped_text(1, json.dumps(rtvi("user-transcription", {"text": "a\u0000b", "final": True}))),
        None,
    ),
    ("NUL in an unknown type", wrapped_text(1, json.dumps(rtvi("odd\u0000type"))), None),
    ("a lone surrogate", wrapped_text(1, '{"label":"rtvi-ai","type":"server-message","data":{"t":"\\ud800"}}'), None),
    (
        "NUL in about",
        wrapped_text(1, json.dumps(rtvi("client-ready", {"version": "1.0.0", "about": {"n": "x\u0000y"}}))),
        None,
    ),
    (
        "metric value as text",
        msg_text("metrics", '{"ttfb": [{"processor": "llm", "value": "fast"}]}'),
        "data.ttfb[0].value",
    ),
    ("final as text", json.dumps(rtvi("user-transcription", {"text": "hi", "final": "yes"})), "data.final"),
    ("batch not a list", '{"batch": 5}', 'label: expected "rtvi-ai"'),
    ("a message that is text", "SEQ:message=hi", "expected a JSON object"),
    ("id not a string", json.dumps(rtvi("client-message", {"t": "x"}, id=5)), "id: expected a string"),
    ("error fatal maybe", json.dumps(rtvi("error", {"error": "x", "fatal": "maybe"})), "data.fatal"),
    ("a digit string of 5,000", '{"label":"rtvi-ai","type":"server-message","data":' + "1" * 5000 + "}", "not JSON"),
    (
        "invalid UTF-8 bytes",
        wrapped_text(1, '{"label":"rtvi-ai","type":"bot-ready","data":{"v":"XX"}}')
        .encode()
        .replace(b"XX", b"\xff\xfe"),
        None,
    ),
]


def frame_for(case_frame, seq: int):
    """Frames written as SEQ:field=value are a valid wrapped message with one wrapper field broken."""
    if isinstance(case_frame, str) and case_frame.startswith("SEQ:"):
        field, value = case_frame[4:].split("=", 1)
        try:
            value = json.loads(value)
        except ValueError:
            pass
        frame = wrap(seq, TEXT, sent_at=NOW)
        frame[field] = value
        return json.dumps(frame)
    return case_frame


RUN = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request):
    env = {"SESSION_END_GRACE": "5"}
    if request.param == "postgresql":
        if not reachable("127.0.0.1", 5432):
            skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
        env["DATABASE_URL"] = os.getenv("TEST_DATABASE_URL", DATABASE_URL)
    org = f"bad-{request.param}-{RUN}"
    with DaphneServer(env=env) as running:
        running.ingest_token = running.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        running.api_key = running.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
        yield running


def connect(server, session_id):
    return websockets.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/",
        additional_headers={"Authorization": f"Bearer {server.ingest_token}"},
        max_size=None,
    )


async def replies(socket, wait: float = 1.0) -> list[dict]:
    """Every reply until the socket is quiet for `wait` seconds."""
    got = []
    while True:
        try:
            raw = await asyncio.wait_for(socket.recv(), wait)
        except TimeoutError:
            return got
        assert len(raw) < 1000, f"a reply repeats the input at length: {raw[:200]}"
        got.append(json.loads(raw))
        wait = 0.3


async def stored_lines(server, session_id) -> list[dict]:
    """Every stored message of the session, in the dashboard's order."""
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"}) as api:
        response = await api.get(f"/api/sessions/{session_id}/events.ndjson")
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


async def stored(server, session_id) -> dict[int, dict]:
    """The stored messages the bot numbered, by the bot's seq (the first one stored under it)."""
    events: dict[int, dict] = {}
    for line in await stored_lines(server, session_id):
        if line["bot_seq"] is not None:
            events.setdefault(line["bot_seq"], line)
    return events


class Healthy:
    """A well-behaved bot on the same server: every message acknowledged within a second, or the test fails."""

    def __init__(self, server, session_id):
        self.server, self.session_id, self.seq, self.acked = server, session_id, 0, {}

    async def __aenter__(self):
        self.socket = await connect(self.server, self.session_id).__aenter__()
        return self

    async def __aexit__(self, *exc):
        await self.socket.close()

    async def check(self):
        self.seq += 1
        # (Not ending in its number: a token that ends in digits waits for the next, which may go on with the
        # number; its ack waits with it, up to REDACTION_HOLD_SECONDS. That wait is redaction's, not a stall.)
        message = rtvi("bot-llm-text", {"text": f" healthy {self.seq} now"})
        started = time.monotonic()
        await self.socket.send(json.dumps(wrap(self.seq, message, sent_at=time.time())))
        reply = json.loads(await asyncio.wait_for(self.socket.recv(), 1.0))
        assert reply == {"ack": self.seq}
        assert time.monotonic() - started < 1.0
        self.acked[self.seq] = message


@pytest.mark.parametrize(("name", "frame", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_a_bad_input_is_answered_and_recorded_and_stops_nobody(server, name, frame, expected):
    session_id = f"bad-{uuid.uuid4().hex[:10]}"
    async with Healthy(server, f"healthy-{session_id}") as healthy, connect(server, session_id) as bad:
        await healthy.check()
        await bad.send(frame_for(frame, 1))
        answers = await replies(bad)
        assert answers, "no reply"
        first = answers[0]
        if expected is None:
            assert "ack" in first, first
        else:
            assert expected in first.get("error", ""), first
        await healthy.check()
        # The socket is still usable: a good message next is stored and acknowledged.
        good_seq = 100
        await bad.send(json.dumps(wrap(good_seq, TEXT, sent_at=time.time())))
        assert {"ack": good_seq} in await replies(bad, 2.0)
        await healthy.check()
    events = await stored(server, session_id)
    lines = await stored_lines(server, session_id)
    assert events[good_seq]["message"] == TEXT
    acked = [a["ack"] for a in answers if "ack" in a]
    for seq in acked:
        assert seq in events
    assert len(lines) >= 2, "the bad input was not recorded"  # the bad frame's record(s), and the good message
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))  # the dashboard's own order
    healthy_events = await stored(server, f"healthy-{session_id}")
    assert {seq: healthy_events[seq]["message"] for seq in healthy.acked} == healthy.acked


async def test_1500_copies_of_a_pending_seq_get_one_reply(server):
    session_id = f"copies-{uuid.uuid4().hex[:10]}"
    big_type = rtvi("z" * 60)
    async with connect(server, session_id) as bad:
        await bad.send(json.dumps({"batch": [wrap(1, big_type, sent_at=NOW)] * 1500}))
        answers = await replies(bad)
    assert answers == [{"ack": 1, "warning": f"unknown RTVI type {'z' * 60!r}: stored, not interpreted"}]
    assert list(await stored(server, session_id)) == [1]
    assert len(await stored_lines(server, session_id)) == 1


async def test_a_seq_that_holds_other_content_is_an_error_and_both_are_kept(server):
    session_id = f"conflict-{uuid.uuid4().hex[:10]}"
    other = rtvi("bot-llm-text", {"text": "something else"})
    async with connect(server, session_id) as bot:
        await bot.send(json.dumps(rtvi("bot-ready", {"version": "2.1.0"})))  # bare: no number of the bot's
        await bot.send(json.dumps(wrap(1, TEXT, sent_at=NOW)))  # seq 1 is the bot's own: free
        first = await replies(bot)
        await bot.send(json.dumps(wrap(1, other, sent_at=NOW)))  # seq 1 again, other content
        answers = await replies(bot)
        await bot.send(json.dumps(wrap(2, TEXT, sent_at=NOW)))  # the next one: nothing shifted
        after = await replies(bot)
    assert first == [{"ack": 1}]
    conflict = [a for a in answers if "error" in a]
    assert conflict and "seq 1 already holds a different message" in conflict[0]["error"]
    assert conflict[0]["seq"] == 1
    assert after == [{"ack": 2}]
    events = await stored(server, session_id)
    assert events[1]["message"] == TEXT and events[2]["message"] == TEXT
    lines = await stored_lines(server, session_id)
    assert [line["message"]["type"] for line in lines] == ["bot-ready", "bot-llm-text", "bot-llm-text", "bot-llm-text"]
    assert lines[2]["message"] == other and lines[2]["valid"] is False and lines[2]["bot_seq"] == 1


async def test_a_frame_over_the_limit_in_bytes_closes_with_4009_and_a_reason(server):
    session_id = f"big-{uuid.uuid4().hex[:10]}"
    text = "é" * 200_000  # 200,000 characters, 400,000 bytes: over 256 KiB only when counted in bytes
    async with connect(server, session_id) as bot:
        await bot.send(json.dumps(wrap(1, rtvi("bot-llm-text", {"text": text})), ensure_ascii=False))
        reason = json.loads(await bot.recv())
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await bot.recv()
    assert reason["fatal"] is True and "over the limit of 262144" in reason["error"]
    assert closed.value.rcvd.code == 4009


async def test_text_no_database_takes_as_is_is_summarised_and_its_session_still_ends(server):
    """NUL and a lone surrogate in what the state keeps (PostgreSQL's jsonb refuses both)."""
    session_id = f"nul-end-{uuid.uuid4().hex[:10]}"
    about = '{"library": "x\\u0000y", "v": "\\ud800", "literal": "\\\\u0000"}'
    frames = [
        wrapped_text(1, msg_text("client-ready", '{"version": "2.1.0", "about": ' + about + "}")),
        wrapped_text(2, json.dumps(rtvi("user-transcription", {"text": "a\u0000b", "final": True}))),
        wrapped_text(3, json.dumps(rtvi("error", {"error": "quota \u0000", "fatal": True}))),
    ]
    async with connect(server, session_id) as bot:
        for frame in frames:
            await bot.send(frame)
        assert sorted(a["ack"] for a in await replies(bot)) == [1, 2, 3]
    headers = {"Authorization": f"Bearer {server.api_key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as api:
        for _ in range(100):
            body = (await api.get(f"/api/sessions/{session_id}/")).json()
            if body["status"] == "ended":
                break
            await asyncio.sleep(0.1)
    assert body["status"] == "ended" and body["end_reason"] == "fatal error"
    assert body["event_count"] == 3 and body["fatal"] is True
    assert body["transcript"][0]["text"] in ("a\u0000b", "a\\u0000b")
