"""The sessions an alert names, as its page lists them: every one, newest first, a page at a time.

An alert keeps the ids of the sessions it fired on (rules.py, up to SESSIONS_NAMED of each round, merged
while it fires). Those still stored come first, newest first; those no longer stored (erased, or past
retention) follow, by id alone, in the order the alert named them.
"""

from dataclasses import dataclass

from rtvi_monitor.alerts.models import Alert
from rtvi_monitor.sessions.models import Session

SESSIONS_PAGE = 20  # sessions on one page of an alert's list


@dataclass
class NamedPage:
    """One page of an alert's sessions."""

    sessions: list[Session]  # stored, newest first
    gone: list[str]  # named, no longer stored: on the last pages
    number: int  # this page, from 1
    pages: int  # at least 1
    total: int  # every session the alert names

    @property
    def first(self) -> int:
        """The place of this page's first session in the whole list, from 1 (0 when there is none)."""
        return (self.number - 1) * SESSIONS_PAGE + 1 if self.total else 0

    @property
    def last(self) -> int:
        return self.first + len(self.sessions) + len(self.gone) - 1 if self.total else 0


def named_sessions(alert: Alert, number: int) -> NamedPage:
    """Page `number` (from 1; past the last, the last) of the sessions `alert` names."""
    ids = list(dict.fromkeys(alert.session_ids or []))
    stored = (
        Session.objects.filter(organization_id=alert.organization_id, session_id__in=ids)
        .select_related("agent")
        .order_by("-started_at", "-pk")
    )
    known = set(stored.values_list("session_id", flat=True))
    gone = [sid for sid in ids if sid not in known]
    total = len(known) + len(gone)
    pages = max(1, -(-total // SESSIONS_PAGE))
    number = min(max(number, 1), pages)
    start, end = (number - 1) * SESSIONS_PAGE, number * SESSIONS_PAGE
    shown = list(stored[start:end]) if start < len(known) else []
    gone_shown = gone[max(0, start - len(known)) : max(0, end - len(known))]
    return NamedPage(shown, gone_shown, number, pages, total)
