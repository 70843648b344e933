"""Live sessions and the RTVI messages they carried.

A bot streams its messages over the ingest socket; each becomes an `Event`
row, stored once per (session, seq). The `Session` row keeps what lists and
filters need (status, counts, latency summary, transcript text for search);
the full derived state is recomputed from the events by `rtvi_monitor.core.state`,
and frozen into `Session.state` when the session ends.
"""

from typing import TYPE_CHECKING, Any

import orjson
from django.db import models
from django.utils import timezone

from dashboard.agents.models import Agent
from dashboard.org.models import Organization
from rtvi_monitor.core.reducer.errors import ERROR_TYPES, LOG_TYPES

if TYPE_CHECKING:
    from rtvi_monitor.core.state import SessionState


class EndKind(models.TextChoices):
    """How a session ended, from what its messages and its bot's socket said (rtvi_monitor/live/lifecycle.py)."""

    CLIENT_HUNG_UP = "client_hung_up", "client hung up"  # the client sent disconnect-bot, then the bot left
    BOT_FINISHED = "bot_finished", "bot finished"  # the bot closed its socket with 1000 (its pipeline ended)
    BOT_VANISHED = "bot_vanished", "bot vanished"  # the connection dropped or closed otherwise, and no bot came back
    FATAL_ERROR = "fatal_error", "fatal error"  # the bot reported a fatal error
    SERVER_RESTARTED = "server_restarted", "server restarted"  # the dashboard process holding the bot stopped
    # An operator ended it from the dashboard (live/control.py) and the bot took it; end_reason names them.
    OPERATOR_ENDED = "operator_ended", "ended by an operator"


def operator_end_reason(operator: str) -> str:
    """The words for an operator's end, naming them (Session.end_reason: at most 200 characters): "by operator ann";
    a script's key is named as the audit log names it, not called an operator ("by API key pk_3Kyc… (deploys)")."""
    return (f"by {operator}" if operator.startswith("API key ") else f"by operator {operator}")[:200]


# The ends an operator should look at: the call did not end as somebody meant it to.
FAILED_ENDS = frozenset({EndKind.BOT_VANISHED, EndKind.FATAL_ERROR, EndKind.SERVER_RESTARTED})
# A session "with errors", wherever one is counted or filtered: it had an error message, or a fatal one.
HAS_ERRORS = models.Q(error_count__gt=0) | models.Q(fatal=True)


class SessionQuerySet(models.QuerySet):
    def live(self):
        return self.filter(status=Session.Status.LIVE)

    def calls(self):
        """Callers' calls: not those an eval run made (`eval_run`), which the fleet's figures, alerts and
        /metrics leave out (a candidate made slow on purpose is no outage); the sessions list shows both."""
        return self.filter(eval_run="")

    def find(self, organization, session_id: str):
        """The organization's session with this id, or None (also for no organization)."""
        if organization is None:
            return None
        return self.select_related("agent").filter(organization=organization, session_id=session_id).first()


class Session(models.Model):
    class Status(models.TextChoices):
        LIVE = "live"
        ENDED = "ended"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sessions")
    # The bot's own id for the session (a Daily room, a call SID, a UUID…):
    # unique within the organization, chosen by the bot in the ingest URL.
    session_id = models.CharField(max_length=100)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="sessions")
    # The agent as the organization's agents API knows it (its id and name),
    # whichever upstream serves the list: Pipecat Cloud's agents have no row
    # in `Agent`, built-in ones set `agent` too. Pages, filters and figures
    # by agent read these (rtvi_monitor/agent_link.py sets them).
    agent_key = models.CharField(max_length=100, blank=True)
    agent_name = models.CharField(max_length=200, blank=True)
    # The agent's active deployment when the bot connected (the agents API's
    # activeDeploymentId): the deployments view compares sessions by it.
    # A bot that names its deployment (`?deployment=` of its ingest URL: a candidate not yet active, a Pipecat
    # Cloud environment) is kept under the name it gave instead.
    deployment_id = models.CharField(max_length=100, blank=True)
    # A call made by an eval run (`pipecat eval`), as its bot named it (`?eval_run=`, `?eval_scenario=`):
    # rtvi_monitor/evals/runs.py links the run's uploaded results to these sessions. Blank for real calls.
    eval_run = models.CharField(max_length=100, blank=True, default="", db_default="", db_index=True)
    eval_scenario = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Where the bot ran: what its ingest URL named (`?region=`), else its agent's region in the agents API when it
    # connected (Pipecat Cloud's `region`); blank when unknown. The agent page's figures filter by it.
    region = models.CharField(max_length=100, blank=True, default="", db_default="")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.LIVE, db_index=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    contents_purged_at = models.DateTimeField(
        null=True, blank=True, help_text="When retention removed its messages and transcript (its figures stay)."
    )
    # How it ended (EndKind; blank while live, and for sessions ended before kinds were recorded), and
    # the words for it. While the bot is away, end_reason says why it left ("bot disconnected",
    # "server restarted") until the grace decides.
    end_kind = models.CharField(max_length=20, choices=EndKind.choices, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)
    # Bumped on every bot connection.
    ingest_epoch = models.PositiveIntegerField(default=0)
    # The server process the bot is connected to (ServerProcess.id), and when
    # its bot left. A live session whose bot left more than SESSION_END_GRACE
    # ago, or whose process stopped beating, is ended by the sweep
    # (rtvi_monitor/live/lifecycle.py), whichever process runs it.
    holder = models.CharField(max_length=40, blank=True, db_index=True)
    bot_left_at = models.DateTimeField(null=True, blank=True)

    protocol_version = models.CharField(max_length=32, blank=True)
    client_about = models.JSONField(default=dict, blank=True)
    bot_about = models.JSONField(default=dict, blank=True)

    event_count = models.PositiveIntegerField(default=0)
    invalid_count = models.PositiveIntegerField(default=0)
    unknown_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    turn_count = models.PositiveIntegerField(default=0)
    interruption_count = models.PositiveIntegerField(default=0)
    latency_p50_ms = models.FloatField(null=True, blank=True)
    latency_p95_ms = models.FloatField(null=True, blank=True)
    latency_max_ms = models.FloatField(null=True, blank=True)
    fatal = models.BooleanField(default=False)
    cost_usd = models.FloatField(null=True, blank=True, help_text="From its usage and the organization's prices.")
    transcript_text = models.TextField(blank=True, help_text="Final transcript, for search.")
    state = models.JSONField(null=True, blank=True, help_text="Derived state, frozen when the session ends.")

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [models.UniqueConstraint(fields=["organization", "session_id"], name="session_id_unique_in_org")]
        indexes = [
            models.Index(fields=["organization", "status", "-started_at"], name="session_list_idx"),
            # The Overview's "ended badly in 24 h" and the alerts' windows read by end time.
            models.Index(fields=["organization", "-ended_at"], name="session_ended_idx"),
            models.Index(fields=["organization", "agent_key", "-started_at"], name="session_agent_idx"),
        ]

    def __str__(self) -> str:
        return self.session_id

    def save(self, *args, **kwargs):
        # A built-in agent's id is its agents API id: a session given one (the admin, a script) is keyed by it.
        if self.agent_id and self.agent_key != str(self.agent_id):
            self.agent_key, self.agent_name = str(self.agent_id), self.agent.name
        super().save(*args, **kwargs)

    def row(self) -> dict:
        """The session as lists (sockets and API) show it."""
        return session_row(self)

    @property
    def bot_state(self) -> str | None:
        """ "connected", "away" (left within the grace period), "finished" (closed with 1000: its end is being
        stored, within a sweep's gathering) or None once ended."""
        if self.status != self.Status.LIVE:
            return None
        if not self.bot_left_at:
            return "connected"
        return "finished" if self.end_reason == EndKind.BOT_FINISHED.label else "away"

    @property
    def failed(self) -> bool:
        """It ended, and not as anybody meant it to (FAILED_ENDS)."""
        return self.end_kind in FAILED_ENDS

    @property
    def duration_seconds(self) -> float | None:
        end = self.ended_at or self.last_event_at
        return (end - self.started_at).total_seconds() if end else None


class Event(models.Model):
    """One RTVI message as received, valid or not.

    `seq` is the dashboard's numbering: the order the session's messages
    were stored in (1, 2, 3...). `stream` and `bot_seq` are the bot's own:
    the client that sent it (what it named in the ingest URL, "" for one
    that names none) and the seq it gave it, for acks and resends
    (rtvi_monitor/live/registry.py; docs/PROTOCOL.md).
    """

    # Rows are written by rtvi_monitor.live.writer with one multi-row INSERT per batch
    # (the ORM costs ~0.45 ms a row); keep the column list there in step.
    # No index of its own: the unique (session, seq) index leads with the session and serves every
    # lookup by session. A second one cost each insert and, on SQLite, the planner chose it over
    # event_log_idx once the table had more columns (the logs count read every event of the agent).
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.BigIntegerField()
    stream = models.CharField(max_length=64, blank=True, default="", db_default="")
    bot_seq = models.BigIntegerField(null=True, blank=True)
    direction = models.CharField(max_length=12)  # "to-client" (bot sent it) or "from-client"
    type = models.CharField(max_length=64, blank=True)
    received_at = models.FloatField(help_text="Epoch seconds when the dashboard received it.")
    sent_at = models.FloatField(null=True, blank=True, help_text="Epoch seconds the bot stamped, if any.")
    message = models.TextField(help_text="The message as JSON, or the raw text when it was not JSON.")
    valid = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    redacted = models.TextField(
        blank=True,
        default="",
        db_default="",
        help_text='What redaction removed from it before it was stored, as JSON ({"card": 1}); empty when nothing.',
    )

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="event_seq_unique_in_session")]
        # The Overview's error groups read the errors of the last hour. A
        # partial index holds just those rows: inserts of everything else
        # (nearly every row) do not pay for it.
        indexes = [
            models.Index(
                fields=["received_at"], condition=models.Q(type__in=ERROR_TYPES, valid=True), name="event_error_idx"
            ),
            # The agents' logs (GET /v1/agents/<name>/logs) read the bots' log lines and errors of an
            # agent's sessions by time: session first, so the cost follows the agent's own lines, not
            # every organization's.
            models.Index(
                fields=["session", "received_at"], condition=models.Q(type__in=LOG_TYPES), name="event_log_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


def storable(text: str) -> str:
    """Text any database column takes: NUL and lone surrogates escaped, visibly."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def storable_json(value: Any) -> Any:
    """A JSON value any database's JSON column takes: every string (keys too) made storable.

    PostgreSQL's jsonb refuses NUL and lone surrogates; SQLite takes them. The
    values walked are bounded (messages nest at most 32 levels, the state less).
    A value with neither is returned as it is, found so by orjson (which refuses
    lone surrogates and writes NUL as \\u0000): walking each session's final
    state took ~10 % of the main thread when 100 sessions ended at once.
    """
    if isinstance(value, dict | list):
        try:
            if b"\\u0000" not in orjson.dumps(value):
                return value
        except TypeError:  # a lone surrogate (or what orjson does not write): walked
            pass
    return _storable_walk(value)


def _storable_walk(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(k) if isinstance(k, str) else k: _storable_walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable_walk(v) for v in value]
    return value


def summary_fields(state: "SessionState") -> dict:
    """The Session columns derived from the state: what lists, filters and search read."""
    # Called about once a second per live session: read the state's parts
    # directly rather than building the whole to_dict().
    summary = state.summary()
    latency = summary.get("latency") or {}
    return {
        "protocol_version": storable(summary.get("protocol_version") or "")[:32],
        "client_about": storable_json(state.client_about) if isinstance(state.client_about, dict) else {},
        "bot_about": storable_json(state.bot_about) if isinstance(state.bot_about, dict) else {},
        "event_count": summary["event_count"],
        "invalid_count": summary["invalid_count"],
        "unknown_count": summary["unknown_count"],
        "error_count": summary["error_count"],
        "turn_count": summary["turn_count"],
        "interruption_count": summary["interruptions"],
        "latency_p50_ms": latency.get("p50"),
        "latency_p95_ms": latency.get("p95"),
        "latency_max_ms": latency.get("max"),
        "fatal": summary["fatal"],
        "transcript_text": storable(
            "\n".join(f"{item['role']}: {item['text']}" for item in state.transcript if item.get("final", True))
        ),
    }


def session_row(session: Session) -> dict:
    """A session as the session list (socket and API) shows it."""
    return {
        "id": session.session_id,
        "agent_id": session.agent_key or None,
        "agent_name": (session.agent.name if session.agent_id and session.agent else session.agent_name) or None,
        "deployment_id": session.deployment_id or None,
        # A call an eval run made (`pipecat eval`, tagged by its bot), not a caller's: None for a caller's.
        "eval_run": session.eval_run or None,
        "status": session.status,
        "bot": session.bot_state,
        "away_since": session.bot_left_at.isoformat() if session.bot_left_at and session.bot_state else None,
        "end_reason": session.end_reason,
        "end_kind": session.end_kind or None,
        "failed": session.end_kind in FAILED_ENDS,
        "protocol_version": session.protocol_version,
        "started_at": session.started_at.isoformat(),
        "ended_at": session.ended_at.isoformat() if session.ended_at else None,
        "last_event_at": session.last_event_at.isoformat() if session.last_event_at else None,
        "duration_s": session.duration_seconds,
        "event_count": session.event_count,
        "invalid_count": session.invalid_count,
        "error_count": session.error_count,
        "turn_count": session.turn_count,
        "interruption_count": session.interruption_count,
        "latency": {"p50": session.latency_p50_ms, "p95": session.latency_p95_ms, "max": session.latency_max_ms},
        "fatal": session.fatal,
        "cost_usd": session.cost_usd,
    }


def caller_key(organization_id, user_id: str, secret: str | None = None) -> str:
    """The key a caller's id (the `user_id` a bot reports) is kept under: a keyed hash, never the id itself.

    The id is a caller's detail (often a phone number); this hash (HMAC with SECRET_KEY, or `secret`,
    per organization) is all that links a caller to their calls, so that they can be erased on request.
    """
    from django.conf import settings
    from django.utils.crypto import salted_hmac

    value = f"{organization_id}:{user_id}"
    return salted_hmac("rtvi-caller", value, secret=secret or settings.SECRET_KEY, algorithm="sha256").hexdigest()[:40]


def caller_keys(organization_id, user_id: str) -> list[str]:
    """Every key the caller's calls may be kept under: SECRET_KEY's (the one made now), then its fallbacks'."""
    from django.conf import settings

    fallbacks = getattr(settings, "SECRET_KEY_FALLBACKS", [])
    return [caller_key(organization_id, user_id, secret) for secret in [settings.SECRET_KEY, *fallbacks]]


class SessionCaller(models.Model):
    """A caller of a session, by key (caller_keys), written with the session's messages: erasure by caller."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="callers")
    caller_key = models.CharField(max_length=40, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "caller_key"], name="session_caller_unique")]

    def __str__(self) -> str:
        return f"caller {self.caller_key[:12]}… of session {self.session_id}"


class Span(models.Model):
    """One OpenTelemetry span a bot exported (POST /v1/traces), kept as the bot sent it, bounded.

    Spans join sessions by the `conversation.id` attribute Pipecat puts on
    its conversation and turn spans (PipelineWorker(conversation_id=...):
    the session id), and through their trace the service spans under them
    (rtvi_monitor/traces.py).
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="spans")
    trace_id = models.CharField(max_length=32)  # hex
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    conversation_id = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=200)
    start_ns = models.BigIntegerField()
    end_ns = models.BigIntegerField()
    attributes = models.JSONField(default=dict)
    status_code = models.PositiveSmallIntegerField(default=0)  # OTLP: 0 unset, 1 ok, 2 error
    service_name = models.CharField(max_length=200, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "trace_id", "span_id"], name="span_unique_in_org")
        ]
        indexes = [
            models.Index(fields=["organization", "conversation_id"], name="span_conversation_idx"),
            models.Index(fields=["organization", "trace_id"], name="span_trace_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.trace_id}/{self.span_id}"


class CallFigures(models.Model):
    """An ended call's turns in figures, kept when it ends (rtvi_monitor/sessions/figures.py): each stage's wait, the
    turn latency and the bots' breakdowns per turn, its rates' yes-or-no flags. Numbers and the names of parts and
    stages, never words. An agent's figures over a fleet's history read these rows (indexed by agent, deployment,
    region and time), not every call's messages; `judged` and `event_count` say what the row was computed from, so
    a reopened call or changed thresholds compute it again."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, primary_key=True, related_name="figures")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    agent_key = models.CharField(max_length=100)
    deployment_id = models.CharField(max_length=100, blank=True)
    region = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField()
    event_count = models.PositiveIntegerField()
    judged = models.CharField(max_length=40)
    summary = models.JSONField()  # core/diagnosis.summary: counts, missing, values per figure, breakdowns
    flags = models.JSONField()  # {"barge_in", "errors", "ended_badly"}: what the comparison's rates count

    class Meta:
        indexes = [
            models.Index(fields=["organization", "agent_key", "-started_at"], name="figures_agent_idx"),
            models.Index(
                fields=["organization", "agent_key", "deployment_id", "-started_at"], name="figures_deployment_idx"
            ),
            # A region's figures, and the regions an agent's calls ran in (read from the index alone).
            models.Index(fields=["organization", "agent_key", "region", "-started_at"], name="figures_region_idx"),
        ]

    def __str__(self) -> str:
        return f"figures of session {self.session_id}"
