"""The rest of Pipecat Cloud's private API: an agent's status, its sessions, one session, its logs.

    GET {base}/agents/{agentName}                         -> AgentStatus
    GET {base}/agents/{agentName}/sessions?...            -> PlatformSessionPage
    GET {base}/agents/{agentName}/sessions/{sessionId}    -> PlatformSession (None when unknown)
    GET {base}/agents/{agentName}/logs?...                -> LogPage

The same upstream as the agent list (dashboard/agents/service.py): the organization's
`agents_api` (Pipecat Cloud at https://api.pipecat.daily.co/v1, or the
dashboard's built-in copy of the contract), a private key as bearer token.
Every call goes through dashboard/agents/upstream.py's fetch_json, and so through the outbound
client (dashboard/net/outbound.py), so it has the same discipline: per-call timeouts, retries on
connection errors and 5xx, the AGENTS_DEADLINE, the address guard, the outbound metrics, one
AgentsAPIError whose message says what to do. The `fetch_*` functions
raise it; the `get_*` functions, for pages, never raise: they answer a
`Fetched` through the same cache layer as the agent list (upstream.cached:
single-flight, stale-on-error with the answer's age, failure back-off,
AGENTS_PAGE_WAIT).

What is cached is the upstream's validated JSON body, not our records: the
body's shape is the API's contract, so an entry written by an older process
reads the same after a change to the dataclasses; it is parsed again on the
way out.

Records are typed and frozen, tolerant of fields they do not use (the API
grows) and strict on those they use: a wrong type is an AgentsAPIError
"unexpected shape: <where>", not a template error three layers later.
"""

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from django.conf import settings

from dashboard.agents.service import DeploymentRecord, parse_deployment
from dashboard.agents.upstream import (
    AgentsAPINotFound,
    Cached,
    CacheSpec,
    Freshness,
    ShapeError,
    cache_keys,
    cached,
    fetch_json,
    parse_timestamp,
    timestamp,
)
from dashboard.agents.upstream import field as json_field

# How long the last good answer (and the latest failure) of one query is kept
# for stale-on-error. An hour, not the agent list's week: every page, filter,
# search and time window of sessions and logs is an entry of its own, and a
# live list older than that is of little use to show.
KEEP = 3600

SESSION_STATUSES = ("active", "ended", "all")
START_TYPES = ("cold", "warm", "all")
LOG_ORDERS = ("asc", "desc")
PERCENTILES = ("p50", "p90", "p95", "p99")


# --- Records ---------------------------------------------------------------


@dataclass(frozen=True)
class AgentStatus:
    """`GET /agents/{agentName}`: where an agent runs, whether it can take sessions, its deployment.

    `ready`: its latest deployment passed validation (true for a scaled-to-
    zero agent too); `available`: it can accept new sessions now. min/max
    agents are the auto-scaling bounds (the API says minReplicas/maxReplicas
    in answers, minAgents/maxAgents in requests; both are read).
    """

    name: str
    region: str
    ready: bool
    available: bool
    active_deployment_id: str | None
    active_deployment_ready: bool | None
    active_session_count: int | None
    min_agents: int | None
    max_agents: int | None
    deployment: DeploymentRecord | None
    created_at: datetime | None
    updated_at: datetime | None
    desired_deployment_id: str | None = None
    reconciled_deployment_id: str | None = None
    agent_profile: str = ""

    @property
    def rolling_out(self) -> bool:
        """A deployment was asked for and the platform has not reconciled it yet."""
        return bool(self.desired_deployment_id) and self.desired_deployment_id != self.reconciled_deployment_id


@dataclass(frozen=True)
class ResourceSample:
    """One point of a session's resource time series: Unix seconds, CPU millicores, memory bytes."""

    t: float
    cpu_millicores: float
    memory_bytes: int

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.t, tz=UTC)


@dataclass(frozen=True)
class ResourceMetrics:
    """A session's CPU and memory: percentiles keyed "p50", "p90", "p95", "p99" (None when not sent), and samples."""

    sample_count: int
    cpu_millicores: dict[str, float | None]
    memory_bytes: dict[str, int | None]
    timeseries: list[ResourceSample] = field(default_factory=list)


@dataclass(frozen=True)
class PlatformSession:
    """One session as the platform ran it: deployment, start, how it completed, and (in detail) its resources.

    `completion_status` is the API's text ("HTTP_COMPLETED", "HTTP_ERROR",
    "WS_CONNECTION_CLOSED", ...) or an HTTP code as text ("500"); None while
    the session is active. `resource_metrics` and `meeting_ids` come with
    the single-session endpoint only (None and [] in a list).
    """

    session_id: str
    service_id: str
    organization_id: str
    deployment_id: str | None
    created_at: datetime | None
    updated_at: datetime | None
    ended_at: datetime | None
    bot_start_seconds: float | None
    cold_start: bool | None
    completion_status: str | None
    resource_metrics: ResourceMetrics | None = None
    meeting_ids: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """Still running: the platform has not recorded its end."""
        return self.ended_at is None

    @property
    def duration_seconds(self) -> float | None:
        """From creation to end; None while active (or when a time is missing)."""
        if self.ended_at is None or self.created_at is None:
            return None
        return max(0.0, (self.ended_at - self.created_at).total_seconds())

    @property
    def failed(self) -> bool:
        """Whether it ended in error, by completion_status_failed (see there for the rule)."""
        return completion_status_failed(self.completion_status)


@dataclass(frozen=True)
class PlatformSessionPage:
    """One page of an agent's sessions: `total_count` matching the filters, `sessions` from `offset`."""

    total_count: int
    sessions: list[PlatformSession]
    offset: int = 0

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, or None when this one is the last."""
        end = self.offset + len(self.sessions)
        return end if self.sessions and end < self.total_count else None


@dataclass(frozen=True)
class LogLine:
    """One log line: its text, its time (to microseconds; `timestamp_raw` has the API's nanoseconds) and level.

    `level` is one of DEBUG, INFO, WARNING, ERROR, CRITICAL, or "" when the
    line names none (see log_level for the formats read).
    """

    text: str
    timestamp: datetime | None
    timestamp_raw: str
    level: str
    deployment_id: str | None = None


@dataclass(frozen=True)
class LogPage:
    """One page of an agent's log lines; `total` is exact when `relation` is "eq", a lower bound for "gte"."""

    total: int
    relation: str
    logs: list[LogLine]
    offset: int = 0

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.logs)
        return end if self.logs and (end < self.total or self.relation != "eq") else None


@dataclass(frozen=True)
class Fetched(Freshness):
    """What a page gets from a `get_*` function: the value (or None), when it was fetched, and any error since.

    Never raised: with the upstream failing, `value` is the last good answer
    (`stale`, with `age_seconds`) or None, and `error` says what went wrong.
    A None value with no error is an answer too: the platform does not know
    the session asked about.
    """

    value: Any
    fetched_at: float | None  # epoch seconds of the last successful fetch
    error: str = ""
    from_cache: bool = False


# --- Parsing ---------------------------------------------------------------


def completion_status_failed(status: str | None) -> bool:
    """The rule for a failed session: its completion status is an error.

    That is an HTTP code of 400 or more ("500"), or a name ending in _ERROR
    (HTTP_ERROR, and any other *_ERROR the platform adds), or ERROR itself.
    Not failed: no status yet (active), HTTP_COMPLETED, a code under 400,
    and other names such as WS_CONNECTION_CLOSED (a transport closing is
    how WebSocket sessions end).
    """
    if not status:
        return False
    text = status.strip().upper()
    if text.isascii() and text.isdigit():  # "²".isdigit() too; a code has at most a few digits
        return len(text) > 3 or int(text) >= 400
    return text == "ERROR" or text.endswith("_ERROR")


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ShapeError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(obj: dict, name: str, where: str) -> list:
    return json_field(obj, name, (list,), where)


def _number(obj: dict, name: str, where: str) -> float | int | None:
    return json_field(obj, name, (int, float), where, nullable=True)


def parse_agent_status(body: Any) -> AgentStatus:
    obj = _object(body, "agent")
    where = "agent"
    scaling = json_field(obj, "autoScaling", (dict,), where, nullable=True) or {}

    def bound(*names: str) -> int | None:
        for name in names:
            if scaling.get(name) is not None:
                return json_field(scaling, name, (int,), f"{where}.autoScaling")
        return None

    return AgentStatus(
        name=json_field(obj, "name", (str,), where),
        region=json_field(obj, "region", (str,), where, nullable=True) or "",
        ready=json_field(obj, "ready", (bool,), where),
        available=json_field(obj, "available", (bool,), where),
        active_deployment_id=json_field(obj, "activeDeploymentId", (str,), where, nullable=True)
        or json_field(obj, "desiredDeploymentId", (str,), where, nullable=True),
        active_deployment_ready=json_field(obj, "activeDeploymentReady", (bool,), where, nullable=True),
        active_session_count=json_field(obj, "activeSessionCount", (int,), where, nullable=True),
        min_agents=bound("minAgents", "minReplicas"),
        max_agents=bound("maxAgents", "maxReplicas"),
        deployment=parse_deployment(obj.get("deployment"), f"{where}.deployment"),
        created_at=timestamp(obj, "createdAt", where),
        updated_at=timestamp(obj, "updatedAt", where),
        desired_deployment_id=json_field(obj, "desiredDeploymentId", (str,), where, nullable=True),
        reconciled_deployment_id=json_field(obj, "reconciledDeploymentId", (str,), where, nullable=True),
        agent_profile=json_field(obj, "agentProfile", (str,), where, nullable=True) or "",
    )


def _completion_status(obj: dict, where: str) -> str | None:
    value = json_field(obj, "completionStatus", (str, int, float), where, nullable=True)
    if isinstance(value, float):
        # JSON has one number type: 500.0 is the code 500.
        return str(int(value)) if value.is_integer() else str(value)
    return None if value is None else str(value)


def _meeting_ids(obj: dict, where: str) -> list[str]:
    """meetingIds: the reference sends [{"participantId", "meetingId"}]; plain strings are read too."""
    ids = []
    for i, item in enumerate(json_field(obj, "meetingIds", (list,), where, nullable=True) or []):
        if isinstance(item, str):
            ids.append(item)
        else:
            ids.append(
                json_field(_object(item, f"{where}.meetingIds[{i}]"), "meetingId", (str,), f"{where}.meetingIds[{i}]")
            )
    return ids


def parse_resource_metrics(value: Any, where: str) -> ResourceMetrics | None:
    if value is None:
        return None
    obj = _object(value, where)
    samples = []
    for i, point in enumerate(json_field(obj, "timeseries", (list,), where, nullable=True) or []):
        at = f"{where}.timeseries[{i}]"
        point = _object(point, at)
        samples.append(
            ResourceSample(
                t=json_field(point, "t", (int, float), at),
                cpu_millicores=json_field(point, "c", (int, float), at),
                memory_bytes=json_field(point, "m", (int, float), at),
            )
        )
    return ResourceMetrics(
        sample_count=json_field(obj, "sampleCount", (int,), where, nullable=True) or 0,
        cpu_millicores={p: _number(obj, f"cpuMillicores{p.upper()}", where) for p in PERCENTILES},
        memory_bytes={p: _number(obj, f"memoryBytes{p.upper()}", where) for p in PERCENTILES},
        timeseries=samples,
    )


def parse_platform_session(value: Any, where: str = "session") -> PlatformSession:
    obj = _object(value, where)
    bot_start = json_field(obj, "botStartSeconds", (int, float), where, nullable=True)
    return PlatformSession(
        session_id=json_field(obj, "sessionId", (str,), where),
        service_id=json_field(obj, "serviceId", (str,), where, nullable=True) or "",
        organization_id=json_field(obj, "organizationId", (str,), where, nullable=True) or "",
        deployment_id=json_field(obj, "deploymentId", (str,), where, nullable=True),
        created_at=timestamp(obj, "createdAt", where),
        updated_at=timestamp(obj, "updatedAt", where),
        ended_at=timestamp(obj, "endedAt", where),
        bot_start_seconds=None if bot_start is None else float(bot_start),
        cold_start=json_field(obj, "coldStart", (bool,), where, nullable=True),
        completion_status=_completion_status(obj, where),
        resource_metrics=parse_resource_metrics(obj.get("resourceMetrics"), f"{where}.resourceMetrics"),
        meeting_ids=_meeting_ids(obj, where),
    )


def parse_platform_sessions(body: Any, offset: int = 0) -> PlatformSessionPage:
    obj = _object(body, "body")
    sessions = [parse_platform_session(s, f"sessions[{i}]") for i, s in enumerate(_list(obj, "sessions", "body"))]
    total = json_field(obj, "total_count", (int,), "body")
    return PlatformSessionPage(total_count=total, sessions=sessions, offset=offset)


# The level names a line may carry, as the five it is shown as.
LEVELS = {
    "TRACE": "DEBUG",
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "SUCCESS": "INFO",  # loguru's
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "EXCEPTION": "ERROR",
    "CRITICAL": "CRITICAL",
    "FATAL": "CRITICAL",
}
_NAMES = "|".join(sorted(LEVELS, key=len, reverse=True))
LEVEL_PATTERNS = (
    # loguru's default: "2025-04-18 20:34:17.153 | INFO     | bot:main:12 - text"
    re.compile(rf"^[^|]{{0,40}}\|\s*({_NAMES})\s*\|"),
    # uvicorn's and Python logging's: "INFO:     text", "WARNING:root:text"; and "ERROR text", "ERROR - text"
    re.compile(rf"^\s*({_NAMES})(?::|\s|$)"),
    # bracketed or dashed after a time: "[ERROR] text", "2025-04-18 20:34:17,153 - ERROR - text"
    re.compile(rf"^[^\[]{{0,40}}\[({_NAMES})\]"),
    re.compile(rf"^\S.{{0,40}}? - ({_NAMES}) - "),
)


def log_level(text: str) -> str:
    """The level a log line names: DEBUG, INFO, WARNING, ERROR, CRITICAL, or "" when it names none.

    Read from the line's head only, in capitals as loggers write them (a
    message that mentions "error" is not an error line): loguru's
    "time | LEVEL | where - text", uvicorn's "LEVEL:  text", "LEVEL text",
    "[LEVEL] text" and "time - LEVEL - text". TRACE reads as DEBUG, SUCCESS
    as INFO, WARN as WARNING, FATAL as CRITICAL.
    """
    for pattern in LEVEL_PATTERNS:
        match = pattern.match(text)
        if match:
            return LEVELS[match.group(1)]
    return ""


def parse_log_line(value: Any, where: str) -> LogLine:
    obj = _object(value, where)
    text = json_field(obj, "log", (str,), where)
    raw = json_field(obj, "timestamp", (str,), where, nullable=True) or ""
    return LogLine(
        text=text,
        # A log line with an odd time is still worth showing: None, the raw text kept.
        timestamp=parse_timestamp(raw) if raw else None,
        timestamp_raw=raw,
        level=log_level(text),
        deployment_id=json_field(obj, "deploymentId", (str,), where, nullable=True),
    )


def parse_logs(body: Any, offset: int = 0) -> LogPage:
    obj = _object(body, "body")
    total = json_field(obj, "total", (dict,), "body")
    relation = json_field(total, "relation", (str,), "body.total", nullable=True) or "eq"
    logs = [parse_log_line(line, f"logs[{i}]") for i, line in enumerate(_list(obj, "logs", "body"))]
    return LogPage(total=json_field(total, "value", (int,), "body.total"), relation=relation, logs=logs, offset=offset)


def parse_session_or_none(body: Any) -> PlatformSession | None:
    """A session's record; None is the cached answer for a session the platform does not know (404)."""
    return None if body is None else parse_platform_session(body)


# --- Queries -----------------------------------------------------------------


def _choice(value: str, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")


def _whole(value: int, minimum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be a whole number of {minimum} or more, got {value!r}")


class _Listing:
    """What the platform's two listings' queries share: a page (`limit` from 1, `offset` from 0), a window of
    times (start_time inclusive, end_time exclusive: sent as Unix seconds, the end rounded up), and choices
    (CHOICES: field -> what it may be), all checked when the query is made (ValueError: a caller's mistake).
    Times are datetimes (a naive one is UTC) or Unix seconds; None filters nothing."""

    CHOICES: dict[str, tuple[str, ...]] = {}

    def __post_init__(self):
        _whole(self.limit, 1, "limit")
        _whole(self.offset, 0, "offset")
        for name, choices in self.CHOICES.items():
            _choice(getattr(self, name), choices, name)
        self.params()  # the times

    def _sent(self, filters: dict[str, str | None], always: dict[str, str]) -> dict[str, str]:
        """As sent: the page, every filter given and the window, then `always` (the enums: the API's defaults
        are not ours to rely on)."""
        window = {"startTime": unix_seconds(self.start_time), "endTime": unix_seconds(self.end_time, round_up=True)}
        return {"limit": str(self.limit), "offset": str(self.offset), **_optional(**filters, **window), **always}


@dataclass(frozen=True)
class SessionFilters(_Listing):
    """The query of `GET /agents/{agentName}/sessions`."""

    CHOICES = {"status": SESSION_STATUSES, "start_type": START_TYPES}

    limit: int = 50
    offset: int = 0
    deployment_id: str | None = None
    start_time: datetime | float | None = None
    end_time: datetime | float | None = None
    status: str = "all"  # active | ended | all
    start_type: str = "all"  # cold | warm | all

    def params(self) -> dict[str, str]:
        return self._sent({"deploymentId": self.deployment_id}, {"status": self.status, "startType": self.start_type})


@dataclass(frozen=True)
class LogFilters(_Listing):
    """The query of `GET /agents/{agentName}/logs`; `query` is the API's free-text search."""

    CHOICES = {"order": LOG_ORDERS}

    limit: int = 50
    offset: int = 0
    deployment_id: str | None = None
    session_id: str | None = None
    query: str | None = None
    order: str = "desc"  # asc | desc (newest first)
    start_time: datetime | float | None = None
    end_time: datetime | float | None = None

    def params(self) -> dict[str, str]:
        filters = {"deploymentId": self.deployment_id, "sessionId": self.session_id, "query": self.query}
        return self._sent(filters, {"order": self.order})


# --- Calls -----------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One request to the platform: its path and query, how to read the answer, what a 404 means, how long to cache.

    `unknown_ok`: a 404 is an answer (None), not an error.
    """

    path: str
    params: dict[str, str]
    parse: Callable[[Any], Any]
    not_found: str
    ttl: Callable[[Any], float]
    unknown_ok: bool = False
    # What of the answer may quote a caller (a bot's log lines): redacted with the organization's redactor before
    # it is cached or shown, as the bots' own messages are (rtvi_monitor/core/redaction.py).
    words: Callable[[Any, Any], Any] | None = None


def _segment(value: str, what: str) -> str:
    """A path segment, percent-quoted ("/" included): a name must not walk to another endpoint."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return quote(value, safe="")


def unix_seconds(value: datetime | float | None, *, round_up: bool = False) -> str | None:
    """A time as the whole Unix seconds the API takes; a naive datetime is read as UTC.

    A window's start is rounded down and its end up, so that the window sent
    holds the one asked for.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        value = (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a time must be a datetime or Unix seconds, got {value!r}")
    return str(math.ceil(value) if round_up else math.floor(value))


def _optional(**params: str | None) -> dict[str, str]:
    return {name: value for name, value in params.items() if value not in (None, "")}


def _live_ttl(body: Any) -> float:
    return settings.PLATFORM_CACHE_TTL


def _session_ttl(body: Any) -> float:
    """An ended session's record hardly changes: kept longer. An active or unknown one: the live TTL."""
    ended = isinstance(body, dict) and body.get("endedAt")
    return settings.PLATFORM_ENDED_SESSION_TTL if ended else settings.PLATFORM_CACHE_TTL


def _no_agent(agent_name: str) -> str:
    return (
        f"The agents API has no agent named {agent_name!r} (HTTP 404). Check the agent's name on the platform, "
        "and that AGENTS_API_BASE_URL is an API that serves agents' status, sessions and logs "
        "(Pipecat Cloud's https://api.pipecat.daily.co/v1 does)."
    )


def _status_call(agent_name: str) -> _Call:
    return _Call(
        f"/agents/{_segment(agent_name, 'agent_name')}", {}, parse_agent_status, _no_agent(agent_name), _live_ttl
    )


def _sessions_call(agent_name: str, filters: SessionFilters) -> _Call:
    parse = functools.partial(parse_platform_sessions, offset=filters.offset)
    path = f"/agents/{_segment(agent_name, 'agent_name')}/sessions"
    return _Call(path, filters.params(), parse, _no_agent(agent_name), _live_ttl)


def _session_call(agent_name: str, session_id: str) -> _Call:
    path = f"/agents/{_segment(agent_name, 'agent_name')}/sessions/{_segment(session_id, 'session_id')}"
    return _Call(path, {}, parse_session_or_none, "", _session_ttl, unknown_ok=True)


def _logs_call(agent_name: str, filters: LogFilters) -> _Call:
    parse = functools.partial(parse_logs, offset=filters.offset)
    path = f"/agents/{_segment(agent_name, 'agent_name')}/logs"
    return _Call(path, filters.params(), parse, _no_agent(agent_name), _live_ttl, words=_redact_log_lines)


async def _call(base_url: str, api_key: str, call: _Call) -> tuple[Any, Any]:
    """(record, validated raw body) of one call; (None, None) for a 404 that means "unknown" (`unknown_ok`)."""
    try:
        return await fetch_json(
            base_url, api_key, call.path, lambda body: (call.parse(body), body), call.params, not_found=call.not_found
        )
    except AgentsAPINotFound:
        if call.unknown_ok:
            return None, None
        raise


# --- Fetching (raises AgentsAPIError) ----------------------------------------


async def fetch_agent_status(base_url: str, api_key: str, agent_name: str) -> AgentStatus:
    """`GET /agents/{agentName}`; a 404 is an AgentsAPINotFound naming the agent."""
    return (await _call(base_url, api_key, _status_call(agent_name)))[0]


async def fetch_platform_sessions(base_url: str, api_key: str, agent_name: str, **filters) -> PlatformSessionPage:
    """`GET /agents/{agentName}/sessions`, filtered and paged: `filters` are SessionFilters' fields.

    Raises ValueError for a filter outside the documented values (a
    caller's mistake, never sent upstream), AgentsAPIError for the rest.
    """
    return (await _call(base_url, api_key, _sessions_call(agent_name, SessionFilters(**filters))))[0]


async def fetch_platform_session(
    base_url: str, api_key: str, agent_name: str, session_id: str
) -> PlatformSession | None:
    """`GET /agents/{agentName}/sessions/{sessionId}`, with resource metrics and meeting ids.

    None when the upstream answers 404: it does not know the session (a
    session the dashboard saw may never have run on the platform). The API
    answers 404 for an unknown agent too, and does not say which; the agent
    list or get_agent_status tells an unknown agent apart.
    """
    return (await _call(base_url, api_key, _session_call(agent_name, session_id)))[0]


async def fetch_logs(base_url: str, api_key: str, agent_name: str, **filters) -> LogPage:
    """`GET /agents/{agentName}/logs`, filtered, searched and paged: `filters` are LogFilters' fields."""
    return (await _call(base_url, api_key, _logs_call(agent_name, LogFilters(**filters))))[0]


# --- Cached, for pages (never raise) ---------------------------------------


def _cache_prefix(organization, base_url: str, call: _Call) -> str:
    """The organization's id, then a hash of everything that makes the answer: base URL, path, every parameter."""
    what = json.dumps([base_url, call.path, sorted(call.params.items())], separators=(",", ":"))
    return f"platform:{organization.pk}:{hashlib.sha256(what.encode()).hexdigest()[:40]}"


def session_cache_keys(organization, agent_name: str, session_id: str, log_lines: int) -> list[str]:
    """The cache entries that hold what the agents API said of one session, as the session page asks it
    (get_platform_session, and get_logs of its `log_lines` oldest first): an erase removes them."""
    base_url, _ = organization.agents_api
    filters = LogFilters(limit=log_lines, session_id=session_id, order="asc")
    calls = [_session_call(agent_name, session_id), _logs_call(agent_name, filters)]
    return [key for call in calls for key in cache_keys(_cache_prefix(organization, base_url, call)).values()]


async def _payload(organization, call: _Call) -> dict:
    base_url, api_key = organization.agents_api
    body = (await _call(base_url, api_key, call))[1]
    if call.words is not None:
        from asgiref.sync import sync_to_async

        from rtvi_monitor.redaction.models import RedactionRule

        body = call.words(body, await sync_to_async(RedactionRule.redactor_for)(organization.pk))
    return {"body": body}


def _redact_log_lines(body: Any, redactor) -> Any:
    """The log page with each line's text redacted (what is not a line's text, or not a page, is left to parse)."""
    if not isinstance(body, dict) or not isinstance(body.get("logs"), list):
        return body
    lines = [
        {**line, "log": redactor.text(line["log"], {})}
        if isinstance(line, dict) and isinstance(line.get("log"), str)
        else line
        for line in body["logs"]
    ]
    return {**body, "logs": lines}


def _fetched(found: Cached, parse: Callable[[Any], Any]) -> Fetched:
    if found.entry is None:
        return Fetched(value=None, fetched_at=None, error=found.error)
    try:
        value = parse(found.entry["body"])
    except ShapeError as exc:  # an entry written by a process that read the API differently
        return Fetched(value=None, fetched_at=None, error=f"The cached answer is unreadable ({exc}); refresh.")
    return Fetched(value=value, fetched_at=found.entry["fetched_at"], error=found.error, from_cache=found.from_cache)


async def _get_cached(organization, call: _Call, refresh: bool) -> Fetched:
    base_url, _ = organization.agents_api
    spec = CacheSpec(
        keys=cache_keys(_cache_prefix(organization, base_url, call)),
        fetch=functools.partial(_payload, organization, call),
        fresh_ttl=lambda payload: call.ttl(payload["body"]),
        keep=KEEP,
        what=f"{call.path} of the agents API",
    )
    return _fetched(await cached(spec, refresh), call.parse)


async def get_agent_status(organization, agent_name: str, refresh: bool = False) -> Fetched:
    """The agent's status (`value`: AgentStatus), cached for PLATFORM_CACHE_TTL; never raises."""
    return await _get_cached(organization, _status_call(agent_name), refresh)


async def get_platform_sessions(
    organization,
    agent_name: str,
    *,
    limit: int = 50,
    offset: int = 0,
    deployment_id: str | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    status: str = "all",
    start_type: str = "all",
    refresh: bool = False,
) -> Fetched:
    """A page of the agent's sessions (`value`: PlatformSessionPage), cached for PLATFORM_CACHE_TTL per query.

    Every parameter is part of the cache key, times as whole seconds: a
    window computed from now() is a new query every second, so round it
    (to the minute, say) for the cache to serve it. Raises ValueError only
    for arguments outside the documented values.
    """
    filters = SessionFilters(
        limit=limit,
        offset=offset,
        deployment_id=deployment_id,
        start_time=start_time,
        end_time=end_time,
        status=status,
        start_type=start_type,
    )
    return await _get_cached(organization, _sessions_call(agent_name, filters), refresh)


async def get_platform_session(organization, agent_name: str, session_id: str, *, refresh: bool = False) -> Fetched:
    """One session's record (`value`: PlatformSession), or None with no error when the platform does not know it.

    Cached for PLATFORM_ENDED_SESSION_TTL once the session has ended, for
    PLATFORM_CACHE_TTL while it is active or unknown (it may appear).
    """
    return await _get_cached(organization, _session_call(agent_name, session_id), refresh)


async def get_logs(
    organization,
    agent_name: str,
    *,
    limit: int = 50,
    offset: int = 0,
    deployment_id: str | None = None,
    session_id: str | None = None,
    query: str | None = None,
    order: str = "desc",
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    refresh: bool = False,
) -> Fetched:
    """A page of the agent's log lines (`value`: LogPage), cached for PLATFORM_CACHE_TTL per query; never raises."""
    filters = LogFilters(
        limit=limit,
        offset=offset,
        deployment_id=deployment_id,
        session_id=session_id,
        query=query,
        order=order,
        start_time=start_time,
        end_time=end_time,
    )
    return await _get_cached(organization, _logs_call(agent_name, filters), refresh)
