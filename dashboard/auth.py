"""Who is asking, and what they may do: a member in a browser (with a role), or a script with a bearer key.

A user belongs to one or more organizations (Membership), with a role in each
(dashboard.models.Role: viewer < operator < admin), and works in one at a
time: the one they picked with the switcher (kept in their browser session
under ORGANIZATION_SESSION_KEY), else the first by name. Django's is_staff
plays no part: it only opens the site admin, for the people who run the
installation.

- Pages: `member_required(role=...)`: a login redirect, else a 403 page
  that says what is missing (no organization, or a role below the one asked).
- JSON: `key_or_member_required(role=...)`: a private API key (its scopes:
  "read" for GET and HEAD, "write" for the rest; expired or revoked keys are
  refused) or a member's browser session; 401/403 JSON, never a redirect.
- Sockets: `scope_membership(scope)` (rtvi_monitor/consumers.py).

Transcripts and messages ("contents") are for operators and admins, and for
keys: `request.sees_contents`. A viewer gets figures, health and alerts.
"""

from functools import wraps
from inspect import iscoroutinefunction

from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseForbidden
from django.template.loader import render_to_string

from dashboard.http import json_error
from dashboard.models import ApiKey, Membership, Role

ORGANIZATION_SESSION_KEY = "organization"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def bearer_token(request_or_headers) -> str:
    """The token of an `Authorization: Bearer <token>` header, or ''."""
    headers = getattr(request_or_headers, "headers", request_or_headers)
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def memberships_of(user) -> list[Membership]:
    if user is None or not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).select_related("organization").order_by("organization__name"))


def membership_of(user, chosen=None, memberships=None) -> Membership | None:
    """The membership a user works in: the organization `chosen` (an id) if they belong to it, else their first."""
    memberships = memberships_of(user) if memberships is None else memberships
    for membership in memberships:
        if chosen and str(membership.organization_id) == str(chosen):
            return membership
    return memberships[0] if memberships else None


def _chosen(session) -> str | None:
    try:
        return session.get(ORGANIZATION_SESSION_KEY) if session is not None else None
    except Exception:  # a session store that cannot be read: the first organization
        return None


def request_membership(request) -> Membership | None:
    """The signed-in user's current membership (looked up once a request)."""
    if not hasattr(request, "_membership"):
        request._memberships = memberships_of(request.user)
        request._membership = membership_of(
            request.user, _chosen(getattr(request, "session", None)), request._memberships
        )
    return request._membership


def scope_membership(scope) -> Membership | None:
    """The same for a browser's socket: its user, and the organization its browser session has picked."""
    return membership_of(scope.get("user"), _chosen(scope.get("session")))


def _forbidden_page(request, message: str):
    html = render_to_string("dashboard/forbidden.html", {"message": message}, request=request)
    return HttpResponseForbidden(html)


def role_refusal(membership: Membership, role: str) -> str:
    return (
        f"This needs the {role} role in {membership.organization}; yours is {membership.role}. "
        "An admin of the organization can change it."
    )


NO_ORGANIZATION = "Your account belongs to no organization; ask an admin of one to invite you."


def _member_check(request, role: str):
    """Sets request.membership/organization for a signed-in member; returns an error page or None."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path(), "login")
    membership = request_membership(request)
    if membership is None:
        return _forbidden_page(request, NO_ORGANIZATION)
    if not membership.allows(role):
        return _forbidden_page(request, role_refusal(membership, role))
    request.membership, request.organization = membership, membership.organization
    request.sees_contents = membership.sees_contents
    return None


def _wrap(view, check):
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            refused = await sync_to_async(check)(request)
            return refused or await view(request, *args, **kwargs)

        return async_wrapper

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        return check(request) or view(request, *args, **kwargs)

    return wrapper


def member_required(view=None, *, role: str = Role.VIEWER):
    """Pages: a signed-in member of an organization with at least `role`."""
    if view is None:
        return lambda view: member_required(view, role=role)
    return _wrap(view, lambda request: _member_check(request, role))


def _authenticate(request, role: str):
    """Sets request.organization from a bearer key or a member's session; returns an error response or None."""
    token = bearer_token(request)
    if token:
        key = ApiKey.objects.find(token)
        if key is None:
            return json_error("Unknown, revoked or expired API key.", 401)
        scope = "read" if request.method in SAFE_METHODS else "write"
        if not key.allows(scope):
            return json_error(f"This API key's scopes are {key.scopes!r}; {request.method} needs {scope!r}.", 403)
        key.touch()
        request.organization = key.organization
        request.api_key = key  # the audit log names the key
        request.membership = None
        request.sees_contents = True  # the organization's own script
        return None
    if request.user.is_authenticated:
        membership = request_membership(request)
        if membership is None:
            return json_error(NO_ORGANIZATION, 403)
        if not membership.allows(role):
            return json_error(role_refusal(membership, role), 403)
        request.membership, request.organization = membership, membership.organization
        request.sees_contents = membership.sees_contents
        return None
    return json_error("Send 'Authorization: Bearer <private API key>' or log in.", 401)


def key_or_member_required(view=None, *, role: str = Role.VIEWER):
    """For JSON endpoints: a private API key (with the method's scope) or a member's browser session.

    Sets `request.organization` and `request.sees_contents`. Answers 401/403
    JSON, never a login redirect, since the caller is a script. Works on sync
    and async views.
    """
    if view is None:
        return lambda view: key_or_member_required(view, role=role)
    return _wrap(view, lambda request: _authenticate(request, role))


CONTENTS_REFUSED = "Call contents (transcripts and messages) need the operator role; yours is viewer."


def contents_refusal(request):
    """403 JSON when the caller may not read call contents, else None."""
    if getattr(request, "sees_contents", False):
        return None
    return json_error(CONTENTS_REFUSED, 403)


def membership_context(request):
    """Templates: the current membership, and every one of the user's (the organization switcher)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    current = request_membership(request)
    return {"membership": current, "memberships": request._memberships}
