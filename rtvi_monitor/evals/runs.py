"""An eval run's results.jsonl, uploaded: read, kept, and linked to the calls the run made.

`pipecat eval` appends one JSON record per run of a scenario to its results.jsonl (Pipecat 1.14,
pipecat/evals/suite.py `_scenario_record`): bot, name, scenario, kind, attempt, passed, skipped, error,
duration_ms, failures [{turn_index, expectation_index, event_name, kind, reason}], turns [{turn_index,
status, duration_ms, expectations}], artifacts, and for a failed run events_seen. A simulation's record
(`kind: simulation`) has metrics instead of failures. The file is taken whole or not at all: one record
that is not such a line refuses the upload, saying which lines and why, and nothing is kept.

What is kept holds no words (models.EvalRun): a failure's kind, turn and expectation, never its reason nor
what the bot said. The words are in the run's own calls: a bot under eval that streams to the dashboard
with RTVI_DASHBOARD_EVAL_RUN (and RTVI_DASHBOARD_EVAL_SCENARIO) set names them in its ingest URL
(rtvi_dashboard.wire.TAG_PARAMS), and `link` pairs each result with its call: by scenario, the k-th attempt
with the k-th of that scenario's calls to start (attempts run in order, pipecat/evals/suite.py). A
scenario whose calls do not number its attempts is left unlinked, with the reason, rather than guessed.
"""

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import Q
from rtvi_dashboard.evals import SESSION_FIELD
from rtvi_dashboard.wire import TAG_RE, TAG_RULE

from dashboard.agents import service as agents_service
from dashboard.agents.models import Agent
from rtvi_monitor.core.protocol import SESSION_ID_RE
from rtvi_monitor.evals.models import EvalResult, EvalRun, Scenario
from rtvi_monitor.sessions.agent_link import as_uuid
from rtvi_monitor.sessions.models import Session

MAX_BYTES = 20 * 1024 * 1024  # a results.jsonl with events_seen for every failure of a long suite
MAX_RECORDS = 10_000
MAX_ERRORS = 20  # the lines an answer names; it says how many more
MAX_FAILURES = 50  # per record: what a turn can fail of
KINDS = ("script", "simulation")  # pipecat.evals.scenario.EvalKind
_KIND_NAME = re.compile(r"^[a-z_]{1,40}\Z")
_EVENT_NAME = re.compile(r"^<?[A-Za-z][A-Za-z0-9_.:-]{0,56}>?\Z")  # response, llm_started, <connect>, <judge>
_NAME = re.compile(TAG_RE)  # the rule a bot's tags follow (its deployment, its eval run): one rule, the wire's


class Refused(ValueError):
    """The upload, refused: `errors` says what is wrong, line by line."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass
class Parsed:
    results: list[EvalResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def checked_name(value: str, what: str) -> str:
    """A deployment or run label as given, or Refused saying why not (the rule bots' tags follow too)."""
    if not _NAME.match(value or ""):
        raise Refused([f"{what}: {TAG_RULE}"])
    return value


def _count(value, what: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least or value > 2**31 - 1:
        raise ValueError(f"{what!r} must be a whole number, at least {least}")
    return value


def _event_name(value) -> str:
    """An expectation's event as Pipecat names it (`response`, `<connect>`), or "": any other text is not kept
    (a hostile or future file could put what was said there)."""
    return value if isinstance(value, str) and _EVENT_NAME.match(value) else ""


def _failure(item) -> dict:
    if not isinstance(item, dict):
        raise ValueError("each of 'failures' must be an object")
    kind = item.get("kind")
    if not isinstance(kind, str) or not _KIND_NAME.match(kind):
        raise ValueError("a failure's 'kind' must be one of Pipecat's failure kinds (lower-case words and _)")
    turn, expectation = item.get("turn_index", -1), item.get("expectation_index", -1)
    for value, what in ((turn, "turn_index"), (expectation, "expectation_index")):
        if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= 10_000:
            raise ValueError(f"a failure's {what!r} must be a whole number from -1 (none)")
    return {
        "turn_index": turn,
        "expectation_index": expectation,
        "event_name": _event_name(item.get("event_name")),
        "kind": kind,
    }


def _simulation_failures(record: dict) -> list[dict]:
    metrics = record.get("metrics") or []
    if not isinstance(metrics, list):
        raise ValueError("'metrics' must be a list")
    return [
        {
            "turn_index": 0,
            "expectation_index": -1,
            "event_name": f"metric {_event_name(m.get('name'))}".strip(),
            "kind": m.get("failure_kind") if _KIND_NAME.match(str(m.get("failure_kind") or "")) else "judge_no",
        }
        for m in metrics
        if isinstance(m, dict) and m.get("passed") is False
    ]


def _turns(record: dict) -> list[dict]:
    turns = record.get("turns") or []
    if not isinstance(turns, list):
        raise ValueError("'turns' must be a list (a scenario's)")
    kept = []
    for turn in turns[:200]:
        if not isinstance(turn, dict):
            raise ValueError("each of 'turns' must be an object")
        status = turn.get("status")
        if status not in ("passed", "failed", "not_run"):
            raise ValueError("a turn's 'status' must be passed, failed or not_run")
        kept.append(
            {
                "turn_index": _count(turn.get("turn_index"), "turn_index"),
                "status": status,
                "duration_ms": _count(turn.get("duration_ms", 0), "duration_ms"),
            }
        )
    return kept


def result_of(record) -> EvalResult:
    """One results.jsonl record as kept (unsaved), or ValueError saying what is wrong with it."""
    if not isinstance(record, dict):
        raise ValueError("a record must be a JSON object")
    kind = record.get("kind", "script")
    if kind not in KINDS:
        raise ValueError(f"'kind' must be one of {', '.join(KINDS)}")
    scenario = record.get("scenario") or record.get("name")
    if not isinstance(scenario, str) or not scenario.strip() or len(scenario) > 200:
        raise ValueError("'scenario' must name the scenario (1-200 characters)")
    if not isinstance(record.get("passed"), bool):
        raise ValueError("'passed' must be true or false")
    failures = record.get("failures") or []
    if not isinstance(failures, list):
        raise ValueError("'failures' must be a list")
    kept_failures = [_failure(item) for item in failures[:MAX_FAILURES]]
    if kind == "simulation":
        kept_failures += _simulation_failures(record)
    duration = record.get("duration_ms")
    named = record.get(SESSION_FIELD)
    if named is not None and (not isinstance(named, str) or not SESSION_ID_RE.match(named)):
        raise ValueError(f"{SESSION_FIELD!r} must be a session id (rtvi-dashboard-eval upload writes it)")
    result = EvalResult(
        scenario=scenario.strip(),
        attempt=_count(record.get("attempt", 1), "attempt", least=1),
        passed=record["passed"],
        skipped=bool(record.get("skipped")),
        errored=bool(record.get("error")),
        duration_ms=None if duration is None else _count(duration, "duration_ms"),
        failures=kept_failures,
        turns=_turns(record) if kind == "script" else [],
    )
    result.named_session = named  # the call its attempt made, when the upload named it (not kept: linked)
    return result


def parse(data: bytes) -> list[EvalResult]:
    """The results of a results.jsonl, or Refused naming each line that is not a record and why."""
    if len(data) > MAX_BYTES:
        raise Refused([f"the file is {len(data):,} bytes; at most {MAX_BYTES:,} are taken (split the run)"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refused([f"the file is not UTF-8 text (byte {error.start})"]) from None
    parsed = Parsed()
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise Refused(["the file has no record: upload the results.jsonl `pipecat eval` wrote"])
    if len(lines) > MAX_RECORDS:
        raise Refused([f"the file has {len(lines):,} records; at most {MAX_RECORDS:,} are taken (split the run)"])
    for number, line in lines:
        try:
            parsed.results.append(result_of(json.loads(line)))
        except (ValueError, RecursionError) as error:
            reason = "not JSON" if isinstance(error, json.JSONDecodeError) else str(error)
            parsed.errors.append(f"line {number}: {reason}")
    if parsed.errors:
        more = len(parsed.errors) - MAX_ERRORS
        raise Refused(parsed.errors[:MAX_ERRORS] + ([f"and {more} more lines"] if more > 0 else []))
    return parsed.results


def _eval_calls(run: EvalRun):
    """The calls a run's results may link to: the organization's calls an eval run made (a bot tagged them
    `?eval_run=`), of the run's agent or of none. Never a caller's call, whatever an upload names: its waits
    would be the gate's, and the gate's page would open it as an eval's."""
    return (
        Session.objects.filter(organization_id=run.organization_id)
        .exclude(eval_run="")
        .filter(Q(agent_key=run.agent_key) | Q(agent_key=""))
    )


def _link_named(run: EvalRun, results: list[EvalResult]) -> list[EvalResult]:
    """Link the results whose record names its call (SESSION_FIELD) to it; the others, left to link by order."""
    named = {r.named_session for r in results if getattr(r, "named_session", None)}
    found = {s.session_id: s for s in _eval_calls(run).filter(session_id__in=named)}
    rest = []
    for result in results:
        call = found.get(getattr(result, "named_session", None) or "")
        if call is not None:
            result.session = call
        else:
            rest.append(result)
    return rest


def link(run: EvalRun, results: list[EvalResult]) -> list[str]:
    """Pair each result with the call its attempt made (see the module's docstring); what could not be, why."""
    results = _link_named(run, results)
    if not results:
        return []
    if not run.label:
        return [f"{len(results)} results name no call, and the run has no label (--run) to find them by"]
    calls = (
        _eval_calls(run)
        .filter(eval_run=run.label)
        .exclude(eval_results__isnull=False)  # a call already linked, by an earlier upload, is not one of these
        .order_by("started_at", "pk")
    )
    by_scenario: dict[str, list[Session]] = defaultdict(list)
    for call in calls:
        by_scenario[call.eval_scenario].append(call)
    attempts: dict[str, list[EvalResult]] = defaultdict(list)
    for result in sorted(results, key=lambda r: r.attempt):
        attempts[result.scenario].append(result)
    untagged = by_scenario.pop("", [])
    if untagged and len(attempts) == 1 and not by_scenario:  # one scenario: its calls are its attempts
        by_scenario[next(iter(attempts))] = untagged
    unlinked = []
    for scenario, tried in attempts.items():
        # The bots' tag names the scenario as the record does (<file>/<scenario>) or only its file.
        found = by_scenario.get(scenario) or by_scenario.get(scenario.split("/", 1)[0]) or []
        if len(found) != len(tried):
            unlinked.append(f"{scenario}: {len(tried)} attempts, {len(found)} calls of run {run.label!r} naming it")
            continue
        for result, call in zip(tried, found, strict=True):
            result.session = call
    return unlinked


@transaction.atomic
def store(organization, agent_key: str, agent_name: str, deployment: str, label: str, by: str, data: bytes):
    """Keep an uploaded results.jsonl: the run, its results, each linked to its call where it can be.

    Returns (run, unlinked: why some results have no call). Refused (nothing kept) for a file that is not one.
    """
    results = parse(data)
    run = EvalRun.objects.create(
        organization=organization,
        agent_key=agent_key,
        agent_name=agent_name,
        deployment=deployment,
        label=label,
        uploaded_by=by[:200],
        results_count=len(results),
        passed_count=sum(r.passed for r in results),
    )
    unlinked = link(run, results)
    for result in results:
        result.run = run
    EvalResult.objects.bulk_create(results, batch_size=500)
    run.linked_count = sum(r.session_id is not None for r in results)
    run.save(update_fields=["linked_count"])
    return run, unlinked


def agent_named(organization, given: str) -> tuple[str, str, str] | None:
    """(its agents API id, its name, its active deployment or "") of the organization's agent named `given` (id or
    name), as its calls, its scenarios, its built-in agents or its agents API know it; None for none."""
    given = given.strip()
    if not given or len(given) > 200:
        return None
    for model in (Session, Scenario, EvalRun):
        found = (
            model.objects.filter(organization=organization, agent_key=given).first()
            or model.objects.filter(organization=organization, agent_name=given).first()
        )
        if found is not None:
            return found.agent_key, found.agent_name, active_deployment(organization, found.agent_key)
    built_in = Agent.objects.filter(organization=organization, name=given).first()
    if built_in is not None:
        return str(built_in.pk), built_in.name, str(built_in.active_deployment_id or "")
    listing = async_to_sync(agents_service.get_agents)(organization)
    record = listing.find(given) or next((a for a in listing.agents if a.name == given), None)
    if record is not None and 0 < len(record.id) <= 100 and "/" not in record.id:  # a path segment, as a bot's
        return record.id, record.name[:200], record.active_deployment_id or ""
    return None


def active_deployment(organization, agent_key: str) -> str:
    """The agent's active deployment as the agents API says now ("" when it cannot say)."""
    built_in = Agent.objects.filter(organization=organization, pk=agent_key).first() if as_uuid(agent_key) else None
    if built_in is not None:
        return str(built_in.active_deployment_id or "")
    listing = async_to_sync(agents_service.get_agents)(organization)
    record = listing.find(agent_key)
    return (record.active_deployment_id or "") if record is not None else ""
