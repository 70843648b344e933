"""Log forwarding (rtvi_dashboard.logs): a bot's loguru or logging lines as RTVI system-log messages.

A stand-in client records what it is handed (and on which thread); one test
streams through a real DashboardClient into the stand-in endpoint of
test_package.py. The dashboard's side (the logs endpoint serving the lines) is
tested in the server's suite (tests/agents/test_v1_platform.py).
"""

import asyncio
import logging
import threading

import pytest
from rtvi_dashboard import DashboardClient
from rtvi_dashboard.logs import (
    MAX_TEXT,
    DashboardLogHandler,
    LogForwarder,
    forward_logging,
    forward_loguru,
    level_name,
    level_number,
    system_log,
)
from test_package import endpoint  # noqa: F401  (the fixture: a stand-in ingest endpoint)

loguru = pytest.importorskip("loguru", reason='loguru comes with Pipecat: pip install "./sdk[pipecat]"')


class Client:
    """What a LogForwarder uses of a DashboardClient: send() and stats["connected"]."""

    def __init__(self, connected: bool = True):
        self.stats = {"connected": connected}
        self.sent: list[dict] = []
        self.threads: set[int] = set()
        self.closed = False
        self.on_send = None

    def set_control(self, handler) -> None:  # DashboardClient's: the processor hands it its control handler
        self.control = handler

    def send(self, message: dict, direction: str = "to-client") -> int | None:
        self.threads.add(threading.get_ident())
        self.sent.append(message)
        if self.on_send:
            self.on_send()
        return len(self.sent)

    async def close(self, timeout: float = 5.0) -> None:
        self.closed = True

    @property
    def texts(self) -> list[str]:
        return [m["data"]["text"] for m in self.sent]

    @property
    def levels(self) -> list[str]:
        return [m["data"]["level"] for m in self.sent]


async def settle(seconds: float = 0.0) -> None:
    """Let the loop run the forwarder's hand-over (and any retry within `seconds`)."""
    await asyncio.sleep(seconds)
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.fixture
def bot_logger():
    """A standard logger of the bot's, at DEBUG, that does not propagate to pytest's handlers."""
    logger = logging.getLogger("bot.pipeline")
    handlers = list(logger.handlers)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger
    logger.handlers[:] = handlers


async def test_a_logging_line_becomes_a_system_log_message(bot_logger):
    client = Client()
    forwarder = forward_logging(client, logger=bot_logger)
    bot_logger.info("Call %s started", "c-1")
    await settle()
    (message,) = client.sent
    assert message["label"] == "rtvi-ai" and message["type"] == "system-log"
    assert message["data"]["level"] == "INFO"
    assert message["data"]["text"].startswith("bot.pipeline:test_a_logging_line_becomes_a_system_log_message:")
    assert message["data"]["text"].endswith(" - Call c-1 started")
    assert forwarder.forwarded == 1
    forwarder.close()


async def test_lines_below_the_level_stay_home(bot_logger):
    client = Client()
    forwarder = forward_logging(client, "WARNING", logger=bot_logger)
    bot_logger.debug("noise")
    bot_logger.info("chatter")
    bot_logger.warning("careful")
    bot_logger.error("broken")
    await settle()
    assert client.levels == ["WARNING", "ERROR"]
    forwarder.close()

    debug_client = Client()
    forwarder = forward_logging(debug_client, "debug", logger=bot_logger)
    bot_logger.debug("noise")
    await settle()
    assert debug_client.levels == ["DEBUG"]
    forwarder.close()


async def test_a_logged_exception_carries_its_traceback(bot_logger):
    client = Client()
    forwarder = forward_logging(client, logger=bot_logger)
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        bot_logger.exception("TTS failed")
    await settle()
    assert client.levels == ["ERROR"]
    assert "TTS failed" in client.texts[0] and "Traceback" in client.texts[0] and "ZeroDivisionError" in client.texts[0]
    forwarder.close()


async def test_loguru_lines_are_forwarded_with_their_level_and_source():
    from loguru import logger

    client = Client()
    handlers = len(logger._core.handlers)
    forwarder = forward_loguru(client)
    logger.debug("not at INFO")
    logger.info("Pipeline started")
    logger.success("Connected")
    logger.warning("LLM slow: {} ms", 900)
    try:
        {}["missing"]
    except KeyError:
        logger.exception("Function call failed")
    await settle()
    assert client.levels == ["INFO", "SUCCESS", "WARNING", "ERROR"]
    assert client.texts[0].startswith("test_logs:test_loguru_lines_are_forwarded_with_their_level_and_source:")
    assert client.texts[0].endswith(" - Pipeline started")
    assert client.texts[2].endswith(" - LLM slow: 900 ms")
    assert "Traceback" in client.texts[3] and "KeyError: 'missing'" in client.texts[3]
    assert not any(text.endswith("\n") for text in client.texts)

    forwarder.close()
    assert len(logger._core.handlers) == handlers  # the sink is gone
    logger.info("after close")
    await settle()
    assert len(client.sent) == 4


async def test_a_filter_keeps_one_sessions_lines():
    from loguru import logger

    client = Client()
    forwarder = forward_loguru(client, filter=lambda record: record["extra"].get("session") == "s-1")
    logger.bind(session="s-1").info("mine")
    logger.bind(session="s-2").info("theirs")
    logger.info("nobody's")
    await settle()
    assert [text.rsplit(" - ", 1)[1] for text in client.texts] == ["mine"]
    forwarder.close()


async def test_lines_from_any_thread_reach_the_client_on_its_loop(bot_logger):
    client = Client()
    forwarder = forward_logging(client, logger=bot_logger, max_per_second=10_000)

    def log_many(n):
        for i in range(100):
            bot_logger.info("thread %d line %d", n, i)

    threads = [threading.Thread(target=log_many, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    await settle(0.05)
    assert len(client.sent) == 400 and forwarder.dropped == 0
    assert client.threads == {threading.get_ident()}  # the client is used on its loop only
    forwarder.close()


async def test_an_outage_puts_a_bounded_number_of_lines_in_the_clients_buffer(bot_logger):
    """While the client is not connected it takes max_pending lines, and max_pending more wait here; the rest go.

    So an outage cannot fill the client's buffer with log lines (it would drop its oldest RTVI messages for them).
    """
    client = Client(connected=False)
    forwarder = forward_logging(client, logger=bot_logger, max_pending=100, max_per_second=10_000)
    for i in range(250):
        bot_logger.info("line %d", i)
        if i % 50 == 49:
            await settle()
    await settle(0.3)
    assert len(client.sent) == 100 and client.texts[-1].endswith(" - line 99")
    assert forwarder.dropped == 50  # lines 200-249: the queue here held 100-199
    client.stats["connected"] = True
    await settle(0.3)
    assert len(client.sent) == 200 and client.texts[-1].endswith(" - line 199")
    forwarder.close()


async def test_lines_are_handed_over_at_most_max_per_second(bot_logger):
    client = Client()
    forwarder = forward_logging(client, logger=bot_logger, max_per_second=40)
    for i in range(100):
        bot_logger.info("line %d", i)
    await settle()
    assert len(client.sent) == 40  # a second's worth at once
    await settle(0.3)
    assert 40 < len(client.sent) <= 40 + 0.35 * 40 + 1
    forwarder.close()  # hands over the rest
    assert len(client.sent) == 100 and forwarder.dropped == 0


async def test_close_hands_over_what_waits_and_stops_forwarding(bot_logger):
    client = Client()
    forwarder = forward_logging(client, logger=bot_logger, max_per_second=1)
    for i in range(5):
        bot_logger.info("line %d", i)
    await settle()
    assert len(client.sent) == 1  # the rest wait for the rate
    forwarder.close()
    assert [text.rsplit(" - ", 1)[1] for text in client.texts] == [f"line {i}" for i in range(5)]
    assert not any(isinstance(handler, DashboardLogHandler) for handler in bot_logger.handlers)
    bot_logger.info("after the end")
    forwarder.emit("after the end too")
    await settle(0.3)
    assert len(client.sent) == 5


async def test_the_packages_own_lines_and_the_sockets_are_never_forwarded():
    client = Client()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    forwarder = forward_logging(client)
    try:
        logging.getLogger("rtvi_dashboard.client").warning("Dashboard unreachable: 10 messages dropped so far")
        logging.getLogger("websockets.client").warning("connection lost")
        logging.getLogger("websocketsx").warning("not the socket library")
        await settle()
    finally:
        forwarder.close()
        root.setLevel(level)
    assert [text.rsplit(" - ", 1)[1] for text in client.texts] == ["not the socket library"]


async def test_a_line_logged_while_one_is_handed_over_is_not_forwarded(bot_logger):
    """No feedback loop: whatever the client logs while it takes a line stays out."""
    from loguru import logger

    client = Client()
    client.on_send = lambda: (bot_logger.warning("logged by send"), logger.warning("also by send"))
    stdlib, sink = forward_logging(client, logger=bot_logger), forward_loguru(client)
    bot_logger.info("one line")
    await settle(0.05)
    assert [text.rsplit(" - ", 1)[1] for text in client.texts] == ["one line"]
    stdlib.close()
    sink.close()


async def test_emit_never_raises_even_when_the_loop_is_gone():
    loop = asyncio.new_event_loop()
    loop.close()
    client = Client()
    forwarder = LogForwarder(client, loop=loop)
    forwarder.emit("too late", "INFO")
    assert forwarder.dropped == 1 and client.sent == []


def test_lines_logged_before_any_loop_wait_for_start():
    client = Client()
    forwarder = LogForwarder(client)
    forwarder.emit("early", "INFO")  # no loop yet (a thread, or import time)
    assert client.sent == []

    async def later():
        forwarder.start()
        await settle()

    asyncio.run(later())
    assert client.texts == ["early"]


async def test_a_long_line_is_cut_and_marked():
    client = Client()
    forwarder = LogForwarder(client)
    forwarder.emit("x" * (MAX_TEXT + 500), "INFO")
    await settle()
    assert len(client.texts[0]) == MAX_TEXT + len(" […]") and client.texts[0].endswith(" […]")


def test_levels_by_name_or_number():
    assert level_number("info") == level_number(" INFO ") == 20
    assert level_number("warn") == level_number("WARNING") == 30
    assert level_number("TRACE") == 5 and level_number(15) == level_number("15") == 15
    for bad in ("loud", "", None, 2.5, True):
        with pytest.raises(ValueError, match="level must be"):
            level_number(bad)
    assert level_name("warning", 30) == "WARNING"
    assert level_name("Level 15", 15) == "DEBUG"  # logging's name for a level it has none for
    assert level_name("", 55) == "CRITICAL"


def test_the_message_is_the_rtvi_shape_the_dashboard_reads():
    assert system_log("hello", "INFO") == {
        "label": "rtvi-ai",
        "type": "system-log",
        "data": {"text": "hello", "level": "INFO"},
    }


async def test_lines_reach_the_dashboard_through_a_real_client(endpoint):  # noqa: F811
    from loguru import logger

    client = DashboardClient(endpoint.url, "it_secret", "call-logs")
    client.start()
    client.send({"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "1.0.0"}})
    forwarder = forward_loguru(client)
    logger.info("streamed line")
    await settle(0.1)
    forwarder.close()
    assert await client.flush(5)
    await client.close()
    messages = [item["message"] for item in sorted(endpoint.stored.values(), key=lambda item: item["seq"])]
    assert [m["type"] for m in messages] == ["bot-ready", "system-log"]
    assert messages[1]["data"]["level"] == "INFO" and messages[1]["data"]["text"].endswith(" - streamed line")


# --- the Pipecat integration's opt-in -----------------------------------------------------------------


@pytest.fixture
def pipecat():
    pytest.importorskip("pipecat", reason='the [pipecat] extra: pip install "./sdk[pipecat]"')
    import rtvi_dashboard.pipecat as module

    return module


@pytest.mark.parametrize(
    "argument,env,level",
    [
        (None, None, None),
        (None, "", None),
        (None, "0", None),
        (None, "false", None),
        (None, "1", 20),
        (None, "true", 20),
        (None, "INFO", 20),
        (None, "debug", 10),
        (None, "WARNING", 30),
        (True, None, 20),
        (False, "DEBUG", None),  # the argument wins
        ("ERROR", "DEBUG", 40),
        (15, None, 15),
    ],
)
def test_forward_logs_comes_from_the_argument_else_the_environment(pipecat, monkeypatch, argument, env, level):
    if env is None:
        monkeypatch.delenv("RTVI_DASHBOARD_FORWARD_LOGS", raising=False)
    else:
        monkeypatch.setenv("RTVI_DASHBOARD_FORWARD_LOGS", env)
    assert pipecat.forward_logs_level(argument) == level


def test_a_bad_level_in_the_environment_is_off_and_said(pipecat, monkeypatch, caplog):
    monkeypatch.setenv("RTVI_DASHBOARD_FORWARD_LOGS", "loud")
    with caplog.at_level(logging.WARNING, logger="rtvi_dashboard.pipecat"):
        assert pipecat.forward_logs_level() is None
    assert "RTVI_DASHBOARD_FORWARD_LOGS='loud'" in caplog.text


def test_a_bad_level_argument_is_refused(pipecat):
    with pytest.raises(ValueError, match="level must be"):
        pipecat.DashboardRTVIProcessor(client=Client(), forward_logs="loud")


async def test_the_processor_forwards_the_bots_loguru_lines_from_its_start_to_its_cleanup(pipecat, monkeypatch):
    from loguru import logger

    monkeypatch.delenv("RTVI_DASHBOARD_FORWARD_LOGS", raising=False)
    client = Client()
    client.start = lambda: None
    rtvi = pipecat.DashboardRTVIProcessor(client=client, forward_logs="WARNING")
    assert rtvi.forward_logs == 30 and rtvi.log_forwarder is None
    rtvi.log_forwarder = pipecat._forward_logs(client, rtvi.forward_logs)  # what _start does, without a pipeline
    logger.info("not at WARNING")
    logger.warning("LLM slow")
    await settle()
    await pipecat._close(client, rtvi.log_forwarder)  # what cleanup does after Pipecat's own
    assert client.levels == ["WARNING"] and client.closed and rtvi.log_forwarder.closed


async def test_attach_forwards_logs_when_the_environment_asks(pipecat, monkeypatch):
    from loguru import logger
    from pipecat.processors.frameworks.rtvi import RTVIProcessor

    monkeypatch.setenv("RTVI_DASHBOARD_FORWARD_LOGS", "INFO")
    client = Client()
    rtvi = RTVIProcessor()
    pipecat.attach(rtvi, client)
    logger.info("attached line")
    await settle()
    assert client.texts[-1].endswith(" - attached line")
    await rtvi.cleanup()
    assert client.closed and rtvi.log_forwarder.closed
    logger.info("after cleanup")
    await settle()
    assert not client.texts[-1].endswith(" - after cleanup")


async def test_without_the_opt_in_nothing_is_forwarded(pipecat, monkeypatch):
    from pipecat.processors.frameworks.rtvi import RTVIProcessor

    monkeypatch.delenv("RTVI_DASHBOARD_FORWARD_LOGS", raising=False)
    rtvi = RTVIProcessor()
    pipecat.attach(rtvi, Client())
    assert rtvi.log_forwarder is None
    assert pipecat.DashboardRTVIProcessor(client=Client()).forward_logs is None
