"""Acting on a live call through the real URLconf and router: end it, send text into it.

The bot is a socket on the real ingest route, as the bot package opens it (`?control=1`); the operator
is Django's async client on the same event loop, as daphne serves both. The request and the bot's socket
meet through the channel layer (the in-memory one here; tests/live/test_live_control_pipecat.py runs a real
Pipecat bot against a server, and two servers on Redis).
"""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from dashboard.asgi import application
from dashboard.org.models import ApiKey, AuditEntry
from rtvi_monitor.live import control
from rtvi_monitor.sessions.models import Event, Session
from tests.conftest import make_member
from tests.sockets import receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


async def connect_bot(token: str, session_id: str = "call-1", control_param: str | None = "1"):
    query = "acks=ranges" + (f"&control={control_param}" if control_param else "")
    bot = WebsocketCommunicator(
        application, f"/ws/ingest/{session_id}/?{query}", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    assert (await bot.connect())[0]
    for _ in range(500):  # the handshake is accepted before the session is opened
        if any(s.session_id == session_id for held in control.hub.connections.values() for s in [held[0].live_session]):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the bot's session never attached")
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "1.0.0"})))
    assert (await receive(bot)) == {"acks": [[1, 1]]}
    return bot


async def operator(org, username="alice", role="operator") -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(await sync_to_async(make_member)(org, username, role))
    return client


async def post(client, url: str, body=None, **extra):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body if body is not None else {})
    return await client.post(url, data=data, content_type="application/json", **extra)


async def stored(session_id: str, **filters) -> list[Event]:
    """The session's stored messages matching `filters`, once the writer has stored one."""

    def load():
        return list(Event.objects.filter(session__session_id=session_id, **filters).order_by("seq"))

    for _ in range(300):
        rows = await sync_to_async(load)()
        if rows:
            return rows
        await asyncio.sleep(0.02)
    return []


async def audit_entries(action: str) -> list[AuditEntry]:
    return await sync_to_async(lambda: list(AuditEntry.objects.filter(action=action)))()


async def test_an_operator_sends_text_the_bot_gets_it_answers_and_everything_is_recorded(org, ingest_token):
    bot = await connect_bot(ingest_token)
    client = await operator(org)
    available = await client.get("/api/sessions/call-1/control/")
    assert available.json()["available"] is True and available.json()["actions"] == ["end", "send-text"]

    text = "Tell the caller their order ships today."
    request = asyncio.ensure_future(
        post(client, "/api/sessions/call-1/send-text/", {"content": text, "options": {"audio_response": False}})
    )
    frame = await receive(bot)
    assert frame["type"] == "control" and frame["v"] == 1 and frame["action"] == "send-text"
    assert frame["content"] == text
    assert frame["options"] == {"run_immediately": True, "audio_response": False}  # the spec's default written out
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    response = await request
    assert response.status_code == 200, response.content
    assert response.json() == {
        "ok": True,
        "session": "call-1",
        "action": "send-text",
        "id": frame["id"],
        "answer": "the bot took it",
    }

    # The session's messages: the operator's action, on the dashboard's own stream; the page shows its text.
    (event,) = await stored("call-1", stream=control.CONTROL_STREAM)
    assert event.type == "server-message" and event.bot_seq is None
    data = json.loads(event.message)["data"]
    assert data["text"] == (f"operator alice sent text ({len(text)} characters; run now, not spoken): the bot took it")
    # The words too: the transcript's operator line shows them even from a bot that never reports the
    # send-text it was handed (rtvi_monitor/core/reducer/operators.py); the audit log keeps none.
    assert data["dashboard"] == {
        "action": "send-text",
        "id": frame["id"],
        "operator": "alice",
        "ok": True,
        "content": text,
        "options": {"run_immediately": True, "audio_response": False},
    }
    state = (await client.get("/api/sessions/call-1/")).json()  # the row and the derived state
    (line,) = [item for item in state["transcript"] if item["role"] == "operator"]
    assert (line["operator"], line["text"], line["ok"]) == ("alice", text, True)
    assert state["server_messages"] == []  # never a raw server message

    (entry,) = await audit_entries("session_text_sent")
    assert entry.actor == "alice" and entry.target == "call-1"
    assert entry.detail == {
        "text_length": len(text),
        "run_immediately": True,
        "audio_response": False,
        "ok": True,
        "status": 200,
        "outcome": "taken",
    }
    assert text not in json.dumps(entry.detail)
    await bot.disconnect()


async def test_an_operator_ends_the_call_and_the_session_ends_as_the_bot_leaves(org, ingest_token, api_key):
    bot = await connect_bot(ingest_token)
    client = await operator(org)
    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/end/", {"cancel": True}))
    frame = await receive(bot)
    assert frame["action"] == "end" and frame["cancel"] is True
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    response = await request
    assert response.status_code == 200 and response.json()["ok"] is True
    (event,) = await stored("call-1", stream=control.CONTROL_STREAM)
    assert json.loads(event.message)["data"]["text"] == "operator alice cancelled the call: the bot took it"
    await bot.disconnect(code=1000)  # the package's pipeline ended: it closes with 1000

    for _ in range(200):
        session = await sync_to_async(Session.objects.get)(session_id="call-1")
        if session.status == Session.Status.ENDED:
            break
        await asyncio.sleep(0.02)
    assert session.status == Session.Status.ENDED
    # The end is the operator's, by name, wherever it shows; and no failure.
    assert (session.end_kind, session.end_reason) == ("operator_ended", "by operator alice")
    row = (await client.get("/api/sessions/call-1/")).json()
    assert (row["end_kind"], row["end_reason"], row["failed"]) == ("operator_ended", "by operator alice", False)
    assert row["ended_by"] == "alice"
    # /metrics: the kind, not the name (a label per person would be a series per person), and not failed.
    scraped = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    assert 'end="operator_ended",failed="false"} 1.0' in scraped.content.decode()
    (entry,) = await audit_entries("session_ended")
    assert entry.detail == {"mode": "cancel", "ok": True, "status": 200, "outcome": "taken"}
    # Ended: nothing more can be asked of it, and the page and the API say why.
    assert (await client.get("/api/sessions/call-1/control/")).json()["reason"] == "the session has ended"
    refused = await post(client, "/api/sessions/call-1/end/")
    assert refused.status_code == 409 and refused.json()["error"] == "the session has ended"
    assert len(await audit_entries("session_ended")) == 1  # nothing was asked: nothing more to audit


async def test_the_bots_refusal_and_its_silence_are_the_answer(org, ingest_token, settings):
    settings.LIVE_CONTROL_TIMEOUT = 0.3
    bot = await connect_bot(ingest_token)
    client = await operator(org)

    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/send-text/", {"content": "hi"}))
    frame = await receive(bot)
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": False, "error": "the pipeline has ended"})
    refused = await request
    assert refused.status_code == 502
    assert refused.json()["error"] == "the bot did not take it: the pipeline has ended"

    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/end/"))
    frame = await receive(bot)  # and never answered
    silent = await request
    assert silent.status_code == 504 and silent.json()["error"] == "the bot did not answer within 0.3 s"
    # A late answer is dropped; the bot's socket is not harmed.
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    await send(bot, wrap(2, rtvi("bot-llm-started")))
    assert (await receive(bot)) == {"acks": [[2, 2]]}

    texts = [json.loads(e.message)["data"]["text"] for e in await stored("call-1", stream="dashboard")]
    for _ in range(100):
        if len(texts) == 2:
            break
        await asyncio.sleep(0.02)
        texts = [json.loads(e.message)["data"]["text"] for e in await stored("call-1", stream="dashboard")]
    assert texts == [
        "operator alice sent text (2 characters; run now, spoken): the bot did not take it: the pipeline has ended",
        "operator alice ended the call: the bot did not answer within 0.3 s",
    ]
    # The audit log says what came of it, never in the bot's words: those may quote the call.
    (refused,) = await audit_entries("session_text_sent")
    assert refused.detail["ok"] is False and refused.detail["outcome"] == "refused by the bot"
    assert "pipeline has ended" not in json.dumps(refused.detail)
    assert (await audit_entries("session_ended"))[0].detail["outcome"] == "no answer in time"
    await bot.disconnect()


async def test_a_bot_that_leaves_before_answering(org, ingest_token):
    bot = await connect_bot(ingest_token)
    client = await operator(org)
    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/send-text/", {"content": "hello"}))
    await receive(bot)
    await bot.disconnect(code=1001)
    response = await request
    assert response.status_code == 502
    assert response.json()["error"] == "the bot did not take it: the bot disconnected before it answered"


async def test_a_bot_without_the_packages_control_is_unavailable_with_the_reason(org, ingest_token):
    bot = await connect_bot(ingest_token, control_param=None)
    client = await operator(org)
    answer = (await client.get("/api/sessions/call-1/control/")).json()
    assert answer["available"] is False and answer["reason"] == control.NO_PACKAGE and answer["actions"] == []
    for url, body in (("/api/sessions/call-1/end/", {}), ("/api/sessions/call-1/send-text/", {"content": "x"})):
        response = await post(client, url, body)
        assert response.status_code == 409 and response.json()["error"] == control.NO_PACKAGE
    assert await audit_entries("session_ended") == [] and await audit_entries("session_text_sent") == []
    await bot.disconnect()
    # Away within the grace: unavailable, and why.
    for _ in range(100):
        answer = (await client.get("/api/sessions/call-1/control/")).json()
        if "not connected" in answer["reason"]:
            break
        await asyncio.sleep(0.02)
    assert answer["reason"].startswith("the bot is not connected") or answer["reason"] == "the session has ended"


async def test_a_bot_announcing_a_version_it_does_not_have_is_refused_nothing(org, ingest_token):
    """`?control=` that is not a whole number is no capability at all."""
    bot = await connect_bot(ingest_token, control_param="yes")
    client = await operator(org)
    assert (await client.get("/api/sessions/call-1/control/")).json()["reason"] == control.NO_PACKAGE
    await bot.disconnect()


async def test_who_may_act_viewers_other_organizations_keys_and_csrf(org, other_org, ingest_token):
    bot = await connect_bot(ingest_token)
    viewer = await operator(org, "vic", "viewer")
    refused = await post(viewer, "/api/sessions/call-1/end/")
    assert refused.status_code == 403 and "operator role" in refused.json()["error"]
    status = (await viewer.get("/api/sessions/call-1/control/")).json()
    assert status["allowed"] is False and "operator role" in status["allowed_reason"]

    stranger = await operator(other_org, "globex-op")
    for url in ("/api/sessions/call-1/end/", "/api/sessions/call-1/send-text/"):
        assert (await post(stranger, url, {"content": "x"})).status_code == 404
    assert (await stranger.get("/api/sessions/call-1/control/")).status_code == 404

    def read_only_key():
        record, secret = ApiKey.issue(org, "reader")
        ApiKey.objects.filter(pk=record.pk).update(scopes="read")
        return secret

    read_only = await sync_to_async(read_only_key)()
    refused = await post(AsyncClient(), "/api/sessions/call-1/end/", headers={"Authorization": f"Bearer {read_only}"})
    assert refused.status_code == 403 and "needs 'write'" in refused.json()["error"]

    # A browser's POST without the CSRF token is refused before anything reaches the bot.
    browser = AsyncClient(enforce_csrf_checks=True)
    await browser.aforce_login(await sync_to_async(make_member)(org, "carol", "operator"))
    response = await post(browser, "/api/sessions/call-1/send-text/", {"content": "x"})
    assert response.status_code == 403 and "CSRF" in response.json()["error"]

    # A key with write may act; the audit log names the key.
    writer_key = (await sync_to_async(ApiKey.issue)(org, "on-call script"))[1]
    request = asyncio.ensure_future(
        post(
            AsyncClient(),
            "/api/sessions/call-1/send-text/",
            {"content": "from a script"},
            headers={"Authorization": f"Bearer {writer_key}"},
        )
    )
    frame = await receive(bot)
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    assert (await request).status_code == 200
    (entry,) = await audit_entries("session_text_sent")
    assert entry.actor.startswith("API key ") and "(on-call script)" in entry.actor
    await bot.disconnect()


@pytest.mark.parametrize(
    ("url", "body", "error"),
    [
        ("send-text/", "not json", 'expected a JSON object: {"content": "...", "options": {"run_immediately": true}}'),
        ("send-text/", [], 'expected a JSON object: {"content": "...", "options": {...}}'),
        ("send-text/", {}, "content: expected the text to send, a non-empty string"),
        ("send-text/", {"content": "  "}, "content: expected the text to send, a non-empty string"),
        ("send-text/", {"content": "x" * 4001}, "content: at most 4000 characters, got 4001"),
        ("send-text/", {"content": "x", "text": "y"}, "unknown field 'text': expected content and options"),
        ("send-text/", {"content": "x", "options": []}, "options: expected an object with run_immediately"),
        ("send-text/", {"content": "x", "options": {"voice": True}}, "options: unknown option 'voice'"),
        ("send-text/", {"content": "x", "options": {"run_immediately": "yes"}}, "options.run_immediately: expected"),
        ("end/", {"cancel": "now"}, 'cancel: expected true or false, got "now"'),
        ("end/", {"force": True}, "unknown field 'force': expected cancel"),
    ],
)
async def test_bad_requests_say_what_was_wrong(org, ingest_token, url, body, error):
    bot = await connect_bot(ingest_token)
    client = await operator(org)
    response = await post(client, f"/api/sessions/call-1/{url}", body)
    assert response.status_code == 400 and response.json()["error"].startswith(error)
    assert (await client.get(f"/api/sessions/call-1/{url}")).status_code == 405
    await bot.disconnect()


async def test_a_control_result_is_never_stored_as_a_message_and_a_stranger_id_is_dropped(org, ingest_token):
    bot = await connect_bot(ingest_token)
    await send(bot, {"type": "control-result", "id": "nobody-asked", "ok": True})
    await send(bot, wrap(2, rtvi("bot-llm-started")))
    assert (await receive(bot)) == {"acks": [[2, 2]]}
    assert [e.type for e in await stored("call-1")] == ["bot-ready", "bot-llm-started"]
    await bot.disconnect()


async def test_the_newest_connection_of_a_session_is_the_one_asked(org, ingest_token):
    """A bot that reconnected (its old socket not yet gone) is asked on its new one."""
    first = await connect_bot(ingest_token)
    second = WebsocketCommunicator(
        application,
        "/ws/ingest/call-1/?acks=ranges&control=1&stream=two",
        headers=[(b"authorization", f"Bearer {ingest_token}".encode())],
    )
    assert (await second.connect())[0]
    for _ in range(200):
        if len(control.hub.connections.get(next(iter(control.hub.connections)), [])) == 2:
            break
        await asyncio.sleep(0.01)
    client = await operator(org)
    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/end/"))
    frame = await receive(second)
    # The old connection cannot answer for the new one.
    await send(first, {"type": "control-result", "id": frame["id"], "ok": False, "error": "not me"})
    await send(second, {"type": "control-result", "id": frame["id"], "ok": True})
    assert (await request).json()["ok"] is True
    assert await first.receive_nothing(0.1)
    await first.disconnect()
    await second.disconnect()
