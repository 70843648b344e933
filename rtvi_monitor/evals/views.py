"""The pages that turn a call into an eval scenario, and an agent's suite of them.

- `GET /sessions/<session_id>/scenario/`: the call's caller turns as a draft, to edit; `POST` saves it.
- `GET /evals/<agent_key>/`: the agent's suite; `POST` with `delete=<name>` removes one.
- `GET /evals/<agent_key>/suite.zip`: the suite as the folder `pipecat eval` runs (audio for listeners).

Scenarios hold the caller's words: every page is the operator's (`evals.read`, `evals.write`; a viewer is
refused with the reason), and saving, deleting and downloading are each in the audit log, in words of its
own (counts and names, never the caller's).
"""

from django.db import IntegrityError, transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from dashboard.access.auth import member_required
from dashboard.org import audit
from dashboard.org.models import AuditEntry, LatencyBudget
from dashboard.web.http import BadParam
from rtvi_monitor.evals import api, gate, runs, suite
from rtvi_monitor.evals import scenario as scenarios
from rtvi_monitor.evals.models import EvalResult, Scenario
from rtvi_monitor.reviews import marks as review_marks
from rtvi_monitor.sessions.models import Session
from rtvi_monitor.sessions.queries import organization_session

MAX_WAIT_SECONDS = 600


def _wait_ms(raw: str, number: int, errors: list[str]) -> int | None:
    try:
        seconds = float(raw)
    except ValueError:
        errors.append(f"Turn {number}: the wait allowed must be a number of seconds, not {raw[:20]!r}.")
        return None
    if not 0.1 <= seconds <= MAX_WAIT_SECONDS:
        errors.append(f"Turn {number}: the wait allowed must be between 0.1 and {MAX_WAIT_SECONDS} seconds.")
        return None
    return round(seconds * 1000)


def edited(drafted: list[dict], form) -> tuple[list[dict], list[str]]:
    """The draft's turns as the form changed them, and what is wrong with them (nothing saved when any)."""
    turns, errors = [], []
    for turn in drafted:
        n = turn["number"]
        include = form.get(f"include-{n}") == "on"
        text = form.get(f"user-{n}", turn["user"]).strip()
        if include and not text:
            errors.append(f"Turn {n}: what the caller says cannot be empty (untick the turn to leave it out).")
        wait = _wait_ms(form.get(f"within-{n}", str(turn["within_ms"] / 1000)).strip(), n, errors)
        turns.append(
            {
                **turn,
                "include": include,
                "user": text[:2000],
                "calls": turn["made"] if form.get(f"calls-{n}") == "on" else [],
                "within_ms": wait or turn["within_ms"],
                "contains": form.get(f"contains-{n}", "").strip()[:200],
                "excludes": form.get(f"excludes-{n}", "").strip()[:200],
            }
        )
    if not turns:  # a form posted for a call with none (its page has no form): a scenario that tests nothing
        errors.append("This call has no turn in which the caller said something: there is nothing to replay.")
    elif not any(t["include"] for t in turns):
        errors.append("Tick at least one turn: a scenario replays one or more of the caller's turns.")
    return turns, errors


def _save(request, session, turns: list[dict], name: str, note: str) -> Scenario | None:
    try:
        with transaction.atomic():
            saved = Scenario.objects.create(
                organization=request.organization,
                agent_key=session.agent_key or "unknown-agent",
                agent_name=session.agent_name,
                name=name,
                session=session,
                turns=turns,
                note=note[:2000],
                created_by=request.user,
                created_by_name=request.user.get_username(),
            )
    except IntegrityError:
        return None
    included = len(saved.included)
    audit.record(
        request.organization,
        AuditEntry.Action.SCENARIO_SAVED,
        f"{saved.agent_key}/{saved.name}",
        request=request,
        session=session.session_id,
        turns=included,
    )
    return saved


@member_required({"GET": "evals.read", "POST": "evals.write"})
def scenario_from_call(request, session_id):
    session = organization_session(request.organization, session_id)
    runs = suite.caller_runs(session)
    drafted = scenarios.draft(session, runs)
    # What its reviewers marked it bad for (rtvi_monitor/reviews) changes the draft (scenario.apply_marks), is
    # shown beside it and starts its note.
    bad = review_marks.bad_marks(session)
    budget = LatencyBudget.objects.filter(organization=session.organization_id, agent_id=session.agent_key).first()
    scenarios.apply_marks(drafted, bad, budget.p95_ms if budget else None)
    reviewed = [(review_marks.where(n), [r.label for r in reasons]) for n, reasons in bad]
    # The draft shows what the caller said: a read of the call's contents, as its page is (deduplicated there).
    audit.record_read(session.organization, session.session_id, "scenario draft", request=request)
    errors: list[str] = []
    name = scenarios.slug(f"{session.agent_key or 'call'}-{session.session_id}")
    note = "; ".join(f"{where}: {', '.join(labels) or 'bad'}" for where, labels in reviewed)[:2000]
    if request.method == "POST":
        drafted, errors = edited(drafted, request.POST)
        name = scenarios.slug(request.POST.get("name", ""), "")
        note = request.POST.get("note", "").strip()
        if not name:
            errors.append("Name it: letters, digits, dashes (its file is <name>.yaml in the agent's suite).")
        if not errors:
            if _save(request, session, drafted, name, note) is not None:
                return redirect(reverse("eval_suite", args=[session.agent_key or "unknown-agent"]) + f"#s-{name}")
            errors.append(f"The agent's suite already has a scenario named {name!r}: choose another name.")
    preview = scenarios.document(name or "scenario", drafted) if drafted and any(t["include"] for t in drafted) else ""
    return render(
        request,
        "evals/scenario_form.html",
        {
            "session": session,
            "turns": [{**turn, "within_s": f"{turn['within_ms'] / 1000:g}"} for turn in drafted],
            "name": name,
            "note": note,
            "errors": errors,
            "preview": preview,
            "recorded": runs is not None,
            "max_wait": MAX_WAIT_SECONDS,
            "max_turns": scenarios.MAX_TURNS,
            "reviewed": reviewed,
        },
        status=400 if errors else 200,
    )


def _suite(request, agent_key: str):
    """The organization's scenarios of the agent; Http404 for an agent none of its calls names (another
    organization's agent is told apart from none by nothing)."""
    saved = Scenario.objects.filter(organization=request.organization, agent_key=agent_key).select_related("session")
    if (
        not saved.exists()
        and not Session.objects.filter(organization=request.organization, agent_key=agent_key).exists()
    ):
        raise Http404(f"No calls of an agent {agent_key!r} in your organization.")
    return saved


@member_required({"GET": "evals.read", "POST": "evals.write"})
def suite_page(request, agent_key):
    saved = _suite(request, agent_key)
    if request.method == "POST":
        gone = saved.filter(name=request.POST.get("delete", "")).first()
        if gone is None:
            raise Http404("No such scenario in this agent's suite.")
        gone.delete()
        audit.record(
            request.organization, AuditEntry.Action.SCENARIO_DELETED, f"{agent_key}/{gone.name}", request=request
        )
        return redirect("eval_suite", agent_key)
    first = saved.first()
    name = first.agent_name if first else _agent_name(request.organization, agent_key)
    folder = first.folder if first else scenarios.slug(name or agent_key, "agent")
    return render(
        request,
        "evals/suite.html",
        {"agent_key": agent_key, "agent_name": name or agent_key, "scenarios": saved, "folder": folder},
    )


def _agent_name(organization, agent_key: str) -> str:
    session = Session.objects.filter(organization=organization, agent_key=agent_key).order_by("-started_at").first()
    return session.agent_name if session else ""


@member_required("evals.read")
def suite_download(request, agent_key):
    with_audio = request.can.audio_listen
    data, count, clips, folder = suite.zip_of(request.organization, agent_key, with_audio)
    if not count:
        raise Http404("This agent's suite has no scenario yet.")
    audit.record(
        request.organization,
        AuditEntry.Action.SUITE_DOWNLOAD,
        agent_key,
        request=request,
        scenarios=count,
        audio_clips=clips,
    )
    response = HttpResponse(data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{folder}-evals.zip"'
    return response


@member_required("evals.gate")
def gate_page(request, agent_key):
    """The deploy gate of an agent: the deployments its eval runs tested, the comparison of two (?candidate=,
    ?baseline=; by default the newest candidate against the active deployment), and each result of the
    candidate's runs, a failed one opening the call it made when the run's bots named it."""
    active = runs.active_deployment(request.organization, agent_key)
    overview = gate.overview(request.organization, agent_key, active)
    if not overview["deployments"] and not _suite(request, agent_key).exists():
        raise Http404(f"No eval runs of an agent {agent_key!r} in your organization.")
    problem = ""
    if request.GET.get("candidate"):
        try:
            overview["verdict"], problem = api.verdict_for(request, agent_key)
        except BadParam as exc:
            problem = str(exc)
        if overview["verdict"] is not None:
            overview["candidate"] = overview["verdict"].candidate
    results = EvalResult.objects.filter(
        run__organization=request.organization, run__agent_key=agent_key, run__deployment=overview["candidate"] or ""
    ).select_related("session", "run")[:500]
    return render(
        request,
        "evals/gate.html",
        {"agent_key": agent_key, "gate": overview, "problem": problem, "results": results},
        status=400 if problem else 200,
    )
