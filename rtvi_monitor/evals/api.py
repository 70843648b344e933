"""JSON for CI: upload an eval run's results, and ask the gate whether a candidate deployment is worse.

- `POST /api/evals/runs/?agent=<id or name>&deployment=<id or environment>&run=<label>`, the body a
  results.jsonl as `pipecat eval` wrote it: 201 with what was kept and linked; 400 saying which lines are
  wrong and why (nothing kept). A key with "write" (a CI step's), or an operator. In the audit log.
- `GET /api/evals/<agent_key>/gate/?candidate=<deployment>&baseline=<deployment>`: the verdict
  (rtvi_monitor/evals/gate.py), "pass", "worse" or "insufficient", with its reasons and its table. The
  baseline is the agent's active deployment when not given. A key with "read", or any member.
- `GET /api/evals/<agent_key>/runs/`: the agent's uploaded runs, newest first.

The bot package's `rtvi-dashboard-eval upload` and `rtvi-dashboard-eval gate` call these (sdk/README.md).
"""

from django.urls import reverse

from dashboard.access.auth import key_or_member_required
from dashboard.org import audit
from dashboard.org.models import AuditEntry
from dashboard.web.http import BadParam, Query, StrictJsonResponse, json_error, json_methods
from rtvi_monitor.evals import gate, runs
from rtvi_monitor.evals.models import EvalRun, Scenario
from rtvi_monitor.sessions.models import Session


@json_methods("POST", browser_form=True)
@key_or_member_required("evals.upload")
def upload_run(request):
    query = Query(request.GET)
    try:
        given, deployment, label = query.text("agent", 200), query.text("deployment", 100), query.text("run", 100)
    except BadParam as exc:
        return json_error(str(exc), 400)
    if not given:
        return json_error("Name the agent the run tested: ?agent=<its id or name>.", 400)
    agent = runs.agent_named(request.organization, given)
    if agent is None:
        return json_error(f"No agent {given[:100]!r} in your organization (by id or name).", 400)
    try:
        deployment = runs.checked_name(deployment, "deployment (what the run tested)")
        label = runs.checked_name(label, "run") if label else ""
        who = audit.who(request)[0]
        # Read here, not as request.body (Django's 2.5 MB DATA_UPLOAD_MAX_MEMORY_SIZE): a long suite's file is bigger.
        data = request.read(runs.MAX_BYTES + 1)
        if len(data) > runs.MAX_BYTES:
            return json_error(f"The results file is over {runs.MAX_BYTES:,} bytes: split the run.", 413)
        run, unlinked = runs.store(request.organization, agent[0], agent[1], deployment, label, who, data)
    except runs.Refused as refused:
        return StrictJsonResponse(
            {"error": "The results were not kept: " + refused.errors[0], "errors": refused.errors, "code": "400"},
            status=400,
        )
    audit.record(
        request.organization,
        AuditEntry.Action.EVAL_RUN_UPLOADED,
        f"{run.agent_key}@{run.deployment}",
        request=request,
        run=run.label,
        results=run.results_count,
        passed=run.passed_count,
        linked=run.linked_count,
    )
    return StrictJsonResponse(
        {
            "run": run.pk,
            "agent": run.agent_key,
            "deployment": run.deployment,
            "label": run.label,
            "results": run.results_count,
            "passed": run.passed_count,
            "linked": run.linked_count,
            "unlinked": unlinked,
            "url": request.build_absolute_uri(reverse("eval_gate_page", args=[run.agent_key])),
        },
        status=201,
    )


def verdict_for(request, agent_key: str) -> tuple[gate.Verdict | None, str]:
    """The gate's verdict for the request's ?candidate= and ?baseline=, or what is wrong with them."""
    query = Query(request.GET)
    candidate = query.text("candidate", 100)
    if not candidate:
        return None, "Name the candidate: ?candidate=<deployment>."
    baseline = query.text("baseline", 100) or runs.active_deployment(request.organization, agent_key)
    if not baseline:
        return None, "Name the baseline (?baseline=<deployment>): the agents API names no active deployment."
    if baseline == candidate:
        return None, f"The candidate and the baseline are both {candidate!r}: compare two deployments."
    return gate.gate(request.organization, agent_key, baseline, candidate), ""


def _known_agent(request, agent_key: str) -> bool:
    org = request.organization
    return any(
        model.objects.filter(organization=org, agent_key=agent_key).exists() for model in (EvalRun, Session, Scenario)
    )


@json_methods("GET")
@key_or_member_required("evals.gate")
def gate_json(request, agent_key):
    if not _known_agent(request, agent_key):
        return json_error(f"No agent {agent_key[:100]!r} with calls or eval runs in your organization.", 404)
    try:
        verdict, wrong = verdict_for(request, agent_key)
    except BadParam as exc:
        return json_error(str(exc), 400)
    if verdict is None:
        return json_error(wrong, 400)
    return StrictJsonResponse({"agent": agent_key, **verdict.as_json()})


@json_methods("GET")
@key_or_member_required("evals.gate")
def runs_json(request, agent_key):
    if not _known_agent(request, agent_key):
        return json_error(f"No agent {agent_key[:100]!r} with calls or eval runs in your organization.", 404)
    found = EvalRun.objects.filter(organization=request.organization, agent_key=agent_key)[:200]
    return StrictJsonResponse(
        {
            "agent": agent_key,
            "runs": [
                {
                    "run": run.pk,
                    "deployment": run.deployment,
                    "label": run.label,
                    "uploaded_at": run.uploaded_at.isoformat(),
                    "uploaded_by": run.uploaded_by,
                    "results": run.results_count,
                    "passed": run.passed_count,
                    "linked": run.linked_count,
                }
                for run in found
            ],
        }
    )
