"""Relaying to browsers, through the channel layer: a session's stored batches and its changes.

Only what is stored is relayed. Each batch carries the reducer's patch
(`SessionState.take_changes`) and the stored events; a browser that misses
one (a full channel, a Redis blip) sees the gap in versions and asks for a
snapshot. Every frame is strict JSON (`to_json`).
"""

import logging
import time
from typing import TYPE_CHECKING, Any

from channels.layers import get_channel_layer
from django.conf import settings

from dashboard.http import strict_dumps
from rtvi_monitor.models import Session

if TYPE_CHECKING:
    from rtvi_monitor.registry import LiveSession

logger = logging.getLogger(__name__)


def session_group(session_pk: int) -> str:
    return f"session-{session_pk}"


def org_group(organization_id) -> str:
    return f"org-{organization_id}-sessions"


async def relay(group: str, message: dict) -> None:
    """group_send that never breaks the live path.

    A channel layer that is down (Redis restarting) loses this relay; the
    message is already stored, and a browser that sees the gap in versions
    asks for a fresh snapshot.
    """
    try:
        await get_channel_layer().group_send(group, message)
    except Exception:
        logger.warning("Relay to %s failed; browsers will resync from the database", group, exc_info=True)


def to_json(value: Any) -> str:
    """Strict JSON for a browser, compact: no NaN or Infinity ever (they become null)."""
    return strict_dumps(value, separators=(",", ":"))


def batch_message(live: "LiveSession", events: list[dict], version_from: int) -> dict:
    """What the writer relays to a session's browsers after a stored batch: the reducer's patch and the events."""
    changes = live.state.take_changes()
    version_to = live.state.version
    text = to_json({"type": "batch", "from": version_from, "to": version_to, "changes": changes, "events": events})
    return {"type": "session.batch", "text": text, "from": version_from, "to": version_to}


async def session_changed(session: Session, event: str) -> None:
    """Tell the session's browsers and the organization's list (event: started, updated, away, back, ended)."""
    row = session.row()
    if event in ("started", "away", "back", "ended"):
        await relay(session_group(session.pk), {"type": "session.changed", "event": event, "session": row})
    await relay(org_group(session.organization_id), {"type": "session.list", "event": event, "sessions": [row]})


async def sessions_updated(sessions: list[Session]) -> None:
    """Sessions whose summaries the writer just stored: one relay per organization's list, whatever their number.

    The list socket sends each as its own {"type": "updated"} frame, as before.
    """
    by_org: dict = {}
    for session in sessions:
        by_org.setdefault(session.organization_id, []).append(session.row())
    for organization_id, rows in by_org.items():
        await relay(org_group(organization_id), {"type": "session.list", "event": "updated", "sessions": rows})


# A frame to a browser longer than this goes as parts (daphne refuses to send
# more than 1 MiB at once; a part's text may double when escaped).
FRAME_PART = 256 * 1024


def parts(text: str) -> list[str]:
    """A frame as the WebSocket messages that carry it: itself, or {"type": "part"} pieces in order."""
    if len(text) <= FRAME_PART:
        return [text]
    return [
        to_json({"type": "part", "data": text[start : start + FRAME_PART], "last": start + FRAME_PART >= len(text)})
        for start in range(0, len(text), FRAME_PART)
    ]


class BrowserStream:
    """What one browser was sent and has acknowledged (in state versions), and so what it gets next.

    More than BROWSER_MAX_LAG messages unacknowledged, the browser is told to
    resync and sent nothing more until it asks for a snapshot; silent for
    BROWSER_STALL_TIMEOUT after that, it is closed. Server memory stays
    bounded whatever the browser does.
    """

    def __init__(self):
        self.sent = self.acked = 0
        self.paused_since: float | None = None

    def restart(self, version: int) -> None:
        """A snapshot at `version` went out."""
        self.sent = self.acked = version
        self.paused_since = None

    def acknowledge(self, version) -> None:
        if isinstance(version, int) and not isinstance(version, bool):
            self.acked = max(self.acked, min(version, self.sent))

    def take(self, version: int) -> str:
        """What to do with a batch that brings the state to `version`: send, skip, resync or stalled."""
        if self.paused_since is not None:
            return "stalled" if time.monotonic() - self.paused_since > settings.BROWSER_STALL_TIMEOUT else "skip"
        if version <= self.sent:
            return "skip"  # the snapshot had it already
        if self.sent - self.acked > settings.BROWSER_MAX_LAG:
            self.paused_since = time.monotonic()
            return "resync"
        self.sent = version
        return "send"
