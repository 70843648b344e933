"""Strict JSON for every API answer: no NaN or Infinity, which JSON has no words for.

Python's json (and so Django's JsonResponse) writes float('nan') as `NaN` by
default, which JSON.parse, jq and most clients reject. A value that is not
finite (a latency over no turns, a bot's own metric) becomes null instead.
"""

import json
import math
from functools import wraps
from inspect import iscoroutinefunction
from typing import Any

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt


def finite(value: Any) -> Any:
    """`value` with every NaN and ±Infinity inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def strict_dumps(value: Any, **kwargs) -> str:
    """json.dumps that never writes NaN or Infinity (they become null)."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # rare: only then walk the value
        return json.dumps(finite(value), allow_nan=False, **kwargs)


class StrictJsonResponse(JsonResponse):
    """A JsonResponse whose body is strict JSON: non-finite numbers are written as null."""

    def __init__(self, data, **kwargs):
        kwargs["json_dumps_params"] = {**(kwargs.get("json_dumps_params") or {}), "allow_nan": False}
        try:
            super().__init__(data, **kwargs)
        except ValueError:  # JsonResponse serialises before anything else is set up
            super().__init__(finite(data), **kwargs)


def json_error(message: str, status: int) -> StrictJsonResponse:
    """The error body Pipecat Cloud uses: {"error": ..., "code": "<status>"}."""
    return StrictJsonResponse({"error": message, "code": str(status)}, status=status)


def json_methods(*methods: str):
    """Like require_http_methods, but a wrong method gets a JSON 405.

    Also exempts the view from CSRF: machine endpoints authenticate with a
    bearer header, which a browser never sends on its own, and a POST must
    meet the 405, not Django's HTML CSRF page.
    """

    def refuse(request):
        if request.method in methods:
            return None
        response = json_error(f"Method {request.method} is not allowed; use {', '.join(methods)}.", 405)
        response["Allow"] = ", ".join(methods)
        return response

    def decorator(view):
        if iscoroutinefunction(view):

            async def async_wrapper(request, *args, **kwargs):
                return refuse(request) or await view(request, *args, **kwargs)

            return csrf_exempt(wraps(view)(async_wrapper))

        def wrapper(request, *args, **kwargs):
            return refuse(request) or view(request, *args, **kwargs)

        return csrf_exempt(wraps(view)(wrapper))

    return decorator


# A query parameter's yes or no: true/false, 1/0, and on/off (what an HTML checkbox sends).
BOOLEANS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


def parse_bool(params, name: str) -> bool | None:
    """`params[name]` (a QueryDict or dict) as a yes or no, case-insensitive; None when absent or empty.

    Raises ValueError with a message naming the parameter and what it got.
    """
    raw = params.get(name, "").strip()
    if not raw:
        return None
    value = BOOLEANS.get(raw.lower())
    if value is None:
        raise ValueError(f"{name} must be true or false, got {raw!r}.")
    return value


def bool_param(request, name: str) -> bool:
    """A yes-or-no query parameter of the request (parse_bool), false when absent; given empty, an error
    (an API's parameter: a form's empty field, absent for parse_bool, is not sent here)."""
    if name not in request.GET:
        return False
    value = parse_bool(request.GET, name)
    if value is None:
        raise ValueError(f"{name} must be true or false, got ''.")
    return value
