"""An agent's turns across its calls (issue 37): where the wait goes, its trend, and deployments compared.

Read from each ended call's kept figures (models.CallFigures, rtvi_monitor/sessions/figures.py), never from
every call's messages, so that a fleet's history answers in under a second (bench/fleet.py,
docs/BENCHMARKS.md). What each figure reads, bounded:

- the period's figures (rates, each stage's p50/p95, what the wait is made of): the newest
  TURN_STATS_MAX_SESSIONS calls of the period, of a region or all (`read` of `total`, said on the page);
- per deployment: the period's MOST_DEPLOYMENTS with the newest calls, each counted and its newest
  DEPLOYMENT_CALLS calls read;
- the trend: each bucket of the period (4 hours of a day, days of a week), its newest TREND_CALLS calls;
- two deployments compared: each one's newest COMPARE_CALLS calls of the period.

Only calls: eval runs' calls are not the fleet's (Session.objects.calls()), and a live call is counted once it
ended. Cached TURN_STATS_CACHE_SECONDS, by everything the answer depends on.
"""

import hashlib
from datetime import timedelta

import orjson
from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Max, Min, TextField
from django.db.models.functions import Cast

from rtvi_monitor.core import compare, figure_names
from rtvi_monitor.core import diagnosis as turns
from rtvi_monitor.sessions import figures as kept
from rtvi_monitor.sessions import queries
from rtvi_monitor.sessions.models import CallFigures, Session

TURN_PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
TREND_BUCKETS = {"24h": (timedelta(hours=4), 6), "7d": (timedelta(days=1), 7)}
TREND_CALLS = 50  # of a trend bucket's calls, its newest read
MOST_DEPLOYMENTS = 8  # the period's deployments listed (and offered to compare), newest last call first
DEPLOYMENT_CALLS = 100  # of a listed deployment's calls, its newest read for its row
# Of a deployment's calls of the period, its newest compared (each side): the bootstrap's cost grows with the
# turns it resamples (core/compare.py): 100 calls of 20 turns a side keep the page under a second (bench/fleet.py).
COMPARE_CALLS = 100

# The bots' breakdowns' totals: the whole wait from the user's silence, the VAD's stop time in it (the messages'
# turn latency starts when the VAD releases the turn, after it).
WHOLE_WAIT = "breakdown_total"
COMPARED = (*turns.STAGE_NAMES, "latency")
COMPARED_PERCENTILES = (50, 95)
LABELS = {stage: label for stage, _, _, label in turns.STAGES} | {
    "latency": figure_names.TURN_LATENCY.name,
    kept.VOICE_TO_VOICE: "Voice to voice (from the recordings)",
    WHOLE_WAIT: "Whole wait from the user's silence (its bots' breakdown)",
}
PART = "part:"  # a breakdown part's values among a call's, beside the stages' (`part:llm_inference`)
FLAGS = "flags"  # a call's yes-or-no figures among its values: a barge-in, errors, a bad end
RATES = {
    "barge_in": "Calls with a barge-in",
    "errors": "Calls with errors",
    "ended_badly": "Calls that ended badly",
}
MOST_PARTS = 8  # the parts compared: the most common both deployments' breakdowns name


# --- a call's values, and two deployments' compared ------------------------------------------------------------


def call_values(summary: dict) -> dict[str, list[float]]:
    """One call's values per figure: its stages' and turn latency's, and each part its bots' breakdowns name."""
    values = dict(summary["values"])
    for total, parts, *_ in summary.get("breakdowns", ()):
        values.setdefault(WHOLE_WAIT, []).append(total)
        for key, _, ms in parts:
            values.setdefault(PART + key, []).append(ms)
    return values


def _compared(before: list[dict], after: list[dict]) -> list[str]:
    """The figures compared: the stages, the turn latency, the voice-to-voice wait where calls were recorded, and
    the parts both sides' breakdowns name most."""
    named: dict[str, list[int]] = {}
    for side, calls in enumerate((before, after)):
        for values in calls:
            for name in values:
                if name.startswith(PART):
                    named.setdefault(name, [0, 0])[side] += 1
    shared = sorted((n for n, counts in named.items() if all(counts)), key=lambda n: -min(named[n]))
    extra = [name for name in (kept.VOICE_TO_VOICE, WHOLE_WAIT) if any(name in v for v in (*before, *after))]
    return [*COMPARED, *extra, *shared[:MOST_PARTS]]


# A change smaller than this is never called worse or better, whatever its interval: calls that share a machine's
# load (or a provider's minute) are not quite independent, and with near-constant timings a few ms came out
# "worse" now and then (tests/house/test_pipecat_deployments.py, two identical services side by side).
MIN_CHANGE_MS = 20.0
MIN_CHANGE_SHARE = 0.05  # of the figure before


def _verdict(change: dict | None) -> str:
    """Worse (better) when the whole interval is above (below) zero and the change is at least MIN_CHANGE_MS and
    MIN_CHANGE_SHARE of the figure before."""
    if change is None:
        return "too few calls"
    floor = max(MIN_CHANGE_MS, MIN_CHANGE_SHARE * abs(change["a"]))
    if change["low"] > 0 and change["change"] >= floor:
        return "worse"
    if change["high"] < 0 and -change["change"] >= floor:
        return "better"
    return "no difference shown"


def _rate_row(flag: str, before: list[dict], after: list[dict], family: int, alpha: float = 0.05) -> dict:
    """The share of calls with `flag` before and now, "worse" or "better" by Fisher's exact test each way at
    alpha / family / 2 (the table's intervals' level, so the family's rate holds); at least MIN_CALLS a side."""
    a = [call[FLAGS][flag] for call in before if call.get(FLAGS, {}).get(flag) is not None]
    b = [call[FLAGS][flag] for call in after if call.get(FLAGS, {}).get(flag) is not None]
    row = {"figure": f"rate:{flag}", "label": RATES[flag], "q": None, "change": None, "rate": None}
    if len(a) < compare.MIN_CALLS or len(b) < compare.MIN_CALLS:
        return {**row, "verdict": "too few calls"}
    ka, kb = sum(a), sum(b)
    worse_p = compare.fewer_passes_p(len(a) - ka, len(a), len(b) - kb, len(b))  # fewer calls without it
    better_p = compare.fewer_passes_p(ka, len(a), kb, len(b))  # fewer calls with it
    level = alpha / family / 2
    verdict = "worse" if worse_p <= level else "better" if better_p <= level else "no difference shown"
    rate = {"a": ka / len(a), "b": kb / len(b), "calls": [len(a), len(b)], "p": min(worse_p, better_p)}
    return {**row, "rate": rate, "verdict": verdict}


def compare_calls(before: list[dict], after: list[dict]) -> tuple[list[dict], int]:
    """The comparison's rows for two deployments' calls (each call's `call_values` with its FLAGS): each stage's
    wait, the turn latency and each part of the bots' breakdowns (a setting's such as the VAD's stop time apart
    from the services'), at p50 and p95, with an interval from the calls themselves (core/compare.py
    percentile_change: the bootstrap over calls, every interval of the table widened together so that two
    deployments that behave the same are called worse or better at most 5 % of the time in all), then the
    rates. Worse or better only when the whole interval is. Returns the rows and the family's size."""
    # A figure measured on no call of either side (a bot that sends no LLM messages) has no row, not "too few".
    names = [n for n in _compared(before, after) if any(values.get(n) for values in (*before, *after))]
    family = len(names) * len(COMPARED_PERCENTILES) + len(RATES)
    rows = []
    for name in names:
        a = [values.get(name) or [] for values in before]
        b = [values.get(name) or [] for values in after]
        label = LABELS.get(name) or f"{name[len(PART) :]} (its bots' breakdown)"
        changes = compare.percentile_changes(a, b, COMPARED_PERCENTILES, family=family)
        for q, change in changes.items():
            rows.append({"figure": name, "label": label, "q": q, "change": change, "verdict": _verdict(change)})
    rows.extend(_rate_row(flag, before, after, family) for flag in RATES)
    return rows, family


def _pair(deployments: list[dict], active: str | None, before: str, after: str) -> tuple[str, str] | None:
    """The deployments to compare: those asked for when the period has calls of them; by default the active one
    (else the newest) against the newest other one."""
    order = [d["deployment_id"] for d in deployments if d["deployment_id"]]
    if after not in order:
        after = active if active in order else (order[0] if order else "")
    if before not in order or before == after:
        before = next((d for d in order if d != after), "")
    return (before, after) if after and before else None


def _json(name: str):
    """A JSON column read as its text and parsed with orjson: Django's JSONField parses with json, about half as
    fast (0.21 against 0.12 ms a call's summary, docs/BENCHMARKS.md), and an agent's figures parse thousands."""
    return Cast(name, TextField())


def _side(calls, deployment_id: str) -> list[dict]:
    rows = calls.filter(deployment_id=deployment_id).order_by("-started_at")
    rows = rows.annotate(s=_json("summary"), f=_json("flags")).values_list("s", "f")[:COMPARE_CALLS]
    return [{**call_values(orjson.loads(summary)), FLAGS: orjson.loads(flags)} for summary, flags in rows]


def deployment_change(calls, scope_key: str, deployments: list[dict], active, before="", after="") -> dict | None:
    """Two deployments of the agent's `calls` (CallFigures of the period) compared (`compare_calls`), each by its
    newest COMPARE_CALLS calls. Cached as the figures are."""
    pair = _pair(deployments, active, before, after)
    if pair is None:
        return None
    before, after = pair
    key = f"{scope_key}:change:v4:" + hashlib.sha256(f"{before}\n{after}".encode()).hexdigest()
    found = cache.get(key)
    if found is None:
        rows, family = compare_calls(_side(calls, before), _side(calls, after))
        found = {"before": before, "after": after, "rows": rows, "min_calls": compare.MIN_CALLS, "family": family}
        found |= {"most_calls": COMPARE_CALLS, "min_change_ms": MIN_CHANGE_MS, "min_change_share": MIN_CHANGE_SHARE}
        cache.set(key, found, settings.TURN_STATS_CACHE_SECONDS)
    return found


# --- the period's figures, and their trend ----------------------------------------------------------------------

READ = ("session__session_id", "s")


def _with_session(session_id: str, summary: dict) -> dict:
    """A call's summary with its session named on each breakdown (made_of names the slowest turns' calls)."""
    breakdowns = [[*b[:3], session_id] for b in summary.get("breakdowns", ())]
    return {**summary, "breakdowns": breakdowns}


def _deployments(calls) -> list[dict]:
    """The period's deployments, newest last call first (at most MOST_DEPLOYMENTS), each with its calls' count,
    first and last, and the figures of its newest DEPLOYMENT_CALLS calls (`read`)."""
    found = (
        calls.values("deployment_id")
        .annotate(calls=Count("pk"), first_at=Min("started_at"), last_at=Max("started_at"))
        .order_by("-last_at")[:MOST_DEPLOYMENTS]
    )
    out = []
    for row in found:
        texts = calls.filter(deployment_id=row["deployment_id"]).order_by("-started_at").annotate(s=_json("summary"))
        summaries = [orjson.loads(text) for text in texts.values_list("s", flat=True)[:DEPLOYMENT_CALLS]]
        out.append({**row, **turns.aggregate(summaries), "sessions": row["calls"], "read": len(summaries)})
    return out


def _figures_of(calls, period: str) -> dict:
    """The figures of the newest TURN_STATS_MAX_SESSIONS of `calls`, and per deployment (`_deployments`)."""
    newest = calls.order_by("-started_at").annotate(s=_json("summary"))
    rows = list(newest.values_list(*READ)[: settings.TURN_STATS_MAX_SESSIONS])
    summaries = [_with_session(session_id, orjson.loads(text)) for session_id, text in rows]
    return {
        "period": period,
        "read": len(rows),
        "overall": turns.aggregate(summaries),
        "deployments": _deployments(calls),
    }


def _trend(calls, period: str, now, parts: list[str]) -> list[dict]:
    """Each bucket of the period, oldest first: its calls, the turn latency's p50 and p95 and, for each of `parts`
    (the largest at the period's slowest turns), its mean at the bucket's slowest turns; from its newest
    TREND_CALLS calls."""
    size, count = TREND_BUCKETS[period]
    out = []
    for i in range(count, 0, -1):
        start, end = now - size * i, now - size * (i - 1)
        bucket = calls.filter(started_at__gte=start, started_at__lt=end)
        texts = bucket.order_by("-started_at").annotate(s=_json("summary")).values_list("s", flat=True)
        summaries = [orjson.loads(text) for text in texts[:TREND_CALLS]]
        found = turns.aggregate(summaries)
        made = {p["key"]: p for p in (found["made_of"] or {}).get("parts", ())}
        out.append(
            {
                "start": start,
                "end": end,
                "calls": bucket.count() if len(summaries) == TREND_CALLS else len(summaries),
                "read": len(summaries),
                "latency": found["latency"],
                "parts": [{"key": key, "ms": made[key]["p95_ms"] if key in made else None} for key in parts],
            }
        )
    return out


def agent_turn_figures(
    organization, agent_key: str, period: str, now, active_deployment_id=None, region="", before="", after=""
) -> dict:
    """An agent's turns over a period ("24h" or "7d", TURN_PERIODS), of one region or all: interruption and
    backchannel rates, each stage's p50/p95 and what the wait is made of, overall and per deployment (newest
    first), their trend, and two deployments compared (`before` and `after`, by default the active one against
    the one before). The kept figures of the period's ended calls are brought up to date first (figures.fill)."""
    since = now - TURN_PERIODS[period]
    read = settings.TURN_STATS_MAX_SESSIONS
    scope = f"{organization.pk}\n{agent_key}\n{period}\n{region}\n{read}\n{queries.judged()}"
    key = "turns:agent:v5:" + hashlib.sha256(scope.encode()).hexdigest()
    every = CallFigures.objects.filter(organization=organization, agent_key=agent_key, started_at__gte=since)
    calls = every.filter(region=region) if region else every
    found = cache.get(key)
    if found is None:
        ended = Session.objects.calls().filter(organization=organization, agent_key=agent_key, started_at__gte=since)
        _, pending = kept.fill(ended, settings.TURN_STATS_MAX_SESSIONS)
        found = {**_figures_of(calls, period), "total": calls.count(), "pending": pending}
        found["regions"] = sorted(r for r in every.values_list("region", flat=True).distinct() if r)
        top = [p["key"] for p in (found["overall"]["made_of"] or {}).get("parts", ())[:3]]
        found["trend"] = {"parts": top, "buckets": _trend(calls, period, now, top), "most_calls": TREND_CALLS}
        if not pending:  # while calls wait to be taken apart, each read takes the next ones
            cache.set(key, found, settings.TURN_STATS_CACHE_SECONDS)
    for deployment in found["deployments"]:
        deployment["active"] = bool(active_deployment_id) and deployment["deployment_id"] == active_deployment_id
    return {
        **found,
        "region": region,
        "change": deployment_change(calls, key, found["deployments"], active_deployment_id, before, after),
        "periods": list(TURN_PERIODS),
        "capped": found["read"] < found["total"],
        "thresholds": queries.thresholds(),
    }
