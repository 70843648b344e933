"""A revoked credential stops what it holds open: a bot's ingest socket, a private API key's stream."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from rtvi_monitor.live.models import IngestToken
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")

TRANSCRIPT = rtvi("user-transcription", {"text": "hello", "final": True, "timestamp": "t", "user_id": "u"})


async def connected(session_id: str, token: str):
    socket = bot_socket(session_id, token, acks=None)
    assert (await socket.connect())[0]
    await send(socket, wrap(1, TRANSCRIPT))
    assert await receive(socket) == {"ack": 1}
    return socket


async def test_a_revoked_tokens_open_sockets_get_a_fatal_error_and_a_do_not_retry_close(org, ingest_token, settings):
    from rtvi_dashboard.wire import CLOSE_BAD_TOKEN, FATAL_CLOSE_CODES

    settings.BROWSER_ACCESS_CHECK = 0.1
    first, second = await connected("s1", ingest_token), await connected("s2", ingest_token)
    await sync_to_async(IngestToken.objects.update)(revoked_at=timezone.now())
    for socket in (first, second):
        frame = await receive(socket)
        assert frame["fatal"] is True and "revoked" in frame["error"]
        assert (await socket.receive_output(2))["code"] == CLOSE_BAD_TOKEN
    assert CLOSE_BAD_TOKEN in FATAL_CLOSE_CODES  # the bot package does not connect again with it


async def test_a_deleted_token_closes_its_sockets_too(org, ingest_token, settings):
    settings.BROWSER_ACCESS_CHECK = 0.1
    socket = await connected("s1", ingest_token)
    await sync_to_async(IngestToken.objects.all().delete)()
    assert (await receive(socket))["fatal"] is True
    assert (await socket.receive_output(2))["code"] == 4401


async def test_another_tokens_sockets_stay_open(org, ingest_token, settings):
    settings.BROWSER_ACCESS_CHECK = 0.1
    _, other = await sync_to_async(IngestToken.issue)(org, "other bot")
    kept, revoked = await connected("s1", ingest_token), await connected("s2", other)
    await sync_to_async(IngestToken.objects.filter(name="other bot").update)(revoked_at=timezone.now())
    assert (await receive(revoked))["fatal"] is True
    assert await kept.receive_nothing(0.5)  # five rounds later, still streaming
    await send(kept, wrap(2, TRANSCRIPT))
    assert await receive(kept) == {"ack": 2}
    await kept.disconnect()


async def test_one_query_a_round_checks_every_token_in_use(org, ingest_token, settings, monkeypatch):
    from rtvi_monitor.live import consumers

    settings.BROWSER_ACCESS_CHECK = 0.1
    asked = []
    real = consumers._active_tokens

    def counted(pks):
        asked.append(sorted(pks))
        return real(pks)

    monkeypatch.setattr(consumers, "_active_tokens", counted)
    sockets = [await connected(f"s{n}", ingest_token) for n in range(5)]
    asked.clear()  # the rounds while the sockets connected: as many as that took tenths of a second
    began = time.monotonic()
    await asyncio.sleep(0.35)
    elapsed = time.monotonic() - began
    # A round every 0.1 s however many bots hold the token (one query for all: not one per socket), on a
    # loaded machine too, where the sleep itself may last longer than asked.
    assert 1 <= len(asked) <= elapsed / 0.1 + 1 and all(len(pks) == 1 for pks in asked)
    for socket in sockets:
        await socket.disconnect()
    assert consumers.token_watch.task is None  # no bots, no rounds


def test_a_private_api_keys_stream_ends_when_the_key_is_revoked(org, api_key, settings, monkeypatch):
    from django.test import Client

    from dashboard.org.models import ApiKey
    from tests.session_samples import make_session

    settings.BROWSER_ACCESS_CHECK = 0  # read the key again before every chunk
    monkeypatch.setattr("rtvi_monitor.sessions.api.CHUNK", 5)
    make_session(org)
    response = Client().get("/api/sessions/call-1/events.ndjson", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    chunks = iter(response.streaming_content)
    first = next(chunks)
    ApiKey.objects.update(revoked_at=timezone.now())
    rest = b"".join(chunks).decode().splitlines()
    assert len(first.decode().splitlines()) == 5
    assert rest == ['{"error": "The API key was revoked or expired while this was being sent; the rest was not sent."}']


def test_a_private_api_keys_stream_ends_when_the_key_expires(org, api_key, settings, monkeypatch):
    from django.test import Client

    from dashboard.org.models import ApiKey
    from tests.session_samples import make_session

    settings.BROWSER_ACCESS_CHECK = 0
    monkeypatch.setattr("rtvi_monitor.sessions.api.CHUNK", 5)
    make_session(org)
    response = Client().get("/api/sessions/call-1/events.ndjson", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    chunks = iter(response.streaming_content)
    next(chunks)
    ApiKey.objects.update(expires_at=timezone.now())
    assert "revoked or expired" in b"".join(chunks).decode()


def test_a_valid_keys_stream_is_whole(org, api_key, settings, monkeypatch):
    import json

    from django.test import Client

    from tests.session_samples import make_session

    settings.BROWSER_ACCESS_CHECK = 0
    monkeypatch.setattr("rtvi_monitor.sessions.api.CHUNK", 5)
    make_session(org)
    response = Client().get("/api/sessions/call-1/events.ndjson", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 19))


async def test_an_async_stream_a_key_holds_ends_at_the_first_chunk_after_it_is_revoked(settings):
    from dashboard.access.streams import awhile_key_valid

    settings.BROWSER_ACCESS_CHECK = 0
    valid = [True]

    class Key:
        def still_valid(self):
            return valid[0]

    class Request:
        api_key = Key()

    async def chunks():
        for n in range(5):
            if n == 2:
                valid[0] = False  # revoked while chunk 1 was on its way
            yield n

    assert [chunk async for chunk in awhile_key_valid(Request(), chunks())] == [0, 1]
    member = type("Request", (), {"api_key": None})()
    assert [chunk async for chunk in awhile_key_valid(member, chunks())] == [0, 1, 2, 3, 4]


def _members_export(org, settings, monkeypatch, role="operator"):
    """A member's events.ndjson, its first chunk read: (the client, the user, the rest of the chunks)."""
    from django.test import Client

    from tests.conftest import make_member
    from tests.session_samples import make_session

    settings.BROWSER_ACCESS_CHECK = 0  # ask the access policy again before every chunk
    monkeypatch.setattr("rtvi_monitor.sessions.api.CHUNK", 5)
    make_session(org)
    client = Client()
    user = make_member(org, "exporter", role)
    client.force_login(user)
    response = client.get("/api/sessions/call-1/events.ndjson")
    chunks = iter(response.streaming_content)
    assert len(next(chunks).decode().splitlines()) == 5
    return client, user, chunks


@pytest.mark.parametrize("lost", ["removed", "demoted", "signed out"])
def test_a_members_stream_ends_when_they_lose_access(org, settings, monkeypatch, lost):
    from dashboard.org.models import Membership, Role

    client, user, chunks = _members_export(org, settings, monkeypatch)
    if lost == "removed":
        Membership.objects.filter(user=user).delete()
    elif lost == "demoted":
        Membership.objects.filter(user=user).update(role=Role.VIEWER)
    else:
        client.logout()
    rest = b"".join(chunks).decode().splitlines()
    assert rest == ['{"error": "The API key was revoked or expired while this was being sent; the rest was not sent."}']


def test_a_members_stream_is_whole_while_they_may(org, settings, monkeypatch):
    import json

    from dashboard.org.models import Membership, Role

    _, user, chunks = _members_export(org, settings, monkeypatch)
    Membership.objects.filter(user=user).update(role=Role.ADMIN)  # raised: still allowed
    lines = b"".join(chunks).decode().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(6, 19))


def test_a_members_audit_export_ends_when_they_are_no_longer_admin(org, settings, monkeypatch):
    from django.test import Client

    from dashboard.org import audit_views
    from dashboard.org.models import Membership, Role
    from tests.conftest import make_member

    settings.BROWSER_ACCESS_CHECK = 0

    def entries(_):
        yield from (f'{{"n":{n}}}\n' for n in range(5))

    monkeypatch.setattr(audit_views, "_ndjson", entries)
    client = Client()
    user = make_member(org, "auditor", Role.ADMIN)
    client.force_login(user)
    chunks = iter(client.get("/api/audit/?format=ndjson").streaming_content)
    assert next(chunks) == b'{"n":0}\n'
    Membership.objects.filter(user=user).update(role=Role.OPERATOR)
    assert b"".join(chunks).decode().splitlines() == [
        '{"error": "The API key was revoked or expired while this was being sent; the rest was not sent."}'
    ]
