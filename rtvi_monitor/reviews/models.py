"""Review of calls: operators mark a call or one of its turns good or bad, with the organization's reasons and a note.

- `ReviewReason`: the organization's own list of reasons ("wrong answer", "too slow", ...); an organization
  with none gets the default list on first use (services.reasons_of), retired ones stay on old marks.
- `Review`: one current mark per (call, turn, reviewer): marking again replaces it. Its `note` is the
  reviewer's words, which may quote the caller: it is call contents (rtvi_monitor/privacy/contents.py blanks it
  when the call is erased or its contents purged; the verdict and reasons, which are no words, stay). The call's
  agent, deployment and start are copied at mark time, so the bad share is read from this one table, and
  survives the call's erase (the row's `session` is then null; `session_key` keeps the call's id, as the audit
  log's entries keep it as their target).
- `ReviewQueue`: a saved filter of calls, with an assignee; its progress is how many of the calls it matches
  have a call-level mark.

Reasons are a many-to-many to ReviewReason, not a list of ids in a JSON field: the database keeps each mark's
reasons to rows that exist and belong to a reason list (a renamed reason stays the same reason on every old
mark, counted as one), and "marks by reason" is a join rather than a scan of every mark's list.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from dashboard.org.models import Organization
from rtvi_monitor.evals.expects import Expects
from rtvi_monitor.sessions.models import Session

LABEL_MAX = 60
NOTE_MAX = 2000
NAME_MAX = 80


class ReviewReason(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="review_reasons")
    label = models.CharField(max_length=LABEL_MAX, help_text="The organization's own words for why a call was bad.")
    position = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True, help_text="Offered on new marks; a retired reason stays on old ones.")
    expects = models.CharField(
        max_length=8,
        choices=Expects.choices,
        blank=True,
        default=Expects.NOTHING,
        help_text="What a test drafted from a call marked bad for it expects instead of what the bot did.",
    )

    class Meta:
        ordering = ["position", "id"]
        constraints = [models.UniqueConstraint(fields=["organization", "label"], name="review_reason_label_unique")]

    def __str__(self) -> str:
        return self.label


class Verdict(models.TextChoices):
    GOOD = "good", "good"
    BAD = "bad", "bad"


class Review(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="reviews")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="reviews")
    session_key = models.CharField(max_length=100, help_text="The call's session id (kept when the call is erased).")
    turn = models.PositiveIntegerField(null=True, blank=True, help_text="The turn marked; empty: the whole call.")
    verdict = models.CharField(max_length=4, choices=Verdict.choices)
    reasons = models.ManyToManyField(ReviewReason, blank=True, related_name="reviews")
    note = models.TextField(max_length=NOTE_MAX, blank=True, help_text="The reviewer's words: call contents.")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reviewer_name = models.CharField(max_length=200, help_text="Who marked it: a username or an API key's name.")
    created_at = models.DateTimeField(default=timezone.now)
    agent_key = models.CharField(max_length=100, blank=True)
    deployment_id = models.CharField(max_length=100, blank=True)
    call_started_at = models.DateTimeField(help_text="When the call began: the week its mark counts in.")

    class Meta:
        ordering = ["session_key", "turn", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "session_key", "reviewer_name"],
                condition=Q(turn__isnull=True),
                name="one_call_review_per_reviewer",
            ),
            models.UniqueConstraint(
                fields=["organization", "session_key", "turn", "reviewer_name"],
                condition=Q(turn__isnull=False),
                name="one_turn_review_per_reviewer",
            ),
        ]
        indexes = [models.Index(fields=["organization", "turn", "call_started_at"], name="review_share_idx")]

    def __str__(self) -> str:
        where = "the call" if self.turn is None else f"turn {self.turn}"
        return f"{self.session_key} {where}: {self.verdict}"


class ReviewQueue(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="review_queues")
    name = models.CharField(max_length=NAME_MAX)
    agent_key = models.CharField(max_length=100, blank=True, help_text="Only this agent's calls (blank: any).")
    deployment_id = models.CharField(max_length=100, blank=True, help_text="Only this deployment's (blank: any).")
    days = models.PositiveIntegerField(default=7, help_text="Calls that began in the last this many days.")
    with_errors = models.BooleanField(default=False)
    with_interruptions = models.BooleanField(default=False, help_text="Only calls with a barge-in.")
    end_kinds = models.JSONField(default=list, blank=True, help_text="Only calls that ended so (empty: any).")
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="review_queues"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name
