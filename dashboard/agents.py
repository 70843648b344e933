"""The agents service: fetch an organization's agents from an agents API, and cache them.

The upstream is Pipecat Cloud's `GET /v1/agents` or the dashboard's own
built-in copy of it (dashboard/v1.py); both speak the same contract. Every
call goes through `fetch_agents`, which turns every way the call can fail into
one `AgentsAPIError` whose message tells an operator what to do. Pages call
`get_agents`, which serves from Django's cache, makes one upstream call per
TTL however many requests arrive at once, and falls back to the last good list
when the upstream fails.

The functions are async: views run on the ASGI server's event loop, and the
built-in API may be served by the very process that calls it.
"""

import asyncio
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache


class AgentsAPIError(Exception):
    """The agent list could not be fetched; the message says what to do about it."""


@dataclass(frozen=True)
class Deployment:
    id: str
    service_id: str
    manifest: dict
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def image(self) -> str:
        """The container image, wherever the manifest keeps it."""
        spec = self.manifest.get("spec")
        image = (spec.get("image") if isinstance(spec, dict) else None) or self.manifest.get("image")
        return image if isinstance(image, str) else ""


@dataclass(frozen=True)
class Agent:
    id: str
    name: str
    active_deployment_id: str | None
    organization_id: str
    created_at: datetime | None
    updated_at: datetime | None
    deleted_at: datetime | None
    region: str = ""
    deployment: Deployment | None = None

    @property
    def status(self) -> str:
        return "deleted" if self.deleted_at else "active"


@dataclass(frozen=True)
class AgentList:
    """What a page shows: the agents, when they were fetched, and any error since."""

    agents: list[Agent]
    fetched_at: float | None  # epoch seconds of the last successful fetch
    error: str = ""  # the latest failure, when the list is stale or missing
    from_cache: bool = False
    include_deployment: bool = False

    @property
    def stale(self) -> bool:
        return bool(self.error) and self.fetched_at is not None

    @property
    def fetched_datetime(self) -> datetime | None:
        return datetime.fromtimestamp(self.fetched_at, tz=UTC) if self.fetched_at else None

    @property
    def age_seconds(self) -> float | None:
        return time.time() - self.fetched_at if self.fetched_at else None

    def find(self, agent_id: str) -> Agent | None:
        return next((agent for agent in self.agents if agent.id == agent_id), None)


# --- Parsing ---------------------------------------------------------------


class ShapeError(ValueError):
    pass


def _field(obj: dict, name: str, kinds: tuple[type, ...], where: str, *, nullable: bool = False) -> Any:
    if name not in obj:
        if nullable:
            return None
        raise ShapeError(f"{where}.{name} is missing")
    value = obj[name]
    if value is None and nullable:
        return None
    if not isinstance(value, kinds) or isinstance(value, bool):
        expected = " or ".join(k.__name__ for k in kinds)
        raise ShapeError(f"{where}.{name}: expected {expected}, got {type(value).__name__}")
    return value


def _timestamp(obj: dict, name: str, where: str) -> datetime | None:
    value = _field(obj, name, (str,), where, nullable=True)
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ShapeError(f"{where}.{name}: {value!r} is not an ISO 8601 timestamp") from None


def parse_deployment(obj: Any, where: str) -> Deployment | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ShapeError(f"{where}: expected an object, got {type(obj).__name__}")
    manifest = obj.get("manifest")
    return Deployment(
        id=_field(obj, "id", (str,), where),
        service_id=str(obj.get("serviceId") or ""),
        manifest=manifest if isinstance(manifest, dict) else {},
        created_at=_timestamp(obj, "createdAt", where),
        updated_at=_timestamp(obj, "updatedAt", where),
    )


def parse_agents(body: Any) -> list[Agent]:
    """Validate an agents API body into records; extra fields are ignored (the API grows)."""
    if not isinstance(body, dict):
        raise ShapeError(f"expected a JSON object with 'services', got {type(body).__name__}")
    services = body.get("services")
    if not isinstance(services, list):
        raise ShapeError("'services' is missing or not a list")
    agents = []
    for i, obj in enumerate(services):
        where = f"services[{i}]"
        if not isinstance(obj, dict):
            raise ShapeError(f"{where}: expected an object, got {type(obj).__name__}")
        agents.append(
            Agent(
                id=_field(obj, "id", (str,), where),
                name=_field(obj, "name", (str,), where),
                active_deployment_id=_field(obj, "activeDeploymentId", (str,), where, nullable=True),
                organization_id=_field(obj, "organizationId", (str,), where),
                created_at=_timestamp(obj, "createdAt", where),
                updated_at=_timestamp(obj, "updatedAt", where),
                deleted_at=_timestamp(obj, "deletedAt", where),
                region=str(obj.get("region") or ""),
                deployment=parse_deployment(obj.get("deployment"), f"{where}.deployment"),
            )
        )
    return agents


# --- Fetching --------------------------------------------------------------


def _status_error(status: int, url: str, location: str = "") -> AgentsAPIError:
    if 300 <= status < 400:
        return AgentsAPIError(
            f"The agents API redirected {url} to {location or 'elsewhere'} (HTTP {status}). Check "
            "AGENTS_API_BASE_URL: it must be the API's base and end in /v1, e.g. https://api.pipecat.daily.co/v1."
        )
    if status in (401, 403):
        return AgentsAPIError(
            f"The agents API refused the key (HTTP {status}). Check the organization's agents API key "
            "or AGENTS_API_KEY: it must be a private key of this organization, not revoked."
        )
    if status == 404:
        return AgentsAPIError(
            f"The agents API has no {url} (HTTP 404). Check AGENTS_API_BASE_URL: "
            "it must end in /v1, e.g. https://api.pipecat.daily.co/v1."
        )
    if status >= 500:
        return AgentsAPIError(f"The agents API failed (HTTP {status}). It is the upstream's fault; retry later.")
    return AgentsAPIError(f"The agents API answered HTTP {status} to {url}.")


async def fetch_agents(base_url: str, api_key: str, include_deployment: bool = False) -> list[Agent]:
    """One call to `GET {base_url}/agents`, retried on connection errors and 5xx.

    Raises AgentsAPIError for every failure: bad key, wrong URL, upstream
    error, timeout, refused connection, a body that is not JSON or not the
    agents shape.
    """
    if not api_key:
        raise AgentsAPIError(
            "No agents API key is configured. Set one for the organization in the admin, or AGENTS_API_KEY."
        )
    url = f"{base_url.rstrip('/')}/agents"
    params = {"includeActiveDeployment": "true"} if include_deployment else {}
    timeout = httpx.Timeout(
        connect=settings.AGENTS_CONNECT_TIMEOUT,
        read=settings.AGENTS_READ_TIMEOUT,
        write=settings.AGENTS_READ_TIMEOUT,
        pool=settings.AGENTS_CONNECT_TIMEOUT,
    )
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
    attempts = 1 + max(0, settings.AGENTS_RETRIES)
    async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
        for attempt in range(attempts):
            last_try = attempt == attempts - 1
            try:
                response = await client.get(url, params=params)
            except httpx.TimeoutException:
                # A read timeout is not retried: the upstream is slow, and
                # asking again only doubles the wait.
                raise AgentsAPIError(
                    f"The agents API at {base_url} did not answer in time. Check that it is up, "
                    "or raise AGENTS_READ_TIMEOUT."
                ) from None
            except httpx.ConnectError as exc:
                if last_try:
                    raise AgentsAPIError(
                        f"Could not connect to the agents API at {base_url} ({exc}). "
                        "Check AGENTS_API_BASE_URL and that the server is running."
                    ) from None
            except httpx.HTTPError as exc:
                raise AgentsAPIError(f"The call to the agents API at {base_url} failed: {exc}.") from None
            else:
                if response.status_code < 500 or last_try:
                    break
            await asyncio.sleep(settings.AGENTS_RETRY_BACKOFF * 2**attempt)

    if response.status_code != 200:
        raise _status_error(response.status_code, url, response.headers.get("location", ""))
    try:
        body = response.json()
    except ValueError:
        kind = response.headers.get("content-type", "unknown content type")
        raise AgentsAPIError(
            f"The agents API at {url} answered with something that is not JSON ({kind}). "
            "Check AGENTS_API_BASE_URL points at the API, not a web page."
        ) from None
    try:
        return parse_agents(body)
    except ShapeError as exc:
        raise AgentsAPIError(f"The agents API answered in an unexpected shape: {exc}.") from None


# --- Caching ---------------------------------------------------------------

# The cache holds plain dicts (so any backend can pickle them, and a change to
# the dataclasses does not break entries written by an older process).
LAST_GOOD_TTL = 7 * 24 * 3600
POLL_INTERVAL = 0.05


def _keys(organization_id: str, include_deployment: bool) -> dict[str, str]:
    base = f"agents:{organization_id}:{int(include_deployment)}"
    return {"fresh": f"{base}:fresh", "last": f"{base}:last", "lock": f"{base}:lock", "error": f"{base}:error"}


def _to_entry(agents: list[Agent], fetched_at: float) -> dict:
    return {"agents": [asdict(a) for a in agents], "fetched_at": fetched_at}


def _from_entry(entry: dict, **kwargs) -> AgentList:
    agents = []
    for a in entry["agents"]:
        deployment = Deployment(**a["deployment"]) if a.get("deployment") else None
        agents.append(Agent(**{**a, "deployment": deployment}))
    return AgentList(agents=agents, fetched_at=entry["fetched_at"], **kwargs)


async def _fetch_and_store(organization, keys: dict[str, str], include_deployment: bool) -> AgentList:
    base_url, api_key = organization.agents_api
    try:
        agents = await fetch_agents(base_url, api_key, include_deployment)
    except AgentsAPIError as exc:
        # Waiters see the error too, instead of each calling the upstream.
        await cache.aset(keys["error"], str(exc), timeout=settings.AGENTS_CACHE_TTL)
        return await _fallback(keys, include_deployment, str(exc))
    entry = _to_entry(agents, time.time())
    await cache.aset(keys["fresh"], entry, timeout=settings.AGENTS_CACHE_TTL)
    await cache.aset(keys["last"], entry, timeout=LAST_GOOD_TTL)
    await cache.adelete(keys["error"])
    return _from_entry(entry, include_deployment=include_deployment)


async def _fallback(keys: dict[str, str], include_deployment: bool, error: str) -> AgentList:
    last = await cache.aget(keys["last"])
    if last is None:
        return AgentList(agents=[], fetched_at=None, error=error, include_deployment=include_deployment)
    return _from_entry(last, error=error, from_cache=True, include_deployment=include_deployment)


async def get_agents(organization, include_deployment: bool = False, refresh: bool = False) -> AgentList:
    """The organization's agents: cached for AGENTS_CACHE_TTL, never raising.

    One caller at a time fetches (a `cache.add` lock, which is atomic on every
    backend, Redis included, so this holds across server processes); the
    others wait for its result. On failure the last good list is returned with
    the error and its fetch time. `refresh` skips the fresh cache.
    """
    keys = _keys(str(organization.pk), include_deployment)
    if not refresh:
        found = await cache.aget_many([keys["fresh"], keys["error"]])
        if keys["fresh"] in found:
            # A failed refresh leaves the cached list in place, but says so.
            error = found.get(keys["error"], "")
            return _from_entry(
                found[keys["fresh"]], error=error, from_cache=True, include_deployment=include_deployment
            )

    lock_timeout = (settings.AGENTS_CONNECT_TIMEOUT + settings.AGENTS_READ_TIMEOUT) * (1 + settings.AGENTS_RETRIES)
    if await cache.aadd(keys["lock"], 1, timeout=max(int(lock_timeout), 1)):
        try:
            return await _fetch_and_store(organization, keys, include_deployment)
        finally:
            await cache.adelete(keys["lock"])

    # Someone else is fetching: wait for the lock to go, then use what it left.
    deadline = time.monotonic() + lock_timeout
    # Polling, not an asyncio.Event: the fetcher may be another process.
    while time.monotonic() < deadline and await cache.aget(keys["lock"]) is not None:  # noqa: ASYNC110
        await asyncio.sleep(POLL_INTERVAL)
    entry = await cache.aget(keys["fresh"])
    if entry is not None:
        return _from_entry(entry, from_cache=True, include_deployment=include_deployment)
    error = await cache.aget(keys["error"]) or "The agents API is still being asked; try again shortly."
    return await _fallback(keys, include_deployment, error)
