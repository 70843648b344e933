"""The gate: is a candidate deployment's eval runs worse than the current one's, beyond their own spread?

Two kinds of question, every one one-sided (is the candidate worse, never merely different), answered by
rtvi_monitor/core/compare.py and held together at one family level ALPHA (Holm): of two deployments that
behave the same, the gate says "worse" at most ALPHA of the time (tests/evals/test_gate_properties.py).

- Each scenario's pass rate over its repeats (Fisher's exact test). A run the harness could not make (the
  bot never connected, it crashed) counts as failed; a skipped one does not count.
- Each stage's waits (Mann-Whitney), from the turns of the runs' own calls where they are linked
  (rtvi_monitor/core/diagnosis.py's five stages and the turn latency), and the harness's own time per
  scenario turn from results.jsonl (`turn`). A wait is worse only when it is beyond chance AND its p50 grew
  by at least MIN_SLOWER_MS and MIN_SLOWER_SHARE of the current one's: a millisecond is never a verdict.

The verdict: "worse" with a reason per question that says so; "insufficient" when either side has no
result to compare (the reasons say which); "pass" otherwise. Failures by kind are shown beside it (a kind
the candidate has and the current one had not is named), never a verdict by themselves.
"""

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from django.db.models import Count, Max, Q

from rtvi_monitor.core import compare
from rtvi_monitor.evals.models import EvalResult
from rtvi_monitor.sessions import fleet, queries
from rtvi_monitor.sessions.models import Session

ALPHA = 0.05
MIN_SLOWER_MS = 50
MIN_SLOWER_SHARE = 0.10
TURN = "turn"
# The harness's own clock first, then the calls' figures under the names every page gives them (fleet.LABELS).
WAIT_NAMES = {TURN: "Scenario turn (the eval's own clock)", "latency": fleet.LABELS["latency"]} | fleet.LABELS


@dataclass
class Side:
    """One deployment's runs: per scenario (passes, runs), failure kinds, and each wait's values (ms)."""

    deployment: str
    runs: int = 0
    passes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    kinds: Counter = field(default_factory=Counter)
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, result: EvalResult) -> None:
        if result.skipped:
            return
        self.runs += 1
        tally = self.passes[result.scenario]
        tally[0] += bool(result.passed)
        tally[1] += 1
        self.kinds.update(failure["kind"] for failure in result.failures)
        if result.errored and not result.failures:
            self.kinds["error"] += 1
        self.waits[TURN].extend(t["duration_ms"] for t in result.turns if t["status"] == "passed")


@dataclass
class Row:
    name: str
    label: str
    baseline: dict
    candidate: dict
    p_value: float | None = None
    worse: bool = False
    note: str = ""


@dataclass
class Verdict:
    verdict: str  # "pass", "worse", "insufficient"
    reasons: list[str]
    baseline: str
    candidate: str
    scenarios: list[Row]
    waits: list[Row]
    kinds: list[dict]
    alpha: float = ALPHA

    def as_json(self) -> dict:
        return asdict(self)


def _rate(tally) -> dict:
    passed, runs = tally or (0, 0)
    return {"passed": passed, "runs": runs, "rate": passed / runs if runs else None}


def _wait(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"n": len(ordered), "p50": compare.percentile(ordered, 50), "p95": compare.percentile(ordered, 95)}


def _scenario_rows(baseline: Side, candidate: Side) -> list[Row]:
    rows = []
    for name in sorted(set(baseline.passes) | set(candidate.passes)):
        row = Row(name, name, _rate(baseline.passes.get(name)), _rate(candidate.passes.get(name)))
        if row.baseline["runs"] and row.candidate["runs"]:
            row.p_value = compare.fewer_passes_p(
                row.baseline["passed"], row.baseline["runs"], row.candidate["passed"], row.candidate["runs"]
            )
        else:
            row.note = "not run on the candidate" if row.baseline["runs"] else "new: not run on the current one"
        rows.append(row)
    return rows


def _wait_rows(baseline: Side, candidate: Side) -> list[Row]:
    rows = []
    for name in WAIT_NAMES:
        a, b = baseline.waits.get(name, []), candidate.waits.get(name, [])
        if not a and not b:
            continue
        row = Row(name, WAIT_NAMES[name], _wait(a), _wait(b))
        row.p_value = compare.slower_p(a, b)
        if row.p_value is None:
            row.note = f"too few to tell (at least {compare.MIN_SAMPLES} a side)"
        rows.append(row)
    return rows


def _big_enough(row: Row) -> bool:
    before, after = row.baseline["p50"], row.candidate["p50"]
    return after - before >= max(MIN_SLOWER_MS, MIN_SLOWER_SHARE * before)


def judge(baseline: Side, candidate: Side, alpha: float = ALPHA) -> Verdict:
    """The verdict on `candidate` against `baseline` (see the module's docstring)."""
    scenarios, waits = _scenario_rows(baseline, candidate), _wait_rows(baseline, candidate)
    tests = {f"s:{r.name}": r.p_value for r in scenarios if r.p_value is not None}
    tests |= {f"w:{r.name}": r.p_value for r in waits if r.p_value is not None}
    rejected = compare.holm(tests, alpha)
    reasons = []
    for row in scenarios:
        row.worse = f"s:{row.name}" in rejected
        if row.worse:
            b, c = row.baseline, row.candidate
            reasons.append(
                f"{row.name} passes {c['passed']} of {c['runs']} runs on {candidate.deployment},"
                f" {b['passed']} of {b['runs']} on {baseline.deployment} (p = {row.p_value:.2g})"
            )
    for row in waits:
        row.worse = f"w:{row.name}" in rejected and _big_enough(row)
        if row.worse:
            reasons.append(
                f"{row.label}: p50 {row.candidate['p50']:.0f} ms on {candidate.deployment},"
                f" {row.baseline['p50']:.0f} ms on {baseline.deployment} (p = {row.p_value:.2g})"
            )
        elif f"w:{row.name}" in rejected:
            row.note = f"slower beyond chance, but by less than {MIN_SLOWER_MS} ms or {MIN_SLOWER_SHARE:.0%}"
    kinds = [
        {"kind": kind, "baseline": baseline.kinds.get(kind, 0), "candidate": candidate.kinds.get(kind, 0)}
        for kind in sorted(set(baseline.kinds) | set(candidate.kinds))
    ]
    if not baseline.runs or not candidate.runs:
        missing = [side.deployment for side in (baseline, candidate) if not side.runs]
        return Verdict(
            "insufficient",
            [f"no eval results uploaded for {name}" for name in missing],
            baseline.deployment,
            candidate.deployment,
            scenarios,
            waits,
            kinds,
            alpha,
        )
    verdict = "worse" if reasons else "pass"
    if not reasons:
        reasons = [f"no scenario passes less often and no wait is longer beyond chance (family level {alpha:g})"]
    return Verdict(verdict, reasons, baseline.deployment, candidate.deployment, scenarios, waits, kinds, alpha)


def side_of(organization, agent_key: str, deployment: str) -> Side:
    """A deployment's side: every uploaded result of the agent's runs against it, and its linked calls' waits."""
    side = Side(deployment)
    results = EvalResult.objects.filter(
        run__organization=organization, run__agent_key=agent_key, run__deployment=deployment
    ).only("scenario", "passed", "skipped", "errored", "failures", "turns", "session_id")
    linked = set()
    for result in results.iterator(chunk_size=1000):
        side.add(result)
        if result.session_id is not None and not result.skipped:
            linked.add(result.session_id)
    ended = Session.objects.filter(pk__in=linked, status=Session.Status.ENDED)
    calls = list(ended.values_list("pk", "session_id", "event_count"))
    traced = queries.traced_sessions(organization.pk, [session_id for _, session_id, _ in calls])
    for pk, session_id, event_count in calls:
        values = queries.stage_values(pk, session_id, organization.pk, event_count, session_id in traced)
        for name, found in values.items():
            side.waits[name].extend(found)
    return side


def gate(organization, agent_key: str, baseline: str, candidate: str) -> Verdict:
    return judge(side_of(organization, agent_key, baseline), side_of(organization, agent_key, candidate))


def deployments(organization, agent_key: str) -> list[dict]:
    """The deployments the agent's runs were made against, newest upload first, with their counts."""
    return list(
        EvalResult.objects.filter(run__organization=organization, run__agent_key=agent_key)
        .values("run__deployment")
        .annotate(results=Count("pk"), passed=Count("pk", filter=Q(passed=True)), last=Max("run__uploaded_at"))
        .order_by("-last")
    )


def overview(organization, agent_key: str, active: str) -> dict:
    """What the agent page shows: the deployments its eval runs tested, and the verdict on the newest candidate
    (the deployment last uploaded for that is not the active one) against the active one, when both have runs."""
    tested = deployments(organization, agent_key)
    names = [row["run__deployment"] for row in tested]
    candidate = next((name for name in names if name != active), None)
    verdict = gate(organization, agent_key, active, candidate) if candidate and active in names else None
    return {"deployments": tested, "active": active, "candidate": candidate, "verdict": verdict}
