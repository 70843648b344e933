"""The writer: rows the database refuses for their data are isolated; everything else goes through."""

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError

from rtvi_monitor.live import session, storage
from rtvi_monitor.sessions.models import Event
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


async def connect(session_id, token):
    socket = bot_socket(session_id, token)
    assert (await socket.connect())[0]
    return socket


async def stored(session_id) -> dict[int, Event]:
    rows = await sync_to_async(list)(Event.objects.filter(session__session_id=session_id))
    return {row.seq: row for row in rows}


async def test_a_row_the_database_refuses_is_answered_and_others_in_the_batch_are_stored(ingest_token, monkeypatch):
    """A seq past what the database's column holds (the boundary is widened here to let it through)."""
    monkeypatch.setattr(session, "MAX_SEQ", 2**70)
    bad, good = await connect("refused", ingest_token), await connect("healthy", ingest_token)
    await send(bad, {"batch": [wrap(1, rtvi("bot-ready")), wrap(2**63 + 5, rtvi("bot-llm-text", {"text": "x"}))]})
    await send(good, wrap(1, rtvi("bot-llm-text", {"text": "fine"})))
    assert await receive(good) == {"ack": 1}
    answers = [await receive(bad), await receive(bad)]
    assert {"ack": 1} in answers
    (refusal,) = [a for a in answers if "error" in a]
    assert refusal["seq"] == 2**63 + 5 and "could not be stored" in refusal["error"]
    # The writer is not stuck: both bots go on.
    await send(bad, wrap(3, rtvi("bot-llm-text", {"text": "after"})))
    await send(good, wrap(2, rtvi("bot-llm-text", {"text": "after"})))
    assert await receive(bad) == {"ack": 3} and await receive(good) == {"ack": 2}
    assert sorted(await stored("refused")) == [1, 3]
    assert sorted(await stored("healthy")) == [1, 2]
    for socket in (bad, good):
        await socket.disconnect()


async def test_a_row_refused_as_sent_is_stored_escaped_as_an_invalid_record(ingest_token, monkeypatch):
    """A database that refuses a row's text (as PostgreSQL refuses NUL): the row alone is kept escaped."""
    real_insert = storage._insert

    def picky(rows, last_event_at):
        if any(row.valid and "\u2603" in row.text for row in rows):  # stored as sent: UTF-8, not \\u escapes
            raise IntegrityError("this database does not take snowmen")
        return real_insert(rows, last_event_at)

    monkeypatch.setattr(storage, "_insert", picky)
    bad, good = await connect("snowman", ingest_token), await connect("plain", ingest_token)
    await send(bad, wrap(1, rtvi("bot-llm-text", {"text": "\u2603 " * 5000})))
    await send(good, wrap(1, rtvi("bot-llm-text", {"text": "fine"})))
    assert await receive(good) == {"ack": 1}
    reply = await receive(bad)
    assert reply["seq"] == 1 and "could not be stored as sent (IntegrityError); stored escaped" in reply["error"]
    (row,) = (await stored("snowman")).values()
    assert not row.valid and row.message.startswith('{"label":"rtvi-ai"') and "\\u2603" in row.message
    assert len(row.message) < 9000  # cut
    for socket in (bad, good):
        await socket.disconnect()
