"""What the live path tells the other features: a session ended.

`session_ended` is sent once per session the lifecycle ends (live/lifecycle.py: a
bot that finished, one away past the grace, a fatal error, a dead server
process), with `session`: its Session row as stored by the end (status, end_kind,
end_reason and its final `state`, agent loaded). It is sent on the lifecycle's
database thread, right after the transaction that ended it: a receiver may query
and write; it runs beside the sweep, never on the event loop. A receiver that
raises is logged, and the others still hear of the end.

Receivers are connected in the wiring (rtvi_monitor/apps.py), never by the live
path: audio compares an ended call's recording with its frozen turns, and the call's turn figures are kept.
"""

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)

session_ended = Signal()  # kwargs: session


def tell_ended(session) -> None:
    """Send `session_ended` for `session` (the lifecycle's, once per ended session)."""
    for receiver, result in session_ended.send_robust(sender=session.__class__, session=session):
        if isinstance(result, Exception):
            logger.error(
                "A receiver of session_ended (%s) failed for session %s",
                getattr(receiver, "__qualname__", receiver),
                session.session_id,
                exc_info=result,
            )
