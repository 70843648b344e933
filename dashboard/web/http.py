"""HTTP helpers: strict JSON for every API answer, JSON errors, method checks, and reading query parameters.

Strict JSON: no NaN or Infinity, which JSON has no words for. Python's json (and so Django's JsonResponse)
writes float('nan') as `NaN` by default, which JSON.parse, jq and most clients reject. A value that is not
finite (a latency over no turns, a bot's own metric) becomes null instead.

Query parameters: `Query`, one method a kind (a whole number within bounds, a page's limit and offset, a
choice, free text, a session id, Unix seconds, an ISO date-time, a yes or no), one error (BadParam).
"""

import json
import math
import re
from collections.abc import Iterable
from datetime import datetime
from functools import wraps
from inspect import iscoroutinefunction
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt

from rtvi_monitor.core.protocol import SESSION_ID_RE


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


def all_finite(value: Any) -> bool:
    """No NaN or ±Infinity anywhere inside `value` (what `finite` would replace)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(all_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return all(all_finite(item) for item in value)
    return True


def compact_dumps(value: Any) -> str:
    """strict_dumps, compact, for the live path's frames, written by orjson (through json, a batch's patch took
    ~10 % of the server's main thread at 100 x 30); NaN and Infinity as null, as strict_dumps writes them.
    What orjson refuses (an integer past 64 bits, a key that is not a string) goes through json."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return strict_dumps(value, separators=(",", ":"))


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


def bearer_token(request_or_headers) -> str:
    """The token of an `Authorization: Bearer <token>` header, or ''."""
    headers = getattr(request_or_headers, "headers", request_or_headers)
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def csrf_refusal(request):
    """For a browser form's JSON view (`json_methods(..., browser_form=True)`): the CSRF failure (JSON under
    /api/, CSRF_FAILURE_VIEW) when a request that changes something rides on a browser's session cookie without
    the page's CSRF token; else None. A request with a bearer key, or with no session cookie, carries no
    credential another site could make a browser send: it needs no token (and its door answers it)."""
    if request.method not in UNSAFE_METHODS or bearer_token(request):
        return None
    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return None
    return CsrfViewMiddleware(lambda request: None).process_view(request, None, (), {})


def json_methods(*methods: str, browser_form: bool = False):
    """Like require_http_methods, but a wrong method gets a JSON 405.

    CSRF, decided here for every JSON view: Django's check is off (csrf_exempt), since machine endpoints
    authenticate with a bearer header, which a browser never sends on its own, and a POST must meet the 405,
    not Django's HTML CSRF page. A view that a member's browser changes things with (its buttons post with
    the signed-in session) says `browser_form=True`: then a POST, PUT, PATCH or DELETE on a browser's session
    cookie must carry the CSRF token, as a form does (`csrf_refusal`); a key's request needs none.
    tests/web/test_csrf.py holds every JSON view that a member may change things with to it.
    """

    def refuse(request):
        if request.method not in methods:
            response = json_error(f"Method {request.method} is not allowed; use {', '.join(methods)}.", 405)
            response["Allow"] = ", ".join(methods)
            return response
        return csrf_refusal(request) if browser_form else None

    def decorator(view):
        if iscoroutinefunction(view):

            async def async_wrapper(request, *args, **kwargs):
                return refuse(request) or await view(request, *args, **kwargs)

            wrapper = wraps(view)(async_wrapper)
        else:

            def sync_wrapper(request, *args, **kwargs):
                return refuse(request) or view(request, *args, **kwargs)

            wrapper = wraps(view)(sync_wrapper)
        wrapper.json_methods, wrapper.browser_form = methods, browser_form
        return csrf_exempt(wrapper)

    return decorator


def ndjson_closing(message: str) -> str:
    """The last line of an NDJSON stream cut short: why."""
    return strict_dumps({"error": message}) + "\n"


# --- Query parameters -------------------------------------------------------------------------------
# The one place a query string is read. Every kind of parameter the dashboard takes is a method of Query,
# and every bad value is one BadParam whose message names the parameter, what it takes and what it got:
# a JSON endpoint answers it as a 400 (json_error), a page shows it.

# A yes or no: true/false, 1/0, and on/off (what an HTML checkbox sends), case-insensitive.
BOOLEANS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}
WHOLE_NUMBER_RE = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() and \d also take "²" or "٣"
# Unix seconds, whole or with a fraction, from 1970 up to the last second a datetime can hold (9999-12-31).
UNIX_SECONDS_RE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
MAX_UNIX_SECONDS = 253_402_300_799
MAX_TEXT = 200  # characters of a free-text parameter, unless the caller says otherwise
MAX_OFFSET = 10**9
SHOWN = 100  # characters of a bad value quoted back


def whole_number(raw: str | None, max_digits: int = 18) -> int | None:
    """`raw` as a whole number when it is 1 to `max_digits` ASCII digits, else None.

    Every number a request carries (a header, a form field, a cursor) is bounded before it is converted:
    int() of 5,000 digits raises ValueError (past Python's 4,300-digit limit), and str.isdigit() takes "²".
    18 digits hold any size, count or id this dashboard keeps (a BigAutoField's ids have 19: pass 19).
    """
    if raw and len(raw) <= max_digits and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


class BadParam(ValueError):
    """A query parameter that cannot be understood; the message is "<name>: <why>", naming what it got."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name}: {why}")
        self.name = name


def _shown(raw: str) -> str:
    return repr(raw[:SHOWN]) + ("…" if len(raw) > SHOWN else "")


def default_first(choices: Iterable[str], default: str | None) -> tuple[str, ...]:
    """`choices` in their order, but `default` (when given) first: the order a <select> and an error list them."""
    choices = tuple(choices)
    return choices if default is None else (default, *(c for c in choices if c != default))


class Query:
    """A request's query parameters (a QueryDict, or a dict), read one kind at a time; a bad one raises BadParam.

    A parameter given twice is refused (which one was meant?). Numbers, choices, times and yes-or-no are
    read as sent: a space around one makes it a bad value. `form` says who sends the query:

    - form=True (the dashboard's pages and its /api/): an empty value is an absent one (what a form sends
      for a field left alone), and free text and session ids, which people type and paste, are read
      without the spaces around them;
    - form=False (/v1, which answers as Pipecat Cloud does, and machine endpoints): text is read as sent,
      and an empty number, choice, time or yes-or-no is a bad value.
    """

    def __init__(self, params, *, form: bool = True):
        self.params = params
        self.form = form

    def raw(self, name: str) -> str | None:
        """The parameter's one value as sent, or None when it is absent."""
        getlist = getattr(self.params, "getlist", None)
        values = getlist(name) if getlist else ([self.params[name]] if name in self.params else [])
        if not values:
            return None
        if len(values) > 1:
            raise BadParam(name, f"must be given once, got {len(values)} values: {values[:3]!r}")
        return values[0]

    def _value(self, name: str) -> str | None:
        raw = self.raw(name)
        return None if raw == "" and self.form else raw

    def _typed(self, name: str, exact: bool = False) -> str:
        """What a person typed or pasted: from a form, without the spaces around it (unless `exact`); or ""."""
        raw = self.raw(name) or ""
        return raw.strip() if self.form and not exact else raw

    def whole_number(self, name: str, default: int | None, minimum: int, maximum: int) -> int | None:
        """A whole number in [minimum, maximum], ASCII digits only (no sign, no spaces, no decimals)."""
        raw = self._value(name)
        if raw is None:
            return default
        if not WHOLE_NUMBER_RE.fullmatch(raw) or not minimum <= int(raw) <= maximum:
            raise BadParam(name, f"expected a whole number from {minimum} to {maximum}, got {_shown(raw)}")
        return int(raw)

    def page(self, default_limit: int, max_limit: int, max_offset: int = MAX_OFFSET) -> tuple[int, int]:
        """`limit` (1..max_limit, default_limit when absent) and `offset` (0..max_offset, 0 when absent)."""
        return (
            self.whole_number("limit", default_limit, 1, max_limit),
            self.whole_number("offset", 0, 0, max_offset),
        )

    def choice(self, name: str, choices: Iterable[str], default: str | None = None) -> str | None:
        """One of `choices`, exactly as written (case too); `default` when absent."""
        offered = default_first(choices, default)
        raw = self._value(name)
        if raw is None:
            return default
        if raw not in offered:
            raise BadParam(name, f"expected one of {', '.join(offered)}, got {_shown(raw)}")
        return raw

    def text(self, name: str, max_length: int = MAX_TEXT, *, exact: bool = False) -> str:
        """Free text of at most `max_length` characters; "" when absent or empty (it filters nothing).

        `exact`: read as sent even from a form, spaces and all (a caller's user_id, a bot's agent id).
        """
        raw = self._typed(name, exact)
        if len(raw) > max_length:
            raise BadParam(name, f"expected at most {max_length} characters, got {len(raw)}")
        if "\x00" in raw:  # no text column of PostgreSQL's can hold it: a query with it would be a 500
            raise BadParam(name, "must not contain a NUL character (\\x00)")
        return raw

    def session_id(self, name: str) -> str:
        """A session id as bots choose them (core/protocol.py SESSION_ID_RE), or "" when absent or empty."""
        raw = self._typed(name)
        if raw and not SESSION_ID_RE.match(raw):
            raise BadParam(name, f"expected a session id (1-100 of A-Z a-z 0-9 _ . : -), got {_shown(raw)}")
        return raw

    def unix_seconds(self, name: str) -> float | None:
        """Unix seconds, whole or with a fraction (1745000000 or 1745000000.5); None when absent."""
        raw = self._value(name)
        if raw is None:
            return None
        if not UNIX_SECONDS_RE.fullmatch(raw) or float(raw) > MAX_UNIX_SECONDS:
            raise BadParam(name, f"expected Unix seconds (like 1745000000 or 1745000000.5), got {_shown(raw)}")
        return float(raw)

    def date_time(self, name: str, *, zone_required: bool = False) -> datetime | None:
        """An ISO 8601 date-time; None when absent. Without a zone it is read in the dashboard's TIME_ZONE
        (a browser's datetime-local has none), unless `zone_required`. A space stands for "+": that is
        what an unescaped "+02:00" arrives as."""
        raw = self._value(name)
        if raw is None:
            return None
        try:
            value = parse_datetime(raw.replace(" ", "+"))
        except ValueError:  # well formed, but no such time: 2025-13-01T00:00
            value = None
        if value is None or (zone_required and value.tzinfo is None):
            zone = " with its zone" if zone_required else ""
            raise BadParam(name, f"expected an ISO 8601 date-time{zone} like 2025-06-01T12:00:00Z, got {_shown(raw)}")
        return value if timezone.is_aware(value) else timezone.make_aware(value)

    def boolean(self, name: str, default: bool | None = None) -> bool | None:
        """A yes or no (BOOLEANS); `default` when absent."""
        raw = self._value(name)
        if raw is None:
            return default
        value = BOOLEANS.get(raw.lower())
        if value is None:
            raise BadParam(name, f"expected true or false, got {_shown(raw)}")
        return value


def bool_param(request, name: str) -> bool:
    """A machine endpoint's yes-or-no query parameter (Query.boolean, form=False): false when absent."""
    return Query(request.GET, form=False).boolean(name, default=False)


# Templates read request.user and messages lazily, through the ORM: render in
# a thread so that async views can use them.
arender = sync_to_async(render)
