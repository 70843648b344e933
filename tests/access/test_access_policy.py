"""The access policy (dashboard/access/policy.py): every door names an action, and every door does what the table says.

Three ways: every URL pattern of the real URLconf and every socket route names its action (or is
marked public, with a reason); the table answers each actor as written down here, by hand; and
through the real URLconf, each URL answers each actor as the table says: a refused one gets a
401, 403, 404 or the login page, an allowed one never a 401 or 403, and nobody of another
organization gets a 2xx for an object of this one.
"""

import json
import re
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from dashboard.access import policy as access
from dashboard.access.policy import Actor
from dashboard.org.models import ApiKey, Invitation, Membership, Role
from rtvi_monitor.alerts.models import Alert, AlertRule
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions.models import Session
from tests.access.test_roles import make_call
from tests.agents_samples import AGENT, BASE, KEY, URL
from tests.conftest import make_member
from tests.platform_samples import fake_pipecat_cloud

# --- every door names its action ------------------------------------------------------------------


def url_patterns(patterns=None, prefix="", app=None):
    """(route, pattern, app_name of the include it is in) for every pattern of the URLconf, included ones too."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from url_patterns(pattern.url_patterns, prefix + str(pattern.pattern), pattern.app_name or app)
        else:
            yield prefix + str(pattern.pattern), pattern, app


def action_of(pattern: URLPattern, app: str | None):
    """What a pattern's door asks the policy: its view's action, or the site admin's for Django's admin."""
    if app == "admin":
        return admin.site.access_action
    return getattr(pattern.callback, "access_action", None)


def actions_named(action) -> list[str]:
    return [action] if isinstance(action, str) else list(action.values())


def test_every_url_pattern_names_an_action_or_is_public():
    missing = [route for route, pattern, app in url_patterns() if action_of(pattern, app) is None]
    assert not missing, f"URL patterns with no access policy (no action, not marked public): {missing}"
    unknown = [
        (route, action)
        for route, pattern, app in url_patterns()
        for action in actions_named(action_of(pattern, app))
        if action not in access.ACTIONS
    ]
    assert not unknown, f"URL patterns naming an action dashboard/access/policy.py does not have: {unknown}"


def test_every_public_view_says_why():
    silent = [
        route
        for route, pattern, app in url_patterns()
        if app != "admin" and action_of(pattern, app) == "public" and not getattr(pattern.callback, "access_reason", "")
    ]
    assert not silent, f"Public views that do not say why they are public: {silent}"


def test_the_site_admin_asks_the_policy():
    from dashboard.access.auth import SiteAdmin

    assert isinstance(admin.site, SiteAdmin)
    assert admin.site.access_action == "site.admin"


# Each door's action, written down by hand: a door that asks for less than this is a leak, one that
# asks for more a lock-out. Keyed by URL name (the route where it has none).
DOORS = {
    "home": "sessions.figures",
    "overview_panel": "sessions.figures",
    "session_list": "sessions.figures",
    "session_detail": "sessions.figures",  # a viewer gets the figures page; contents need the role
    "api_session_list": {"GET": "sessions.figures", "DELETE": "sessions.erase"},
    "api_session_detail": {"GET": "sessions.figures", "DELETE": "sessions.erase"},
    "api_session_turns": "sessions.figures",  # a viewer gets the timings without the words
    "api_session_control": "sessions.figures",
    "api_session_audio": "sessions.figures",
    "metrics": "sessions.figures",
    "api_session_traces": "sessions.contents",
    "api_session_platform": "sessions.contents",
    "api_session_events": "sessions.contents",
    "api_session_events_page": "sessions.contents",
    "api_session_event": "sessions.contents",
    "api_session_audio_peaks": "audio.listen",
    "api_session_audio_wav": "audio.listen",
    "api_session_audio_played": "audio.listen",
    "api_session_end": "calls.control",
    "api_session_send_text": "calls.control",
    "eval_scenario_from_call": {"GET": "evals.read", "POST": "evals.write"},
    "eval_suite": {"GET": "evals.read", "POST": "evals.write"},
    "eval_suite_download": "evals.read",
    "eval_gate_page": "evals.gate",
    "agent_budget": "org.settings",
    "api_eval_upload": "evals.upload",
    "api_eval_gate": "evals.gate",
    "api_eval_runs": "evals.gate",
    "session_review": "reviews.write",
    "review_home": {"GET": "reviews.read", "POST": "reviews.write"},
    "review_queue": {"GET": "reviews.read", "POST": "reviews.write"},
    "review_reasons": "org.settings",
    "api_reviews": "reviews.read",
    "api_session_reviews": {"GET": "reviews.read", "POST": "reviews.write"},
    "agent_list": "agents.read",
    "agent_refresh": "agents.read",
    "agent_detail": "agents.read",
    "agents_json": "agents.read",
    "v1_agents": "agents.api",
    "v1_agent": "agents.api",
    "v1_agent_sessions": "agents.api",
    "v1_agent_session": "agents.api",
    "v1_agent_logs": "agents.api",
    "alert_list": "alerts.read",
    "alert_detail": "alerts.read",
    "alert_runbook": "alerts.read",
    "api_alert_list": "alerts.read",
    "api_alert_detail": "alerts.read",
    "api_alert_rules": {"GET": "alerts.read", "POST": "alerts.rules"},
    "alert_act": "alerts.work",
    "api_alert_acknowledge": "alerts.work",
    "api_alert_silence": "alerts.work",
    "api_alert_assign": "alerts.work",
    "api_alert_notes": "alerts.work",
    "audit": "audit.read",
    "api_audit": "audit.read",
    "org_settings": "org.settings",
    "org_members": "org.members",
    "org_keys": "org.settings",
    "org_alert_rules": "org.settings",
    "org_prices": "org.settings",
    "org_retention": "org.settings",
    "org_redaction": "org.settings",
    "org_recording": "org.settings",
    "org_erase": "sessions.erase",
    "switch_organization": "account",
    "accept_invitation": "public",
    "login": "public",
    "logout": "public",
    "favicon.ico": "public",
    "^(?:v1|api|ingest)/": "public",
    "v1_traces": "ingest",
    "ingest_audio": "ingest",
    "ingest_audio_chunk": "ingest",
    "oidc_authentication_callback": "public",
    "oidc_authentication_init": "public",
    "oidc_logout": "public",
}


def test_each_door_asks_for_the_action_written_down_for_it():
    doors = {pattern.name or route: action_of(pattern, app) for route, pattern, app in url_patterns() if app != "admin"}
    assert not set(doors) - set(DOORS), f"Doors this test does not know yet: {sorted(set(doors) - set(DOORS))}"
    wrong = {name: action for name, action in doors.items() if action != DOORS[name]}
    assert not wrong, f"Doors asking for another action than written down here: {wrong}"


def socket_app_action(app):
    """The action of a socket route's application: its consumer's, found under the middleware wrapping it."""
    for _ in range(10):
        if hasattr(app, "access_action"):
            return app.access_action
        consumer = getattr(app, "consumer_class", None)
        if consumer is not None:
            return getattr(consumer, "access_action", None)
        app = getattr(app, "inner", None) or getattr(app, "application", None)
        if app is None:
            return None
    return None


def test_every_socket_route_names_an_action():
    from rtvi_monitor.live.routing import websocket_urlpatterns

    missing = [str(route.pattern) for route in websocket_urlpatterns if socket_app_action(route.callback) is None]
    assert not missing, f"Socket routes with no access policy: {missing}"
    for route in websocket_urlpatterns:
        assert socket_app_action(route.callback) in access.ACTIONS, str(route.pattern)


def test_templates_ask_can_for_actions_that_exist_and_compare_no_role():
    templates = Path(settings.BASE_DIR) / "templates"
    for path in templates.rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"\.role\s*[!=]=|==\s*['\"](?:viewer|operator|admin)['\"]", text), path
        assert "sees_contents" not in text and "is_superuser" not in text, path
        for name in re.findall(r"\bcan\.(\w+)", text):
            assert name.replace("_", ".", 1) in access.ACTIONS, f"{path}: can.{name} is no action"


# --- the table, as written down by hand -------------------------------------------------------------

# Who may: anonymous, viewer, operator, admin, a read key, a write key, an ingest token, Django staff
# (no membership). 1: allowed.
ACTORS = ("anonymous", "viewer", "operator", "admin", "read key", "write key", "ingest token", "staff")
TABLE = {
    "public": "11111111",
    "account": "01110001",
    "sessions.figures": "01111000",
    "sessions.contents": "00111000",
    "audio.listen": "00111000",
    "calls.control": "00110100",
    "evals.read": "00111000",
    "evals.write": "00110100",
    "evals.upload": "00110100",
    "evals.gate": "01111000",
    "reviews.read": "01111000",
    "reviews.write": "00110100",
    "agents.read": "01111000",
    "agents.api": "00001000",
    "alerts.read": "01111000",
    "alerts.work": "00110100",
    "alerts.targets": "00011000",
    "alerts.rules": "00010100",
    "org.settings": "00010000",
    "org.members": "00010000",
    "sessions.erase": "00010100",
    "audit.read": "00011000",
    "ingest": "00000010",
    "site.admin": "00000001",
}


@pytest.fixture
def actors(org) -> dict[str, Actor]:
    def member(name, role):
        user = make_member(org, name, role)
        return Actor(user=user, membership=Membership.objects.select_related("organization").get(user=user))

    def key(scopes):
        record, _ = ApiKey.issue(org, scopes)
        record.scopes = scopes
        record.save()
        return Actor(key=record)

    staff = get_user_model().objects.create_user("root", password="x-long-password-1", is_staff=True)
    return {
        "anonymous": access.ANONYMOUS,
        "viewer": member("vi", Role.VIEWER),
        "operator": member("op", Role.OPERATOR),
        "admin": member("ad", Role.ADMIN),
        "read key": key("read"),
        "write key": key("write"),
        "ingest token": Actor(ingest_token=IngestToken.issue(org, "bot")[0]),
        "staff": Actor(user=staff),
    }


def test_the_table_is_every_action():
    assert set(TABLE) == set(access.ACTIONS)


@pytest.mark.parametrize("action", sorted(TABLE))
def test_each_actor_may_do_what_the_table_says(actors, action, org):
    for actor_name, allowed in zip(ACTORS, TABLE[action], strict=True):
        actor = actors[actor_name]
        refusal = access.refusal(actor, action)
        assert (refusal is None) == (allowed == "1"), f"{actor_name} / {action}: {refusal}"
        if refusal is not None:
            assert refusal.endswith(".") and len(refusal) > 10  # a sentence that says why
        if actor.organization_id is not None:
            assert access.allows(actor, action, org) == (allowed == "1")


@pytest.mark.parametrize("action", sorted(TABLE))
def test_nobody_of_another_organization_may_do_anything_to_this_ones(actors, action, org, other_org):
    theirs = make_member(other_org, "globex", Role.ADMIN)
    record, _ = ApiKey.issue(other_org, "globex key")
    for actor in (
        Actor(user=theirs, membership=Membership.objects.get(user=theirs)),
        Actor(key=record),
        Actor(ingest_token=IngestToken.issue(other_org, "their bot")[0]),
    ):
        assert access.allows(actor, action, org) == (action == "public"), (actor, action)


def test_recordings_may_be_kept_to_admins(actors, org):
    org.audio_role = Role.ADMIN
    org.save()
    for actor in actors.values():
        if actor.membership is not None:
            actor.membership.organization.refresh_from_db()  # the setting, as the next request reads it
    allowed = {name for name in ACTORS if access.allows(actors[name], "audio.listen")}
    assert allowed == {"admin", "read key"}
    refusal = access.refusal(actors["operator"], "audio.listen")
    assert "needs the admin role" in refusal and "yours is operator" in refusal


def test_a_viewer_is_told_which_role_reads_contents(actors):
    assert "operator role" in access.refusal(actors["viewer"], "sessions.contents")
    assert "needs the admin role" in access.refusal(actors["operator"], "org.settings")


# --- a bot's error, as a viewer sees it -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        (
            "Error executing function call [lookup_order]: card 4111 for Jane Roe",
            "Error executing function call [lookup_order]: …",
        ),
        ("TimeoutError: the caller Jane Roe at 12 Elm Street", "TimeoutError: …"),
        ("openai.RateLimitError: slow down", "openai.RateLimitError: …"),
        ("RATE_LIMITED: 12 Elm Street", "RATE_LIMITED: …"),
        ("TimeoutError", "TimeoutError"),
        ("Jane Roe said her card is 4111 1111", "error: …"),  # no colon: all words
        ("Jane Roe: card 4111", "error: …"),  # words before the colon
        ("the caller said: Jane Roe", "error: …"),
        ("", "error: …"),
        (None, "error: …"),
    ],
)
def test_a_viewer_sees_an_errors_kind_never_its_words(text, seen):
    assert access.error_kind(text) == seen


def test_an_error_with_no_colon_does_not_reach_a_viewers_overview(viewer_client, operator_client, org, agents):
    from tests.session_samples import error_event

    said = "Jane Roe asked for her balance and the bot gave up"
    session = Session.objects.create(organization=org, session_id="loud", agent=agents[0], error_count=1)
    error_event(session, 1, said, ago=60.0)
    for path in ("/", "/overview/panel/"):
        html = viewer_client.get(path).content.decode()
        assert "Jane Roe" not in html and "balance" not in html and "error: …" in html
        assert "Jane Roe" in operator_client.get(path).content.decode()


# --- through the real URLconf: every door answers as the table says ---------------------------------

SESSION = "call-1"
# Doors that take a browser's session for the rest of what they serve, but not for this method: a page
# of another site could make a browser send it, so it takes the key (the view refuses with a 403).
KEY_ONLY = {("api_session_list", "DELETE"), ("api_session_detail", "DELETE"), ("api_alert_rules", "POST")}
# The organization of these doors' objects is the credential's own: the same id in another
# organization is another object (or none), never this one's.
OWN_ORGANIZATION = {"ingest_audio", "ingest_audio_chunk", "accept_invitation"}


@pytest.fixture
def world(org, other_org, agents, httpx_mock, live_path):
    """The organization's objects (a session, an alert, an agent, an invitation) and a client per actor."""
    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.record_audio = True
    org.save()
    other_org.agents_api_base_url = "https://globex.example/v1"
    other_org.save()
    fake_pipecat_cloud(httpx_mock)
    httpx_mock.add_response(
        url=re.compile(re.escape(URL) + r"(\?.*)?"), json={"services": [AGENT]}, is_reusable=True, is_optional=True
    )
    httpx_mock.add_response(  # the other organization has no agents
        url=re.compile(r"https://globex\.example/.*"), json={"services": []}, is_reusable=True, is_optional=True
    )
    make_call(org, SESSION)
    rule = AlertRule.objects.create(organization=org, name="fatal", condition="fatal_error")
    alert = Alert.objects.create(rule=rule, organization=org, summary="Fatal error in 1 session (x)", figures={})
    _, secret = Invitation.issue(org, "new@example.com", Role.VIEWER)
    kwargs = {
        "pk": alert.pk,
        "session_id": SESSION,
        "seq": 1,
        "agent_id": AGENT["id"],
        "agent_key": "support",
        "agent_name": agents[0].name,
        "secret": secret,
        "track": "user",
        "index": 0,
    }

    def member_client(organization, name, role):
        client = Client()
        client.force_login(make_member(organization, name, role))
        return client

    def bearer_client(secret):
        return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def key(organization, scopes):
        record, secret = ApiKey.issue(organization, scopes)
        record.scopes = scopes
        record.save()
        return bearer_client(secret)

    staff = Client()
    staff.force_login(get_user_model().objects.create_user("root", password="x-long-password-1", is_staff=True))
    ours = {
        "anonymous": Client(),
        "viewer": member_client(org, "vi", Role.VIEWER),
        "operator": member_client(org, "op", Role.OPERATOR),
        "admin": member_client(org, "ad", Role.ADMIN),
        "read key": key(org, "read"),
        "write key": key(org, "write"),
        "ingest token": bearer_client(IngestToken.issue(org, "bot")[1]),
        "staff": staff,
    }
    theirs = {
        "their admin": member_client(other_org, "globex", Role.ADMIN),
        "their key": key(other_org, "read,write"),
        "their ingest token": bearer_client(IngestToken.issue(other_org, "their bot")[1]),
    }
    return kwargs, ours, theirs


def requests_to_make(kwargs) -> list[tuple[str, str, str, str, str, bool]]:
    """(name or route, method, path, action, door, whether it names an object) for a representative request of
    every non-admin URL pattern."""
    made = []
    for route, pattern, app in url_patterns():
        if app == "admin":
            continue
        callback = pattern.callback
        if pattern.name:
            path = reverse(pattern.name, kwargs={k: kwargs[k] for k in pattern.pattern.converters})
        else:
            path = "/" + route.lstrip("^").replace("(?:v1|api|ingest)/", "api/nothing-here/")
        action = callback.access_action
        door = getattr(callback, "access_door", action if action in ("public", "ingest") else "page")
        if isinstance(action, dict):
            for method, one in action.items():
                made.append((pattern.name or route, method, path, one, door, bool(pattern.pattern.converters)))
            continue
        allow = Client().get(path)
        method = "GET"
        if allow.status_code == 405:
            method = allow["Allow"].split(",")[0].strip()
        made.append((pattern.name or route, method, path, action, door, bool(pattern.pattern.converters)))
    # What erases the session, last; what ends the browsers' logins, after it.
    return sorted(made, key=lambda r: (r[0] == "logout", r[1] == "DELETE"))


def expected(actor_name: str, action: str, door: str) -> bool:
    if action == "public":
        return True
    if door == "page" and actor_name in ("read key", "write key", "ingest token"):
        return False  # pages read no key
    return TABLE[action][ACTORS.index(actor_name)] == "1"


def refused(response, action: str) -> bool:
    """A 401, a 403, or the login page (but for a public page that leads there: logging out)."""
    login = response.status_code == 302 and "/login/" in response.get("Location", "") and action != "public"
    return response.status_code in (401, 403) or login


def send(client, method: str, path: str):
    return (
        getattr(client, method.lower())(path, content_type="application/json") if method != "GET" else client.get(path)
    )


@pytest.mark.django_db(transaction=True)
def test_every_url_answers_each_actor_as_the_table_says(world):
    kwargs, ours, theirs = world
    wrong = []
    for name, method, path, action, door, has_object in requests_to_make(kwargs):
        if has_object and name not in OWN_ORGANIZATION and action != "public":
            for actor_name, client in theirs.items():  # first: what ours do may erase the object
                response = send(client, method, path)
                if 200 <= response.status_code < 300:
                    wrong.append(f"{actor_name} of another organization got {response.status_code} for {method} {path}")
        for actor_name, client in ours.items():
            response = send(client, method, path)
            allowed = expected(actor_name, action, door)
            if (name, method) in KEY_ONLY and "key" not in actor_name and allowed:
                allowed = False  # a browser's session may not send it (the view says why, 403)
            if allowed and refused(response, action):
                wrong.append(f"{actor_name} refused {method} {path} ({action}): {response.status_code}")
            if not allowed and not (refused(response, action) or response.status_code == 404):
                wrong.append(f"{actor_name} let in to {method} {path} ({action}): {response.status_code}")
    assert not wrong, "\n".join(wrong)
    assert not Session.objects.filter(session_id=SESSION).exists()  # the write key's DELETE came last, and erased it


def test_the_site_admin_is_staffs_alone(client, org, django_user_model):
    client.force_login(make_member(org, "ad", Role.ADMIN))  # an organization's admin is not the site's
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
    client.force_login(django_user_model.objects.create_user("root", password="x-long-password-1", is_staff=True))
    assert client.get("/admin/").status_code == 200


# --- sockets, through the real router -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_browser_sockets_answer_each_role_as_the_table_says(org, other_org, live_settings):
    from tests.sockets import browser_socket

    await sync_to_async(make_call)(org, "live-1", Session.Status.LIVE)

    async def cookie_of(organization, username, role):
        client = Client()
        await sync_to_async(client.force_login)(await sync_to_async(make_member)(organization, username, role))
        return f"sessionid={client.cookies['sessionid'].value}"

    cookies = {
        "anonymous": None,
        "viewer": await cookie_of(org, "vi", Role.VIEWER),
        "operator": await cookie_of(org, "op", Role.OPERATOR),
        "admin": await cookie_of(org, "ad", Role.ADMIN),
    }
    theirs = await cookie_of(other_org, "globex", Role.ADMIN)
    for path, action in (("/ws/sessions/live-1/", "sessions.contents"), ("/ws/sessions/", "sessions.figures")):
        for name, cookie in cookies.items():
            socket = browser_socket(path, cookie)
            connected, _ = await socket.connect()
            await socket.disconnect()
            assert connected == (TABLE[action][ACTORS.index(name)] == "1"), (name, path)
    socket = browser_socket("/ws/sessions/live-1/", theirs)  # an admin, of another organization
    assert not (await socket.connect())[0]
    await socket.disconnect()
    listing = browser_socket("/ws/sessions/", theirs)  # their own list: none of this organization's calls
    assert (await listing.connect())[0]
    assert "live-1" not in json.dumps(json.loads(await listing.receive_from(5)))
    await listing.disconnect()


def test_a_pages_member_is_its_current_organization(client, org, other_org):
    """The actor of a browser is the member in the organization picked now; an object of another is a 404."""
    user = make_member(org, "both", Role.OPERATOR)
    Membership.objects.create(user=user, organization=other_org, role=Role.VIEWER)
    make_call(org, "acme-call")
    client.force_login(user)
    assert client.get("/api/sessions/acme-call/events/").status_code == 200
    client.post("/organization/", {"organization": str(other_org.pk)})
    assert client.get("/api/sessions/acme-call/events/").status_code == 403  # a viewer there
    Membership.objects.filter(user=user, organization=other_org).update(role=Role.OPERATOR)
    assert client.get("/api/sessions/acme-call/events/").status_code == 404
