"""Why a turn went wrong: rtvi_monitor/core/diagnosis.py on real bots' message streams and on generated ones
(hypothesis), and GET /api/sessions/<id>/turns/ through the real URLconf (roles, organizations)."""

import asyncio
import json
import shutil
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from rtvi_monitor.core import diagnosis as turns
from rtvi_monitor.core.reducer.turns import INTERRUPTION_MERGE_S
from rtvi_monitor.core.state import Event as StateEvent
from rtvi_monitor.core.state import replay
from rtvi_monitor.sessions.models import Event, Session, Span
from tests import rtvi_samples as samples
from tests.sockets import rtvi

LLM = samples.LLM
TTS = samples.TTS


def timed(pairs, step=0.05, start=100.0) -> list[StateEvent]:
    """(direction, message) pairs as stored events, `step` seconds apart."""
    return [StateEvent(i, d, start + i * step, m) for i, (d, m) in enumerate(pairs, 1)]


def at_times(items) -> list[StateEvent]:
    """(seconds, message) pairs as stored events at those times."""
    return [StateEvent(i, "to-client", t, m) for i, (t, m) in enumerate(items, 1)]


def ttfb(service, seconds):
    return rtvi("metrics", {"ttfb": [{**service, "value": seconds}]})


def stage(turn, name):
    return next(s for s in turn["stages"] if s["stage"] == name)


def speaking_reply(t, words=("It", "ships", "today", "and", "arrives", "Thursday.")):
    """A reply the bot starts speaking at t + 0.6: LLM at t + 0.1, its first token at t + 0.3, TTS at t + 0.4."""
    out = [
        (t + 0.1, rtvi("bot-llm-started")),
        *[(t + 0.3 + i * 0.01, rtvi("bot-llm-text", {"text": w if not i else f" {w}"})) for i, w in enumerate(words)],
        (t + 0.4, rtvi("bot-tts-started")),
        (t + 0.55, ttfb(TTS, 0.15)),
        (t + 0.6, rtvi("bot-started-speaking")),
    ]
    return out


def final(text):
    return rtvi("user-transcription", {"text": text, "final": True, "user_id": "u", "timestamp": "x"})


def without_llm(pairs):
    return [p for p in pairs if p[1]["type"] not in ("bot-llm-started", "bot-llm-text")]


def user_says(t, text, seconds=1.0):
    return [
        (t, rtvi("user-started-speaking")),
        (t + seconds - 0.05, final(text)),
        (t + seconds, rtvi("user-stopped-speaking")),
    ]


# --- real bots' streams ---------------------------------------------------------------------------


def test_a_real_pipecat_session_has_every_stage_of_every_turn_and_they_add_up_to_the_reducers_latency():
    events = timed(samples.pipecat_conversation_pairs(3))
    result = turns.diagnose(events)
    reducer = replay(events).to_dict()["turns"]
    assert len(result["turns"]) == 3 == len(reducer)
    for turn, theirs in zip(result["turns"], reducer, strict=True):
        assert turn["complete"] and turn["missing"] == [] and turn["started_by"] == "user"
        assert turn["latency_ms"] == pytest.approx(theirs["latency_ms"], abs=0.1)
        assert sum(s["ms"] for s in turn["stages"]) == pytest.approx(turn["latency_ms"], abs=0.5)
        # Pipecat's final transcription comes before its user-stopped-speaking: nothing waited for it.
        assert stage(turn, "transcription")["ms"] == 0.0
    assert result["turns"][0]["user_text"] == "Where is my order?"
    assert result["turns"][0]["bot_text"].startswith("Let me check that for you.")
    # The second turn calls a function before the LLM's first token: the stage says it includes the call.
    assert result["turns"][1]["function_calls"] == 1
    assert any("function" in note for note in result["turns"][1]["notes"])
    assert result["counts"] == {
        "turns": 3,
        "complete": 3,
        "replies": 3,
        "interruptions": 0,
        "barge_ins": 0,
        "backchannels": 0,
    }


def test_first_tts_audio_is_the_tts_start_plus_its_reported_time_to_first_byte():
    events = at_times([*user_says(10.0, "Where is it?"), *speaking_reply(11.0)])
    (turn,) = turns.diagnose(events)["turns"]
    assert turn["at"]["tts_first_audio"] == pytest.approx(11.4 + 0.15)
    assert turn["sources"]["tts_first_audio"] == "bot-tts-started + TTS ttfb"
    assert stage(turn, "tts_first_audio")["ms"] == pytest.approx(250.0)  # first token at 11.3 -> 11.55
    assert stage(turn, "bot_speaking")["ms"] == pytest.approx(50.0)
    assert turn["latency_ms"] == pytest.approx(600.0)


def test_a_barge_in_cuts_the_reply_and_says_how_much_of_it_was_spoken():
    pairs = samples.pipecat_turn("Where is my order?", ["Let me check that for you.", "It ships today."])[:-1]
    pairs = samples.barge_in_turn("Where is my order?", ["It ships today and arrives on Thursday."], 3)
    pairs += samples.pipecat_turn("No, the other one", ["Sorry.", "Which one?"])
    result = turns.diagnose(timed(pairs))
    first, second = result["turns"]
    (cut,) = first["interruptions"]
    assert cut["kind"] == "barge_in" and cut["by"] == "user" and cut["cut"]
    assert (cut["spoken_words"], cut["reply_words"], cut["spoken_share"]) == (3, 7, round(3 / 7, 3))
    assert cut["text"] == "No, the other one" and "not only acknowledgements" in cut["why"]
    assert second["user_text"] == "No, the other one" and second["complete"]
    assert result["counts"]["barge_ins"] == 1 and result["counts"]["backchannels"] == 0


def test_a_mhm_while_the_bot_speaks_is_a_backchannel_and_no_turn_of_its_own():
    events = at_times(
        [
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            (12.0, rtvi("bot-tts-text", {"text": "It ships today"})),
            *user_says(12.2, "Mhm.", seconds=0.4),
            (12.8, rtvi("bot-tts-text", {"text": "and arrives Thursday."})),
            (13.5, rtvi("bot-stopped-speaking")),
        ]
    )
    result = turns.diagnose(events)
    assert len(result["turns"]) == 1
    (interruption,) = result["turns"][0]["interruptions"]
    assert interruption["kind"] == "backchannel" and not interruption["cut"]
    assert interruption["text"] == "Mhm." and interruption["speech_ms"] == pytest.approx(400.0)
    assert interruption["why"] == "1 word, only acknowledgements"
    assert result["counts"]["backchannels"] == 1 and result["counts"]["interruptions"] == 1


def test_short_words_that_are_meant_are_a_barge_in_however_short():
    events = at_times(
        [
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            *user_says(12.0, "Wait!", seconds=0.3),
            (12.35, rtvi("bot-stopped-speaking")),
        ]
    )
    result = turns.diagnose(events)
    (interruption,) = result["turns"][0]["interruptions"]
    assert interruption["kind"] == "barge_in" and interruption["cut"]
    assert len(result["turns"]) == 2  # "Wait!" is the user's turn, waiting for its answer


def test_untranscribed_speech_is_a_backchannel_under_the_configured_length():
    def stream(seconds):
        return at_times(
            [
                *user_says(10.0, "Where is my order?"),
                *speaking_reply(11.0),
                (12.0, rtvi("user-started-speaking")),
                (12.0 + seconds, rtvi("user-stopped-speaking")),
                (14.0, rtvi("bot-stopped-speaking")),
            ]
        )

    short = turns.diagnose(stream(0.3))["turns"][0]["interruptions"][0]
    assert short["kind"] == "backchannel" and short["why"] == "no transcription; spoke 300 ms (under 800 ms)"
    long = turns.diagnose(stream(1.5))["turns"][0]["interruptions"][0]
    assert long["kind"] == "barge_in" and long["why"].startswith("no transcription; spoke 1500 ms (at least")
    stricter = turns.diagnose(stream(0.3), backchannel_seconds=0.2)["turns"][0]["interruptions"][0]
    assert stricter["kind"] == "barge_in"


def test_the_bot_marking_a_backchannel_is_taken_at_its_word():
    events = at_times(
        [
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            (12.0, rtvi("user-input", {"text": "right, right", "input_type": "backchannel"})),
            (14.0, rtvi("bot-stopped-speaking")),
        ]
    )
    (interruption,) = turns.diagnose(events)["turns"][0]["interruptions"]
    assert interruption["kind"] == "backchannel" and interruption["why"] == "the bot marked it a backchannel"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mhm.", True),
        ("uh-huh", True),
        ("Yeah, okay.", True),
        ("I see", True),
        ("got it, thanks", False),
        ("ok ok ok ok", False),
        ("wait", False),
        ("it", False),
        ("yeah but no", False),
        ("", False),
    ],
)
def test_acknowledgements(text, expected):
    assert turns.is_acknowledgement(text) is expected


def test_a_bot_without_llm_events_names_the_missing_stages_and_why():
    pairs = without_llm(samples.pipecat_conversation_pairs(1))
    (turn,) = turns.diagnose(timed(pairs))["turns"]
    assert not turn["complete"] and turn["latency_ms"] is not None
    missing = {m["stage"]: m["why"] for m in turn["missing"]}
    assert set(missing) == {"llm_start", "llm_first_token", "tts_first_audio"}
    assert "bot_llm_enabled" in missing["llm_start"]
    assert stage(turn, "llm_start")["ms"] is None and stage(turn, "bot_speaking")["ms"] is not None


def test_a_greeting_is_a_turn_started_by_the_bot():
    events = at_times([*speaking_reply(1.0), (3.0, rtvi("bot-stopped-speaking")), *user_says(4.0, "Hi")])
    first, second = turns.diagnose(events)["turns"]
    assert first["started_by"] == "bot" and first["latency_ms"] is None and not first["complete"]
    assert {m["stage"]: m["why"] for m in first["missing"]} == {
        "transcription": "no user-stopped-speaking: the turn was started by the bot",
        "llm_start": "no user-stopped-speaking: the turn was started by the bot",
    }
    assert stage(first, "llm_first_token")["ms"] == pytest.approx(200.0)
    assert second["started_by"] == "user"
    # A greeting has no user to wait for: the agent's figures do not count those stages as missing.
    assert not stage(first, "transcription")["applies"] and stage(first, "llm_first_token")["applies"]
    assert turns.summary([first])["missing"] == dict.fromkeys(turns.STAGE_NAMES, 0)


def test_a_reply_cancelled_by_more_speech_says_so_and_a_live_turn_says_not_yet():
    events = at_times(
        [
            *user_says(10.0, "Where is"),
            (11.1, rtvi("bot-llm-started")),
            *user_says(11.3, "my order from Tuesday?"),
        ]
    )
    first, second = turns.diagnose(events, live=True)["turns"]
    assert "the user spoke again before the bot answered" in stage(first, "llm_first_token")["problem"]
    assert stage(second, "llm_start")["problem"] == "not yet: no bot-llm-started so far"
    assert second["in_progress"] and not first["in_progress"]


def test_a_stage_out_of_order_is_flagged_never_negative():
    events = at_times(
        [
            (10.0, rtvi("user-started-speaking")),
            (10.5, rtvi("bot-llm-started")),  # the LLM ran on an interim transcript, before the user stopped
            (10.9, final("Hi there")),
            (11.0, rtvi("user-stopped-speaking")),
            (11.2, rtvi("bot-llm-text", {"text": "Hello"})),
            (11.3, rtvi("bot-tts-started")),
            (11.4, rtvi("bot-started-speaking")),
        ]
    )
    (turn,) = turns.diagnose(events)["turns"]
    llm_start = stage(turn, "llm_start")
    assert llm_start["ms"] is None
    assert llm_start["problem"] == "out of order: the LLM started came 500 ms before the user's turn ended"
    assert not turn["complete"] and turn["latency_ms"] == pytest.approx(400.0)


def test_text_sent_starts_a_turn_measured_from_the_text():
    events = [
        StateEvent(1, "from-client", 10.0, rtvi("send-text", {"content": "Cancel it"}, id="s1")),
        StateEvent(
            2, "to-client", 10.05, rtvi("user-input", {"text": "Cancel it", "input_type": "chat", "msg_id": "s1"})
        ),
        *[StateEvent(3 + i, "to-client", t, m) for i, (t, m) in enumerate(speaking_reply(10.0))],
    ]
    (turn,) = turns.diagnose(events)["turns"]
    assert turn["started_by"] == "text" and turn["user_text"] == "Cancel it"
    assert turn["latency_ms"] == pytest.approx(600.0) and stage(turn, "llm_start")["ms"] == pytest.approx(100.0)
    problem = stage(turn, "transcription")["problem"]
    assert problem == "no speech: the turn was started by text the client sent (send-text)"


def test_spans_fill_the_stages_the_messages_leave_out():
    events = at_times(
        [
            *user_says(10.0, "Where is it?"),
            (11.4, rtvi("bot-tts-started")),
            (11.6, rtvi("bot-started-speaking")),
        ]
    )
    traces = {
        "spans": 3,
        "turns": [
            {
                "turn_number": 1,
                "start": 9.9,
                "duration_ms": 3000.0,
                "interrupted": False,
                "user_bot_latency_ms": 600.0,
                "spans": [{"name": "llm", "start_ms": 1200.0, "duration_ms": 500.0, "ttfb_ms": 150.0}],
            }
        ],
    }
    without = turns.diagnose(events)["turns"][0]
    assert stage(without, "llm_start")["ms"] is None
    (turn,) = turns.diagnose(events, traces)["turns"]
    assert turn["sources"]["llm_started"] == "span" and turn["trace_turn"] == 1
    assert stage(turn, "llm_start")["ms"] == pytest.approx(100.0)  # 9.9 + 1.2 = 11.1, the user stopped at 11.0
    assert stage(turn, "llm_first_token")["ms"] == pytest.approx(150.0)
    assert turn["complete"]


def test_aggregate_rates_are_per_spoken_reply_and_percentiles_over_every_turn():
    a = turns.diagnose(timed(samples.pipecat_conversation_pairs(3)))
    b = turns.diagnose(timed(samples.barge_in_turn("Hi", ["It ships today and arrives on Thursday."], 2)))
    figures = turns.aggregate([turns.summary(a["turns"]), turns.summary(b["turns"])])
    # The barge-in's speech is a turn of its own (unanswered): 5 turns, 4 of them replies the bot spoke.
    assert figures["sessions"] == 2 and figures["replies"] == 4 and figures["turns"] == 5
    assert figures["interruption_rate"] == 0.25 and figures["barge_in_rate"] == 0.25
    assert figures["backchannel_rate"] == 0.0
    latencies = sorted(t["latency_ms"] for t in a["turns"] + b["turns"] if t["latency_ms"] is not None)
    assert figures["latency"]["p50"] == latencies[2] and figures["latency"]["n"] == 4
    assert [s["stage"] for s in figures["stages"]] == list(turns.STAGE_NAMES)
    assert turns.aggregate([])["interruption_rate"] is None


def test_without_words_keeps_the_timings_only():
    result = turns.diagnose(timed(samples.barge_in_turn("Hi", ["It ships today and arrives on Thursday."], 2)))
    bare = turns.without_words(result)
    assert bare["turns"][0]["user_text"] is None and bare["turns"][0]["bot_text"] is None
    assert "Thursday" not in json.dumps(bare) and "Hi" not in json.dumps(bare["turns"])
    assert bare["turns"][0]["stages"] == result["turns"][0]["stages"]


# --- Pipecat 1.4+: the raw voice activity beside the user turns ------------------------------------

VAD_START, VAD_STOP = "vad-user-started-speaking", "vad-user-stopped-speaking"


def with_voice_activity(pairs):
    """A stream as Pipecat 1.4+ sends it: the raw voice activity around each user turn (its start just before
    user-started-speaking, its end just before user-stopped-speaking)."""
    out = []
    for direction, message in pairs:
        if message["type"] == "user-started-speaking":
            out.append(("to-client", rtvi(VAD_START)))
        elif message["type"] == "user-stopped-speaking":
            out.append(("to-client", rtvi(VAD_STOP)))
        out.append((direction, message))
    return out


def heard(text):
    """A final transcription as Pipecat 1.14 sends it: user-input, then user-transcription."""
    data = {"text": text, "input_type": "transcription", "final": True, "user_id": "u", "timestamp": "x"}
    return [("to-client", rtvi("user-input", data)), ("to-client", final(text))]


def voice_only(text="Mhm."):
    """A caller's word the bot's turn strategy lets pass: voice activity and its transcription, no user turn."""
    return [("to-client", rtvi(VAD_START)), *(heard(text) if text is not None else []), ("to-client", rtvi(VAD_STOP))]


# What a caller may say over the bot that the bot speaks on through (None: no transcription came).
VOICE_TEXTS = [None, "Mhm.", "Uh-huh.", "yeah ok", "wait", "no, stop", "Where is my order?", "", "I see"]


def inserted(events, index, pairs):
    """`events` with `pairs` put before events[index], at its time (the others keep theirs); seqs renumbered."""
    at = events[index].received_at if index < len(events) else events[-1].received_at
    added = [StateEvent(0, direction, at, message) for direction, message in pairs]
    merged = [*events[:index], *added, *events[index:]]
    return [StateEvent(i, e.direction, e.received_at, e.message) for i, e in enumerate(merged, 1)]


def speaking_spans(events):
    """(index of bot-started-speaking, index of its bot-stopped-speaking) of each reply."""
    spans, began = [], None
    for i, event in enumerate(events):
        if event.message["type"] == "bot-started-speaking" and began is None:
            began = i
        elif event.message["type"] == "bot-stopped-speaking" and began is not None:
            spans.append((began, i))
            began = None
    return spans


def timings(result):
    """What a backchannel must leave alone: each turn's milestones, stages, latency and words."""
    return [
        (t["started_by"], t["at"], t["stages"], t["latency_ms"], t["user_text"], t["bot_text"], t["complete"])
        for t in result["turns"]
    ]


def modern_conversation(turns_count=2):
    return timed(with_voice_activity(samples.pipecat_conversation_pairs(turns_count, word_timestamps=True)))


def test_a_mhm_over_a_pipecat_1_14_bot_that_speaks_on_is_a_backchannel_and_changes_no_turn():
    events = modern_conversation(2)
    began, ended = speaking_spans(events)[0]
    assert began + 4 < ended
    with_mhm = inserted(events, began + 4, voice_only("Mhm."))
    kinds = [e.message["type"] for e in with_mhm]
    # As Pipecat 1.14 sends it under a minimum-words interruption strategy: no user turn, the bot speaks on.
    mhm = kinds.index(VAD_START, began)
    assert kinds[mhm : mhm + 4] == [VAD_START, "user-input", "user-transcription", VAD_STOP]
    assert kinds.index("bot-stopped-speaking", mhm) < kinds.index("user-started-speaking", mhm)

    before, after = turns.diagnose(events), turns.diagnose(with_mhm)
    assert len(after["turns"]) == len(before["turns"]) == 2
    assert timings(after) == timings(before)  # no turn, no cut, no stage moved
    (backchannel,) = after["turns"][0]["interruptions"]
    assert backchannel["kind"] == "backchannel" and backchannel["by"] == "user" and not backchannel["cut"]
    assert backchannel["why"] == "the bot spoke on: its turn strategy did not take it as a turn" == turns.VOICE_WHY
    assert backchannel["text"] == "Mhm." and backchannel["decided"]
    assert backchannel["speech_ms"] == pytest.approx(0.0)  # all of it at one instant, as inserted
    assert 0 < backchannel["spoken_words"] < backchannel["reply_words"]
    assert after["turns"][1]["interruptions"] == [] and after["turns"][1]["user_text"] == "Can you look it up?"
    assert after["counts"] == {**before["counts"], "interruptions": 1, "backchannels": 1}


def test_any_words_the_bot_speaks_on_through_are_a_backchannel_whatever_they_say():
    events = at_times(
        [
            (10.0, rtvi(VAD_START)),
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            (12.0, rtvi(VAD_START)),
            (12.6, rtvi(VAD_STOP)),
            (12.9, final("I'm listening, go on")),  # its final comes after the voice activity, shortly
            (14.0, rtvi("bot-stopped-speaking")),
        ]
    )
    result = turns.diagnose(events)
    (turn,) = result["turns"]
    (backchannel,) = turn["interruptions"]
    assert backchannel["kind"] == "backchannel" and backchannel["text"] == "I'm listening, go on"
    assert backchannel["speech_ms"] == pytest.approx(600.0) and turn["latency_ms"] == pytest.approx(600.0)
    assert turn["user_text"] == "Where is my order?"


def test_a_late_final_while_the_bot_still_speaks_on_is_the_backchannels():
    events = at_times(
        [
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            (12.0, rtvi(VAD_START)),
            (12.3, rtvi(VAD_STOP)),
            (14.0, final("Okay.")),  # the STT was slow; the bot still speaks the same reply
            (15.0, rtvi("bot-stopped-speaking")),
        ]
    )
    result = turns.diagnose(events)
    assert len(result["turns"]) == 1
    (backchannel,) = result["turns"][0]["interruptions"]
    assert backchannel["text"] == "Okay." and backchannel["kind"] == "backchannel"


def test_the_same_mhm_from_an_older_bot_without_voice_activity_is_judged_as_before():
    # Pipecat before 1.4: no vad-* messages; its "mhm" over the bot is a user turn start the words judge.
    events = timed(samples.pipecat_conversation_pairs(2, word_timestamps=True))
    began, _ = speaking_spans(events)[0]
    old_mhm = [
        ("to-client", rtvi("user-started-speaking")),
        *heard("Mhm."),
        ("to-client", rtvi("user-stopped-speaking")),
    ]
    result = turns.diagnose(inserted(events, began + 4, old_mhm))
    assert len(result["turns"]) == 2
    (backchannel,) = result["turns"][0]["interruptions"]
    assert backchannel["kind"] == "backchannel" and backchannel["why"] == "1 word, only acknowledgements"
    assert backchannel["text"] == "Mhm." and not backchannel["cut"]
    assert result["counts"]["backchannels"] == 1 and result["counts"]["barge_ins"] == 0
    # The user's next turn is their own, not the "mhm" going on (it was read so: "Mhm. Can you look it up?",
    # a barge-in of 6 words, and a pause noted in the next turn).
    assert result["turns"][1]["user_text"] == "Can you look it up?"
    assert not any("paused" in note for note in result["turns"][1]["notes"])


@pytest.mark.parametrize("order", ["turn_first", "words_first", "after_the_voice"])
def test_voice_activity_the_bot_takes_as_a_turn_is_that_turns_interruption_as_before(order):
    """A barge-in from a Pipecat 1.14 bot: the strategy takes the speech as soon as it starts (VAD), or on its
    words (minimum words: the transcription first), even once the voice activity is over."""
    taken = [("to-client", rtvi("user-started-speaking")), ("to-client", rtvi("bot-interrupted"))]
    stop = [("to-client", rtvi("bot-stopped-speaking"))]
    words, vad_stop = heard("No, the other one"), [("to-client", rtvi(VAD_STOP))]
    speech = {
        "turn_first": [*taken, *stop],
        "words_first": [*words, *taken, *stop],
        "after_the_voice": [*words, *vad_stop, *taken, *stop],
    }[order]
    cut_reply = samples.barge_in_turn("Where is my order?", ["It ships today and arrives on Thursday."], 3)[:-3]
    pairs = [*with_voice_activity(cut_reply), ("to-client", rtvi(VAD_START)), *speech]
    # The rest of the user's turn, as Pipecat goes on with it (its start was just sent).
    pairs += with_voice_activity(samples.pipecat_turn("No, the other one", ["Sorry.", "Which one?"])[2:])
    result = turns.diagnose(timed(pairs))
    first, second = result["turns"]
    (cut,) = first["interruptions"]
    assert cut["kind"] == "barge_in" and cut["cut"] and cut["text"] == "No, the other one"
    assert cut["why"] == "4 words, not only acknowledgements" and cut["spoken_words"] == 3
    assert second["user_text"] == "No, the other one" and second["complete"]
    assert result["counts"]["backchannels"] == 0 and result["counts"]["barge_ins"] == 1


def test_voice_activity_under_way_in_a_live_session_is_a_backchannel_not_yet_decided():
    events = at_times([*user_says(10.0, "Where is my order?"), *speaking_reply(11.0), (12.0, rtvi(VAD_START))])
    (interruption,) = turns.diagnose(events, live=True)["turns"][0]["interruptions"]
    assert interruption["kind"] == "backchannel" and not interruption["decided"]
    (ended,) = turns.diagnose(events)["turns"][0]["interruptions"]
    assert ended["decided"] and ended["speech_ms"] is None


def test_a_backchannel_the_bot_marks_during_voice_activity_is_one_backchannel():
    events = at_times(
        [
            *user_says(10.0, "Where is my order?"),
            *speaking_reply(11.0),
            (12.0, rtvi(VAD_START)),
            (12.3, rtvi("user-input", {"text": "mhm", "input_type": "backchannel"})),
            (12.4, rtvi(VAD_STOP)),
            (14.0, rtvi("bot-stopped-speaking")),
        ]
    )
    (interruption,) = turns.diagnose(events)["turns"][0]["interruptions"]
    assert interruption["why"] == "the bot marked it a backchannel" and interruption["text"] == "mhm"


# --- generated streams ------------------------------------------------------------------------------

TEXTS = st.sampled_from(["mhm", "Uh-huh.", "yeah ok", "wait", "no, stop", "Where is my order?", "", "I see"])
PROCESSORS = st.sampled_from(["OpenAILLMService#0", "CartesiaTTSService#0", "DeepgramSTTService#0", None])


@st.composite
def messages(draw):
    kind = draw(
        st.sampled_from(
            [
                "user-started-speaking",
                "user-stopped-speaking",
                VAD_START,
                VAD_STOP,
                "user-transcription",
                "user-input",
                "send-text",
                "bot-llm-started",
                "bot-llm-text",
                "llm-raw-text",
                "bot-tts-started",
                "bot-tts-text",
                "bot-started-speaking",
                "bot-stopped-speaking",
                "bot-interrupted",
                "bot-output",
                "bot-transcription",
                "metrics",
                "llm-function-call-started",
                "llm-function-call-in-progress",
                "error",
            ]
        )
    )
    text = draw(TEXTS)
    data = {
        "user-transcription": {"text": text, "final": draw(st.booleans())},
        "user-input": {
            "text": text,
            "input_type": draw(st.sampled_from(["transcription", "chat", "backchannel", None])),
            "final": draw(st.booleans()),
            "msg_id": draw(st.sampled_from(["s1", "s2", None])),
        },
        "send-text": {"content": text},
        "bot-llm-text": {"text": text},
        "llm-raw-text": {"text": text},
        "bot-tts-text": {"text": text},
        "bot-transcription": {"text": text},
        "bot-output": {
            "text": text,
            "segment_id": draw(st.integers(0, 4)),
            "spoken_status": draw(st.sampled_from(["new", "in-progress", "completed"])),
            "spoken_progress": {"accumulated_text": text[: draw(st.integers(0, 10))]},
        },
        "metrics": {"ttfb": [{"processor": draw(PROCESSORS), "value": draw(st.floats(0, 3))}]},
        "error": {"error": "x", "fatal": False},
    }.get(kind)
    envelope = {"id": draw(st.sampled_from(["s1", "s2"]))} if kind == "send-text" else {}
    direction = "from-client" if kind == "send-text" else "to-client"
    return direction, rtvi(kind, data, **envelope)


@st.composite
def streams(draw):
    pairs = draw(st.lists(messages(), max_size=60))
    t = 100.0
    events = []
    for seq, (direction, message) in enumerate(pairs, 1):
        t += draw(st.sampled_from([0.0, 0.01, 0.2, 0.9, 2.5, -0.3]))  # clocks of batched, resent, skewed messages
        events.append(StateEvent(seq, direction, t, message))
    return events


@st.composite
def damaged_sessions(draw):
    """Real Pipecat turns (some cut off by the user, some with a "mhm" over them, as a user turn or, Pipecat
    1.4+, as voice activity only) with messages lost and clocks skewed at random: complete turns beside ones
    missing stages."""
    pairs = []
    for i in range(draw(st.integers(1, 4))):
        user, sentences = samples.SCRIPT[i % len(samples.SCRIPT)]
        shape = draw(st.sampled_from(["plain", "barge_in", "backchannel", "voice", "words"]))
        if shape == "barge_in":
            pairs += samples.barge_in_turn(user, sentences, draw(st.integers(0, 3)))
        else:
            turn = samples.pipecat_turn(user, sentences, word_timestamps=shape == "words", function_call=i == 1)
            if shape == "backchannel":
                at = draw(st.integers(0, len(turn)))
                mhm = [
                    ("to-client", rtvi("user-started-speaking")),
                    ("to-client", final(draw(TEXTS))),
                    ("to-client", rtvi("user-stopped-speaking")),
                ]
                turn = turn[:at] + mhm + turn[at:]
            elif shape == "voice":
                turn = with_voice_activity(turn)
                at = draw(st.integers(0, len(turn)))
                turn = turn[:at] + voice_only(draw(st.sampled_from(VOICE_TEXTS))) + turn[at:]
            pairs += turn
    kept = [pair for pair in pairs if not draw(st.integers(0, 9)) == 0] if draw(st.booleans()) else pairs
    t = 100.0
    events = []
    for seq, (direction, message) in enumerate(kept, 1):
        t += draw(st.sampled_from([0.0, 0.02, 0.05, 0.3, 1.1, -0.2]))
        events.append(StateEvent(seq, direction, t, message))
    return events


def check(result: dict, events: list) -> None:
    json.dumps(result, allow_nan=False)  # strict JSON, as the API sends it
    assert len(result["turns"]) <= len(events)
    interruptions = 0
    for turn in result["turns"]:
        measured = []
        for entry in turn["stages"]:
            # Every stage is measured (never negative) or names its problem; never both.
            assert (entry["ms"] is None) != (entry["problem"] is None)
            if entry["ms"] is not None:
                assert entry["ms"] >= 0
                measured.append(entry["ms"])
            else:
                assert entry["problem"].strip()
        # A turn is complete, or names each stage it misses and why.
        assert turn["complete"] == (not turn["missing"]) == (len(measured) == len(turns.STAGES))
        assert {m["stage"] for m in turn["missing"]} <= set(turns.STAGE_NAMES)
        assert all(m["why"] for m in turn["missing"])
        if turn["complete"]:
            # Monotonic: the stages add up to the whole wait, the user's stop to the bot's first word.
            assert turn["started_by"] == "user"
            assert sum(measured) == pytest.approx(turn["latency_ms"], abs=0.5)
        if turn["latency_ms"] is not None:
            assert turn["latency_ms"] >= 0
        for interruption in turn["interruptions"]:
            interruptions += 1
            assert interruption["kind"] in ("barge_in", "backchannel") and interruption["why"]
            if interruption["spoken_share"] is not None:
                assert 0 <= interruption["spoken_share"] <= 1
                assert interruption["spoken_words"] <= interruption["reply_words"]
    # Barge-ins and backchannels partition the interruptions.
    counts = result["counts"]
    assert counts["barge_ins"] + counts["backchannels"] == counts["interruptions"] == interruptions
    assert counts["complete"] == sum(t["complete"] for t in result["turns"])


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.booleans(), st.floats(0.1, 3.0), st.integers(1, 5))
def test_generated_streams_keep_the_invariants(events, live, seconds, most):
    result = turns.diagnose(events, live=live, backchannel_seconds=seconds, backchannel_words=most)
    check(result, events)
    figures = turns.aggregate([turns.summary(result["turns"])])
    assert figures["barge_ins"] + figures["backchannels"] == figures["interruptions"]
    for entry in figures["stages"]:
        assert entry["p50"] is None or entry["p50"] <= entry["p95"]


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_sessions(), st.booleans())
def test_damaged_real_sessions_keep_the_invariants(events, live):
    check(turns.diagnose(events, live=live), events)


@hsettings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(0, 8), st.booleans())
def test_generated_barge_ins_into_real_turns_keep_the_invariants(turns_before, said, legacy):
    pairs = samples.pipecat_conversation_pairs(turns_before)
    sentence = "It ships today and arrives on Thursday before noon."
    pairs += samples.barge_in_turn("Hmm wait", [sentence], min(said, 8), legacy_client=legacy)
    pairs += samples.pipecat_turn("Hmm wait", ["Sure."])
    events = timed(pairs)
    result = turns.diagnose(events)
    check(result, events)
    cut = [i for t in result["turns"] for i in t["interruptions"]]
    assert len(cut) == 1 and cut[0]["cut"] and cut[0]["kind"] == "barge_in"
    # A current bot's bot-output says its first word is spoken as it starts speaking; a 1.x client's words
    # come one by one.
    spoken = min(said, 8) if legacy else max(min(said, 8), 1)
    assert cut[0]["spoken_words"] == spoken and cut[0]["reply_words"] == len(sentence.split())


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(1, 4), st.booleans())
def test_voice_only_speech_over_the_bot_never_adds_a_turn_nor_moves_a_stage(data, count, words):
    """Pipecat 1.4+ sessions (voice activity around every user turn) with words the bot spoke on through put
    over some of its replies, anywhere in them: the same turns, each such word one more backchannel."""
    events = timed(with_voice_activity(samples.pipecat_conversation_pairs(count, word_timestamps=words)))
    before = turns.diagnose(events)
    spans = speaking_spans(events)
    over = data.draw(st.lists(st.integers(0, len(spans) - 1), min_size=1, max_size=len(spans), unique=True))
    for k in sorted(over, reverse=True):  # the last first: the earlier indices stay where they were
        began, ended = spans[k]
        events = inserted(
            events, data.draw(st.integers(began + 1, ended)), voice_only(data.draw(st.sampled_from(VOICE_TEXTS)))
        )
    after = turns.diagnose(events)
    check(after, events)
    assert timings(after) == timings(before)
    added = [i for t in after["turns"] for i in t["interruptions"] if i["why"] == turns.VOICE_WHY]
    assert len(added) == len(over) and all(i["kind"] == "backchannel" and not i["cut"] for i in added)
    assert after["counts"] == {
        **before["counts"],
        "interruptions": before["counts"]["interruptions"] + len(over),
        "backchannels": before["counts"]["backchannels"] + len(over),
    }


# --- one interruption rule, the reducer's and the diagnosis' (core/reducer/turns.py, told_again) ----------


@st.composite
def speech_over_the_bot(draw):
    """Both sides speaking (each side's starts and stops in turn, as a bot sends them) and bot-interrupted
    anywhere, at gaps on either side of the merge window, clocks sometimes skewed back."""
    speaking = {"user": False, "bot": False}
    t, events = 100.0, []
    for seq in range(1, draw(st.integers(1, 40)) + 1):
        kind = draw(st.sampled_from(["user", "bot", "bot-interrupted"]))
        if kind == "bot-interrupted":
            message = rtvi("bot-interrupted")
        else:
            message = rtvi(f"{kind}-{'stopped' if speaking[kind] else 'started'}-speaking")
            speaking[kind] = not speaking[kind]
        t += draw(st.sampled_from([0.0, 0.05, 0.5, 0.95, 0.999, 1.0, 1.05, 2.0, -0.3]))
        events.append(StateEvent(seq, "to-client", t, message))
    return events


@hsettings(max_examples=400, deadline=None)
@given(speech_over_the_bot())
def test_the_reducer_and_the_diagnosis_find_the_same_interruptions(events):
    """The live state's interruptions are the diagnosis' (which also has what the reducer does not read:
    backchannels the bot marks, voice activity it does not take)."""
    reducer = replay(events).interruptions
    diagnosed = [i["at"] for turn in turns.diagnose(events)["turns"] for i in turn["interruptions"]]
    assert sorted(diagnosed) == sorted(reducer)


@pytest.mark.parametrize(
    "after, interruptions",
    [(0.02, 1), (0.5, 1), (INTERRUPTION_MERGE_S - 0.001, 1), (INTERRUPTION_MERGE_S, 2), (1.5, 2), (-0.5, 1), (-1.5, 2)],
)
def test_a_bot_interrupted_within_the_merge_window_of_the_users_speech_is_that_interruption(after, interruptions):
    """Pipecat's bot-interrupted just after the user's speech cut the bot off tells of that cut; later, the
    client's own. Either way, the reducer and the diagnosis say the same."""
    events = at_times(
        [
            (10.0, rtvi("bot-started-speaking")),
            (11.0, rtvi("user-started-speaking")),
            (11.0 + after, rtvi("bot-interrupted")),
            (13.0, rtvi("bot-stopped-speaking")),
        ]
    )
    assert len(replay(events).interruptions) == interruptions
    assert turns.diagnose(events)["counts"]["interruptions"] == interruptions


# --- the demo bot's backchannel call (rtvi_dashboard.demo), through the reducer and the diagnosis ----------


def demo_call(scenario: str, script: str, seed: int, *, turns_count: int | None = None, tape=None, speed=1000.0):
    """A demo bot's call played in this process: (wall-clock time, direction, message) as it sent them."""
    import random

    from rtvi_dashboard import demo

    sent = []

    def send(message, direction="to-client"):
        sent.append((time.time(), direction, message))

    chosen = demo.SCRIPTS[script]
    call = demo._Call(send, random.Random(seed), speed, demo.persona_for(None), chosen, scenario, tape)
    return call, sent, turns_count or len(chosen.turns)


def aside_of(kinds: list[str]) -> range:
    """Where the caller's backchannel is in a call's messages: its voice activity, start to end."""
    start = kinds.index(VAD_START)
    return range(start, kinds.index(VAD_STOP, start) + 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_demos_backchannel_call_shows_no_interruption_and_the_same_turns(seed):
    from rtvi_dashboard.demo import BACKCHANNELS, SCENARIOS, SCRIPTS

    from rtvi_monitor.core.protocol import validate

    assert sum(SCENARIOS.values()) == pytest.approx(1) and SCENARIOS["backchannel"] > 0
    call, sent, count = demo_call("backchannel", "order_status", seed)
    asyncio.run(call.play(count))
    pairs = [(direction, message) for _, direction, message in sent]
    assert all(validate(message).valid for _, message in pairs)
    kinds = [message["type"] for _, message in pairs]
    aside = aside_of(kinds)
    assert kinds.count(VAD_START) == kinds.count(VAD_STOP) == 1
    # Midway through a reply, as Pipecat 1.14 reports a word its minimum-words strategy lets pass: voice
    # activity and a final transcription, no user turn, no interruption; the bot speaks on to its end.
    began = max(i for i in range(aside.start) if kinds[i] == "bot-started-speaking")
    ended = kinds.index("bot-stopped-speaking", aside.start)
    assert began < aside.start and aside.stop <= ended
    assert "bot-tts-text" in kinds[began : aside.start] and "bot-tts-text" in kinds[aside.stop : ended]
    between = kinds[aside.start : ended]
    assert not {"user-started-speaking", "user-stopped-speaking", "bot-interrupted"} & set(between)
    said = [m["data"] for _, m in pairs[aside.start : aside.stop] if m["type"] in ("user-input", "user-transcription")]
    assert len(said) == 2 and said[0]["text"] in BACKCHANNELS and all(d["final"] for d in said)

    events = timed(pairs)
    without = [e for i, e in enumerate(events) if i not in aside]  # the same call, had the caller kept quiet
    state, quiet = replay(events).to_dict(), replay(without).to_dict()
    assert state["interruptions"] == quiet["interruptions"] == []
    assert len(state["turns"]) == len(quiet["turns"]) == len(SCRIPTS["order_status"].turns)
    assert [t["latency_ms"] for t in state["turns"]] == [t["latency_ms"] for t in quiet["turns"]]
    assert not any(t["interrupted"] for t in state["turns"])
    # The transcript: the bot's reply whole and once, still its turn's; the caller's word after it.
    bot_lines = [(t["text"], t["turn"], t["interrupted"]) for t in state["transcript"] if t["role"] == "bot"]
    assert bot_lines == [(t["text"], t["turn"], t["interrupted"]) for t in quiet["transcript"] if t["role"] == "bot"]
    users = [t["text"] for t in state["transcript"] if t["role"] == "user"]
    quiet_users = [t["text"] for t in quiet["transcript"] if t["role"] == "user"]
    assert len(users) == len(quiet_users) + 1 and said[0]["text"] in users

    diagnosis, undisturbed = turns.diagnose(events), turns.diagnose(without)
    assert timings(diagnosis) == timings(undisturbed)
    (backchannel,) = [i for t in diagnosis["turns"] for i in t["interruptions"]]
    assert backchannel["kind"] == "backchannel" and backchannel["text"] == said[0]["text"]
    assert backchannel["why"] == turns.VOICE_WHY and not backchannel["cut"]
    assert diagnosis["counts"] == {**undisturbed["counts"], "interruptions": 1, "backchannels": 1}


async def test_the_demos_backchannel_lies_on_the_callers_track_where_its_voice_activity_says():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    from array import array

    from rtvi_dashboard.demo import AUDIO_RATE, Tape

    class Uploader:
        def __init__(self):
            self.chunks = {"user": [], "bot": []}

        def submit(self, track, pcm, rate, at):
            self.chunks[track].append((at, array("h", pcm)))

    uploader = Uploader()
    tape = Tape(uploader, chunk_seconds=60)
    call, sent, _ = demo_call("backchannel", "booking", 4, tape=tape, speed=4.0)
    await call.play(1)  # one turn: the backchannel is in its reply
    await tape.finish()
    kinds = [message["type"] for _, _, message in sent]
    aside = aside_of(kinds)
    start, stop = sent[aside.start][0] - tape.origin, sent[aside.stop - 1][0] - tape.origin
    user_spans = [(start, stop)]
    for i, kind in enumerate(kinds):
        if kind == "user-started-speaking":
            end = kinds.index("user-stopped-speaking", i)
            user_spans.append((sent[i][0] - tape.origin, sent[end][0] - tape.origin))
    (first, samples_), *_ = uploader.chunks["user"]
    loud = [i / AUDIO_RATE + first - tape.origin for i, x in enumerate(samples_) if abs(x) > 300]
    assert loud, "the caller's track is silent"
    # The caller is heard only where the messages say they spoke; the backchannel, from its voice activity's start.
    assert all(any(a - 0.1 <= t <= b + 0.1 for a, b in user_spans) for t in loud)
    over = [t for t in loud if start - 0.1 <= t <= stop + 0.1]
    assert over and abs(over[0] - start) < 0.15


# --- the API ---------------------------------------------------------------------------------------


def store(org, session_id, pairs, step=0.05, **fields) -> Session:
    session = Session.objects.create(organization=org, session_id=session_id, **fields)
    Event.objects.bulk_create(
        Event(
            session=session,
            seq=i,
            direction=direction,
            type=message["type"],
            received_at=1_750_000_000.0 + i * step,
            message=json.dumps(message),
        )
        for i, (direction, message) in enumerate(pairs, 1)
    )
    return session


BARGE_IN = [
    *samples.pipecat_conversation_pairs(2),
    *samples.barge_in_turn("Where is it", ["It ships today and arrives on Thursday."], 3),
    *samples.pipecat_turn("No the other order", ["Sorry.", "Which one?"]),
]


@pytest.mark.django_db
def test_the_api_gives_an_operator_each_turn_with_its_words(operator_client, org):
    store(org, "call-1", BARGE_IN, status=Session.Status.ENDED)
    response = operator_client.get("/api/sessions/call-1/turns/")
    assert response.status_code == 200
    body = response.json()
    assert body["contents"] is True and body["live"] is False
    assert body["thresholds"] == {"backchannel_seconds": 0.8, "backchannel_words": 3}
    assert [s["stage"] for s in body["stage_names"]] == list(turns.STAGE_NAMES)
    assert len(body["turns"]) == 4 and body["counts"]["barge_ins"] == 1
    assert body["turns"][2]["interruptions"][0]["text"] == "No the other order"
    assert body["turns"][0]["user_text"] == "Where is my order?"


@pytest.mark.django_db
def test_a_viewer_gets_the_timings_without_the_words(viewer_client, org):
    store(org, "call-1", BARGE_IN)
    body = viewer_client.get("/api/sessions/call-1/turns/").json()
    assert body["contents"] is False and len(body["turns"]) == 4
    assert all(t["user_text"] is None and t["bot_text"] is None for t in body["turns"])
    assert body["turns"][2]["interruptions"][0]["text"] is None
    assert body["turns"][2]["interruptions"][0]["spoken_words"] == 3
    assert "Thursday" not in json.dumps(body) and "other order" not in json.dumps(body)


@pytest.mark.django_db
def test_another_organizations_session_is_not_found(client, org, other_org, api_key):
    from tests.conftest import make_member

    store(other_org, "theirs", BARGE_IN)
    response = client.get("/api/sessions/theirs/turns/", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 404 and response.json()["error"] == "No session 'theirs' in your organization."
    client.force_login(make_member(org, "ana", "admin"))
    assert client.get("/api/sessions/theirs/turns/").status_code == 404


@pytest.mark.django_db
def test_the_api_needs_a_key_or_a_member_and_takes_only_get(client, org, api_key):
    store(org, "call-1", BARGE_IN)
    assert client.get("/api/sessions/call-1/turns/").status_code == 401
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    assert client.get("/api/sessions/call-1/turns/", **auth).status_code == 200
    response = client.post("/api/sessions/call-1/turns/", **auth)
    assert response.status_code == 405 and "GET" in response.json()["error"]


@pytest.mark.django_db
def test_the_api_uses_the_sessions_spans(staff_client, org):
    pairs = without_llm(samples.pipecat_conversation_pairs(1))
    store(org, "traced", pairs)
    t0 = int((1_750_000_000.0 + 10 * 0.05) * 1e9)
    common = {"organization": org, "trace_id": "a" * 32, "service_name": "bot"}
    Span.objects.create(
        **common, span_id="1", name="conversation", start_ns=t0, end_ns=t0 + 9 * 10**9, conversation_id="traced"
    )
    Span.objects.create(
        **common, span_id="2", parent_span_id="1", name="turn", start_ns=t0, end_ns=t0 + 3 * 10**9,
        attributes={"turn.number": 1}, conversation_id="traced",
    )  # fmt: skip
    Span.objects.create(
        **common, span_id="3", parent_span_id="2", name="llm", start_ns=t0 + 10**8, end_ns=t0 + 10**9,
        attributes={"metrics.ttfb": 0.2},
    )  # fmt: skip
    (turn,) = staff_client.get("/api/sessions/traced/turns/").json()["turns"]
    assert turn["sources"]["llm_started"] == "span" and turn["trace_turn"] == 1


@pytest.mark.django_db
def test_an_operators_read_is_in_the_audit_log(operator_client, org):
    from dashboard.org.models import AuditEntry

    store(org, "call-1", BARGE_IN)
    operator_client.get("/api/sessions/call-1/turns/")
    entry = AuditEntry.objects.get(organization=org, target="call-1")
    assert entry.detail.get("via") == "api: turns"


# --- the agent page: per agent over a period, per deployment ------------------------------------------


@pytest.fixture
def cloud(org, httpx_mock):
    """The organization's agents API is a Pipecat Cloud stand-in (as tests/agents/test_platform_pages.py has it)."""
    from tests.agents_samples import AGENT, BASE, KEY, URL
    from tests.platform_samples import DEPLOYMENT_ID, fake_pipecat_cloud

    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    agent = {**AGENT, "activeDeploymentId": DEPLOYMENT_ID}
    for url in (URL, f"{URL}?includeActiveDeployment=true"):
        httpx_mock.add_response(url=url, json={"services": [agent]}, is_reusable=True, is_optional=True)
    fake_pipecat_cloud(httpx_mock, sessions=[], logs=[])
    return agent


def agent_sessions(org, agent, deployment, prefix, pairs, step, count=2, age=None):
    from django.utils import timezone

    for i in range(count):
        session = store(
            org,
            f"{prefix}-{i}",
            pairs,
            step=step,
            agent_key=agent["id"],
            agent_name=agent["name"],
            deployment_id=deployment,
            status=Session.Status.ENDED,
        )
        session.event_count = len(pairs)
        session.started_at = timezone.now() - (age or timezone.timedelta(minutes=10 + i))
        session.save()


@pytest.mark.django_db
def test_the_agent_page_shows_rates_and_stages_overall_and_per_deployment(staff_client, org, other_org, cloud):
    from django.utils import timezone

    from tests.platform_samples import DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    calm = samples.pipecat_conversation_pairs(3)
    agent_sessions(org, cloud, OLD_DEPLOYMENT_ID, "old", calm, step=0.05)
    agent_sessions(org, cloud, DEPLOYMENT_ID, "new", BARGE_IN, step=0.2)  # everything four times slower
    agent_sessions(org, cloud, OLD_DEPLOYMENT_ID, "week", calm, step=0.05, count=1, age=timezone.timedelta(days=3))
    # Another organization's sessions under the same agent id are none of this page's business.
    agent_sessions(other_org, cloud, DEPLOYMENT_ID, "theirs", BARGE_IN, step=5.0, count=3)

    html = staff_client.get(f"/agents/{cloud['id']}/").content.decode()
    section = html[html.index('id="turn-figures"') : html.index('id="platform-sessions"')]
    assert "Turns (24 hours)" in section and "4 ended calls" in section
    # 6 + 8 replies; 2 barge-ins: 14 %.
    assert 'data-testid="barge-in-rate">14 % of replies (2)' in section
    assert 'data-testid="backchannel-rate">0 % of replies (0)' in section
    new, old = section.split('data-testid="turn-deployments"')[1].split("<tr")[2:4]
    assert 'class="current"' in new and "active" in new and DEPLOYMENT_ID[:8] in new
    assert OLD_DEPLOYMENT_ID[:8] in old and 'class="current"' not in old
    # The regression: the new deployment's LLM first token p95 (4x the step) beside the old one's.
    first_token = {d["deployment_id"]: d for d in figures(org, cloud)["deployments"]}
    slow = next(s for s in first_token[DEPLOYMENT_ID]["stages"] if s["stage"] == "llm_first_token")
    fast = next(s for s in first_token[OLD_DEPLOYMENT_ID]["stages"] if s["stage"] == "llm_first_token")
    assert slow["p95"] == pytest.approx(4 * fast["p95"]) and fast["p95"] > 0
    assert f'data-label="LLM first token p95">{duration(slow["p95"])}<' in new
    assert f'data-label="LLM first token p95">{duration(fast["p95"])}<' in old

    week = staff_client.get(f"/agents/{cloud['id']}/?turns=7d").content.decode()
    assert "Turns (7 days)" in week and "5 ended calls" in week
    bad = staff_client.get(f"/agents/{cloud['id']}/?turns=forever").content.decode()
    assert "Ignored a filter — turns: expected one of 24h, 7d, got &#x27;forever&#x27;" in bad
    assert "Turns (24 hours)" in bad


def figures(org, agent, period="24h"):
    from django.utils import timezone

    from rtvi_monitor.sessions.fleet import agent_turn_figures

    return agent_turn_figures(org, agent["id"], period, timezone.now())


def duration(ms):
    from dashboard.web.display import duration_text

    return duration_text(ms)


@pytest.mark.django_db
def test_the_agent_figures_read_a_capped_number_of_sessions_and_are_cached(org, cloud, settings):
    from rtvi_monitor.sessions import figures as kept
    from tests.platform_samples import DEPLOYMENT_ID

    settings.TURN_STATS_MAX_SESSIONS = 2
    agent_sessions(org, cloud, DEPLOYMENT_ID, "s", samples.pipecat_conversation_pairs(1), step=0.05, count=3)
    kept.fill(Session.objects.calls(), 10)  # as each call's end (or a server's start) keeps them
    first = figures(org, cloud)
    assert (first["read"], first["total"], first["capped"]) == (2, 3, True)
    assert first["overall"]["turns"] == 2
    agent_sessions(org, cloud, DEPLOYMENT_ID, "more", samples.pipecat_conversation_pairs(1), step=0.05, count=1)
    kept.fill(Session.objects.calls(), 10)
    assert figures(org, cloud)["total"] == 3  # reused for TURN_STATS_CACHE_SECONDS
    settings.TURN_STATS_CACHE_SECONDS = 0
    from django.core.cache import cache

    cache.clear()
    assert figures(org, cloud)["total"] == 4


@pytest.mark.django_db
def test_a_viewer_sees_the_agents_turn_figures(viewer_client, org, cloud):
    from tests.platform_samples import DEPLOYMENT_ID

    agent_sessions(org, cloud, DEPLOYMENT_ID, "s", BARGE_IN, step=0.05, count=1)
    html = viewer_client.get(f"/agents/{cloud['id']}/").content.decode()
    assert 'data-testid="barge-in-rate">25 % of replies (1)' in html
    assert "other order" not in html  # figures, never words


@pytest.mark.django_db
def test_the_agent_page_compares_the_active_deployment_with_the_one_before_by_intervals(staff_client, org, cloud):
    """Issue 37, part 3: the active deployment's waits against the previous one's, p50 and p95, with intervals over
    the calls: a deployment whose every wait doubled is worse on each; the same bot again is no different."""
    from rtvi_monitor.core.compare import MIN_CALLS
    from rtvi_monitor.sessions.fleet import agent_turn_figures
    from tests.platform_samples import DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    pairs = samples.pipecat_conversation_pairs(2)
    agent_sessions(org, cloud, OLD_DEPLOYMENT_ID, "old", pairs, step=0.05, count=MIN_CALLS, age=timedelta(hours=2))
    agent_sessions(org, cloud, DEPLOYMENT_ID, "new", pairs, step=0.10, count=MIN_CALLS)
    change = agent_turn_figures(org, cloud["id"], "24h", _now(), DEPLOYMENT_ID)["change"]
    assert (change["before"], change["after"]) == (OLD_DEPLOYMENT_ID, DEPLOYMENT_ID)
    latency = {(r["figure"], r["q"]): r for r in change["rows"]}[("latency", 50)]
    assert latency["verdict"] == "worse" and latency["change"]["calls"] == [MIN_CALLS, MIN_CALLS]
    assert latency["change"]["b"] == pytest.approx(2 * latency["change"]["a"])
    page = staff_client.get(f"/agents/{cloud['id']}/").content.decode()
    assert 'data-figure="latency-p50" data-verdict="worse"' in page


@pytest.mark.django_db
def test_the_same_bot_deployed_again_is_no_different_and_too_few_calls_say_so(org, cloud, settings):
    from rtvi_monitor.core.compare import MIN_CALLS
    from rtvi_monitor.sessions.fleet import agent_turn_figures
    from tests.platform_samples import DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    settings.TURN_STATS_CACHE_SECONDS = 0
    pairs = samples.pipecat_conversation_pairs(2)
    agent_sessions(org, cloud, OLD_DEPLOYMENT_ID, "old", pairs, step=0.05, count=MIN_CALLS, age=timedelta(hours=2))
    agent_sessions(org, cloud, DEPLOYMENT_ID, "new", pairs, step=0.05, count=MIN_CALLS - 1)
    few = agent_turn_figures(org, cloud["id"], "24h", _now(), DEPLOYMENT_ID)["change"]
    assert {row["verdict"] for row in few["rows"]} == {"too few calls"}
    agent_sessions(org, cloud, DEPLOYMENT_ID, "more", pairs, step=0.05, count=1)
    same = agent_turn_figures(org, cloud["id"], "24h", _now(), DEPLOYMENT_ID)["change"]
    assert {row["verdict"] for row in same["rows"]} <= {"no difference shown", "too few calls"}
    assert "no difference shown" in {row["verdict"] for row in same["rows"]}


def _now():
    from django.utils import timezone

    return timezone.now()


@pytest.mark.django_db
def test_the_comparison_says_when_more_calls_have_errors_or_end_badly_by_fishers_test(org, cloud, settings):
    from rtvi_monitor.core.compare import MIN_CALLS
    from rtvi_monitor.sessions.fleet import agent_turn_figures
    from tests.platform_samples import DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    settings.TURN_STATS_CACHE_SECONDS = 0
    pairs = samples.pipecat_conversation_pairs(2)
    agent_sessions(org, cloud, OLD_DEPLOYMENT_ID, "old", pairs, step=0.05, count=MIN_CALLS, age=timedelta(hours=2))
    agent_sessions(org, cloud, DEPLOYMENT_ID, "new", pairs, step=0.05, count=MIN_CALLS)
    Session.objects.filter(deployment_id=OLD_DEPLOYMENT_ID).update(end_kind="bot_finished")
    new = Session.objects.filter(deployment_id=DEPLOYMENT_ID)
    new.update(end_kind="bot_finished")
    new.filter(session_id__regex=r"new-[0-9]$|new-1[0-9]$").update(error_count=2, end_kind="fatal_error")  # 20 of 50
    rows = {
        r["figure"]: r for r in agent_turn_figures(org, cloud["id"], "24h", _now(), DEPLOYMENT_ID)["change"]["rows"]
    }
    assert rows["rate:errors"]["verdict"] == "worse", rows["rate:errors"]
    assert rows["rate:errors"]["rate"]["b"] == pytest.approx(0.4)
    assert rows["rate:ended_badly"]["verdict"] == "worse"
    assert rows["rate:barge_in"]["verdict"] == "no difference shown"
