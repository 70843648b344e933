"""When sessions end: when their bot left (not when the grace ran out), and even when their process died."""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from rtvi_monitor.live import lifecycle
from rtvi_monitor.live.models import ServerProcess
from rtvi_monitor.live.registry import LiveSession, registry
from rtvi_monitor.sessions.models import Session
from tests.sockets import bot_socket, browser_socket, receive, receive_until, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


async def connect(token, session_id="s1"):
    socket = bot_socket(session_id, token)
    assert (await socket.connect())[0]
    return socket


async def session(session_id="s1") -> Session:
    return await sync_to_async(Session.objects.get)(session_id=session_id)


async def wait_for(predicate, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "never happened"
        await asyncio.sleep(0.05)


async def test_a_session_ends_when_its_bot_left_not_when_the_grace_ran_out(ingest_token, staff_cookie, settings):
    settings.SESSION_END_GRACE = 1.0
    watcher = browser_socket("/ws/sessions/", staff_cookie)
    assert (await watcher.connect())[0]
    await receive(watcher)
    bot = await connect(ingest_token)
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    await bot.disconnect(code=1006)  # dropped (a 1000 close ends the session at once: test_session_ends.py)
    left = timezone.now()
    away = await receive_until(watcher, lambda f: f["type"] == "away")
    assert away[-1]["session"]["bot"] == "away" and away[-1]["session"]["status"] == "live"
    ended = await receive_until(watcher, lambda f: f["type"] == "ended", timeout=5)
    row = ended[-1]["session"]
    assert row["status"] == "ended" and row["end_reason"] == "bot vanished"
    stored = await session()
    assert abs((stored.ended_at - left).total_seconds()) < 0.5  # not padded by the grace
    assert stored.state["ended"] is True and stored.state["end_reason"] == "bot vanished"
    assert stored.state["markers"][-1]["kind"] == "ended"
    await watcher.disconnect()


async def test_a_bot_back_within_the_grace_continues_its_session(ingest_token, staff_cookie, settings):
    settings.SESSION_END_GRACE = 2.0
    bot = await connect(ingest_token)
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    page = browser_socket("/ws/sessions/s1/", staff_cookie)
    assert (await page.connect())[0]
    await receive(page)
    await bot.disconnect(code=1006)
    frames = await receive_until(page, lambda f: f["type"] == "session")
    assert frames[-1]["session"]["bot"] == "away" and frames[-1]["session"]["away_since"]
    bot = await connect(ingest_token)
    frames = await receive_until(page, lambda f: f["type"] == "session")
    assert frames[-1]["session"]["bot"] == "connected"
    await asyncio.sleep(2.5)
    assert (await session()).status == "live"
    await send(bot, wrap(2, rtvi("bot-llm-text", {"text": "still here"})))
    assert await receive(bot) == {"ack": 2}
    for socket in (page, bot):
        await socket.disconnect()


async def test_sessions_of_a_process_that_stopped_beating_end_after_the_grace(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.2
    bot = await connect(ingest_token, "orphan")
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    # Another process held it and died: its heartbeat is old, and nobody ever closed the socket.
    await sync_to_async(ServerProcess.objects.create)(id="dead", heartbeat_at=timezone.now() - timedelta(hours=1))
    await sync_to_async(Session.objects.filter(session_id="orphan").update)(holder="dead")
    registry.sessions.clear()  # that process's memory is gone too
    await wait_for(lambda: _status("orphan", "ended"), timeout=5)
    stored = await session("orphan")
    assert stored.end_reason == "server restarted"
    assert stored.ended_at == stored.last_event_at
    assert stored.state["ended"] is True and stored.state["counts"]["total"] == 1
    await bot.disconnect()


async def _status(session_id, status) -> bool:
    return (await session(session_id)).status == status


async def test_a_live_process_keeps_its_sessions_through_sweeps(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.1
    bot = await connect(ingest_token, "kept")
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    for _ in range(3):
        await lifecycle.sweep()
    assert (await session("kept")).status == "live"
    await bot.disconnect()


async def test_a_failure_inside_the_consumer_is_answered_and_the_session_still_ends(
    ingest_token, monkeypatch, settings
):
    settings.SESSION_END_GRACE = 0.2

    def broken(self, frame, received_at, replier):
        raise RuntimeError("a bug")

    bot = await connect(ingest_token, "buggy")
    monkeypatch.setattr(LiveSession, "accept", broken)
    await send(bot, wrap(1, rtvi("bot-ready")))
    reply = await receive(bot)
    assert "could not handle this frame" in reply["error"]
    monkeypatch.undo()
    await send(bot, wrap(2, rtvi("bot-ready")))
    assert await receive(bot) == {"ack": 2}  # the socket is still usable
    await bot.disconnect()
    await wait_for(lambda: _status("buggy", "ended"))


async def test_the_client_disconnect_is_on_the_timeline(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.2
    bot = await connect(ingest_token, "bye")
    await send(bot, wrap(1, rtvi("disconnect-bot", id="d1"), direction="from-client"))
    await receive(bot)
    await bot.disconnect()
    await wait_for(lambda: _status("bye", "ended"))
    markers = (await session("bye")).state["markers"]
    assert [m["kind"] for m in markers] == ["disconnect-bot", "ended"]


async def test_an_ingest_token_has_a_cap_on_connections(ingest_token, settings):
    settings.INGEST_MAX_CONNECTIONS_PER_TOKEN = 2
    first, second = await connect(ingest_token, "a"), await connect(ingest_token, "b")
    third = bot_socket("c", ingest_token)
    await third.connect()
    refusal = await receive(third)
    assert refusal["fatal"] and "INGEST_MAX_CONNECTIONS_PER_TOKEN=2" in refusal["error"]
    assert (await third.receive_output(2))["code"] == 4429
    await first.disconnect()
    fourth = await connect(ingest_token, "d")  # a slot is free again
    await send(fourth, wrap(1, rtvi("bot-ready")))
    assert await receive(fourth) == {"ack": 1}
    for socket in (second, fourth):
        await socket.disconnect()


async def test_a_late_disconnect_of_an_old_connection_does_not_mark_a_returned_bot_away(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.2
    first = await connect(ingest_token, "flappy")
    await send(first, wrap(1, rtvi("bot-ready")))
    await receive(first)
    old_epoch = (await session("flappy")).ingest_epoch
    stale = registry.sessions[(await session("flappy")).pk]
    await first.disconnect()
    second = await connect(ingest_token, "flappy")  # the bot is back (a new epoch)
    await send(second, wrap(2, rtvi("bot-llm-text", {"text": "back"})))
    await receive(second)
    await lifecycle.bot_left(stale, old_epoch)  # the old connection's news arrives late
    assert (await session("flappy")).bot_left_at is None
    await asyncio.sleep(0.5)
    assert (await session("flappy")).status == "live"
    await second.disconnect()


async def test_a_session_held_here_with_no_bot_here_is_found_and_ended(ingest_token, settings):
    """A bot whose handler died without a disconnect: the sweep notices nobody is connected."""
    settings.SESSION_END_GRACE = 0.2
    bot = await connect(ingest_token, "ghost")
    await send(bot, wrap(1, rtvi("bot-ready")))
    await receive(bot)
    registry.sessions.clear()  # as if its handler vanished
    await wait_for(lambda: _status("ghost", "ended"))
    assert (await session("ghost")).end_reason == "bot vanished"


async def test_a_page_watching_a_session_whose_bot_left_gets_its_end_as_a_patch(ingest_token, staff_cookie, settings):
    """The sweep ends it from a state it loaded; the page's copy, patched, is the stored final state."""
    from tests.sockets import Page

    settings.SESSION_END_GRACE = 0.5
    bot = await connect(ingest_token, "watched-end")
    for seq in range(1, 4):
        await send(bot, wrap(seq, rtvi("user-transcription", {"text": f"w{seq}", "final": True, "user_id": "u"})))
        await receive(bot)
    page = browser_socket("/ws/sessions/watched-end/", staff_cookie)
    assert (await page.connect())[0]
    model = Page()
    model.take(await receive(page))
    await bot.disconnect(code=1006)  # the sweep ends it, from a state it loads
    frames = await receive_until(page, lambda f: f["type"] == "batch" and model.take(f) == "apply", timeout=5)
    assert frames[-1]["events"] == []
    await wait_for(lambda: _status("watched-end", "ended"))
    stored = await session("watched-end")
    assert model.state["ended"] is True
    assert model.state == stored.state
    await page.disconnect()


def stale_look(monkeypatch, looked: set[int]):
    """The sweep's first look at which bots are connected here is `looked` (it read them before a bot came or went:
    the database is read afterwards, on the lifecycle's thread); every later look is as things are."""
    looks = [looked]
    real = lifecycle.connected_now
    monkeypatch.setattr(lifecycle, "connected_now", lambda: looks.pop() if looks else real())


async def watch_list(staff_cookie):
    watcher = browser_socket("/ws/sessions/", staff_cookie)
    assert (await watcher.connect())[0]
    assert (await receive(watcher))["type"] == "live"
    return watcher


async def test_a_sweep_that_looked_before_the_bot_left_keeps_it_away_and_its_return_is_told(
    ingest_token, staff_cookie, settings, monkeypatch
):
    """A sweep that saw the bot connected, then read the database after the bot left, brought its session back,
    silently: the bot, back within the grace, was not "back", and the sessions list kept "bot away"."""
    settings.SESSION_END_GRACE, settings.SESSION_SWEEP_INTERVAL = 30, 3600  # no sweep but the test's
    watcher = await watch_list(staff_cookie)
    bot = await connect(ingest_token, "left")
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    pk = (await session("left")).pk
    await bot.disconnect(code=1006)
    await receive_until(watcher, lambda f: f["type"] == "away")
    stale_look(monkeypatch, {pk})
    await lifecycle.sweep()
    assert (await session("left")).bot_left_at is not None  # still away: its bot is not here
    bot = await connect(ingest_token, "left")
    frames = await receive_until(watcher, lambda f: f["type"] in ("back", "started"))
    assert (frames[-1]["type"], frames[-1]["session"]["bot"]) == ("back", "connected")
    for socket in (bot, watcher):
        await socket.disconnect()


async def test_a_sweep_that_looked_before_the_bot_connected_does_not_mark_it_away(
    ingest_token, staff_cookie, settings, monkeypatch
):
    settings.SESSION_END_GRACE, settings.SESSION_SWEEP_INTERVAL = 30, 3600
    bot = await connect(ingest_token, "joined")
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "2.1.0"})))
    await receive(bot)
    watcher = await watch_list(staff_cookie)
    stale_look(monkeypatch, set())  # looked before the bot attached, with nobody connecting
    await lifecycle.sweep()
    assert (await session("joined")).bot_left_at is None
    assert (await session("joined")).bot_state == "connected"
    told = []
    while not await watcher.receive_nothing(0.5):  # the writer's summaries may come; no "away"
        told.append((await receive(watcher))["type"])
    assert "away" not in told, told
    for socket in (bot, watcher):
        await socket.disconnect()


async def test_the_list_hears_of_a_bot_the_sweep_finds_gone(ingest_token, staff_cookie, settings):
    """A bot whose handler died without a disconnect: the sweep marks it away, and the lists hear it as they do a
    bot that left (then its end, after the grace)."""
    settings.SESSION_END_GRACE = 0.5
    bot = await connect(ingest_token, "silent")
    await send(bot, wrap(1, rtvi("bot-ready")))
    await receive(bot)
    watcher = await watch_list(staff_cookie)
    registry.sessions.clear()  # as if its handler vanished
    away = await receive_until(watcher, lambda f: f["type"] == "away")
    assert away[-1]["session"]["bot"] == "away" and away[-1]["session"]["id"] == "silent"
    ended = await receive_until(watcher, lambda f: f["type"] == "ended")
    assert ended[-1]["session"]["end_reason"] == "bot vanished"
    await watcher.disconnect()
