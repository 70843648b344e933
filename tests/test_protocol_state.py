"""rtvi_monitor.state: the session state folded from messages, incrementally and deterministically."""

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.protocol import validate
from rtvi_monitor.state import Event, SessionState, replay
from tests.rtvi_samples import VALID, m, pipecat_conversation, pipecat_turn

T0 = 1_750_000_000.0


def events(pairs, step=0.1, start_seq=1):
    out = []
    for i, (direction, message) in enumerate(pairs):
        checked = validate(message)
        out.append(Event(start_seq + i, direction, T0 + i * step, checked.message, checked.valid, checked.error))
    return out


def state_of(pairs, step=0.1):
    return replay(events(pairs, step)).to_dict()


def test_user_partials_are_replaced_by_the_final_text():
    state = state_of(pipecat_turn("Where is my order", ["It ships today."]))
    users = [t for t in state["transcript"] if t["role"] == "user"]
    assert [(u["text"], u["final"], u["source"]) for u in users] == [("Where is my order", True, "voice")]


def test_each_bot_sentence_appears_once_though_pipecat_sends_it_four_ways():
    state = state_of(pipecat_turn("Hi", ["Let me check that for you.", "It ships today."]))
    bots = [t for t in state["transcript"] if t["role"] == "bot"]
    assert len(bots) == 1
    assert bots[0]["text"] == "Let me check that for you. It ships today."
    assert bots[0]["source"] == "bot-output" and bots[0]["final"]


def test_bot_text_falls_back_to_what_the_bot_sends():
    only_tts = [("to-client", m("bot-tts-text", {"text": w})) for w in ("Hello", "there.")]
    assert state_of(only_tts)["transcript"][0]["text"] == "Hello there."
    only_llm = [("to-client", m("bot-llm-text", {"text": t})) for t in ("Hel", "lo", " there.")]
    assert state_of(only_llm)["transcript"][0]["text"] == "Hello there."
    old_bot = [
        ("to-client", m("bot-transcription", {"text": " One."})),
        ("to-client", m("bot-transcription", {"text": " Two."})),
    ]
    assert state_of(old_bot)["transcript"][0]["text"] == "One. Two."


def test_v1_bot_output_sent_twice_is_shown_once():
    pairs = [("to-client", m("bot-output", {"text": "Sure.", "spoken": True, "aggregated_by": "sentence"}))] * 2
    assert state_of(pairs)["transcript"][0]["text"] == "Sure."


def test_chat_input_is_marked_typed_once():
    pairs = [
        ("from-client", m("send-text", {"content": "Book a table"})),
        ("to-client", m("user-input", {"text": "Book a table", "input_type": "chat", "msg_id": "1"})),
    ]
    (item,) = state_of(pairs)["transcript"]
    assert (item["role"], item["source"], item["text"]) == ("user", "chat", "Book a table")


def test_turn_latency_runs_from_user_stopped_to_bot_started_speaking():
    state = state_of(pipecat_conversation(3), step=0.05)
    assert len(state["turns"]) == 3
    for turn in state["turns"]:
        assert turn["latency_ms"] == round((turn["bot_started_at"] - turn["user_stopped_at"]) * 1000, 3)
        assert turn["llm_ttfb_ms"] == 310.0 and turn["tts_ttfb_ms"] == 120.0
    latencies = sorted(t["latency_ms"] for t in state["turns"])
    assert state["latency"] == {"p50": latencies[1], "p95": latencies[2], "max": latencies[2]}


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


def test_a_user_who_speaks_over_the_bot_is_an_interruption():
    pairs = [
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-started-speaking")),
        ("to-client", m("user-started-speaking")),
        ("to-client", m("bot-interrupted")),
    ]
    state = state_of(pairs, step=0.2)
    assert state["interruptions"] == [T0 + 0.4]  # bot-interrupted right after is the same one
    assert state["turns"][0]["interrupted"]


def test_llm_and_tts_activity():
    state = state_of(pipecat_turn("Hi", ["Sure thing."])[:-4])  # LLM done, TTS still speaking
    assert state["llm"]["busy"] is False and state["llm"]["current_tokens"] == "Sure thing."
    assert state["llm"]["last_user_llm_text"] == "Hi"
    assert state["tts"]["busy"] is True and state["tts"]["current_text"] == "Sure thing."


def test_function_calls_are_correlated_by_tool_call_id():
    state = state_of(pipecat_turn("Where is it", ["Found it."], function_call=True), step=0.1)
    (call,) = state["function_calls"]
    assert call["tool_call_id"] == "call_7" and call["function_name"] == "lookup_order"
    assert call["status"] == "completed" and call["duration_ms"] == 200.0


def test_a_client_handled_function_call_gets_its_result():
    pairs = [("to-client", VALID["llm-function-call"]), ("from-client", VALID["llm-function-call-result"])]
    (call,) = state_of(pairs)["function_calls"]
    assert call["args"] == {"city": "Oslo"} and call["result"] == {"temp": 3} and call["status"] == "completed"


def test_a_cancelled_function_call():
    pairs = [
        ("to-client", m("llm-function-call-in-progress", {"tool_call_id": "c9"})),
        ("to-client", m("llm-function-call-stopped", {"tool_call_id": "c9", "cancelled": True})),
    ]
    assert state_of(pairs)["function_calls"][0]["status"] == "cancelled"


def test_client_messages_are_correlated_with_their_responses():
    pairs = [
        ("from-client", VALID["client-message"]),
        ("to-client", VALID["server-response"]),
        ("from-client", m("client-message", {"t": "x"}, id="c2")),
        ("to-client", VALID["error-response"]),
    ]
    requests = state_of(pairs, step=0.25)["client_messages"]
    assert [(r["id"], r["status"], r["response_ms"]) for r in requests] == [
        ("c1", "answered", 250.0),
        ("c2", "failed", 250.0),
    ]


def test_a_fatal_error_ends_the_session():
    state = state_of([("to-client", m("error", {"error": "quota", "fatal": True}))])
    assert state["fatal"] and state["ended"] and state["errors"][0]["message"] == "quota"


def test_metrics_are_series_in_milliseconds_with_totals():
    state = state_of(pipecat_conversation(2))
    ttfb = state["metrics"]["ttfb"]["OpenAILLMService#0|gpt-4o"]
    assert [v for _, v in ttfb] == [0, 310.0, 310.0]
    assert state["metrics"]["processing"]["OpenAILLMService#0|gpt-4o"][0][1] == 900.0
    assert state["totals"]["total_tokens"] == 276 and state["totals"]["prompt_tokens"] == 240
    assert state["metrics"]["tokens"]["|"][0][1] == 138
    assert state["totals"]["characters"] > 0


def test_the_protocol_version_and_abouts_are_recorded():
    state = state_of(pipecat_conversation(1))
    assert state["protocol_version"] == "2.1.0"
    assert state["client_about"]["library"] == "@pipecat-ai/client-js" and state["bot_about"] == {"name": "support"}


def test_counts_by_type_invalid_and_unknown():
    pairs = [
        ("to-client", VALID["bot-ready"]),
        ("to-client", m("mystery")),
        ("to-client", m("user-transcription", {"final": 1})),
    ]
    counts = replay(events(pairs)).to_dict()["counts"]
    assert counts["total"] == 3 and counts["invalid"] == 1 and counts["unknown"] == 1
    assert counts["by_type"] == {"bot-ready": 1, "mystery": 1, "user-transcription": 1}


def test_a_duplicated_seq_is_applied_once():
    state = SessionState()
    event = events([("to-client", m("bot-llm-text", {"text": "a"}))])[0]
    state.apply(event)
    state.apply(event)
    assert state.counts["total"] == 1 and state.llm["current_tokens"] == "a"


def test_the_state_is_json():
    json.dumps(state_of(pipecat_conversation(3)))


# --- properties --------------------------------------------------------------

MESSAGES = st.one_of(
    st.sampled_from([message for _, message in pipecat_conversation(3)] + list(VALID.values())),
    st.builds(
        lambda t, d: {"label": "rtvi-ai", "type": t, "data": d},
        st.sampled_from(sorted(VALID)),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=5),
            st.dictionaries(
                st.sampled_from(["text", "final", "value", "ttfb", "tool_call_id", "fatal"]),
                st.one_of(
                    st.none(),
                    st.booleans(),
                    st.integers(),
                    st.text(max_size=5),
                    st.lists(
                        st.dictionaries(
                            st.sampled_from(["value", "processor"]), st.one_of(st.integers(), st.text(max_size=3))
                        ),
                        max_size=2,
                    ),
                ),
                max_size=3,
            ),
        ),
    ),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
EVENTS = st.lists(
    st.tuples(st.integers(1, 60), st.sampled_from(["to-client", "from-client"]), st.floats(0, 100), MESSAGES),
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
    json.dumps(d)
    # counts add up: one per distinct seq
    assert d["counts"]["total"] == len({e.seq for e in evs}) == sum(d["counts"]["by_type"].values())
    # a lane's intervals never overlap themselves and run forward
    for intervals in d["intervals"].values():
        for (a0, a1), (b0, _) in itertools.pairwise(intervals):
            assert a1 is not None and a0 <= a1 <= b0
    # no bot item repeats a sentence back to back
    for item in d["transcript"]:
        if item["role"] == "bot" and item["source"] in ("bot-output", "bot-transcription"):
            parts = item["text"].split(". ")
            assert all(x != y for x, y in itertools.pairwise(parts)) or len(set(parts)) < len(parts)


@settings(max_examples=150, deadline=None)
@given(EVENTS)
def test_replay_equals_incremental_and_is_deterministic(raw):
    evs = to_events(raw)
    live = SessionState()
    for e in evs:
        live.apply(e)
    assert live.to_dict() == replay(evs).to_dict() == replay(list(evs)).to_dict()


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.randoms())
def test_a_real_conversation_resent_with_duplicates_shows_each_sentence_once(turns, rnd):
    evs = events(pipecat_conversation(turns))
    noisy = evs + rnd.sample(evs, k=len(evs) // 3)  # a reconnecting bot resends some
    rnd.shuffle(noisy[len(evs) :])
    text = [t["text"] for t in replay(noisy).to_dict()["transcript"] if t["role"] == "bot"]
    assert text == [t["text"] for t in replay(evs).to_dict()["transcript"] if t["role"] == "bot"]
    for line in text:
        sentences = [s for s in line.replace("!", ".").replace("?", ".").split(".") if s.strip()]
        assert len(sentences) == len(set(sentences))
