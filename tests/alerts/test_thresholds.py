"""An alert rule's threshold: typed in the unit beside its input, stored in its condition's measure, read back
as typed (rtvi_monitor/alerts/thresholds.py, the one rule the settings form, the API and the pages ask)."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtvi_monitor.alerts import thresholds
from rtvi_monitor.alerts.models import AlertRule

C = AlertRule.Condition


@pytest.mark.parametrize(
    ("condition", "typed", "stored", "read"),
    [
        (C.TURN_LATENCY_P95, "1.5", 1500.0, "1.5 s"),
        (C.TURN_LATENCY_P95, "1.1", 1100.0, "1.1 s"),  # not 1100.0000000000002
        (C.TURN_LATENCY_P95, "0.85", 850.0, "850 ms"),
        (C.TURN_LATENCY_P95, "5", 5000.0, "5.0 s"),
        (C.ERROR_RATE, "20", 20.0, "20 %"),
        (C.ERROR_RATE, "12.5", 12.5, "12.5 %"),
        (C.ENDED_BADLY, "4", 4.0, "4"),
        (C.NO_SESSIONS, "3", 3.0, "3"),
    ],
)
def test_a_threshold_typed_in_its_unit_is_stored_in_its_measure_and_read_back_as_typed(condition, typed, stored, read):
    assert thresholds.stored(condition, typed) == stored
    assert thresholds.typed(condition, stored) == typed
    assert thresholds.text(AlertRule(condition=condition, threshold=stored)) == read


@given(
    st.sampled_from([C.TURN_LATENCY_P95, C.ERROR_RATE, C.ENDED_BADLY, C.NO_SESSIONS]),
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
)
def test_what_is_typed_comes_back_as_typed(condition, entered):
    shown = thresholds.typed(condition, thresholds.stored(condition, entered))
    assert Decimal(shown) == entered


def test_a_rule_that_sets_none_reads_as_its_default_and_one_that_takes_none_says_what_fires_it():
    assert thresholds.text(AlertRule(condition=C.TURN_LATENCY_P95)) == "1.5 s (default)"
    assert thresholds.text(AlertRule(condition=C.ERROR_RATE)) == "20 % (default)"
    assert thresholds.text(AlertRule(condition=C.FATAL_ERROR)) == "none: one fatal error fires it"
    assert thresholds.window_text(AlertRule(condition=C.FATAL_ERROR)) == "15 min (default)"
    assert thresholds.window_text(AlertRule(condition=C.FATAL_ERROR, window_minutes=30)) == "30 min"
    assert thresholds.typed(C.TURN_LATENCY_P95, None) == ""


def test_the_units_the_form_shows_are_the_ones_it_converts_with():
    units = thresholds.units()
    assert set(units) == set(C.values)
    assert units[C.TURN_LATENCY_P95] == {"unit": "s", "default": "1.5 (default)", "none": "", "window": "15 (default)"}
    assert units[C.ERROR_RATE]["unit"] == "%" and units[C.NO_SESSIONS]["window"] == "30 (default)"
    assert units[C.FATAL_ERROR]["none"] and units[C.FATAL_ERROR]["unit"] == ""


def test_what_a_threshold_cannot_be():
    assert thresholds.refusal(C.ERROR_RATE, 101).startswith("out of range")
    assert thresholds.refusal(C.ENDED_BADLY, -1).startswith("out of range")
    assert thresholds.refusal(C.FATAL_ERROR, 3) == "fatal_error takes none (its window_minutes says when it fires)"
    assert thresholds.refusal(C.TURN_LATENCY_P95, 10_000_000) is None


def test_a_conditions_words_leave_the_unit_to_its_threshold():
    assert thresholds.condition_text(C.TURN_LATENCY_P95) == "an agent's turn latency p95 above the threshold"
    assert thresholds.condition_text(C.ERROR_RATE) == "share of sessions with errors above the threshold"
    assert thresholds.condition_text(C.FATAL_ERROR) == C.FATAL_ERROR.label
    assert all(" ms" not in thresholds.condition_text(c) and "%" not in thresholds.condition_text(c) for c in C.values)
