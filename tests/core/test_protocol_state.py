"""rtvi_monitor.core.state: the session state folded from messages, incrementally and deterministically."""

import itertools
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.core.protocol import validate
from rtvi_monitor.core.reducer import limits as state_module
from rtvi_monitor.core.state import Event, SessionState, replay
from tests.rtvi_samples import (
    SCRIPT,
    VALID,
    barge_in_turn,
    chat_turn,
    legacy_v1_turn,
    m,
    pipecat_conversation_pairs,
    pipecat_turn,
)

T0 = 1_750_000_000.0


def events(pairs, step=0.1, start_seq=1):
    out = []
    for i, (direction, message) in enumerate(pairs):
        checked = validate(message)
        out.append(Event(start_seq + i, direction, T0 + i * step, checked.message, checked.valid, checked.error))
    return out


def state_of(pairs, step=0.1):
    return replay(events(pairs, step)).to_dict()


def lines(state, role):
    return [item["text"] for item in state["transcript"] if item["role"] == role]


def sentences_of(script_turns):
    return [" ".join(sentences) for _, sentences in script_turns]


# --- the transcript: the user ----------------------------------------------------------


def test_user_partials_are_replaced_by_the_final_text_once():
    # Pipecat sends each partial and the final twice: user-input, then user-transcription.
    state = state_of(pipecat_turn("Where is my order?", ["It ships today."]))
    users = [t for t in state["transcript"] if t["role"] == "user"]
    assert [(u["text"], u["final"], u["source"]) for u in users] == [("Where is my order?", True, "voice")]


def test_a_partial_shows_until_its_final_comes():
    pairs = pipecat_turn("Where is my order?", ["It ships today."])
    partials = [p for p in pairs if p[1]["type"] == "user-transcription" and not p[1]["data"]["final"]]
    state = state_of(pairs[: pairs.index(partials[-1]) + 1])
    assert [(t["text"], t["final"]) for t in state["transcript"]] == [("where is my", False)]


def test_the_same_words_in_two_turns_are_two_lines():
    state = state_of(pipecat_turn("Yes", ["Good."]) + pipecat_turn("Yes", ["Great."]))
    assert lines(state, "user") == ["Yes", "Yes"]


def test_a_bot_that_sends_only_user_input_still_has_a_user_transcript():
    # Pipecat 1.13 deprecates user-transcription; a bot may turn it off.
    pairs = [p for p in pipecat_turn("Where is my order?", ["It ships today."]) if p[1]["type"] != "user-transcription"]
    assert lines(state_of(pairs), "user") == ["Where is my order?"]


def test_older_user_input_without_input_type_adds_nothing():
    pairs = [
        ("to-client", m("user-transcription", {"text": "Hi", "final": True})),
        ("to-client", m("user-input", {"text": "Hi"})),
    ]
    assert lines(state_of(pairs), "user") == ["Hi"]


def test_chat_input_is_marked_chat_once():
    (item, bot) = state_of(chat_turn("Book a table", "For how many?"))["transcript"]
    assert (item["role"], item["source"], item["text"], item["final"]) == ("user", "chat", "Book a table", True)
    assert (bot["role"], bot["text"]) == ("bot", "For how many?")


def test_a_text_only_answer_is_shown():
    # send-text with audio_response false: one bot-output, will_be_spoken false, never "completed".
    state = state_of(chat_turn("One more thing", "Sorry?"))
    assert [(t["source"], t["text"]) for t in state["transcript"] if t["role"] == "bot"] == [("bot-output", "Sorry?")]


def test_a_backchannel_is_a_user_line_that_does_not_end_the_bots():
    pairs = [
        ("to-client", m("bot-started-speaking")),
        ("to-client", m("bot-tts-text", {"text": "So first"})),
        ("to-client", m("user-input", {"text": "mhm", "input_type": "backchannel", "final": True})),
        ("to-client", m("bot-tts-text", {"text": "you open it."})),
    ]
    state = state_of(pairs)
    assert [(t["role"], t["source"], t["text"]) for t in state["transcript"]] == [
        ("bot", "bot-tts-text", "So first you open it."),
        ("user", "backchannel", "mhm"),
    ]
    assert state["interruptions"] == []


# --- the transcript: the bot -------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{}, {"word_timestamps": True}, {"client_version": "1.0.0"}, {"client_version": "1.0.0", "word_timestamps": True}],
    ids=["2x", "2x-word-tts", "1x-client", "1x-client-word-tts"],
)
def test_each_bot_sentence_appears_once_as_spoken(options):
    # Each sentence comes as bot-output (twice, or per word), bot-tts-text, bot-transcription and tokens.
    state = state_of(pipecat_conversation_pairs(3, **options))
    assert lines(state, "bot") == sentences_of(SCRIPT)
    assert all(t["source"] == "bot-output" and t["final"] for t in state["transcript"] if t["role"] == "bot")


@pytest.mark.parametrize("words", [False, True])
def test_an_older_1x_bot_without_segment_ids_shows_each_sentence_once(words):
    # All sentences come unspoken before the first is spoken: matched by their text.
    state = state_of(legacy_v1_turn("Hi", ["Hello there.", "How can I help?"], words=words))
    assert lines(state, "bot") == ["Hello there. How can I help?"]


def test_v1_bot_output_sent_twice_is_shown_once():
    pairs = [("to-client", m("bot-output", {"text": "Sure.", "spoken": True, "aggregated_by": "sentence"}))] * 2
    assert lines(state_of(pairs), "bot") == ["Sure."]


def test_a_bot_that_counts_segment_ids_per_turn_gets_a_line_per_turn():
    def turn(text):
        return [
            ("to-client", m("user-started-speaking")),
            ("to-client", m("user-stopped-speaking")),
            ("to-client", m("bot-output", {"text": text, "aggregated_by": "sentence", "segment_id": 0})),
        ]

    assert lines(state_of(turn("One.") + turn("Two.")), "bot") == ["One.", "Two."]


def test_bot_text_falls_back_to_what_the_bot_sends():
    only_tts = [("to-client", m("bot-tts-text", {"text": w})) for w in ("Hello", "there.")]
    assert state_of(only_tts)["transcript"][0]["text"] == "Hello there."
    only_llm = [("to-client", m("bot-llm-text", {"text": t})) for t in ("Hel", "lo", " there.")]
    assert state_of(only_llm)["transcript"][0]["text"] == "Hello there."
    old_bot = [
        ("to-client", m("bot-transcription", {"text": " One."})),
        ("to-client", m("bot-transcription", {"text": " Two."})),
    ]
    assert [(t["source"], t["text"]) for t in state_of(old_bot)["transcript"]] == [("bot-transcription", "One. Two.")]


def test_spoken_text_beats_written_text():
    pairs = [
        ("to-client", m("bot-llm-text", {"text": "Hello **there**."})),
        ("to-client", m("bot-tts-text", {"text": "Hello there."})),
        ("to-client", m("bot-llm-text", {"text": " More."})),
    ]
    (item,) = state_of(pairs)["transcript"]
    assert (item["source"], item["text"]) == ("bot-tts-text", "Hello there.")


@pytest.mark.parametrize("legacy_client", [False, True], ids=["2x", "1x-client"])
def test_a_barge_in_keeps_only_what_the_bot_said(legacy_client):
    pairs = barge_in_turn(
        "Where is my order?", ["Let me check that for you.", "It ships today."], 2, legacy_client=legacy_client
    )
    (bot,) = [t for t in state_of(pairs)["transcript"] if t["role"] == "bot"]
    assert (bot["text"], bot["interrupted"], bot["final"]) == ("Let me", True, True)


def test_a_barge_in_before_the_first_word_leaves_the_line_empty():
    pairs = pipecat_turn("Where is my order?", ["Let me check that for you.", "It ships today."])
    completed = next(i for i, p in enumerate(pairs) if p[1].get("data", {}).get("spoken_status") == "completed")
    cut = pairs[:completed]  # "new" came; "completed" did not
    barge_in = [("to-client", m("user-started-speaking")), ("to-client", m("bot-interrupted"))]
    state = state_of(cut + barge_in)
    (bot,) = [t for t in state["transcript"] if t["role"] == "bot"]
    assert (bot["text"], bot["interrupted"]) == ("", True)


def test_a_late_completion_after_a_barge_in_restores_the_sentence():
    pairs = barge_in_turn("Where is my order?", ["Let me check that for you."], 1)
    segment = next(p[1]["data"]["segment_id"] for p in pairs if p[1]["type"] == "bot-output")
    done = m("bot-output", {"text": "Let me check that for you.", "segment_id": segment, "spoken_status": "completed"})
    assert lines(state_of([*pairs, ("to-client", done)]), "bot") == ["Let me check that for you."]


# --- speaking, interruptions, turns ----------------------------------------------------


def test_speaking_state_and_intervals():
    pairs = [
        ("to-client", m("user-started-speaking")),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-started-speaking")),
    ]
    state = state_of(pairs, step=1)
    assert state["speaking"] == {"user": False, "bot": True}
    assert state["intervals"]["user_speaking"] == [[T0, T0 + 1]]
    assert state["intervals"]["bot_speaking"] == [[T0 + 2, None]]


def test_the_bot_interrupted_pipecat_sends_every_turn_is_no_interruption():
    state = state_of(pipecat_conversation_pairs(3))
    assert state["interruptions"] == [] and not any(t["interrupted"] for t in state["turns"])


def test_a_user_who_speaks_over_the_bot_is_one_interruption():
    pairs = barge_in_turn("Where is my order?", ["Let me check that for you."], 2)
    state = state_of(pairs, step=0.2)
    (turn,) = state["turns"]
    assert state["interruptions"] == [T0 + (len(pairs) - 3) * 0.2] and turn["interrupted"]


def test_a_client_that_interrupts_the_speaking_bot_is_an_interruption():
    pairs = [
        ("to-client", m("bot-started-speaking")),
        ("from-client", m("send-text", {"content": "Stop"}, id="s9")),
        ("to-client", m("bot-interrupted")),
        ("to-client", m("bot-stopped-speaking")),
    ]
    assert state_of(pairs)["interruptions"] == [T0 + 0.2]


def test_turn_latency_runs_from_user_stopped_to_bot_started_speaking():
    pairs = pipecat_conversation_pairs(3)
    state = state_of(pairs, step=0.05)
    assert len(state["turns"]) == 3
    stops = [i for i, p in enumerate(pairs) if p[1]["type"] == "user-stopped-speaking"]
    starts = [i for i, p in enumerate(pairs) if p[1]["type"] == "bot-started-speaking"]
    for index, (turn, stop, start) in enumerate(zip(state["turns"], stops, starts, strict=True)):
        assert turn["index"] == index
        assert turn["latency_ms"] == pytest.approx((start - stop) * 50, abs=0.01)
        assert turn["user_stopped_at"] == T0 + stop * 0.05 and turn["bot_started_at"] == T0 + start * 0.05
        assert turn["llm_ttfb_ms"] == 310.0 and turn["tts_ttfb_ms"] == 120.0 and not turn["interrupted"]
    latencies = sorted(t["latency_ms"] for t in state["turns"])
    assert state["latency"] == {"p50": latencies[1], "p95": latencies[2], "max": latencies[2]}


def test_a_ttfb_that_comes_after_the_bot_started_speaking_still_belongs_to_its_turn():
    pairs = [
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-started-speaking")),
        ("to-client", m("metrics", {"ttfb": [{"processor": "ElevenLabsTTSService#0", "value": 0.2}]})),
        ("to-client", m("user-started-speaking")),
        ("to-client", m("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "value": 0.3}]})),
    ]
    (turn,) = state_of(pairs)["turns"]
    assert (turn["tts_ttfb_ms"], turn["llm_ttfb_ms"]) == (200.0, None)


def test_raw_text_and_its_deprecated_twin_are_read_once():
    # Pipecat 1.13+ sends a 2.2 client both; 2.0 will send only the raw ones; older bots only the deprecated.
    both = [
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        ("to-client", m("llm-raw-text", {"text": "It"})),
        ("to-client", m("bot-llm-text", {"text": "It"})),
        ("to-client", m("llm-raw-text", {"text": " ships."})),
        ("to-client", m("bot-llm-text", {"text": " ships."})),
        ("to-client", m("bot-started-speaking")),
        ("to-client", m("tts-raw-text", {"text": "It ships."})),
        ("to-client", m("bot-tts-text", {"text": "It ships."})),
    ]
    only_raw = [p for p in both if p[1]["type"] not in ("bot-llm-text", "bot-tts-text")]
    only_old = [p for p in both if not p[1]["type"].endswith("raw-text")]
    for pairs in (both, only_raw, only_old):
        state = state_of(pairs)
        assert state["llm"]["current_tokens"] == "It ships." and state["tts"]["current_text"] == "It ships."
        assert [t["text"] for t in state["transcript"]] == ["It ships."]


def test_each_turn_has_a_waterfall_of_the_parts_of_the_wait():
    pairs = [
        ("to-client", m("user-stopped-speaking")),  # T0
        ("to-client", m("bot-llm-started")),  # +100 ms
        ("to-client", m("bot-llm-text", {"text": ""})),  # +200: empty, not a first token
        ("to-client", m("bot-llm-text", {"text": "Sure"})),  # +300: the first token
        ("to-client", m("bot-tts-started")),  # +400
        ("to-client", m("metrics", {"ttfb": [{"processor": "CartesiaTTSService#0", "value": 0.25}]})),  # +500
        ("to-client", m("bot-started-speaking")),  # +600
        ("to-client", m("bot-llm-started")),  # +700: later work is not this turn's wait
    ]
    (turn,) = state_of(pairs)["turns"]
    assert turn["waterfall"] == [
        {"part": "llm_first_token", "from_ms": 100.0, "to_ms": 300.0},
        {"part": "tts_first_audio", "from_ms": 400.0, "to_ms": 650.0},
        {"part": "bot_speaking", "from_ms": 0.0, "to_ms": 600.0},
    ]


def test_each_reply_names_the_turn_it_answers():
    pairs = pipecat_conversation_pairs(3)
    state = state_of(pairs, step=0.05)
    replies = [item["turn"] for item in state["transcript"] if item["role"] == "bot"]
    assert replies == [0, 1, 2]  # one reply a turn, whether its tokens came before the speech or not
    assert all("turn" not in item for item in state["transcript"] if item["role"] == "user")


def test_a_waterfall_says_only_what_the_messages_tell():
    pairs = [
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        ("to-client", m("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "value": 0.15}]})),
        ("to-client", m("bot-started-speaking")),
    ]
    (turn,) = state_of(pairs)["turns"]
    # No token text came: the LLM's first token is its ttfb after it started. No TTS messages: no TTS part.
    assert turn["waterfall"] == [
        {"part": "llm_first_token", "from_ms": 100.0, "to_ms": 250.0},
        {"part": "bot_speaking", "from_ms": 0.0, "to_ms": 300.0},
    ]


def test_usage_is_counted_per_model_for_the_cost():
    llm = {"processor": "OpenAILLMService#0", "model": "gpt-4o"}
    pairs = [
        ("to-client", m("metrics", {"tokens": [{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}]})),
        ("to-client", m("metrics", {"ttfb": [{**llm, "value": 0.3}]})),
        # Real bots' tokens entries name no model: they are the LLM's the metrics named.
        ("to-client", m("metrics", {"tokens": [{"prompt_tokens": 400, "completion_tokens": 20, "total_tokens": 420}]})),
        (
            "to-client",
            m("metrics", {"characters": [{"processor": "CartesiaTTSService#0", "model": "sonic-2", "value": 42}]}),
        ),
        (
            "to-client",
            m(
                "metrics",
                {
                    "stt_usage": [
                        {"processor": "DeepgramSTTService#0", "model": "nova-3", "value": {"audio_seconds": 1.5}}
                    ]
                },
            ),
        ),
    ]
    assert state_of(pairs)["usage"] == {
        "": {"prompt_tokens": 100, "completion_tokens": 10},
        "gpt-4o": {"prompt_tokens": 400, "completion_tokens": 20},
        "sonic-2": {"characters": 42},
        "nova-3": {"stt_audio_seconds": 1.5},
    }


def test_a_user_who_goes_on_talking_is_measured_from_the_last_stop():
    pairs = [
        ("to-client", m("user-started-speaking")),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("user-started-speaking")),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-started-speaking")),
    ]
    (turn,) = state_of(pairs, step=1)["turns"]
    assert turn["latency_ms"] == 1000.0


def test_no_turns_no_latency():
    assert state_of([])["latency"] == {"p50": None, "p95": None, "max": None}


# --- LLM, TTS, function calls, requests, errors --------------------------------------------


def test_llm_and_tts_activity():
    pairs = pipecat_turn("Hi", ["Sure thing."])
    state = state_of(pairs[: [p[1]["type"] for p in pairs].index("bot-tts-stopped")])
    assert state["llm"] == {"busy": False, "current_tokens": "Sure thing.", "last_user_llm_text": "Hi"}
    assert state["tts"] == {"busy": True, "current_text": ""}
    assert state["intervals"]["llm_busy"][-1][1] is not None and state["intervals"]["tts_busy"][-1][1] is None


def test_function_calls_are_correlated_by_tool_call_id():
    pairs = pipecat_turn("Where is it", ["Found it."], function_call=True, call_id="call_7")
    state = state_of(pairs, step=0.1)
    (call,) = state["function_calls"]
    started = [p[1]["type"] for p in pairs].index("llm-function-call-started")
    stopped = [p[1]["type"] for p in pairs].index("llm-function-call-stopped")
    assert call["tool_call_id"] == "call_7" and call["status"] == "completed"
    assert call["function_name"] is None and call["args"] is None  # report level NONE: nothing assumed
    assert call["started_at"] == T0 + started * 0.1
    assert call["duration_ms"] == pytest.approx((stopped - started) * 100, abs=0.01)


def test_a_client_handled_function_call_gets_its_result():
    pairs = [("to-client", VALID["llm-function-call"]), ("from-client", VALID["llm-function-call-result"])]
    (call,) = state_of(pairs)["function_calls"]
    assert (call["function_name"], call["args"], call["result"], call["status"]) == (
        "get_weather",
        {"city": "Oslo"},
        {"temp": 3},
        "completed",
    )


def test_a_cancelled_function_call():
    pairs = [
        (
            "to-client",
            m("llm-function-call-in-progress", {"tool_call_id": "c9", "function_name": "f", "arguments": {}}),
        ),
        ("to-client", m("llm-function-call-stopped", {"tool_call_id": "c9", "cancelled": True})),
    ]
    (call,) = state_of(pairs)["function_calls"]
    assert (call["status"], call["function_name"]) == ("cancelled", "f")


def test_parallel_calls_announced_without_ids_are_matched_in_order():
    pairs = [
        ("to-client", m("llm-function-call-started", {"function_name": "a"})),
        ("to-client", m("llm-function-call-started", {"function_name": "b"})),
        ("to-client", m("llm-function-call-in-progress", {"tool_call_id": "1", "function_name": "a"})),
        ("to-client", m("llm-function-call-in-progress", {"tool_call_id": "2", "function_name": "b"})),
        ("to-client", m("llm-function-call-stopped", {"tool_call_id": "2", "cancelled": False, "result": {"ok": 1}})),
    ]
    calls = state_of(pairs)["function_calls"]
    assert [(c["tool_call_id"], c["function_name"], c["status"]) for c in calls] == [
        ("1", "a", "in_progress"),
        ("2", "b", "completed"),
    ]
    assert calls[1]["result"] == {"ok": 1} and calls[0]["started_at"] == T0


def test_client_messages_are_correlated_with_their_responses():
    pairs = [
        ("from-client", VALID["client-message"]),
        ("to-client", VALID["server-response"]),
        ("from-client", m("client-message", {"t": "x"}, id="m2")),
        ("to-client", m("error-response", {"error": "no handler"}, id="m2")),
        ("from-client", m("client-message", {"t": "y"}, id="m3")),
    ]
    requests = state_of(pairs, step=0.25)["client_messages"]
    assert [(r["id"], r["t"], r["status"], r["response_ms"]) for r in requests] == [
        ("m1", "get-weather", "answered", 250.0),
        ("m2", "x", "failed", 250.0),
        ("m3", "y", "pending", None),
    ]
    assert requests[0]["response"] == {"t": "get-weather", "d": {"temp": 3}}


def test_a_response_typed_client_message_as_the_spec_says_is_read_as_a_response():
    pairs = [("from-client", VALID["client-message"]), ("to-client", m("client-message", {"t": "ok"}, id="m1"))]
    (request,) = state_of(pairs)["client_messages"]
    assert request["status"] == "answered"


def test_an_unsupported_client_request_is_an_error_naming_it():
    pairs = [("from-client", VALID["append-to-context"]), ("to-client", VALID["error-response"])]
    (error,) = state_of(pairs)["errors"]
    assert error["message"] == "Unsupported type append-to-context" and error["request_type"] == "append-to-context"
    assert error["type"] == "error-response" and not error["fatal"]


def test_a_fatal_error_ends_the_session():
    state = state_of([("to-client", m("error", {"error": "quota", "fatal": True}))])
    assert state["fatal"] and state["ended"] and state["errors"][0]["message"] == "quota"
    assert state_of([("to-client", m("error", {"message": "slow", "fatal": False}))])["ended"] is False


def test_server_messages_are_kept():
    (message,) = state_of([("to-client", VALID["server-message"])])["server_messages"]
    assert message == {"seq": 1, "at": T0, "data": {"anything": [1, 2]}}


# --- metrics ------------------------------------------------------------------------------


def test_metrics_are_series_in_milliseconds_with_totals():
    state = state_of(pipecat_conversation_pairs(2))
    llm = "OpenAILLMService#0|gpt-4o-mini"
    assert [v for _, v in state["metrics"]["ttfb"][llm]] == [310.0, 310.0, 270.0]
    assert state["metrics"]["ttfb"]["OpenAILLMService#0|"][0][1] == 0.0  # the start-of-session zeros
    assert state["metrics"]["processing"][llm][0][1] == 900.0
    assert state["metrics"]["ttfat"][llm][0][1] == 310.5  # carried under "ttfat", not "value"
    assert state["metrics"]["tokens"]["|"][0][1] == 138  # counts stay counts
    assert state["metrics"]["stt_usage"]["DeepgramSTTService#0|nova-3"][0][1] == 1.6
    characters = sum(len(s) for _, sentences in SCRIPT[:2] for s in sentences)
    assert state["totals"] == {
        "characters": characters,
        "prompt_tokens": 340,
        "completion_tokens": 48,
        "total_tokens": 388,
        "stt_audio_seconds": 3.2,
    }


def test_a_metric_series_keeps_its_newest_points(monkeypatch):
    monkeypatch.setattr(state_module, "MAX_POINTS", 5)
    pairs = [("to-client", m("metrics", {"ttfb": [{"processor": "p", "value": i / 1000}]})) for i in range(12)]
    assert [v for _, v in state_of(pairs)["metrics"]["ttfb"]["p|"]] == [7.0, 8.0, 9.0, 10.0, 11.0]


# --- versions, counts, robustness ---------------------------------------------------------


def test_the_protocol_version_and_abouts_are_recorded():
    state = state_of(pipecat_conversation_pairs(1))
    assert (state["protocol_version"], state["client_version"], state["bot_version"]) == ("2.2.0", "2.1.0", "2.2.0")
    assert state["client_about"]["library"] == "@pipecat-ai/client-js"
    assert state["bot_about"] == {"library": "pipecat-ai", "library_version": "1.14.0"}
    assert state_of(pipecat_conversation_pairs(1, client_version="1.0.0"))["protocol_version"] == "1.0.0"


def test_counts_by_type_invalid_unknown_and_unparseable():
    checked = [validate(x) for x in ("{oops", VALID["bot-ready"], m("mystery"), m("user-transcription", {"final": 1}))]
    evs = [Event(i, "to-client", T0, c.message, c.valid, c.error) for i, c in enumerate(checked, 1)]
    counts = replay(evs).to_dict()["counts"]
    assert counts == {
        "total": 4,
        "invalid": 2,
        "unknown": 1,
        "unparseable": 1,
        "by_type": {"bot-ready": 1, "mystery": 1, "user-transcription": 1},
        "redacted": {},
    }


def test_counted_type_names_are_bounded(monkeypatch):
    monkeypatch.setattr(state_module, "MAX_TYPES", 3)
    counts = state_of([("to-client", m(f"custom-{i}")) for i in range(5)])["counts"]
    assert counts["by_type"] == {"custom-0": 1, "custom-1": 1, "custom-2": 1, "(other)": 2}


def test_a_duplicated_seq_is_applied_once():
    state = SessionState()
    event = events([("to-client", m("bot-llm-text", {"text": "a"}))])[0]
    state.apply(event)
    state.apply(event)
    assert state.counts["total"] == 1 and state.llm["current_tokens"] == "a"


def test_the_transcript_keeps_its_newest_lines(monkeypatch):
    monkeypatch.setattr(state_module, "MAX_ITEMS", 4)
    pairs = [("from-client", m("send-text", {"content": f"line {i}"})) for i in range(10)]
    assert lines(state_of(pairs), "user") == ["line 6", "line 7", "line 8", "line 9"]


@pytest.mark.parametrize(
    "event",
    [
        Event(1, "to-client", T0, {"label": "rtvi-ai", "type": "user-transcription", "data": {"text": 5}}),
        Event(2, "sideways", math.nan, {"type": "bot-started-speaking"}),
        Event(3, "to-client", math.inf, {"type": "metrics", "data": {"ttfb": [{"value": math.nan}]}}),
        Event(4, "to-client", T0, {"type": "bot-output", "data": {"text": None, "segment_id": [1]}}),
        Event(5, "to-client", T0, {"type": "llm-function-call-stopped", "data": {"tool_call_id": {}}}),
        Event(6, "to-client", T0, "not a dict", valid=True),  # type: ignore[arg-type]
        Event([7], "to-client", T0, None),  # type: ignore[arg-type]
    ],
)
def test_apply_never_raises_on_events_nobody_validated(event):
    state = SessionState()
    state.apply(event)
    json.dumps(state.to_dict(), allow_nan=False)


def test_the_state_is_strict_json():
    json.dumps(state_of(pipecat_conversation_pairs(3, word_timestamps=True)), allow_nan=False)


def test_summary_has_what_session_lists_show():
    state = replay(events(barge_in_turn("Where is my order?", ["Let me check that for you."], 2)))
    summary = state.summary()
    assert summary == {
        "protocol_version": None,
        "turn_count": 1,
        "latency": state.latency(),
        "interruptions": 1,
        "error_count": 0,
        "fatal": False,
        "event_count": summary["event_count"],
        "invalid_count": 0,
        "unknown_count": 0,
        "user_speaking": True,
        "bot_speaking": False,
    }
    assert summary["event_count"] == len(barge_in_turn("Where is my order?", ["Let me check that for you."], 2))


def test_the_state_has_every_key_the_dashboard_reads():
    assert {
        "protocol_version",
        "client_about",
        "bot_about",
        "speaking",
        "intervals",
        "interruptions",
        "transcript",
        "turns",
        "latency",
        "llm",
        "tts",
        "function_calls",
        "client_messages",
        "server_messages",
        "errors",
        "fatal",
        "ended",
        "metrics",
        "totals",
        "counts",
    } <= set(SessionState().to_dict())
    assert set(SessionState().to_dict()["intervals"]) == {"user_speaking", "bot_speaking", "llm_busy", "tts_busy"}


# --- properties --------------------------------------------------------------------------

REAL = [message for _, message in pipecat_conversation_pairs(3, word_timestamps=True)] + list(VALID.values())
GARBAGE = st.one_of(
    st.text(max_size=12),
    st.binary(max_size=12),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.builds(
        lambda t, d: {"label": "rtvi-ai", "type": t, "data": d},
        st.sampled_from([*sorted(VALID), "mystery"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=5),
            st.dictionaries(
                st.sampled_from(
                    ["text", "final", "value", "ttfb", "tool_call_id", "fatal", "segment_id", "input_type"]
                ),
                st.one_of(
                    st.none(),
                    st.booleans(),
                    st.integers(),
                    st.floats(allow_nan=True),
                    st.text(max_size=5),
                    st.lists(
                        st.dictionaries(
                            st.sampled_from(["value", "processor"]),
                            st.one_of(st.integers(), st.floats(), st.text(max_size=3)),
                        ),
                        max_size=2,
                    ),
                ),
                max_size=3,
            ),
        ),
    ),
)
EVENTS = st.lists(
    st.tuples(
        st.integers(1, 60),  # seqs repeat (duplicates) and come in any order
        st.sampled_from(["to-client", "from-client"]),
        st.floats(0, 100),  # and so do times
        st.one_of(st.sampled_from(REAL), GARBAGE),
    ),
    max_size=80,
)


def to_events(raw):
    out = []
    for seq, direction, offset, message in raw:
        checked = validate(message)
        out.append(Event(seq, direction, T0 + offset, checked.message, checked.valid, checked.error))
    return out


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_any_sequence_never_raises_and_keeps_the_invariants(raw):
    evs = to_events(raw)
    state = replay(evs)
    d = state.to_dict()
    json.dumps(d, allow_nan=False)
    counts = d["counts"]
    # one count per distinct seq; every one has a type or is unparseable
    assert counts["total"] == len({e.seq for e in evs}) == sum(counts["by_type"].values()) + counts["unparseable"]
    assert counts["invalid"] + counts["unknown"] <= counts["total"]
    # a lane's intervals never overlap themselves, and run forward
    for intervals in d["intervals"].values():
        for start, end in intervals:
            assert end is None or start <= end
        for (_, a1), (b0, _) in itertools.pairwise(intervals):
            assert a1 is not None and a1 <= b0
    assert d["speaking"] == {
        "user": bool(d["intervals"]["user_speaking"]) and d["intervals"]["user_speaking"][-1][1] is None,
        "bot": bool(d["intervals"]["bot_speaking"]) and d["intervals"]["bot_speaking"][-1][1] is None,
    }
    assert state.summary()["event_count"] == counts["total"]


@settings(max_examples=150, deadline=None)
@given(EVENTS)
def test_replay_equals_incremental_and_is_deterministic(raw):
    evs = to_events(raw)
    live = SessionState()
    for e in evs:
        live.apply(e)
        live.summary()  # reading in between changes nothing
    assert live.to_dict() == replay(evs).to_dict() == replay(list(evs)).to_dict()


VARIANTS = st.sampled_from(
    [
        {},
        {"word_timestamps": True},
        {"client_version": "1.0.0"},
        {"client_version": "1.0.0", "word_timestamps": True},
    ]
)


def delivered(turns, options, rnd):
    """A real session as a reconnecting bot's client may deliver it: resends, garbage, bot messages reordered."""
    pairs = pipecat_conversation_pairs(turns, **options)
    evs = events(pairs)
    # The bot's messages within a turn (after the user stopped) may be reordered among themselves.
    bounds = [i for i, e in enumerate(evs) if e.message["type"] in ("user-stopped-speaking", "user-started-speaking")]
    out = []
    for start, end in itertools.pairwise([*bounds, len(evs)]):
        chunk = evs[start + 1 : end]
        if evs[start].message["type"] == "user-stopped-speaking":
            rnd.shuffle(chunk)
        out += [evs[start], *chunk]
    out = evs[: bounds[0]] + out
    # Resends of seqs already delivered, and garbage under new seqs.
    noisy = []
    for index, e in enumerate(out):
        noisy.append(e)
        if rnd.random() < 0.2:
            noisy.append(rnd.choice(out[: index + 1]))  # a resend of something already sent
        if rnd.random() < 0.05:
            noisy.append(Event(10_000 + len(noisy), "to-client", e.received_at, None, False, "not JSON"))
    return evs, noisy


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), VARIANTS, st.randoms(use_true_random=False))
def test_no_bot_sentence_is_ever_shown_twice(turns, options, rnd):
    clean, noisy = delivered(turns, options, rnd)
    said = [s for _, sentences in SCRIPT[:turns] for s in sentences]
    for evs in (clean, noisy):
        text = " ".join(lines(replay(evs).to_dict(), "bot"))
        for sentence in said:
            assert text.count(sentence) <= 1, (sentence, text)
    # In order, resends and garbage change nothing the bot said.
    resent = [e for e in noisy if e.message is None or e in clean]
    in_order = sorted(resent, key=lambda e: e.seq)
    assert lines(replay(in_order).to_dict(), "bot") == sentences_of(SCRIPT[:turns])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), VARIANTS, st.integers(0, 2**32))
def test_a_resent_session_has_the_state_of_the_clean_one(turns, options, seed):
    rnd = random.Random(seed)
    clean = events(pipecat_conversation_pairs(turns, **options))
    resent = list(clean)
    for e in clean:
        if rnd.random() < 0.3:
            resent.insert(resent.index(e) + 1 + rnd.randrange(3), e)  # the same seq again, a little later
    assert replay(resent).to_dict() == replay(clean).to_dict()


def test_a_barge_in_ends_the_cancelled_replys_llm_and_tts_work():
    pairs = [
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        ("to-client", m("bot-tts-started")),
        ("to-client", m("bot-started-speaking")),
        ("to-client", m("user-started-speaking")),  # barge-in; Pipecat sends no llm/tts stopped for it
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-tts-started")),
        ("to-client", m("bot-tts-text", {"text": "Good question."})),
    ]
    state = state_of(pairs)
    assert [end is not None for _, end in state["intervals"]["tts_busy"]] == [True, False]
    assert state["intervals"]["llm_busy"][0][1] == state["interruptions"][0]
    assert state["tts"] == {"busy": True, "current_text": "Good question."}
