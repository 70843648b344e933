"""Server-Timing, and Django's request limits (body size, form fields, files) answered in JSON."""

import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent

from dashboard.web.http import json_error, whole_number


class BothWaysMiddleware:
    """A middleware that runs in a sync stack and an async one alike, never on a thread of its own (Django's
    MiddlewareMixin runs an async request's hooks through sync_to_async): `before(request)` answers at once
    (a response) or lets the request through (None), `after(request, response)` sees every response."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def before(self, request):
        return None

    def after(self, request, response):
        return response

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return self.after(request, self.before(request) or self.get_response(request))

    async def _acall(self, request):
        return self.after(request, self.before(request) or await self.get_response(request))


class ServerTimingMiddleware(BothWaysMiddleware):
    """Server-Timing: how long Django spent on a response, visible in the browser's dev tools."""

    def before(self, request):
        request.server_timing_started = time.perf_counter()

    def after(self, request, response):
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - request.server_timing_started) * 1000:.2f}"
        return response


# Paths whose view enforces a body limit of its own and answers it in its own words:
# POST /v1/traces takes up to OTLP_MAX_BYTES, checked after its ingest token (rtvi_monitor/sessions/otlp.py).
# PUT /ingest/audio/... takes up to AUDIO_MAX_CHUNK_BYTES, checked after its ingest token (rtvi_monitor/audio/views.py).
# POST /api/evals/runs/ takes a results.jsonl of up to rtvi_monitor.evals.runs.MAX_BYTES, past Django's 2.5 MB (a long
# suite's file, events_seen and all), checked after its key (rtvi_monitor/evals/api.py).
OWN_BODY_LIMIT = ("/v1/traces", "/api/evals/runs/")
OWN_BODY_LIMIT_PREFIXES = ("/ingest/audio/",)
BODILESS_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def _declared_length(request) -> int | None:
    """The body's declared size; None when absent (chunked) or no number of bytes (RequestLimitsMiddleware.before)."""
    return whole_number(request.META.get("CONTENT_LENGTH"))


def too_big(length: int | None = None):
    """413 naming the limit, and the body's size when it was declared (and is over it)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if length is None or length <= limit:
        return json_error(f"Request body too large; the limit is {limit} bytes.", 413)
    return json_error(f"Request body too large: {length} bytes; the limit is {limit} bytes.", 413)


def refusal(request, exception):
    """The JSON answer to one of Django's request-limit exceptions, or None for any other exception."""
    if isinstance(exception, RequestDataTooBig):
        return too_big(_declared_length(request))
    if isinstance(exception, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return json_error(f"Too many fields in the form or query string; the limit is {limit}.", 400)
    if isinstance(exception, TooManyFilesSent):
        return json_error(f"Too many files; the limit is {settings.DATA_UPLOAD_MAX_NUMBER_FILES}.", 400)
    return None


class RequestLimitsMiddleware(BothWaysMiddleware):
    """A request over Django's limits is a 413 or a 400 in JSON, on every path, never a 500.

    The limits are Django's DATA_UPLOAD_MAX_MEMORY_SIZE (body bytes; 2.5 MB by
    default), DATA_UPLOAD_MAX_NUMBER_FIELDS and DATA_UPLOAD_MAX_NUMBER_FILES.
    Django raises RequestDataTooBig, TooManyFieldsSent or TooManyFilesSent
    wherever the body, the form or the query string is first read, usually
    in the view, and under /api/ MachineErrorsMiddleware made that a 500.
    Here, in one place:

    - a declared Content-Length over the limit is a 413 at once: no body is
      read and no credential looked up (an unauthenticated request gets the
      413 too, not a 401: its size is wrong whoever sends it);
    - a body whose size is not declared (chunked) is measured before anything
      else reads it: Django checks the size the ASGI server has already
      buffered before reading it, so an oversized one is refused unread and
      one within the limit is kept for the view, which reads the same bytes.
      This covers form posts that CsrfViewMiddleware reads before the view;
    - the three exceptions raised by a view (too many fields or files, or a
      body too big that got past the above) become 413 / 400 JSON in
      process_exception.

    POST /v1/traces is left to its view (OWN_BODY_LIMIT), which has its own
    limit (OTLP_MAX_BYTES, checked after its token) and its own 413.

    It goes LAST in MIDDLEWARE: Django calls process_exception from the last
    middleware up, and MachineErrorsMiddleware's would answer 500 first; and
    an earlier middleware's __call__ never sees a view's exception, which
    Django turns into a response at each layer. Last, the checks in __call__
    still run before every process_view (CSRF's included) and every view,
    and the answer still goes out through the other middleware (security
    headers, Server-Timing).

    HTML pages (a browser's form post to /login/, the admin) get the same
    JSON, not a page: one answer for every client, a browser shows it as
    readable text, and Django has no 413 page to fall back on. One case is
    out of reach: too many fields or files in a form that CsrfViewMiddleware
    reads for a CSRF-protected page are raised inside that middleware, not
    the view, so they get Django's own 400 page (still a 400, never a 500).
    """

    def before(self, request):
        """413 for a body over the limit found before the view runs, else None."""
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if (
            limit is None
            or request.path_info in OWN_BODY_LIMIT
            or request.path_info.startswith(OWN_BODY_LIMIT_PREFIXES)
        ):
            return None
        declared = request.META.get("CONTENT_LENGTH")
        length = _declared_length(request)
        if declared and length is None:  # Django would int() it when the body is read: a 500, or 5,000 digits
            return json_error(f"Content-Length {declared[:40]!r} is not a number of bytes.", 400)
        if length is not None:
            return too_big(length) if length > limit else None
        if request.method in BODILESS_METHODS:
            return None
        try:
            request.body  # noqa: B018  (measured, and kept for the view)
        except RequestDataTooBig:
            return too_big()
        return None

    def process_exception(self, request, exception):
        return refusal(request, exception)
