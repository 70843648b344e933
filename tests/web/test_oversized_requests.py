"""Requests over Django's limits: a 413 or a 400 in JSON on every path, never a 500 (issue 22).

Through the real URLconf with Django's test client; a chunked body (no
Content-Length, which the test client always sends) through the real ASGI
handler; the middleware's process_exception alone with RequestFactory.
"""

import json
import re

import pytest
from asgiref.sync import iscoroutinefunction, sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import URLResolver, get_resolver

from dashboard.org.models import ApiKey, Organization
from dashboard.web.middleware import OWN_BODY_LIMIT, OWN_BODY_LIMIT_PREFIXES, RequestLimitsMiddleware
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions.models import Span
from tests.otlp_samples import conversation

pytestmark = pytest.mark.django_db

LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # Django's default: 2621440
THREE_MB = 3 * 1024 * 1024
TOO_BIG = {"error": f"Request body too large: {THREE_MB} bytes; the limit is {LIMIT} bytes.", "code": "413"}


def json_body(size: int) -> bytes:
    """A JSON rule of exactly `size` bytes, its name far too long."""
    head, tail = b'{"name": "', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def assert_json(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    return response.json()


def every_path() -> list[str]:
    """One concrete path for every route of the URLconf, its parameters filled in (the admin: two of its pages)."""
    paths = []

    def walk(patterns, prefix):
        for pattern in patterns:
            route = str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                if route == "admin/":
                    paths.extend(["/admin/", "/admin/login/"])
                else:
                    walk(pattern.url_patterns, prefix + route)
            elif route.startswith("^"):  # the catch-all of unknown /v1/ and /api/ paths
                paths.append("/api/no-such-thing/")
            else:
                route = re.sub(r"<int:\w+>", "1", route)
                paths.append(prefix + re.sub(r"<(?:\w+:)?\w+>", "x", route))

    walk(get_resolver().url_patterns, "/")
    return paths


# --- A declared Content-Length over the limit ---------------------------------


def test_a_3mb_rule_is_a_413_in_json_not_a_500(client, api_key):
    body = json_body(THREE_MB)
    response = client.post(
        "/api/alerts/rules/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert assert_json(response, 413) == TOO_BIG
    assert not AlertRule.objects.exists()


def test_every_path_refuses_an_oversized_post_in_json_before_authentication(client):
    paths = every_path()
    assert {"/api/alerts/rules/", "/login/", "/agents/refresh/", "/api/sessions/x/events/1/", "/admin/login/"} <= set(
        paths
    )
    body = b"x" * THREE_MB
    for path in paths:
        if path in OWN_BODY_LIMIT or path.startswith(OWN_BODY_LIMIT_PREFIXES):
            # their own limits: below, tests/audio/test_audio.py, tests/evals/test_attack_i36_gate.py
            continue
        response = client.post(path, body, content_type="application/octet-stream")
        assert response.status_code == 413, (path, response.status_code)
        assert response["Content-Type"] == "application/json", path
        assert response.json() == TOO_BIG, path


def test_other_methods_and_a_logged_in_browser_get_the_same_413(staff_client):
    body = json_body(THREE_MB)
    for method in ("put", "patch", "delete"):
        response = getattr(staff_client, method)("/api/alerts/rules/", body, content_type="application/json")
        assert assert_json(response, 413) == TOO_BIG, method
    form = {"next": "/", "padding": "x" * THREE_MB}  # a browser form post to an HTML page: the same JSON
    response = staff_client.post("/agents/refresh/", form)
    assert assert_json(response, 413)["error"].startswith("Request body too large: ")


def test_the_413_goes_out_through_the_other_middleware(client):
    response = client.post("/api/alerts/rules/", b"x" * THREE_MB, content_type="application/json")
    assert response.status_code == 413
    assert response["X-Content-Type-Options"] == "nosniff" and "Server-Timing" in response


# --- Within the limit ---------------------------------------------------------


@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT])
def test_a_body_up_to_the_limit_is_read_and_answered_on_its_merits(client, api_key, size):
    response = client.post(
        "/api/alerts/rules/", json_body(size), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert assert_json(response, 400)["error"].startswith("name: expected a non-empty string of at most 200")


def test_one_byte_over_the_limit_is_refused(client, api_key):
    response = client.post(
        "/api/alerts/rules/",
        json_body(LIMIT + 1),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert (
        assert_json(response, 413)["error"] == f"Request body too large: {LIMIT + 1} bytes; the limit is {LIMIT} bytes."
    )


def test_a_small_rule_is_still_created(client, api_key):
    response = client.post(
        "/api/alerts/rules/",
        {"name": "errors", "condition": "error_rate", "threshold": 5},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert assert_json(response, 201)["name"] == "errors"


# --- Too many fields or files ---------------------------------------------------


def test_too_many_form_fields_is_a_400_in_json(client):
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = client.post("/login/", fields, content_type="application/x-www-form-urlencoded")
    assert assert_json(response, 400) == {
        "error": f"Too many fields in the form or query string; the limit is {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS}.",
        "code": "400",
    }


def test_too_many_query_parameters_under_api_is_a_400_not_a_500(client, api_key):
    query = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = client.get(f"/api/sessions/?{query}", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert assert_json(response, 400)["error"].startswith("Too many fields in the form or query string")


def test_as_many_form_fields_as_allowed_are_read(client):
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS))
    response = client.post("/login/", fields, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")  # the form, again


def test_too_many_files_is_a_400_in_json(client):
    files = [SimpleUploadedFile(f"f{i}.txt", b"x") for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FILES + 1)]
    response = client.post("/login/", {"username": "a", "files": files})
    assert assert_json(response, 400) == {
        "error": f"Too many files; the limit is {settings.DATA_UPLOAD_MAX_NUMBER_FILES}.",
        "code": "400",
    }


def test_too_many_fields_for_a_csrf_protected_form_is_djangos_400_page_never_a_500():
    # CsrfViewMiddleware reads the form before the view, out of process_exception's reach.
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "x" * 32
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = client.post("/login/", fields, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400


# --- POST /v1/traces keeps its own limit ------------------------------------------


@pytest.fixture
def token(org):
    return IngestToken.issue(org, "bot")[1]


def test_otlp_keeps_its_own_413_and_its_own_limit(client, token, settings):
    def post(body, **headers):
        return client.post("/v1/traces", body, content_type="application/x-protobuf", **headers)

    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    own = {"error": f"The body is over OTLP_MAX_BYTES ({settings.OTLP_MAX_BYTES} bytes).", "code": "413"}
    assert assert_json(post(b"x" * THREE_MB, **bearer), 413) == own
    assert settings.OTLP_MAX_BYTES < LIMIT  # between the two limits: OTLP's, the smaller, applies
    assert assert_json(post(b"x" * (settings.OTLP_MAX_BYTES + 1), **bearer), 413) == own
    # Its token first, as before: no token, a 401 whatever the size.
    assert assert_json(post(b"x" * THREE_MB), 401)["error"].startswith("Send 'Authorization: Bearer")
    assert post(conversation().SerializeToString(), **bearer).status_code == 200
    assert Span.objects.count() == 7


# --- A chunked body (no Content-Length), through the real ASGI handler ----------------


async def asgi_post(path: str, body: bytes, headers=(), chunk: int = 256 * 1024):
    """POST `body` in chunks, without Content-Length, as a chunked request reaches Django: (status, headers, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"transfer-encoding", b"chunked"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    app = ApplicationCommunicator(get_asgi_application(), scope)
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    for i, piece in enumerate(pieces):
        await app.send_input({"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1})
    start = await app.receive_output(30)
    content = b""
    while True:
        message = await app.receive_output(30)
        content += message.get("body", b"")
        if not message.get("more_body"):
            break
    await app.wait(30)
    return start["status"], dict(start["headers"]), content


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_oversized_body_is_a_413_in_json():
    status, headers, content = await asgi_post("/api/alerts/rules/", json_body(THREE_MB))
    assert (status, headers[b"Content-Type"]) == (413, b"application/json")
    assert content == b'{"error": "Request body too large; the limit is 2621440 bytes.", "code": "413"}'


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_oversized_form_to_a_csrf_protected_page_is_a_413_too():
    cookie = [(b"cookie", b"csrftoken=" + b"x" * 32), (b"content-type", b"application/x-www-form-urlencoded")]
    status, _, content = await asgi_post("/login/", b"username=" + b"x" * THREE_MB, cookie)
    assert status == 413 and b"Request body too large" in content


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_body_within_the_limit_is_read_by_the_view():
    key = await sync_to_async(lambda: ApiKey.issue(Organization.objects.create(name="Chunked"), "test")[1])()
    headers = [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json")]
    status, _, content = await asgi_post("/api/alerts/rules/", json_body(LIMIT), headers)
    assert status == 400 and b"name: expected a non-empty string" in content  # measured, kept, parsed
    status, _, content = await asgi_post("/api/alerts/rules/", json_body(LIMIT))
    assert status == 401 and b"Bearer <private API key>" in content  # no key: refused for that, not its size


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_oversized_otlp_body_gets_otlps_own_413():
    secret = await sync_to_async(lambda: IngestToken.issue(Organization.objects.create(name="Chunked"), "bot")[1])()
    headers = [(b"authorization", f"Bearer {secret}".encode()), (b"content-type", b"application/x-protobuf")]
    status, _, content = await asgi_post("/v1/traces", b"x" * THREE_MB, headers)
    assert status == 413 and b"OTLP_MAX_BYTES" in content


# --- The middleware on its own ---------------------------------------------------


@pytest.mark.parametrize(
    ("exception", "status", "message"),
    [
        (RequestDataTooBig(), 413, f"Request body too large; the limit is {LIMIT} bytes."),
        (TooManyFieldsSent(), 400, "Too many fields in the form or query string; the limit is 1000."),
        (TooManyFilesSent(), 400, "Too many files; the limit is 100."),
    ],
)
def test_process_exception_answers_djangos_limit_exceptions(exception, status, message):
    request = RequestFactory().post("/anywhere/", b"", content_type="application/json")
    request.META.pop("CONTENT_LENGTH", None)
    response = RequestLimitsMiddleware(lambda r: HttpResponse()).process_exception(request, exception)
    assert (response.status_code, json.loads(response.content)) == (status, {"error": message, "code": str(status)})


def test_process_exception_leaves_other_exceptions_alone():
    request = RequestFactory().get("/api/anything/")
    assert RequestLimitsMiddleware(lambda r: HttpResponse()).process_exception(request, ValueError()) is None


async def test_the_middleware_is_async_capable():
    async def view(request):
        return HttpResponse("ok")

    middleware = RequestLimitsMiddleware(view)
    assert iscoroutinefunction(middleware)
    factory = RequestFactory()
    refused = await middleware(factory.post("/x/", b"x" * (LIMIT + 1), content_type="text/plain"))
    assert refused.status_code == 413
    passed = await middleware(factory.post("/x/", b"x" * 10, content_type="text/plain"))
    assert passed.content == b"ok"


async def test_the_dashboards_middleware_runs_both_ways_by_one_rule(settings):
    """ServerTiming and RequestLimits are BothWaysMiddleware: one way to run sync and async (no __call__ of theirs)."""
    from dashboard.web.middleware import BothWaysMiddleware, ServerTimingMiddleware

    for middleware in (ServerTimingMiddleware, RequestLimitsMiddleware):
        assert issubclass(middleware, BothWaysMiddleware) and "__call__" not in vars(middleware)

    async def answer(request):
        return HttpResponse("ok")

    timing = ServerTimingMiddleware(answer)
    assert iscoroutinefunction(timing)
    response = await timing(RequestFactory().get("/"))
    assert re.fullmatch(r"app;dur=\d+\.\d\d", response["Server-Timing"])
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    refused = await RequestLimitsMiddleware(answer)(RequestFactory().post("/", "x" * 11, content_type="text/plain"))
    assert refused.status_code == 413
    synced = ServerTimingMiddleware(lambda request: HttpResponse("ok"))(RequestFactory().get("/"))
    assert not iscoroutinefunction(ServerTimingMiddleware(lambda request: None)) and "Server-Timing" in synced
