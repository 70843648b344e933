"""Erasing every session of one caller: found by the user_id the bot reported, though it is never stored.

Through the real ingest socket and router (the caller's key is written with the
messages), then the API and the organization's Erase page; the other caller's
sessions and other organizations' stay; the audit log names the caller by key.
"""

import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from dashboard.org.models import ApiKey, AuditEntry, Role
from rtvi_monitor.sessions.models import Event, Session, SessionCaller
from tests.conftest import make_member
from tests.live.test_session_ends import ended
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")

PHONE = "+1 415 555 0100"  # a caller's id is often their number: never stored


def said(text, user_id):
    return rtvi("user-transcription", {"text": text, "final": True, "user_id": user_id})


async def call(token, session_id, user_id, *, end=True):
    bot = bot_socket(session_id, token)
    assert (await bot.connect())[0]
    for seq, message in enumerate([said("hello there", user_id), said("my order is late", user_id)], 1):
        await send(bot, wrap(seq, message))
        assert await receive(bot) == {"ack": seq}
    if not end:
        return bot
    await bot.disconnect(code=1000)
    await ended(session_id)


def bearer(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


async def test_a_callers_sessions_are_found_and_erased_by_the_id_the_bot_reported(ingest_token, org, other_org):
    from rtvi_monitor.live.models import IngestToken

    await call(ingest_token, "first", PHONE)
    await call(ingest_token, "second", PHONE)
    await call(ingest_token, "someone-else", "cust-9931")  # nothing a detector would take: a pseudonym all the same
    live_bot = await call(ingest_token, "still-live", PHONE, end=False)
    theirs = await sync_to_async(IngestToken.issue)(other_org, "theirs")
    await call(theirs[1], "globex-call", PHONE)

    def check_and_erase():
        # The id itself is nowhere: the messages carry a pseudonym, the link is a keyed hash.
        stored = "".join(Event.objects.filter(session__session_id="first").values_list("message", flat=True))
        assert PHONE not in stored and stored.count('"user_id":"caller:') == 2
        other = "".join(Event.objects.filter(session__session_id="someone-else").values_list("message", flat=True))
        assert '"user_id":"caller:' in other and other.split("caller:")[1][:12] != stored.split("caller:")[1][:12]
        # Each link is the 40-hex keyed hash; the number's digits are in none (a short run such as
        # "415" may turn up in a hex digest by chance, so the whole run of digits is what is looked for).
        digits = "".join(ch for ch in PHONE if ch.isdigit())
        keys = list(SessionCaller.objects.values_list("caller_key", flat=True))
        assert keys and all(re.fullmatch(r"[0-9a-f]{40}", key) and digits not in key for key in keys)
        client = Client()
        _, key = ApiKey.issue(org, "privacy")
        found = client.get("/api/sessions/", {"caller": PHONE}, **bearer(key)).json()["sessions"]
        assert sorted(s["id"] for s in found) == ["first", "second", "still-live"]
        erased = client.delete(f"/api/sessions/?caller={PHONE.replace('+', '%2B')}", **bearer(key))
        assert erased.status_code == 200, erased.content
        body = erased.json()
        assert sorted(body["erased"]) == ["first", "second"] and body["live"] == ["still-live"]
        assert body["messages"] == 4
        assert not Event.objects.filter(message__contains="cust-9931").exists()
        left = set(Session.objects.values_list("session_id", flat=True))
        assert left == {"someone-else", "still-live", "globex-call"}
        assert not Event.objects.filter(session__session_id__in=["first", "second"]).exists()
        entry = AuditEntry.objects.get(organization=org, action=AuditEntry.Action.SESSION_ERASED)
        assert entry.target.startswith("caller ") and PHONE not in json.dumps(entry.detail) + entry.target
        # A viewer may not even look a caller up.
        viewer = Client()
        viewer.force_login(make_member(org, "watcher", Role.VIEWER))
        assert viewer.get("/api/sessions/", {"caller": PHONE}).status_code == 400

    await sync_to_async(check_and_erase)()
    await live_bot.disconnect(code=1000)
    await ended("still-live")

    def erase_on_the_settings_page():
        admin = Client()
        admin.force_login(make_member(org, "privacy-admin", Role.ADMIN))
        page = admin.post("/settings/erase/", {"caller": PHONE}, follow=True).content.decode()
        assert "Erased 1 sessions of that caller" in page
        assert set(Session.objects.values_list("session_id", flat=True)) == {"someone-else", "globex-call"}
        refused = admin.post("/settings/erase/", {"session_id": "globex-call"})
        assert refused.status_code == 400 and Session.objects.filter(session_id="globex-call").exists()

    await sync_to_async(erase_on_the_settings_page)()


def test_erasing_a_caller_takes_a_write_key(client, org):
    record, key = ApiKey.issue(org, "reader")
    record.scopes = "read"
    record.save()
    assert client.delete("/api/sessions/?caller=x", **bearer(key)).status_code == 403
    _, writer = ApiKey.issue(org, "writer")
    missing = client.delete("/api/sessions/", **bearer(writer))
    assert missing.status_code == 400 and "caller" in missing.json()["error"]
