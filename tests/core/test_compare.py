"""rtvi_monitor/core/compare.py against the definitions, by brute force (the eval gate's promise, by simulation, is
tests/evals/test_gate_properties.py)."""

import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
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
    # Its statistic is the pair count (brute_u): B is called slower (p under a half) exactly when more than half
    # the pairs, past the continuity correction, have B's value larger.
    assert (p < 0.5) == (brute_u(a, b) - len(a) * len(b) / 2 > 0.5)
    shifted = [x + 100 for x in b]  # every pair now has B larger
    assert compare.slower_p(a, shifted) <= p + 1e-12
    assert compare.slower_p(a, shifted) < 0.01 and compare.slower_p(shifted, a) > 0.99


def test_too_few_values_are_no_verdict():
    assert compare.slower_p([1] * 7, [2] * 100) is None
    assert compare.slower_p([5] * 10, [5] * 10) == 1.0


def test_holm_rejects_in_order_and_never_more_than_bonferroni_allows_first():
    assert compare.holm({"a": 0.001, "b": 0.02, "c": 0.04}, 0.05) == {"a", "b", "c"}
    assert compare.holm({"a": 0.02, "b": 0.03}, 0.05) == {"a", "b"}
    assert compare.holm({"a": 0.03, "b": 0.04}, 0.05) == set()  # 0.03 > 0.05 / 2: nothing
    assert compare.holm({}, 0.05) == set()


# --- a percentile's change with an interval over calls (issue 37's deployment comparison) --------------------


def calls(rng, n, mu=6.8, call_sd=0.25, turn_sd=0.3, extra=0.0):
    """n calls, each 1-11 turns of lognormal waits around its own level (calls differ: network, caller)."""
    out = []
    for _ in range(n):
        level = rng.gauss(mu, call_sd)
        out.append([math.exp(rng.gauss(level, turn_sd)) + extra for _ in range(rng.randint(1, 11))])
    return out


def test_the_change_is_the_difference_of_the_nearest_rank_percentiles_and_the_interval_holds_it():
    rng = random.Random(1)
    a, b = calls(rng, 50), calls(rng, 50, extra=200)
    found = compare.percentile_change(a, b, 95, seed=3)
    assert found["a"] == compare.percentile(sorted(v for c in a for v in c), 95)
    assert found["change"] == pytest.approx(found["b"] - found["a"])
    assert found["low"] <= found["change"] <= found["high"] and found["calls"] == [50, 50]
    assert compare.percentile_change(a[:49], b, 95) is None  # too few calls to say
    assert compare.percentile_change(a, b, 95, seed=3) == found  # the same answer every time


def test_two_deployments_that_behave_the_same_are_called_different_at_most_alpha_of_the_time():
    """Twelve figures read together (six waits at p50 and p95), Bonferroni-widened: over 100 pairs of equal
    deployments of MIN_CALLS calls, any figure worse or better in at most 5 % of the pairs (three standard
    deviations of slack). At 30 calls a side it was 9 %: hence MIN_CALLS."""
    rng = random.Random(37)
    pairs, flagged = 100, 0
    for seed in range(pairs):
        a_stages = [calls(rng, compare.MIN_CALLS, mu=mu) for mu in (5.5, 6.0, 6.5, 7.0, 6.2, 6.8)]
        b_stages = [calls(rng, compare.MIN_CALLS, mu=mu) for mu in (5.5, 6.0, 6.5, 7.0, 6.2, 6.8)]
        flagged += any(
            (found["low"] > 0 or found["high"] < 0)
            for a, b in zip(a_stages, b_stages, strict=True)
            for q in (50, 95)
            if (found := compare.percentile_change(a, b, q, family=12, seed=seed))
        )
    assert flagged <= 0.05 * pairs + 3 * math.sqrt(pairs * 0.05 * 0.95), flagged


def test_a_deployment_whose_waits_grew_is_told_apart():
    rng = random.Random(38)
    caught = sum(
        compare.percentile_change(calls(rng, 60), calls(rng, 60, extra=400), 50, family=12, rounds=400, seed=s)["low"]
        > 0
        for s in range(30)
    )
    assert caught >= 27, caught


@hsettings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 5000), min_size=1, max_size=30), min_size=1, max_size=40),
    st.sampled_from([1, 1700]),
    st.integers(0, 2**16),
)
def test_each_bootstrap_draw_is_the_nearest_rank_percentile_of_its_resample(calls, long_call, seed):
    """Whatever the counts' width (16 bits for these calls, 32 when one call is long enough to need it), each draw is
    the q-th percentile of the turns of the calls it drew, as counted by hand."""
    import numpy as np

    from rtvi_monitor.core.compare import _percentile_draws
    from rtvi_monitor.core.reducer.turns import percentile

    calls = [*calls, [2500] * long_call]
    draws = _percentile_draws(calls, (50, 95), 5, np.random.default_rng(seed))
    counts = np.random.default_rng(seed).multinomial(len(calls), np.full(len(calls), 1 / len(calls)), size=5)
    for r in range(5):
        pooled = sorted(v for c, k in zip(calls, counts[r], strict=True) for v in c * int(k))
        assert [draws[0][r], draws[1][r]] == [percentile(pooled, 50), percentile(pooled, 95)]
