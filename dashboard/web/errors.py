"""Error pages: machine paths (/v1/, /api/) always answer JSON, never an HTML page."""

import logging

from django.core.exceptions import BadRequest
from django.http import Http404, HttpResponseBadRequest
from django.views import csrf, defaults

from dashboard.web.http import json_error

logger = logging.getLogger(__name__)
MACHINE_PREFIXES = ("/v1/", "/api/")


def _is_machine(request) -> bool:
    return request.path.startswith(MACHINE_PREFIXES)


def machine_not_found(request, path=""):
    """Catch-all for unknown machine paths, so even DEBUG answers JSON there."""
    return json_error(f"No such endpoint: {request.path}", 404)


class MachineErrorsMiddleware:
    """An exception under /v1/ or /api/ becomes a JSON 500, in DEBUG too; a view's Http404 a JSON 404 in its
    own words (rtvi_monitor/sessions/queries.py `organization_session`: "No session 'x' in your organization.")."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if _is_machine(request) and isinstance(exception, Http404):
            return json_error(str(exception) or f"Not found: {request.path}", 404)
        if _is_machine(request):
            logger.exception("Error on %s", request.path, exc_info=exception)
            return json_error("Internal error; it has been logged.", 500)
        return None


def not_found(request, exception):
    if _is_machine(request):
        return json_error(f"No such endpoint: {request.path}", 404)
    return defaults.page_not_found(request, exception)


def bad_request(request, exception):
    """A BadRequest the dashboard raised says what was wrong (a bad cursor, a form's id that is no number);
    Django's own (a bad Host header, a suspicious operation) keeps its page, which says nothing."""
    if isinstance(exception, BadRequest) and str(exception):
        if _is_machine(request):
            return json_error(str(exception), 400)
        return HttpResponseBadRequest(str(exception), content_type="text/plain; charset=utf-8")
    if _is_machine(request):
        return json_error("Bad request.", 400)
    return defaults.bad_request(request, exception)


def server_error(request):
    if _is_machine(request):
        return json_error("Internal error; it has been logged.", 500)
    return defaults.server_error(request)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: on machine paths a JSON 403 with Django's reason, elsewhere Django's own page."""
    if _is_machine(request):
        return json_error(f"CSRF verification failed: {reason}", 403)
    return csrf.csrf_failure(request, reason)
