"""storable_json: what any database's JSON column takes (PostgreSQL's jsonb refuses NUL and lone surrogates).
A value holding neither is returned as it is, which orjson finds; the result is always what walking it makes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.sessions.models import _storable_walk, storable_json

texts = st.text() | st.sampled_from(["\x00", "a\x00b", "\ud800", "\\u0000", "é\u2028"])
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(values)
def test_storable_json_is_the_walk_whatever_the_value(value):
    stored = storable_json(value)
    walked = _storable_walk(value)
    assert repr(stored) == repr(walked)  # repr: NaN is not equal to itself


def test_a_value_with_nothing_to_escape_is_not_copied():
    state = {"transcript": [{"text": "Hello", "at": 1.5}], "counts": {"total": 2}}
    assert storable_json(state) is state
    escaped = storable_json({"text": "a\x00b"})
    assert escaped == {"text": "a\\u0000b"}
