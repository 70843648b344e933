"""GET /metrics: Prometheus text, an organization's own series only, never anonymous."""

import pytest
from asgiref.sync import sync_to_async
from prometheus_client.parser import text_string_to_metric_families

from dashboard.org.models import ApiKey
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")


def samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


TURN = [
    ("to-client", rtvi("user-started-speaking")),
    ("to-client", rtvi("user-stopped-speaking")),
    ("to-client", rtvi("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.4}]})),
    ("to-client", rtvi("bot-started-speaking")),
    ("to-client", rtvi("error", {"error": "TTS hiccup", "fatal": False})),
    ("to-client", rtvi("made-up-type")),
    ("to-client", rtvi("user-transcription", {"text": "x", "final": "yes"})),
]


async def stream(token, session_id):
    bot = bot_socket(session_id, token)
    assert (await bot.connect())[0]
    for i, (direction, message) in enumerate(TURN, 1):
        await send(bot, wrap(i, message, direction, sent_at=1_750_000_000.0 + i * 0.5))
        await receive(bot)
    return bot


def test_metrics_are_never_anonymous(client):
    response = client.get("/metrics")
    assert response.status_code == 401 and response.json()["error"]


async def test_an_organization_scrapes_its_own_series(ingest_token, api_key, async_client):
    bot = await stream(ingest_token, "scraped")
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    got = samples(response.content.decode())
    assert got[("rtvi_messages_ingested_total", (("result", "valid"),))] >= 5
    assert got[("rtvi_messages_ingested_total", (("result", "unknown"),))] >= 1
    assert got[("rtvi_messages_ingested_total", (("result", "invalid"),))] >= 1
    assert got[("rtvi_errors_total", (("agent", ""), ("fatal", "false")))] >= 1
    assert got[("rtvi_turn_latency_seconds_count", (("agent", ""),))] >= 1
    assert got[("rtvi_ttfb_seconds_count", (("model", "gpt-4o"), ("service", "llm")))] >= 1
    assert got[("rtvi_sessions_live", (("agent", ""),))] == 1
    assert ("rtvi_browser_sockets", ()) in got and ("rtvi_writer_flush_seconds_count", ()) in got
    assert all("organization" not in dict(labels) for _, labels in got)
    await bot.disconnect()


async def test_another_organization_sees_none_of_it(ingest_token, other_org, async_client):
    bot = await stream(ingest_token, "private")
    other_key = (await sync_to_async(ApiKey.issue)(other_org, "scrape"))[1]
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {other_key}"})
    got = samples(response.content.decode())
    assert not any(name.startswith(("rtvi_messages", "rtvi_errors", "rtvi_ttfb")) for name, _ in got)
    assert not any(name == "rtvi_sessions_live" for name, _ in got)
    await bot.disconnect()


async def test_agent_series_carry_the_agents_name_beside_its_id(ingest_token, api_key, org, other_org, async_client):
    """`agent` stays the id (stable across renames); `agent_name` is what a person reads, one per agent."""
    from dashboard.agents.models import Agent

    agent = await sync_to_async(Agent.objects.create)(organization=org, name="support-desk")
    bot = bot_socket("named", ingest_token, agent=str(agent.pk))
    assert (await bot.connect())[0]
    for i, (direction, message) in enumerate(TURN, 1):
        await send(bot, wrap(i, message, direction, sent_at=1_750_000_000.0 + i * 0.5))
        await receive(bot)
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    got = samples(response.content.decode())
    named = (("agent", str(agent.pk)), ("agent_name", "support-desk"))
    assert got[("rtvi_sessions_live", named)] == 1
    assert got[("rtvi_turn_latency_seconds_count", named)] >= 1
    assert got[("rtvi_errors_total", (*named, ("fatal", "false")))] >= 1
    # Every series of the agent is named, and by one name: as many series as before, none without it.
    agent_series = [dict(labels) for _, labels in got if dict(labels).get("agent") == str(agent.pk)]
    assert agent_series and all(labels["agent_name"] == "support-desk" for labels in agent_series)
    # Renamed, the same series (the same id) read the new name.
    agent.name = "support-desk-v2"
    await sync_to_async(agent.save)()
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    renamed = samples(response.content.decode())
    assert renamed[("rtvi_sessions_live", (("agent", str(agent.pk)), ("agent_name", "support-desk-v2")))] == 1
    assert not any(dict(labels).get("agent_name") == "support-desk" for _, labels in renamed)
    # Another organization's scrape names none of it.
    other_key = (await sync_to_async(ApiKey.issue)(other_org, "scrape"))[1]
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {other_key}"})
    assert "support-desk" not in response.content.decode() and str(agent.pk) not in response.content.decode()
    await bot.disconnect()


async def test_an_agents_api_agent_is_named_by_its_sessions(ingest_token, api_key, org, async_client):
    """An agent of the agents API (no built-in row): named as its newest session was."""
    from rtvi_monitor.sessions.models import Session

    await sync_to_async(Session.objects.create)(
        organization=org, session_id="cloud-1", agent_key="agent-7f3a", agent_name="billing-bot", status="ended"
    )
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    got = samples(response.content.decode())
    labels = (("agent", "agent-7f3a"), ("agent_name", "billing-bot"), ("end", "unknown"), ("failed", "false"))
    assert got[("rtvi_sessions_total", labels)] == 1


async def test_each_part_of_a_turns_wait_is_a_series_by_part_and_kind(ingest_token, api_key, async_client):
    from tests.core.test_contributions import TWO, breakdown

    bot = bot_socket("parts", ingest_token)
    assert (await bot.connect())[0]
    await send(bot, wrap(1, breakdown(TWO, user_turn_secs=0.2)))
    assert await receive(bot) == {"ack": 1}
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    got = samples(response.content.decode())
    key = ("rtvi_turn_contribution_seconds_count", (("agent", ""), ("kind", "setting"), ("part", "endpointing_wait")))
    assert got[key] == 1
    assert got[
        ("rtvi_turn_contribution_seconds_sum", (("agent", ""), ("kind", "service"), ("part", "llm_inference")))
    ] == pytest.approx(0.3)
    await bot.disconnect()


async def test_an_eval_runs_call_is_a_message_stored_and_in_no_fleet_series(ingest_token, api_key, async_client):
    from channels.testing import WebsocketCommunicator

    from dashboard.asgi import application

    bot = WebsocketCommunicator(
        application,
        "/ws/ingest/ci-call/?eval_run=ci-7",
        headers=[(b"authorization", f"Bearer {ingest_token}".encode())],
    )
    assert (await bot.connect())[0]
    for i, (direction, message) in enumerate(TURN, 1):
        await send(bot, wrap(i, message, direction, sent_at=1_750_000_000.0 + i * 0.5))
        await receive(bot)
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    got = samples(response.content.decode())
    assert got[("rtvi_messages_ingested_total", (("result", "valid"),))] >= 5  # the process's load: counted
    names = {name for name, _ in got}
    assert not names & {"rtvi_errors_total", "rtvi_turn_latency_seconds_count", "rtvi_ttfb_seconds_count"}
    assert ("rtvi_sessions_live", (("agent", ""),)) not in got
    await bot.disconnect()
