"""A recorded call end to end on the server: messages through the real ingest socket and router, audio over
HTTP beside them, the call ends; then what the audio says sits beside what the messages say, on the session's
API, the Overview, the agent's page and /metrics; and the organization's Recording settings switch it.
"""

import asyncio
import time

import numpy as np
import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone

from dashboard.org.models import AuditEntry, Role
from dashboard.templatetags.dashboard_format import signed_seconds
from rtvi_monitor.audio.models import SessionAudio
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.overview.figures import agent_overview
from tests.audio.test_audio import put
from tests.conftest import make_member
from tests.live.test_session_ends import ended
from tests.sockets import bot_socket, receive, rtvi, send, wrap
from tests.speech import speak

pytestmark = pytest.mark.usefixtures("live_path")


async def say(bot, seq, type_):
    at = time.time()
    await send(bot, wrap(seq, rtvi(type_), sent_at=at))
    assert await receive(bot) == {"ack": seq}
    return at


async def test_a_recorded_calls_audio_is_measured_beside_its_messages_everywhere(org, api_key, agents):
    agent_key = str(agents[0].pk)
    org.record_audio = True
    await sync_to_async(org.save)()
    token = (await sync_to_async(IngestToken.issue)(org, "bot"))[1]
    bot = bot_socket("heard-call", token, agent="support-bot")
    assert (await bot.connect())[0]
    question = speak("Hello, where is my parcel?")
    answer = speak("It arrives tomorrow morning.", voice="en-gb")
    began = time.time()
    await say(bot, 1, "user-started-speaking")
    await asyncio.sleep(len(question) / 16000)
    stopped = await say(bot, 2, "user-stopped-speaking")
    await asyncio.sleep(0.5)
    reported_start = await say(bot, 3, "bot-started-speaking")
    await say(bot, 4, "bot-stopped-speaking")
    # What the transports really carried: the caller's words end when the bot said they did; the bot's audio
    # reached the wire 300 ms after its bot-started-speaking (a slow output transport, say).
    audio_start = reported_start + 0.3
    origin = stopped - len(question) / 16000
    length = int((audio_start - origin + len(answer) / 16000 + 1.0) * 16000)
    user, heard = np.zeros(length, dtype=np.int16), np.zeros(length, dtype=np.int16)
    user[: len(question)] = question
    at = int((audio_start - origin) * 16000)
    heard[at : at + len(answer)] = answer
    client = Client()

    def upload():
        for track, samples in (("user", user), ("bot", heard)):
            assert put(token, "heard-call", track, 0, samples, start=origin, client=client).status_code == 201

    await sync_to_async(upload)()
    await bot.disconnect(code=1000)
    await ended("heard-call")
    assert began < origin + 0.1

    def check():
        # The session is marked ended, then its recording compared (audio.settle_ended, just after the commit).
        for _ in range(200):
            recording = SessionAudio.objects.get(session__session_id="heard-call")
            if recording.comparison:
                break
            time.sleep(0.05)
        (row,) = recording.comparison
        assert row["reported_seconds"] == pytest.approx(reported_start - stopped, abs=0.03)
        assert row["audio_seconds"] == pytest.approx(audio_start - stopped, abs=0.08)
        assert row["difference_seconds"] == pytest.approx(0.3, abs=0.08)
        assert recording.difference_p50 == row["difference_seconds"]

        auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
        metrics = Client().get("/metrics", **auth).content.decode()
        agent = f'agent="{agent_key}",agent_name="{agents[0].name}"'  # the id, and the name a person reads
        assert f"rtvi_audio_voice_to_voice_seconds_count{{{agent}}} 1.0" in metrics
        assert f"rtvi_audio_latency_difference_seconds_count{{{agent}}} 1.0" in metrics
        assert f'rtvi_audio_received_seconds_total{{{agent},track="user"}}' in metrics

        operator = Client()
        make_member(org, "olga", Role.OPERATOR)
        operator.login(username="olga", password="correct-horse-battery")
        panel = operator.get("/overview/panel/").content.decode()
        assert 'data-testid="audio-latency"' in panel
        assert f"({signed_seconds(recording.difference_p50)})" in panel and recording.difference_p50 > 0.2
        # The agents page and an agent's page read the same figures (agent_overview) with the same snippet.
        (figures,) = [e for e in agent_overview(org, timezone.now()) if e["agent_id"] == agent_key]
        assert figures["audio"] == {
            "calls": 1,
            "voice_to_voice_p50": recording.voice_to_voice_p50,
            "reported_p50": recording.reported_p50,
            "difference_p50": recording.difference_p50,
        }

    await sync_to_async(check)()


def test_the_recording_settings_are_an_admins_and_audited(org):
    admin, operator = Client(), Client()
    make_member(org, "ada", Role.ADMIN)
    make_member(org, "olga", Role.OPERATOR)
    admin.login(username="ada", password="correct-horse-battery")
    operator.login(username="olga", password="correct-horse-battery")
    assert operator.get("/settings/recording/").status_code == 403
    page = admin.get("/settings/recording/").content.decode()
    assert 'data-testid="recording-state">off' in page
    response = admin.post(
        "/settings/recording/",
        {"record_audio": "on", "audio_agents": "support-bot", "audio_role": "admin", "keep_audio_days": "7"},
    )
    assert response.status_code == 302
    org.refresh_from_db()
    assert (org.record_audio, org.audio_agents, org.audio_role, org.keep_audio_days) == (
        True,
        "support-bot",
        "admin",
        7.0,
    )
    assert org.records_audio_of("support-bot") == (True, "")
    assert org.records_audio_of("sales-bot")[0] is False
    entry = AuditEntry.objects.get(action="settings_changed")
    assert entry.actor == "ada" and entry.detail["record_audio"] is True
    bad = admin.post("/settings/recording/", {"audio_role": "viewer", "keep_audio_days": "-1"})
    assert bad.status_code == 400
    token = IngestToken.issue(org, "bot")[1]
    status = Client().get("/ingest/audio/x/?agent=sales-bot", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status["record"] is False and "listed" in status["why"]
