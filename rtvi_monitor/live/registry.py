"""The sessions whose bot is connected to this process, and bot connections per ingest token.

A session is loaded (its state replayed from what is stored) when its first
bot connects here, and let go when its last one leaves: a bot that comes back,
here or to another process, is loaded afresh, so no process works from a stale copy.
"""

import asyncio
import uuid

from channels.db import database_sync_to_async

from rtvi_monitor.live.session import LiveSession, held_seqs
from rtvi_monitor.sessions.events import load_state
from rtvi_monitor.sessions.models import Session

SERVER_ID = uuid.uuid4().hex  # this process, for as long as it runs (Session.holder, ServerProcess, control's inbox)


class Registry:
    """The sessions with a bot connected to this process, and bot connections per ingest token."""

    def __init__(self):
        self.sessions: dict[int, LiveSession] = {}
        self.per_token: dict[int, int] = {}
        self.connecting = 0  # bots between their handshake and attach(): the sweep leaves them be
        self.loading: dict[int, asyncio.Future] = {}

    async def attach(self, session: Session) -> LiveSession:
        """One bot connection more; the session is loaded from what is stored when no bot had it here."""
        live = self.sessions.get(session.pk)
        if live is None:
            # Two connections of one session at once share one load (two copies would hand out the same seqs).
            loading = self.loading.get(session.pk)
            if loading is None:
                loading = self.loading[session.pk] = asyncio.ensure_future(self._load(session))
                try:
                    live = self.sessions.setdefault(session.pk, await loading)
                finally:
                    del self.loading[session.pk]
            else:
                # From the load's own result: the connection that started it may have been cancelled (its
                # bot went) after the load finished and before it could register it (a KeyError here once).
                live = self.sessions.setdefault(session.pk, await loading)
        live.connect()
        return live

    @staticmethod
    async def _load(session: Session) -> LiveSession:
        # Off the writer's thread: a long history must not hold up everyone's acks. A pool thread's
        # connection is opened and closed around the load as a request's is (a connection kept in a pool
        # thread outlived a database restart and failed the next bot's connect).
        state, stored = await database_sync_to_async(load_state, thread_sensitive=False)(session.pk)
        state.take_changes()  # browsers get this state as a snapshot; patches start here
        return LiveSession(
            pk=session.pk,
            organization_id=session.organization_id,
            session_id=session.session_id,
            agent_id=session.agent_key,
            state=state,
            seen=held_seqs(stored),
            max_seq=max((e["seq"] for e in stored), default=0),
        )

    def detach(self, live: LiveSession) -> bool:
        """One bot connection fewer; True when it was the session's last here.

        The registry holds sessions whose bot is connected here, nothing else:
        a bot that comes back (here or to another process) is loaded afresh
        from what is stored, so no process ever works from a stale copy.
        """
        if not live.disconnect():
            return False
        if self.sessions.get(live.pk) is live:
            del self.sessions[live.pk]
        return True


registry = Registry()
