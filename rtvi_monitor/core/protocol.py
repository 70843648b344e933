"""The RTVI message catalog and validation. Plain Python: no I/O, no Django.

Covers the 27 types of RTVI 1.0 (the spec) and the types current Pipecat
sends or accepts beyond it (docs/PROTOCOL.md, Pipecat 1.14's RTVI models), with
the tolerances real bots need: `error` text in `error` or `message`, metric
values in seconds, `metrics` with `data: {}`, `tokens` entries without a
processor, `ttfa`/`ttfat` entries that carry their figure under their own
name instead of `value`, extra fields anywhere. Validation never raises: it
answers what is wrong, and where.

It runs on every message a bot sends, so it checks only what the catalog
names, once, and stops at the first problem.
"""

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from rtvi_monitor.core.contributions import LATENCY_TYPE
from rtvi_monitor.core.contributions import check as check_contributions

LABEL = "rtvi-ai"
MAX_RAW = 8 * 1024  # characters of raw text kept for an invalid message
MAX_DEPTH = 32  # nesting of objects and arrays in one message
MAX_TYPE = 64  # characters of a message type (the database column's width)
MAX_ID = 256  # characters of a message id (ids are kept, as keys, for as long as a session lives)
# A session id as bots choose them: not only dots ("." and ".." cannot be put in a URL); \Z, since $ lets a
# trailing newline through.
SESSION_ID_RE = re.compile(r"^(?!\.+\Z)[A-Za-z0-9_.:-]{1,100}\Z")
MAX_NUMBER = 1e15  # largest magnitude of a figure (metric, token count): sums stay finite

BOT, CLIENT = "bot", "client"


@dataclass(frozen=True)
class FieldSpec:
    """One field of a message's `data`."""

    name: str
    # string | boolean | number | object | array | any | string_or_object | metric_list
    kind: str
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class MessageType:
    """One RTVI message type: who sends it and what its `data` holds."""

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


def _extra(name, sender, *fields, deprecated=False, description=""):
    return _t(name, sender, *fields, in_spec=False, deprecated=deprecated, description=description)


_TYPES = [
    # --- RTVI 1.0: connection management
    _t(
        "client-ready",
        CLIENT,
        _opt("version", "string"),
        _opt("about", "object"),
        description="The client is ready; carries its RTVI version and library",
    ),
    _t(
        "bot-ready",
        BOT,
        _opt("version", "string"),
        _opt("about", "any"),
        description="The bot is ready; carries the RTVI version it speaks",
    ),
    _t("disconnect-bot", CLIENT, description="The client no longer wishes to interact with the bot"),
    # Pipecat sends {"error", "fatal"}; the spec and client-js say "message". One of them must be there.
    _t(
        "error",
        BOT,
        _opt("message", "string"),
        _opt("error", "string"),
        _opt("fatal", "boolean", False),
        description="A bot error; a fatal one ends the session",
    ),
    # --- transcription and speaking state
    _t("user-started-speaking", BOT, description="The user started speaking"),
    _t("user-stopped-speaking", BOT, description="The user stopped speaking"),
    _t("bot-started-speaking", BOT, description="The bot started speaking"),
    _t("bot-stopped-speaking", BOT, description="The bot stopped speaking"),
    _t(
        "user-transcription",
        BOT,
        _req("text", "string"),
        _req("final", "boolean"),
        _opt("timestamp", "string"),
        _opt("user_id", "string"),
        deprecated=True,
        description="What the STT heard, partial or final (Pipecat 1.13 deprecates it for user-input)",
    ),
    _t(
        "bot-transcription",
        BOT,
        _req("text", "string"),
        deprecated=True,
        description="What the LLM wrote, per sentence (deprecated for bot-output)",
    ),
    # --- client-server messaging
    _t("server-message", BOT, description="Any JSON the application chooses"),
    _t(
        "client-message",
        CLIENT,
        _req("t", "string"),
        _opt("d", "any"),
        description="An application request; answered by server-response or error-response with its id",
    ),
    # The spec says this type is "given as client-message"; Pipecat and client-js use server-response.
    _t(
        "server-response",
        BOT,
        _req("t", "string"),
        _opt("d", "any"),
        description="The answer to a client-message (same envelope id)",
    ),
    _t(
        "error-response",
        BOT,
        _req("error", "string"),
        description="A failed client request (same envelope id)",
    ),
    # --- LLM interaction
    _t(
        "send-text",
        CLIENT,
        _req("content", "string"),
        _opt("options", "object"),
        description="Text appended to the user context; options default to run_immediately and audio_response true",
    ),
    _t(
        "append-to-context",
        CLIENT,
        _req("role", "string"),
        _req("content", "any"),
        _opt("run_immediately", "boolean", False),
        deprecated=True,
        description="Deprecated in favour of send-text; current Pipecat answers it with error-response",
    ),
    _t(
        "llm-function-call",
        BOT,
        _req("function_name", "string"),
        _req("tool_call_id", "string"),
        _opt("args", "object"),
        deprecated=True,
        description="A function call the client should handle or know about (Pipecat: llm-function-call-in-progress)",
    ),
    # The spec names the arguments `args`; Pipecat's model names them `arguments`.
    _t(
        "llm-function-call-result",
        CLIENT,
        _req("function_name", "string"),
        _req("tool_call_id", "string"),
        _opt("args", "object"),
        _opt("arguments", "object"),
        _req("result", "string_or_object"),
        description="The client's result for a function call",
    ),
    _t(
        "bot-llm-search-response",
        BOT,
        _opt("search_result", "string"),
        _opt("rendered_content", "string"),
        _opt("origins", "array"),
        description="Results of the LLM's built-in search",
    ),
    # --- service insights
    _t("bot-llm-started", BOT, description="LLM processing began"),
    _t("bot-llm-stopped", BOT, description="LLM processing completed"),
    _t("user-llm-text", BOT, _req("text", "string"), description="The aggregated user input sent to the LLM"),
    _t("bot-llm-text", BOT, _req("text", "string"), description="One token streamed from the LLM"),
    _t("bot-tts-started", BOT, description="TTS processing began"),
    _t("bot-tts-stopped", BOT, description="TTS processing completed"),
    _t(
        "bot-tts-text",
        BOT,
        _req("text", "string"),
        description="Text the TTS speaks, per word or sentence (Pipecat 1.13 adds tts-raw-text)",
    ),
    # --- metrics: values are seconds in practice, whatever the spec's "typically milliseconds" says
    _t(
        "metrics",
        BOT,
        _opt("processing", "metric_list"),
        _opt("ttfb", "metric_list"),
        _opt("characters", "metric_list"),
        _opt("ttfa", "metric_list"),
        _opt("ttfat", "metric_list"),
        _opt("tokens", "array"),
        _opt("stt_usage", "array"),
        description="Performance and usage figures: ttfb, processing, characters (spec); tokens, ttfa, ttfat, "
        "stt_usage (Pipecat)",
    ),
    # --- what current Pipecat sends or accepts beyond the spec
    _extra(
        "user-input",
        BOT,
        _req("text", "string"),
        _opt("input_type", "string"),  # transcription | chat | backchannel
        _opt("final", "boolean"),
        _opt("timestamp", "string"),
        _opt("user_id", "string"),
        _opt("msg_id", "string"),
        description="What the user said or typed: beside every transcription, and for send-text (chat)",
    ),
    _extra(
        "bot-output",
        BOT,
        _req("text", "string"),
        _opt("output_type", "string"),
        _opt("text_type", "string"),
        _opt("aggregated_by", "string"),
        _opt("segment_id", "any"),
        _opt("spoken", "boolean"),
        _opt("will_be_spoken", "boolean"),
        _opt("spoken_status", "string"),  # new | in-progress | completed
        _opt("spoken_progress", "object"),
        description="What the bot says, per sentence: v1 {spoken}, v2 {will_be_spoken, spoken_status}",
    ),
    _extra("bot-interrupted", BOT, description="The pipeline was interrupted (sent at every user turn start)"),
    _extra(
        "llm-function-call-started",
        BOT,
        _opt("function_name", "string"),
        description="The LLM called a function (often data: {})",
    ),
    _extra(
        "llm-function-call-in-progress",
        BOT,
        _opt("tool_call_id", "string"),
        _opt("function_name", "string"),
        _opt("arguments", "object"),
        description="A function call is running",
    ),
    _extra(
        "llm-function-call-stopped",
        BOT,
        _opt("tool_call_id", "string"),
        _opt("cancelled", "boolean"),
        _opt("function_name", "string"),
        _opt("result", "any"),
        description="A function call completed or was cancelled",
    ),
    _extra(
        "llm-function-call-start",
        BOT,
        _opt("function_name", "string"),
        deprecated=True,
        description="Older bots' llm-function-call-started",
    ),
    _extra("vad-user-started-speaking", BOT, description="Raw VAD: the user started speaking"),
    _extra("vad-user-stopped-speaking", BOT, description="Raw VAD: the user stopped speaking"),
    _extra("user-mute-started", BOT, description="The user was muted"),
    _extra("user-mute-stopped", BOT, description="The user was unmuted"),
    _extra("user-audio-level", BOT, _req("value", "number"), description="User audio level"),
    _extra("bot-audio-level", BOT, _req("value", "number"), description="Bot audio level"),
    _extra("system-log", BOT, _req("text", "string"), description="A log line from the bot"),
    _extra(
        "stt-raw-text",
        BOT,
        _req("text", "string"),
        _opt("final", "boolean"),
        _opt("timestamp", "string"),
        _opt("user_id", "string"),
        description="A transcription as the STT produced it",
    ),
    _extra("llm-raw-text", BOT, _req("text", "string"), description="A chunk of text as the LLM streamed it"),
    _extra("tts-raw-text", BOT, _req("text", "string"), description="Text the TTS speaks, as it is spoken"),
    _extra(
        "bot-llm-marker",
        BOT,
        _opt("text", "string"),
        _opt("kind", "string"),
        _opt("raw", "string"),
        _opt("markers", "array"),
        description="A sideband marker the LLM emitted",
    ),
    _extra(
        "bot-tts-audio",
        BOT,
        _opt("audio", "string"),
        _opt("sample_rate", "number"),
        _opt("num_channels", "number"),
        description="TTS audio (base64)",
    ),
    _extra("ui-command", BOT, _opt("command", "string"), description="A command for the client's UI"),
    _extra("ui-job-group", BOT, _opt("kind", "string"), _opt("job_id", "string"), description="A UI job group"),
    _extra("config", BOT, deprecated=True, description="RTVI 0.x configuration"),
    _extra("action-response", BOT, deprecated=True, description="RTVI 0.x action response"),
    _extra(
        "dtmf",
        CLIENT,
        _opt("buttons", "array"),  # protocol 2.1
        _opt("button", "string"),  # before 2.1
        description="Keypad presses",
    ),
    _extra(
        "send-file",
        CLIENT,
        _opt("content", "string"),
        _opt("file", "object"),
        _opt("options", "object"),
        description="A file for the LLM",
    ),
    _extra("ui-event", CLIENT, _opt("event", "string"), description="An event from the client's UI"),
    _extra("ui-snapshot", CLIENT, _opt("tree", "object"), description="An accessibility snapshot of the client's UI"),
    _extra("ui-cancel-job-group", CLIENT, _opt("job_id", "string"), description="Cancel a UI job group"),
    _extra("raw-audio", CLIENT, description="Audio from the client"),
    _extra("raw-audio-batch", CLIENT, description="Audio from the client, batched"),
    # --- the bot package's own (docs/PROTOCOL.md): never sent to a client, only to the dashboard
    _extra(
        LATENCY_TYPE,
        BOT,
        _req("total_secs", "number"),
        _req("contributions", "array"),
        _opt("measured_from", "string"),
        _opt("released_ago_secs", "number"),
        _opt("user_turn_secs", "number"),
        description="A turn's latency breakdown (Pipecat's UserBotLatencyObserver), its parts summing to the wait",
    ),
]

CATALOG: dict[str, MessageType] = {t.name: t for t in _TYPES}
SPEC_TYPES = frozenset(t.name for t in _TYPES if t.in_spec)

SEND_TEXT_OPTION_DEFAULTS = {"run_immediately": True, "audio_response": True}
# Metric kinds whose entries carry the figure under their own name rather than `value` (Pipecat 1.14).
METRIC_VALUE_KEYS = {"ttfa": ("value", "ttfa"), "ttfat": ("value", "ttfat")}


class Validated(NamedTuple):
    """The outcome of validate(): the message, its type, and what is wrong with it if anything.

    Immutable; a NamedTuple, not a frozen dataclass, because one is made per message (~0.25 us, not ~0.7)."""

    message: dict | None  # the parsed object (None when not parseable or not an object)
    type: str  # "" when none could be read
    valid: bool
    known: bool  # the type is in CATALOG
    error: str  # "" when valid; else what is wrong and where
    raw: str  # the raw text (truncated) when invalid, else ""


def _describe(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(value: Any) -> bool:
    # bool is an int in Python, and JSON has no NaN or Infinity though Python's parser accepts them.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -MAX_NUMBER <= value <= MAX_NUMBER


class NotJSON(ValueError):
    """Text that strict JSON does not allow (NaN, Infinity, nesting too deep)."""


def _no_constant(name: str):
    raise NotJSON(f"{name} is not JSON")


def _depth_over(obj: Any, limit: int) -> bool:
    """Whether objects and arrays nest deeper than `limit`: level by level, no recursion (~1 us a message)."""
    level, depth = [obj], 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper = []
        for value in level:
            for child in value.values() if type(value) is dict else value:
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        level = deeper
    return False


_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # one decoder: json.loads(**kw) builds one per call
_DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))  # each digit to "0", everything else to " "
_LONG_NUMBER = b"0" * 19  # 19 digits in a row: maybe an integer past 64 bits, which orjson would make a float


def _decode(text: str) -> Any:
    """json's parse, done by orjson (~3x faster) where the two agree: orjson refuses what json would take
    differently (NaN, Infinity, a lone surrogate, a number overflowing a float, nesting past 1,024) and
    makes a float of an integer past 64 bits, so those texts, and any with 19 digits in a row, go to json,
    which judges them and says what is wrong as before (tests/live/test_relay_json.py: always json's result)."""
    raw = text.encode("utf-8", "surrogatepass")
    if _LONG_NUMBER not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return _DECODER.decode(text)


def parse(text: str, max_depth: int | None = MAX_DEPTH) -> Any:
    """Strict JSON: no NaN or Infinity, nesting up to `max_depth`. Raises NotJSON saying why.

    With max_depth=None only what the parser itself can nest is refused: a
    frame of many messages is parsed once, and check() judges each message.
    """
    try:
        # A number too big for a float parses as infinity; that is caught where the
        # message is dumped again for storage (allow_nan=False), off this hot path.
        value = _decode(text)
    except RecursionError:
        raise NotJSON(f"nested deeper than {max_depth or MAX_DEPTH} levels") from None
    except NotJSON:
        raise
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise NotJSON(f"{getattr(exc, 'msg', exc)}{where}") from None
    if max_depth is not None and not shallow(text, max_depth) and _depth_over(value, max_depth):
        raise NotJSON(f"nested deeper than {max_depth} levels")
    return value


def describe(value: Any) -> str:
    """A value in an error message: as JSON, cut to 40 characters."""
    return _describe(value)


_KIND_CHECKS = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "boolean": (lambda v: isinstance(v, bool), "a boolean"),
    "number": (_is_number, "a number up to 1e15"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "array": (lambda v: isinstance(v, list), "an array"),
    "string_or_object": (lambda v: isinstance(v, (str, dict)), "a string or an object"),
    "any": (lambda v: True, "anything"),
}


def _check_metric_list(name: str, value: Any) -> str:
    if not isinstance(value, list):
        return f"data.{name}: expected an array, got {_describe(value)}"
    keys = METRIC_VALUE_KEYS.get(name, ("value",))
    for i, entry in enumerate(value):
        where = f"data.{name}[{i}]"
        if not isinstance(entry, dict):
            return f"{where}: expected an object, got {_describe(entry)}"
        key = next((k for k in keys if k in entry), keys[0])
        if not _is_number(entry.get(key)):
            return f"{where}.{key}: expected a number up to 1e15, got {_describe(entry.get(key))}"
        for text_key in ("processor", "model"):
            text = entry.get(text_key)
            if text is not None and not isinstance(text, str):
                return f"{where}.{text_key}: expected a string, got {_describe(text)}"
    return ""


def _check_data(spec: MessageType, data: Any) -> str:
    if not spec.fields:
        return ""  # nothing defined: any data is tolerated
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return f"data: expected an object, got {_describe(data)}"
    for field in spec.fields:
        value = data.get(field.name)
        if value is None:
            if field.required:
                return f"data.{field.name}: required, missing"
            continue
        if field.kind == "metric_list":
            error = _check_metric_list(field.name, value)
            if error:
                return error
            continue
        check, expected = _KIND_CHECKS[field.kind]
        if not check(value):
            return f"data.{field.name}: expected {expected}, got {_describe(value)}"
    return _EXTRA_CHECKS[spec.name](data) if spec.name in _EXTRA_CHECKS else ""


def _check_error(data: dict) -> str:
    if isinstance(data.get("message"), str) or isinstance(data.get("error"), str):
        return ""
    return "data.message: required (or data.error, as Pipecat sends it), missing"


def _check_options(data: dict) -> str:
    options = data.get("options")
    if isinstance(options, dict):
        for key in SEND_TEXT_OPTION_DEFAULTS:
            if options.get(key) is not None and not isinstance(options[key], bool):
                return f"data.options.{key}: expected a boolean, got {_describe(options[key])}"
    return ""


def _check_role(data: dict) -> str:
    if data.get("role") in ("user", "assistant"):
        return ""
    return f'data.role: expected "user" or "assistant", got {_describe(data.get("role"))}'


def _check_entries(data: dict) -> str:
    for name in ("tokens", "stt_usage"):
        for i, entry in enumerate(data.get(name) or ()):
            if not isinstance(entry, dict):
                return f"data.{name}[{i}]: expected an object, got {_describe(entry)}"
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                if entry.get(key) is not None and not _is_number(entry[key]):
                    return f"data.{name}[{i}].{key}: expected a number up to 1e15, got {_describe(entry[key])}"
            value = entry.get("value")
            if name == "stt_usage" and isinstance(value, dict) and value.get("audio_seconds") is not None:
                if not _is_number(value["audio_seconds"]):
                    got = _describe(value["audio_seconds"])
                    return f"data.stt_usage[{i}].value.audio_seconds: expected a number up to 1e15, got {got}"
    return ""


# Rules that one field's kind cannot say.
_EXTRA_CHECKS = {
    "error": _check_error,
    "send-text": _check_options,
    "send-file": _check_options,
    "append-to-context": _check_role,
    "metrics": _check_entries,
    LATENCY_TYPE: check_contributions,
}


def truncated(raw: str) -> str:
    """Raw text cut to MAX_RAW characters, saying how long it was."""
    if len(raw) > MAX_RAW:
        return raw[:MAX_RAW] + f"... [truncated, {len(raw)} characters in all]"
    return raw


def _dumps(obj: Any) -> str:
    try:
        return json.dumps(obj)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return repr(obj)
    except RecursionError:
        return "(nested too deeply to be written out)"


def _invalid(message: dict | None, type_: str, error: str, raw: str | None) -> Validated:
    text = raw if raw is not None else _dumps(message)
    return Validated(message, type_, False, type_ in CATALOG, error, truncated(text))


class Unparsed(str):
    """Text that was received and is not JSON; `error` says why."""

    error = ""


def unparsed(text: str, error: str) -> Unparsed:
    value = Unparsed(text)
    value.error = error
    return value


def shallow(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether nothing parsed from this text can nest past `limit`: it has no more brackets than that
    (counting them is C-fast; only text with more is walked, by _depth_over)."""
    if isinstance(text, str):
        return text.count("{") + text.count("[") <= limit
    return text.count(b"{") + text.count(b"[") <= limit


def check(value: Any, shallow: bool = False) -> Validated:
    """validate() for a value already parsed (a JSON string is a string, not text to parse), or Unparsed text.

    `shallow`: the value came from a text that shallow() passed, so its depth is not walked again."""
    if isinstance(value, Unparsed):
        return _invalid(None, "", f"not JSON: {value.error}", str(value))
    if isinstance(value, str):
        return _invalid(None, "", f"expected a JSON object, got {_describe(value)}", _dumps(value))
    if not shallow and isinstance(value, dict) and _depth_over(value, MAX_DEPTH):
        type_ = value.get("type")
        type_ = type_[:MAX_TYPE] if isinstance(type_, str) else ""
        return _invalid(None, type_, f"not JSON: nested deeper than {MAX_DEPTH} levels", _dumps(value))
    return validate(value)


def validate(obj_or_text: dict | str | bytes) -> Validated:
    """Check one RTVI message, parsed or as its JSON text; say what is wrong and where. Never raises."""
    try:
        return _validate(obj_or_text)
    except Exception as exc:  # the hot path of ingest must survive any input
        raw = obj_or_text if isinstance(obj_or_text, str) else _dumps(obj_or_text)
        return Validated(None, "", False, False, f"unreadable message: {type(exc).__name__}", truncated(raw))


def _validate(obj: Any) -> Validated:
    raw = None
    if isinstance(obj, (bytes, bytearray)):
        obj = bytes(obj).decode("utf-8", "replace")
    if isinstance(obj, str):
        raw = obj
        try:
            obj = parse(obj)
        except NotJSON as exc:
            return _invalid(None, "", f"not JSON: {exc}", raw)
    if not isinstance(obj, dict):
        return _invalid(
            None, "", f"expected a JSON object, got {_describe(obj)}", raw if raw is not None else _dumps(obj)
        )

    type_ = obj.get("type")
    type_name = type_ if isinstance(type_, str) else ""
    label = obj.get("label")
    if label != LABEL:
        problem = "missing" if label is None else f"got {_describe(label)}"
        return _invalid(obj, type_name, f'label: expected "rtvi-ai", {problem}', raw)
    if not type_name:
        problem = "missing" if type_ is None else f"got {_describe(type_)}"
        return _invalid(obj, "", f"type: expected a non-empty string, {problem}", raw)
    if len(type_name) > MAX_TYPE:
        return _invalid(obj, type_name[:MAX_TYPE], f"type: longer than {MAX_TYPE} characters ({len(type_name)})", raw)
    msg_id = obj.get("id")
    if msg_id is not None and not isinstance(msg_id, str):
        return _invalid(obj, type_name, f"id: expected a string, got {_describe(msg_id)}", raw)
    if msg_id is not None and len(msg_id) > MAX_ID:
        return _invalid(obj, type_name, f"id: longer than {MAX_ID} characters ({len(msg_id)})", raw)

    spec = CATALOG.get(type_name)
    if spec is None:
        return Validated(obj, type_name, True, False, "", "")  # kept and shown, marked unknown
    error = _check_data(spec, obj.get("data"))
    if error:
        return _invalid(obj, type_name, error, raw)
    return Validated(obj, type_name, True, True, "", "")


DIRECTIONS = ("to-client", "from-client")  # which way an RTVI message went: bot to client, or client to bot


def default_direction(msg_type: str) -> str:
    """ "from-client" for client-sent types; "to-client" for bot-sent and unknown ones."""
    spec = CATALOG.get(msg_type)
    return "from-client" if spec is not None and spec.sender == CLIENT else "to-client"


def protocol_version(message: dict) -> str | None:
    """The RTVI version a client-ready or bot-ready message declares, else None."""
    if not isinstance(message, dict) or message.get("type") not in ("client-ready", "bot-ready"):
        return None
    data = message.get("data")
    version = data.get("version") if isinstance(data, dict) else None
    return version.strip() if isinstance(version, str) and version.strip() else None
