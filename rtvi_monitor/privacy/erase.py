"""Erasing on request: one session, or every session of one caller (by the keyed hash of their id), from
every place its contents are kept (privacy/contents.py), then its row, in one transaction, with what
was removed counted for the audit log.
"""

from rtvi_monitor.sessions.models import Session
from rtvi_monitor.sessions.queries import sessions_of_caller


def erase_session(session: Session) -> dict | None:
    """Erase the session from every place its contents are kept (rtvi_monitor/privacy/contents.py), then its row, in
    one transaction: what was erased ({"messages": n, "spans": n, and each other place that changed}).

    None, and nothing deleted, while it is live: its bot would go on streaming into a session that
    no longer exists (end the call first; a bot that reconnects later starts a new one).
    """
    from django.db import transaction

    from rtvi_monitor.privacy import contents

    with transaction.atomic():
        locked = Session.objects.select_for_update().filter(pk=session.pk, status=Session.Status.ENDED).first()
        if locked is None:
            return None
        erased = contents.erase([locked])
        locked.delete()
    contents.settle()
    return _erased(erased)


def _erased(counts: dict) -> dict:
    """What an erase says it did: messages and spans always, the other places when they changed (the row's
    own fields went with it)."""
    others = {"audio_chunks" if k == "audio" else k: n for k, n in counts.items() if n and k != "derived"}
    return {"messages": 0, "spans": 0, **others}


def erase_caller(organization, user_id: str) -> dict:
    """Erase every ended session of one caller: what went, and the live ones left (erase again once they end)."""
    erased, live, messages, spans = [], [], 0, 0
    for session in sessions_of_caller(organization, user_id).order_by("started_at"):
        result = erase_session(session)
        if result is None:
            live.append(session.session_id)
            continue
        erased.append(session.session_id)
        messages += result["messages"]
        spans += result["spans"]
    return {"erased": erased, "live": live, "messages": messages, "spans": spans}
