"""Uploads at once, on the real server over loopback, on SQLite and on PostgreSQL: resends of one chunk are
stored once and answered as stored, a conflicting one is refused, many chunks at once are all counted."""

import asyncio
import json
import os
import uuid

import httpx
import numpy as np
import pytest
import websockets

from tests.conftest import DATABASE_URL, reachable, skip_or_fail
from tests.server import DaphneServer
from tests.speech import speak

RUN = uuid.uuid4().hex[:8]
ENABLE = (
    "from dashboard.models import Organization; Organization.objects.filter(name={org!r}).update(record_audio=True)"
)
COUNT = (
    "from rtvi_monitor.models import AudioChunk, SessionAudio; import json; "
    "a = SessionAudio.objects.get(session__session_id={sid!r}); "
    "print(json.dumps([AudioChunk.objects.filter(session__session_id={sid!r}).count(), a.chunks, "
    "sorted(AudioChunk.objects.filter(session__session_id={sid!r}).values_list('track', 'index'))]))"
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request):
    env = {"INGEST_FLUSH_INTERVAL": "0.01"}
    if request.param == "postgresql":
        if not reachable("127.0.0.1", 5432):
            skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
        env["DATABASE_URL"] = os.getenv("TEST_DATABASE_URL", DATABASE_URL)
    org = f"audio-{request.param}-{RUN}"
    with DaphneServer(env=env) as running:
        running.token = running.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        running.manage("shell", "-c", ENABLE.format(org=org))
        yield running


async def start_session(server, session_id: str):
    socket = await websockets.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {server.token}"}
    )
    await socket.send(json.dumps({"seq": 1, "message": {"label": "rtvi-ai", "type": "bot-ready", "data": {}}}))
    assert json.loads(await socket.recv()) == {"ack": 1}
    return socket


def headers(server, start=1_764_000_000.0):
    return {"Authorization": f"Bearer {server.token}", "X-Audio-Sample-Rate": "16000", "X-Audio-Start": str(start)}


async def test_resends_at_once_store_one_chunk_and_a_conflict_changes_nothing(server):
    session_id = f"race-{uuid.uuid4().hex[:8]}"
    socket = await start_session(server, session_id)
    words = speak("Can you hear me now?").tobytes()
    other = speak("Something else entirely.").tobytes()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        url = f"/ingest/audio/{session_id}/user/0"
        answers = await asyncio.gather(
            *(client.put(url, content=words, headers=headers(server)) for _ in range(8)),
            *(client.put(url, content=other, headers=headers(server)) for _ in range(3)),
        )
    same, conflicting = answers[:8], answers[8:]
    statuses = sorted(r.status_code for r in same)
    winner_is_words = 201 in statuses
    if winner_is_words:  # the first stored was a resend of `words`: every other resend is answered as stored
        assert statuses.count(201) == 1 and set(statuses) <= {200, 201}
        assert all(r.status_code == 409 for r in conflicting)
    else:  # `other` got there first: then `words` is the conflict
        assert all(r.status_code == 409 for r in same)
        assert sorted(r.status_code for r in conflicting).count(201) == 1
    stored, counted, keys = json.loads(server.manage("shell", "-c", COUNT.format(sid=session_id)).splitlines()[-1])
    assert stored == counted == 1 and keys == [["user", 0]]
    await socket.close()


async def test_many_chunks_at_once_are_all_stored_and_counted(server):
    session_id = f"many-{uuid.uuid4().hex[:8]}"
    socket = await start_session(server, session_id)
    words = speak("One, two, three, four, five.")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.put(
                    f"/ingest/audio/{session_id}/{track}/{index}",
                    content=np.roll(words, index).tobytes(),
                    headers=headers(server, 1_764_000_000.0 + index * 5),
                )
                for track in ("user", "bot")
                for index in range(10)
            )
        )
    assert [r.status_code for r in answers] == [201] * 20, [r.text for r in answers if r.status_code != 201]
    stored, counted, keys = json.loads(server.manage("shell", "-c", COUNT.format(sid=session_id)).splitlines()[-1])
    assert stored == counted == 20 and len(keys) == 20
    await socket.close()
