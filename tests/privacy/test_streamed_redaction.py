"""A caller's number cut into many messages is redacted as it is joined (rtvi_monitor/live/joining.py).

An LLM streams "4111", " 1111", ... each too short to be found alone; a caller
says a card number over two transcription finals. Proved three ways: the core
(`redaction.Joined`) for any text cut anywhere, by Hypothesis; a session's
rows (`LiveSession.accept` and `ready`) for any cut, interleaved with other
messages, in order and each once; and through the real router and a real
server, as stored (rows, and the SQLite files' bytes), as relayed to a
watching page, and as folded into the state, each with its positive control
(the text arrived, redacted).
"""

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from asgiref.sync import sync_to_async
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect as ws_connect

from rtvi_monitor.core.redaction import DEFAULT, HOLD_CHARS, Joined
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live.joining import CLOSES
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.sessions.models import Event
from tests.server import DaphneServer
from tests.sockets import bot_socket, browser_socket, receive, rtvi, send, wrap

CARD = "4929 8125 6409 3167"  # Luhn-valid; its groups are written as tokens below

# Texts of the pieces a detector looks at: digits of two scripts, separators, capitals, and whole numbers.
PARTS = [*"0123456789 -.+()abxGB:", "4111 1111 1111 1111", "4155550100", "+1 (415) 555-0100", "٤", "４", "–"]
PARTS += ["GB82 WEST 1234 5698 7654 32", "123-45-6789", " thanks", "٤١٥٥٥٥٠١٠٠", "\u00a0", "  "]
texts = st.lists(st.sampled_from(PARTS), max_size=30).map("".join)
cuts = st.lists(st.integers(0, 400), max_size=12)


def cut(text: str, points: list[int]) -> list[str]:
    at, pieces = 0, []
    for point in [*sorted({p % (len(text) + 1) for p in points}), len(text)]:
        pieces.append(text[at:point])
        at = point
    return pieces


def streamed(pieces: list[str]) -> list[str]:
    joined, out = Joined(DEFAULT), []
    for piece in pieces:
        out.extend(text for text, _ in joined.add(piece))
        assert len(joined.pieces) <= len(pieces)
    out.extend(text for text, _ in joined.release())
    return out


@settings(max_examples=1500, suppress_health_check=list(HealthCheck), deadline=None)
@given(texts, cuts)
def test_any_cut_of_any_text_is_stored_as_the_redaction_of_the_whole(text, points):
    pieces = cut(text, points)
    out = streamed(pieces)
    assert len(out) == len(pieces)  # one final text per piece, each once
    assert "".join(out) == DEFAULT.text(text, {})


@settings(max_examples=500, suppress_health_check=list(HealthCheck), deadline=None)
@given(st.lists(st.sampled_from([*PARTS, "ana@example.com", "@", "e", "x.co"]), max_size=30).map("".join), cuts)
def test_no_address_survives_whatever_its_cut(text, points):
    """The promise for e-mail is weaker (an address cut before its "@" is matched from the "@" on), but none
    is left whole."""
    out = "".join(streamed(cut(text, points)))
    assert not [span for span in DEFAULT.spans(out) if span[2] == "email"]


@settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
@given(st.integers(1, 400))
def test_nothing_is_held_past_the_bound_in_characters(length):
    """A run longer than any match is let go: at most HOLD_CHARS characters of it wait."""
    joined = Joined(DEFAULT)
    for _ in range(length):
        joined.add("7")
        assert sum(map(len, joined.pieces)) <= HOLD_CHARS


# --- a session's rows -------------------------------------------------------------------------------------------


T = 1_750_000_000.0  # when the rows below come: near wrap()'s sent_at, as a bot's clock is


class Replier:
    """A bot's connection, as the session sees it (answers go nowhere here)."""


def session() -> LiveSession:
    return LiveSession(pk=1, organization_id=1, session_id="s", state=SessionState())


def llm(seq: int, text: str) -> dict:
    return wrap(seq, rtvi("bot-llm-text", {"text": text}))


@settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
@given(texts, cuts, st.lists(st.integers(0, 40), max_size=6), st.booleans())
def test_a_sessions_rows_leave_in_order_each_once_with_the_whole_texts_redaction(text, points, others, stop):
    """LLM tokens interleaved with other messages (TTS words of another text, a metrics message): every row
    leaves once, numbered in the order it leaves; the tokens leave in the order they came, and their texts,
    joined, are the whole's redaction; a bot-llm-stopped lets the tokens before it go first."""
    live, replier, out = session(), Replier(), []
    frames = [llm(i + 1, piece) for i, piece in enumerate(cut(text, points))]
    for n, at in enumerate(sorted(others)):
        other = rtvi("bot-tts-text", {"text": f"word{n}"}) if n % 2 else rtvi("metrics", {"processing": []})
        frames.insert(min(at, len(frames)), wrap(1000 + n, other))
    if stop:
        frames.append(wrap(2000, rtvi("bot-llm-stopped")))
    for frame in frames:
        row, _ = live.accept(frame, T, replier, "", DEFAULT)
        out.extend(live.ready(row, DEFAULT))
    if stop:
        assert not live.holdback.joins.get(("", "bot-llm-text"))  # the stop judged them as they stood
    out.extend(live.release_all())
    assert [row.seq for row in out] == list(range(1, len(frames) + 1))  # numbered in the order they leave
    tokens = [row.message["data"]["text"] for row in out if row.type == "bot-llm-text"]
    assert "".join(tokens) == DEFAULT.text(text, {})
    assert not live.holdback.holding


def test_a_held_row_waits_its_time_and_no_longer():
    live, replier = session(), Replier()
    row, _ = live.accept(llm(1, "my card is 4111"), T, replier, "", DEFAULT)
    assert live.ready(row, DEFAULT) == [] and live.holdback.oldest() == T
    later, _ = live.accept(wrap(2, rtvi("metrics", {"ttfb": []})), T + 0.2, replier, "", DEFAULT)
    assert live.ready(later, DEFAULT) == [later] and later.seq == 1  # another stream does not wait for it
    assert live.expired(T + 0.9, wait=1.0) == []
    assert live.expired(T + 1.0, wait=1.0) == [row] and row.seq == 2
    assert row.message["data"]["text"] == "my card is 4111"  # judged as it stood: no match in it


@settings(max_examples=200, suppress_health_check=list(HealthCheck), deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2), st.sampled_from(PARTS)), max_size=25), st.floats(0.1, 3))
def test_nothing_is_held_past_the_wait(arrivals, wait):
    """However pieces come and whenever, once the session is asked (the consumer's timer asks at each row's
    deadline), no row has waited `wait` seconds or more, and every row leaves once."""
    live, replier, now, left = session(), Replier(), T, []
    for seq, (gap, piece) in enumerate(arrivals, start=1):
        now += gap
        left.extend(live.expired(now, wait))
        row, _ = live.accept(llm(seq, piece), now, replier, "", DEFAULT)
        left.extend(live.ready(row, DEFAULT))
        held = [r for _, rows in live.holdback.joins.values() for r in rows]
        assert all(r.received_at + wait > now for r in held)
    left.extend(live.release_all())
    assert sorted(r.bot_seq for r in left) == list(range(1, len(arrivals) + 1))


def test_every_stream_that_closes_has_its_stopper():
    assert set(CLOSES["bot-llm-stopped"]) == {"bot-llm-text"} and "bot-tts-text" in CLOSES["bot-tts-stopped"]


def test_a_resend_of_a_redacted_piece_after_a_reload_is_acked_not_taken_for_a_conflict():
    from rtvi_monitor.live.held import HeldSeqs, held_seqs

    live, replier = session(), Replier()
    rows = []
    for seq, piece in enumerate(["card ", "4111", " 1111", " 1111", " 1111", "."], start=1):
        row, _ = live.accept(llm(seq, piece), T, replier, "", DEFAULT)
        rows.extend(live.ready(row, DEFAULT))
    rows.extend(live.release_all())  # (the "." could still be a separator: it waited)
    stored = [{"stream": r.stream, "bot_seq": r.bot_seq, "message": r.message, "redacted": r.redacted} for r in rows]
    assert [r.message["data"]["text"] for r in rows] == ["card ", "[card]", "", "", "", "."]
    reloaded = session()
    reloaded.held = HeldSeqs(held_seqs(stored))
    row, reply = reloaded.accept(llm(3, " 1111"), T + 1, replier, "", DEFAULT)
    assert row is None and reply == {"ack": 3}


# --- through the real router -------------------------------------------------------------------------------------

pytestmark_live = pytest.mark.usefixtures("live_path")
GROUPS = CARD.split()
TOKENS = ["Sure, I have your card as ", GROUPS[0], " " + GROUPS[1], " " + GROUPS[2], " " + GROUPS[3], ", thanks."]


def digits_of_card_in(text: str) -> bool:
    """A group of the card standing alone (not inside another number: a timestamp's decimals may hold 4929)."""
    return any(re.search(rf"(?<![\d.]){group}(?![\d.])", text) for group in GROUPS)


@pytestmark_live
async def test_a_card_streamed_in_tokens_is_stored_relayed_and_folded_redacted(org, ingest_token, staff_cookie):
    bot = bot_socket("streamed-card", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("bot-llm-started")))
    assert (await receive(bot))["ack"] == 1
    page = browser_socket("/ws/sessions/streamed-card/", staff_cookie)
    assert (await page.connect())[0]
    await receive(page)  # the snapshot
    for seq, token in enumerate(TOKENS, start=2):
        await send(bot, wrap(seq, rtvi("bot-llm-text", {"text": token})))
    await send(bot, wrap(len(TOKENS) + 2, rtvi("bot-llm-stopped")))
    acks = set()
    while len(acks) < len(TOKENS) + 1:
        acks.add((await receive(bot, timeout=5))["ack"])  # each acked once stored
    relayed = []
    while "[card]" not in json.dumps(relayed) or "thanks" not in json.dumps(relayed):
        relayed.append(await receive(page, timeout=5))
    assert not digits_of_card_in(json.dumps(relayed))

    rows = await sync_to_async(list)(Event.objects.filter(session__session_id="streamed-card").order_by("seq"))
    texts = [json.loads(r.message)["data"]["text"] for r in rows if r.type == "bot-llm-text"]
    assert "".join(texts) == "Sure, I have your card as [card], thanks."
    assert not digits_of_card_in(" ".join(r.message for r in rows))
    assert [r.type for r in rows][-1] == "bot-llm-stopped"  # the stop after the tokens it ended

    fresh = browser_socket("/ws/sessions/streamed-card/", staff_cookie)
    assert (await fresh.connect())[0]
    snapshot = await receive(fresh)
    assert not digits_of_card_in(json.dumps(snapshot["state"]))
    assert snapshot["state"]["counts"]["redacted"] == {"card": 1}
    await fresh.disconnect()
    await page.disconnect()
    await bot.disconnect(code=1000)


@pytestmark_live
async def test_a_card_said_over_two_finals_is_one_match_and_a_lone_final_is_let_go(org, ingest_token, settings):
    settings.REDACTION_HOLD_SECONDS = 0.3
    bot = bot_socket("said-card", ingest_token)
    assert (await bot.connect())[0]
    said = ["my card number is 4929 8125", " 6409 3167", " and my order is 12"]
    for seq, text in enumerate(said, start=1):
        await send(bot, wrap(seq, rtvi("user-transcription", {"text": text, "final": True, "user_id": "u"})))
    acks = set()
    while len(acks) < 3:
        acks.add((await receive(bot, timeout=5))["ack"])  # the last after its wait: nothing came after it
    await bot.disconnect(code=1000)
    rows = await sync_to_async(list)(Event.objects.filter(session__session_id="said-card").order_by("seq"))
    texts = [json.loads(r.message)["data"]["text"] for r in rows]
    assert texts == ["my card number is [card]", "", " and my order is 12"]
    assert json.loads(rows[0].redacted) == {"card": 1}


@pytestmark_live
async def test_numbers_in_a_function_calls_arguments_are_redacted(org, ingest_token):
    bot = bot_socket("numbers", ingest_token)
    assert (await bot.connect())[0]
    args = {"card_number": 4929812564093167, "phone": 4155550123, "quantity": 2}
    await send(bot, wrap(1, rtvi("llm-function-call", {"function_name": "pay", "tool_call_id": "c1", "args": args})))
    assert "ack" in await receive(bot)
    await bot.disconnect(code=1000)
    event = await sync_to_async(Event.objects.get)(session__session_id="numbers")
    assert json.loads(event.message)["data"]["args"] == {"card_number": "[card]", "phone": "[phone]", "quantity": 2}


def test_the_sqlite_files_hold_no_group_of_a_streamed_card(tmp_path):
    """The bytes: a real server on its own SQLite file; every group the LLM streamed is missing from the
    database, its write-ahead log and its shared memory; what stood in for it is there."""
    with DaphneServer(env={"INGEST_FLUSH_INTERVAL": "0.01"}, workdir=str(tmp_path)) as server:
        token = server.manage("create_ingest_token", "--create", "--org", "bytes").splitlines()[-1]
        with ws_connect(
            f"{server.ws_url}/ws/ingest/bytes-card/", additional_headers={"Authorization": f"Bearer {token}"}
        ) as socket:
            for seq, text in enumerate(TOKENS, start=1):
                socket.send(json.dumps(wrap(seq, rtvi("bot-llm-text", {"text": text}), sent_at=time.time())))
            socket.send(json.dumps(wrap(len(TOKENS) + 1, rtvi("bot-llm-stopped"), sent_at=time.time())))
            acked = set()
            while len(acked) < len(TOKENS) + 1:
                acked.add(json.loads(socket.recv(timeout=5))["ack"])
        httpx.get(f"{server.url}/healthz", timeout=5)
    stored = b"".join(p.read_bytes() for p in Path(tmp_path).glob("db.sqlite3*"))
    assert b"[card]" in stored
    for group in GROUPS:
        assert f'"{group}'.encode() not in stored and f' {group}"'.encode() not in stored, group


def test_an_organizations_pattern_never_takes_a_messages_shape_apart():
    """`(a+)+$` matches the end of "data": keys are read by the built-in detectors alone, so the message keeps
    its shape (and a streamed piece its text field) while the values are still the pattern's."""
    from rtvi_monitor.core.redaction import Redactor, compile_rule

    hostile = Redactor([compile_rule("slow", "(a+)+$")])
    counts: dict = {}
    out = hostile.message({"type": "server-message", "data": {"data": "banana", "4155550100": 1}}, counts)
    assert out == {"type": "server-message", "data": {"data": "banan[slow]", "[phone]": 1}}
    live, replier = session(), Replier()
    row, _ = live.accept(llm(1, "a cat on a sofa"), T, replier, "", hostile)
    (ready,) = live.ready(row, hostile)
    assert ready.message["data"]["text"] == "a cat on a sof[slow]"
