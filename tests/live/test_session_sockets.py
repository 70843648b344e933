"""Browser sockets through the real router: login, origin, isolation, snapshots, live relay, backfill."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from dashboard.org.models import Membership
from rtvi_monitor.live import relay
from rtvi_monitor.sessions.models import Session
from tests.sockets import Page, bot_socket, browser_socket, follow, receive, receive_until, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


def token_message(i: int) -> dict:
    return rtvi("bot-llm-text", {"text": f" t{i}"})


async def start_bot(token, session_id="s1", count=0):
    from rtvi_monitor.live.registry import registry

    bot = bot_socket(session_id, token)
    assert (await bot.connect())[0]
    # The handshake is accepted before the session is opened: wait until it is, as a bot's first ack would.
    for _ in range(500):
        if any(s.session_id == session_id and s.connections for s in registry.sessions.values()):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # and its "started" has gone out
    if count:
        await send(bot, {"batch": [wrap(i, token_message(i)) for i in range(1, count + 1)]})
        for _ in range(count):
            await receive(bot)
    return bot


async def open_browser(path, cookie, **kwargs):
    socket = browser_socket(path, cookie, **kwargs)
    connected, code = await socket.connect()
    return socket, connected, code


async def test_a_browser_without_login_is_refused(ingest_token):
    bot = await start_bot(ingest_token)
    _, connected, code = await open_browser("/ws/sessions/s1/", None)
    assert not connected and code == 4403
    await bot.disconnect()


async def test_a_browser_with_a_foreign_origin_is_refused(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token)
    _, connected, _ = await open_browser("/ws/sessions/s1/", staff_cookie, origin=b"https://evil.example")
    assert not connected
    await bot.disconnect()


async def test_a_browser_without_origin_is_refused(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token)
    _, connected, _ = await open_browser("/ws/sessions/s1/", staff_cookie, origin=None)
    assert not connected
    await bot.disconnect()


async def test_a_browser_never_sees_another_organizations_session(other_org, staff_cookie):
    from rtvi_monitor.live.models import IngestToken

    foreign_token = (await sync_to_async(IngestToken.issue)(other_org))[1]
    bot = await start_bot(foreign_token, "globex-call", count=3)
    _, connected, code = await open_browser("/ws/sessions/globex-call/", staff_cookie)
    assert not connected and code == 4404
    await bot.disconnect()


def server_state(session_id="s1") -> dict:
    from rtvi_monitor.live.registry import registry

    (here,) = [s for s in registry.sessions.values() if s.session_id == session_id]
    return json.loads(json.dumps(here.state.to_dict()))


def at_version(n):
    return lambda page, frame: page.version >= n


async def test_on_connect_a_browser_gets_the_state_and_recent_events(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token, count=5)
    browser, connected, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    assert connected
    snapshot = await receive(browser)
    assert snapshot["type"] == "snapshot"
    assert [e["seq"] for e in snapshot["events"]] == [1, 2, 3, 4, 5]
    assert snapshot["state"]["version"] == 5 and snapshot["state"]["counts"]["total"] == 5
    assert snapshot["state"] == server_state()
    assert snapshot["session"]["id"] == "s1" and snapshot["session"]["status"] == "live"
    assert snapshot["session"]["bot"] == "connected"
    await browser.disconnect()
    await bot.disconnect()


async def test_two_browsers_keep_the_servers_state_exactly(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token)
    one, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    two, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    pages = Page(), Page()
    for i in range(1, 101):
        await send(bot, wrap(i, token_message(i)))
    for socket, page in zip((one, two), pages, strict=True):
        await follow(socket, page, at_version(100))
    assert pages[0].seqs == pages[1].seqs == list(range(1, 101))
    assert pages[0].state == pages[1].state == server_state()
    assert pages[0].state["llm"]["current_tokens"] == "".join(f" t{i}" for i in range(1, 101))
    for socket in (one, two, bot):
        await socket.disconnect()


async def test_a_late_joiner_gets_the_state_then_patches(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token, count=50)
    late, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    page = Page()
    await send(bot, wrap(51, token_message(51)))
    await follow(late, page, at_version(51))
    assert page.seqs == list(range(1, 52))
    assert page.state == server_state()
    await late.disconnect()
    await bot.disconnect()


async def test_a_browser_that_reconnects_gets_a_state_with_what_it_missed(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token, count=10)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    assert (await receive(browser))["state"]["version"] == 10
    await browser.disconnect()
    await send(bot, {"batch": [wrap(i, token_message(i)) for i in range(11, 21)]})
    for _ in range(10):
        await receive(bot)
    back, _, _ = await open_browser("/ws/sessions/s1/?since=\u00b2", staff_cookie)
    page = Page()
    await follow(back, page, at_version(20))
    await send(bot, wrap(21, token_message(21)))
    await follow(back, page, at_version(21))
    assert page.state == server_state()
    await back.disconnect()
    await bot.disconnect()


async def test_a_relay_lost_on_the_way_is_made_good_by_a_snapshot(ingest_token, staff_cookie, monkeypatch):
    """A relay may be lost (a Redis blip on its way from another process; here one delivery is dropped).

    The next batch does not fit the page's version, and the page resyncs.
    """
    from rtvi_monitor.live.relay import fanout

    bot = await start_bot(ingest_token)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    page = Page()
    page.take(await receive(browser))
    real_deliver = fanout.deliver
    dropped = []

    async def lossy(group, message):
        if message.get("type") == "session.batch" and not dropped:
            dropped.append(message["to"])
            return None
        return await real_deliver(group, message)

    monkeypatch.setattr(fanout, "deliver", lossy)
    await send(bot, wrap(1, token_message(1)))
    await receive(bot)
    await send(bot, wrap(2, token_message(2)))
    frames = await follow(browser, page, at_version(2))
    assert dropped == [1]
    assert [f["type"] for f in frames] == ["batch", "snapshot"]  # the gap, then the state with both
    assert page.state == server_state()
    await browser.disconnect()
    await bot.disconnect()


@pytest.mark.parametrize("slow", ["ack", "relay"])
async def test_relays_reach_a_browser_in_the_order_they_were_stored(ingest_token, staff_cookie, monkeypatch, slow):
    """Two flushes at once (the writer's own, a disconnecting bot's): the later one's relay waits for the earlier's.

    The earlier flush's ack or relay waits (a slow socket, Redis) while the later one stores
    and folds: each relay still carries its own flush's patch and events, in order.
    """
    from rtvi_monitor.live.consumers import IngestConsumer
    from rtvi_monitor.live.relay import fanout

    bot = await start_bot(ingest_token)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    page = Page()
    page.take(await receive(browser))
    slowed = []
    if slow == "ack":
        real_reply = IngestConsumer.reply

        async def slow_first(self, payloads):
            if not slowed:
                slowed.append(payloads)
                await asyncio.sleep(0.3)
            return await real_reply(self, payloads)

        monkeypatch.setattr(IngestConsumer, "reply", slow_first)
    else:
        real_deliver = fanout.deliver

        async def slow_first(group, message):
            if message.get("type") == "session.batch" and not slowed:
                slowed.append(message["to"])
                await asyncio.sleep(0.3)
            return await real_deliver(group, message)

        monkeypatch.setattr(fanout, "deliver", slow_first)
    await send(bot, wrap(1, token_message(1)))
    for _ in range(100):  # stored, and its ack or relay is on its way
        if slowed:
            break
        await asyncio.sleep(0.01)
    await send(bot, wrap(2, token_message(2)))
    await bot.disconnect()  # stores message 2 in a flush of its own, at once
    frames = await follow(browser, page, at_version(2))
    batches = [(f["from"], f["to"], [e["seq"] for e in f["events"]]) for f in frames if f["type"] == "batch"]
    assert slowed and batches == [(0, 1, [1]), (1, 2, [2])]
    assert "snapshot" not in [f["type"] for f in frames]  # no gap, so no resync
    await browser.disconnect()


async def test_a_bots_ack_waits_for_this_processs_browsers_but_not_for_the_other_processes(
    ingest_token, staff_cookie, monkeypatch
):
    """A flush relays to this process's browsers, acks the bots, then publishes to the other processes (with Redis,
    a round trip each): a publish held up holds up no ack, and the browsers here have the batch first."""
    from rtvi_monitor.live.relay import fanout

    bot = await start_bot(ingest_token)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    page = Page()
    page.take(await receive(browser))
    published, release = [], asyncio.Event()

    async def held_publish(group, message):
        if message.get("type") == "session.batch":
            published.append(message["to"])
            await release.wait()  # Redis slow to take it

    monkeypatch.setattr(fanout, "publish_elsewhere", held_publish)
    await send(bot, wrap(1, token_message(1)))
    assert await receive(bot) == {"ack": 1}  # while the publish is still held
    frames = await follow(browser, page, at_version(1))
    assert [f["type"] for f in frames] == ["batch"]
    assert published == [1] and not release.is_set()
    release.set()
    await bot.disconnect()
    await browser.disconnect()


async def test_a_browser_that_stops_acknowledging_is_told_to_resync_and_gets_no_more(
    ingest_token, staff_cookie, settings
):
    settings.BROWSER_MAX_LAG = 20
    bot = await start_bot(ingest_token)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    await receive(browser)
    for i in range(1, 101):
        await send(bot, wrap(i, token_message(i)))
        await asyncio.sleep(0.002)
    for _ in range(100):
        await receive(bot)
    frames = await receive_until(browser, lambda f: f.get("type") == "resync")
    await asyncio.sleep(0.2)
    assert await browser.receive_nothing(0.3)  # nothing more while it is behind
    sent = [f["to"] for f in frames if f["type"] == "batch"]
    assert 20 <= sent[-1] < 100
    # It catches up with a fresh snapshot.
    await send(browser, {"snapshot": True})
    snapshot = await receive(browser)
    assert snapshot["type"] == "snapshot" and snapshot["state"]["version"] == 100
    await browser.disconnect()
    await bot.disconnect()


async def test_a_browser_that_acknowledges_is_never_paused(ingest_token, staff_cookie, settings):
    settings.BROWSER_MAX_LAG = 20
    bot = await start_bot(ingest_token)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    page = Page()
    page.take(await receive(browser))
    for i in range(1, 101):
        await send(bot, wrap(i, token_message(i)))
        if i % 10 == 0:
            frames = await follow(browser, page, at_version(i))
            assert all(f["type"] == "batch" for f in frames)
            await send(browser, {"ack": page.version})
    assert page.seqs == list(range(1, 101))
    await browser.disconnect()
    await bot.disconnect()


async def test_the_session_list_socket_streams_started_updated_and_ended(ingest_token, staff_cookie):
    watcher, connected, _ = await open_browser("/ws/sessions/", staff_cookie)
    assert connected
    first = await receive(watcher)
    assert first["type"] == "live" and first["sessions"] == []
    bot = await start_bot(ingest_token)
    started = await receive(watcher)
    assert started["type"] == "started" and started["session"]["id"] == "s1"
    await send(bot, wrap(1, token_message(1)))
    updated = await receive_until(watcher, lambda f: f["type"] == "updated")
    assert [row["event_count"] for row in updated[-1]["sessions"]] == [1]
    await bot.disconnect()
    ended = await receive_until(watcher, lambda f: f["type"] == "ended")
    assert ended[-1]["session"]["status"] == "ended"
    await watcher.disconnect()


async def test_sessions_summarised_in_one_write_reach_the_list_in_one_frame(ingest_token, staff_cookie):
    """The writer relays one flush's summaries to an organization's list at once, and the page gets them in one
    frame: with 1,000 live sessions, a frame per row was most of what a list's browser cost the server."""
    watcher, _, _ = await open_browser("/ws/sessions/", staff_cookie)
    await receive(watcher)
    bots = [await start_bot(ingest_token, f"call-{n}") for n in (1, 2, 3)]
    await receive_until(watcher, lambda f: f["type"] == "started" and f["session"]["id"] == "call-3")
    for count, bot in enumerate(bots, start=1):  # in one frame each, so in the same write
        await send(bot, {"batch": [wrap(i, token_message(i)) for i in range(1, count + 1)]})
    counts = {}
    while len(counts) < 3 or sorted(counts.values()) != [1, 2, 3]:
        frame = await receive(watcher)
        if frame["type"] == "updated":
            assert set(frame) == {"type", "sessions"}
            counts.update({row["id"]: row["event_count"] for row in frame["sessions"]})
    assert counts == {"call-1": 1, "call-2": 2, "call-3": 3}
    # However many a write summarised (one write here, or more on a slow machine), a relay's rows come as
    # one frame: the writer's relay of three rows, made as it makes it.
    org_id = (await Session.objects.aget(session_id="call-1")).organization_id
    rows = [{"id": f"call-{n}", "event_count": 7} for n in (1, 2, 3)]
    await relay.relay(relay.org_group(org_id), {"type": "session.list", "event": "updated", "sessions": rows})
    frames = await receive_until(watcher, lambda f: f["type"] == "updated" and f["sessions"][0]["event_count"] == 7)
    assert frames[-1] == {"type": "updated", "sessions": rows}
    # A write of many more rows than one frame should carry (daphne sends at most 1 MiB): frames of at most 500.
    many = [{"id": f"many-{n}", "event_count": 8} for n in range(1201)]
    await relay.relay(relay.org_group(org_id), {"type": "session.list", "event": "updated", "sessions": many})
    got = []
    while len(got) < 3:
        frame = await receive(watcher)
        if frame["type"] == "updated" and frame["sessions"][0]["event_count"] == 8:
            got.append(frame["sessions"])
    assert [len(rows) for rows in got] == [500, 500, 201] and [row for rows in got for row in rows] == many
    await watcher.disconnect()
    for bot in bots:
        await bot.disconnect()


async def test_the_session_list_socket_lists_live_sessions_on_connect(ingest_token, staff_cookie):
    bot = await start_bot(ingest_token, "call-1", count=1)
    watcher, _, _ = await open_browser("/ws/sessions/", staff_cookie)
    assert [s["id"] for s in (await receive(watcher))["sessions"]] == ["call-1"]
    await watcher.disconnect()
    await bot.disconnect()


async def test_the_session_list_socket_shows_only_the_users_organization(other_org, staff_cookie):
    from rtvi_monitor.live.models import IngestToken

    foreign_token = (await sync_to_async(IngestToken.issue)(other_org))[1]
    watcher, _, _ = await open_browser("/ws/sessions/", staff_cookie)
    await receive(watcher)
    bot = await start_bot(foreign_token, "globex-call", count=1)
    assert await watcher.receive_nothing(0.3)
    await watcher.disconnect()
    await bot.disconnect()


async def test_a_staff_user_without_organization_is_refused(ingest_token, django_user_model, client):
    user = await sync_to_async(django_user_model.objects.create_user)("lost", password="x-long-pass-1", is_staff=True)
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    _, connected, _ = await open_browser("/ws/sessions/", cookie)
    assert not connected
    assert not await sync_to_async(Membership.objects.filter(user=user).exists)()


async def test_a_browser_whose_snapshot_fails_is_not_kept_as_a_watcher(ingest_token, staff_cookie, monkeypatch):
    """No disconnect follows a connect that raised: the consumer leaves the fan-out itself."""
    from rtvi_monitor.live.relay import fanout
    from rtvi_monitor.live.snapshots import SessionFeed
    from rtvi_monitor.sessions import metrics

    bot = await start_bot(ingest_token)

    def browsers():
        return metrics.REGISTRY.get_sample_value("rtvi_browser_sockets")

    browsers_before = browsers()

    async def broken(self):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(SessionFeed, "send_snapshot", broken)
    browser = browser_socket("/ws/sessions/s1/", staff_cookie)
    with pytest.raises(RuntimeError, match="went away"):
        await browser.connect()
        await browser.receive_from(timeout=1)
    from rtvi_monitor.live.relay import session_group
    from rtvi_monitor.sessions.models import Session

    # This session's group (another test's browser may still be on its way out of its own).
    watched = session_group((await sync_to_async(Session.objects.get)(session_id="s1")).pk)
    assert watched not in fanout.watchers
    assert browsers() == browsers_before
    await bot.disconnect()


async def test_the_session_list_misses_nothing_that_happens_while_it_loads(ingest_token, staff_cookie, monkeypatch):
    """A session that starts while a list page loads its rows comes right after the list."""
    from rtvi_monitor.live import consumers

    real_rows = consumers._live_rows
    started = []

    async def rows_then_a_session_starts(organization):
        rows = await real_rows(organization)
        started.append(await start_bot(ingest_token, "late-call"))  # after the query, before the list goes out
        return rows

    monkeypatch.setattr(consumers, "_live_rows", rows_then_a_session_starts)
    page, connected, _ = await open_browser("/ws/sessions/", staff_cookie)
    assert connected
    listed = await receive(page)
    assert listed["type"] == "live" and listed["sessions"] == []
    frames = await receive_until(page, lambda f: f["type"] == "started")
    assert frames[-1]["session"]["id"] == "late-call"
    await page.disconnect()
    await started[0].disconnect()


async def test_a_resync_since_a_seq_gets_the_events_after_it_and_past_the_last_an_empty_answer(
    ingest_token, staff_cookie
):
    bot = await start_bot(ingest_token, count=5)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    await receive(browser)
    await send(browser, {"snapshot": True, "since": 3})
    snapshot = await receive(browser)
    assert snapshot["type"] == "snapshot" and [e["seq"] for e in snapshot["events"]] == [4, 5]
    assert snapshot["state"]["version"] == 5
    await send(browser, {"snapshot": True, "since": 10_000})  # beyond the last seq: answered, with no events
    snapshot = await receive(browser)
    assert snapshot["type"] == "snapshot" and snapshot["events"] == [] and snapshot["state"]["version"] == 5
    await browser.disconnect()
    await bot.disconnect()


@pytest.mark.parametrize(
    ("request_text", "says"),
    [
        ("not json", "expected a JSON object"),
        ("[1]", "expected a JSON object"),
        ('{"since": 3}', 'since: only with "snapshot": true'),
        ('{"snapshot": true, "since": -1}', "since: expected a whole number from 0"),
        ('{"snapshot": "yes"}', "snapshot: expected true"),
        ('{"ack": "ten"}', "ack: expected a whole number from 0"),
        ('{"resync": true}', "unknown field 'resync'"),
        ("x" * 5000, "at most 1000 characters"),
    ],
)
async def test_a_request_the_browser_socket_cannot_take_is_answered_with_what_was_wrong(
    ingest_token, staff_cookie, request_text, says
):
    bot = await start_bot(ingest_token, count=1)
    browser, _, _ = await open_browser("/ws/sessions/s1/", staff_cookie)
    await receive(browser)
    await browser.send_to(text_data=request_text)
    answer = await receive(browser)
    assert answer["type"] == "error" and says in answer["error"]
    await send(browser, {"ack": 1})  # and the socket still works
    await send(browser, {"snapshot": True})
    assert (await receive(browser))["type"] == "snapshot"
    await browser.disconnect()
    await bot.disconnect()
