"""The doors: who is asking (a member's browser, a script's key, a bot's token), and the access policy asked.

What each actor may do is dashboard/access/policy.py's (its docstring has the whole table); this module
finds the actor and answers a refusal the way its door speaks:

- Pages: `member_required(action)`: a login redirect, else a 403 page that says why (no
  organization, or a role below the action's).
- JSON: `key_or_member_required(action)`: a private API key (the scope the action needs; expired
  or revoked keys are refused) or a member's browser session; 401/403 JSON, never a redirect. The
  action may differ by method: `key_or_member_required({"GET": "alerts.read", "POST": "alerts.rules"})`.
- Bots' uploads: `ingest_token(request)` (the view is marked `ingest_door`).
- Public views: `public(reason)`. The site admin: `SiteAdmin.has_permission` (`site.admin`).
- Sockets: `scope_actor(scope)` (rtvi_monitor/live/consumers.py).
- Templates: `can` (`{% if can.org_settings %}`), from `membership_context`.

Each decorator records its action on the view (`view.access_action`, and `view.access_door`: a
"page" reads no key); tests/access/test_access_policy.py fails on a URL that has none. A user belongs to
one or more organizations and works in one at a time: the one picked with the switcher (kept under
ORGANIZATION_SESSION_KEY), else the first by name. Django's is_staff opens the site admin only.
"""

from functools import wraps
from importlib import import_module
from inspect import iscoroutinefunction

from asgiref.sync import sync_to_async
from django.contrib.admin import AdminSite
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseForbidden
from django.template.loader import render_to_string
from django.urls import include

from dashboard.access import policy as access
from dashboard.access.policy import Actor, Permissions
from dashboard.org.models import ApiKey, Membership
from dashboard.web.http import bearer_token, json_error

ORGANIZATION_SESSION_KEY = "organization"


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


def member_actor(request) -> Actor:
    """A browser's actor: its signed-in user in the organization they work in now (no key is read)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return access.ANONYMOUS
    return Actor(user=user, membership=request_membership(request))


def scope_actor(scope) -> Actor:
    """The same for a browser's socket: its user, and the organization its browser session has picked."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return access.ANONYMOUS
    return Actor(user=user, membership=membership_of(user, _chosen(scope.get("session"))))


def actor_now(request) -> Actor:
    """The actor a door admitted, read again now (a stream held open asks the policy with it again,
    dashboard/access/streams.py): its key while still valid; its member while their browser is still
    signed in, with their membership as the database has it now (removed: none; a lowered role); else nobody."""
    key = getattr(request, "api_key", None)
    if key is not None:
        return Actor(key=key) if key.still_valid() else access.ANONYMOUS
    user, session = getattr(request, "user", None), getattr(request, "session", None)
    session_key = getattr(session, "session_key", None)
    if user is None or not user.is_authenticated or session_key is None or not session.exists(session_key):
        return access.ANONYMOUS  # signed out (or the login expired) since
    membership = getattr(request, "membership", None)
    if membership is not None:
        found = Membership.objects.filter(pk=membership.pk, user=user, user__is_active=True)
        membership = found.select_related("organization").first()
    return Actor(user=user, membership=membership)


def _admit(request, actor: Actor, action: str) -> None:
    """What a view behind a door reads: who asks, their organization, what they may do, and the action they
    were admitted for (a stream asks it again: dashboard/access/streams.py)."""
    request.actor, request.can, request.access_action = actor, Permissions(actor), action
    request.membership, request.api_key = actor.membership, actor.key
    credential = actor.membership or actor.key
    request.organization = credential.organization if credential is not None else None
    request.sees_contents = request.can.sessions_contents  # the contents rule (access.py), asked once


def _action_of(actions, request) -> str:
    return actions if isinstance(actions, str) else actions.get(request.method, "public")


def _forbidden_page(request, message: str):
    html = render_to_string("web/forbidden.html", {"message": message}, request=request)
    return HttpResponseForbidden(html)


def _action_of(actions, request) -> str | None:
    """The action a request asks for: the door's one, or its method's (None: the door takes no such method)."""
    return actions if isinstance(actions, str) else actions.get(request.method)


def _member_check(request, actions):
    """Admits a signed-in member the action allows; else the login redirect or a 403 page saying why."""
    actor = member_actor(request)
    if actor.anonymous:
        return redirect_to_login(request.get_full_path(), "login")
    action = _action_of(actions, request)
    refused = access.refusal(actor, action) if action else f"{request.method} is not a method of this page."
    if refused:
        return _forbidden_page(request, refused)
    _admit(request, actor, action)
    return None


def _key_or_member_check(request, actions):
    """Admits a private API key or a signed-in member the action allows; else a 401/403 JSON saying why."""
    action = _action_of(actions, request)
    if action is None:
        return json_error(f"Method {request.method} is not allowed here.", 405)
    keys_only = access.ACTIONS[action].role is None  # a member's browser session is not read at all
    token = bearer_token(request)
    if token:
        key = ApiKey.objects.find(token)
        if key is None:
            return json_error("Unknown, revoked or expired API key.", 401)
        actor = Actor(key=key)
    elif keys_only:
        return json_error("Missing 'Authorization: Bearer <private API key>' header.", 401)
    else:
        actor = member_actor(request)
        if actor.anonymous:
            return json_error("Send 'Authorization: Bearer <private API key>' or log in.", 401)
    if refused := access.refusal(actor, action, method=request.method):
        return json_error(refused, 403)
    if actor.key is not None:
        actor.key.touch()
    _admit(request, actor, action)
    return None


def _wrap(view, check, actions, door: str):
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            refused = await sync_to_async(check)(request, actions)
            return refused or await view(request, *args, **kwargs)

        wrapper = async_wrapper
    else:

        @wraps(view)
        def wrapper(request, *args, **kwargs):
            return check(request, actions) or view(request, *args, **kwargs)

    wrapper.access_action, wrapper.access_door = actions, door
    return wrapper


def _known(actions):
    for action in [actions] if isinstance(actions, str) else actions.values():
        access.ACTIONS[action]  # a misspelt action fails at import, not at the first request
    return actions


def member_required(actions):
    """Pages: a signed-in member whose role allows the action (dashboard/access/policy.py)."""
    _known(actions)
    return lambda view: _wrap(view, _member_check, actions, "page")


def key_or_member_required(actions):
    """JSON: a private API key or a member's browser session that the action allows (dashboard/access/policy.py).

    `actions`: one action, or one per method ({"GET": ..., "DELETE": ...}). Sets `request.actor`,
    `request.can`, `request.organization`, `request.membership` / `request.api_key` and
    `request.sees_contents`. Answers 401/403 JSON, never a login redirect, since the caller is a
    script. Works on sync and async views.
    """
    _known(actions)
    return lambda view: _wrap(view, _key_or_member_check, actions, "json")


def public(reason: str):
    """A view anyone may open; `reason` says why it needs no actor (read by tests/access/test_access_policy.py)."""

    def mark(view):
        view.access_action, view.access_reason = "public", reason
        return view

    return mark


def public_include(urlconf: str, reason: str):
    """`include(urlconf)` of another package's views, every one of them public for `reason`."""
    module = import_module(urlconf)
    for pattern in module.urlpatterns:
        public(reason)(pattern.callback)
    return include(module)


def ingest_door(view):
    """A bot's upload (`ingest`): the view's first step is `ingest_token(request)`, on the thread it stores on."""
    view.access_action = "ingest"
    return view


def ingest_token(request):
    """(the request's ingest token, None), or (None, the 401 JSON to answer)."""
    from rtvi_monitor.live.models import IngestToken

    token = IngestToken.objects.find(bearer_token(request))
    if access.refusal(Actor(ingest_token=token), "ingest"):
        return None, json_error("Send 'Authorization: Bearer <ingest token>' (the token the bot streams with).", 401)
    return token, None


class SiteAdmin(AdminSite):
    """Django's site admin, opened by the access policy's `site.admin` (the installation's staff)."""

    access_action = "site.admin"

    def has_permission(self, request):
        user = getattr(request, "user", None)
        actor = Actor(user=user) if user is not None and user.is_authenticated else access.ANONYMOUS
        return access.allows(actor, self.access_action)


def membership_context(request):
    """Templates: the current membership, every one of the user's (the switcher), and what they may do (`can`)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {"can": Permissions(access.ANONYMOUS)}
    current = request_membership(request)
    can = getattr(request, "can", None) or Permissions(Actor(user=request.user, membership=current))
    return {"membership": current, "memberships": request._memberships, "can": can}
