"""The Overview hears that its organization's sessions changed, not their rows, and its pages share one
computation of the figures between two pings (live/relay.py ChangePings, overview/views.py).

Through the real router (sockets) and the real URLconf (the panel), with a real bot's messages stored.
"""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from rtvi_monitor.live import relay
from rtvi_monitor.overview import views
from tests.live.test_session_sockets import open_browser, start_bot, token_message
from tests.sockets import receive, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


@pytest.fixture
def ping_every(settings):
    settings.OVERVIEW_PING_SECONDS = 0.4
    return 0.4


async def test_the_overview_socket_gets_pings_and_never_a_row(ingest_token, staff_cookie, ping_every):
    watcher, connected, _ = await open_browser("/ws/sessions/?changes=1", staff_cookie)
    assert connected
    assert await receive(watcher) == {"type": "changed"}  # what changed while the page opened
    bot = await start_bot(ingest_token, "call-1")
    assert await receive(watcher) == {"type": "changed"}  # it started
    for i in range(1, 6):  # five writes within one ping's time: one ping for them (late, never lost)
        await send(bot, wrap(i, token_message(i)))
        await asyncio.sleep(0.02)
    frames = []
    while not await watcher.receive_nothing(ping_every * 1.5):
        frames.append(json.loads(await watcher.receive_from()))
    assert frames and all(frame == {"type": "changed"} for frame in frames)
    assert len(frames) <= 2  # not one per write: at most the ping then the trailing one
    await bot.disconnect()
    assert await receive(watcher, timeout=ping_every * 3) == {"type": "changed"}  # it ended
    await watcher.disconnect()


async def test_every_overview_of_an_organization_is_pinged_at_once_and_a_left_one_no_more(
    ingest_token, staff_cookie, ping_every
):
    first, _, _ = await open_browser("/ws/sessions/?changes=1", staff_cookie)
    second, _, _ = await open_browser("/ws/sessions/?changes=1", staff_cookie)
    assert await receive(first) == await receive(second) == {"type": "changed"}
    organization = next(iter(relay.pings.organizations))
    assert len(relay.pings.organizations[organization].sends) == 2
    await second.disconnect()
    assert len(relay.pings.organizations[organization].sends) == 1
    bot = await start_bot(ingest_token, "call-2")
    assert await receive(first) == {"type": "changed"}
    await first.disconnect()
    assert relay.pings.organizations == {}  # the last page gone: no watcher left on the organization's list
    await bot.disconnect()


async def test_the_session_list_still_gets_its_rows(ingest_token, staff_cookie):
    watcher, _, _ = await open_browser("/ws/sessions/", staff_cookie)
    assert (await receive(watcher))["type"] == "live"
    await watcher.disconnect()


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = views.overview

    def counting(*args, **kwargs):
        calls.append(args[0].pk)
        return real(*args, **kwargs)

    monkeypatch.setattr(views, "overview", counting)
    return calls


async def test_overviews_asking_together_share_one_computation(staff_user, org, counted):
    client = AsyncClient()
    await sync_to_async(client.force_login)(staff_user)
    answers = await asyncio.gather(*(client.get("/overview/panel/") for _ in range(5)))
    assert [a.status_code for a in answers] == [200] * 5
    assert len(counted) == 1


async def test_a_ping_makes_the_next_fetch_compute_again(staff_user, org, counted, monkeypatch):
    client = AsyncClient()
    await sync_to_async(client.force_login)(staff_user)
    assert (await client.get("/overview/panel/")).status_code == 200
    assert (await client.get("/overview/panel/")).status_code == 200
    assert len(counted) == 1  # nothing changed since, and within SHARE_SECONDS
    monkeypatch.setattr(relay.pings, "since", lambda organization_id: float("inf"))  # a ping after it
    assert (await client.get("/overview/panel/")).status_code == 200
    assert len(counted) == 2


async def test_figures_are_not_reused_longer_than_the_share(staff_user, org, counted, monkeypatch):
    client = AsyncClient()
    await sync_to_async(client.force_login)(staff_user)
    monkeypatch.setattr(views, "SHARE_SECONDS", 0.05)
    assert (await client.get("/overview/panel/")).status_code == 200
    await asyncio.sleep(0.1)
    assert (await client.get("/overview/panel/")).status_code == 200
    assert len(counted) == 2
