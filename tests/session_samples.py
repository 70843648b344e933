"""A stored session as a real Pipecat bot leaves it, for the API and page tests."""

import json
import time

from rtvi_monitor.sessions.models import Event, Session
from tests.sockets import rtvi

T0 = 1_750_000_000.0

CONVERSATION = [
    ("from-client", rtvi("client-ready", {"version": "2.1.0", "about": {"library": "@pipecat-ai/client-js"}})),
    ("to-client", rtvi("bot-ready", {"version": "2.1.0", "about": {"name": "support"}}, id="r1")),
    ("to-client", rtvi("user-started-speaking")),
    (
        "to-client",
        rtvi("user-transcription", {"text": "where is my", "final": False, "timestamp": "t", "user_id": "u"}),
    ),
    (
        "to-client",
        rtvi("user-transcription", {"text": "Where is my order?", "final": True, "timestamp": "t", "user_id": "u"}),
    ),
    ("to-client", rtvi("user-stopped-speaking")),
    ("to-client", rtvi("bot-llm-started")),
    ("to-client", rtvi("bot-llm-text", {"text": "It ships"})),
    ("to-client", rtvi("bot-llm-text", {"text": " today."})),
    ("to-client", rtvi("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.25}]})),
    ("to-client", rtvi("bot-tts-started")),
    ("to-client", rtvi("bot-started-speaking")),
    ("to-client", rtvi("bot-tts-text", {"text": "It ships today."})),
    ("to-client", rtvi("bot-tts-stopped")),
    ("to-client", rtvi("bot-stopped-speaking")),
    ("to-client", rtvi("bot-llm-stopped")),
    ("to-client", rtvi("error", {"error": "TTS hiccup", "fatal": False})),
]


def make_session(org, session_id="call-1", agent=None, messages=CONVERSATION, **fields):
    session = Session.objects.create(organization=org, session_id=session_id, agent=agent, **fields)
    Event.objects.bulk_create(
        Event(
            session=session,
            seq=i,
            direction=direction,
            type=message["type"],
            received_at=T0 + i * 0.5,  # user stops at seq 6 (T0+3.0), bot starts at seq 12 (T0+6.0)
            message=json.dumps(message),
        )
        for i, (direction, message) in enumerate(messages, 1)
    )
    Event.objects.create(
        session=session,
        seq=len(messages) + 1,
        direction="to-client",
        type="",
        received_at=T0 + 20,
        message="not json at all",
        valid=False,
        error="not JSON",
    )
    return session


def error_event(session, seq, text, *, fatal=False, ago=0.0, kind="error", valid=True) -> Event:
    """An `error` (or `error-response`) message stored for `session`, received `ago` seconds ago."""
    data = {"error": text, "fatal": fatal} if kind == "error" else {"error": text}
    return Event.objects.create(
        session=session,
        seq=seq,
        direction="to-client",
        type=kind,
        received_at=time.time() - ago,
        message=json.dumps({"label": "rtvi-ai", "type": kind, "id": "r1", "data": data}),
        valid=valid,
    )
