"""A recording beside what the bot's messages report: the figures a page shows of a call's audio.

`reported_turns` are the turns the messages report: the ended session's frozen ones, or, while it is
live, this process's own state when its bot is connected here (read on the event loop that holds it:
live/registry.py `Registry.read`; a view runs on another thread), else replayed from what is stored.
`comparison_of` puts the recording's turns beside them, `audio_summary` is what a page shows. Services
for the audio API (audio/views.py) and the session page (sessions/views.py, which still imports
`audio_summary` through audio/views.py: an interface module of another package, against the direction).
"""

from django.core.cache import cache

from rtvi_monitor.audio import store as audio
from rtvi_monitor.live.registry import registry
from rtvi_monitor.sessions import events
from rtvi_monitor.sessions.models import Session

REPLAY_CACHE_SECONDS = 10


def _turns_of(live) -> list[dict]:
    """A held session's turns as its state has them now: read on the event loop that holds it (registry.read)."""
    return [dict(turn) for turn in live.state.turns.items]


def reported_turns(session) -> list[dict]:
    """The turns the bot's messages report: frozen once the call ended; while it is live, this process's own
    state when its bot is connected here (read on the event loop, where the writer changes it: this runs on a
    sync view's thread), else replayed from the stored messages at most every REPLAY_CACHE_SECONDS (a page polls
    a live call's recording every few seconds: a long call's replay is not made for each poll)."""
    if session.state is not None:
        return list(session.state.get("turns") or [])
    held = registry.read(session.pk, _turns_of)
    if held is not None:
        return held
    key = f"audio-turns:{session.pk}"
    turns = cache.get(key)
    if turns is None:
        turns = list(events.load_state(session.pk)[0].to_dict().get("turns") or [])
        cache.set(key, turns, REPLAY_CACHE_SECONDS)
    return turns


def comparison_of(recording, session, analysis: dict | None = None) -> list[dict]:
    """The recording's turns beside the messages': stored once the call has ended, else made now."""
    if session.status == Session.Status.ENDED and recording.comparison:
        return recording.comparison
    if analysis is None:
        analysis = audio.current_analysis(recording, session)
    return audio.compare(analysis.get("turns", []), reported_turns(session))


def audio_summary(recording, session) -> dict:
    """The figures a page shows of a recording (a viewer's too: no sound, no words)."""
    analysis = audio.current_analysis(recording, session)
    return audio.summary(recording, comparison_of(recording, session, analysis), analysis)
