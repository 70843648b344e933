"""rtvi_monitor.core.protocol: the catalog and validation, on messages as real bots send them."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.core.protocol import (
    CATALOG,
    LABEL,
    MAX_RAW,
    SPEC_TYPES,
    FieldSpec,
    MessageType,
    Validated,
    default_direction,
    protocol_version,
    validate,
)
from tests.rtvi_samples import (
    INVALID,
    VALID,
    barge_in_turn,
    chat_turn,
    legacy_v1_turn,
    m,
    pipecat_conversation,
    pipecat_conversation_pairs,
)

# The 27 message types of RTVI 1.0, as the spec lists them under Events.
SPEC = {
    "client-ready", "bot-ready", "disconnect-bot", "error",
    "user-started-speaking", "user-stopped-speaking", "bot-started-speaking", "bot-stopped-speaking",
    "user-transcription", "bot-transcription",
    "server-message", "client-message", "server-response", "error-response",
    "send-text", "append-to-context", "llm-function-call", "llm-function-call-result", "bot-llm-search-response",
    "bot-llm-started", "bot-llm-stopped", "user-llm-text", "bot-llm-text",
    "bot-tts-started", "bot-tts-stopped", "bot-tts-text",
    "metrics",
}  # fmt: skip

# What the field notes list beyond the spec, and what Pipecat 1.14's RTVI models add.
PIPECAT_EXTRAS = {
    "user-input", "bot-output", "bot-interrupted",
    "llm-function-call-started", "llm-function-call-in-progress", "llm-function-call-stopped",
    "vad-user-started-speaking", "vad-user-stopped-speaking", "user-mute-started", "user-mute-stopped",
    "user-audio-level", "bot-audio-level", "system-log", "stt-raw-text", "llm-raw-text", "tts-raw-text",
    "bot-llm-marker", "ui-command", "ui-job-group", "dtmf", "send-file", "ui-event", "ui-snapshot", "raw-audio",
    "llm-function-call-start", "config", "action-response",
    "bot-tts-audio", "ui-cancel-job-group", "raw-audio-batch",
}  # fmt: skip
# The bot package's own, never sent to a client (docs/PROTOCOL.md): a turn's latency contributions.
DASHBOARD_TYPES = {"rtvi-dashboard-latency"}


# --- the catalog ---------------------------------------------------------------


def test_the_catalog_has_the_27_spec_types_marked_in_spec():
    assert SPEC_TYPES == SPEC and len(SPEC) == 27
    assert all(CATALOG[name].in_spec for name in SPEC)


def test_the_catalog_has_every_pipecat_extra_marked_not_in_spec():
    assert set(CATALOG) - SPEC == PIPECAT_EXTRAS | DASHBOARD_TYPES
    assert not any(CATALOG[name].in_spec for name in PIPECAT_EXTRAS | DASHBOARD_TYPES)


def test_catalog_entries_name_their_sender_fields_and_description():
    for name, spec in CATALOG.items():
        assert isinstance(spec, MessageType) and spec.name == name
        assert spec.sender in ("bot", "client") and spec.description
        assert all(isinstance(f, FieldSpec) for f in spec.fields)


def test_the_spec_senders_are_recorded():
    clients = {n for n in SPEC if CATALOG[n].sender == "client"}
    assert clients == {
        "client-ready",
        "disconnect-bot",
        "client-message",
        "send-text",
        "append-to-context",
        "llm-function-call-result",
    }


def test_deprecations_are_recorded():
    assert CATALOG["append-to-context"].deprecated and CATALOG["bot-transcription"].deprecated
    assert not CATALOG["send-text"].deprecated and not CATALOG["bot-output"].deprecated


def test_every_catalog_type_has_a_valid_example():
    assert set(VALID) == set(CATALOG)
    assert LABEL == "rtvi-ai"


# --- valid and invalid examples of every type ------------------------------------


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_example_passes(name):
    result = validate(VALID[name])
    assert result == Validated(VALID[name], name, True, True, "", "")


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_example_passes_as_json_text_and_bytes(name):
    text = json.dumps(VALID[name])
    assert validate(text).valid and validate(text.encode()).valid
    assert validate(text).message == VALID[name]


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_example_says_what_and_where(case):
    message, words = INVALID[case]
    result = validate(message)
    assert not result.valid and result.known and result.type == message["type"]
    assert words in result.error
    assert json.loads(result.raw) == message  # the message as it came, for the operator


def test_every_type_with_data_fields_has_an_invalid_example():
    covered = {message["type"] for message, _ in INVALID.values()}
    assert {name for name, spec in CATALOG.items() if spec.fields} <= covered


def test_it_reports_a_non_boolean_final():
    result = validate(m("user-transcription", {"text": "hi", "final": "yes", "user_id": "u", "timestamp": "t"}))
    assert result.error == 'data.final: expected a boolean, got "yes"'


def test_it_reports_a_missing_required_field():
    assert validate(m("user-transcription", {"text": "hi"})).error == "data.final: required, missing"


def test_an_invalid_message_given_as_text_keeps_that_text():
    text = '{"label": "rtvi-ai", "type": "bot-tts-text", "data": {"text": 3}}'
    result = validate(text)
    assert result.raw == text and result.message == json.loads(text)


# --- messages real bots send -----------------------------------------------------------


@pytest.mark.parametrize(
    "pairs",
    [
        pipecat_conversation_pairs(3),
        pipecat_conversation_pairs(3, word_timestamps=True),
        pipecat_conversation_pairs(3, client_version="1.0.0", word_timestamps=True),
        chat_turn("One more thing", "Sorry?"),
        barge_in_turn("Where is my order?", ["Let me check.", "It ships today."], 1),
        legacy_v1_turn("Hi", ["Hello.", "How can I help?"], words=True),
    ],
    ids=["pipecat-2x", "pipecat-2x-word-tts", "pipecat-1x-client-word-tts", "chat", "barge-in", "old-1x-bot"],
)
def test_every_message_of_a_real_session_is_valid_and_known(pairs):
    for direction, message in pairs:
        result = validate(message)
        assert result.valid and result.known, (message, result.error)
        assert default_direction(result.type) == direction


def test_metrics_real_bots_send_are_valid():
    for data in (
        {},  # Pipecat sends these for metric kinds it does not map
        {"ttfb": [{"processor": "OpenAILLMService#0", "value": 0.0}], "processing": []},  # start-of-session zeros
        {"ttfb": [{"processor": "OpenAILLMService#0", "model": "", "value": 0.1205}]},  # seconds, empty model
        {"tokens": [{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "cache_read_input_tokens": 0}]},
        {"ttfat": [{"processor": "p", "model": "m", "ttfat": 0.52, "ttfb": 0.51, "thinking_time": 0.01}]},
        {"ttfa": [{"processor": "p", "ttfa": 0.2, "ttfb": 0.15, "leading_silence": 0.05}]},
        {"ttfa": [{"processor": "p", "value": 0.2}]},  # as the field notes describe it
        {"stt_usage": [{"processor": "DeepgramSTTService#0", "model": "nova-3", "value": {"audio_seconds": 1.5}}]},
        {"characters": [{"processor": "tts", "value": 42}], "text_aggregation": [{"processor": "x", "value": 0.001}]},
    ):
        assert validate(m("metrics", data)).valid, data


def test_metric_values_must_be_finite_numbers():
    # NaN is not JSON at all (Python's parser would take it); infinity and huge figures are out of bounds.
    assert validate('{"label":"rtvi-ai","type":"metrics","data":{"ttfb":[{"processor":"p","value":NaN}]}}').error == (
        "not JSON: NaN is not JSON"
    )
    assert "expected a number up to 1e15" in validate(m("metrics", {"ttfb": [{"value": math.inf}]})).error
    assert "expected a number up to 1e15" in validate(m("metrics", {"ttfb": [{"value": 1e16}]})).error
    assert validate(m("metrics", {"ttfat": [{"processor": "p"}]})).error == (
        "data.ttfat[0].value: expected a number up to 1e15, got null"
    )
    assert validate(m("metrics", {"tokens": [5]})).error == "data.tokens[0]: expected an object, got 5"
    huge_audio = {"stt_usage": [{"processor": "p", "model": "nova-3", "value": {"audio_seconds": 1e308}}]}
    assert validate(m("metrics", huge_audio)).error.startswith(
        "data.stt_usage[0].value.audio_seconds: expected a number up to 1e15"
    )  # it would make the session's cost infinite
    assert validate(m("metrics", {"ttfb": [{"value": 1, "processor": 3}]})).error.startswith("data.ttfb[0].processor")


def test_pipecat_error_text_in_error_and_the_specs_in_message_are_both_read():
    assert validate(m("error", {"error": "boom", "fatal": True})).valid
    assert validate(m("error", {"message": "boom", "fatal": False})).valid
    assert validate(m("error", {"message": 5, "fatal": True})).error == "data.message: expected a string, got 5"


def test_the_function_call_result_takes_the_specs_args_and_pipecats_arguments():
    for key in ("args", "arguments"):
        data = {"function_name": "f", "tool_call_id": "c", key: {"a": 1}, "result": "ok"}
        assert validate(m("llm-function-call-result", data)).valid


def test_near_empty_function_call_reports_are_valid():
    # function_call_report_level NONE: no names, no arguments.
    for message in (
        m("llm-function-call-started", {}),
        m("llm-function-call-in-progress", {"tool_call_id": "c"}),
        m("llm-function-call-stopped", {"tool_call_id": "c", "cancelled": True}),
    ):
        assert validate(message).valid


def test_messages_without_data_are_valid_when_no_field_is_required():
    assert validate(m("bot-llm-started")).valid
    assert validate(m("client-ready")).valid  # early 1.x clients sent little
    assert validate(m("bot-llm-started", "whatever")).valid  # a type with no fields tolerates any data


def test_extra_fields_are_tolerated_anywhere():
    message = m("user-transcription", {"text": "a", "final": True, "language": "en", "extra": {"x": 1}}, extra="y")
    assert validate(message).valid


def test_null_optional_fields_are_tolerated():
    assert validate(m("bot-output", {"text": "a", "segment_id": None, "spoken": None})).valid


# --- the envelope ------------------------------------------------------------------------


def test_the_envelope_label_must_be_exact():
    assert validate({"label": "rtvi", "type": "bot-ready"}).error == 'label: expected "rtvi-ai", got "rtvi"'
    missing = validate({"type": "bot-ready"})
    assert missing.error == 'label: expected "rtvi-ai", missing' and missing.type == "bot-ready" and missing.known


def test_the_type_must_be_a_non_empty_string():
    assert validate({"label": "rtvi-ai", "type": ""}).error == 'type: expected a non-empty string, got ""'
    assert validate({"label": "rtvi-ai"}).error == "type: expected a non-empty string, missing"
    assert validate({"label": "rtvi-ai", "type": 7}).error == "type: expected a non-empty string, got 7"


def test_the_id_is_optional_and_must_be_a_string():
    assert validate(m("bot-ready", {"version": "1.0.0"})).valid
    assert validate(m("bot-ready", {"version": "1.0.0"}, id=3)).error == "id: expected a string, got 3"


def test_an_unknown_type_with_a_valid_envelope_is_kept_and_marked_unknown():
    result = validate(m("bot-thinks-hard", {"x": 1}))
    assert result == Validated(m("bot-thinks-hard", {"x": 1}), "bot-thinks-hard", True, False, "", "")


def test_non_json_is_invalid_with_its_raw_text():
    result = validate("{not json")
    assert not result.valid and result.message is None and result.type == ""
    assert result.error == "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"
    assert result.raw == "{not json"


def test_a_json_value_that_is_not_an_object_is_invalid():
    assert validate("[1, 2]").error == "expected a JSON object, got [1, 2]"
    assert validate(b'"text"').error == 'expected a JSON object, got "text"'


def test_a_huge_invalid_message_keeps_a_truncated_raw_text():
    result = validate("x" * (MAX_RAW * 3))
    assert result.raw.startswith("x" * MAX_RAW) and result.raw.endswith(f"[truncated, {MAX_RAW * 3} characters in all]")


def test_a_valid_message_keeps_no_raw_text():
    assert validate(json.dumps(VALID["metrics"])).raw == ""


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        3,
        [],
        "",
        "null",
        b"\xff\xfe",
        "[" * 100_000,
        {"label": "rtvi-ai", "type": "metrics", "data": {"ttfb": 5}},
        {"label": "rtvi-ai", "type": "bot-tts-text", "data": {"text": {1, 2}}},  # not even JSON-serializable
        {"label": {"deep": [1] * 1000}, "type": "x"},
    ],
)
def test_validation_never_raises(garbage):
    result = validate(garbage)
    assert result.valid is False and result.error


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
MESSAGES = st.builds(
    lambda t, d, extra: {"label": "rtvi-ai", "type": t, "data": d, **extra},
    st.sampled_from(sorted(CATALOG)),
    st.dictionaries(
        st.sampled_from(["text", "final", "version", "error", "message", "fatal", "t", "ttfb", "tokens", "result"]),
        JSON,
        max_size=4,
    )
    | JSON,
    st.dictionaries(st.sampled_from(["id", "label", "type"]), JSON, max_size=1),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(JSON, MESSAGES, st.text(max_size=40), st.binary(max_size=40)))
def test_any_input_gets_an_answer_and_never_an_exception(value):
    result = validate(value)
    assert isinstance(result, Validated)
    if result.valid:
        assert result.error == "" and result.raw == "" and isinstance(result.message, dict)
        assert result.type and result.known == (result.type in CATALOG)
    else:
        assert result.error and len(result.raw) <= MAX_RAW + 60


# --- defaults, directions, versions ----------------------------------------------------


def test_append_to_context_is_deprecated():
    assert CATALOG["append-to-context"].deprecated


def test_directions_follow_the_sender():
    assert default_direction("client-ready") == "from-client"
    assert default_direction("send-text") == "from-client"
    assert default_direction("ui-cancel-job-group") == "from-client"
    assert default_direction("bot-ready") == "to-client"
    assert default_direction("never-heard-of-it") == "to-client"


@pytest.mark.parametrize("version", ["1.0.0", "1.0", "2.1.0", "2.2.0", "v2.1", "0.3.0", "x"])
def test_versions_are_read_from_ready_messages(version):
    assert protocol_version(m("client-ready", {"version": version})) == version
    assert protocol_version(m("bot-ready", {"version": f" {version} "})) == version


def test_other_messages_declare_no_version():
    assert protocol_version(m("bot-llm-started")) is None
    assert protocol_version(m("bot-ready", {"version": 2})) is None
    assert protocol_version(m("bot-ready", {"version": " "})) is None
    assert protocol_version("junk") is None


def test_a_real_session_declares_its_versions():
    messages = pipecat_conversation(1, client_version="1.0.0")
    versions = [protocol_version(message) for message in messages if protocol_version(message)]
    assert versions == ["1.0.0", "1.0.0"]  # Pipecat echoes a 1.x client's version
