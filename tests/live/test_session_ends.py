"""How a session ended, told from its messages and how its bot's socket closed, and said the same everywhere.

Client hung up (disconnect-bot), bot finished (a 1000 close: at once, no grace),
bot vanished (dropped, or another code, and not back within the grace), fatal
error, server restarted: each stored as `end_kind`, in the session row, the
state, the API, the pages (failures red), /metrics and the alerts.
"""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from rtvi_monitor.alerts import rules as alerts
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.core.state import Event, SessionState
from rtvi_monitor.live import lifecycle
from rtvi_monitor.live.registry import registry
from rtvi_monitor.sessions.models import FAILED_ENDS, EndKind, Session
from tests.sockets import bot_socket, browser_socket, receive, receive_until, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")

DROPPED = 1006  # what daphne reports for a connection that went without a close frame


async def connect(token, session_id):
    socket = bot_socket(session_id, token)
    assert (await socket.connect())[0]
    return socket


async def session(session_id) -> Session:
    return await sync_to_async(Session.objects.get)(session_id=session_id)


async def ended(session_id, timeout=5.0) -> Session:
    deadline = asyncio.get_running_loop().time() + timeout
    while (stored := await session(session_id)).status != "ended":
        assert asyncio.get_running_loop().time() < deadline, f"{session_id} never ended"
        await asyncio.sleep(0.05)
    return stored


async def talk(bot, *messages):
    for seq, message in enumerate(messages, 1):
        await send(bot, wrap(seq, message[1], direction=message[0]))
        assert await receive(bot) == {"ack": seq}


GREETING = (("to-client", rtvi("bot-ready", {"version": "2.1.0"})), ("to-client", rtvi("bot-llm-text", {"text": "Hi"})))
HANG_UP = ("from-client", rtvi("disconnect-bot", id="bye-1"))


async def test_a_bot_that_closes_with_1000_ends_its_session_at_once_as_finished(ingest_token, staff_cookie, settings):
    settings.SESSION_END_GRACE = 30  # far longer than the test: the end must not wait for it
    watcher = browser_socket("/ws/sessions/", staff_cookie)
    assert (await watcher.connect())[0]
    await receive(watcher)
    bot = await connect(ingest_token, "finished")
    await talk(bot, *GREETING)
    left = timezone.now()
    await bot.disconnect(code=1000)
    frames = await receive_until(watcher, lambda f: f["type"] == "ended", timeout=3)
    assert not [f for f in frames if f["type"] == "away"]  # never "live, bot away"
    row = frames[-1]["session"]
    assert row["status"] == "ended" and row["end_kind"] == "bot_finished" and row["failed"] is False
    assert row["end_reason"] == "bot finished"
    stored = await ended("finished", timeout=0.1)
    assert abs((stored.ended_at - left).total_seconds()) < 0.5
    assert stored.state["end_kind"] == "bot_finished" and stored.state["end_reason"] == "bot finished"
    await watcher.disconnect()


async def test_a_finished_session_ends_from_its_bots_state_without_reading_its_events_back(
    ingest_token, settings, monkeypatch
):
    """500 finishing at once used to replay every stored event of theirs in one go (hundreds of MB)."""
    settings.SESSION_END_GRACE = 30
    loaded = []
    load_many = lifecycle._load_many
    monkeypatch.setattr(lifecycle, "_load_many", lambda pks: loaded.extend(pks) or load_many(pks))
    bot = await connect(ingest_token, "finished-kept")
    await talk(bot, *GREETING)
    await bot.disconnect(code=1000)
    stored = await ended("finished-kept")
    assert stored.pk not in loaded
    assert stored.end_kind == "bot_finished" and stored.event_count == 2
    assert [t["text"] for t in stored.state["transcript"]] == ["Hi"]
    assert stored.pk not in registry.finishing

    # A bot that connects takes the session from the database: a state kept for its end is stale, and goes.
    first = await connect(ingest_token, "finished-back")
    await talk(first, *GREETING)
    pk = (await session("finished-back")).pk
    registry.finishing[pk] = object()
    second = bot_socket("finished-back", ingest_token)
    assert (await second.connect())[0]
    await send(second, wrap(1, rtvi("bot-llm-text", {"text": "again"}), direction="to-client"))
    await receive(second)  # attached by now
    assert pk not in registry.finishing
    await first.disconnect(code=1000)
    await second.disconnect(code=1000)
    assert (await ended("finished-back")).end_kind == "bot_finished"


async def test_a_bot_that_drops_is_away_for_the_grace_then_vanished_and_failed(ingest_token, staff_cookie, settings):
    settings.SESSION_END_GRACE = 0.5
    page = browser_socket("/ws/sessions/dropped/", staff_cookie)
    bot = await connect(ingest_token, "dropped")
    await talk(bot, *GREETING)
    assert (await page.connect())[0]
    await receive(page)
    await bot.disconnect(code=DROPPED)
    away = await receive_until(page, lambda f: f["type"] == "session")
    assert away[-1]["session"]["bot"] == "away" and away[-1]["session"]["end_kind"] is None
    frames = await receive_until(page, lambda f: f["type"] == "ended" or f.get("state", {}).get("ended"), timeout=5)
    stored = await ended("dropped")
    assert stored.end_kind == "bot_vanished" and stored.end_reason == "bot vanished" and stored.failed
    assert stored.state["end_kind"] == "bot_vanished"
    assert frames  # the page was told
    await page.disconnect()


@pytest.mark.parametrize("code", [1001, 1011, 4000])
async def test_any_close_but_1000_waits_for_the_bot_to_come_back(ingest_token, settings, code):
    settings.SESSION_END_GRACE = 0.4
    bot = await connect(ingest_token, f"closed-{code}")
    await talk(bot, *GREETING)
    await bot.disconnect(code=code)
    await asyncio.sleep(0.1)
    assert (await session(f"closed-{code}")).status == "live"  # within the grace: it may come back
    assert (await ended(f"closed-{code}")).end_kind == "bot_vanished"


async def test_a_client_that_sent_disconnect_bot_hung_up_whatever_the_bot_did(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.3
    clean = await connect(ingest_token, "hung-up-clean")
    await talk(clean, *GREETING, HANG_UP)
    await clean.disconnect(code=1000)
    stored = await ended("hung-up-clean", timeout=1)
    assert (stored.end_kind, stored.end_reason, stored.failed) == ("client_hung_up", "client hung up", False)

    dropped = await connect(ingest_token, "hung-up-dropped")
    await talk(dropped, *GREETING, HANG_UP)
    await dropped.disconnect(code=DROPPED)
    stored = await ended("hung-up-dropped")
    assert stored.end_kind == "client_hung_up" and not stored.failed


async def test_a_fatal_error_ends_the_session_as_failed(ingest_token):
    bot = await connect(ingest_token, "fatal")
    await talk(bot, *GREETING, ("to-client", rtvi("error", {"message": "LLM quota exceeded", "fatal": True})))
    stored = await ended("fatal")
    assert (stored.end_kind, stored.end_reason, stored.failed) == ("fatal_error", "fatal error", True)
    await bot.disconnect(code=1000)  # the bot's later clean close does not make it "finished"
    await asyncio.sleep(0.2)
    assert (await session("fatal")).end_kind == "fatal_error"


async def test_a_session_whose_server_process_stopped_ended_with_the_server(ingest_token, settings):
    settings.SESSION_END_GRACE = 0.2
    bot = await connect(ingest_token, "restarted")
    await talk(bot, *GREETING)
    await lifecycle.release()  # the process stops: its bots are away from now
    registry.sessions.clear()  # and its memory is gone
    stored = await ended("restarted")
    assert (stored.end_kind, stored.end_reason, stored.failed) == ("server_restarted", "server restarted", True)
    await bot.disconnect(code=DROPPED)


async def test_a_bot_back_after_a_clean_end_reopens_its_session(ingest_token):
    bot = await connect(ingest_token, "again")
    await talk(bot, *GREETING)
    await bot.disconnect(code=1000)
    assert (await ended("again", timeout=1)).end_kind == "bot_finished"
    bot = await connect(ingest_token, "again")
    await send(bot, wrap(3, rtvi("bot-llm-text", {"text": "Back"})))
    assert await receive(bot) == {"ack": 3}  # the socket accepts first; its session is open once it acks
    reopened = await session("again")
    assert reopened.status == "live" and reopened.end_kind == "" and reopened.end_reason == ""
    await bot.disconnect(code=1000)
    stored = await ended("again", timeout=1)
    assert stored.end_kind == "bot_finished" and stored.event_count == 3


async def test_the_api_metrics_and_list_say_how_each_ended(ingest_token, api_key, staff_client, async_client):
    for session_id, messages, code in (
        ("api-finished", GREETING, 1000),
        ("api-hung-up", (*GREETING, HANG_UP), 1000),
        ("api-fatal", (*GREETING, ("to-client", rtvi("error", {"message": "boom", "fatal": True}))), 1000),
    ):
        bot = await connect(ingest_token, session_id)
        await talk(bot, *messages)
        await bot.disconnect(code=code)
        await ended(session_id)
    body = await async_client.get("/api/sessions/api-finished/", headers={"Authorization": f"Bearer {api_key}"})
    assert body.status_code == 200, body.content
    detail = body.json()
    assert detail["end_kind"] == "bot_finished" and detail["failed"] is False
    listed = await async_client.get("/api/sessions/?status=ended", headers={"Authorization": f"Bearer {api_key}"})
    kinds = {row["id"]: (row["end_kind"], row["failed"]) for row in listed.json()["sessions"]}
    assert kinds == {
        "api-finished": ("bot_finished", False),
        "api-hung-up": ("client_hung_up", False),
        "api-fatal": ("fatal_error", True),
    }
    metrics = (await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})).content.decode()
    assert 'rtvi_sessions_total{agent="",end="bot_finished",failed="false"} 1.0' in metrics
    assert 'rtvi_sessions_total{agent="",end="client_hung_up",failed="false"} 1.0' in metrics
    assert 'rtvi_sessions_total{agent="",end="fatal_error",failed="true"} 1.0' in metrics

    page = await sync_to_async(staff_client.get)("/sessions/?status=ended")
    html = page.content.decode()
    assert "ended (bot finished)" in html and "ended (client hung up)" in html
    assert 'class="pill ended error">ended (fatal error)' in html
    assert 'class="pill ended">ended (bot finished)' in html
    detail_page = (await sync_to_async(staff_client.get)("/sessions/api-fatal/")).content.decode()
    assert 'class="pill ended error" id="status"' in detail_page


def _ended_session(org, session_id, kind, minutes_ago=1):
    now = timezone.now()
    return Session.objects.create(
        organization=org,
        session_id=session_id,
        status=Session.Status.ENDED,
        started_at=now - timedelta(minutes=minutes_ago + 2),
        ended_at=now - timedelta(minutes=minutes_ago),
        end_kind=kind,
        end_reason=EndKind(kind).label,
    )


@pytest.mark.django_db
def test_the_ended_badly_alert_fires_on_vanished_bots_and_restarts_not_on_clean_ends(org):
    rule = AlertRule.objects.create(organization=org, name="calls cut", condition="ended_badly", threshold=2)
    for i in range(3):
        _ended_session(org, f"fine-{i}", "bot_finished")
        _ended_session(org, f"hung-{i}", "client_hung_up")
    _ended_session(org, "old-vanished", "bot_vanished", minutes_ago=60)  # outside the 15-minute window
    _ended_session(org, "vanished-1", "bot_vanished")
    now = timezone.now()
    assert alerts._ended_badly(rule, now, 2.0, 15, {}) == []
    _ended_session(org, "restart-1", "server_restarted")
    (finding,) = alerts._ended_badly(rule, now, 2.0, 15, {})
    assert finding.summary == "2 sessions ended badly in the last 15 min (bot vanished: 1, server restarted: 1)"
    assert set(finding.session_ids) == {"vanished-1", "restart-1"}
    assert alerts.evaluate_rule(rule, now, {}) == (1, 0)


def test_end_of_reads_the_messages_first():
    state = SessionState()
    assert lifecycle.end_of(state, lifecycle.LEFT) == ("bot_vanished", "bot vanished")
    assert lifecycle.end_of(state, "bot finished") == ("bot_finished", "bot finished")
    assert lifecycle.end_of(state, lifecycle.LEFT_WITH_SERVER) == ("server_restarted", "server restarted")
    state.hung_up_at = 1.0
    assert lifecycle.end_of(state, lifecycle.LEFT_WITH_SERVER) == ("client_hung_up", "client hung up")
    state.fatal = True
    assert lifecycle.end_of(state, "bot finished") == ("fatal_error", "fatal error")


def test_an_operators_end_the_bot_took_is_theirs_by_name_and_no_failure():
    about = {"action": "end", "id": "c1", "operator": "ann", "ok": True, "cancel": False}
    message = rtvi("server-message", {"text": "operator ann ended the call", "dashboard": about}, id="dashboard-c1")
    forged = SessionState()  # the same message from the bot's stream is no operator's
    forged.apply(Event(1, "to-client", 5.0, message, True, "", None, "bot"))
    assert lifecycle.end_of(forged, "bot finished") == ("bot_finished", "bot finished")
    state = SessionState()
    state.apply(Event(1, "to-client", 5.0, message, True, "", None, "dashboard"))
    for left in ("bot finished", lifecycle.LEFT):  # however the bot then went
        assert lifecycle.end_of(state, left) == ("operator_ended", "by operator ann")
    assert EndKind.OPERATOR_ENDED not in FAILED_ENDS
    state.hung_up_at = 4.0  # the caller had hung up first: theirs
    assert lifecycle.end_of(state, "bot finished") == ("client_hung_up", "client hung up")
    state.fatal = True
    assert lifecycle.end_of(state, "bot finished") == ("fatal_error", "fatal error")


@pytest.mark.django_db
def test_a_finished_bots_session_reads_as_ending_never_away_until_its_end_is_stored(org, staff_client):
    """Between a 1000 close and the sweep that ends it (a few ms to GATHER), a row says "finished", not away."""
    now = timezone.now()
    finishing = Session.objects.create(
        organization=org, session_id="finishing", bot_left_at=now, end_reason=EndKind.BOT_FINISHED.label
    )
    dropped = Session.objects.create(organization=org, session_id="dropped", bot_left_at=now, end_reason=lifecycle.LEFT)
    assert (finishing.bot_state, finishing.row()["bot"]) == ("finished", "finished")
    assert dropped.bot_state == "away"
    assert dropped.row()["bot"] == "away"
    # Both live: the sessions page's live table shows them from these rows (static/js/session_row.js, its tests),
    # and its history, ended sessions only, lists neither.
    html = staff_client.get("/sessions/").content.decode()
    assert 'data-session="finishing"' not in html and 'data-session="dropped"' not in html
