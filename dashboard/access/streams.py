"""Streams held open by a private API key or a member: the access policy asked again between chunks.

A long answer (a session's messages, the audit log, an hour's WAV) is sent while the key that asked may
be revoked or expire, and the member who asked may be removed, demoted below the view's action or sign
out. As a browser's socket is, the access policy is asked again every BROWSER_ACCESS_CHECK seconds
between chunks, for the action the door admitted the request for (dashboard/access/auth.py records it as
`request.access_action`), with the actor read again (auth.actor_now); the stream ends at the first chunk
after it stopped being allowed. Between checks a chunk costs a time comparison.
"""

import time
from collections.abc import AsyncIterator, Iterable, Iterator

from asgiref.sync import sync_to_async
from django.conf import settings

from dashboard.access import policy as access
from dashboard.access.auth import actor_now

REVOKED_MID_STREAM = "The API key was revoked or expired while this was being sent; the rest was not sent."


def still_allowed(request) -> bool:
    """Whether the request's actor, read again now, may still do the action its door admitted it for.

    A key is read again (revoked or expired: no); a member too (removed, role lowered, signed out: no).
    A request no door admitted (no key, no action recorded) has nothing to lose: yes.
    """
    action = getattr(request, "access_action", None)
    if action is None and getattr(request, "api_key", None) is None:
        return True
    actor = actor_now(request)
    if actor.anonymous:
        return False
    return action is None or access.allows(actor, action, getattr(request, "organization", None))


def while_key_valid(request, chunks: Iterable, closing: str = "") -> Iterator:
    """`chunks`, ended early (with `closing` last) should the request's key or member stop being allowed
    meanwhile (still_allowed, asked every BROWSER_ACCESS_CHECK seconds)."""
    every, checked = settings.BROWSER_ACCESS_CHECK, time.monotonic()
    for chunk in chunks:
        if time.monotonic() - checked >= every:
            if not still_allowed(request):
                if closing:
                    yield closing
                return
            checked = time.monotonic()
        yield chunk


async def awhile_key_valid(request, chunks: AsyncIterator, closing: str = "") -> AsyncIterator:
    """while_key_valid, for an asynchronous stream."""
    every, checked = settings.BROWSER_ACCESS_CHECK, time.monotonic()
    async for chunk in chunks:
        if time.monotonic() - checked >= every:
            if not await sync_to_async(still_allowed)(request):
                if closing:
                    yield closing
                return
            checked = time.monotonic()
        yield chunk
