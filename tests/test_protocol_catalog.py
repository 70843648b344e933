"""rtvi_monitor.protocol: the catalog and validation, on messages as real bots send them."""

import json

import pytest

from rtvi_monitor.protocol import (
    CATALOG,
    MAX_RAW,
    SPEC_TYPES,
    default_direction,
    normalized_version,
    protocol_version,
    validate,
    version_family,
    with_defaults,
)
from tests.rtvi_samples import INVALID, VALID, m


def test_the_catalog_has_every_spec_type():
    assert len(SPEC_TYPES) == 27
    assert {"client-ready", "bot-llm-search-response", "append-to-context", "metrics", "error-response"} <= SPEC_TYPES


def test_the_catalog_has_what_pipecat_sends_beyond_the_spec():
    extras = {
        "user-input",
        "bot-output",
        "bot-interrupted",
        "llm-function-call-started",
        "llm-function-call-in-progress",
        "llm-function-call-stopped",
        "vad-user-started-speaking",
        "user-mute-started",
        "user-audio-level",
        "system-log",
        "stt-raw-text",
        "llm-raw-text",
        "tts-raw-text",
        "dtmf",
        "ui-event",
        "ui-command",
    }
    assert extras <= set(CATALOG) - SPEC_TYPES


def test_every_catalog_type_has_a_valid_example():
    assert set(VALID) == set(CATALOG)


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_example_passes(name):
    result = validate(VALID[name])
    assert result.valid and result.known and result.error == "" and result.type == name


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_example_passes_as_json_text(name):
    assert validate(json.dumps(VALID[name])).valid


@pytest.mark.parametrize("name", sorted(INVALID))
def test_an_invalid_example_says_what_and_where(name):
    message, words = INVALID[name]
    result = validate(message)
    assert not result.valid and result.known and result.type == name
    assert words in result.error
    assert json.loads(result.raw) == message


def test_the_envelope_label_must_be_exact():
    assert validate({"label": "rtvi", "type": "bot-ready"}).error == 'label: expected "rtvi-ai", got "rtvi"'
    assert "label" in validate({"type": "bot-ready"}).error


def test_the_type_must_be_a_non_empty_string():
    assert validate({"label": "rtvi-ai", "type": ""}).error.startswith("type: expected a non-empty string")
    assert validate({"label": "rtvi-ai"}).error == "type: expected a non-empty string, missing"
    assert "got 7" in validate({"label": "rtvi-ai", "type": 7}).error


def test_the_id_must_be_a_string():
    assert validate(m("bot-ready", {"version": "1.0.0"}, id=3)).error == "id: expected a string, got 3"


def test_an_unknown_type_with_a_valid_envelope_is_kept_and_marked_unknown():
    result = validate(m("bot-thinks-hard", {"x": 1}))
    assert result.valid and not result.known and result.type == "bot-thinks-hard"


def test_non_json_is_invalid_with_its_raw_text():
    result = validate("{not json")
    assert not result.valid and result.error.startswith("not JSON") and result.raw == "{not json"
    assert result.message is None


def test_a_json_value_that_is_not_an_object_is_invalid():
    assert validate("[1, 2]").error == "expected a JSON object, got [1, 2]"


def test_a_huge_invalid_message_keeps_a_truncated_raw_text():
    result = validate("x" * (MAX_RAW * 3))
    assert len(result.raw) < MAX_RAW + 100 and "truncated" in result.raw


def test_extra_fields_are_tolerated_anywhere():
    message = m("user-transcription", {"text": "a", "final": True, "language": "en", "extra": {"x": 1}}, extra="y")
    assert validate(message).valid


def test_pipecat_error_text_in_error_and_the_specs_in_message_are_both_read():
    assert validate(m("error", {"error": "boom", "fatal": True})).valid
    assert validate(m("error", {"message": "boom", "fatal": False})).valid


def test_metrics_real_bots_send_are_valid():
    for data in (
        {},  # Pipecat sends these for kinds it does not map
        {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.1205}]},  # seconds
        {"tokens": [{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}]},  # no processor
        {"ttfa": [{"processor": "p", "value": 0.5}], "characters": [{"processor": "tts", "value": 42}]},
        {"processing": [{"processor": "p", "value": 0}]},  # start-of-session zero
    ):
        assert validate(m("metrics", data)).valid, data


def test_messages_without_data_are_valid_when_no_field_is_required():
    assert validate(m("bot-llm-started")).valid
    assert validate(m("client-ready")).valid  # 1.x clients send little


def test_send_text_options_default_to_true():
    assert with_defaults("send-text", {"content": "x"})["options"] == {"run_immediately": True, "audio_response": True}
    assert with_defaults("send-text", {"content": "x", "options": {"audio_response": False}})["options"] == {
        "run_immediately": True,
        "audio_response": False,
    }


def test_append_to_context_is_deprecated_and_runs_later_by_default():
    assert CATALOG["append-to-context"].deprecated
    assert with_defaults("append-to-context", {"role": "user", "content": "x"})["run_immediately"] is False


def test_directions_follow_the_sender():
    assert default_direction("client-ready") == "from-client"
    assert default_direction("send-text") == "from-client"
    assert default_direction("bot-ready") == "to-client"
    assert default_direction("never-heard-of-it") == "to-client"


@pytest.mark.parametrize(
    "version,normal,family",
    [("1.0.0", "1.0.0", "1.x"), ("1.0", "1.0.0", "1.x"), ("2.1.0", "2.1.0", "2.x"), ("x", "x", "unknown")],
)
def test_versions_are_read_from_ready_messages(version, normal, family):
    assert protocol_version(m("client-ready", {"version": version})) == version
    assert normalized_version(version) == normal and version_family(version) == family
    assert protocol_version(m("bot-llm-started")) is None


@pytest.mark.parametrize(
    "garbage", [None, 3, [], "", b"\xff\xfe", {"label": "rtvi-ai", "type": "metrics", "data": {"ttfb": 5}}]
)
def test_validation_never_raises(garbage):
    assert validate(garbage if garbage is not None else "null").valid is False
