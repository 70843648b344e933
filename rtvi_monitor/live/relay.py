"""Relaying to browsers: a session's stored batches and its changes, and the organization's session list.

Only what is stored is relayed. Each batch carries the reducer's patch
(`SessionState.take_changes`) and the stored events; a browser that misses
one (a Redis blip) sees the gap in versions and asks for a snapshot. Every
frame is strict JSON (`to_json`).

A relay reaches the browsers watching from this process directly: the
writer hands each batch to their consumers (`Fanout`) once it is stored and
acknowledged, in the order the batches were stored. Through the channel
layer, each consumer's copy took several turns of a busy loop (a task and a
layer queue per message), and at 3,000 messages a second the relays waited
there for seconds (docs/BENCHMARKS.md, issue 15). Other server processes get
it through the channel layer when it is shared (Redis): each process has one
channel, joined to the groups its browsers watch, that hands what the others
relay to its own consumers the same way. A process subscribed to a group
gets its own relays back from Redis too, and drops them (`origin`).
"""

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from dashboard.web.http import compact_dumps
from rtvi_monitor.sessions.models import Session

if TYPE_CHECKING:
    from rtvi_monitor.live.session import LiveSession

logger = logging.getLogger(__name__)

PROCESS = uuid.uuid4().hex  # this process, as the origin of what it relays through the layer


def session_group(session_pk: int) -> str:
    return f"session-{session_pk}"


def org_group(organization_id) -> str:
    return f"org-{organization_id}-sessions"


class Watcher(Protocol):
    """A browser's consumer: takes a relayed message at once, without waiting on anything slow."""

    async def deliver(self, message: dict) -> None: ...


class _Link:
    """This process's channel in a shared layer, on one event loop: the groups it is in, and its listener."""

    def __init__(self):
        self.channel: str | None = None
        self.joined: set[str] = set()
        self.lock = asyncio.Lock()  # one membership change at a time
        self.listener: asyncio.Task | None = None


class Fanout:
    """The browsers watching each group from this process, and this process's channel for the others' relays."""

    def __init__(self):
        self.watchers: dict[str, set[Watcher]] = {}
        self.links: dict[asyncio.AbstractEventLoop, _Link] = {}  # one per event loop (one in a server; a test's each)

    @staticmethod
    def shared() -> bool:
        """Whether other processes relay through the layer (Redis), or this process is alone (in-memory)."""
        layer = get_channel_layer()
        return layer is not None and not isinstance(layer, InMemoryChannelLayer)

    async def watch(self, group: str, watcher: Watcher) -> None:
        self.watchers.setdefault(group, set()).add(watcher)
        if self.shared():
            await self._sync(group)

    async def unwatch(self, group: str, watcher: Watcher) -> None:
        members = self.watchers.get(group)
        if members is not None:
            members.discard(watcher)
            if not members:
                del self.watchers[group]
        if self.shared():
            await self._sync(group)

    async def publish_elsewhere(self, group: str, message: dict) -> None:
        """Through the layer to the other processes' watchers of the group (none when this process is alone)."""
        if self.shared():
            await get_channel_layer().group_send(
                group, {"type": "relay.remote", "origin": PROCESS, "group": group, "message": message}
            )

    async def deliver(self, group: str, message: dict) -> None:
        for watcher in list(self.watchers.get(group, ())):
            try:
                await watcher.deliver(message)
            except Exception:  # one browser's closed socket never keeps the others' relays
                logger.debug("A relay to a browser of %s failed", group, exc_info=True)

    async def _sync(self, group: str) -> None:
        """Join or leave the group through the layer as this process's watchers of it come and go."""
        layer = get_channel_layer()
        loop = asyncio.get_running_loop()
        link = self.links.get(loop)
        if link is None:
            for old in [old for old in self.links if old.is_closed()]:
                del self.links[old]
            link = self.links[loop] = _Link()
        async with link.lock:
            if link.channel is None:
                link.channel = await layer.new_channel()
            if link.listener is None or link.listener.done():
                link.listener = loop.create_task(self._listen(layer, link.channel))
            wanted = group in self.watchers
            if wanted and group not in link.joined:
                await layer.group_add(group, link.channel)
                link.joined.add(group)
            elif not wanted and group in link.joined:
                await layer.group_discard(group, link.channel)
                link.joined.discard(group)

    async def _listen(self, layer, channel: str) -> None:
        """What the other processes relay, to this process's watchers, in the order it comes."""
        async for message in received(layer, channel, "relays from other processes"):
            if message.get("type") == "relay.remote" and message.get("origin") != PROCESS:
                await self.deliver(message["group"], message["message"])


fanout = Fanout()


async def received(layer, channel: str, what: str):
    """`channel`'s messages, one at a time, for ever: a receive that fails (Redis restarting) is logged and
    tried again a second later. For a process's own listeners (relays here, control requests)."""
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("Receiving %s failed; retrying", what, exc_info=True)
            await asyncio.sleep(1)
            continue
        yield message


class _OrganizationPings:
    """One organization's pages that only need to know that its sessions changed, in this process: a watcher of
    its session list's group that turns every relay into one ping for all of them, at most every
    OVERVIEW_PING_SECONDS, the last change always pinged (late, never lost)."""

    def __init__(self):
        self.sends: set = set()  # each page's consumer's `send`
        self.last = float("-inf")  # time.monotonic() of the last ping
        self.pending: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None

    async def deliver(self, message: dict) -> None:
        if self.pending is not None:
            return  # a ping is coming: it will say this change too
        wait = self.last + settings.OVERVIEW_PING_SECONDS - time.monotonic()
        # A task of its own: never the writer's relay waiting on the pages' sends.
        self.pending = asyncio.get_running_loop().call_later(max(wait, 0), self._start)

    def _start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        self.pending = None
        self.last = time.monotonic()
        for send in list(self.sends):
            try:
                await send(text_data=PING)
            except Exception:  # a closed page's socket: its own loss
                logger.debug("A change ping to a page failed", exc_info=True)


PING = '{"type":"changed"}'


class ChangePings:
    """Pages that show figures computed on the server (the Overview) and only need to hear that an organization's
    sessions changed: the rows themselves (about 100 KB/s per page with 1,000 live calls) are never sent to
    them. Every such page of one organization in this process is pinged at the same moment, so their fetches
    that follow can share one computation of the figures (rtvi_monitor/overview/views.py, `since`)."""

    def __init__(self):
        self.organizations: dict[str, _OrganizationPings] = {}

    async def join(self, organization_id, send) -> None:
        key = str(organization_id)
        pings = self.organizations.get(key)
        if pings is None:
            pings = self.organizations[key] = _OrganizationPings()
            await fanout.watch(org_group(organization_id), pings)
        pings.sends.add(send)

    async def leave(self, organization_id, send) -> None:
        key = str(organization_id)
        pings = self.organizations.get(key)
        if pings is None:
            return
        pings.sends.discard(send)
        if not pings.sends:
            del self.organizations[key]
            if pings.pending is not None:
                pings.pending.cancel()
            await fanout.unwatch(org_group(organization_id), pings)

    def since(self, organization_id) -> float:
        """time.monotonic() of the organization's last ping from this process (-inf: none yet)."""
        pings = self.organizations.get(str(organization_id))
        return pings.last if pings is not None else float("-inf")


pings = ChangePings()


async def relay(group: str, message: dict) -> None:
    """Relay that never breaks the live path.

    A channel layer that is down (Redis restarting) loses this relay for
    other processes; the message is already stored, and a browser that sees
    the gap in versions asks for a fresh snapshot.
    """
    await relay_here(group, message)
    await relay_elsewhere(group, message)


async def relay_here(group: str, message: dict) -> None:
    """`relay`'s first half: this process's browsers (a closed one's failure is its own)."""
    await fanout.deliver(group, message)


async def relay_elsewhere(group: str, message: dict) -> None:
    """`relay`'s second half: the other processes' browsers, through the channel layer (Redis)."""
    try:
        await fanout.publish_elsewhere(group, message)
    except Exception:
        logger.warning("Relay to %s failed; browsers will resync from the database", group, exc_info=True)


def to_json(value: Any) -> str:
    """Strict JSON for a browser, compact: no NaN or Infinity ever (they become null)."""
    return compact_dumps(value)


def batch_message(live: "LiveSession", events: list[str], version_from: int) -> dict:
    """What the writer relays to a session's browsers after a stored batch: the reducer's patch, and the stored
    events (each as JSON already: `Row.as_event_json`)."""
    changes, version_to = live.take_changes()
    text = (
        f'{{"type":"batch","from":{version_from},"to":{version_to},'
        f'"changes":{to_json(changes)},"events":[{",".join(events)}]}}'
    )
    return {"type": "session.batch", "text": text, "from": version_from, "to": version_to}


async def session_changed(session: Session, event: str) -> None:
    """Tell the session's browsers and the organization's list (event: started, updated, away, back, ended)."""
    row = session.row()
    if event in ("started", "away", "back", "ended"):
        await relay(session_group(session.pk), {"type": "session.changed", "event": event, "session": row})
    await relay(org_group(session.organization_id), {"type": "session.list", "event": event, "sessions": [row]})


async def sessions_updated(sessions: list[Session]) -> None:
    """Sessions whose summaries the writer just stored: one relay per organization's list, whatever their number.

    The list socket sends them as one {"type": "updated", "sessions": [...]} frame.
    """
    by_org: dict = {}
    for session in sessions:
        by_org.setdefault(session.organization_id, []).append(session.row())
    for organization_id, rows in by_org.items():
        await relay(org_group(organization_id), {"type": "session.list", "event": "updated", "sessions": rows})
