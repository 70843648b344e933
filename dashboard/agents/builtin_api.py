"""The built-in agents API: the agents, one agent, its sessions and its logs, as Pipecat Cloud answers them.

    GET /v1/agents                                      the organization's agents (`includeActiveDeployment`)
    GET /v1/agents/<agentName>                          the agent, its deployment and status
    GET /v1/agents/<agentName>/sessions                 its sessions, newest first, paged and filtered
    GET /v1/agents/<agentName>/sessions/<sessionId>     one session, with resourceMetrics and meetingIds
    GET /v1/agents/<agentName>/logs                     its bots' log lines, paged, filtered and searched

Teams that host their own bots get from the dashboard what Pipecat Cloud's
private API (`/v1`, https://docs.pipecat.ai/api-reference/pipecat-cloud/rest-reference)
gives its customers, served from what the dashboard knows: the sessions are
the RTVI sessions its bots streamed (Session.agent_key is the agent's id), the
logs are the lines they sent as `system-log` messages (rtvi_dashboard.logs
forwards a bot's logger) and their `error` / `error-response` messages.

Teams that host their own bots (and the default install) point the dashboard's agents service
(dashboard/agents/service.py, dashboard/agents/pipecat_cloud.py) at these endpoints. Every endpoint takes a private API
key of the agent's organization (401 otherwise; another organization's agent is a 404, never its
data), JSON errors {"error", "code"}, GET only, and every bad query parameter a
400 naming the parameter and the value it got.

Deleted agents (deleted_at set) are still served: GET /v1/agents lists them
(with deletedAt), and their sessions and logs are history worth reading. They
are never `ready` nor `available`.
"""

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from functools import wraps
from typing import Any

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from dashboard.access.auth import key_or_member_required
from dashboard.agents.models import Agent
from dashboard.agents.pipecat_cloud import LOG_ORDERS, SESSION_STATUSES, START_TYPES
from dashboard.agents.service import AgentRecord, DeploymentRecord
from dashboard.web.display import iso_ms
from dashboard.web.http import BadParam, Query, StrictJsonResponse, json_error, json_methods
from rtvi_monitor.core.protocol import SESSION_ID_RE
from rtvi_monitor.core.reducer.errors import LOG_TYPES, error_of
from rtvi_monitor.sessions.events import stored_message
from rtvi_monitor.sessions.models import EndKind, Event, Session

DEFAULT_LIMIT = 10  # the reference's default, for sessions and logs alike
MAX_LIMIT = 1000
# A level a bot may name for its line (data.level); anything else is read as INFO.
LEVEL_RE = re.compile(r"^[A-Za-z]{1,16}\Z")
# The log types as SQL literals, in the index's order (constants of [a-z-]: nothing to escape).
LOG_TYPES_SQL = ", ".join(f"'{t}'" for t in LOG_TYPES if re.fullmatch(r"[a-z-]+", t))
SCAN_CHUNK = 2000  # log rows read at a time when a query is matched line by line
SCAN_MAX = 50_000  # lines a query is matched against at most: a search costs the same on any agent


def record_of(agent: Agent, include_deployment: bool) -> AgentRecord:
    """One of our agents as the agents client's typed record: the built-in API serves what it reads."""
    deployment = agent.active_deployment if include_deployment else None
    return AgentRecord(
        id=str(agent.id),
        name=agent.name,
        active_deployment_id=str(agent.active_deployment_id) if agent.active_deployment_id else None,
        organization_id=str(agent.organization_id),
        created_at=agent.created_at,
        updated_at=agent.updated_at,
        deleted_at=agent.deleted_at,
        deployment=DeploymentRecord(
            id=str(deployment.id),
            service_id=str(deployment.agent_id),
            manifest=deployment.manifest,
            created_at=deployment.created_at,
            updated_at=deployment.updated_at,
        )
        if deployment
        else None,
    )


def agent_json(agent: AgentRecord, include_deployment: bool) -> dict:
    """An agent in Pipecat Cloud's shape (camelCase, ISO 8601 times with milliseconds and Z)."""
    record = {
        "id": agent.id,
        "name": agent.name,
        "activeDeploymentId": agent.active_deployment_id,
        "organizationId": agent.organization_id,
        "createdAt": iso_ms(agent.created_at),
        "updatedAt": iso_ms(agent.updated_at),
        "deletedAt": iso_ms(agent.deleted_at),
    }
    if include_deployment:
        deployment = agent.deployment
        record["deployment"] = (
            {
                "id": deployment.id,
                "serviceId": deployment.service_id,
                "manifest": deployment.manifest,
                "createdAt": iso_ms(deployment.created_at),
                "updatedAt": iso_ms(deployment.updated_at),
            }
            if deployment
            else None
        )
    return record


def v1_door(view):
    """Every /v1 endpoint's door, the dashboard's own (dashboard/access/auth.py): GET only (else a JSON 405), and
    a private API key of the organization (`agents.api` reads no browser session): 401/403 JSON otherwise."""
    return json_methods("GET")(key_or_member_required("agents.api")(view))


@v1_door
def agents(request):
    """GET /v1/agents: the key's organization's agents, as `{"services": [...]}`."""
    try:
        include = _query(request).boolean("includeActiveDeployment", default=False)
    except BadParam as exc:
        return json_error(str(exc), 400)

    queryset = Agent.objects.filter(organization=request.organization).order_by("created_at", "id")
    if include:
        queryset = queryset.select_related("active_deployment")
    return StrictJsonResponse({"services": [agent_json(record_of(a, include), include) for a in queryset]})


# --- parameters: read with dashboard.web.http.Query as sent (form=False), as Pipecat Cloud reads them ---------


def _query(request) -> Query:
    return Query(request.GET, form=False)


def time_range(query: Query) -> tuple[float | None, float | None]:
    """startTime and endTime: from startTime (inclusive) until endTime (exclusive), either open."""
    start, end = query.unix_seconds("startTime"), query.unix_seconds("endTime")
    if start is not None and end is not None and start > end:
        raise BadParam("startTime", f"must not be after endTime, got startTime={start:g} and endTime={end:g}")
    return start, end


# --- who is asking, and which agent ---------------------------------------------------------------


def agent_endpoint(view):
    """A GET view of one agent: its organization's key, then its name from the path, then its parameters.

    The view is called as view(request, agent, **kwargs). The key is checked
    before the name, so that nobody without one learns which names exist;
    an agent of another organization is simply not found. BadParam -> 400.
    """

    @wraps(view)
    def wrapper(request, agent_name: str, **kwargs):
        agent = (
            Agent.objects.select_related("active_deployment")
            .filter(organization=request.organization, name=agent_name)
            .first()
        )
        if agent is None:
            return json_error(f"No agent named {agent_name!r} in your organization.", 404)
        try:
            return view(request, agent, **kwargs)
        except BadParam as exc:
            return json_error(str(exc), 400)

    return v1_door(wrapper)


# --- the agent ------------------------------------------------------------------------------------


def _manifest_value(manifest: Any, name: str) -> Any:
    """A deployment setting: at the manifest's top (as agents are created) or in its spec (Pipecat Cloud's)."""
    if not isinstance(manifest, dict):
        return None
    if name in manifest:
        return manifest[name]
    spec = manifest.get("spec")
    return spec.get(name) if isinstance(spec, dict) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def auto_scaling(manifest: Any) -> dict | None:
    """{maxReplicas, minReplicas} as the reference answers it, from either spelling a manifest may use.

    Pipecat Cloud's manifests say minReplicas/maxReplicas; its create request
    (and so a hand-written manifest) says minAgents/maxAgents.
    """
    raw = _manifest_value(manifest, "autoScaling")
    if not isinstance(raw, dict):
        return None
    scaling = {
        "maxReplicas": _count(raw.get("maxReplicas", raw.get("maxAgents"))),
        "minReplicas": _count(raw.get("minReplicas", raw.get("minAgents"))),
    }
    return scaling if any(v is not None for v in scaling.values()) else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def agent_detail_json(agent: Agent, active_sessions: int) -> dict:
    """The agent in the reference's ServiceDetailsResponse shape, from our models.

    One deployment id stands for desired, active and reconciled: a built-in
    agent's deployment is active the moment it is set. Ready (and available)
    means it has one and is not deleted. What we cannot know (revisions and
    their replicas) is null.
    """
    listed = agent_json(record_of(agent, include_deployment=True), include_deployment=True)
    manifest = agent.active_deployment.manifest if agent.active_deployment else None
    ready = agent.active_deployment_id is not None and agent.deleted_at is None
    krisp = _manifest_value(manifest, "krispViva") if isinstance(manifest, dict) and "krispViva" in manifest else None
    return {
        "name": agent.name,
        "region": _string(_manifest_value(manifest, "region")),
        "ready": ready,
        "available": ready,
        "createdAt": listed["createdAt"],
        "updatedAt": listed["updatedAt"],
        "desiredDeploymentId": listed["activeDeploymentId"],
        "activeDeploymentId": listed["activeDeploymentId"],
        "reconciledDeploymentId": listed["activeDeploymentId"],
        "activeDeploymentReady": ready,
        "autoScaling": auto_scaling(manifest),
        "activeSessionCount": active_sessions,
        "agentProfile": _string(_manifest_value(manifest, "agentProfile")),
        "deployment": listed["deployment"],
        "krispViva": {"audioFilter": _string(krisp.get("audioFilter"))} if isinstance(krisp, dict) else None,
        "currentRevision": None,
        "previousRevision": None,
    }


def agent_sessions(agent: Agent) -> QuerySet:
    """The agent's sessions: those its bots streamed naming it (agent_key is its id), in its organization."""
    return Session.objects.filter(organization_id=agent.organization_id, agent_key=str(agent.pk))


@agent_endpoint
def agent_detail(request, agent):
    """GET /v1/agents/<agentName>: the agent, its active deployment, and how many of its sessions are live."""
    return StrictJsonResponse(agent_detail_json(agent, agent_sessions(agent).live().count()))


# --- sessions -------------------------------------------------------------------------------------


def completion_status(session: Session) -> str | None:
    """How a session ended, in Pipecat Cloud's words (its completionStatus); None while it is live.

    The dashboard records how a session ended (`end_kind`, rtvi_monitor/live/lifecycle.py):

    - fatal error                                   -> "HTTP_ERROR": the bot failed;
    - bot vanished (its connection dropped or closed abnormally and it did
      not come back), or server restarted (the dashboard process holding the
      bot's connection went away: how the bot ended is unknown)
                                                    -> "WS_CONNECTION_CLOSED";
    - client hung up, ended by an operator, bot finished (a 1000 close), or an end recorded before
      kinds were (blank)                            -> "HTTP_COMPLETED".

    A live session whose bot is away (within the grace) is still live: None.
    """
    if session.status != Session.Status.ENDED:
        return None
    if session.fatal or session.end_kind == EndKind.FATAL_ERROR or session.end_reason == "fatal error":
        return "HTTP_ERROR"
    if session.end_kind in (EndKind.BOT_VANISHED, EndKind.SERVER_RESTARTED) or session.end_reason == "server restarted":
        return "WS_CONNECTION_CLOSED"
    return "HTTP_COMPLETED"


def session_json(session: Session, agent: Agent) -> dict:
    """A session as the reference's session list has it.

    botStartSeconds and coldStart are null: a self-hosted bot's start is not
    the dashboard's to see. updatedAt is when it last changed: its last
    message, or its end when that came later.
    """
    changes = [t for t in (session.started_at, session.last_event_at, session.ended_at) if t is not None]
    return {
        "sessionId": session.session_id,
        "serviceId": str(agent.pk),
        "organizationId": str(session.organization_id),
        "deploymentId": session.deployment_id or None,
        "endedAt": iso_ms(session.ended_at),
        "botStartSeconds": None,
        "coldStart": None,
        "completionStatus": completion_status(session),
        "createdAt": iso_ms(session.started_at),
        "updatedAt": iso_ms(max(changes)),
    }


def _datetime(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


@agent_endpoint
def agent_session_list(request, agent):
    """GET /v1/agents/<agentName>/sessions: {"total_count", "sessions"}, newest first.

    Filters: status (active|ended|all), deploymentId, startTime/endTime (Unix
    seconds, on createdAt), startType (cold|warm|all), startTimeMin/Max
    (seconds the bot took to start). The bot's start is unknown here, so
    startType=cold or warm, and a startTimeMin or startTimeMax above 0,
    match no session (the platform would not count a session it cannot
    classify either).
    """
    query = _query(request)
    limit, offset = query.page(DEFAULT_LIMIT, MAX_LIMIT)
    status = query.choice("status", SESSION_STATUSES, default="all")
    start_type = query.choice("startType", START_TYPES, default="all")
    deployment_id = query.text("deploymentId")
    start, end = time_range(query)
    bot_start_bounds = [query.whole_number(name, 0, 0, 86_400) for name in ("startTimeMin", "startTimeMax")]

    sessions = agent_sessions(agent)
    if status != "all":
        sessions = sessions.filter(status=Session.Status.LIVE if status == "active" else Session.Status.ENDED)
    if deployment_id:
        sessions = sessions.filter(deployment_id=deployment_id)
    if start is not None:
        sessions = sessions.filter(started_at__gte=_datetime(start))
    if end is not None:
        sessions = sessions.filter(started_at__lt=_datetime(end))
    if start_type != "all" or any(bot_start_bounds):
        sessions = sessions.none()
    page = sessions.order_by("-started_at", "-pk")[offset : offset + limit]
    return StrictJsonResponse(
        {"total_count": sessions.count(), "sessions": [session_json(s, agent) for s in page]},
    )


@agent_endpoint
def agent_session_detail(request, agent, session_id: str):
    """GET /v1/agents/<agentName>/sessions/<sessionId>: the session, with no resource metrics nor meetings.

    The dashboard does not measure a bot's CPU or memory (resourceMetrics is
    null) and knows no Daily meeting of it (meetingIds is []).
    """
    session = agent_sessions(agent).filter(session_id=session_id).first() if SESSION_ID_RE.match(session_id) else None
    if session is None:
        return json_error(f"No session {session_id!r} of agent {agent.name!r}.", 404)
    return StrictJsonResponse({**session_json(session, agent), "resourceMetrics": None, "meetingIds": []})


# --- logs -----------------------------------------------------------------------------------------


def iso_ns(epoch: float) -> str:
    """Epoch seconds as ISO 8601 UTC with nanoseconds and Z, the logs' timestamp format.

    The digits are the float's shortest form (repr), not its binary
    expansion, so 1745000000.123456 is .123456000, not .123456001.
    """
    exact = Decimal(repr(epoch)).quantize(Decimal("1e-9"), rounding=ROUND_HALF_EVEN)
    seconds = int(exact.to_integral_value(rounding=ROUND_FLOOR))
    nanos = int((exact - seconds) * 1_000_000_000)
    return _datetime(seconds).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value)


def log_line(msg_type: str, message_text: str) -> str:
    """One stored log message as a log line, "LEVEL: text".

    system-log: the level the bot named (data.level, e.g. from its logger),
    else INFO. error and error-response (read by state.error_of): ERROR, or
    CRITICAL for a fatal error. A message that was not JSON is its raw text.
    """
    message = stored_message(message_text)
    data = message.get("data") if isinstance(message, dict) else None
    if not isinstance(data, dict):
        return f"INFO: {message}" if isinstance(message, str) else "INFO: "
    if msg_type == "system-log":
        level = data.get("level")
        level = level.upper() if isinstance(level, str) and LEVEL_RE.match(level) else "INFO"
        return f"{level}: {_text(data.get('text'))}"
    text, fatal = error_of(msg_type, data)
    return f"{'CRITICAL' if fatal else 'ERROR'}: {_text(text)}"


def log_entry(line: str, received_at: float, deployment_id: str) -> dict:
    """One line as the reference's log entry, with its time and its session's deployment."""
    return {"log": line, "timestamp": iso_ns(received_at), "deploymentId": deployment_id or None}


def matching(rows: Iterable[tuple], query: str, offset: int, limit: int) -> tuple[int, list[dict]]:
    """(how many rows' lines contain `query`, case-insensitively; the entries of the page of them).

    `rows` are (type, message, received_at, deployment_id), in the order asked.
    """
    needle, total, page = query.lower(), 0, []
    for msg_type, message, received_at, deployment_id in rows:
        line = log_line(msg_type, message)
        if needle in line.lower():
            if offset <= total < offset + limit:
                page.append(log_entry(line, received_at, deployment_id))
            total += 1
    return total, page


def log_rows(sessions: QuerySet) -> QuerySet:
    """The bots' log messages (LOG_TYPES, sent by the bot) of `sessions` (a queryset of session pks).

    Read through the partial index event_log_idx (log types, by session and
    time): a page and a count read the agent's own log lines, however many
    other agents and organizations have. SQLite uses a partial index only when
    the query states its condition literally (a bound parameter could be
    anything), so the types are written out.
    """
    column = f"{connection.ops.quote_name(Event._meta.db_table)}.{connection.ops.quote_name('type')}"
    literal = RawSQL(f"{column} IN ({LOG_TYPES_SQL})", [], output_field=BooleanField())
    return Event.objects.filter(literal, direction="to-client", session__in=sessions)


@agent_endpoint
def agent_logs(request, agent):
    """GET /v1/agents/<agentName>/logs: {"total": {"value", "relation"}, "logs": [{"log", "timestamp", ...}]}.

    The lines are what the agent's bots sent: `system-log` messages and
    errors, newest first (order=asc for oldest first). Filters: deploymentId,
    sessionId, startTime/endTime (Unix seconds, on when the dashboard
    received the line), query (case-insensitive text of the line). The total
    is exact (a search's, up to SCAN_MAX lines). Rows are read through the
    partial index event_log_idx (log types, by session and time), so a page
    costs the agent's own lines, not every organization's; a query is matched on each line as the API shows it
    (level included), reading the filtered rows in chunks.
    """
    params = _query(request)
    limit, offset = params.page(DEFAULT_LIMIT, MAX_LIMIT)
    order = params.choice("order", LOG_ORDERS, default="desc")
    deployment_id = params.text("deploymentId")
    session_id = params.session_id("sessionId")
    query = params.text("query")
    start, end = time_range(params)

    sessions = agent_sessions(agent)
    if deployment_id:
        sessions = sessions.filter(deployment_id=deployment_id)
    if session_id:
        sessions = sessions.filter(session_id=session_id)
    rows = log_rows(sessions.values("pk"))
    if start is not None:
        rows = rows.filter(received_at__gte=start)
    if end is not None:
        rows = rows.filter(received_at__lt=end)
    ordering = ("received_at", "pk") if order == "asc" else ("-received_at", "-pk")
    fields = rows.order_by(*ordering).values_list("type", "message", "received_at", "session__deployment_id")
    if query:
        # A search reads at most SCAN_MAX lines (newest first, or oldest with order=asc): past them its
        # total is a lower bound, as the reference's is past its own limit.
        scanned = fields[:SCAN_MAX].iterator(chunk_size=SCAN_CHUNK)
        total, logs = matching(scanned, query, offset, limit)
        relation = "gte" if rows.count() > SCAN_MAX else "eq"
    else:
        page = fields[offset : offset + limit]
        total, logs = rows.count(), [log_entry(log_line(t, m), at, d) for t, m, at, d in page]
        relation = "eq"
    return StrictJsonResponse({"total": {"value": total, "relation": relation}, "logs": logs})
