"""A stored batch's relay splices each message's stored JSON into the frame (Row.as_event_json): whatever a bot
sends, a browser parses the same event it would from encoding the row afresh (Row.as_event), and the batch is
strict JSON. Proved with Hypothesis on the live path's own objects, no socket."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.core.redaction import DEFAULT, NONE
from rtvi_monitor.core.state import SessionState
from rtvi_monitor.live.relay import batch_message
from rtvi_monitor.live.session import LiveSession


class Replier:
    async def reply(self, payloads):
        pass


leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4))
types = st.sampled_from(["bot-llm-text", "user-transcription", "metrics", "server-message", "error", "no-such-type"])
frames = st.one_of(
    st.builds(
        lambda t, d, seq: {"seq": seq, "message": {"label": "rtvi-ai", "type": t, "data": d}},
        types,
        values,
        st.integers(1, 2**53),
    ),
    st.builds(lambda t, d: {"label": "rtvi-ai", "type": t, "data": d}, types, values),
    values,  # anything at all, as parsed JSON
    st.text(),  # not JSON: the raw text
)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, min_size=1, max_size=6), st.booleans())
def test_a_relayed_batch_carries_every_event_as_encoding_it_afresh_would(sent, redacting):
    live = LiveSession(pk=1, organization_id=1, session_id="s", state=SessionState())
    rows = []
    for frame in sent:
        redactor = DEFAULT if redacting else NONE
        row, _ = live.accept(frame, 1_764_000_000.0, Replier(), "", redactor)
        if row is not None:
            rows.extend(live.ready(row, redactor))
    rows.extend(live.release_all())
    for row in rows:
        assert json.loads(row.as_event_json()) == json.loads(json.dumps(row.as_event(), allow_nan=False))
        live.fold(row)
    relay = batch_message(live, [row.as_event_json() for row in rows], 0)
    batch = json.loads(relay["text"], parse_constant=_refuse)  # strict: no NaN or Infinity anywhere
    assert [event["seq"] for event in batch["events"]] == [row.seq for row in rows]
    assert batch["from"] == 0 and batch["to"] == live.state.version == relay["to"]


def _refuse(name):
    raise ValueError(f"{name} is not JSON")


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


keys = st.text() | st.integers()  # parsed JSON has text keys; the state has a few numbered ones
anything = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=20
)


@settings(max_examples=500, deadline=None)
@given(anything)
def test_compact_json_is_strict_and_means_what_json_would_write(value):
    """orjson writes the live path's frames; what it cannot write (an integer past 64 bits, a key that is not a
    string) goes through json. Either way the text is strict JSON, and parses to what strict_dumps' would."""
    from dashboard.web.http import compact_dumps, strict_dumps

    text = compact_dumps(value)
    assert json.loads(text, parse_constant=_no_constants) == json.loads(strict_dumps(value))


texts = st.text() | st.sampled_from(["\ud800", "é\u2028</script>", "\x00", "null"])  # lone surrogate, raw, NUL
stored_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(texts, stored_values, max_size=5))
def test_the_stored_form_is_strict_json_of_the_message_or_an_invalid_record(message):
    """orjson writes what is stored of a message (events.stored_form), json what it refuses: either way strict JSON
    that parses to the message itself; a message holding NaN or infinity (a number too big for a float) is
    stored as an invalid record saying so, as before."""
    from dashboard.web.http import all_finite
    from rtvi_monitor.core.protocol import Validated
    from rtvi_monitor.sessions.events import stored_form

    checked, text = stored_form(Validated(message, "x", True, False, "", ""))
    if all_finite(message):
        assert checked.valid and checked.message is message
        assert json.loads(text, parse_constant=_no_constants) == message
    else:
        assert not checked.valid and checked.message is None
        assert "out of range" in checked.error


def _json_parse(text: str):
    """What protocol.parse gave before orjson: json's strict decode, or the NotJSON message it raised."""
    from rtvi_monitor.core import protocol

    try:
        return "value", protocol._DECODER.decode(text)
    except RecursionError:
        return "error", "deep"
    except protocol.NotJSON as exc:
        return "error", str(exc)
    except ValueError:
        return "error", "invalid"


def _parse(text: str):
    from rtvi_monitor.core import protocol

    try:
        return "value", protocol.parse(text, max_depth=None)
    except protocol.NotJSON as exc:
        return "error", str(exc)


def _same(a, b) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0 here; NaN is never in a parsed value)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a == 0:
        return str(a) == str(b)  # -0.0 stays -0.0
    return a == b


numbers = st.integers(min_value=-(2**70), max_value=2**70).map(str) | st.floats(allow_nan=False).map(repr)
json_texts = st.recursive(
    numbers
    | st.sampled_from(["true", "false", "null", "NaN", "-Infinity", "1e400", "-0", "-0.0", "1E5", "01"])
    | st.text().map(json.dumps)
    | st.sampled_from(['"\\ud800"', '"a\tb"', '"\\u0000"', '"é"', '"\\u00e9"']),
    lambda inner: st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]")
    | st.lists(st.tuples(st.text().map(json.dumps), inner), max_size=4).map(
        lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"
    ),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(json_texts, st.sampled_from(["", " ", "x", "}", ",", "\n"]))
def test_parsing_gives_what_json_gives(text, tail):
    """protocol.parse has orjson parse what it reads as json does and json the rest (an integer past 64 bits,
    NaN, a lone surrogate, ...): for any text, JSON or not, the same value to the last type, or an error."""
    text = text + tail
    expected, got = _json_parse(text), _parse(text)
    if expected[0] == "value":
        assert got[0] == "value" and _same(got[1], expected[1]), (text, got, expected)
    else:
        assert got[0] == "error", (text, got)


@settings(max_examples=300, deadline=None)
@given(anything)
def test_a_frame_called_shallow_holds_nothing_nested_too_deep(value):
    """Admission.shallow lets a frame's messages skip the depth walk: only when no message can be too deep."""
    from rtvi_monitor.core.protocol import MAX_DEPTH, _depth_over, shallow

    for text in (json.dumps(value), json.dumps(value).encode()):
        if shallow(text):
            assert not _depth_over(value, MAX_DEPTH) if isinstance(value, (dict, list)) else True
