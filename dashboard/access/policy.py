"""Who may do what: the one access policy every door asks (pages, JSON, sockets, uploads, the site admin).

An actor is a member of an organization (a user with a role there: viewer < operator < admin), a
private API key of an organization (with scopes: "read", "write"), a bot's ingest token, a signed-in
user who belongs to no organization, or nobody (anonymous). An action is one line of ACTIONS below:
the least role a member needs, the scope a key needs (or that no key may do it). `allows` answers
yes or no; `refusal` says why not, in a sentence a person can act on.

    action             member            key      what it is
    public             anyone            anyone   login, logout, the favicon, unknown machine paths (404)
    account            signed in         no       pick one's organization (a member of it or not yet)
    sessions.figures   viewer            read     sessions' figures: status, counts, latency, cost, the
                                                  Overview, the live list, metrics, a recording's figures
    sessions.contents  operator          read     what callers and bots said: transcripts, messages, errors'
                                                  text, traces, log lines, the session socket, exports
    audio.listen       operator or the   read     a call's recording (the player, waveform, WAV download);
                       audio_role                 Settings → Recording may raise it to admin
    calls.control      operator          write    end a live call, send text into it
    evals.read         operator          read     eval scenarios made from calls (they hold the caller's words)
    evals.write        operator          write    save and delete them
    evals.upload       operator          write    upload an eval run's results.jsonl (a CI step's key)
    evals.gate         viewer            read     eval runs' figures and the deploy gate's verdict
    reviews.read       viewer            read     calls' review marks: verdicts, reasons, counts, queues, the bad
                                                  share (a mark's note is call contents: sessions.contents)
    reviews.write      operator          write    mark a call or a turn, make, assign or delete a review queue
    agents.read        viewer            read     the agents pages and /api/agents/ (log lines: contents)
    agents.api         no                read     the built-in agents API, /v1/agents (Pipecat Cloud's)
    alerts.read        viewer            read     alerts and rules (webhook addresses masked)
    alerts.work        operator          write    acknowledge, silence, assign, note
    alerts.targets     admin             read     webhook addresses whole (a Slack hook's path is a password)
    alerts.rules       admin             write    create alert rules through the API
    org.settings       admin             no       the organization's settings pages
    org.members        admin             no       its members, roles and invitations
    sessions.erase     admin             write    erase a call or a caller's calls, for good
    audit.read         admin             read     the audit log
    ingest             ingest token      no       a bot's messages, audio and traces
    site.admin         Django staff      no       the site admin, for the people who run the installation

The contents rule, once: a viewer gets figures, never a caller's or a bot's words; errors' text
included (`error_kind` is all a viewer sees of a bot's error). Keys are the organization's own
scripts: "read" reads contents too.

Doors: dashboard/access/auth.py (`member_required(action)` for pages, `key_or_member_required(action)` for
JSON, `ingest_token` for bots' uploads, `public(reason)`, the site admin's `has_permission`),
rtvi_monitor/live/consumers.py (sockets) and templates, through the `can` context variable
(`{% if can.org_settings %}`). tests/access/test_access_policy.py walks every URL and socket route and
fails on one that names no action.
"""

import re
from dataclasses import dataclass
from typing import Any

from dashboard.org.models import Role

PUBLIC = "public"
SIGNED_IN = "signed in"  # `account`: any signed-in user, a member of an organization or not
INGEST = "ingest token"
STAFF = "staff"


@dataclass(frozen=True)
class Action:
    name: str
    role: str | None  # the least role a member needs (a Role), PUBLIC, SIGNED_IN, INGEST, STAFF, or None: no member
    key: str | None  # the scope a private API key needs, or None: no key may
    says: str  # what it is, for refusals
    role_setting: str = ""  # an Organization field that may ask more than `role` (never less)


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in [
        Action("public", PUBLIC, None, "anything public"),
        Action("account", SIGNED_IN, None, "choose an organization"),
        Action("sessions.figures", Role.VIEWER, "read", "see sessions' figures"),
        Action("sessions.contents", Role.OPERATOR, "read", "read call contents (transcripts and messages)"),
        Action("audio.listen", Role.OPERATOR, "read", "listen to calls", role_setting="audio_role"),
        Action("calls.control", Role.OPERATOR, "write", "end a call or send text into it"),
        # Scenarios hold the caller's words (their turns' text): an operator's, as call contents are.
        Action("evals.read", Role.OPERATOR, "read", "see calls saved as eval scenarios"),
        Action("evals.write", Role.OPERATOR, "write", "save calls as eval scenarios"),
        # An eval run's results hold no words (rtvi_monitor/evals/models.py EvalRun): a CI step's key uploads
        # them; the gate's verdict and table are figures, as an agent's page is.
        Action("evals.upload", Role.OPERATOR, "write", "upload eval runs' results"),
        Action("evals.gate", Role.VIEWER, "read", "see eval runs and the deploy gate"),
        # A mark's verdict and reasons are no words; its note is, and is shown by `sessions.contents` alone.
        Action("reviews.read", Role.VIEWER, "read", "see calls' reviews (verdicts, reasons, counts)"),
        Action("reviews.write", Role.OPERATOR, "write", "mark calls and make review queues"),
        Action("agents.read", Role.VIEWER, "read", "see the agents"),
        Action("agents.api", None, "read", "use the agents API (/v1)"),
        Action("alerts.read", Role.VIEWER, "read", "see alerts"),
        Action("alerts.work", Role.OPERATOR, "write", "work on alerts"),
        Action("alerts.targets", Role.ADMIN, "read", "see webhook addresses whole"),
        Action("alerts.rules", Role.ADMIN, "write", "create alert rules"),
        Action("org.settings", Role.ADMIN, None, "change the organization's settings"),
        Action("org.members", Role.ADMIN, None, "manage the organization's members"),
        Action("sessions.erase", Role.ADMIN, "write", "erase calls"),
        Action("audit.read", Role.ADMIN, "read", "read the audit log"),
        Action("ingest", INGEST, None, "send a bot's messages, audio or traces"),
        Action("site.admin", STAFF, None, "open the site admin"),
    ]
}


@dataclass(frozen=True)
class Actor:
    """Who asks: at most one of a user (with their current membership, if any), a key, an ingest token."""

    user: Any = None
    membership: Any = None  # dashboard.models.Membership: the organization the user works in now
    key: Any = None  # dashboard.models.ApiKey
    ingest_token: Any = None  # rtvi_monitor.models.IngestToken

    @property
    def signed_in(self) -> bool:
        return self.user is not None and self.user.is_authenticated

    @property
    def anonymous(self) -> bool:
        return not (self.signed_in or self.key or self.ingest_token)

    @property
    def organization_id(self):
        for credential in (self.membership, self.key, self.ingest_token):
            if credential is not None:
                return credential.organization_id
        return None


ANONYMOUS = Actor()
NO_ORGANIZATION = "Your account belongs to no organization; ask an admin of one to invite you."
CONTENTS_REFUSED = "Call contents (transcripts and messages) need the operator role; yours is {role}."
ANOTHER_ORGANIZATION = "That belongs to another organization."


def role_refusal(membership, role: str) -> str:
    return (
        f"This needs the {role} role in {membership.organization}; yours is {membership.role}. "
        "An admin of the organization can change it."
    )


def _action(name: str) -> Action:
    try:
        return ACTIONS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not an action of dashboard/access/policy.py (ACTIONS)") from None


def needed_role(action: str, organization=None) -> str | None:
    """The least role a member needs: the table's, or the organization's setting when that asks more."""
    entry = _action(action)
    asked = getattr(organization, entry.role_setting, "") if entry.role_setting and organization else ""
    return asked if Role.rank(asked) > Role.rank(entry.role) else entry.role


def refusal(actor: Actor, action: str, organization=None, method: str = "") -> str | None:
    """Why `actor` may not do `action` (to an object of `organization`, an Organization or its id), or None.

    `method`: the HTTP method a key's request used, named in a scope refusal ("POST needs 'write'").
    """
    entry = _action(action)
    if entry.role == PUBLIC:
        return None
    if organization is not None and actor.organization_id is not None:
        wanted = getattr(organization, "pk", organization)
        if str(actor.organization_id) != str(wanted):
            return ANOTHER_ORGANIZATION
    if entry.role == INGEST:
        return None if actor.ingest_token is not None else "Send 'Authorization: Bearer <ingest token>'."
    if actor.key is not None:
        if entry.key is None:
            return f"A private API key cannot {entry.says}: that takes a member's login."
        if not actor.key.allows(entry.key):
            return f"This API key's scopes are {actor.key.scopes!r}; {method or entry.name} needs {entry.key!r}."
        return None
    if not actor.signed_in:
        return "Log in first."
    if entry.role == STAFF:
        staff = actor.user.is_active and actor.user.is_staff
        return None if staff else "The site admin is for the people who run the installation (staff)."
    if entry.role == SIGNED_IN:
        return None
    membership = actor.membership
    if membership is None:
        return NO_ORGANIZATION
    if entry.role is None:
        return f"Members cannot {entry.says}: it takes a private API key."
    role = needed_role(action, membership.organization)
    if Role.rank(membership.role) >= Role.rank(role):
        return None
    if action == "sessions.contents":
        return CONTENTS_REFUSED.format(role=membership.role)
    if action == "audio.listen":
        return f"Listening to calls needs the {role} role in {membership.organization}; yours is {membership.role}."
    return role_refusal(membership, role)


def allows(actor: Actor, action: str, organization=None) -> bool:
    """Whether `actor` may do `action` (to an object of `organization`, when given)."""
    return refusal(actor, action, organization) is None


class Permissions:
    """What an actor may do, for templates: `{% if can.org_settings %}` (an action's dot as an underscore)."""

    def __init__(self, actor: Actor):
        self.actor = actor
        self._known: dict[str, bool] = {}

    def __getitem__(self, name: str) -> bool:
        action = name.replace("_", ".", 1)
        if action not in ACTIONS:
            raise KeyError(name)
        if action not in self._known:
            self._known[action] = allows(self.actor, action)
        return self._known[action]

    def __getattr__(self, name: str) -> bool:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# --- what a viewer sees of a bot's error ------------------------------------------------------------

# A kind is shown only when it is the bot's code speaking, never words a caller could have put there:
# Pipecat's "Error executing function call [lookup_order]", an exception's class ("TimeoutError",
# "openai.RateLimitError"), an upper-case code ("RATE_LIMITED"). Anything else is just "error".
_KINDS = [
    re.compile(r"Error executing function call \[[\w.<>-]{1,80}\]"),
    re.compile(r"(?:[A-Za-z_]\w{0,40}\.){0,4}[A-Z]\w{0,60}(?:Error|Exception|Timeout|Failure|Warning)"),
    re.compile(r"[A-Z][A-Z0-9_]{2,40}"),
]


def error_kind(text) -> str:
    """What a viewer sees of a bot's error: its kind ("TimeoutError: …"), never its words.

    The kind is what comes before the first colon, when that is one of the shapes code writes
    (_KINDS); otherwise "error: …". An error with no colon is its kind only when it is one whole.
    """
    head, colon, _ = str(text or "").partition(":")
    head = head.strip()
    if any(kind.fullmatch(head) for kind in _KINDS):
        return f"{head}: …" if colon else head  # "TimeoutError" alone says no more than its kind
    return "error: …"
