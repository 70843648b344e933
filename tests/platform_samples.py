"""Pipecat Cloud's private API beyond the agent list, faked at the httpx layer (pytest-httpx).

Bodies shaped as the reference answers them
(https://docs.pipecat.ai/api-reference/pipecat-cloud/rest-reference), and
`fake_pipecat_cloud(httpx_mock, ...)`, which answers all four endpoints of an
agent (status, sessions, one session, logs) with their filters and paging,
for tests of the client and of the pages built on it:

    fake = fake_pipecat_cloud(httpx_mock, sessions=make_sessions(1000), logs=make_logs(10_000))
    page = await pipecat_cloud.fetch_platform_sessions(BASE, KEY, AGENT_NAME, status="active")
"""

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import httpx

from tests.agents_samples import BASE, KEY

AGENT_NAME = "support-bot"
DEPLOYMENT_ID = "4cab03c7-8f53-418d-9c3c-91a1265d179e"
OLD_DEPLOYMENT_ID = "81f4da55-106d-401f-b069-a1f1992f871a"
SERVICE_ID = "c359e1ea-64d6-4bcf-a7c6-28d3bd1c8909"
ORGANIZATION_ID = "cc71b52d-4271-46c9-87be-cac600fd821a"

# GET /agents/{agentName}, as the reference's example has it (extras included: the client ignores them).
AGENT_STATUS = {
    "name": AGENT_NAME,
    "region": "us-west",
    "ready": True,
    "available": True,
    "createdAt": "2025-04-09T15:01:17.414Z",
    "updatedAt": "2025-04-18T20:29:19.181Z",
    "desiredDeploymentId": DEPLOYMENT_ID,
    "activeDeploymentId": DEPLOYMENT_ID,
    "reconciledDeploymentId": DEPLOYMENT_ID,
    "activeDeploymentReady": True,
    "autoScaling": {"maxReplicas": 10, "minReplicas": 1},
    "activeSessionCount": 2,
    "deployment": {
        "id": DEPLOYMENT_ID,
        "manifest": {
            "apiVersion": "pipecatcloud.daily.co/v1",
            "kind": "PCService",
            "metadata": {"name": AGENT_NAME, "namespace": "tiny-ferret-maroon-123"},
            "spec": {
                "dailyNodeType": "arm",
                "image": "your-dockername/support-bot:0.1",
                "autoScaling": {"minReplicas": 1, "maxReplicas": 10},
                "resources": {"cpu": "500m", "memory": "1Gi"},
            },
        },
        "serviceId": SERVICE_ID,
        "createdAt": "2025-04-18T20:29:19.177Z",
        "updatedAt": "2025-04-18T20:29:19.177Z",
    },
    "agentProfile": "agent-1x",
    "currentRevision": {"deploymentID": DEPLOYMENT_ID, "phase": "Active", "readyReplicas": 1},
    "previousRevision": None,
}


def _session(session_id: str, **fields) -> dict:
    return {
        "sessionId": session_id,
        "serviceId": SERVICE_ID,
        "organizationId": ORGANIZATION_ID,
        "deploymentId": DEPLOYMENT_ID,
        "endedAt": None,
        "botStartSeconds": None,
        "coldStart": None,
        "completionStatus": None,
        "createdAt": None,
        "updatedAt": None,
        **fields,
    }


# A cold start that failed: the bot took 7 s to start, then the session ended in HTTP_ERROR.
COLD_ERROR_SESSION = _session(
    "44003e83-b679-46ef-88ec-18e9ea9dd81d",
    deploymentId=OLD_DEPLOYMENT_ID,
    endedAt="2025-10-21T08:17:47.000Z",
    botStartSeconds=7,
    coldStart=True,
    completionStatus="HTTP_ERROR",
    createdAt="2025-10-21T08:17:22.000Z",
    updatedAt="2025-10-21T08:17:38.000Z",
)
# A warm start that completed after 95.5 s.
WARM_COMPLETED_SESSION = _session(
    "800d444a-e67e-4686-afb3-b0de509cccb3",
    endedAt="2025-10-22T08:41:01.500Z",
    botStartSeconds=0,
    coldStart=False,
    completionStatus="HTTP_COMPLETED",
    createdAt="2025-10-22T08:39:26.000Z",
    updatedAt="2025-10-22T08:41:01.500Z",
)
# Still running: no end, no completion status yet.
ACTIVE_SESSION = _session(
    "803349cc-2ae0-437a-9a72-408817299e43",
    botStartSeconds=2,
    coldStart=False,
    createdAt="2025-10-22T09:00:00.000Z",
    updatedAt="2025-10-22T09:00:02.000Z",
)
SESSIONS_BODY = {"total_count": 330, "sessions": [ACTIVE_SESSION, WARM_COMPLETED_SESSION, COLD_ERROR_SESSION]}

RESOURCE_METRICS = {
    "id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    "sessionId": WARM_COMPLETED_SESSION["sessionId"],
    "sampleCount": 3,
    "cpuMillicoresP50": 150,
    "cpuMillicoresP90": 280,
    "cpuMillicoresP95": 320,
    "cpuMillicoresP99": 450,
    "memoryBytesP50": 134217728,
    "memoryBytesP90": 201326592,
    "memoryBytesP95": 234881024,
    "memoryBytesP99": 268435456,
    "timeseries": [
        {"t": 1761122366, "c": 150, "m": 134217728},
        {"t": 1761122371, "c": 280, "m": 201326592},
        {"t": 1761122376, "c": 450.5, "m": 268435456},
    ],
    "eventTs": "2025-10-22T08:41:01.000Z",
    "createdAt": "2025-10-22T08:41:01.000Z",
}
# GET /agents/{agentName}/sessions/{sessionId}: the record plus resourceMetrics and meetingIds.
SESSION_DETAIL = {
    **WARM_COMPLETED_SESSION,
    "resourceMetrics": RESOURCE_METRICS,
    "meetingIds": [
        {"participantId": "d4e5f6a7-b8c9-0123-4567-890abcdef012", "meetingId": "f1e2d3c4-b5a6-9780-1234-567890abcdef"}
    ],
}

# Log lines in the three formats bots write, with the API's nanosecond timestamps.
UVICORN_LINE = {
    "log": "INFO:     Uvicorn running on http://0.0.0.0:8080 (Press CTRL+C to quit)",
    "timestamp": "2025-04-18T20:32:42.246099974Z",
}
LOGURU_LINE = {
    "log": "2025-04-18 20:33:01.512 | WARNING  | pipecat.transports.daily:on_error:214 - Daily transport error",
    "timestamp": "2025-04-18T20:33:01.512367118Z",
    "deploymentId": DEPLOYMENT_ID,
}
PLAIN_ERROR_LINE = {
    "log": "ERROR Bot crashed: TimeoutError waiting for the LLM",
    "timestamp": "2025-04-18T20:34:17.153744602Z",
    "deploymentId": None,
}
LOGS_BODY = {"total": {"value": 79, "relation": "eq"}, "logs": [PLAIN_ERROR_LINE, LOGURU_LINE, UVICORN_LINE]}


# --- Larger, generated data -----------------------------------------------

EPOCH = datetime(2025, 10, 1, tzinfo=UTC)


def iso_ms(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def make_sessions(n: int, *, start: datetime = EPOCH, active: int = 5) -> list[dict]:
    """`n` sessions a minute apart from `start`, oldest first; the newest `active` of them still running.

    Deterministic mix: every 7th a cold start; every 10th HTTP_ERROR, every
    13th an HTTP 500 (a number, as the API may send), every 17th
    WS_CONNECTION_CLOSED, the rest HTTP_COMPLETED; the older half on
    OLD_DEPLOYMENT_ID, the newer on DEPLOYMENT_ID.
    """
    sessions = []
    for i in range(n):
        created = start + timedelta(minutes=i)
        running = i >= n - active
        if i % 10 == 0:
            completion = "HTTP_ERROR"
        elif i % 13 == 0:
            completion = 500
        elif i % 17 == 0:
            completion = "WS_CONNECTION_CLOSED"
        else:
            completion = "HTTP_COMPLETED"
        sessions.append(
            _session(
                f"sess-{i:05d}",
                deploymentId=OLD_DEPLOYMENT_ID if i < n // 2 else DEPLOYMENT_ID,
                createdAt=iso_ms(created),
                updatedAt=iso_ms(created + timedelta(seconds=30)),
                endedAt=None if running else iso_ms(created + timedelta(seconds=30 + i % 50)),
                coldStart=i % 7 == 0,
                botStartSeconds=4 if i % 7 == 0 else 0,
                completionStatus=None if running else completion,
            )
        )
    return sessions


def make_logs(n: int, sessions: list[dict] | None = None) -> list[dict]:
    """`n` log lines, oldest first, cycling through the three formats and the sessions (each line names its
    session in an extra `sessionId` field, which the fake filters on and the client ignores)."""
    sessions = sessions or [WARM_COMPLETED_SESSION]
    lines = []
    for i in range(n):
        session = sessions[i % len(sessions)]
        at = EPOCH + timedelta(milliseconds=i * 10)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond:06d}{i % 1000:03d}Z"
        kind = i % 3
        if kind == 0:
            text = f"INFO:     request {i} served"
        elif kind == 1:
            text = f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} | DEBUG    | bot:run:{i % 90} - turn {i}"
        else:
            text = f"ERROR line {i}: the TTS service timed out"
        lines.append(
            {
                "log": text,
                "timestamp": stamp,
                "deploymentId": session["deploymentId"],
                "sessionId": session["sessionId"],
            }
        )
    return lines


# --- The fake ----------------------------------------------------------------

MAX_EXACT_TOTAL = 10_000  # past this the logs' total is a lower bound ("gte"), as an Elasticsearch count is


def _error(status: int, message: str, code: str | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": message, "code": code or str(status)})


def _epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


class FakePipecatCloud:
    """Pipecat Cloud's four agent endpoints over in-memory data; `sessions`, `logs`, `agents` may be changed.

    `agents` maps a name to its status body; the sessions and logs are every
    known agent's. `details` maps a session id to the fields its detail adds
    (resourceMetrics, meetingIds). The key must be `key` (else 401); an
    unknown agent or session is a 404; a bad enum or number is a 400, worded
    as the API words it.
    """

    def __init__(self, *, sessions, logs, agents, details, key):
        self.sessions, self.logs, self.agents, self.details, self.key = sessions, logs, agents, details, key

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != f"Bearer {self.key}":
            return _error(401, "Unauthorized / token expired")
        path = request.url.raw_path.decode().split("?")[0]
        # Segments are unquoted one by one: "a%2Fb" is one name, as the API reads it.
        segments = [unquote(s) for s in path.split("/agents/", 1)[1].split("/")]
        name, rest = segments[0], segments[1:]
        if name not in self.agents:
            return _error(404, "Not found", "NOT_FOUND")
        params = request.url.params
        try:
            if rest == []:
                return httpx.Response(200, json=self.agents[name])
            if rest == ["sessions"]:
                return self._sessions(params)
            if len(rest) == 2 and rest[0] == "sessions":
                return self._session(rest[1])
            if rest == ["logs"]:
                return self._logs(params)
        except ValueError as exc:
            return _error(400, f"Invalid parameters: {exc}")
        return _error(404, "API endpoint not found")

    def _page(self, params, rows: list) -> list:
        limit, offset = int(params.get("limit", "10")), int(params.get("offset", "0"))
        if limit < 1 or offset < 0:
            raise ValueError("limit and offset must be positive")
        return rows[offset : offset + limit]

    @staticmethod
    def _choice(params, name: str, choices: tuple[str, ...], default: str) -> str:
        value = params.get(name, default)
        if value not in choices:
            raise ValueError(f"Invalid enum value. Expected {' | '.join(map(repr, choices))}, received {value!r}")
        return value

    @staticmethod
    def _window(params):
        start, end = params.get("startTime"), params.get("endTime")
        return (int(start) if start else None), (int(end) if end else None)

    def _sessions(self, params) -> httpx.Response:
        status = self._choice(params, "status", ("active", "ended", "all"), "all")
        start_type = self._choice(params, "startType", ("cold", "warm", "all"), "all")
        deployment, (start, end) = params.get("deploymentId"), self._window(params)
        rows = []
        for s in self.sessions:
            created = _epoch(s["createdAt"])
            if status != "all" and (s["endedAt"] is None) != (status == "active"):
                continue
            if start_type != "all" and s["coldStart"] is not (start_type == "cold"):
                continue
            if deployment and s["deploymentId"] != deployment:
                continue
            if (start is not None and created < start) or (end is not None and created > end):
                continue
            rows.append(s)
        rows.sort(key=lambda s: s["createdAt"], reverse=True)  # newest first
        return httpx.Response(200, json={"total_count": len(rows), "sessions": self._page(params, rows)})

    def _session(self, session_id: str) -> httpx.Response:
        found = next((s for s in self.sessions if s["sessionId"] == session_id), None)
        if found is None:
            return _error(404, "Session not found")
        return httpx.Response(
            200, json={"resourceMetrics": None, "meetingIds": [], **found, **self.details.get(session_id, {})}
        )

    def _logs(self, params) -> httpx.Response:
        order = self._choice(params, "order", ("asc", "desc"), "desc")
        deployment, session, query = params.get("deploymentId"), params.get("sessionId"), params.get("query", "")
        start, end = self._window(params)
        needle = query.lower()
        rows = [
            line
            for line in self.logs
            if (not deployment or line.get("deploymentId") == deployment)
            and (not session or line.get("sessionId") == session)
            and (not needle or needle in line["log"].lower())
            and (start is None or _epoch(line["timestamp"][:26] + "Z") >= start)
            and (end is None or _epoch(line["timestamp"][:26] + "Z") <= end)
        ]
        # The same format and length throughout: the text sorts as the time does.
        rows.sort(key=lambda line: line["timestamp"], reverse=order == "desc")
        total = {"value": min(len(rows), MAX_EXACT_TOTAL), "relation": "gte" if len(rows) > MAX_EXACT_TOTAL else "eq"}
        return httpx.Response(200, json={"total": total, "logs": self._page(params, rows)})


def fake_pipecat_cloud(
    httpx_mock,
    *,
    sessions: list[dict] | None = None,
    logs: list[dict] | None = None,
    agents: dict[str, dict] | None = None,
    details: dict[str, dict] | None = None,
    base: str = BASE,
    key: str = KEY,
) -> FakePipecatCloud:
    """Register a fake Pipecat Cloud answering `{base}/agents/{name}[/sessions[/{id}]|/logs]` for every request.

    Defaults: the one agent AGENT_STATUS, the three sample sessions (the warm
    one with SESSION_DETAIL's metrics and meetings) and the three sample log
    lines. Optional for pytest-httpx: a test need not call every endpoint.
    """
    fake = FakePipecatCloud(
        sessions=list(SESSIONS_BODY["sessions"]) if sessions is None else sessions,
        logs=list(LOGS_BODY["logs"]) if logs is None else logs,
        agents={AGENT_NAME: AGENT_STATUS} if agents is None else agents,
        details={WARM_COMPLETED_SESSION["sessionId"]: SESSION_DETAIL} if details is None else details,
        key=key,
    )
    httpx_mock.add_callback(
        fake, url=re.compile(re.escape(base.rstrip("/")) + r"/agents/[^?]+(\?.*)?"), is_reusable=True, is_optional=True
    )
    return fake
