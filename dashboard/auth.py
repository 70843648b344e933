"""Who is asking: a staff user in a browser, or a script with a bearer key."""

from functools import wraps
from inspect import iscoroutinefunction

from asgiref.sync import sync_to_async
from django.contrib.admin.views.decorators import staff_member_required

from dashboard.http import json_error
from dashboard.models import ApiKey, Organization


def bearer_token(request_or_headers) -> str:
    """The token of an `Authorization: Bearer <token>` header, or ''."""
    headers = getattr(request_or_headers, "headers", request_or_headers)
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def organization_of(user) -> Organization | None:
    membership = getattr(user, "membership", None) if user.is_authenticated else None
    return membership.organization if membership else None


def staff_required(view):
    """Login as staff, redirecting to the dashboard's own login page."""
    return staff_member_required(view, login_url="login")


def _authenticate(request):
    """Sets request.organization from a bearer key or a staff session; returns an error response or None."""
    token = bearer_token(request)
    if token:
        key = ApiKey.objects.find(token)
        if key is None:
            return json_error("Unknown or revoked API key.", 401)
        key.touch()
        request.organization = key.organization
        request.api_key = key  # the audit log names the key
        return None
    if request.user.is_authenticated and request.user.is_staff:
        request.organization = organization_of(request.user)
        if request.organization is None:
            return json_error("Your account belongs to no organization; ask an admin to add it.", 403)
        return None
    return json_error("Send 'Authorization: Bearer <private API key>' or log in.", 401)


def key_or_staff_required(view):
    """For JSON endpoints: a private API key or a staff browser session.

    Sets `request.organization`. Answers 401 JSON, never a login redirect,
    since the caller is a script. Works on sync and async views.
    """
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            error = await sync_to_async(_authenticate)(request)
            return error or await view(request, *args, **kwargs)

        return async_wrapper

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        return _authenticate(request) or view(request, *args, **kwargs)

    return wrapper


async def aorganization_of(user) -> Organization | None:
    return await sync_to_async(organization_of)(user)
