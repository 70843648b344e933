"""The eval gate's promise, by simulation (issue 36, part 4): of two deployments that behave the same, "worse" at
most ALPHA of the time; of one plainly worse, "worse" nearly always.

Simulations are seeded (Hypothesis derandomized, random.Random per example), so a run that passes passes again.
"""

import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtvi_monitor.evals import gate
from rtvi_monitor.evals.models import EvalResult


def simulated_side(name, rng, pass_rates, repeats, wait_mu, wait_sigma, turns_per_run) -> gate.Side:
    side = gate.Side(name)
    for scenario, rate in enumerate(pass_rates):
        for attempt in range(repeats):
            passed = rng.random() < rate
            turns = [
                {"turn_index": t, "status": "passed", "duration_ms": round(rng.lognormvariate(wait_mu, wait_sigma))}
                for t in range(turns_per_run)
            ]
            side.add(
                EvalResult(
                    scenario=f"s{scenario}",
                    attempt=attempt + 1,
                    passed=passed,
                    failures=[] if passed else [{"kind": "timeout"}],
                    turns=turns,
                )
            )
    return side


SIMULATIONS = 150


@settings(derandomize=True, max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pass_rates=st.lists(st.floats(0.05, 1.0), min_size=1, max_size=6),
    repeats=st.integers(2, 20),
    wait_mu=st.floats(5.5, 7.5),
    wait_sigma=st.floats(0.05, 1.0),
    turns_per_run=st.integers(1, 4),
)
def test_two_deployments_that_behave_the_same_are_called_worse_at_most_alpha_of_the_time(
    pass_rates, repeats, wait_mu, wait_sigma, turns_per_run
):
    rng = random.Random(hash((tuple(pass_rates), repeats, wait_mu, wait_sigma, turns_per_run)) & 0xFFFFFFFF)
    worse = 0
    for _ in range(SIMULATIONS):
        a, b = (simulated_side(name, rng, pass_rates, repeats, wait_mu, wait_sigma, turns_per_run) for name in "ab")
        worse += gate.judge(a, b).verdict == "worse"
    # At most ALPHA in truth; what 150 draws may show of it, three standard deviations up.
    bound = gate.ALPHA * SIMULATIONS + 3 * math.sqrt(SIMULATIONS * gate.ALPHA * (1 - gate.ALPHA))
    assert worse <= bound, f"{worse} of {SIMULATIONS} equal pairs called worse"


def test_the_rate_over_many_equal_pairs_is_within_alpha():
    rng = random.Random(36)
    trials = 1500
    worse = sum(
        gate.judge(
            simulated_side("a", rng, [0.7, 0.9, 0.5], 10, 6.8, 0.4, 2),
            simulated_side("b", rng, [0.7, 0.9, 0.5], 10, 6.8, 0.4, 2),
        ).verdict
        == "worse"
        for _ in range(trials)
    )
    assert worse / trials <= gate.ALPHA, worse / trials


def caught(rng, repeats: int, worse_rates, worse_mu, trials: int = 100) -> int:
    return sum(
        gate.judge(
            simulated_side("a", rng, [0.95, 0.95], repeats, 6.8, 0.3, 2),
            simulated_side("b", rng, worse_rates, repeats, worse_mu, 0.3, 2),
        ).verdict
        == "worse"
        for _ in range(trials)
    )


def test_a_clearly_worse_deployment_is_caught_and_more_repeats_catch_it_more_often():
    rng = random.Random(37)
    # One scenario of two falls from 95 % to 30 %: 10 repeats catch it about 8 times in 10, 20 nearly always.
    ten, twenty = caught(rng, 10, [0.95, 0.3], 6.8), caught(rng, 20, [0.95, 0.3], 6.8)
    assert ten >= 70 and twenty >= 97 and twenty >= ten, (ten, twenty)
    # Every turn 2.2 times slower (e^0.8): caught every time with 10 repeats.
    assert caught(rng, 10, [0.95, 0.95], 7.6) >= 99
