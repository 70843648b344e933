"""A turn's latency contributions (rtvi-dashboard-latency, rtvi_monitor/core/contributions.py): validated,
kept on the right turn by the reducer and the turn diagnosis alike, and compared with the messages' wait."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtvi_monitor.core import contributions
from rtvi_monitor.core.diagnosis import diagnose
from rtvi_monitor.core.protocol import validate
from rtvi_monitor.core.state import Event, replay
from tests.rtvi_samples import m

T0 = 1_750_000_000.0
KINDS = ("service", "setting", "bot", "pipeline")


def part(key, secs, kind="service", owner="OpenAILLMService#0", start=0.0):
    return {"key": key, "label": key.replace("_", " "), "owner": owner, "owner_kind": kind, "start_secs": start, "duration_secs": secs}  # fmt: skip # noqa: E501


def breakdown(parts, user_turn_secs=None, released_ago=None, measured_from="user_silence", total=None):
    data = {
        "v": 1,
        "measured_from": measured_from,
        "total_secs": math.fsum(p["duration_secs"] for p in parts) if total is None else total,
        "contributions": parts,
    }
    if user_turn_secs is not None:
        data["user_turn_secs"] = user_turn_secs
    if released_ago is not None:
        data["released_ago_secs"] = released_ago
    return m(contributions.LATENCY_TYPE, data)


def events(*timed):
    """Events from (at, message), numbered in order, as stored."""
    return [Event(i + 1, "to-client", at, message) for i, (at, message) in enumerate(timed)]


def turn(stopped, started, *between, after=()):
    """One spoken turn: the user stops at `stopped`, the bot starts at `started`; `between` and `after` are
    (at, message) before and after bot-started-speaking."""
    return [
        (stopped - 1, m("user-started-speaking")),
        (stopped, m("user-stopped-speaking")),
        *between,
        (started, m("bot-started-speaking")),
        *after,
        (started + 1, m("bot-stopped-speaking")),
    ]


TWO = [part("endpointing_wait", 0.2, "setting", "config: VAD stop_secs"), part("llm_inference", 0.3), part("pipeline", 0.05, "pipeline", "pipecat")]  # fmt: skip # noqa: E501


# --- what the message is ------------------------------------------------------------------------------


def test_a_real_breakdown_is_valid_and_known():
    result = validate(breakdown(TWO, user_turn_secs=0.25))
    assert result.valid and result.known, result.error


def test_a_malformed_breakdown_is_invalid_and_says_what_and_where():
    cases = {
        "no total": (m(contributions.LATENCY_TYPE, {"contributions": []}), "data.total_secs: required"),
        "parts not a list": (
            m(contributions.LATENCY_TYPE, {"total_secs": 1, "contributions": {}}),
            "data.contributions: expected an array",
        ),
        "a part not an object": (breakdown([5], total=0.1), "data.contributions[0]: expected an object"),
        "no key": (
            breakdown([{**part("x", 0.1), "key": ""}]),
            "data.contributions[0].key: expected a non-empty string",
        ),
        "no kind": (breakdown([{**part("x", 0.1), "owner_kind": None}]), "data.contributions[0].owner_kind"),
        "negative": (breakdown([part("x", -0.1)], total=0.1), "data.contributions[0].duration_secs"),
        "an hour and more": (breakdown([part("x", 4000.0)]), "data.total_secs: expected a number of seconds"),
        "a string for seconds": (breakdown([part("x", "0.1")], total=0.1), "data.contributions[0].duration_secs"),
        "too many": (breakdown([part("x", 0.001)] * 65), "at most 64 parts, got 65"),
        "an owner too long": (breakdown([part("x", 0.1, owner="o" * 201)]), "data.contributions[0].owner"),
        "parts that do not sum": (breakdown(TWO, total=2.0), "they sum to 0.5500 s, not data.total_secs 2.0000 s"),
        "a bad user turn": (breakdown(TWO, user_turn_secs=-1), "data.user_turn_secs"),
        "a bad start": (breakdown([part("x", 0.1, start=-2.0)]), "data.contributions[0].start_secs"),
        "a bad release": (breakdown(TWO, released_ago="soon"), "data.released_ago_secs"),
    }
    for name, (message, words) in cases.items():
        result = validate(message)
        assert not result.valid and result.known, name
        assert words in result.error, (name, result.error)


def test_a_malformed_breakdown_a_server_stored_before_it_knew_the_type_changes_no_turn():
    """Stored as valid (an unknown type then), replayed now: read again, and left out."""
    bad = breakdown([part("x", -1.0)], total=0.0)
    state = replay(events(*turn(T0, T0 + 0.6, (T0 + 0.59, bad))))
    assert state.turns[0]["contributions"] is None
    assert diagnose(events(*turn(T0, T0 + 0.6, (T0 + 0.59, bad))))["turns"][0]["contributions"] is None


# --- on the right turn -------------------------------------------------------------------------------


def test_a_breakdown_before_or_after_its_bot_started_speaking_is_that_turns():
    first = breakdown(TWO, user_turn_secs=0.2, released_ago=0.549)
    second = breakdown([part("llm_inference", 0.9)], user_turn_secs=0.1, released_ago=0.801)
    timed = [
        *turn(T0, T0 + 0.55, (T0 + 0.549, first)),  # came just before the bot started
        *turn(T0 + 10, T0 + 10.8, after=[(T0 + 10.801, second)]),  # just after
    ]
    state = replay(events(*timed))
    assert [[c["key"] for c in t["contributions"]] for t in state.turns] == [
        ["endpointing_wait", "llm_inference", "pipeline"],
        ["llm_inference"],
    ]
    assert state.turns[0]["contributions"][0] == {
        "key": "endpointing_wait",
        "label": "endpointing wait",
        "owner": "config: VAD stop_secs",
        "kind": "setting",
        "ms": 200.0,
    }
    turns = diagnose(events(*timed))["turns"]
    assert [t["contributions"] for t in turns] == [t["contributions"] for t in state.turns]
    assert [t["contributions_total_ms"] for t in turns] == [550.0, 900.0]


def test_the_greeting_and_a_breakdown_long_after_any_turn_are_no_turns():
    greeting = breakdown([part("first_request", 0.4, "bot", "bot")], measured_from="client_connected")
    late = breakdown(TWO)
    timed = [(T0 - 5, greeting), *turn(T0, T0 + 0.6), (T0 + 30, late)]
    assert replay(events(*timed)).turns[0]["contributions"] is None
    assert diagnose(events(*timed))["turns"][0]["contributions"] is None


def test_a_turn_keeps_its_first_breakdown():
    timed = turn(T0, T0 + 0.55, after=[(T0 + 0.56, breakdown(TWO)), (T0 + 0.57, breakdown([part("x", 0.55)]))])
    assert [c["key"] for c in replay(events(*timed)).turns[0]["contributions"]] == [p["key"] for p in TWO]


def test_a_breakdown_whose_previous_turn_has_none_goes_to_the_turn_it_says_was_released():
    """Turn 1 got none; turn 2's comes before its bot-started-speaking, while turn 1's bot spoke 1 s before."""
    timed = [
        *turn(T0, T0 + 0.5),
        *turn(T0 + 1.2, T0 + 1.6, (T0 + 1.59, breakdown(TWO, user_turn_secs=0.2, released_ago=0.39))),
    ]
    assert [t["contributions"] is None for t in replay(events(*timed)).turns] == [True, False]
    assert [t["contributions"] is None for t in diagnose(events(*timed))["turns"]] == [True, False]


def test_the_pick_takes_the_turn_whose_user_stopped_nearest_to_the_release():
    waiting, spoken = ("new", 10.0), ("old", 5.0, 9.5)
    assert contributions.pick(10.2, 10.01, waiting, spoken) == "new"
    assert contributions.pick(10.2, 5.02, waiting, spoken) == "old"
    assert contributions.pick(10.2, None, waiting, spoken) == "new"
    assert contributions.pick(20.0, None, None, spoken) is None  # past MATCH_S


# --- the sum, and where the two measures disagree -----------------------------------------------------


parts_strategy = st.lists(
    st.tuples(st.sampled_from(KINDS), st.floats(min_value=0, max_value=5, allow_nan=False)), min_size=1, max_size=64
)


@settings(max_examples=200, deadline=None)
@given(parts_strategy, st.booleans())
def test_the_contributions_kept_sum_to_the_total_within_rounding(drawn, before):
    parts = [part(f"k{i}", secs, kind) for i, (kind, secs) in enumerate(drawn)]
    message = breakdown(parts)
    assert validate(message).valid
    bd = (T0 + 0.01, message)
    timed = turn(T0, T0 + 0.02, bd) if before else turn(T0, T0 + 0.02, after=[bd])
    kept = replay(events(*timed)).turns[0]
    total = message["data"]["total_secs"] * 1000
    rounding = 0.0005 * (len(parts) + 1) + 1e-9 * total
    assert abs(math.fsum(c["ms"] for c in kept["contributions"]) - total) <= rounding
    assert abs(kept["contributions_total_ms"] - total) <= 0.0005 + 1e-9 * total
    assert [c["kind"] for c in kept["contributions"]] == [kind for kind, _ in drawn]
    assert diagnose(events(*timed))["turns"][0]["contributions"] == kept["contributions"]


def test_a_turn_whose_contributions_and_messages_disagree_says_so():
    # 0.3 s before the user's turn was released, 0.9 s after it; the messages measure 0.55 s: 350 ms apart.
    parts = [part("endpointing_wait", 0.3, "setting", "config: VAD stop_secs"), part("llm_inference", 0.9)]
    disagreeing = breakdown(parts, user_turn_secs=0.3)
    agreeing = breakdown(parts, user_turn_secs=0.3)
    timed = [
        *turn(T0, T0 + 0.55, (T0 + 0.54, disagreeing)),
        *turn(T0 + 10, T0 + 10.93, (T0 + 10.92, agreeing)),  # 900 vs 930 ms: within 93 ms
    ]
    first, second = diagnose(events(*timed))["turns"]
    note = next(n for n in first["notes"] if "contributions" in n)
    assert "sum to 900 ms after the user's turn was released, the messages measure 550 ms: 350 ms more" in note
    assert "tolerance of 55 ms" in note
    assert not any("contributions" in n for n in second["notes"])


def test_the_tolerance_is_50_ms_or_a_tenth():
    assert contributions.tolerance_ms(100) == 50 and contributions.tolerance_ms(2000) == 200
    kept = {"contributions": [{"ms": 1000.0}], "user_turn_ms": None}
    assert contributions.disagreement(kept, 1049) == "" and contributions.disagreement(kept, 1200)
    assert contributions.disagreement(kept, 1100) == ""  # 100 ms apart, within a tenth of 1,100
    assert contributions.disagreement(None, 1000) == "" and contributions.disagreement(kept, None) == ""


# --- what the fleet's waits are made of (issue 37, part 2) ----------------------------------------------------


def test_the_slowest_turns_are_made_of_what_made_them_slow_not_of_the_average():
    from rtvi_monitor.core.diagnosis import made_of

    turns = []
    for i in range(100):
        queue = 1500.0 if i % 20 == 0 else 50.0  # the LLM's queue, in one turn of twenty
        parts = [
            ["vad_stop_secs", "setting", 500.0],
            ["llm_ttfb", "service", 300.0 + queue],
            ["tts_ttfb", "service", 200.0],
        ]
        turns.append([sum(p[2] for p in parts), parts])
    found = made_of(turns)
    by_key = {part["key"]: part for part in found["parts"]}
    assert found["turns"] == 100 and found["slowest_turns"] == 6  # the p95 turn and the five slower
    assert by_key["vad_stop_secs"]["p50_ms"] == 500 and by_key["vad_stop_secs"]["p50_share"] == pytest.approx(
        0.476, 0.01
    )
    assert by_key["llm_ttfb"]["p95_ms"] > by_key["vad_stop_secs"]["p95_ms"]  # the queue is what the slowest wait on
    assert found["parts"][0]["key"] == "llm_ttfb"
    assert made_of([]) is None


@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["vad", "stt", "llm", "tts"]), st.floats(0, 3000)), min_size=1, max_size=4),
        min_size=1,
        max_size=60,
    )
)
def test_each_bands_shares_add_up_to_the_whole_wait(turns):
    from rtvi_monitor.core.diagnosis import made_of

    breakdowns = []
    for parts in turns:
        merged: dict[str, float] = {}
        for key, ms in parts:
            merged[key] = merged.get(key, 0.0) + ms
        breakdowns.append([sum(merged.values()), [[k, "service", v] for k, v in merged.items()]])
    found = made_of(breakdowns)
    for band in ("p50", "p95"):
        shares = [part[f"{band}_share"] for part in found["parts"]]
        if all(share is not None for share in shares):
            assert sum(shares) == pytest.approx(1.0, abs=0.002 * len(shares))
