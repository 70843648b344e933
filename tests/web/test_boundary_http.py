"""The edges of the real router and URLconf: refused sockets, same-origin browsers, JSON errors, strict JSON.

Through `WebsocketCommunicator` on dashboard.asgi and Django's test client;
what only daphne shows (the HTTP status of a refused handshake, what it logs)
is checked on a live server.
"""

import json
import re
import uuid

import httpx
import pytest
import websockets
from channels.testing import WebsocketCommunicator
from django.test import Client

from dashboard.asgi import application
from rtvi_monitor.sessions.models import Event, Session
from tests.server import DaphneServer
from tests.sockets import bot_socket, receive

RUN = uuid.uuid4().hex[:8]  # fresh names, for a shared DATABASE_URL
ORG, USER, PASSWORD = f"Boundary-{RUN}", f"ops-{RUN}", "boundary-test-password-1"
STAFF_SETUP = """
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
user = get_user_model().objects.create_user("{user}", password="{password}", is_staff=True)
Membership.objects.create(user=user, organization=Organization.objects.create(name="{org}"))
"""


@pytest.fixture(scope="module")
def server():
    with DaphneServer() as running:
        running.manage("shell", "-c", STAFF_SETUP.format(user=USER, password=PASSWORD, org=ORG))
        yield running


async def log_in(server) -> str:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        page = await client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        form = {"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": csrf}
        response = await client.post("/login/", data=form)
        assert response.status_code == 302
        return f"sessionid={client.cookies['sessionid']}"


async def handshake_status(url: str, **kwargs) -> int:
    """101 when the socket opened, else the HTTP status daphne answered the handshake with."""
    try:
        async with websockets.connect(url, open_timeout=10, **kwargs):
            return 101
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


# --- Paths the router cannot match ---------------------------------------


async def test_an_unknown_socket_path_is_refused_without_a_500():
    for path in ("/ws/nope/", "/ws/", "/", "/ws/sessions/a/b/"):
        socket = WebsocketCommunicator(application, path)
        connected, _ = await socket.connect()
        assert not connected, path
        await socket.wait()


async def test_an_encoded_slash_in_a_session_id_is_refused_without_a_500():
    socket = bot_socket("..%2F", "it_whatever")
    connected, _ = await socket.connect()
    assert not connected
    await socket.wait()


async def test_on_the_wire_unmatched_paths_get_a_403_and_no_error_is_logged(server):
    for path in ("/ws/nope/", "/ws/ingest/..%2F/", "/ws/ingest/a%2Fb/"):
        assert await handshake_status(f"{server.ws_url}{path}") == 403, path
    log = server.log_path.read_text()
    assert "Traceback" not in log and "Exception inside application" not in log


# --- Session ids -----------------------------------------------------------


@pytest.mark.parametrize("session_id", [".", "..", "...", "abc%0A"])
async def test_a_session_id_no_url_can_carry_is_refused_with_a_reason(session_id):
    socket = bot_socket(session_id, "it_whatever")
    connected, _ = await socket.connect()
    assert connected  # the ingest socket says why before it closes
    assert (await receive(socket))["error"].startswith("session id")
    assert (await socket.receive_output(2))["code"] == 4400


# --- Browser sockets: same origin only -------------------------------------


async def open_browser(origin: bytes | None, cookie: str, host: bytes = b"127.0.0.1:8000", headers=()) -> bool:
    """Whether a logged-in browser's socket to the session list opens."""
    headers = [(b"host", host), (b"cookie", cookie.encode()), *headers]
    if origin is not None:
        headers.append((b"origin", origin))
    socket = WebsocketCommunicator(application, "/ws/sessions/", headers=headers)
    connected, _ = await socket.connect()
    if connected:
        await socket.disconnect()
    else:
        await socket.wait()
    return connected


@pytest.mark.usefixtures("live_path")
async def test_a_browser_on_the_same_origin_is_accepted(staff_cookie):
    assert await open_browser(b"http://127.0.0.1:8000", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_default_ports_are_the_same_origin(staff_cookie):
    assert await open_browser(b"http://127.0.0.1:80", staff_cookie, host=b"127.0.0.1")
    assert await open_browser(b"http://127.0.0.1", staff_cookie, host=b"127.0.0.1:80")


@pytest.mark.usefixtures("live_path")
async def test_a_browser_from_another_port_of_the_same_host_is_refused(staff_cookie):
    assert not await open_browser(b"http://127.0.0.1:9999", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_a_browser_from_another_allowed_host_is_refused(staff_cookie):
    assert not await open_browser(b"http://localhost:8000", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_a_browser_from_the_same_host_over_https_is_refused_on_plain_http(staff_cookie):
    assert not await open_browser(b"https://127.0.0.1:8000", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_a_browser_without_an_origin_is_refused(staff_cookie):
    assert not await open_browser(None, staff_cookie)
    assert not await open_browser(b"null", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_a_host_outside_allowed_hosts_is_refused_even_from_its_own_origin(staff_cookie):
    assert not await open_browser(b"http://evil.example:8000", staff_cookie, host=b"evil.example:8000")


@pytest.mark.usefixtures("live_path")
async def test_a_csrf_trusted_origin_is_accepted(settings, staff_cookie):
    settings.CSRF_TRUSTED_ORIGINS = ["https://dashboard.example.com", "https://*.ops.example.com"]
    assert await open_browser(b"https://dashboard.example.com", staff_cookie)
    assert await open_browser(b"https://eu.ops.example.com:443", staff_cookie)
    assert not await open_browser(b"http://dashboard.example.com", staff_cookie)


@pytest.mark.usefixtures("live_path")
async def test_behind_a_tls_proxy_the_https_page_is_the_same_origin(settings, staff_cookie):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = [(b"x-forwarded-proto", b"https")]
    host = b"127.0.0.1"
    assert await open_browser(b"https://127.0.0.1", staff_cookie, host=host, headers=forwarded)
    assert not await open_browser(b"http://127.0.0.1", staff_cookie, host=host, headers=forwarded)
    assert not await open_browser(b"https://127.0.0.1", staff_cookie, host=host)


async def test_on_the_wire_only_the_same_origin_opens_a_browser_socket(server):
    cookie = await log_in(server)
    url, headers = f"{server.ws_url}/ws/sessions/", {"Cookie": cookie}
    assert await handshake_status(url, additional_headers=headers, origin=server.url) == 101
    assert await handshake_status(url, additional_headers=headers, origin="http://127.0.0.1:9") == 403


# --- JSON answers ----------------------------------------------------------


@pytest.fixture
def csrf_client(staff_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    return client


def test_a_post_under_api_without_a_csrf_token_is_answered_in_json(csrf_client):
    response = csrf_client.post("/api/no-such-thing/", {"x": "1"})
    assert response.status_code == 403 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": "CSRF verification failed: CSRF cookie not set.", "code": "403"}


def test_a_post_elsewhere_without_a_csrf_token_gets_djangos_page(csrf_client):
    response = csrf_client.post("/agents/refresh/")
    assert response.status_code == 403 and response["Content-Type"].startswith("text/html")
    assert b"CSRF verification failed" in response.content


def strict_json(text):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_latency_that_is_not_a_number_is_written_as_null(staff_client, org):
    # SQLite stores NaN as NULL; infinities survive it, and PostgreSQL keeps all three.
    Session.objects.create(
        organization=org,
        session_id="nan-call",
        latency_p50_ms=float("nan"),
        latency_p95_ms=float("inf"),
        latency_max_ms=float("-inf"),
    )
    response = staff_client.get("/api/sessions/")
    (row,) = strict_json(response.content)["sessions"]
    assert row["latency"] == {"p50": None, "p95": None, "max": None}


def test_events_ndjson_is_strict_json_even_for_a_message_with_nan_in_it(staff_client, org):
    # Ingest records a frame with NaN as invalid, as the text received; however the export reads it
    # back (the raw text, or parsed with NaN as null), each line must parse as strict JSON.
    session = Session.objects.create(organization=org, session_id="nan-events")
    text = '{"label": "rtvi-ai", "type": "metrics", "data": {"ttfb": [{"processor": "tts", "value": NaN}]}}'
    Event.objects.create(
        session=session, seq=1, direction="to-client", received_at=1.0, message=text, valid=False, error="not JSON"
    )
    response = staff_client.get("/api/sessions/nan-events/events.ndjson")
    (line,) = b"".join(response.streaming_content).decode().splitlines()
    assert strict_json(line)["message"] in (text, json.loads(text.replace("NaN", "null")))
