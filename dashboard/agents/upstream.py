"""Outbound HTTP to the agents platform: one request discipline, one error, one cache.

Pipecat Cloud's private API (or the dashboard's built-in copy of it, dashboard/agents/builtin_api.py) is read
by two clients: the agents list (dashboard/agents/service.py) and the rest of the platform's API
(dashboard/agents/pipecat_cloud.py: an agent's status, its sessions, its logs). Both go through this module:

- `fetch_json`: one `GET` through the outbound client (dashboard/net/outbound.py), retried on
  connection errors and 5xx, with an overall deadline (AGENTS_DEADLINE) however slowly the upstream
  answers, and refused if an organization's base URL points inside the dashboard's network (only
  AGENTS_API_BASE_URL's host and OUTBOUND_ALLOWED_HOSTS may); every way it can fail becomes one
  `AgentsAPIError` whose message tells an operator what to do.
- `field` / `timestamp` / `parse_timestamp`: reading the upstream's JSON into typed records; a body of
  the wrong shape is a `ShapeError`, which `fetch_json` turns into an AgentsAPIError. One timestamp
  parser for every field of the API (ISO 8601, any number of fractional digits, UTC when no zone).
- `cached`, driven by a `CacheSpec`: served from Django's cache, one upstream call per TTL however many
  requests arrive at once, the last good answer when the upstream fails (`Freshness`: its age and the
  error), and never a page kept waiting past AGENTS_PAGE_WAIT.

The functions are async: views run on the ASGI server's event loop, and the built-in API may be served
by the very process that calls it.
"""

import asyncio
import contextvars
import functools
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache

from dashboard.net import outbound

logger = logging.getLogger(__name__)
T = TypeVar("T")


class AgentsAPIError(Exception):
    """The agents API could not be asked or did not answer usefully; the message says what to do about it."""


class AgentsAPINotFound(AgentsAPIError):
    """The agents API answered 404: a wrong base URL for the list, an unknown agent or session below it.

    A subclass so that a caller for whom "not found" is an answer (a session
    the platform does not know) can tell it from a failure.
    """


class Freshness:
    """How old a cached answer is, for the results pages get (AgentList, pipecat_cloud.Fetched).

    A page shows the answer with its age and the failure since, rather than
    an error page, when the upstream fails: `stale` says that is the case.
    """

    fetched_at: float | None  # epoch seconds of the last successful fetch
    error: str  # the latest failure, when the answer is stale or missing

    @property
    def stale(self) -> bool:
        return bool(self.error) and self.fetched_at is not None

    @property
    def fetched_datetime(self) -> datetime | None:
        return datetime.fromtimestamp(self.fetched_at, tz=UTC) if self.fetched_at else None

    @property
    def age_seconds(self) -> float | None:
        return time.time() - self.fetched_at if self.fetched_at else None

    def freshness_json(self) -> dict:
        """How fresh the answer is, and what went wrong since, as the JSON APIs say it."""
        return {
            "fetchedAt": self.fetched_datetime.isoformat() if self.fetched_at else None,
            "ageSeconds": round(self.age_seconds, 3) if self.fetched_at else None,
            "stale": self.stale,
            "error": self.error or None,
        }


# --- Parsing ---------------------------------------------------------------


class ShapeError(ValueError):
    pass


def field(obj: dict, name: str, kinds: tuple[type, ...], where: str, *, nullable: bool = False) -> Any:
    """obj[name], checked against `kinds`; a bool is no int here (JSON's true is not a count)."""
    if name not in obj:
        if nullable:
            return None
        raise ShapeError(f"{where}.{name} is missing")
    value = obj[name]
    if value is None and nullable:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise ShapeError(f"{where}.{name}: expected {expected}, got {type(value).__name__}")
    return value


# ISO 8601 with any number of fractional digits (the logs have nanoseconds).
ISO_RE = re.compile(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?$", re.IGNORECASE)


def parse_timestamp(text: str) -> datetime | None:
    """An ISO 8601 time to microseconds (digits past the sixth are dropped), UTC when it names no zone.

    Python's fromisoformat refuses more than 6 fractional digits before 3.11;
    this reads Pipecat Cloud's nanosecond log times on any version. None for
    text that is no such time.
    """
    match = ISO_RE.match(text.strip())
    if not match:
        return None
    whole, fraction, zone = match.groups()
    zone = "+00:00" if not zone or zone.upper() == "Z" else zone
    try:
        parsed = datetime.fromisoformat(f"{whole.replace(' ', 'T')}.{(fraction or '0')[:6]:0<6}{zone}")
    except ValueError:
        return None
    return parsed


def timestamp(obj: dict, name: str, where: str) -> datetime | None:
    """obj[name] as an aware datetime (parse_timestamp), None when null or absent; ShapeError otherwise."""
    value = field(obj, name, (str,), where, nullable=True)
    if value is None:
        return None
    parsed = parse_timestamp(value)
    if parsed is None:
        raise ShapeError(f"{where}.{name}: {value!r} is not an ISO 8601 timestamp")
    return parsed


# --- Fetching --------------------------------------------------------------


def _upstream_says(response: outbound.Response) -> str:
    """The `error` text of an upstream's JSON error body (Pipecat Cloud's ErrorResponse), if any, shortened."""
    try:
        body = response.json()
    except ValueError:
        return ""
    said = body.get("error") if isinstance(body, dict) else None
    if not isinstance(said, str) or not said.strip():
        return ""
    said = " ".join(said.split())
    return said if len(said) <= 200 else said[:199] + "…"


def _status_error(status: int, url: str, location: str = "", *, not_found: str = "", said: str = "") -> AgentsAPIError:
    """The error for a non-200 answer. `not_found` replaces the 404 advice (which assumes a wrong base URL);
    `said` is the upstream's own explanation, quoted for a 4xx."""
    quoted = f' The API said: "{said}".' if said and 400 <= status < 500 else ""
    if 300 <= status < 400:
        return AgentsAPIError(
            f"The agents API redirected {url} to {location or 'elsewhere'} (HTTP {status}). Check "
            "AGENTS_API_BASE_URL: it must be the API's base and end in /v1, e.g. https://api.pipecat.daily.co/v1."
        )
    if status in (401, 403):
        return AgentsAPIError(
            f"The agents API refused the key (HTTP {status}). Check the organization's agents API key "
            f"or AGENTS_API_KEY: it must be a private key of this organization, not revoked.{quoted}"
        )
    if status == 404:
        advice = not_found or (
            f"The agents API has no {url} (HTTP 404). Check AGENTS_API_BASE_URL: "
            "it must end in /v1, e.g. https://api.pipecat.daily.co/v1."
        )
        return AgentsAPINotFound(advice + quoted)
    if status == 400:
        return AgentsAPIError(f"The agents API rejected the request {url} as invalid (HTTP 400).{quoted}")
    if status == 429:
        return AgentsAPIError(f"The agents API is rate-limiting this key (HTTP 429); retry in a minute.{quoted}")
    if status >= 500:
        return AgentsAPIError(f"The agents API failed (HTTP {status}). It is the upstream's fault; retry later.")
    return AgentsAPIError(f"The agents API answered HTTP {status} to {url}.{quoted}")


async def fetch_json(
    base_url: str,
    api_key: str,
    path: str,
    parse: Callable[[Any], T],
    params: dict | None = None,
    *,
    not_found: str = "",
) -> T:
    """One call to `GET {base_url}{path}`, retried on connection errors and 5xx; its JSON body through `parse`.

    Raises AgentsAPIError for every failure: bad key, wrong URL, upstream
    error, timeout, refused connection, a body that is not JSON or that
    `parse` rejects (ShapeError). A 404 raises AgentsAPINotFound, with
    `not_found` as its message when given (what a 404 means depends on the
    endpoint). The whole call, retries and body read included, ends by
    AGENTS_DEADLINE: a read timeout is per read, so an upstream that
    trickles a byte every few seconds would otherwise never time out.
    """
    if not api_key:
        raise AgentsAPIError(
            "No agents API key is configured. Set one for the organization in the admin, or AGENTS_API_KEY."
        )
    url = f"{base_url.rstrip('/')}{path}"
    deadline = settings.AGENTS_DEADLINE
    try:
        response = await outbound.get(
            url,
            kind="agents_api",
            params=params or {},
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeouts=outbound.Timeouts(
                connect=settings.AGENTS_CONNECT_TIMEOUT, read=settings.AGENTS_READ_TIMEOUT, total=deadline
            ),
            retries=settings.AGENTS_RETRIES,
            backoff=settings.AGENTS_RETRY_BACKOFF,
            # The operator's own setting names it: the built-in API is this very server, on loopback.
            allow_hosts=[settings.AGENTS_API_BASE_URL],
        )
    except outbound.TimedOut as exc:
        if exc.phase == "total":
            raise AgentsAPIError(
                f"The agents API at {base_url} did not answer within {deadline:g} s (AGENTS_DEADLINE, retries "
                "included). Check that it is up and not overloaded, or raise AGENTS_DEADLINE."
            ) from None
        # A read timeout is not retried: the upstream is slow, and asking again only doubles the wait.
        raise AgentsAPIError(
            f"The agents API at {base_url} did not answer in time. Check that it is up, or raise AGENTS_READ_TIMEOUT."
        ) from None
    except outbound.Refused as exc:
        raise AgentsAPIError(f"The agents API at {base_url} was not asked: {exc}.") from None
    except outbound.Unreachable as exc:
        raise AgentsAPIError(
            f"Could not connect to the agents API at {base_url} ({exc}). "
            "Check AGENTS_API_BASE_URL and that the server is running."
        ) from None
    except outbound.OutboundError as exc:
        raise AgentsAPIError(f"The call to the agents API at {base_url} failed: {exc}.") from None

    if response.status_code != 200:
        location = response.headers.get("location", "")
        raise _status_error(response.status_code, url, location, not_found=not_found, said=_upstream_says(response))
    try:
        body = response.json()
    except ValueError:
        kind = response.headers.get("content-type", "unknown content type")
        raise AgentsAPIError(
            f"The agents API at {url} answered with something that is not JSON ({kind}). "
            "Check AGENTS_API_BASE_URL points at the API, not a web page."
        ) from None
    try:
        return parse(body)
    except ShapeError as exc:
        raise AgentsAPIError(f"The agents API answered in an unexpected shape: {exc}.") from None


# --- Caching ---------------------------------------------------------------

# The cache holds plain dicts (so any backend can pickle them, and a change to
# the dataclasses does not break entries written by an older process).
LAST_GOOD_TTL = 7 * 24 * 3600
POLL_INTERVAL = 0.05

# The fetch under way in this process, per cached answer, so that every
# request waits on the same one (the cache lock does the same across
# processes). It is also the reference asyncio needs to keep a task that no
# request awaits any more.
_refreshes: dict[str, asyncio.Task] = {}


def cache_keys(prefix: str) -> dict[str, str]:
    """The four cache entries of one cached answer: fresh copy, last good copy, fetch lock, latest failure."""
    return {
        "fresh": f"{prefix}:fresh",
        "last": f"{prefix}:last",
        "lock": f"{prefix}:lock",
        "failure": f"{prefix}:failure",
    }


@dataclass(frozen=True)
class CacheSpec:
    """One upstream answer the cache layer serves: where it lives, how to fetch it, how long it is fresh.

    `fetch` returns the payload to store, a dict of plain data (it is pickled
    by the cache backend), or raises AgentsAPIError. `fresh_ttl` says, from a
    payload, for how many seconds it is served as is (an ended session's
    record changes less than a live list). `keep` is how long the last good
    payload and the latest failure are kept, for stale-on-error.
    """

    keys: dict[str, str]
    fetch: Callable[[], Awaitable[dict]]
    fresh_ttl: Callable[[dict], float]
    keep: float = LAST_GOOD_TTL
    what: str = "the agent list"  # for the log, when a background fetch fails


@dataclass(frozen=True)
class Cached:
    """What the cache layer answers: an entry (the payload plus `fetched_at`) or None, and the failure since."""

    entry: dict | None
    error: str = ""
    from_cache: bool = False


async def _in_thread(method, *args, **kwargs):
    """Call a (thread-safe) cache method on a worker thread, for the background fetch.

    Not `cache.a*`, which queue on the thread-sensitive executor: under a sync
    middleware that thread may be the very one waiting for this fetch, and
    every page wait would then run out.
    """
    return await sync_to_async(method, thread_sensitive=False)(*args, **kwargs)


async def _refresh(spec: CacheSpec, seen: float | None) -> Cached:
    """Fetch and store the answer; if another process is fetching it, wait for what that one stores.

    `seen`: when the fresh answer the caller saw was fetched (None: it saw none).
    """
    keys = spec.keys
    # The lock outlives any fetch (AGENTS_DEADLINE bounds it) but not a
    # process that died holding it. Whole seconds: Redis truncates the rest.
    lock_timeout = math.ceil(settings.AGENTS_DEADLINE) + 1
    if not await _in_thread(cache.add, keys["lock"], 1, timeout=lock_timeout):
        stop = time.monotonic() + lock_timeout
        # Polling, not an asyncio.Event: the fetcher is another process.
        while time.monotonic() < stop and await _in_thread(cache.get, keys["lock"]) is not None:  # noqa: ASYNC110
            await asyncio.sleep(POLL_INTERVAL)
        found = await _in_thread(cache.get_many, [keys["fresh"], keys["last"], keys["failure"]])
        failure = found.get(keys["failure"])
        if keys["fresh"] in found:
            return Cached(found[keys["fresh"]], failure["error"] if failure else "", from_cache=True)
        error = failure["error"] if failure else "The agents API is still being asked; try again shortly."
        return Cached(found.get(keys["last"]), error, from_cache=True)

    try:
        # Another process may have fetched and let go of the lock between the caller's look at the
        # cache and taking it: what it stored is the answer, not a reason to ask the upstream again.
        fresh = await _in_thread(cache.get, keys["fresh"])
        if fresh is not None and (seen is None or fresh["fetched_at"] > seen):
            return Cached(fresh, from_cache=True)
        try:
            payload = await spec.fetch()
        except AgentsAPIError as exc:
            # Kept until a fetch succeeds, so the last good answer is shown
            # with it; its time starts the back-off (AGENTS_FAILURE_BACKOFF).
            now = time.time()
            previous = await _in_thread(cache.get, keys["failure"])
            # `since`: when the upstream started failing, for the agents_api_down alert.
            failure = {"error": str(exc), "at": now, "since": previous.get("since", now) if previous else now}
            await _in_thread(cache.set, keys["failure"], failure, timeout=math.ceil(spec.keep))
            return Cached(await _in_thread(cache.get, keys["last"]), str(exc), from_cache=True)
        entry = {**payload, "fetched_at": time.time()}
        # Whole seconds, rounded up: Redis truncates, and would drop a 0.5 s entry at once.
        await _in_thread(cache.set, keys["fresh"], entry, timeout=math.ceil(spec.fresh_ttl(payload)))
        await _in_thread(cache.set, keys["last"], entry, timeout=math.ceil(spec.keep))
        await _in_thread(cache.delete, keys["failure"])
        return Cached(entry)
    finally:
        await _in_thread(cache.delete, keys["lock"])


def _start_refresh(spec: CacheSpec, seen: float | None = None) -> asyncio.Task:
    """The fetch of this answer under way in this process; one is started if there is none."""
    loop = asyncio.get_running_loop()
    key = spec.keys["lock"]
    task = _refreshes.get(key)
    # A task of another event loop cannot be awaited here: under WSGI each
    # request runs its own loop (and cancels what it leaves when it ends).
    if task is None or task.done() or task.get_loop() is not loop:
        # An empty context: the task outlives the request and must carry none
        # of its state (asgiref, for one, refuses thread-sensitive calls in
        # the context of a request that has ended).
        task = loop.create_task(_refresh(spec, seen), context=contextvars.Context())
        _refreshes[key] = task
        task.add_done_callback(functools.partial(_forget, key, spec.what))
    return task


def _forget(key: str, what: str, task: asyncio.Task) -> None:
    if _refreshes.get(key) is task:
        del _refreshes[key]
    # A background fetch may have no request left to raise to: log it.
    if not task.cancelled() and task.exception() is not None:
        logger.error("Refreshing %s failed", what, exc_info=task.exception())


async def cached(spec: CacheSpec, refresh: bool = False) -> Cached:
    """An upstream answer from Django's cache: never raising, and never slow however slow the upstream.

    - An answer fetched less than its fresh TTL ago is served as is (with the
      failure of any refresh since).
    - For AGENTS_FAILURE_BACKOFF after a failed fetch, loads do not ask the
      upstream again: they get the last good answer (or none) and the
      failure. A hung upstream then costs one background fetch per back-off
      instead of one wait per page load.
    - An older answer is served at once while one fetch in the background
      replaces it (stale-while-revalidate).
    - With no answer at all, or with `refresh` (which skips the fresh answer
      and the back-off), the page waits for the fetch, at most
      AGENTS_PAGE_WAIT; past that it gets the last good answer (or none) and
      a note that the upstream is slow, and the fetch goes on to fill the
      cache.

    One fetch at a time per answer: the requests of a process all wait on
    the same task, and a `cache.add` lock (atomic on every backend, Redis
    included) makes other processes wait for its result instead of asking.
    The background fetch needs the long-lived event loop of an ASGI server;
    under WSGI it ends with the request.
    """
    keys = spec.keys
    found = await cache.aget_many([keys["fresh"], keys["last"], keys["failure"]])
    last, failure = found.get(keys["last"]), found.get(keys["failure"])
    error = failure["error"] if failure else ""
    if not refresh:
        if keys["fresh"] in found:
            return Cached(found[keys["fresh"]], error, from_cache=True)
        if failure and time.time() - failure["at"] < settings.AGENTS_FAILURE_BACKOFF:
            return Cached(last, error, from_cache=True)
        if last is not None:
            _start_refresh(spec)
            return Cached(last, error, from_cache=True)

    seen = found[keys["fresh"]]["fetched_at"] if keys["fresh"] in found else None
    task = _start_refresh(spec, seen)
    try:
        async with asyncio.timeout(settings.AGENTS_PAGE_WAIT):
            # Shielded: when the page stops waiting, the fetch goes on.
            return await asyncio.shield(task)
    except TimeoutError:
        slow = (
            f"The agents API has not answered within {settings.AGENTS_PAGE_WAIT:g} s. It is still being asked: "
            "reload in a few seconds to see what it answers."
        )
        return Cached(last, slow, from_cache=True)
