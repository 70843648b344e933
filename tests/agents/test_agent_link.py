"""Which agent a session belongs to: `?agent=` by id or name, built-in or from the organization's agents API."""

from urllib.parse import urlencode

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from dashboard.asgi import application
from rtvi_monitor.sessions.models import Session
from tests.agents_samples import AGENT, BASE, KEY, URL
from tests.sockets import bot_socket, receive, rtvi, send, wrap

pytestmark = pytest.mark.usefixtures("live_path")

HELLO = rtvi("user-transcription", {"text": "hello", "final": True, "timestamp": "t", "user_id": "u"})


async def stream_one(token, agent) -> tuple[Session, list[dict]]:
    """A bot that names `agent`, sends one message and leaves: its session, and what it was told."""
    socket = bot_socket("s1", token, agent)
    assert (await socket.connect())[0]
    await send(socket, wrap(1, HELLO))
    frames = [await receive(socket)]
    if "ack" not in frames[0]:
        frames.append(await receive(socket))
    await socket.disconnect()
    return await sync_to_async(Session.objects.get)(session_id="s1"), frames


@sync_to_async
def use_pipecat_cloud(org):
    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()


async def test_a_built_in_agent_is_found_by_its_name_too(org, ingest_token, agents):
    session, frames = await stream_one(ingest_token, agents[0].name)
    assert frames == [{"ack": 1}]
    assert (session.agent_id, session.agent_key, session.agent_name) == (
        agents[0].pk,
        str(agents[0].pk),
        agents[0].name,
    )


async def test_an_agent_of_the_pipecat_cloud_list_is_linked_by_name_or_id(org, ingest_token, httpx_mock):
    await use_pipecat_cloud(org)
    httpx_mock.add_response(url=URL, json={"services": [AGENT]}, is_reusable=True)
    for given in (AGENT["name"], AGENT["id"]):
        session, frames = await stream_one(ingest_token, given)
        assert frames == [{"ack": 1}]
        assert session.agent_id is None  # no built-in row: the agents API's id is the link
        assert (session.agent_key, session.agent_name, session.deployment_id) == (
            AGENT["id"],
            AGENT["name"],
            AGENT["activeDeploymentId"],
        )
        assert session.row()["agent_id"] == AGENT["id"] and session.row()["agent_name"] == "support-bot"


async def test_an_unknown_agent_is_said_with_the_upstreams_failure(org, ingest_token, httpx_mock, fast_retries):
    await use_pipecat_cloud(org)
    httpx_mock.add_response(url=URL, status_code=401)
    session, frames = await stream_one(ingest_token, "nobody")
    assert "'nobody' is not an agent of your organization" in frames[0]["error"]
    assert "refused the key" in frames[0]["error"]  # why the list could not say
    assert frames[1] == {"ack": 1}  # recorded all the same
    assert session.agent_key == "" and session.agent_id is None


async def test_an_agent_whose_id_cannot_be_kept_or_linked_is_not_linked(org, ingest_token, httpx_mock):
    await use_pipecat_cloud(org)
    odd = {**AGENT, "id": "team/support", "name": "odd-bot"}
    httpx_mock.add_response(url=URL, json={"services": [odd]}, is_reusable=True)
    session, frames = await stream_one(ingest_token, "odd-bot")
    assert "'odd-bot' is not an agent of your organization" in frames[0]["error"] and frames[1] == {"ack": 1}
    assert session.agent_key == ""


# --- what else a bot names: its deployment, and the eval run and scenario that made the call -------------


async def stream_tagged(token, query: str) -> tuple[WebsocketCommunicator, tuple]:
    socket = WebsocketCommunicator(
        application, f"/ws/ingest/s1/?{query}", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    return socket, await socket.connect()


async def test_a_bot_under_eval_names_its_deployment_run_and_scenario_and_they_win_over_the_active_one(
    org, ingest_token, httpx_mock
):
    await use_pipecat_cloud(org)
    httpx_mock.add_response(url=URL, json={"services": [AGENT]}, is_reusable=True)
    query = urlencode(
        {"agent": AGENT["name"], "deployment": "v42-candidate", "eval_run": "ci 41", "eval_scenario": "suite/refund"}
    )
    socket, (connected, _) = await stream_tagged(ingest_token, query)
    assert connected
    await send(socket, wrap(1, HELLO))
    assert await receive(socket) == {"ack": 1}
    await socket.disconnect()
    session = await sync_to_async(Session.objects.get)(session_id="s1")
    assert (session.agent_key, session.deployment_id) == (AGENT["id"], "v42-candidate")
    assert (session.eval_run, session.eval_scenario) == ("ci 41", "suite/refund")


async def test_a_bot_with_no_tags_is_a_real_call_of_its_agents_active_deployment(org, ingest_token, httpx_mock):
    await use_pipecat_cloud(org)
    httpx_mock.add_response(url=URL, json={"services": [AGENT]}, is_reusable=True)
    session, frames = await stream_one(ingest_token, AGENT["id"])
    assert frames == [{"ack": 1}]
    assert (session.deployment_id, session.eval_run, session.eval_scenario) == (AGENT["activeDeploymentId"], "", "")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("deployment=%20", "deployment: use 1-100 characters"),
        ("deployment=v2%20", "deployment: use 1-100 characters"),
        ("eval_run=" + "x" * 101, "eval_run: use 1-100 characters"),
        ("eval_scenario=%3Cscript%3E", "eval_scenario: use 1-100 characters"),
        ("eval_run=a%0Ab", "eval_run: use"),
    ],
)
async def test_a_tag_that_breaks_the_rule_is_refused_with_the_rule_and_no_session_is_made(
    org, ingest_token, query, says
):
    socket, (connected, _) = await stream_tagged(ingest_token, query)
    assert connected  # accepted, told why, closed
    frame = await receive(socket)
    assert frame["fatal"] and says in frame["error"], frame
    assert (await socket.receive_output(timeout=3))["type"] == "websocket.close"
    assert not await sync_to_async(Session.objects.filter(session_id="s1").exists)()
