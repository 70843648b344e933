"""The bot ingest socket through the real router: auth, replies, storage, dedupe, limits."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions.models import Event, Session
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")

TRANSCRIPT = rtvi("user-transcription", {"text": "hello", "final": True, "timestamp": "t", "user_id": "u"})


def with_pseudonym(message: dict, organization) -> dict:
    """The message as stored: its user_id is the caller's pseudonym, the same for the same caller."""
    from rtvi_monitor.sessions.models import caller_keys

    pseudonym = "caller:" + caller_keys(organization.pk, message["data"]["user_id"])[0][:12]
    return {**message, "data": {**message["data"], "user_id": pseudonym}}


@sync_to_async
def stored(session_id="s1"):
    return list(Event.objects.filter(session__session_id=session_id).order_by("seq"))


@sync_to_async
def session(session_id="s1"):
    return Session.objects.get(session_id=session_id)


async def connect(session_id, token, agent=None, acks=None):
    socket = bot_socket(session_id, token, agent, acks)
    connected, _ = await socket.connect()
    assert connected
    return socket


async def test_a_missing_token_is_told_why_then_closed(org):
    socket = await connect("s1", None)
    assert (await receive(socket))["error"].startswith("Send 'Authorization: Bearer")
    assert (await socket.receive_output(2))["code"] == 4401


async def test_an_unknown_or_revoked_token_is_closed(org, ingest_token):
    await sync_to_async(IngestToken.objects.update)(revoked_at=timezone.now())
    socket = await connect("s1", ingest_token)
    frame = await receive(socket)
    assert frame == {"error": "Unknown or revoked ingest token.", "fatal": True}
    assert (await socket.receive_output(2))["code"] == 4401


async def test_a_private_api_key_is_not_an_ingest_token(org, api_key):
    socket = await connect("s1", api_key)
    assert (await receive(socket))["fatal"] is True


async def test_a_bad_session_id_is_refused(org, ingest_token):
    socket = await connect("bad%20id", ingest_token)
    assert "session id" in (await receive(socket))["error"]


async def test_a_wrapped_message_is_stored_then_acknowledged(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, TRANSCRIPT))
    assert await receive(socket) == {"ack": 1}
    (event,) = await stored()
    assert (event.seq, event.direction, event.type, event.valid) == (1, "to-client", "user-transcription", True)
    assert json.loads(event.message) == with_pseudonym(TRANSCRIPT, org)
    assert event.sent_at == 1_750_000_000.0 and event.received_at > 1_750_000_000.0
    await socket.disconnect()


async def test_an_invalid_message_is_answered_with_what_is_wrong_and_recorded(org, ingest_token):
    socket = await connect("s1", ingest_token)
    bad = rtvi("user-transcription", {"text": "hi", "final": "yes", "timestamp": "t", "user_id": "u"})
    await send(socket, wrap(1, bad))
    reply = await receive(socket)
    assert reply["seq"] == 1 and "data.final" in reply["error"] and "boolean" in reply["error"]
    await send(socket, wrap(2, TRANSCRIPT))  # the socket stays open
    assert await receive(socket) == {"ack": 2}
    first, _ = await stored()
    assert not first.valid and "data.final" in first.error and json.loads(first.message) == with_pseudonym(bad, org)
    await socket.disconnect()


async def test_non_json_is_recorded_with_its_raw_text_and_answered(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, "this is {not json")
    reply = await receive(socket)
    assert reply["seq"] is None and reply["error"]
    (event,) = await stored()
    assert not event.valid and event.message == "this is {not json"
    await socket.disconnect()


async def test_an_unknown_type_is_kept_and_acknowledged_with_a_warning(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, rtvi("bot-future-thing", {"x": 1})))
    reply = await receive(socket)
    assert reply["ack"] == 1 and "unknown RTVI type" in reply["warning"]
    (event,) = await stored()
    assert event.valid and event.type == "bot-future-thing"
    await socket.disconnect()


async def test_a_batch_is_acknowledged_message_by_message(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, {"batch": [wrap(i, rtvi("bot-llm-text", {"text": f"t{i}"})) for i in range(1, 6)]})
    acks = [await receive(socket) for _ in range(5)]
    assert acks == [{"ack": i} for i in range(1, 6)]
    assert [e.seq for e in await stored()] == [1, 2, 3, 4, 5]
    await socket.disconnect()


async def test_a_bot_that_asks_for_ranged_acks_gets_one_ack_frame_per_write(org, ingest_token):
    """?acks=ranges: the stored messages of one write in one {"acks": [[first, last], ...]} frame; the rest as ever."""
    socket = await connect("s1", ingest_token, acks="ranges")
    frames = [wrap(i, rtvi("bot-llm-text", {"text": f" {i}"})) for i in range(1, 9)]
    frames[3] = wrap(4, rtvi("bot-llm-text", {"text": 5}))  # invalid: stored as such, answered with an error
    frames[5] = wrap(6, rtvi("x-custom", {}))  # unknown type: stored, acked with a warning
    await send(socket, {"batch": frames})
    replies = [await receive(socket) for _ in range(3)]
    assert await socket.receive_nothing(0.3)  # nothing more: not one frame per message
    acks = [r for r in replies if "acks" in r]
    assert acks == [{"acks": [[1, 3], [5, 5], [7, 8]]}]
    assert {r.get("seq") for r in replies if "error" in r} == {4}
    assert [r["ack"] for r in replies if "warning" in r] == [6]
    assert [e.seq for e in await stored()] == list(range(1, 9))  # an ack means stored
    await send(socket, wrap(2, rtvi("bot-llm-text", {"text": " 2"})))  # a resend of a stored message
    assert await receive(socket) == {"acks": [[2, 2]]}
    await socket.disconnect()


async def test_a_bot_that_does_not_ask_for_ranged_acks_gets_one_ack_per_message(org, ingest_token):
    """Bots from before ranged acks (and any query they send the dashboard does not know) are answered as ever."""
    socket = await connect("s1", ingest_token, acks="something-else")
    await send(socket, {"batch": [wrap(i, rtvi("bot-llm-text", {"text": f" {i}"})) for i in range(1, 4)]})
    assert [await receive(socket) for _ in range(3)] == [{"ack": 1}, {"ack": 2}, {"ack": 3}]
    await socket.disconnect()


async def test_bare_messages_get_server_sequence_numbers_and_catalog_directions(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, rtvi("bot-ready", {"version": "2.1.0"}, id="r1"))
    await send(socket, rtvi("client-ready", {"version": "2.1.0", "about": {"library": "x"}}))
    await asyncio.sleep(0.2)
    events = await stored()
    assert [(e.seq, e.direction) for e in events] == [(1, "to-client"), (2, "from-client")]
    await socket.disconnect()


async def test_a_resent_message_is_stored_once_and_acknowledged_again(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, TRANSCRIPT))
    assert await receive(socket) == {"ack": 1}
    await send(socket, wrap(1, TRANSCRIPT))
    assert await receive(socket) == {"ack": 1}
    assert len(await stored()) == 1
    await socket.disconnect()


async def test_a_bot_that_reconnects_and_resends_makes_no_duplicates_and_no_gaps(org, ingest_token):
    first = await connect("s1", ingest_token)
    for seq in range(1, 11):
        await send(first, wrap(seq, rtvi("bot-llm-text", {"text": str(seq)})))
    await first.disconnect()  # acks lost: the bot does not know what was stored
    second = await connect("s1", ingest_token)
    for seq in range(1, 16):  # resends everything unacknowledged, then goes on
        await send(second, wrap(seq, rtvi("bot-llm-text", {"text": str(seq)})))
    acks = {(await receive(second))["ack"] for _ in range(15)}
    assert acks == set(range(1, 16))
    assert [e.seq for e in await stored()] == list(range(1, 16))
    assert (await session()).status == "live"
    await second.disconnect()


async def test_a_wrong_seq_or_direction_is_answered_and_still_recorded(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, {"seq": "seven", "message": TRANSCRIPT})
    assert "seq: expected a whole number from 1" in (await receive(socket))["error"]
    await send(socket, {"seq": 5, "direction": "sideways", "message": TRANSCRIPT})
    assert "direction" in (await receive(socket))["error"]
    events = await stored()
    assert len(events) == 2 and not any(e.valid for e in events)
    await socket.disconnect()


async def test_a_frame_over_the_size_limit_closes_the_socket(org, ingest_token, settings):
    settings.INGEST_MAX_FRAME_BYTES = 1000
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, rtvi("bot-llm-text", {"text": "x" * 2000})))
    assert "over the limit" in (await receive(socket))["error"]
    assert (await socket.receive_output(2))["code"] == 4009


async def test_a_sustained_rate_over_the_limit_closes_the_socket(org, ingest_token, settings):
    settings.INGEST_RATE_LIMIT = 10
    settings.INGEST_RATE_BURST_SECONDS = 1
    socket = await connect("s1", ingest_token)
    await send(socket, {"batch": [wrap(i, rtvi("bot-llm-text", {"text": "t"})) for i in range(1, 31)]})
    assert "rate limit" in (await receive(socket))["error"]
    assert (await socket.receive_output(2))["code"] == 4429


async def test_the_agent_query_links_the_session_to_an_agent_of_the_tokens_org(org, ingest_token, agents):
    socket = await connect("s1", ingest_token, agent=str(agents[0].pk))
    await send(socket, wrap(1, TRANSCRIPT))
    await receive(socket)
    assert (await session()).agent_id == agents[0].pk
    await socket.disconnect()


async def test_an_agent_of_another_org_is_refused_but_the_session_recorded(org, ingest_token, other_org):
    from tests.conftest import make_agent

    foreign = await sync_to_async(make_agent)(other_org, "foreign")
    socket = await connect("s1", ingest_token, agent=str(foreign.pk))
    assert "not an agent of your organization" in (await receive(socket))["error"]
    await send(socket, wrap(1, TRANSCRIPT))
    assert await receive(socket) == {"ack": 1}
    assert (await session()).agent_id is None
    await socket.disconnect()


async def test_a_disconnected_bot_ends_its_session_after_the_grace_period(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, TRANSCRIPT))
    await receive(socket)
    await socket.disconnect(code=1006)  # dropped: it may come back within the grace (a 1000 close ends at once)
    assert (await session()).status == "live"
    await asyncio.sleep(0.6)
    ended = await session()
    assert ended.status == "ended" and ended.ended_at and ended.end_reason == "bot vanished"
    assert ended.state["transcript"][0]["text"] == "hello"


async def test_a_bot_that_reconnects_within_the_grace_period_keeps_its_session_live(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await socket.disconnect(code=1006)
    again = await connect("s1", ingest_token)
    await asyncio.sleep(0.6)
    assert (await session()).status == "live"
    await again.disconnect()


async def test_a_fatal_error_ends_the_session(org, ingest_token):
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, rtvi("error", {"error": "LLM quota exceeded", "fatal": True})))
    assert await receive(socket) == {"ack": 1}
    await asyncio.sleep(0.2)
    ended = await session()
    assert ended.status == "ended" and ended.fatal and ended.end_reason == "fatal error"
    await socket.disconnect()


async def test_the_session_row_carries_counts_and_the_protocol_version(org, ingest_token):
    socket = await connect("s1", ingest_token)
    frames = [
        wrap(
            1, rtvi("client-ready", {"version": "1.0.0", "about": {"library": "@pipecat-ai/client-js"}}), "from-client"
        ),
        wrap(2, rtvi("bot-ready", {"version": "1.0.0", "about": {"name": "bot"}})),
        wrap(3, TRANSCRIPT),
        wrap(4, rtvi("user-transcription", {"final": "no"})),
    ]
    await send(socket, {"batch": frames})
    for _ in frames:
        await receive(socket)
    await asyncio.sleep(0.1)
    row = await session()
    assert row.protocol_version == "1.0.0"
    assert (row.event_count, row.invalid_count) == (4, 1)
    assert "hello" in row.transcript_text
    await socket.disconnect()


async def test_consumers_skip_the_per_message_connection_check(org, ingest_token, monkeypatch):
    """Channels >= 4.2 runs aclose_old_connections() before every message; ours must not."""
    import channels.consumer

    calls = []

    async def counting():
        calls.append(1)

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counting)
    socket = await connect("s1", ingest_token)
    for seq in range(1, 21):
        await send(socket, wrap(seq, TRANSCRIPT))
    for _ in range(20):
        await receive(socket)
    assert calls == []
    await socket.disconnect()


async def test_one_message_too_deep_in_a_batch_leaves_the_others_acknowledged(org, ingest_token):
    deep: list = [1]
    for _ in range(40):
        deep = [deep]
    socket = await connect("s1", ingest_token)
    frames = [wrap(i, rtvi("bot-llm-text", {"text": f" {i}"})) for i in range(1, 6)]
    frames[2] = wrap(3, rtvi("server-message", {"deep": deep}))
    await send(socket, {"batch": frames})
    replies = [await receive(socket) for _ in range(5)]
    assert [r for r in replies if "ack" in r] == [{"ack": 1}, {"ack": 2}, {"ack": 4}, {"ack": 5}]
    (error,) = [r for r in replies if "error" in r]
    assert error == {"error": "not JSON: nested deeper than 32 levels", "seq": 3}
    await socket.disconnect()


async def test_a_sustained_byte_rate_over_the_limit_closes_the_socket(org, ingest_token, settings):
    settings.INGEST_RATE_BYTES = 10_000
    settings.INGEST_RATE_BURST_SECONDS = 1
    socket = await connect("s1", ingest_token)
    await send(socket, wrap(1, rtvi("server-message", {"blob": "x" * 20_000})))
    refusal = await receive(socket)
    assert refusal["fatal"] and "10000 bytes per second" in refusal["error"]
    assert (await socket.receive_output(2))["code"] == 4429


async def test_a_flush_whose_caller_is_cancelled_still_stores_and_acknowledges(
    org, ingest_token, live_settings, monkeypatch
):
    """A disconnecting bot's flush cancelled by the server's close timeout: what it stored is still acked."""
    import threading

    from rtvi_monitor.live import storage
    from rtvi_monitor.live.writer import get_writer

    live_settings.INGEST_FLUSH_INTERVAL = 60  # only the flush below, none of the writer's own
    live_settings.INGEST_GROUP_COMMIT = False
    socket = await connect("s1", ingest_token)
    entered, gate = threading.Event(), threading.Event()
    real_store = storage.store

    def slow_store(*args):
        entered.set()
        gate.wait(5)
        return real_store(*args)

    monkeypatch.setattr(storage, "store", slow_store)
    await send(socket, wrap(1, rtvi("bot-llm-text", {"text": "hi"})))
    writer = get_writer()
    for _ in range(500):  # the message has come in, and waits for a flush
        if writer.pending:
            break
        await asyncio.sleep(0.01)
    caller = asyncio.create_task(writer.flush())
    await asyncio.to_thread(entered.wait, 5)
    caller.cancel()  # while the batch is being stored
    gate.set()
    assert await receive(socket) == {"ack": 1}
    assert await sync_to_async(Event.objects.filter(seq=1).count)() == 1
    await socket.disconnect()
