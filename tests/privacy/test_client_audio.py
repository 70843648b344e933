"""A client's sound sent as messages (RTVI raw-audio, raw-audio-batch: how Pipecat's eval harness speaks to a bot)
is never kept in a session's messages: the dashboard stores its numbers and sizes, the bot package sends no more.
A caller's voice has one home, the call's recording, which an organization opts into (rtvi_monitor/audio)."""

import base64
import json

import pytest
from asgiref.sync import sync_to_async

from rtvi_monitor.core import protocol
from rtvi_monitor.sessions.events import without_audio
from rtvi_monitor.sessions.models import Event
from tests.sockets import bot_socket, receive, rtvi, send, wrap

SOUND = base64.b64encode(bytes(range(256)) * 40).decode()  # stands for a caller's voice
RAW = rtvi("raw-audio", {"base64Audio": SOUND, "sampleRate": 16000, "numChannels": 1})
BATCH = rtvi("raw-audio-batch", {"base64AudioBatch": [SOUND, SOUND], "sampleRate": 16000, "numChannels": 1})


def test_the_sound_is_replaced_by_its_size_and_the_numbers_stay():
    kept = without_audio(protocol.check(RAW, False)).message["data"]
    assert kept == {"sampleRate": 16000, "numChannels": 1, "audio_not_stored": {"base64Audio": len(SOUND)}}
    batch = without_audio(protocol.check(BATCH, False)).message["data"]
    assert batch["audio_not_stored"] == {"base64AudioBatch": 2 * len(SOUND)}
    other = protocol.check(rtvi("send-text", {"content": "hello"}), False)
    assert without_audio(other) is other


@pytest.mark.usefixtures("live_path")
async def test_raw_audio_streamed_by_a_bot_is_stored_without_its_sound(org, ingest_token):
    socket = bot_socket("audio-1", ingest_token)
    assert (await socket.connect())[0]
    for seq, message in enumerate((RAW, BATCH), 1):
        await send(socket, wrap(seq, message, direction="from-client"))
    acked = set()
    while len(acked) < 2:
        frame = await receive(socket)
        acked.add(frame.get("ack"))
    await socket.disconnect()
    stored = await sync_to_async(lambda: list(Event.objects.values_list("message", flat=True)))()
    assert len(stored) == 2 and all(SOUND[:40] not in text for text in stored)
    assert json.loads(stored[0])["data"]["audio_not_stored"] == {"base64Audio": len(SOUND)}


def test_the_bot_package_sends_a_clients_sound_as_its_sizes_only():
    pytest.importorskip("pipecat")
    import pipecat.processors.frameworks.rtvi.models as RTVI
    from rtvi_dashboard.pipecat import _as_forwarded

    message = RTVI.Message(id="1", type="raw-audio", data={"base64Audio": SOUND, "sampleRate": 16000})
    assert _as_forwarded(message)["data"] == {"base64Audio": len(SOUND), "sampleRate": 16000}
