"""Prometheus metrics (prometheus_client): what a team's Grafana scrapes from `GET /metrics`.

Two kinds, both per organization (a scrape sees only its own organization's series):

- counted by this process as it stores and folds messages (`record_batch`):
  messages ingested, errors, turn latency, time to first byte; plus the writer's
  backlog and flush time and the browser sockets open, which are the process's
  own. With several server processes each exposes its own (scrape each);
- read from the database at scrape time, so the same from any process:
  live sessions and ended sessions by agent and end reason.

The outbound HTTP client's own (dashboard/net/outbound.py: calls, their time, retries, by kind of
target and outcome) are the process's, with no organization label: every organization's scrape shows them.

Every series with an `agent` label (the agent's id, stable) also carries `agent_name`, the name a person
reads, added at scrape time from the organization's agents (`_AgentNames`): one name per agent, so the
series are as many as before (a renamed agent's series keep their id and take the new name). A series of
no agent, or of an agent without a name, has no `agent_name` (Prometheus reads an empty label as none).
"""

import uuid
from collections import Counter as Tally

from django.db.models import Count
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dashboard.agents.models import Agent
from dashboard.net import outbound
from rtvi_monitor.core import contributions, figure_names
from rtvi_monitor.core.protocol import CATALOG
from rtvi_monitor.core.services import service_kind
from rtvi_monitor.sessions.models import FAILED_ENDS, Session

REGISTRY = CollectorRegistry()  # this process's own; the default one would mix in other libraries'
REGISTRY.register(outbound.REGISTRY)  # the outbound client's: process-level, in every organization's view

MESSAGES = Counter(
    "rtvi_messages_ingested", "RTVI messages stored, by result", ["organization", "result"], registry=REGISTRY
)
ERRORS = Counter(
    "rtvi_errors", "RTVI error messages, by agent and fatal", ["organization", "agent", "fatal"], registry=REGISTRY
)
LATENCY_BUCKETS = (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 13)
TURN_LATENCY = Histogram(
    "rtvi_turn_latency_seconds",
    # The pages' "Turn latency, every turn": Grafana's histogram_quantile of it is that, not the figure by call.
    f"{figure_names.TURN_LATENCY.name}: {figure_names.TURN_LATENCY.meaning}",
    ["organization", "agent"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
CONTRIBUTION = Histogram(
    "rtvi_turn_contribution_seconds",
    "Each part of a turn's wait as the bot's own breakdown names it (Pipecat's UserBotLatencyObserver: a service's,"
    " a setting's such as the VAD's stop time, the bot's, the pipeline's), by agent, part and its owner's kind",
    ["organization", "agent", "part", "kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5),
    registry=REGISTRY,
)
TTFB = Histogram(
    "rtvi_ttfb_seconds",
    "Time to first byte reported by a bot's services, by service kind (stt, llm, tts or unknown) and model",
    ["organization", "service", "model"],
    buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5),
    registry=REGISTRY,
)
FLUSH = Histogram(
    "rtvi_writer_flush_seconds", "Time one writer flush took (store, fold, ack, relay)", registry=REGISTRY
)
# Call audio (rtvi_monitor/audio/store.py): measured on the recording, per ended call, beside what the messages say.
AUDIO_SECONDS = Counter(
    "rtvi_audio_received_seconds",
    "Seconds of call audio stored, by agent and track",
    ["organization", "agent", "track"],
    registry=REGISTRY,
)
AUDIO_BUSY = Counter(
    "rtvi_audio_busy",
    "Audio chunks answered 503 because AUDIO_MAX_PENDING chunks were waiting to be stored",
    registry=REGISTRY,
)
AUDIO_VOICE_TO_VOICE = Histogram(
    "rtvi_audio_voice_to_voice_seconds",
    "Measured on the call's audio: the caller stops speaking to the bot's audio starting, per turn",
    ["organization", "agent"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
AUDIO_DIFFERENCE = Histogram(
    "rtvi_audio_latency_difference_seconds",
    "Per turn: voice to voice measured on the audio minus the latency the bot's messages report",
    ["organization", "agent"],
    buckets=(-1, -0.5, -0.25, -0.1, 0, 0.1, 0.25, 0.5, 1, 2),
    registry=REGISTRY,
)
AUDIO_TALK_OVER = Counter(
    "rtvi_audio_talk_over_seconds",
    "Seconds caller and bot spoke at once (audio)",
    ["organization", "agent"],
    registry=REGISTRY,
)
AUDIO_BARGE_INS = Counter(
    "rtvi_audio_barge_ins",
    "Caller speech that began while the bot spoke (audio)",
    ["organization", "agent"],
    registry=REGISTRY,
)
AUDIO_BOT_OVER_CALLER = Counter(
    "rtvi_audio_bot_over_caller",
    "Replies whose audio began while the caller still spoke",
    ["organization", "agent"],
    registry=REGISTRY,
)
AUDIO_DEAD_AIR = Counter(
    "rtvi_audio_dead_air_seconds",
    "Silences of both over AUDIO_DEAD_AIR_SECONDS (audio)",
    ["organization", "agent"],
    registry=REGISTRY,
)
BACKLOG = Gauge("rtvi_writer_backlog", "Rows waiting for the database in this process", registry=REGISTRY)
BROWSERS = Gauge("rtvi_browser_sockets", "Browser sockets open on this process", registry=REGISTRY)


def record_batch(rows, turns_before: dict) -> None:
    """Count a stored, folded batch: messages by result, errors, ttfb; turns new since `turns_before` (a row's
    session key -> its live session and its turns' next position before the batch; one for every row's session)."""
    results = Tally()  # by the organization's id, made its label once per batch (not a UUID's str() per row)
    ttfbs: dict[tuple, list[float]] = {}  # (organization id, processor, model): observed per label set, once
    for row in rows:
        live = turns_before[row.session_pk][0]
        results[
            (live.organization_id, "invalid" if not row.valid else "valid" if row.type in CATALOG else "unknown")
        ] += 1
        if not row.valid or not isinstance(row.message, dict) or live.eval_run:
            continue  # an eval run's call is counted as a message stored, never in the fleet's figures
        data = row.message.get("data")
        if row.type == "error" and isinstance(data, dict):
            ERRORS.labels(
                str(live.organization_id), live.agent_id, "true" if data.get("fatal") is True else "false"
            ).inc()
        elif row.type == "metrics" and isinstance(data, dict) and isinstance(data.get("ttfb"), list):
            for entry in data["ttfb"]:
                value = entry.get("value") if isinstance(entry, dict) else None
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                    model = entry.get("model") if isinstance(entry.get("model"), str) else ""
                    processor = entry.get("processor")
                    key = (live.organization_id, processor if isinstance(processor, str) else None, model[:100])
                    ttfbs.setdefault(key, []).append(value)
        elif row.type == contributions.LATENCY_TYPE and isinstance(data, dict):
            _record_breakdown(live, data)
    for (organization_id, result), n in results.items():
        MESSAGES.labels(str(organization_id), result).inc(n)
    for (organization_id, processor, model), values in ttfbs.items():
        histogram = TTFB.labels(str(organization_id), service_kind(processor), model)
        for value in values:
            histogram.observe(value)
    for live, position in turns_before.values():
        if live.eval_run:
            continue
        turns = live.state.turns
        for turn in turns.items[max(0, position - turns.dropped) :]:
            if turn["latency_ms"] is not None:
                TURN_LATENCY.labels(str(live.organization_id), live.agent_id).observe(turn["latency_ms"] / 1000)


MAX_PARTS = 64  # distinct part keys a process labels; past them a part is counted as "other" (a bot's keys are free)
_parts_seen: set[str] = set()


def _record_breakdown(live, data: dict) -> None:
    """A turn's latency breakdown (core/contributions.py, validated as it was stored): each part's seconds."""
    if not contributions.of_a_turn(data):
        return
    for part in data["contributions"]:
        key = part["key"]
        if key not in _parts_seen and len(_parts_seen) < MAX_PARTS:
            _parts_seen.add(key)
        kind = part["owner_kind"] if part["owner_kind"] in contributions.OWNER_KINDS else "other"
        CONTRIBUTION.labels(
            str(live.organization_id), live.agent_id, key if key in _parts_seen else "other", kind
        ).observe(part["duration_secs"])


def record_audio_session(session, recording) -> None:
    """An ended call's recording, counted once (audio.settle)."""
    labels = (str(session.organization_id), session.agent_key)
    analysis = recording.analysis or {}
    for turn in analysis.get("turns") or ():
        if not turn["over_caller"]:
            AUDIO_VOICE_TO_VOICE.labels(*labels).observe(turn["seconds"])
    for row in recording.comparison:
        if row.get("difference_seconds") is not None:
            AUDIO_DIFFERENCE.labels(*labels).observe(row["difference_seconds"])
    AUDIO_TALK_OVER.labels(*labels).inc(analysis.get("talk_over_seconds") or 0)
    AUDIO_BARGE_INS.labels(*labels).inc(len(analysis.get("barge_ins") or ()))
    AUDIO_BOT_OVER_CALLER.labels(*labels).inc(analysis.get("bot_over_caller") or 0)
    AUDIO_DEAD_AIR.labels(*labels).inc(analysis.get("dead_air_seconds") or 0)


class _AgentNames:
    """One organization's agent names by id, read once per scrape: a built-in agent's own name, else the name
    its newest session was given (rtvi_monitor/sessions/agent_link.py keeps the agents API's name on each session)."""

    def __init__(self, organization):
        self.organization = organization
        self.names: dict[str, str] = {}

    def __call__(self, labels: dict) -> dict:
        """`labels` with agent_name after agent, when the agent has a name."""
        agent = labels.get("agent")
        if not agent:
            return labels
        if agent not in self.names:
            self.names[agent] = self._name(agent)
        name = self.names[agent]
        if not name:
            return labels
        named = {}
        for key, value in labels.items():
            named[key] = value
            if key == "agent":
                named["agent_name"] = name
        return named

    def _name(self, agent: str) -> str:
        built_in = _uuid(agent)
        if built_in is not None:
            name = Agent.objects.filter(organization=self.organization, pk=built_in).values_list("name", flat=True)
            if name := name.first():
                return name
        newest = (
            Session.objects.filter(organization=self.organization, agent_key=agent)
            .exclude(agent_name="")
            .order_by("-started_at")
            .values_list("agent_name", flat=True)
            .first()
        )
        return newest or ""


def _uuid(value: str) -> uuid.UUID | None:
    """A built-in agent's id is a UUID; an agents API id of another shape is not one."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class _OrganizationView:
    """The process's metrics as one organization may see them: its series, without the label, agents named."""

    def __init__(self, organization_id: str, named: _AgentNames):
        self.organization_id = organization_id
        self.named = named

    def collect(self):
        for family in REGISTRY.collect():
            mine = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                labels = dict(sample.labels)
                if labels.pop("organization", self.organization_id) == self.organization_id:
                    labels = self.named(labels)
                    mine.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
            yield mine


class _Sessions:
    """Live and ended sessions of one organization, read from the database at scrape time."""

    def __init__(self, organization, named: _AgentNames):
        self.organization = organization
        self.named = named

    def collect(self):
        sessions = Session.objects.calls().filter(organization=self.organization)
        live = GaugeMetricFamily("rtvi_sessions_live", "Sessions whose bot is connected or away", labels=["agent"])
        for row in sessions.live().values("agent_key").annotate(n=Count("id")):
            live.add_metric([row["agent_key"]], row["n"])
        yield self._named(live)
        ended = CounterMetricFamily(
            "rtvi_sessions",
            "Ended sessions, by agent and how they ended (client_hung_up, operator_ended, bot_finished, bot_vanished,"
            " fatal_error,"
            " server_restarted; unknown for sessions ended before that was recorded); failed is true for the"
            " last three",
            labels=["agent", "end", "failed"],
        )
        rows = sessions.filter(status=Session.Status.ENDED).values("agent_key", "end_kind").annotate(n=Count("id"))
        for row in rows:
            failed = "true" if row["end_kind"] in FAILED_ENDS else "false"
            ended.add_metric([row["agent_key"], row["end_kind"] or "unknown", failed], row["n"])
        yield self._named(ended)

    def _named(self, family: Metric) -> Metric:
        named = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            named.add_sample(sample.name, self.named(dict(sample.labels)), sample.value, sample.timestamp)
        return named


def registry_for(organization) -> CollectorRegistry:
    """What one organization's scrape returns."""
    registry = CollectorRegistry(auto_describe=False)
    named = _AgentNames(organization)
    registry.register(_OrganizationView(str(organization.pk), named))
    registry.register(_Sessions(organization, named))
    return registry
