"""Marks on a call or a turn, and the reason list they draw from: the rules every page and the API call.

- `reasons_of(organization)`: its reasons, the default list made on first use when it has none.
- `read_mark(data, organization, session)`: a form's or a JSON body's mark, checked (`Refused` says why).
- `mark(...)` / `unmark(...)`: one current mark per (call, turn, reviewer); marking again replaces it. Each is
  in the audit log (new, changed, removed) with the call's id, the turn, the verdict and the reasons' labels,
  never the note (the reviewer's words, which may quote the caller: call contents).
- `session_panel(...)`: what the session page shows of a call's marks: a note only to those who may read the
  call's contents (the view asks the policy and says so).
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.org import audit
from dashboard.org.models import AuditEntry
from dashboard.web.http import whole_number
from rtvi_monitor.evals.expects import Expects
from rtvi_monitor.reviews.models import LABEL_MAX, NOTE_MAX, Review, ReviewReason, Verdict

# Each with what a test drafted from a call marked bad for it expects instead of what the bot did (Expects).
DEFAULT_REASONS = (
    ("wrong answer", Expects.REPLY),
    ("too slow", Expects.FASTER),
    ("cut the caller off", Expects.NOTHING),
    ("ignored a barge-in", Expects.NOTHING),
    ("hallucinated", Expects.REPLY),
    ("failed tool", Expects.TOOL),
)
MAX_REASONS = 50  # an organization's list, retired ones included


class Refused(ValueError):
    """A mark, a queue or a reason that cannot be, in a sentence a person can act on."""


def reasons_of(organization, active_only: bool = False) -> list[ReviewReason]:
    """The organization's reasons in their order; an organization without any gets DEFAULT_REASONS first."""
    found = ReviewReason.objects.filter(organization=organization)
    if not found.exists():
        ReviewReason.objects.bulk_create(
            [
                ReviewReason(organization=organization, label=label, position=i, expects=expects)
                for i, (label, expects) in enumerate(DEFAULT_REASONS)
            ],
            ignore_conflicts=True,  # two first uses at once make one list
        )
    if active_only:
        found = found.filter(active=True)
    return list(found.order_by("position", "id"))


@dataclass(frozen=True)
class Mark:
    turn: int | None  # None: the whole call
    verdict: str
    reasons: tuple[ReviewReason, ...]
    note: str


def turn_of(raw, session) -> int | None:
    if raw in (None, "", "call"):
        return None
    turn = whole_number(str(raw).strip()) if not isinstance(raw, bool) else None
    if turn is None:
        raise Refused("The turn must be a turn's number, or empty for the whole call.")
    if not 1 <= turn <= session.turn_count:
        raise Refused(f"This call has {session.turn_count} turns: there is no turn {turn} to mark.")
    return turn


def _reasons(raw_ids, organization) -> tuple[ReviewReason, ...]:
    ids = []
    for raw in raw_ids:
        reason_id = whole_number(str(raw)) if not isinstance(raw, bool) else None
        if reason_id is None:
            raise Refused("A reason must be one of the organization's reasons (its number).")
        ids.append(reason_id)
    found = {r.pk: r for r in ReviewReason.objects.filter(organization=organization, active=True, pk__in=ids)}
    if len(found) != len(set(ids)):
        raise Refused("A reason given is not one of the organization's reasons in use.")
    return tuple(sorted(found.values(), key=lambda r: (r.position, r.pk)))


def read_mark(data: dict, organization, session) -> Mark:
    """The mark `data` asks for: {"turn", "verdict", "reasons": [ids], "note"} (a form's `reason` fields are
    its reasons). Refused when anything is not what it may be; nothing is cut to fit."""
    verdict = str(data.get("verdict") or "")
    if verdict not in Verdict.values:
        raise Refused("The verdict must be good or bad.")
    note = data.get("note") or ""
    if not isinstance(note, str):
        raise Refused("The note must be text.")
    note = note.strip()
    if len(note) > NOTE_MAX:
        raise Refused(f"The note is {len(note)} characters long; a note may be at most {NOTE_MAX}.")
    raw_reasons = data.get("reasons", [])
    if not isinstance(raw_reasons, list | tuple):
        raise Refused("The reasons must be a list of the organization's reasons.")
    return Mark(turn_of(data.get("turn"), session), verdict, _reasons(raw_reasons, organization), note)


def _where(turn: int | None) -> str | int:
    return "whole call" if turn is None else turn


def _audit(request, session_key: str, change: str, turn, verdict: str, labels: list[str]) -> None:
    audit.record(
        request.organization,
        AuditEntry.Action.REVIEW_MARKED,
        session_key,
        request=request,
        change=change,
        turn=_where(turn),
        verdict=verdict,
        reasons=labels,
    )


def mark(request, session, reviewer_name: str, given: Mark) -> tuple[str, Review]:
    """Mark the call (or its turn) for the reviewer, replacing their current mark there: ("new" or "changed",
    the mark). `request` is who did it, for the audit log."""
    fields = {
        "session": session,
        "verdict": given.verdict,
        "note": given.note,
        "reviewer": request.user if getattr(request.user, "is_authenticated", False) else None,
        "agent_key": session.agent_key,
        "deployment_id": session.deployment_id,
        "call_started_at": session.started_at,
        "created_at": timezone.now(),  # a mark made again is as new as its words
    }
    for attempt in range(2):  # a second try when another request made the same mark in between
        try:
            with transaction.atomic():
                review, created = Review.objects.select_for_update().update_or_create(
                    organization=session.organization,
                    session_key=session.session_id,
                    turn=given.turn,
                    reviewer_name=reviewer_name,
                    defaults=fields,
                )
                review.reasons.set(given.reasons)
            break
        except IntegrityError:
            if attempt:
                raise
    change = "new" if created else "changed"
    _audit(request, session.session_id, change, given.turn, given.verdict, [r.label for r in given.reasons])
    return change, review


def unmark(request, session, reviewer_name: str, turn: int | None) -> bool:
    """Remove the reviewer's mark of the call (or turn): whether there was one (audited when there was)."""
    review = Review.objects.filter(
        organization=session.organization, session_key=session.session_id, turn=turn, reviewer_name=reviewer_name
    ).first()
    if review is None:
        return False
    labels = [r.label for r in review.reasons.all()]
    review.delete()
    _audit(request, session.session_id, "removed", turn, review.verdict, labels)
    return True


def as_json(review: Review, sees_notes: bool) -> dict:
    """A mark for a page or the API: its note only for those who may read the call's contents."""
    shown = {
        "turn": review.turn,
        "verdict": review.verdict,
        "reasons": [r.label for r in review.reasons.all()],
        "reviewer": review.reviewer_name,
        "at": review.created_at.isoformat(),
    }
    if sees_notes:
        shown["note"] = review.note
    return shown


def marks_of(session) -> list[Review]:
    found = Review.objects.filter(organization=session.organization_id, session=session)
    return list(found.prefetch_related("reasons").order_by("turn", "-created_at", "-id"))


def where(turn: int | None) -> str:
    """A mark's place in words: "the whole call" or "turn 3" (the session page's card, a drafted test's note)."""
    return "the whole call" if turn is None else f"turn {turn}"


def bad_marks(session) -> list[tuple[int | None, list[ReviewReason]]]:
    """The call's marks that say it went wrong, as (the turn, None for the whole call; its reasons): what a
    scenario drafted from it (rtvi_monitor/evals/scenario.py `apply_marks`) starts from."""
    return [(review.turn, list(review.reasons.all())) for review in marks_of(session) if review.verdict == Verdict.BAD]


def session_panel(session, *, reviewer_name: str, sees_notes: bool, may_mark: bool) -> dict:
    """The session page's review card: every mark (a note only when `sees_notes`), the form's reasons and turns
    when `may_mark`, and which marks are the reviewer's own (to change or remove)."""
    marks = []
    for review in marks_of(session):
        shown = as_json(review, sees_notes)
        shown["mine"] = may_mark and review.reviewer_name == reviewer_name
        shown["where"] = where(review.turn)
        marks.append(shown)
    return {
        "marks": marks,
        "may_mark": may_mark,
        "reasons": reasons_of(session.organization, active_only=True) if may_mark else [],
        "turns": list(range(1, session.turn_count + 1)) if may_mark else [],
        "note_max": NOTE_MAX,
    }


def change_reasons(request, organization, form) -> None:
    """The reason list's settings form: `add` a label (with `add-expects`), `rename-<id>` to a new label,
    `expects-<id>` what a test drafted from a call marked bad for it expects (Expects), `retire` / `restore` an id.
    Audited with the list's labels after the change. Refused with its reason (nothing changed)."""
    reasons = {r.pk: r for r in reasons_of(organization)}
    changed = []
    _once(form)
    expects = _expects(form.get("add-expects", ""))  # the page's select always sends it: checked, with a label or not
    with transaction.atomic():
        if label := " ".join(str(form.get("add", "")).split()):
            _check_label(label, reasons.values())
            if len(reasons) >= MAX_REASONS:
                raise Refused(f"An organization's list holds at most {MAX_REASONS} reasons: retire one instead.")
            position = max((r.position for r in reasons.values()), default=-1) + 1
            ReviewReason.objects.create(organization=organization, label=label, position=position, expects=expects)
            changed.append(f"added {label}" + (f" (a test expects {Expects(expects).label})" if expects else ""))
        _change_each(reasons, form, changed)
    if changed:
        labels = [r.label for r in reasons_of(organization, active_only=True)]
        audit.record(
            organization,
            AuditEntry.Action.REVIEW_REASONS_CHANGED,
            "reasons",
            request=request,
            change=changed,
            now=labels,
        )


def _once(form) -> None:
    """A setting sent twice (`add-expects`, `expects-<id>`) is refused, not its last value taken."""
    for key in form:
        if (key == "add-expects" or key.startswith("expects-")) and len(form.getlist(key)) > 1:
            raise Refused("What a test expects for a reason may be given once.")


def _expects(raw) -> str:
    value = str(raw)
    if value not in Expects.values:
        choices = ", ".join(repr(v) for v in Expects.values)
        raise Refused(f"What a test expects for a reason must be one of {choices}, not {value[:20]!r}.")
    return value


def _change_each(reasons: dict, form, changed: list[str]) -> None:
    for key, value in form.items():
        if key.startswith("rename-") and (reason := reasons.get(_id(key.removeprefix("rename-")))):
            label = " ".join(str(value).split())
            if label and label != reason.label:
                _check_label(label, [r for r in reasons.values() if r.pk != reason.pk])
                changed.append(f"renamed {reason.label} to {label}")
                reason.label = label
                reason.save(update_fields=["label"])
        if key.startswith("expects-") and (reason := reasons.get(_id(key.removeprefix("expects-")))):
            expects = _expects(value)
            if expects != reason.expects:
                changed.append(f"{reason.label}: a test expects {Expects(expects).label}")
                reason.expects = expects
                reason.save(update_fields=["expects"])
    for verb, active in (("retire", False), ("restore", True)):
        reason = reasons.get(_id(form.get(verb, "")))
        if reason is not None and reason.active != active:
            reason.active = active
            reason.save(update_fields=["active"])
            changed.append(f"{'retired' if not active else 'restored'} {reason.label}")


def _id(raw) -> int | None:
    return whole_number(str(raw))


def _check_label(label: str, others) -> None:
    if len(label) > LABEL_MAX:
        raise Refused(f"A reason's label may be at most {LABEL_MAX} characters; that one is {len(label)}.")
    if any(r.label.casefold() == label.casefold() for r in others):
        raise Refused(f"The list already has a reason {label!r}.")
