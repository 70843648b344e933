"""The audit log: who read, exported, created, revoked or changed what, when and from where.

One function writes an entry (`record`); the places that read a session's
contents (its page, its socket, the API, the export), issue or revoke
credentials, change rules, and sign users in call it. Entries are
append-only (dashboard.models.AuditEntry); they are read on the audit page
(`/audit/`), at `GET /api/audit/` and as NDJSON (`?format=ndjson`).

A failure to write an entry is logged and never fails what it records: the
operator still gets the page (an audit store that is down must not take the
on-call view with it).

An entry's `detail` is kept as its writer gave it (JSON, for scripts); people read it as a sentence
made here, by `describe`, the one place a detail becomes text (the audit page, the API's `summary`).
"""

import hashlib
import logging
import re

from asgiref.sync import sync_to_async
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.db.models import QuerySet
from django.dispatch import receiver

from dashboard.org.models import AuditEntry, Membership

logger = logging.getLogger(__name__)
Action = AuditEntry.Action


def _ip(value) -> str | None:
    import ipaddress

    try:
        return str(ipaddress.ip_address(value)) if value else None
    except ValueError:
        return None


def who(request=None, scope=None) -> tuple[str, object, str | None]:
    """(actor, user or None, ip) of an HTTP request (a member's login or an API key) or a socket's scope."""
    if request is not None:
        key = getattr(request, "api_key", None)
        ip = _ip(request.META.get("REMOTE_ADDR"))
        if key is not None:
            return f"API key {key.key_prefix}… ({key.name or 'unnamed'})", None, ip
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return user.get_username(), user, ip
        return "anonymous", None, ip
    if scope is not None:
        user = scope.get("user")
        client = scope.get("client") or (None,)
        name = user.get_username() if user is not None and user.is_authenticated else "anonymous"
        return name, (user if user is not None and user.is_authenticated else None), _ip(client[0])
    return "system", None, None


IDENTIFIER = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)+")
# What an empty value (None) means, where "none" would not say it.
NONE_WORDS = {"assignee": "nobody", "own": "removed: the organization's own apply", "until": "none (lifted)"}


def _words(key: str, value) -> str:
    """A detail's value as words: yes or no, numbers as written, lists joined, never a Python repr."""
    if value is None:
        return NONE_WORDS.get(key) or ("for ever" if key.endswith("_days") else "none")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return value.replace("_", " ") if IDENTIFIER.fullmatch(value) else value  # a field's name: its words
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(_words(key, item) for item in value) or "none"
    if isinstance(value, dict):
        return "(" + ", ".join(f"{_key(k)}: {_words(str(k), v)}" for k, v in value.items()) + ")"
    return str(value)


def _key(key) -> str:
    return str(key).replace("_", " ").strip()


def describe(detail) -> str:
    """An entry's detail as a sentence: {"role": "operator", "was": "viewer"} -> "Role: operator; was: viewer."

    Empty text says nothing and is left out; True and False read yes and no; None reads as what it means
    there (NONE_WORDS), else "none"; a list is its items joined with commas; a field's name (snake_case)
    is its words. "" for no detail."""
    if not isinstance(detail, dict):
        return _words("", detail) if detail not in (None, "", [], {}) else ""
    clauses = [f"{_key(key)}: {_words(str(key), value)}" for key, value in detail.items() if value != ""]
    if not clauses:
        return ""
    sentence = "; ".join(clauses)
    return sentence[0].upper() + sentence[1:] + "."


def _pk(organization):
    return getattr(organization, "pk", organization)


def record(organization, action: str, target: str = "", *, request=None, scope=None, actor: str = "", **detail):
    """Append one entry to the organization's audit log (never raises). `organization`: one, or its pk."""
    if organization is None:
        return
    try:
        name, user, ip = who(request, scope)
        AuditEntry.objects.create(
            organization_id=_pk(organization),
            actor=(actor or name)[:200],
            user=user,
            ip=ip,
            action=action,
            target=str(target)[:200],
            detail=detail,
        )
    except Exception:
        logger.exception("Could not write an audit entry (%s %s)", action, target)


# The only strings an entry about a session keeps once the session's contents are erased: they are the
# dashboard's own words (how it was read, how a call was ended, what came of a request), never a caller's
# or a bot's. Numbers, booleans and nulls stay too.
WORDLESS_KEYS = frozenset({"via", "mode", "outcome"})


def wordless(detail: dict) -> dict:
    """An entry's detail with no text but the dashboard's own (WORDLESS_KEYS): counts, flags and ids stay."""
    return {
        key: value
        for key, value in detail.items()
        if value is None or isinstance(value, bool | int | float) or (key in WORDLESS_KEYS and isinstance(value, str))
    }


def forget_contents(organization_id, targets, since) -> int:
    """Take the words out of the details of the organization's entries about these targets (session ids) since
    `since` (when the first began): entries written before details held none (a bot's refusal quoted whole)
    keep who did what and when.

    The one change the append-only log allows, and only of its details: an erase must reach every copy
    of a caller's words (rtvi_monitor/privacy/contents.py). Returns the entries changed.
    """
    changed = 0
    entries = AuditEntry.objects.filter(organization_id=organization_id, at__gte=since, target__in=list(targets))
    for pk, detail in entries.values_list("pk", "detail"):
        if isinstance(detail, dict) and (kept := wordless(detail)) != detail:
            # Past AuditQuerySet.update, which refuses every other change.
            changed += QuerySet.update(AuditEntry.objects.filter(pk=pk), detail=kept)
    return changed


READ_AGAIN = 60  # seconds: the same actor reading the same session again within this is one entry


def record_read(organization, session_id: str, via: str, *, request=None, scope=None) -> None:
    """Somebody read a session's contents (its page, socket, API): once per actor and session a minute.

    Opening a session page reads it three ways (the page, its socket, its messages' API); a page
    scrolled back reads more pages of messages. One entry says it: "ana read session X at 10:01".
    """
    name, _, _ = who(request, scope)
    key = "audit-read:" + hashlib.sha256(f"{_pk(organization)}\n{name}\n{session_id}".encode()).hexdigest()
    try:
        if not cache.add(key, 1, READ_AGAIN):
            return
    except Exception:  # a cache that is down means more entries, never fewer
        logger.warning("The audit log's read dedupe cache failed", exc_info=True)
    record(organization, Action.SESSION_READ, session_id, request=request, scope=scope, via=via)


async def arecord(organization, action: str, target: str = "", **kwargs) -> None:
    await sync_to_async(record)(organization, action, target, **kwargs)


async def arecord_read(organization, session_id: str, via: str, **kwargs) -> None:
    await sync_to_async(record_read)(organization, session_id, via, **kwargs)


@receiver(user_logged_in)
def _signed_in(sender, request, user, **kwargs):
    # Every organization the user belongs to: each one's admins see who can reach its data.
    for membership in Membership.objects.filter(user=user).select_related("organization"):
        record(membership.organization, Action.SIGN_IN, user.get_username(), request=request)


@receiver(user_login_failed)
def _sign_in_failed(sender, credentials, request=None, **kwargs):
    """A failed sign-in with a username that belongs to an organization: its admins should know."""
    username = (credentials or {}).get("username") or ""
    memberships = Membership.objects.filter(user__username=username).select_related("organization") if username else []
    ip = _ip(request.META.get("REMOTE_ADDR")) if request is not None else None
    for membership in memberships:
        try:
            AuditEntry.objects.create(
                organization=membership.organization,
                actor=username[:200],
                ip=ip,
                action=Action.SIGN_IN_FAILED,
                target=username[:200],
                detail={},
            )
        except Exception:
            logger.exception("Could not write an audit entry (failed sign-in)")
