"""The live path untied (issue 34, part 2): each of its pieces calls only what is below it.

- the writer reports a session a fatal error ended; the lifecycle, which owns ends, ends it;
- a row names its session by its key, and the writer finds the session in the registry;
- an operator's action comes in through the same door as a bot's message (live/intake.py);
- the other features hear of an end through one signal (live/signals.py), subscribed in the wiring;
- the wiring starts the alerts and the purges beside the live path;
- a sync view reads a held session's turns on the event loop, never from its own thread;
- sessions/events.py imports nothing of the live path; no function or class of it grows past a page.
"""

import ast
import asyncio
import json
import pathlib
import threading
import types

import pytest
from asgiref.sync import sync_to_async

from rtvi_monitor.core.redaction import NONE
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live import control, intake, lifecycle
from rtvi_monitor.live.registry import registry
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.live.signals import session_ended
from rtvi_monitor.live.writer import get_writer
from rtvi_monitor.sessions.models import Event, Session
from tests.house.test_architecture import _imports, _modules, broken_rules
from tests.house.test_unit_sizes import too_long
from tests.sockets import bot_socket, receive, rtvi, send, wrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
live_path = pytest.mark.usefixtures("live_path")
FATAL = rtvi("error", {"message": "LLM quota exceeded", "fatal": True})


async def connect(token: str, session_id: str):
    bot = bot_socket(session_id, token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, rtvi("bot-ready", {"version": "1.0.0"})))
    assert await receive(bot) == {"ack": 1}
    return bot


async def status(session_id: str) -> str:
    return (await sync_to_async(Session.objects.get)(session_id=session_id)).status


async def wait_for(check, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "it never happened"
        await asyncio.sleep(0.02)


async def _is(value, expected) -> bool:
    return await value == expected


class _Quiet:
    """A bot connection that hears nothing."""

    async def reply(self, payloads: list[dict]) -> None:
        return None


QUIET = _Quiet()


# --- 1. a fatal error: reported by the writer, ended by the lifecycle ------------------------------------------


@live_path
async def test_the_writer_reports_a_fatal_error_and_the_lifecycle_ends_the_session(ingest_token):
    bot = await connect(ingest_token, "fatal-told")
    writer = get_writer()
    assert not hasattr(writer, "end_fatal")  # no callback into the lifecycle
    loop = asyncio.get_running_loop()
    _, following = lifecycle._following[loop]
    following.cancel()  # nobody ends what the writer reports, for now
    await send(bot, wrap(2, FATAL))
    assert await receive(bot) == {"ack": 2}  # stored
    pk = await asyncio.wait_for(writer.next_fatal(), 2)
    assert pk == registry.sessions[pk].pk and await status("fatal-told") == "live"  # the writer ended nothing
    lifecycle.follow(writer)  # the lifecycle takes the reports again: the next flush reports the session again
    await send(bot, wrap(3, rtvi("bot-llm-text", {"text": "after"})))
    assert await receive(bot) == {"ack": 3}
    await wait_for(lambda: _is(status("fatal-told"), "ended"))
    stored = await sync_to_async(Session.objects.get)(pk=pk)
    assert (stored.end_kind, stored.end_reason) == ("fatal_error", "fatal error")
    await bot.disconnect()


def test_the_writer_imports_nothing_that_ends_a_session():
    source = (ROOT / "rtvi_monitor/live/writer.py").read_text()
    imported = {name for _, name in _imports(ROOT / "rtvi_monitor/live/writer.py")}
    assert not {"rtvi_monitor.live.lifecycle", "rtvi_monitor.live.process"} & imported
    assert "end_fatal" not in source


# --- 2. a row names its session by its key ---------------------------------------------------------------------


def test_a_row_carries_its_sessions_key_not_the_session():
    live = LiveSession(pk=41, organization_id=1, session_id="s", state=SessionState())
    row, _ = live.accept(wrap(1, rtvi("bot-ready")), 1_750_000_000.0, QUIET, "", NONE)
    (ready,) = live.ready(row, NONE)
    assert ready.session_pk == 41 and not hasattr(ready, "live") and ready.as_params()[0] == 41


@live_path
async def test_the_writer_folds_rows_into_the_session_the_registry_holds_and_stores_the_others(ingest_token):
    bot = await connect(ingest_token, "held")
    (live,) = [s for s in registry.sessions.values() if s.session_id == "held"]
    version = live.state.version
    await send(bot, wrap(2, rtvi("bot-llm-text", {"text": "folded"})))
    assert await receive(bot) == {"ack": 2}
    assert live.state.version > version
    # A session no longer held here (its bot left meanwhile): its rows are stored, folded by nobody.
    gone = LiveSession(pk=live.pk, organization_id=live.organization_id, session_id="held", state=SessionState())
    gone.max_seq = live.max_seq
    del registry.sessions[live.pk]
    writer = get_writer()
    row, _ = gone.accept(rtvi("server-message", {"text": "late"}), 1_750_000_000.0, QUIET, "late", NONE)
    for ready in gone.ready(row, NONE):
        writer.add(ready)
    await writer.flush()
    assert gone.state.version == 0  # nobody folded it
    assert await sync_to_async(Event.objects.filter(session_id=live.pk, stream="late").count)() == 1
    registry.sessions[live.pk] = live
    await bot.disconnect()


# --- 3. one way in ---------------------------------------------------------------------------------------------


@live_path
async def test_an_operators_action_comes_in_through_the_same_door_as_a_bots_message(org, ingest_token, monkeypatch):
    from tests.live.test_live_control import connect_bot, operator, post, stored

    came_in = []
    take_in = intake.take_in

    def spy(writer, live, frames, received_at, replier, stream="", shallow=False):
        came_in.append((live.session_id, stream, [f.get("type") or f["message"]["type"] for f in frames]))
        return take_in(writer, live, frames, received_at, replier, stream, shallow)

    monkeypatch.setattr(intake, "take_in", spy)
    bot = await connect_bot(ingest_token)
    client = await operator(org)
    request = asyncio.ensure_future(post(client, "/api/sessions/call-1/send-text/", {"content": "hello"}))
    frame = await receive(bot)
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    assert (await request).status_code == 200
    (event,) = await stored("call-1", stream=control.CONTROL_STREAM)
    assert json.loads(event.message)["data"]["dashboard"]["action"] == "send-text"
    assert ("call-1", "", ["bot-ready"]) in came_in  # the bot's message
    assert ("call-1", control.CONTROL_STREAM, ["server-message"]) in came_in  # the operator's, the same way
    await bot.disconnect()


def test_control_reads_no_connections_session_writer_or_redactor():
    tree = ast.parse((ROOT / "rtvi_monitor/live/control.py").read_text())
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {"live_session", "writer", "redactor"} & attributes


# --- 4. one published end --------------------------------------------------------------------------------------


@live_path
async def test_every_ended_session_is_told_once_to_the_features_that_subscribe(ingest_token, settings):
    settings.SESSION_END_GRACE = 30  # the finished bots end at once, in bulk; none by the grace
    told: list[tuple[str, str]] = []

    def heard(sender, session, **kwargs):
        told.append((session.session_id, session.end_kind))

    session_ended.connect(heard, dispatch_uid="test-heard")
    try:
        bots = [await connect(ingest_token, f"told-{n}") for n in range(3)]
        fatal = await connect(ingest_token, "told-fatal")
        await send(fatal, wrap(2, FATAL))
        assert await receive(fatal) == {"ack": 2}
        for bot in bots:
            await bot.disconnect(code=1000)
        for n in range(3):
            await wait_for(lambda n=n: _is(status(f"told-{n}"), "ended"))
        await wait_for(lambda: _is(status("told-fatal"), "ended"))
        await asyncio.sleep(0.3)  # a sweep or two more: nothing is told twice
        assert sorted(told) == [*[(f"told-{n}", "bot_finished") for n in range(3)], ("told-fatal", "fatal_error")]
        await fatal.disconnect()
    finally:
        session_ended.disconnect(dispatch_uid="test-heard")


def test_audio_hears_of_ends_through_the_signal_subscribed_in_the_wiring():
    assert any(key[0] == "rtvi_monitor.audio.settle_ended" for key, *_ in session_ended.receivers)
    lifecycle_imports = {name for _, name in _imports(ROOT / "rtvi_monitor/live/lifecycle.py")}
    assert not [name for name in lifecycle_imports if name.startswith("rtvi_monitor.audio")]


# --- 5. the wiring starts what runs in every server process ----------------------------------------------------


@live_path
async def test_the_wiring_starts_the_live_path_the_alerts_and_the_purges_once(monkeypatch):
    from rtvi_monitor import apps
    from rtvi_monitor.alerts import rules as alerts
    from rtvi_monitor.live import process
    from rtvi_monitor.privacy import retention

    async def idle():
        await asyncio.sleep(3600)

    monkeypatch.setattr(alerts, "run", idle)
    monkeypatch.setattr(retention, "run", idle)
    assert not hasattr(process, "start_server")
    loop = asyncio.get_running_loop()
    apps.start_server()
    started = [alerts._tasks[loop], retention._tasks[loop], lifecycle._tasks[loop]]
    assert not any(task.done() for task in started)
    apps.start_server()  # whatever starts them again: the same tasks
    assert [alerts._tasks[loop], retention._tasks[loop], lifecycle._tasks[loop]] == started
    for task in started[:2]:
        task.cancel()


# --- 6. a held session's turns are read on the event loop ------------------------------------------------------


def test_a_sync_view_reads_a_held_sessions_turns_on_the_event_loop():
    from rtvi_monitor.audio.comparison import reported_turns

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    read_on = []

    class Turns:  # the state's turns, as the writer changes them on the loop
        @property
        def items(self):
            read_on.append(threading.get_ident())
            return [{"index": 0, "latency_ms": 500.0}]

    held = types.SimpleNamespace(state=types.SimpleNamespace(turns=Turns()))
    saved = registry.loop
    registry.loop, registry.sessions[987_654] = loop, held
    try:
        turns = reported_turns(types.SimpleNamespace(pk=987_654, state=None))  # on this thread, as a sync view is
    finally:
        registry.loop = saved
        registry.sessions.pop(987_654, None)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert turns == [{"index": 0, "latency_ms": 500.0}]
    assert read_on == [thread.ident]  # on the loop's thread, not the view's


# --- 7 and 8. the import direction, and sizes ------------------------------------------------------------------


def test_the_live_path_and_events_import_along_the_direction():
    wrong = [
        f"{module}:{line} imports {imported}: {why}"
        for module, path in _modules()
        if module.startswith("rtvi_monitor.live") or module == "rtvi_monitor.sessions.events"
        for line, imported in _imports(path)
        if (why := broken_rules(module, imported))
    ]
    assert wrong == []
    events = {name for _, name in _imports(ROOT / "rtvi_monitor/sessions/events.py")}
    assert not [name for name in events if name.startswith("rtvi_monitor.live")]


OWNED = [
    *sorted((ROOT / "rtvi_monitor/live").glob("*.py")),
    ROOT / "rtvi_monitor/sessions/events.py",
    ROOT / "rtvi_monitor/audio/store.py",
    ROOT / "rtvi_monitor/audio/comparison.py",
    ROOT / "rtvi_monitor/audio/views.py",
    ROOT / "rtvi_monitor/apps.py",
    ROOT / "dashboard/asgi.py",
]


def test_no_function_of_the_live_path_is_over_80_lines_nor_a_class_over_250():
    """tests/house/test_unit_sizes.py's rule, on these files alone (the house's test reads every file)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}: {length} lines (at most {limit})"
        for path in OWNED
        for line, name, length, limit in too_long(path.read_text(encoding="utf-8"), str(path))
    ]
    assert offenders == []
