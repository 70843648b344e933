"""rtvi_monitor/core/compare.py against the definitions, by brute force (the eval gate's promise, by simulation, is
tests/evals/test_gate_properties.py)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtvi_monitor.core import compare


def brute_fisher(passed_a, runs_a, passed_b, runs_b) -> float:
    """P(B's passes <= passed_b) when the passes both made are dealt at random among all runs."""
    total = runs_a + runs_b
    passes = passed_a + passed_b
    outcomes = [1] * passes + [0] * (total - passes)
    hits = count = 0
    for chosen in itertools.combinations(range(total), runs_b):
        count += 1
        hits += sum(outcomes[i] for i in chosen) <= passed_b
    return hits / count


@given(st.integers(1, 7), st.integers(1, 7), st.data())
def test_fishers_p_is_the_share_of_deals_with_this_few_passes(runs_a, runs_b, data):
    passed_a = data.draw(st.integers(0, runs_a))
    passed_b = data.draw(st.integers(0, runs_b))
    assert compare.fewer_passes_p(passed_a, runs_a, passed_b, runs_b) == pytest.approx(
        brute_fisher(passed_a, runs_a, passed_b, runs_b), abs=1e-9
    )


def test_fisher_says_what_it_cannot_compare():
    assert compare.fewer_passes_p(3, 3, 0, 0) == 1.0
    with pytest.raises(ValueError):
        compare.fewer_passes_p(4, 3, 0, 1)


def brute_u(a, b) -> float:
    """Mann-Whitney U of b: pairs where b's value is larger, ties half."""
    return sum((y > x) + 0.5 * (y == x) for x in a for y in b)


@given(
    st.lists(st.integers(0, 20), min_size=compare.MIN_SAMPLES, max_size=30),
    st.lists(st.integers(0, 20), min_size=compare.MIN_SAMPLES, max_size=30),
)
def test_the_u_test_ranks_as_the_pairs_count_and_its_p_falls_as_b_grows(a, b):
    p = compare.slower_p(a, b)
    assert 0.0 <= p <= 1.0
    # Its statistic is the pair count: the z it uses is a monotone function of brute_u.
    shifted = compare.slower_p(a, [x + 100 for x in b])
    assert shifted <= p + 1e-12
    assert brute_u(a, [x + 100 for x in b]) == len(a) * len(b)


def test_too_few_values_are_no_verdict():
    assert compare.slower_p([1] * 7, [2] * 100) is None
    assert compare.slower_p([5] * 10, [5] * 10) == 1.0


def test_holm_rejects_in_order_and_never_more_than_bonferroni_allows_first():
    assert compare.holm({"a": 0.001, "b": 0.02, "c": 0.04}, 0.05) == {"a", "b", "c"}
    assert compare.holm({"a": 0.02, "b": 0.03}, 0.05) == {"a", "b"}
    assert compare.holm({"a": 0.03, "b": 0.04}, 0.05) == set()  # 0.03 > 0.05 / 2: nothing
    assert compare.holm({}, 0.05) == set()
