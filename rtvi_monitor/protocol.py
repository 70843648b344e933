"""The RTVI message catalog and validation. Plain Python: no I/O, no Django.

Covers the 27 types of RTVI 1.0 (the spec) and the types current Pipecat
sends or accepts beyond it (FIELD_NOTES.md), with the tolerances real bots
need: `error` text in `error` or `message`, metric values in seconds,
`metrics` with `data: {}`, `tokens` entries without a processor, extra fields
anywhere. Validation never raises: it answers what is wrong, and where.
"""

import json
from dataclasses import dataclass
from typing import Any

LABEL = "rtvi-ai"
MAX_RAW = 8 * 1024  # raw text kept for an invalid message

BOT, CLIENT = "bot", "client"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str  # string | boolean | number | object | array | any | string_or_object | metric_list
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class MessageType:
    name: str
    sender: str  # "bot" or "client"
    fields: tuple[FieldSpec, ...] = ()
    in_spec: bool = True
    deprecated: bool = False
    description: str = ""


def _req(name: str, kind: str) -> FieldSpec:
    return FieldSpec(name, kind, required=True)


def _opt(name: str, kind: str, default: Any = None) -> FieldSpec:
    return FieldSpec(name, kind, required=False, default=default)


def _t(name, sender, *fields, in_spec=True, deprecated=False, description=""):
    return MessageType(name, sender, tuple(fields), in_spec, deprecated, description)


_TYPES = [
    # --- RTVI 1.0: connection management
    _t("client-ready", CLIENT, _opt("version", "string"), _opt("about", "object"), description="Client ready"),
    _t("bot-ready", BOT, _opt("version", "string"), _opt("about", "any"), description="Bot ready"),
    _t("disconnect-bot", CLIENT, description="Client no longer wishes to interact"),
    # Pipecat sends {"error", "fatal"}; the spec and client-js say "message".
    _t(
        "error",
        BOT,
        _opt("message", "string"),
        _opt("error", "string"),
        _opt("fatal", "boolean", False),
        description="Bot error; fatal ends the session",
    ),
    # --- transcription and speaking state
    _t("user-started-speaking", BOT),
    _t("user-stopped-speaking", BOT),
    _t("bot-started-speaking", BOT),
    _t("bot-stopped-speaking", BOT),
    _t(
        "user-transcription",
        BOT,
        _req("text", "string"),
        _req("final", "boolean"),
        _opt("timestamp", "string"),
        _opt("user_id", "string"),
    ),
    _t(
        "bot-transcription",
        BOT,
        _req("text", "string"),
        deprecated=True,
        description="What the LLM wrote, per sentence",
    ),
    # --- client-server messaging
    _t("server-message", BOT, description="Any JSON the application chooses"),
    _t("client-message", CLIENT, _req("t", "string"), _opt("d", "any")),
    _t("server-response", BOT, _req("t", "string"), _opt("d", "any")),
    _t("error-response", BOT, _req("error", "string")),
    # --- LLM interaction
    _t("send-text", CLIENT, _req("content", "string"), _opt("options", "object")),
    _t(
        "append-to-context",
        CLIENT,
        _req("role", "string"),
        _req("content", "any"),
        _opt("run_immediately", "boolean", False),
        deprecated=True,
        description="Deprecated in favour of send-text",
    ),
    _t(
        "llm-function-call",
        BOT,
        _req("function_name", "string"),
        _req("tool_call_id", "string"),
        _opt("args", "object"),
    ),
    _t(
        "llm-function-call-result",
        CLIENT,
        _req("function_name", "string"),
        _req("tool_call_id", "string"),
        _opt("args", "object"),
        _req("result", "string_or_object"),
    ),
    _t(
        "bot-llm-search-response",
        BOT,
        _opt("search_result", "string"),
        _opt("rendered_content", "string"),
        _opt("origins", "array"),
    ),
    # --- service insights
    _t("bot-llm-started", BOT),
    _t("bot-llm-stopped", BOT),
    _t("user-llm-text", BOT, _req("text", "string")),
    _t("bot-llm-text", BOT, _req("text", "string")),
    _t("bot-tts-started", BOT),
    _t("bot-tts-stopped", BOT),
    _t("bot-tts-text", BOT, _req("text", "string")),
    # --- metrics
    _t(
        "metrics",
        BOT,
        _opt("processing", "metric_list"),
        _opt("ttfb", "metric_list"),
        _opt("characters", "metric_list"),
        _opt("tokens", "array"),
        _opt("ttfa", "metric_list"),
        _opt("ttfat", "metric_list"),
        _opt("stt_usage", "array"),
    ),
    # --- what current Pipecat sends or accepts beyond the spec
    _t(
        "user-input",
        BOT,
        _req("text", "string"),
        _opt("input_type", "string"),
        _opt("msg_id", "string"),
        in_spec=False,
        description="User text: beside every transcription, and chat input",
    ),
    _t(
        "bot-output",
        BOT,
        _req("text", "string"),
        _opt("spoken", "boolean"),
        _opt("aggregated_by", "string"),
        _opt("segment_id", "any"),
        _opt("will_be_spoken", "boolean"),
        _opt("spoken_status", "string"),
        _opt("spoken_progress", "any"),
        in_spec=False,
        description="What the bot says, v1 and v2",
    ),
    _t("bot-interrupted", BOT, in_spec=False),
    _t(
        "llm-function-call-started", BOT, _opt("function_name", "string"), _opt("tool_call_id", "string"), in_spec=False
    ),
    _t(
        "llm-function-call-in-progress",
        BOT,
        _opt("function_name", "string"),
        _opt("tool_call_id", "string"),
        _opt("arguments", "any"),
        in_spec=False,
    ),
    _t(
        "llm-function-call-stopped",
        BOT,
        _opt("function_name", "string"),
        _opt("tool_call_id", "string"),
        _opt("cancelled", "boolean"),
        _opt("result", "any"),
        in_spec=False,
    ),
    _t("llm-function-call-start", BOT, _opt("function_name", "string"), in_spec=False, deprecated=True),
    _t("vad-user-started-speaking", BOT, in_spec=False),
    _t("vad-user-stopped-speaking", BOT, in_spec=False),
    _t("user-mute-started", BOT, in_spec=False),
    _t("user-mute-stopped", BOT, in_spec=False),
    _t("user-audio-level", BOT, _req("value", "number"), in_spec=False),
    _t("bot-audio-level", BOT, _req("value", "number"), in_spec=False),
    _t("system-log", BOT, _opt("text", "string"), in_spec=False),
    _t("stt-raw-text", BOT, _opt("text", "string"), in_spec=False),
    _t("llm-raw-text", BOT, _opt("text", "string"), in_spec=False),
    _t("tts-raw-text", BOT, _opt("text", "string"), in_spec=False),
    _t("bot-llm-marker", BOT, in_spec=False),
    _t("ui-command", BOT, in_spec=False),
    _t("ui-job-group", BOT, in_spec=False),
    _t("config", BOT, in_spec=False, deprecated=True),
    _t("action-response", BOT, in_spec=False, deprecated=True),
    _t("dtmf", CLIENT, in_spec=False),
    _t("send-file", CLIENT, in_spec=False),
    _t("ui-event", CLIENT, in_spec=False),
    _t("ui-snapshot", CLIENT, in_spec=False),
    _t("raw-audio", CLIENT, in_spec=False),
]

CATALOG: dict[str, MessageType] = {t.name: t for t in _TYPES}
SPEC_TYPES = frozenset(t.name for t in _TYPES if t.in_spec)

SEND_TEXT_OPTION_DEFAULTS = {"run_immediately": True, "audio_response": True}


@dataclass(frozen=True, slots=True)
class Validated:
    message: dict | None  # the parsed object (None when not parseable or not an object)
    type: str  # "" when none could be read
    valid: bool
    known: bool
    error: str  # "" when valid; else what is wrong and where
    raw: str  # the raw text (truncated) when invalid, else ""


def _describe(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


_KIND_CHECKS = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "boolean": (lambda v: isinstance(v, bool), "a boolean"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "array": (lambda v: isinstance(v, list), "an array"),
    "string_or_object": (lambda v: isinstance(v, (str, dict)), "a string or an object"),
    "any": (lambda v: True, "anything"),
}


def _check_metric_list(name: str, value: Any) -> str:
    if not isinstance(value, list):
        return f"data.{name}: expected an array, got {_describe(value)}"
    for i, entry in enumerate(value):
        where = f"data.{name}[{i}]"
        if not isinstance(entry, dict):
            return f"{where}: expected an object, got {_describe(entry)}"
        number = entry.get("value")
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return f"{where}.value: expected a number, got {_describe(number)}"
        for key in ("processor", "model"):
            if key in entry and entry[key] is not None and not isinstance(entry[key], str):
                return f"{where}.{key}: expected a string, got {_describe(entry[key])}"
    return ""


def _check_data(spec: MessageType, data: Any) -> str:
    if not spec.fields:
        return ""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return f"data: expected an object, got {_describe(data)}"
    for field in spec.fields:
        if field.name not in data or data[field.name] is None:
            if field.required:
                return f"data.{field.name}: required, missing"
            continue
        value = data[field.name]
        if field.kind == "metric_list":
            error = _check_metric_list(field.name, value)
            if error:
                return error
            continue
        check, expected = _KIND_CHECKS[field.kind]
        if not check(value):
            return f"data.{field.name}: expected {expected}, got {_describe(value)}"
    if spec.name == "error" and not isinstance(data.get("message", data.get("error")), str):
        return "data.message: required (or data.error, as Pipecat sends), missing"
    if spec.name == "send-text" and isinstance(data.get("options"), dict):
        for key in SEND_TEXT_OPTION_DEFAULTS:
            if key in data["options"] and not isinstance(data["options"][key], bool):
                return f"data.options.{key}: expected a boolean, got {_describe(data['options'][key])}"
    if spec.name == "append-to-context" and data.get("role") not in ("user", "assistant"):
        return f"data.role: expected 'user' or 'assistant', got {_describe(data.get('role'))}"
    return ""


def _invalid(message: dict | None, type_: str, error: str, raw: str, known: bool = False) -> Validated:
    if len(raw) > MAX_RAW:
        raw = raw[:MAX_RAW] + f"... [truncated, {len(raw)} characters in all]"
    return Validated(message, type_, False, known, error, raw)


def validate(obj_or_text: dict | str | bytes) -> Validated:
    """Check one RTVI message (parsed, or its JSON text). Never raises."""
    raw = ""
    obj = obj_or_text
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8", "replace")
    if isinstance(obj, str):
        raw = obj
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            return _invalid(None, "", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", raw)
    if not isinstance(obj, dict):
        return _invalid(None, "", f"expected a JSON object, got {_describe(obj)}", raw or _dumps(obj))

    type_ = obj.get("type")
    type_name = type_ if isinstance(type_, str) else ""
    label = obj.get("label")
    if label != LABEL:
        problem = "missing" if label is None else f"got {_describe(label)}"
        return _invalid(
            obj, type_name, f'label: expected "rtvi-ai", {problem}', raw or _dumps(obj), type_name in CATALOG
        )
    if not isinstance(type_, str) or not type_:
        problem = "missing" if type_ is None else f"got {_describe(type_)}"
        return _invalid(obj, "", f"type: expected a non-empty string, {problem}", raw or _dumps(obj))
    if "id" in obj and obj["id"] is not None and not isinstance(obj["id"], str):
        return _invalid(
            obj, type_, f"id: expected a string, got {_describe(obj['id'])}", raw or _dumps(obj), type_ in CATALOG
        )

    spec = CATALOG.get(type_)
    if spec is None:
        return Validated(obj, type_, True, False, "", "")
    error = _check_data(spec, obj.get("data"))
    if error:
        return _invalid(obj, type_, error, raw or _dumps(obj), True)
    return Validated(obj, type_, True, True, "", "")


def _dumps(obj: Any) -> str:
    try:
        return json.dumps(obj)
    except (TypeError, ValueError):
        return repr(obj)


def with_defaults(msg_type: str, data: dict | None) -> dict:
    """The data with the catalog's defaults filled in (send-text options, append-to-context, error.fatal)."""
    data = dict(data or {})
    spec = CATALOG.get(msg_type)
    if spec is None:
        return data
    for field in spec.fields:
        if field.default is not None and data.get(field.name) is None:
            data[field.name] = field.default
    if msg_type == "send-text":
        options = data.get("options") if isinstance(data.get("options"), dict) else {}
        data["options"] = {**SEND_TEXT_OPTION_DEFAULTS, **options}
    return data


def default_direction(msg_type: str) -> str:
    """ "from-client" for client-sent types, "to-client" for bot-sent and unknown ones."""
    spec = CATALOG.get(msg_type)
    return "from-client" if spec is not None and spec.sender == CLIENT else "to-client"


def protocol_version(message: dict) -> str | None:
    """The RTVI version a client-ready or bot-ready message declares."""
    if not isinstance(message, dict) or message.get("type") not in ("client-ready", "bot-ready"):
        return None
    data = message.get("data")
    version = data.get("version") if isinstance(data, dict) else None
    return version.strip() if isinstance(version, str) and version.strip() else None


def normalized_version(version: str) -> str:
    """ "1.0" -> "1.0.0"; leaves anything it cannot read as it is."""
    parts = version.strip().lstrip("v").split(".")
    if all(p.isdigit() for p in parts) and 1 <= len(parts) <= 3:
        return ".".join(parts + ["0"] * (3 - len(parts)))
    return version.strip()


def version_family(version: str) -> str:
    """ "1.x", "2.x" or "unknown"."""
    major = normalized_version(version).split(".")[0]
    return f"{major}.x" if major in ("1", "2") else "unknown"
