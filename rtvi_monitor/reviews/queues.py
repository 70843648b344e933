"""Review queues: saved filters of ended calls ("barge-ins with errors on agent X this week"), their assignee and
progress (of the calls the filter matches, how many have a call-level mark, by anybody).

Making, assigning and deleting a queue is each in the audit log (its name and filter, the assignee's name).
"""

from datetime import timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from dashboard.org import audit
from dashboard.org.models import AuditEntry, Membership
from dashboard.web.http import whole_number
from rtvi_monitor.reviews.marks import Refused
from rtvi_monitor.reviews.models import NAME_MAX, Review, ReviewQueue
from rtvi_monitor.sessions.models import HAS_ERRORS, EndKind, Session

MAX_DAYS = 90
MAX_QUEUES = 100
SHOWN = 200  # a queue's page lists at most this many calls (its counts are of all)


def matching(queue: ReviewQueue):
    """The ended calls the queue's filter matches, each with `reviewed` (it has a call-level mark): the oldest
    unreviewed first, then the reviewed ones, oldest first."""
    since = timezone.now() - timedelta(days=queue.days)
    calls = Session.objects.filter(
        organization=queue.organization_id, status=Session.Status.ENDED, started_at__gte=since
    )
    if queue.agent_key:
        calls = calls.filter(agent_key=queue.agent_key)
    if queue.deployment_id:
        calls = calls.filter(deployment_id=queue.deployment_id)
    if queue.with_errors:
        calls = calls.filter(HAS_ERRORS)
    if queue.with_interruptions:
        calls = calls.filter(interruption_count__gt=0)
    if queue.end_kinds:
        calls = calls.filter(end_kind__in=queue.end_kinds)
    reviewed = Review.objects.filter(session=OuterRef("pk"), turn__isnull=True)
    return calls.annotate(reviewed=Exists(reviewed)).order_by("reviewed", "started_at", "pk")


def progress(queue: ReviewQueue) -> tuple[int, int]:
    """(reviewed, total) of the calls the queue matches."""
    calls = matching(queue)
    return calls.filter(reviewed=True).count(), calls.count()


def queues_of(organization) -> list[dict]:
    """The organization's queues, each with its progress."""
    found = []
    for queue in ReviewQueue.objects.filter(organization=organization).select_related("assignee"):
        reviewed, total = progress(queue)
        found.append({"queue": queue, "reviewed": reviewed, "total": total})
    return found


def describe_filter(queue: ReviewQueue) -> str:
    """The filter in words: "agent support, with errors, with barge-ins, last 7 days"."""
    parts = []
    if queue.agent_key:
        parts.append(f"agent {queue.agent_key}")
    if queue.deployment_id:
        parts.append(f"deployment {queue.deployment_id}")
    if queue.with_errors:
        parts.append("with errors")
    if queue.with_interruptions:
        parts.append("with barge-ins")
    if queue.end_kinds:
        labels = dict(EndKind.choices)
        parts.append("ended: " + ", ".join(str(labels.get(kind, kind)) for kind in queue.end_kinds))
    parts.append(f"last {queue.days} day{'s' if queue.days != 1 else ''}")
    return ", ".join(parts)


def _text(form, name: str, limit: int) -> str:
    value = " ".join(str(form.get(name, "") or "").split())
    if len(value) > limit:
        raise Refused(f"The {name.replace('_', ' ')} may be at most {limit} characters.")
    return value


def read_queue(form) -> dict:
    """A queue's fields from the form (a QueryDict: `end_kind` may be given several times). Refused with why."""
    name = _text(form, "name", NAME_MAX)
    if not name:
        raise Refused("Name the queue: what its calls have in common.")
    try:
        days = int(str(form.get("days", "7")).strip())
    except ValueError:
        raise Refused(f"Days must be a whole number from 1 to {MAX_DAYS}.") from None
    if not 1 <= days <= MAX_DAYS:
        raise Refused(f"Days must be a whole number from 1 to {MAX_DAYS}.")
    kinds = form.getlist("end_kind") if hasattr(form, "getlist") else list(form.get("end_kind") or [])
    if any(kind not in EndKind.values for kind in kinds):
        raise Refused("An end kind given is not one the dashboard records.")
    return {
        "name": name,
        "agent_key": _text(form, "agent_key", 100),
        "deployment_id": _text(form, "deployment_id", 100),
        "days": days,
        "with_errors": form.get("with_errors") in ("on", "true", True),
        "with_interruptions": form.get("with_interruptions") in ("on", "true", True),
        "end_kinds": sorted(set(kinds)),
    }


def member_of(organization, raw) -> object | None:
    """The member of the organization whose user id `raw` is; None for "" (nobody); Refused for anyone else."""
    if raw in (None, ""):
        return None
    user_id = whole_number(str(raw))
    members = Membership.objects.filter(organization=organization, user_id=user_id).select_related("user")
    found = None if user_id is None else members.first()
    if found is None:
        raise Refused("Assign the queue to a member of the organization.")
    return found.user


def make_queue(request, organization, fields: dict, assignee) -> ReviewQueue:
    if ReviewQueue.objects.filter(organization=organization).count() >= MAX_QUEUES:
        raise Refused(f"An organization keeps at most {MAX_QUEUES} queues: delete one first.")
    queue = ReviewQueue.objects.create(
        organization=organization,
        assignee=assignee,
        created_by=request.user if request.user.is_authenticated else None,
        created_by_name=audit.who(request)[0],
        **fields,
    )
    audit.record(
        organization,
        AuditEntry.Action.REVIEW_QUEUE_MADE,
        queue.name,
        request=request,
        queue=queue.pk,
        filter=describe_filter(queue),
        assignee=assignee.get_username() if assignee else None,
    )
    return queue


def assign(request, queue: ReviewQueue, assignee) -> None:
    was = queue.assignee.get_username() if queue.assignee else None
    queue.assignee = assignee
    queue.save(update_fields=["assignee"])
    now = assignee.get_username() if assignee else None
    audit.record(
        queue.organization_id,
        AuditEntry.Action.REVIEW_QUEUE_ASSIGNED,
        queue.name,
        request=request,
        queue=queue.pk,
        assignee=now,
        was=was or "nobody",
    )


def delete(request, queue: ReviewQueue) -> None:
    pk, name = queue.pk, queue.name
    queue.delete()
    audit.record(queue.organization_id, AuditEntry.Action.REVIEW_QUEUE_DELETED, name, request=request, queue=pk)


def members_of(organization) -> list:
    """Who a queue may be assigned to: the organization's members, by name."""
    memberships = Membership.objects.filter(organization=organization).select_related("user")
    return sorted((m.user for m in memberships), key=lambda user: user.get_username())


def own_queue(organization, pk) -> ReviewQueue:
    """The organization's queue, or LookupError: another organization's is told apart from none by nothing."""
    pk = whole_number(str(pk))  # a URL's digits may be more than an id holds
    found = ReviewQueue.objects.filter(organization=organization, pk=pk).select_related("assignee")
    queue = None if pk is None else found.first()
    if queue is None:
        raise LookupError(f"No review queue {pk} in your organization.")
    return queue
