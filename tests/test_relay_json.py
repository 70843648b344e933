"""A stored batch's relay splices each message's stored JSON into the frame (Row.as_event_json): whatever a bot
sends, a browser parses the same event it would from encoding the row afresh (Row.as_event), and the batch is
strict JSON. Proved with Hypothesis on the live path's own objects, no socket."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.live.relay import batch_message
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.redaction import DEFAULT, NONE
from rtvi_monitor.state import SessionState


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
        row, _ = live.accept(frame, 1_764_000_000.0, Replier(), "", DEFAULT if redacting else NONE)
        if row is not None:
            rows.append(row)
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
    from dashboard.http import compact_dumps, strict_dumps

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
    from dashboard.http import all_finite
    from rtvi_monitor.events import stored_form
    from rtvi_monitor.protocol import Validated

    checked, text = stored_form(Validated(message, "x", True, False, "", ""))
    if all_finite(message):
        assert checked.valid and checked.message is message
        assert json.loads(text, parse_constant=_no_constants) == message
    else:
        assert not checked.valid and checked.message is None
        assert "out of range" in checked.error
