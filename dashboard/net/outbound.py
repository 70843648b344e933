"""The one outbound HTTP client: every call the dashboard makes to another server goes through `request`.

Its callers: the agents API and the rest of Pipecat Cloud's API (dashboard/agents/upstream.py), alert
deliveries to webhooks, Slack, PagerDuty and Opsgenie (rtvi_monitor/alerts/rules.py), and an OpenID
provider: its discovery document, and single sign-on's token, userinfo and keys calls (dashboard/net/openid.py,
for mozilla-django-oidc's backend). What every call gets:

- Timeouts (`Timeouts`): to connect, for each read or write, and in all (retries and the whole body
  included: a read timeout is per read, so an answer trickled a byte at a time would beat it alone).
  Each call passes its own; the defaults are DEFAULT_TIMEOUTS.
- The guard (dashboard/net/guard.py): no call to a private, loopback, link-local, multicast or reserved
  address unless the host is allowed; the call then goes to the address checked (pinned), on a
  connection of its own (`Connection: close`: a pooled connection keyed by that address must never
  carry another name's request).
- Retries, bounded (`retries`, waits doubling from `backoff`): a request that was never sent (the name
  did not resolve, no connection could be made) is retried whatever its method; an idempotent one
  (GET, HEAD, OPTIONS) also when it broke off under way or was answered 5xx. A POST that may have
  reached the other side is never sent twice: the caller decides (an alert delivery has its own
  retries, recorded). A timeout is not retried: asking again only doubles the wait.
- Metrics (process-level: no organization label; every organization's `GET /metrics` shows them,
  rtvi_monitor/sessions/metrics.py): `rtvi_outbound_requests_total` and `rtvi_outbound_request_seconds`
  by kind of target and outcome (2xx, 3xx, 4xx, 5xx, timeout, unreachable, refused, interrupted,
  cancelled, error), and `rtvi_outbound_retries_total` by kind.
- One error type per way of getting no answer (dashboard/net/errors.py), each saying whether the
  request may have been sent. An answer, whatever its status, is returned.

The client: one `httpx.AsyncClient` per event loop (a client's connections belong to the loop that
opened them). The server's loop keeps its client for the process's life, closed before daphne's
reactor stops; a short-lived loop (asgiref's `async_to_sync` outside a server, a test's) closes its
client when it shuts down its async generators, as `asyncio.run` does, so no connection outlives it.

Tests fake the other side at the httpx layer (pytest-httpx): the shared client goes through httpx's
transport like any other.
"""

import asyncio
import functools
import ssl
import sys
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram

from dashboard.net import guard as address_guard
from dashboard.net.errors import Interrupted, OutboundError, Refused, TimedOut, Unreachable

__all__ = [
    "DEFAULT_TIMEOUTS",
    "KINDS",
    "Interrupted",
    "OutboundError",
    "Refused",
    "Response",
    "TimedOut",
    "Timeouts",
    "Unreachable",
    "aclose",
    "client",
    "get",
    "post",
    "request",
]

Response = httpx.Response  # what a call returns: read .status_code, .headers, .text, .json()

# The kinds of target, the metrics' `kind` label: a closed list, so that the series stay few.
KINDS = ("agents_api", "webhook", "slack", "pagerduty", "opsgenie", "oidc")
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Timeouts:
    """Seconds: to connect (and to wait for a pooled connection), for each read or write, for the whole call."""

    connect: float = 5.0
    read: float = 10.0
    total: float = 30.0

    def for_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.read, pool=self.connect)


DEFAULT_TIMEOUTS = Timeouts()

# --- Metrics ------------------------------------------------------------------------------------

REGISTRY = CollectorRegistry()  # the process's; rtvi_monitor/sessions/metrics.py shows it in every scrape
REQUESTS = Counter(
    "rtvi_outbound_requests",
    "Outbound HTTP calls, by kind of target and outcome (an HTTP status class, timeout, unreachable, refused, "
    "interrupted, cancelled, error); retries included in the call",
    ["kind", "outcome"],
    registry=REGISTRY,
)
SECONDS = Histogram(
    "rtvi_outbound_request_seconds",
    "Time one outbound HTTP call took, retries and waits included, by kind of target and outcome",
    ["kind", "outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
RETRIES = Counter(
    "rtvi_outbound_retries", "Outbound HTTP attempts made again, by kind of target", ["kind"], registry=REGISTRY
)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    for kind, name in ((Refused, "refused"), (Unreachable, "unreachable"), (TimedOut, "timeout")):
        if isinstance(exc, kind):
            return name
    return "interrupted" if isinstance(exc, Interrupted) else "error"


# --- The client, one per event loop -------------------------------------------------------------


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one (certifi's bundle) takes ~30 ms, on the event loop."""
    return httpx.create_ssl_context()


@dataclass
class _Held:
    client: httpx.AsyncClient
    closer: AsyncGenerator | None = None


_held: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Held]" = weakref.WeakKeyDictionary()
_held_lock = threading.Lock()  # loops run in several threads (the server's, asgiref's, a test's)


async def _closes_with_loop(loop: asyncio.AbstractEventLoop, held: _Held) -> AsyncGenerator[None]:
    """Suspended for the loop's life: `loop.shutdown_asyncgens()` (asyncio.run, asgiref) closes the client."""
    try:
        yield
    finally:
        with _held_lock:
            if _held.get(loop) is held:
                del _held[loop]
        await held.client.aclose()


def _close_before_reactor_stops(loop: asyncio.AbstractEventLoop) -> None:
    """Under daphne, close the server loop's client before twisted's reactor stops (it never shuts the loop down)."""
    reactor = sys.modules.get("twisted.internet.reactor")  # never installs one: only daphne's counts
    if reactor is None or not reactor.running or getattr(reactor, "_asyncioEventloop", None) is not loop:
        return
    from twisted.internet import defer

    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(loop.create_task(_close_loop_client(loop)))
    )


async def _close_loop_client(loop: asyncio.AbstractEventLoop) -> None:
    held = _held.get(loop)
    if held is not None and held.closer is not None:
        await held.closer.aclose()  # runs its `finally`: the client closes on its own loop


async def client() -> httpx.AsyncClient:
    """The running loop's shared client, made on first use (and again if it was closed)."""
    loop = asyncio.get_running_loop()
    held = _held.get(loop)
    if held is None or held.client.is_closed:
        made = httpx.AsyncClient(timeout=DEFAULT_TIMEOUTS.for_httpx(), follow_redirects=False, verify=_tls())
        held = _Held(made)
        held.closer = _closes_with_loop(loop, held)
        with _held_lock:
            # A loop closed without shutting down its async generators left its entry: let it go.
            for gone in [other for other in list(_held.keys()) if other.is_closed()]:
                _held.pop(gone, None)
            _held[loop] = held
        await anext(held.closer)  # registered with the loop's async generators from here on
        _close_before_reactor_stops(loop)
    return held.client


async def aclose() -> None:
    """Close the running loop's client now (the next call makes a new one)."""
    await _close_loop_client(asyncio.get_running_loop())


# --- One call -----------------------------------------------------------------------------------


def _pinned(url: str, address: str) -> tuple[str, dict, dict]:
    """The URL with its host replaced by `address`; the headers and TLS name that keep the host's name."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (f"{userinfo}@" if userinfo else "") + (f"{host}:{parts.port}" if parts.port else host)
    named = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname
    return (
        urlunsplit(parts._replace(netloc=netloc)),
        {"Host": named, "Connection": "close"},
        {"sni_hostname": parts.hostname},
    )


def _said(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


TIMEOUT_PHASES = (
    (httpx.ConnectTimeout, "connect"),
    (httpx.PoolTimeout, "pool"),
    (httpx.WriteTimeout, "write"),
    (httpx.ReadTimeout, "read"),
)


async def _attempts(
    method: str,
    url: str,
    *,
    kind: str,
    timeouts: Timeouts,
    retries: int,
    backoff: float,
    guard: bool,
    allow_hosts: Iterable[str],
    headers: dict,
    send: dict,
) -> Response:
    idempotent = method in IDEMPOTENT
    attempts = 1 + max(0, retries)
    shared = await client()
    for attempt in range(attempts):
        last = attempt == attempts - 1
        try:
            target, extra, extensions = url, {}, {}
            if guard:
                address = await address_guard.check(url, allow_hosts=allow_hosts, kind=kind)
                if address:
                    target, extra, extensions = _pinned(url, address)
            response = await shared.request(
                method,
                target,
                headers={**headers, **extra},
                extensions=extensions,
                timeout=timeouts.for_httpx(),
                **send,
            )
        except Unreachable:  # the name did not resolve: nothing was sent
            if last:
                raise
        except httpx.TimeoutException as exc:
            phase = next((phase for cls, phase in TIMEOUT_PHASES if isinstance(exc, cls)), "read")
            connecting = phase in ("connect", "pool")
            limit, awaited = (timeouts.connect, "connection") if connecting else (timeouts.read, "answer")
            raise TimedOut(
                f"{type(exc).__name__}: no {awaited} within {limit:g} s",
                phase=phase,
                kind=kind,
                url=url,
            ) from None
        except httpx.ConnectError as exc:  # no connection: nothing was sent
            if last:
                raise Unreachable(_said(exc), kind=kind, url=url) from None
        except httpx.TransportError as exc:  # under way: it may have been sent
            if last or not idempotent:
                raise Interrupted(_said(exc), kind=kind, url=url) from None
        except httpx.InvalidURL as exc:
            raise Unreachable(f"not a URL that can be asked: {exc}", kind=kind, url=url) from None
        else:
            if last or not (idempotent and response.status_code >= 500):
                return response
        RETRIES.labels(kind).inc()
        await asyncio.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def request(
    method: str,
    url: str,
    *,
    kind: str,
    params: dict | None = None,
    json=None,
    data: dict | None = None,
    headers: dict | None = None,
    timeouts: Timeouts | None = None,
    retries: int = 0,
    backoff: float = 0.25,
    guard: bool = True,
    allow_hosts: Iterable[str] = (),
) -> Response:
    """One call to `url`, its answer read in full; raises an OutboundError when there is none.

    `kind`: one of KINDS (the metrics' label). `timeouts`: DEFAULT_TIMEOUTS unless given. `retries`:
    extra attempts, as the module says (never for a POST that may have been sent). `guard`: check
    the address (dashboard/net/guard.py); `allow_hosts`: hosts (or URLs) allowed to be private for
    this call, beside OUTBOUND_ALLOWED_HOSTS. Redirects are not followed: a public URL must not bounce
    a call inside the network.
    """
    kind = str(kind)
    if kind not in KINDS:
        raise ValueError(f"kind: one of {', '.join(KINDS)}, not {kind!r}")
    method = method.upper()
    timeouts = timeouts or DEFAULT_TIMEOUTS
    send = {key: value for key, value in (("params", params), ("json", json), ("data", data)) if value is not None}
    started, outcome = time.perf_counter(), "error"
    try:
        try:
            async with asyncio.timeout(timeouts.total):
                response = await _attempts(
                    method,
                    url,
                    kind=kind,
                    timeouts=timeouts,
                    retries=retries,
                    backoff=backoff,
                    guard=guard,
                    allow_hosts=tuple(allow_hosts),
                    headers=dict(headers or {}),
                    send=send,
                )
        except TimeoutError:
            raise TimedOut(f"no answer within {timeouts.total:g} s in all", phase="total", kind=kind, url=url) from None
    except BaseException as exc:
        outcome = _outcome(exc)
        raise
    else:
        outcome = f"{response.status_code // 100}xx"
        return response
    finally:
        REQUESTS.labels(kind, outcome).inc()
        SECONDS.labels(kind, outcome).observe(time.perf_counter() - started)


async def get(url: str, **options) -> Response:
    """`request("GET", url, ...)`."""
    return await request("GET", url, **options)


async def post(url: str, **options) -> Response:
    """`request("POST", url, ...)`."""
    return await request("POST", url, **options)
