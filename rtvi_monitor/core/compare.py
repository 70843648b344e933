"""Is B worse than A, beyond what A and B would differ by chance? Two one-sided tests, plain Python.

- `fewer_passes_p(passed_a, runs_a, passed_b, runs_b)`: Fisher's exact test of "B passes less often than A"
  (the chance, were both the same, that B would pass this few times of the passes both made). Exact, so a
  verdict at level alpha says "worse" of two equal deployments at most alpha of the time, however few runs.
- `slower_p(a, b)`: the Mann-Whitney U test of "B's values tend to be larger than A's", by the normal
  approximation with its correction for ties and continuity; it asks for at least MIN_SAMPLES a side
  (None below that: too few to tell), where the approximation keeps its level.
- `percentile_change(a, b, q, family)`: a percentile's change from A's calls to B's, with an interval by the
  bootstrap over calls (a call's turns resampled together), Bonferroni-widened for `family` intervals read
  together: what issue 37's deployment comparison calls worse only when the whole interval is.
- `holm(p_values, alpha)`: which of several tests reject at family level alpha (Holm's step-down, at least as
  strong as Bonferroni): a gate that asks one question per scenario and per stage says "worse" of two equal
  deployments at most alpha of the time in all, not alpha per question.

tests/core/test_compare.py checks each against its definition and, by simulation, the rate of "worse"
between samples drawn from one distribution (the eval gate's property, rtvi_monitor/evals/gate.py).
"""

import math
from collections.abc import Sequence

import numpy as np

from rtvi_monitor.core.reducer.turns import percentile

__all__ = ["MIN_CALLS", "MIN_SAMPLES", "fewer_passes_p", "holm", "percentile", "percentile_change", "slower_p"]

MIN_SAMPLES = 8


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fewer_passes_p(passed_a: int, runs_a: int, passed_b: int, runs_b: int) -> float:
    """One-sided Fisher exact p: P(B's passes <= passed_b | the passes both made, each side's runs)."""
    if not (0 <= passed_a <= runs_a and 0 <= passed_b <= runs_b):
        raise ValueError("passes must be between 0 and the runs")
    total, passes = runs_a + runs_b, passed_a + passed_b
    if runs_b == 0 or runs_a == 0:
        return 1.0
    low = max(0, passes - runs_a)
    denominator = _log_comb(total, runs_b)
    p = 0.0
    for k in range(low, passed_b + 1):
        p += math.exp(_log_comb(passes, k) + _log_comb(total - passes, runs_b - k) - denominator)
    return min(1.0, p)


def _ranks(values: list[float]) -> tuple[list[float], float]:
    """Average ranks (1-based) of the values, and the ties' term sum(t^3 - t)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    return ranks, ties


def slower_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """One-sided Mann-Whitney p that B's values are stochastically larger than A's; None with too few."""
    n, m = len(a), len(b)
    if n < MIN_SAMPLES or m < MIN_SAMPLES:
        return None
    ranks, ties = _ranks([*a, *b])
    u_b = sum(ranks[n:]) - m * (m + 1) / 2
    mean = n * m / 2
    total = n + m
    variance = n * m / 12 * ((total + 1) - ties / (total * (total - 1)))
    if variance <= 0:
        return 1.0  # every value the same: no difference
    z = (u_b - mean - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def holm(p_values: dict[str, float], alpha: float) -> set[str]:
    """The keys whose test rejects under Holm's step-down at family-wise level alpha."""
    rejected: set[str] = set()
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    count = len(ordered)
    for index, (key, p) in enumerate(ordered):
        if p > alpha / (count - index):
            break
        rejected.add(key)
    return rejected


# --- a percentile's change between two deployments, with an interval from the calls themselves ------------

# A side's calls at least: with fewer, the bootstrap's far tails undercover (simulated, tests/core/test_compare.py:
# at 30 calls a side, twelve equal figures were called different in 9 % of pairs against the stated 5 %; at 50, 4.7 %).
MIN_CALLS = 50
ROUNDS = 1000
_CHUNK = 100  # bootstrap rounds computed at once (memory: _CHUNK x turns)


def _percentile_draws(calls: Sequence[Sequence[float]], qs: Sequence[float], rounds: int, rng) -> np.ndarray:
    """`rounds` bootstrap draws of each q-th percentile (`percentile`'s) of the calls' turns, resampling whole calls:
    a call's turns go together (one caller, one network, one moment of the services), so they are not counted
    as independent. One row per q, from the same resamples (one cumulative count serves every q)."""
    sizes = [len(c) for c in calls]
    values = np.concatenate([np.asarray(c, dtype=float) for c in calls])
    owner = np.repeat(np.arange(len(calls)), sizes)
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    # A resample's turns number at most every call the largest (all its draws on it): in 16 bits when that fits,
    # half the memory the counts pass through (twice as fast, the same draws).
    dtype = np.int16 if len(calls) * max(sizes) < 2**15 else np.int32
    draws = []
    for start in range(0, rounds, _CHUNK):
        n = min(_CHUNK, rounds - start)
        counts = rng.multinomial(len(calls), np.full(len(calls), 1 / len(calls)), size=n).astype(dtype)
        cumulative = np.cumsum(counts[:, owner], axis=1, dtype=dtype)
        total = cumulative[:, -1:]
        # The page's own percentile (reducer.turns.percentile: the value at round(q% of n - 1), 0-based), so that
        # the draws are of the figure the table shows (a property test found the two told apart).
        ranks = [(np.round(q / 100 * (total - 1)) + 1).astype(dtype) for q in qs]
        draws.append([values[np.argmax(cumulative >= rank, axis=1)] for rank in ranks])
    return np.concatenate([np.asarray(chunk) for chunk in draws], axis=1)


def percentile_changes(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    qs: Sequence[float],
    family: int = 1,
    alpha: float = 0.05,
    rounds: int = ROUNDS,
    seed: int = 0,
) -> dict[float, dict | None]:
    """B's q-th percentiles against A's (values per call, each call its turns' values), for each q of `qs`: both,
    the change, and an interval for it at level 1 - alpha / family (Bonferroni: `family` such intervals together
    miss at most alpha of the time), by the percentile bootstrap over calls. None for each when a side has
    fewer than MIN_CALLS calls."""
    a = [c for c in a if len(c)]
    b = [c for c in b if len(c)]
    if len(a) < MIN_CALLS or len(b) < MIN_CALLS:
        return dict.fromkeys(qs)
    rng = np.random.default_rng(seed)
    changes = _percentile_draws(b, qs, rounds, rng) - _percentile_draws(a, qs, rounds, rng)
    tail = alpha / family / 2 * 100
    pooled_a, pooled_b = sorted(v for c in a for v in c), sorted(v for c in b for v in c)
    found = {}
    for q, change in zip(qs, changes, strict=True):
        low, high = np.percentile(change, [tail, 100 - tail])
        before, after = percentile(pooled_a, q), percentile(pooled_b, q)
        found[q] = {
            "a": float(before),
            "b": float(after),
            "change": float(after - before),
            "low": float(low),
            "high": float(high),
            "calls": [len(a), len(b)],
        }
    return found


def percentile_change(a, b, q: float, family: int = 1, alpha: float = 0.05, rounds: int = ROUNDS, seed: int = 0):
    """One q of `percentile_changes`."""
    return percentile_changes(a, b, (q,), family, alpha, rounds, seed)[q]
