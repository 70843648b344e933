"""The demo bot's scenarios, played into the real server (daphne in a subprocess) and judged by what it derived.

Every session is played once, all at the same time and many times faster
than real time, before the tests look at them; each scenario is named, so
nothing depends on the weights' draw.
"""

import asyncio
import json
import time
import uuid

import httpx
import pytest
from rtvi_dashboard.demo import SCENARIOS, SCRIPTS, WRAP_UP, DemoBot

from tests.server import DaphneServer

ORG = f"Demo-{uuid.uuid4().hex[:8]}"  # new in every run, for shared databases
pytestmark = pytest.mark.timeout(60)

# name: (agent, DemoBot.session options, seed, speed)
PLAYS = {
    "barge_in": ("appointment-booker", {"scenario": "barge_in", "script": "booking"}, 1, 50),
    "fatal": ("support-concierge", {"scenario": "fatal"}, 2, 50),
    "function_error": ("support-concierge", {"scenario": "function_error", "script": "order_status"}, 3, 50),
    "abrupt": ("outbound-survey", {"scenario": "abrupt"}, 4, 50),
    "glitch": ("appointment-booker", {"scenario": "glitch", "script": "booking"}, 5, 50),
    # Latency is measured in real time: slow enough that it is the agents' latency, not the event loop's.
    "fast": ("appointment-booker", {"scenario": "clean", "script": "booking"}, 6, 20),
    "slow": ("outbound-survey", {"scenario": "clean"}, 6, 20),
    "replay_a": ("support-concierge", {}, 7, 50),
    "replay_b": ("support-concierge", {}, 7, 50),
}


@pytest.fixture(scope="module")
def server():
    env = {"SESSION_END_GRACE": "0.3", "SESSION_SWEEP_INTERVAL": "0.1"}
    with DaphneServer(env=env) as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", ORG).splitlines()[-1]
        running.key = running.manage("create_api_key", "--create", "--org", ORG).splitlines()[-1]
        yield running


@pytest.fixture(scope="module")
def played(server) -> dict[str, dict]:
    """Each play's session as the API shows it once ended, with its stored messages under "messages"."""

    async def play(agent, options, seed, speed):
        return await DemoBot(server.ws_url, server.token, speed=speed, seed=seed, agent_name=agent).session(**options)

    async def play_all():
        return await asyncio.gather(*(play(*args) for args in PLAYS.values()))

    ids = dict(zip(PLAYS, asyncio.run(play_all()), strict=True))
    sessions = {}
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as api:
        deadline = time.monotonic() + 15
        for name, session_id in ids.items():
            while (body := api.get(f"/api/sessions/{session_id}/").json())["status"] != "ended":
                assert time.monotonic() < deadline, f"{name} ({session_id}) did not end"
                time.sleep(0.1)
            lines = api.get(f"/api/sessions/{session_id}/events.ndjson").text.splitlines()
            sessions[name] = {**body, "messages": [json.loads(line)["message"] for line in lines]}
    return sessions


def types(session: dict) -> list[str]:
    return [message["type"] for message in session["messages"]]


def bot_lines(session: dict) -> list[dict]:
    return [item for item in session["transcript"] if item["role"] == "bot"]


def test_most_sessions_are_clean_and_few_carry_an_error():
    assert sum(SCENARIOS.values()) == pytest.approx(1)
    assert SCENARIOS["clean"] >= 0.5
    assert SCENARIOS["function_error"] + SCENARIOS["glitch"] + SCENARIOS["fatal"] <= 0.2
    assert SCENARIOS["fatal"] <= 0.05


def test_every_message_of_every_scenario_is_valid(played):
    assert {name: s["invalid_count"] for name, s in played.items()} == dict.fromkeys(PLAYS, 0)


def test_a_barge_in_cuts_the_bot_off_mid_sentence(played):
    session = played["barge_in"]
    assert session["interruption_count"] >= 1
    assert any(turn["interrupted"] for turn in session["turns"])
    (cut,) = [line for line in bot_lines(session) if line["interrupted"]]
    replies = [" ".join(turn.reply) for turn in SCRIPTS["booking"].turns]
    # What the bot had said when the user came in: the start of its reply, not the whole of it.
    assert any(reply.startswith(cut["text"]) and reply != cut["text"] for reply in replies), cut["text"]
    # The bot goes quiet only once the user has started speaking over it.
    kinds, barge_in = types(session), ["user-started-speaking", "bot-interrupted", "bot-stopped-speaking"]
    assert any(kinds[i : i + 3] == barge_in for i in range(len(kinds)))
    assert session["end_kind"] == "client_hung_up" and not session["errors"]


def test_a_fatal_error_ends_the_session_without_a_goodbye(played):
    session = played["fatal"]
    assert session["fatal"] is True and session["end_kind"] == "fatal_error" and session["failed"] is True
    (error,) = session["errors"]
    assert error["fatal"] is True and error["message"]
    assert "disconnect-bot" not in types(session)


def test_a_failing_function_call_is_an_error_and_an_apology(played):
    session = played["function_error"]
    (failed,) = [call for call in session["function_calls"] if "error" in (call["result"] or {})]
    (error,) = session["errors"]
    assert error["fatal"] is False and failed["function_name"] in error["message"]
    (function,) = [
        t.function for t in SCRIPTS["order_status"].turns if t.function and t.function.name == failed["function_name"]
    ]
    assert " ".join(function.apology) in [line["text"] for line in bot_lines(session)]
    users = [item["text"] for item in session["transcript"] if item["role"] == "user"]
    assert users[-1] == WRAP_UP.user
    assert session["fatal"] is False and session["end_kind"] == "client_hung_up" and session["failed"] is False


def test_an_abrupt_end_leaves_the_bot_gone_mid_sentence(played):
    session = played["abrupt"]
    assert "disconnect-bot" not in types(session)
    assert types(session).count("bot-started-speaking") > types(session).count("bot-stopped-speaking")
    # It went mid-sentence (1001, going away): away, and once its grace ran out, vanished.
    assert session["status"] == "ended" and session["end_kind"] == "bot_vanished" and session["failed"] is True
    assert not session["errors"] and not session["fatal"]


def test_a_glitch_is_a_non_fatal_error_with_its_own_figures(played):
    session = played["glitch"]
    (error,) = session["errors"]
    assert error["fatal"] is False and any(c.isdigit() for c in error["message"])
    assert len(session["turns"]) == len(SCRIPTS["booking"].turns) and "disconnect-bot" in types(session)


def test_a_slow_agent_answers_slower_than_a_fast_one(played):
    fast, slow = played["fast"], played["slow"]
    assert slow["latency"]["p50"] > fast["latency"]["p50"]
    assert all(turn["llm_ttfb_ms"] <= 600 for turn in fast["turns"])
    assert all(turn["llm_ttfb_ms"] >= 900 for turn in slow["turns"])


def test_usage_is_reported_per_model(played):
    fast, slow = played["fast"], played["slow"]
    assert set(fast["metrics"]["tokens"]) == {"OpenAILLMService#0|gpt-4o-mini"}
    assert set(slow["metrics"]["tokens"]) == {"AnthropicLLMService#0|claude-sonnet-4"}
    assert set(fast["metrics"]["characters"]) == {"ElevenLabsTTSService#0|eleven_flash_v2_5"}
    assert set(slow["metrics"]["characters"]) == {"CartesiaTTSService#0|sonic-2"}
    assert set(fast["metrics"]["stt_usage"]) == {"DeepgramSTTService#0|nova-3"}
    for session in (fast, slow):
        totals = session["totals"]
        assert totals["prompt_tokens"] > totals["completion_tokens"] > 0
        assert totals["characters"] > 0 and totals["stt_audio_seconds"] > 0


def test_a_seed_replays_the_same_session(played):
    def content(session):
        # Wall-clock timestamps aside: the one thing a seed cannot fix.
        return [
            {**m, "data": {k: v for k, v in m["data"].items() if k != "timestamp"}} if "data" in m else m
            for m in session["messages"]
        ]

    assert played["replay_a"]["id"] != played["replay_b"]["id"]
    assert content(played["replay_a"]) == content(played["replay_b"])


def test_an_operator_acts_on_a_demo_call_as_on_a_real_bots(server):
    """The demo bot takes the dashboard's control frames as the Pipecat integration does (README's "Act on
    the call" works in `make run`): a sent text is answered by the bot at its next turn, an end ends the call."""
    said = "An agent will call you back within ten minutes."

    async def act():
        bot = DemoBot(server.ws_url, server.token, speed=4, seed=8, agent_name="support-concierge")
        call = asyncio.ensure_future(bot.session(12, scenario="clean"))
        headers = {"Authorization": f"Bearer {server.key}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=10) as api:
            session_id = None
            for _ in range(200):  # the session's id, once its bot has connected and can be asked
                live = (await api.get("/api/sessions/", params={"status": "live"})).json()["sessions"]
                mine = [s["id"] for s in live if s["bot"] == "connected"]  # the played sessions have all ended
                if mine and (await api.get(f"/api/sessions/{mine[0]}/control/")).json()["available"]:
                    session_id = mine[0]
                    break
                await asyncio.sleep(0.05)
            assert session_id, "the demo call never became available to act on"
            sent = await api.post(f"/api/sessions/{session_id}/send-text/", json={"content": said})
            assert sent.status_code == 200, sent.text
            for _ in range(200):  # the bot answers it at its next turn
                transcript = (await api.get(f"/api/sessions/{session_id}/")).json()["transcript"]
                if any(line["role"] == "bot" and said in line["text"] for line in transcript):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the bot never said the operator's text")
            ended = await api.post(f"/api/sessions/{session_id}/end/", json={})
            assert ended.status_code == 200, ended.text
            assert await asyncio.wait_for(call, 10) == session_id  # the demo's call stops at once
            for _ in range(100):
                body = (await api.get(f"/api/sessions/{session_id}/")).json()
                if body["status"] == "ended":
                    return body
                await asyncio.sleep(0.1)
            raise AssertionError("the call did not end")

    body = asyncio.run(act())
    # The pipeline ended because an operator ended it (a script's key here): theirs, not the bot's nor the caller's.
    assert body["end_kind"] == "operator_ended" and body["end_reason"].startswith("by API key ")
    assert len([line for line in body["transcript"] if line["role"] == "user"]) < 12  # stopped before the script's end


def test_the_demos_calls_are_tagged_with_its_regions_as_a_bot_would(played, server):
    """The demo bot names its call's region on the ingest URL (`?region=`), as a real bot may: stored on the call."""
    import ast

    from rtvi_dashboard.demo import DEMO_REGIONS

    ids = sorted(body["id"] for body in played.values())
    query = (
        "from rtvi_monitor.sessions.models import Session; "
        f"print(dict(Session.objects.filter(session_id__in={ids!r}).values_list('session_id', 'region')))"
    )
    stored = ast.literal_eval(server.manage("shell", "-c", query).strip().splitlines()[-1])
    assert stored == {sid: DEMO_REGIONS[int(sid[-1], 16) % len(DEMO_REGIONS)] for sid in ids}
