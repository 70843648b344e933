"""Relaying to browsers, through the channel layer: a session's stored batches and its changes.

Only what is stored is relayed. Each batch carries the reducer's patch
(`SessionState.take_changes`) and the stored events; a browser that misses
one (a full channel, a Redis blip) sees the gap in versions and asks for a
snapshot. Every frame is strict JSON (`to_json`).
"""

import json
import logging
import math
from typing import TYPE_CHECKING, Any

from channels.layers import get_channel_layer

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
    """Strict JSON for a browser: no NaN or Infinity ever (they become null)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def batch_message(live: "LiveSession", events: list[dict], version_from: int) -> dict:
    """What the writer relays to a session's browsers after a stored batch: the reducer's patch and the events."""
    changes = live.state.take_changes()
    version_to = live.state.version
    text = to_json({"type": "batch", "from": version_from, "to": version_to, "changes": changes, "events": events})
    return {"type": "session.batch", "text": text, "from": version_from, "to": version_to}


async def session_changed(session: Session, event: str) -> None:
    """Tell the session's browsers and the organization's list (event: started, updated, away, back, ended)."""
    row = session.row()
    if event in ("away", "back", "ended"):
        await relay(session_group(session.pk), {"type": "session.changed", "event": event, "session": row})
    await relay(org_group(session.organization_id), {"type": "session.list", "event": event, "session": row})
