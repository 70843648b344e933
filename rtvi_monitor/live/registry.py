"""The sessions whose bot is connected to this process, and bot connections per ingest token.

A session is loaded (its state replayed from what is stored) when its first
bot connects here, and let go when its last one leaves: a bot that comes back,
here or to another process, is loaded afresh, so no process works from a stale copy.
A session whose bot finished here (closed with 1000) is kept, complete, until the
lifecycle's sweep ends it (`finishing`).

Rows and requests name a session by its key (the Session's pk): `find` is how the
writer, the lifecycle and control reach it, on the event loop. Code on another
thread (a sync view) reads a held session through `read`, which runs the read on
the event loop that holds it: the writer changes a session's state there between
its awaits, never while a read made there runs.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from channels.db import database_sync_to_async

from rtvi_monitor.core.redaction import NONE, Redactor
from rtvi_monitor.live.held import HeldSeqs, held_seqs
from rtvi_monitor.live.session import LiveSession
from rtvi_monitor.sessions.events import load_state
from rtvi_monitor.sessions.models import Session

logger = logging.getLogger(__name__)
T = TypeVar("T")
READ_WAIT = 2.0  # seconds a thread waits for the event loop to make its read of a held session

SERVER_ID = uuid.uuid4().hex  # this process, for as long as it runs (Session.holder, ServerProcess, control's inbox)


class Registry:
    """The sessions with a bot connected to this process, and bot connections per ingest token."""

    def __init__(self):
        self.sessions: dict[int, LiveSession] = {}
        # Sessions whose bot finished here (closed with 1000), with their complete states, until the sweep
        # ends them (live/lifecycle.py); a bot that comes back takes its session from the database, and its entry goes.
        self.finishing: dict[int, LiveSession] = {}
        self.per_token: dict[int, int] = {}
        self.connecting = 0  # bots between their handshake and attach(): the sweep leaves them be
        self.loading: dict[int, asyncio.Future] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # where the sessions are held (and changed)

    def find(self, pk: int) -> LiveSession | None:
        """The session of this key held here (a bot's, or one whose bot finished), or None. On the event loop."""
        live = self.sessions.get(pk)
        return live if live is not None else self.finishing.get(pk)

    def read(self, pk: int, read: Callable[[LiveSession], T], wait: float = READ_WAIT) -> T | None:
        """`read(session)` of the session of this key held here, made on the event loop that holds it, from any
        thread (the caller's thread waits for it); None when none is held here, or the loop did not get to it
        within `wait` seconds."""
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return None

        def on_loop():
            live = self.find(pk)
            return None if live is None else read(live)

        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:  # no loop in this thread: a sync view's
            here = False
        if here:
            return on_loop()
        future = asyncio.run_coroutine_threadsafe(_called(on_loop), loop)
        try:
            return future.result(wait)
        except FutureTimeout:
            future.cancel()
            logger.warning("A read of held session %s waited %s s for the event loop; it was not made", pk, wait)
            return None

    async def attach(self, session: Session, redactor: Redactor = NONE) -> LiveSession:
        """One bot connection more; the session is loaded from what is stored when no bot had it here.

        `redactor`: the organization's rules as this connection read them; the session's messages go through
        it from now on. A state kept for the session's end (`finishing`) is stale now, and goes."""
        self.loop = asyncio.get_running_loop()
        self.finishing.pop(session.pk, None)
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
        live.connect(redactor)
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
            eval_run=bool(session.eval_run),
            state=state,
            held=HeldSeqs(held_seqs(stored)),
            max_seq=max((e["seq"] for e in stored), default=0),
        )

    def detach(self, live: LiveSession) -> bool:
        """One bot connection fewer; True when it was the session's last here.

        `sessions` holds sessions whose bot is connected here, nothing else (one
        whose bot finished waits in `finishing` for its end alone): a bot that comes
        back (here or to another process) is loaded afresh from what is stored, so
        no process ever works from a stale copy.
        """
        if not live.disconnect():
            return False
        if self.sessions.get(live.pk) is live:
            del self.sessions[live.pk]
        return True


async def _called(fn: Callable[[], T]) -> T:
    return fn()


registry = Registry()
