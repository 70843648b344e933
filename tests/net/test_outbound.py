"""dashboard/net/outbound.py, the one outbound client: the address guard, timeouts, retries, metrics, one client
per event loop; and that nothing else in the apps talks HTTP on its own. The other side is faked at the httpx
layer (pytest-httpx), as everywhere."""

import ast
import asyncio
import pathlib
import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from prometheus_client.parser import text_string_to_metric_families

from dashboard.agents.service import fetch_agents
from dashboard.agents.upstream import AgentsAPIError
from dashboard.net import guard, openid, outbound
from tests.agents_samples import BODY, KEY

ROOT = pathlib.Path(__file__).resolve().parents[2]


def count(kind: str, outcome: str) -> float:
    return outbound.REGISTRY.get_sample_value("rtvi_outbound_requests_total", {"kind": kind, "outcome": outcome}) or 0


def timed(kind: str, outcome: str) -> float:
    labels = {"kind": kind, "outcome": outcome}
    return outbound.REGISTRY.get_sample_value("rtvi_outbound_request_seconds_count", labels) or 0


def retried(kind: str) -> float:
    return outbound.REGISTRY.get_sample_value("rtvi_outbound_retries_total", {"kind": kind}) or 0


def resolves_to(monkeypatch, *addresses: str):
    """Every name resolves to `addresses` (what the guard sees); returns the names it was asked."""
    asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        return [(2, 1, 6, "", (address, port)) for address in addresses]

    monkeypatch.setattr(guard.socket, "getaddrinfo", getaddrinfo)
    return asked


# --- The guard ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,says",
    [
        ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (where cloud metadata"),
        ("http://localhost:6379/", "localhost resolves to "),  # 127.0.0.1 or ::1, whichever comes first
        ("http://[::1]/x", "::1 is a loopback address"),
        ("http://0.0.0.0:8000/", "0.0.0.0 is an unspecified address"),
        ("http://[::ffff:10.1.2.3]/", "10.1.2.3 is a private address"),
    ],
)
async def test_a_call_into_the_private_network_is_refused_before_anything_is_sent(httpx_mock, url, says):
    before = count("webhook", "refused")
    with pytest.raises(outbound.Refused) as refused:
        await outbound.post(url, kind="webhook", json={"x": 1}, retries=3)
    assert says in str(refused.value)
    assert "private address" in str(refused.value) and "OUTBOUND_ALLOWED_HOSTS" in str(refused.value)
    assert not refused.value.sent and refused.value.kind == "webhook" and refused.value.url == url
    assert httpx_mock.get_requests() == []  # never sent, never retried
    assert count("webhook", "refused") == before + 1


async def test_a_name_is_refused_if_any_of_its_addresses_is_private(httpx_mock, monkeypatch):
    resolves_to(monkeypatch, "93.184.216.34", "10.9.8.7")
    with pytest.raises(outbound.Refused, match=r"hooks\.acme\.test resolves to 10\.9\.8\.7, a private address"):
        await outbound.post("https://hooks.acme.test/x", kind="webhook", json={})


async def test_a_public_name_is_called_at_the_address_checked_under_its_own_name(httpx_mock, monkeypatch):
    asked = resolves_to(monkeypatch, "93.184.216.34")
    httpx_mock.add_response(url="https://93.184.216.34:8443/x?a=1", method="POST", text="ok")
    response = await outbound.post("https://hooks.acme.test:8443/x?a=1", kind="webhook", json={"x": 1})
    assert response.status_code == 200 and asked == ["hooks.acme.test"]
    (request,) = httpx_mock.get_requests()
    assert request.headers["Host"] == "hooks.acme.test:8443"
    assert request.extensions["sni_hostname"] == "hooks.acme.test"  # TLS checks the certificate for the name
    assert request.headers["Connection"] == "close"  # a connection keyed by the address carries no other name


async def test_a_name_that_does_not_resolve_is_unreachable_not_refused(httpx_mock, monkeypatch):
    def fails(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(guard.socket, "getaddrinfo", fails)
    with pytest.raises(outbound.Unreachable, match=r"could not resolve nowhere\.acme\.test") as unreachable:
        await outbound.get("https://nowhere.acme.test/", kind="webhook", retries=1, backoff=0)
    assert not unreachable.value.sent


@pytest.mark.parametrize(
    "allowed,url,resolved",
    [
        (["10.0.0.1"], "http://10.0.0.1/hook", None),
        (["agents.corp.test"], "http://agents.corp.test/v1", None),  # named: not even resolved
        ([".corp.test"], "http://deep.agents.corp.test/v1", None),
        (["10.0.0.0/8"], "http://agents.corp.test/v1", "10.1.2.3"),  # resolves inside the network: pinned there
        (["*"], "http://127.0.0.1:6379/", None),
    ],
)
async def test_outbound_allowed_hosts_lets_named_hosts_be_private(
    httpx_mock, monkeypatch, settings, allowed, url, resolved
):
    settings.OUTBOUND_ALLOWED_HOSTS = allowed
    asked = resolves_to(monkeypatch, resolved or "192.0.2.1")
    httpx_mock.add_response(method="POST")
    assert (await outbound.post(url, kind="webhook", json={})).status_code == 200
    (request,) = httpx_mock.get_requests()
    if resolved:
        assert request.url.host == resolved and request.headers["Host"] == "agents.corp.test"
    else:
        assert str(request.url) == url and asked == []


async def test_a_host_the_caller_names_is_allowed_for_that_call_only(httpx_mock):
    httpx_mock.add_response(url="http://127.0.0.1:8000/v1/agents")
    own = "http://127.0.0.1:8000/v1"  # AGENTS_API_BASE_URL's default: the dashboard itself
    assert (await outbound.get(f"{own}/agents", kind="agents_api", allow_hosts=[own])).status_code == 200
    with pytest.raises(outbound.Refused):
        await outbound.get(f"{own}/agents", kind="agents_api")


async def test_an_organizations_agents_api_inside_the_network_is_refused_but_the_settings_own_is_not(
    httpx_mock, settings, fast_retries
):
    with pytest.raises(
        AgentsAPIError, match=r"at http://10\.0\.0\.1/v1 was not asked: 10\.0\.0\.1 is a private address"
    ):
        await fetch_agents("http://10.0.0.1/v1", KEY)
    settings.AGENTS_API_BASE_URL = "http://127.0.0.1:8000/v1"
    httpx_mock.add_response(url="http://127.0.0.1:8000/v1/agents", json=BODY)
    assert len(await fetch_agents("http://127.0.0.1:8000/v1", KEY)) == 1


# --- Timeouts -------------------------------------------------------------------------------------


async def test_each_call_passes_its_own_timeouts_to_httpx(httpx_mock):
    httpx_mock.add_response(url="https://api.pipecat.example/v1/agents")
    await outbound.get(
        "https://api.pipecat.example/v1/agents", kind="agents_api", timeouts=outbound.Timeouts(connect=1.5, read=2.5)
    )
    assert httpx_mock.get_request().extensions["timeout"] == {"connect": 1.5, "read": 2.5, "write": 2.5, "pool": 1.5}


async def test_the_total_timeout_ends_a_call_however_the_answer_trickles(httpx_mock):
    async def slow(request):
        await asyncio.sleep(5)
        return httpx.Response(200)

    httpx_mock.add_callback(slow, url="https://api.pipecat.example/slow")
    before = timed("agents_api", "timeout")
    started = time.monotonic()
    with pytest.raises(outbound.TimedOut, match=r"no answer within 0\.2 s in all") as timed_out:
        await outbound.get(
            "https://api.pipecat.example/slow", kind="agents_api", timeouts=outbound.Timeouts(total=0.2), retries=3
        )
    assert time.monotonic() - started < 1.5
    assert timed_out.value.phase == "total" and timed_out.value.sent
    assert timed("agents_api", "timeout") == before + 1


@pytest.mark.parametrize(
    "error,phase,sent",
    [(httpx.ReadTimeout, "read", True), (httpx.ConnectTimeout, "connect", False), (httpx.PoolTimeout, "pool", False)],
)
async def test_a_timeout_says_which_and_is_not_retried(httpx_mock, error, phase, sent):
    httpx_mock.add_exception(error("slow"))
    with pytest.raises(outbound.TimedOut, match=error.__name__) as timed_out:
        await outbound.get("https://api.pipecat.example/x", kind="agents_api", retries=2, backoff=0)
    assert (timed_out.value.phase, timed_out.value.sent) == (phase, sent)
    assert len(httpx_mock.get_requests()) == 1  # asking again would only double the wait


# --- Retries --------------------------------------------------------------------------------------

URL = "https://api.pipecat.example/v1/agents"


async def test_a_get_is_retried_on_5xx_with_doubling_waits(httpx_mock, monkeypatch):
    waits, sleep = [], asyncio.sleep

    async def recorded(seconds, *args):
        waits.append(seconds)
        await sleep(0)

    monkeypatch.setattr(outbound.asyncio, "sleep", recorded)
    httpx_mock.add_response(url=URL, status_code=503)
    httpx_mock.add_response(url=URL, status_code=502)
    httpx_mock.add_response(url=URL, json=BODY)
    before = retried("agents_api")
    response = await outbound.get(URL, kind="agents_api", retries=2, backoff=0.25)
    assert response.status_code == 200 and len(httpx_mock.get_requests()) == 3
    assert waits == [0.25, 0.5]
    assert retried("agents_api") == before + 2


async def test_get_retries_are_bounded_and_the_last_answer_is_returned(httpx_mock):
    httpx_mock.add_response(url=URL, status_code=500, is_reusable=True)
    response = await outbound.get(URL, kind="agents_api", retries=2, backoff=0)
    assert response.status_code == 500 and len(httpx_mock.get_requests()) == 3


async def test_a_get_that_broke_off_under_way_is_retried(httpx_mock):
    httpx_mock.add_exception(httpx.RemoteProtocolError("Server disconnected without sending a response."))
    httpx_mock.add_response(url=URL, json=BODY)
    assert (await outbound.get(URL, kind="agents_api", retries=1, backoff=0)).json() == BODY


async def test_a_post_answered_5xx_is_not_sent_again(httpx_mock):
    httpx_mock.add_response(url="https://hooks.pipecat.example/x", method="POST", status_code=503)
    response = await outbound.post("https://hooks.pipecat.example/x", kind="webhook", json={}, retries=3, backoff=0)
    assert response.status_code == 503 and len(httpx_mock.get_requests()) == 1


@pytest.mark.parametrize("error", [httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError])
async def test_a_post_that_may_have_been_sent_is_never_sent_again(httpx_mock, error):
    httpx_mock.add_exception(error("connection dropped"))
    before = count("webhook", "interrupted")
    with pytest.raises(outbound.Interrupted, match=error.__name__) as interrupted:
        await outbound.post("https://hooks.pipecat.example/x", kind="webhook", json={}, retries=3, backoff=0)
    assert interrupted.value.sent and len(httpx_mock.get_requests()) == 1
    assert count("webhook", "interrupted") == before + 1


async def test_a_post_that_was_never_sent_is_tried_again(httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("Connection refused"))
    httpx_mock.add_response(url="https://hooks.pipecat.example/x", method="POST")
    response = await outbound.post(
        "https://hooks.pipecat.example/x", kind="webhook", json={"n": 1}, retries=1, backoff=0
    )
    assert response.status_code == 200 and len(httpx_mock.get_requests()) == 2


async def test_a_connection_never_made_ends_unreachable_after_the_retries(httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("Connection refused"), is_reusable=True)
    with pytest.raises(outbound.Unreachable, match="ConnectError: Connection refused") as unreachable:
        await outbound.post("https://hooks.pipecat.example/x", kind="webhook", json={}, retries=2, backoff=0)
    assert not unreachable.value.sent and len(httpx_mock.get_requests()) == 3


async def test_redirects_are_not_followed(httpx_mock):
    httpx_mock.add_response(url=URL, status_code=302, headers={"location": "http://169.254.169.254/"})
    assert (await outbound.get(URL, kind="agents_api")).status_code == 302
    assert len(httpx_mock.get_requests()) == 1


async def test_a_kind_outside_the_list_is_a_mistake(httpx_mock):
    with pytest.raises(ValueError, match="kind"):
        await outbound.get(URL, kind=URL)


# --- Metrics --------------------------------------------------------------------------------------


async def test_each_call_is_counted_and_timed_by_kind_and_outcome(httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    httpx_mock.add_response(url=URL, status_code=404)
    httpx_mock.add_response(url="https://hooks.pipecat.example/x", method="POST", status_code=500)
    before = {key: count(*key) for key in (("agents_api", "2xx"), ("agents_api", "4xx"), ("slack", "5xx"))}
    seconds = timed("agents_api", "2xx")
    await outbound.get(URL, kind="agents_api")
    await outbound.get(URL, kind="agents_api")
    await outbound.post("https://hooks.pipecat.example/x", kind="slack", json={})
    assert {key: count(*key) - n for key, n in before.items()} == {
        ("agents_api", "2xx"): 1,
        ("agents_api", "4xx"): 1,
        ("slack", "5xx"): 1,
    }
    assert timed("agents_api", "2xx") == seconds + 1


@pytest.mark.django_db
def test_the_outbound_metrics_are_in_every_organizations_scrape(client, api_key, httpx_mock):
    httpx_mock.add_response(url=URL, json=BODY)
    async_to_sync(outbound.get)(URL, kind="agents_api")
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 200
    families = {family.name: family for family in text_string_to_metric_families(response.content.decode())}
    assert {"rtvi_outbound_requests", "rtvi_outbound_request_seconds", "rtvi_outbound_retries"} <= set(families)
    (sample,) = [
        s
        for s in families["rtvi_outbound_requests"].samples
        if s.name == "rtvi_outbound_requests_total" and s.labels == {"kind": "agents_api", "outcome": "2xx"}
    ]
    assert sample.value >= 1  # the process's: no organization label


# --- One client per event loop --------------------------------------------------------------------


async def test_a_loop_shares_one_client():
    assert await outbound.client() is await outbound.client()


def test_each_loop_has_its_own_client_closed_when_the_loop_ends():
    async def held():
        return await outbound.client()

    first, second = asyncio.run(held()), asyncio.run(held())
    assert first is not second
    assert first.is_closed and second.is_closed  # asyncio.run shut its loop's async generators down
    assert async_to_sync(held)().is_closed  # asgiref's own loop, outside a server, the same


async def test_a_closed_client_is_replaced():
    first = await outbound.client()
    await outbound.aclose()
    assert first.is_closed
    second = await outbound.client()
    assert second is not first and not second.is_closed


# --- Nothing else talks HTTP ----------------------------------------------------------------------

HTTP_CLIENTS = {"httpx", "requests", "urllib3", "aiohttp", "urllib.request", "http.client", "pycurl"}


def test_only_dashboard_net_imports_an_http_client():
    """Every outbound call goes through dashboard/net/outbound.py: no other module of the apps imports httpx
    (or another HTTP client library), at module level or inside a function."""
    wrong = []
    for app in ("dashboard", "rtvi_monitor"):
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("dashboard", "net"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(relative))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                else:
                    continue
                for name in names:
                    if name in HTTP_CLIENTS or name.split(".")[0] in HTTP_CLIENTS - {"urllib", "http"}:
                        wrong.append(f"{relative}:{node.lineno} imports {name}")
    assert wrong == []


# --- The OpenID provider's discovery, at first use ------------------------------------------------

ISSUER = "https://login.acme.example/realms/ops"
DISCOVERY = f"{ISSUER}/.well-known/openid-configuration"


@pytest.fixture
def fresh_discovery(monkeypatch):
    monkeypatch.setattr(openid, "_documents", {})


def test_the_discovery_is_read_once_through_the_client_and_its_issuer_checked(httpx_mock, fresh_discovery):
    before = count("oidc", "2xx")
    httpx_mock.add_response(url=DISCOVERY, json={"issuer": ISSUER, "token_endpoint": f"{ISSUER}/token"})
    assert openid.endpoint(ISSUER, "token_endpoint", "OIDC_OP_TOKEN_ENDPOINT") == f"{ISSUER}/token"
    assert openid.endpoint(ISSUER, "token_endpoint", "OIDC_OP_TOKEN_ENDPOINT") == f"{ISSUER}/token"
    assert len(httpx_mock.get_requests()) == 1 and count("oidc", "2xx") == before + 1
    with pytest.raises(ImproperlyConfigured, match="has no jwks_uri: set OIDC_OP_JWKS_ENDPOINT"):
        openid.endpoint(ISSUER, "jwks_uri", "OIDC_OP_JWKS_ENDPOINT")


@pytest.mark.parametrize(
    "answer,says",
    [
        ({"json": {"issuer": "https://evil.example"}}, "its discovery says 'https://evil.example'"),
        ({"status_code": 503}, f"could not read {DISCOVERY}: HTTP 503"),
        ({"text": "<html>"}, f"could not read {DISCOVERY}"),
    ],
)
def test_a_discovery_that_fails_says_why_and_is_asked_again_next_time(httpx_mock, fresh_discovery, answer, says):
    httpx_mock.add_response(url=DISCOVERY, **answer, is_reusable=True)
    with pytest.raises(ImproperlyConfigured, match=r"OIDC_ISSUER") as error:
        openid.discovery(ISSUER, timeout=1)
    assert says in str(error.value)
    with pytest.raises(ImproperlyConfigured):
        openid.discovery(ISSUER, timeout=1)
    assert len(httpx_mock.get_requests()) > 1  # a failure is not kept
