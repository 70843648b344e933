"""A caller's id, as the dashboard keeps it: a pseudonym, and a key stored beside the session.

A message's `data.user_id` (user-transcription, user-input...) is the caller's, often their number. It
is stored, relayed and shown as "caller:" and the first characters of its key (sessions/models.caller_key),
the same for the same caller; the key itself goes in with the session's first row that names the caller
(`Row.caller`, stored as a SessionCaller: erasure by caller finds the sessions). Plain Python: the session
(live/session.py) asks it while it judges a frame.
"""

from typing import Any

from rtvi_monitor.sessions.models import caller_key

MAX_CALLERS = 16  # user_id keys cached for one session (a call has one caller, a conference a few)
CALLER_PREFIX = "caller:"  # what a message's user_id becomes: this and the first characters of its key
CALLER_SHOWN = 12


def user_id_of(frame: Any) -> str:
    """The `user_id` a message's data names, as the bot sent it; or ''."""
    message = frame.get("message") if isinstance(frame, dict) and "seq" in frame else frame
    data = message.get("data") if isinstance(message, dict) else None
    user_id = data.get("user_id") if isinstance(data, dict) else None
    return user_id if isinstance(user_id, str) and 0 < len(user_id) <= 200 else ""


def _with_user_id(frame: Any, user_id: str) -> Any:
    """A copy of the frame whose message's data.user_id is `user_id` (the frame as received is left alone)."""
    if isinstance(frame, dict) and "seq" in frame:
        return {**frame, "message": _with_user_id(frame["message"], user_id)}
    return {**frame, "data": {**frame["data"], "user_id": user_id}}


class Callers:
    """A session's callers: their keys by the user_id the bot sent, and the keys stored with it already."""

    __slots__ = ("keys", "linked")

    def __init__(self):
        self.keys: dict[str, str] = {}  # user_id -> its key, for the session's callers
        self.linked: set[str] = set()  # the keys stored with the session (a row's `caller`, once it is stored)

    def pseudonymous(self, frame: Any, user_id: str, organization_id) -> tuple[Any, str]:
        """`frame` with its user_id (`user_id_of`) as the caller's pseudonym, and the caller's key."""
        key = self.keys.get(user_id)
        if key is None:
            key = caller_key(organization_id, user_id)  # the fallbacks' are for finding, not for making
            if len(self.keys) < MAX_CALLERS:
                self.keys[user_id] = key
        return _with_user_id(frame, CALLER_PREFIX + key[:CALLER_SHOWN]), key
