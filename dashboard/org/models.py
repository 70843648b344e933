"""Organizations, their agents and deployments, and the credentials that reach them.

These models back the built-in agents API (`/v1/agents`), which serves the
same contract as Pipecat Cloud, and scope everything else in the dashboard:
an API key or an ingest token belongs to exactly one organization; a user belongs
to one or more, with a role in each (Membership).
"""

import hashlib
import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone


class Organization(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True)
    # Where this organization's agent list comes from. Blank fields fall back
    # to the AGENTS_API_BASE_URL / AGENTS_API_KEY settings.
    agents_api_base_url = models.URLField(
        blank=True, help_text="e.g. https://api.pipecat.daily.co/v1; blank uses the setting."
    )
    agents_api_key = models.CharField(
        max_length=200, blank=True, help_text="Private key for the agents API; blank uses the setting."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Retention (rtvi_monitor/retention.py): days each kind of data is kept after a call ends; blank:
    # kept until deleted. The purge runs on the server, in bounded batches, and says so in the audit log.
    keep_messages_days = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="Days an ended call's messages and transcript are kept (its figures stay); 0.5 is 12 hours.",
    )
    keep_sessions_days = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)], help_text="Days an ended call is kept at all."
    )
    keep_spans_days = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)], help_text="Days trace spans are kept."
    )
    keep_alerts_days = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="Days resolved alerts (and their deliveries) are kept.",
    )

    keep_audio_days = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="Days an ended call's recording is kept; blank: as long as its messages.",
    )
    # Call audio (rtvi_monitor/audio.py): off unless the organization opts in; then for every agent, or
    # for the ones listed (ids or names, one per line). Bots must ask for it too (RTVI_DASHBOARD_RECORD_AUDIO).
    record_audio = models.BooleanField(default=False, help_text="Store the audio of calls whose bots record it.")
    audio_agents = models.TextField(
        blank=True, help_text="Only these agents' calls (ids or names, one per line); blank: every agent."
    )
    audio_role = models.CharField(
        max_length=16,
        choices=[("operator", "operators and admins"), ("admin", "admins only")],
        default="operator",
        help_text="Who may listen to and download recordings (every listen is in the audit log).",
    )

    RETENTION_FIELDS = (
        "keep_messages_days",
        "keep_sessions_days",
        "keep_spans_days",
        "keep_alerts_days",
        "keep_audio_days",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def records_audio_of(self, *agent: str) -> tuple[bool, str]:
        """Whether calls to this agent (its id and name, either may be blank) are recorded, and why not."""
        if not self.record_audio:
            return False, "recording is off for this organization (Settings → Recording)"
        listed = {line.strip() for line in self.audio_agents.replace(",", "\n").splitlines() if line.strip()}
        if listed and not listed.intersection(a for a in agent if a):
            return False, "recording is on only for the agents listed in Settings → Recording, not this one"
        return True, ""

    @property
    def agents_api(self) -> tuple[str, str]:
        """The (base URL, key) this organization's agent list is fetched with."""
        base_url = self.agents_api_base_url or settings.AGENTS_API_BASE_URL
        return base_url.rstrip("/"), self.agents_api_key or settings.AGENTS_API_KEY


class AgentRetention(models.Model):
    """One agent's own retention, over its organization's: its calls' messages, and its calls, kept this long.

    `agent_id` is the agents API's id of the agent (what sessions record as their agent). A blank field
    leaves that kind to the organization's setting.
    """

    AGENT_FIELDS = ("keep_messages_days", "keep_sessions_days")

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="agent_retention")
    agent_id = models.CharField(max_length=200, help_text="The agent's id in the agents API.")
    agent_name = models.CharField(max_length=200, blank=True, help_text="Its name when this was set, to read.")
    keep_messages_days = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.001)])
    keep_sessions_days = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.001)])

    class Meta:
        ordering = ["agent_name", "agent_id"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "agent_id"], name="agent_retention_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name or self.agent_id} ({self.organization})"


class LatencyBudget(models.Model):
    """One agent's latency budget: the p95 of its turns' wait it should stay under, and, for the parts of the wait
    its bots' breakdowns name (core/contributions.py keys: `llm_inference`, `endpointing_wait`...), each part's
    own p95 budget. The Overview shows an agent over its budget with the part that put it there
    (rtvi_monitor/overview/figures.py budget_status)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="latency_budgets")
    agent_id = models.CharField(max_length=200, help_text="The agent's id in the agents API.")
    agent_name = models.CharField(max_length=200, blank=True, help_text="Its name when this was set, to read.")
    p95_ms = models.FloatField(validators=[MinValueValidator(1)], help_text="The turn latency p95 to stay under.")
    parts = models.JSONField(default=dict, blank=True, help_text="{part key: its p95 budget in ms}")

    class Meta:
        ordering = ["agent_name", "agent_id"]
        constraints = [models.UniqueConstraint(fields=["organization", "agent_id"], name="latency_budget_unique")]

    def __str__(self) -> str:
        return f"{self.agent_name or self.agent_id}: p95 {self.p95_ms:g} ms"


class Role(models.TextChoices):
    """A member's rank in an organization; each may do what the ones before it may (dashboard/access.py)."""

    VIEWER = "viewer", "viewer"  # health, figures and alerts; never a transcript or a message's contents
    OPERATOR = "operator", "operator"  # and transcripts, messages, exports, actions on calls
    ADMIN = "admin", "admin"  # and the organization's settings: members, keys, tokens, rules, prices, retention

    @classmethod
    def rank(cls, role: str) -> int:
        return [cls.VIEWER, cls.OPERATOR, cls.ADMIN].index(role) if role in cls.values else -1


class Membership(models.Model):
    """A user's place in one organization, with a role. A user may be in several, and picks one at a time."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OPERATOR)
    created_at = models.DateTimeField(default=timezone.now)
    # Made by single sign-on (dashboard/oidc.py): it goes when the provider's claims stop naming the
    # organization. One made by hand (or an invitation) is the organization's admins' to remove.
    via_sso = models.BooleanField(default=False)

    class Meta:
        ordering = ["organization__name"]
        constraints = [models.UniqueConstraint(fields=["user", "organization"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"

    @staticmethod
    def admin_ids(organization_id, lock: bool = True) -> set[int]:
        """The ids of an organization's admins' memberships, locked until the caller's transaction ends (or not:
        a page that only shows what it offers; the change itself asks again, locked)."""
        admins = Membership.objects.select_for_update() if lock else Membership.objects.all()
        return set(admins.filter(organization_id=organization_id, role=Role.ADMIN).values_list("pk", flat=True))

    def leaves_no_admin(self, role: str | None, admins: set[int] | None = None) -> bool:
        """Whether giving this member `role` (None: removing them) would leave their organization with no admin:
        an organization keeps one, whoever changes it (its admins' members page, single sign-on's claims).

        Reads the organization's admins as they are now and locks them until the caller's transaction ends,
        so two changes at once (two admins demoting each other) take turns and the second sees the first;
        or is given them (`admin_ids(…, lock=False)`, read once for a page of members).
        """
        if role == Role.ADMIN:
            return False
        return (self.admin_ids(self.organization_id) if admins is None else admins) == {self.pk}


class Invitation(models.Model):
    """A one-time link that makes whoever opens it (signed in, or signing up there) a member with a role."""

    VALID_FOR = timedelta(days=7)

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OPERATOR)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.email} to {self.organization} ({self.role})"

    @classmethod
    def issue(cls, organization, email: str, role: str, invited_by=None):
        """Create an invitation; returns (record, secret). Only the secret's hash is kept."""
        secret = "inv_" + secrets.token_urlsafe(24)
        record = cls.objects.create(
            organization=organization,
            email=email,
            role=role,
            key_hash=hash_secret(secret),
            invited_by=invited_by,
            expires_at=timezone.now() + cls.VALID_FOR,
        )
        return record, secret

    @classmethod
    def find(cls, secret: str):
        """The open invitation with this secret (not used, revoked or expired), or None."""
        if not secret or len(secret) > 100:
            return None
        return (
            cls.objects.select_related("organization")
            .filter(key_hash=hash_secret(secret), accepted_at__isnull=True, revoked_at__isnull=True)
            .filter(expires_at__gt=timezone.now())
            .first()
        )

    @property
    def state(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        return "expired" if self.expires_at <= timezone.now() else "open"


def hash_secret(secret: str) -> str:
    # Keys are 32 random bytes, so a fast hash is enough: there is nothing to
    # brute-force, and lookups by hash stay one indexed query.
    return hashlib.sha256(secret.encode()).hexdigest()


class SecretQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)

    def find(self, secret: str):
        """The active credential with this secret (not revoked, not expired), or None."""
        if not secret or len(secret) > 200:
            return None
        found = self.active().select_related("organization").filter(key_hash=hash_secret(secret)).first()
        if found is not None and getattr(found, "expired", False):
            return None
        return found


class Secret(models.Model):
    """A bearer credential: stored hashed, shown once, revocable."""

    PREFIX = ""
    # last_used_at is written at most this often, so a busy key does not turn
    # every request into a database write.
    TOUCH_EVERY = timedelta(minutes=1)

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    name = models.CharField(max_length=200, blank=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_prefix = models.CharField(max_length=16, editable=False, help_text="First characters, to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = SecretQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.key_prefix}… ({self.organization})"

    @classmethod
    def issue(cls, organization: Organization, name: str = "", *, request=None, actor: str = ""):
        """Create a credential; returns (record, secret). The secret is not stored; the audit log says who made it."""
        from dashboard.org import audit

        secret = cls.PREFIX + secrets.token_urlsafe(32)
        record = cls.objects.create(
            organization=organization, name=name, key_hash=hash_secret(secret), key_prefix=secret[:10]
        )
        audit.record(
            organization,
            audit.Action.KEY_CREATED,
            f"{record.key_prefix}…",
            request=request,
            actor=actor,
            kind=cls._meta.verbose_name,
            name=name,
        )
        return record, secret

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > self.TOUCH_EVERY:
            type(self).objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class ApiKey(Secret):
    """A private key for the agents API and the JSON API, like Pipecat Cloud's.

    Scopes: "read" (every GET, contents included: a key is the organization's own script) and
    "write" (what changes something: alert rules, acknowledgements, erasing a call). A key may
    expire; past `expires_at` it is refused as a revoked one is.
    """

    PREFIX = "pk_"
    SCOPES = ("read", "write")

    scopes = models.CharField(
        max_length=40, default="read,write", help_text='Comma-separated: "read", "write" or "read,write".'
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Blank: never expires.")

    objects = SecretQuerySet.as_manager()

    class Meta:
        verbose_name = "private API key"

    @property
    def scope_set(self) -> set[str]:
        return {scope.strip() for scope in self.scopes.split(",") if scope.strip()}

    @property
    def scope_list(self) -> list[str]:
        """Its scopes in SCOPES' order, as a page lists them ("read, write")."""
        return [scope for scope in self.SCOPES if scope in self.scope_set]

    def allows(self, scope: str) -> bool:
        return scope in self.scope_set

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def still_valid(self) -> bool:
        """Whether the key is neither revoked nor expired now (read again: it may have been revoked since)."""
        found = type(self).objects.active().filter(pk=self.pk).values_list("expires_at", flat=True)
        return any(expires_at is None or expires_at > timezone.now() for expires_at in found)


class Price(models.Model):
    """What one model costs the organization: the session pages, agents and Overview add usage up with it.

    `model` is the name bots report in their metrics (e.g. gpt-4o, sonic-2,
    nova-3). A session's usage of a model with no price here counts nothing,
    and its cost is shown as unknown when none of its models has a price.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="prices")
    model = models.CharField(max_length=200, help_text="As bots name it in their metrics, e.g. gpt-4o or sonic-2.")
    usd_per_million_input_tokens = models.FloatField(default=0, help_text="LLM prompt tokens.")
    usd_per_million_output_tokens = models.FloatField(default=0, help_text="LLM completion tokens.")
    usd_per_thousand_characters = models.FloatField(default=0, help_text="TTS characters.")
    usd_per_audio_minute = models.FloatField(default=0, help_text="STT audio.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]
        constraints = [models.UniqueConstraint(fields=["organization", "model"], name="price_model_unique_in_org")]

    def __str__(self) -> str:
        return f"{self.model} ({self.organization})"

    def cost(self, usage: dict) -> float:
        """US dollars for one model's usage ({prompt_tokens, completion_tokens, characters, stt_audio_seconds})."""
        return (
            usage.get("prompt_tokens", 0) * self.usd_per_million_input_tokens / 1e6
            + usage.get("completion_tokens", 0) * self.usd_per_million_output_tokens / 1e6
            + usage.get("characters", 0) * self.usd_per_thousand_characters / 1e3
            + usage.get("stt_audio_seconds", 0) * self.usd_per_audio_minute / 60
        )


class AuditImmutable(Exception):
    """An audit entry was about to be changed or deleted: the log is append-only."""


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditImmutable("The audit log is append-only: entries are never changed.")

    def delete(self):
        raise AuditImmutable("The audit log is append-only: entries are never deleted.")


class AuditEntry(models.Model):
    """Who did what to an organization's data, when and from where (dashboard/audit.py writes them).

    Append-only through the product: saving an existing entry, deleting one and the queryset's
    update() and delete() raise AuditImmutable; the admin shows them read-only.
    """

    class Action(models.TextChoices):
        SIGN_IN = "sign_in", "signed in"
        SIGN_IN_FAILED = "sign_in_failed", "failed to sign in"
        SESSION_READ = "session_read", "read a session's contents"
        SESSION_EXPORT = "session_export", "exported a session's messages"
        SESSION_ERASED = "session_erased", "erased a session"
        KEY_CREATED = "key_created", "created a key or token"
        KEY_REVOKED = "key_revoked", "revoked a key or token"
        RULE_CHANGED = "rule_changed", "created or changed a rule"
        RULE_DELETED = "rule_deleted", "deleted a rule"
        PRICE_CHANGED = "price_changed", "changed a model's price"
        MEMBER_INVITED = "member_invited", "invited a member"
        MEMBER_JOINED = "member_joined", "joined the organization"
        ROLE_CHANGED = "role_changed", "changed a member's role"
        MEMBER_REMOVED = "member_removed", "removed a member"
        AUDIT_EXPORT = "audit_export", "exported the audit log"
        RETENTION_CHANGED = "retention_changed", "changed how long data is kept"
        PURGED = "purged", "purged data past its retention"
        AUDIO_LISTEN = "audio_listen", "listened to a call's audio"
        AUDIO_DOWNLOAD = "audio_download", "downloaded a call's audio"
        SCENARIO_SAVED = "scenario_saved", "saved a call as an eval scenario"
        SCENARIO_DELETED = "scenario_deleted", "deleted an eval scenario"
        SUITE_DOWNLOAD = "suite_download", "downloaded an agent's eval suite"
        EVAL_RUN_UPLOADED = "eval_run_uploaded", "uploaded an eval run's results"
        SETTINGS_CHANGED = "settings_changed", "changed the organization's settings"
        ALERT_ACKNOWLEDGED = "alert_acknowledged", "acknowledged an alert"
        ALERT_SILENCED = "alert_silenced", "silenced an alert"
        ALERT_ASSIGNED = "alert_assigned", "assigned an alert"
        ALERT_NOTE = "alert_note", "wrote a note on an alert"
        ALERT_TEST_SENT = "alert_test_sent", "sent a rule's test notification"
        SESSION_ENDED = "session_ended", "ended a live session"
        SESSION_TEXT_SENT = "session_text_sent", "sent text into a live session"
        INVITATION_REVOKED = "invitation_revoked", "revoked an invitation"
        REVIEW_MARKED = "review_marked", "marked a call in review"
        REVIEW_QUEUE_MADE = "review_queue_made", "made a review queue"
        REVIEW_QUEUE_ASSIGNED = "review_queue_assigned", "assigned a review queue"
        REVIEW_QUEUE_DELETED = "review_queue_deleted", "deleted a review queue"
        REVIEW_REASONS_CHANGED = "review_reasons_changed", "changed the review reasons"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="audit_entries")
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=200, help_text="A user's name, an API key's prefix, or what ran it.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    ip = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=32, choices=Action.choices)
    target = models.CharField(max_length=200, blank=True, help_text="What it was done to: a session id, a key.")
    detail = models.JSONField(default=dict, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["organization", "-at"], name="audit_org_at_idx")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.get_action_display()} {self.target}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AuditImmutable("The audit log is append-only: entries are never changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditImmutable("The audit log is append-only: entries are never deleted.")

    @property
    def summary(self) -> str:
        """The detail as a sentence (dashboard/audit.describe)."""
        from dashboard.org.audit import describe

        return describe(self.detail)

    def as_json(self) -> dict:
        return {
            "id": self.pk,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "ip": self.ip,
            "action": self.action,
            "target": self.target,
            "detail": self.detail,
            "summary": self.summary,
        }
