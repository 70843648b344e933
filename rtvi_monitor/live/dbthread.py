"""The live path's database thread: every query of ingest runs here, on one kept connection.

One thread keeps its connection open across calls (reopening one per flush
cost more than the insert), and SQLite sees a single writer.
"""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import connection

DB_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-db")
# The heartbeat and sweep have their own: a writer busy with a big batch must
# never delay a beat long enough for other processes to count this one dead.
LIFECYCLE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-lifecycle")
# Bots connecting (their token looked up, their session opened or reopened): a
# storm of them (a restart, a deploy: hundreds at once) queued on the writer's
# thread ahead of its flushes and held up every connected bot's acks past a
# second (issue 22). Here they wait on each other only; with SQLite their
# short transactions take turns with the writer's through the lock.
CONNECT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-connect")
# Alert evaluation reads over many sessions: never on the writer's thread.
ALERTS_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-alerts")
# Bots' audio chunks (rtvi_monitor/audio/views.py): encoded, analysed and written one at a time here, never
# on the thread Django gives every sync view (pages would wait behind a hundred calls' uploads).
AUDIO_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-audio")
# Retention purges delete in bounded rounds, on their own thread.
RETENTION_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-retention")


# A thread's connection idle this long is checked (one `SELECT 1`) before its next call: a database
# restarted while the thread waited has closed it, and the call (a bot's connect, a page's first load)
# would fail on it. A thread kept busy (the writer under load) skips the check; its failed call drops
# the connection instead.
IDLE_CHECK = 0.5  # seconds
_used = threading.local()


def _fresh_connection() -> None:
    now = time.monotonic()
    idle = now - getattr(_used, "at", now)
    if connection.connection is not None and idle > IDLE_CHECK and not connection.is_usable():
        connection.close()


async def in_db_thread(fn, *args, executor: ThreadPoolExecutor = DB_THREAD):
    """Run fn(*args) on the live path's database thread.

    The thread keeps its connection open across calls (reopening one per
    flush cost more than the insert); a failed call drops it, and an idle one
    is checked before use, so a restarted database is reconnected at once.
    """

    def call():
        _fresh_connection()
        try:
            return fn(*args)
        except Exception:
            # A broken connection (database restart) must not stick.
            connection.close()
            raise
        finally:
            _used.at = time.monotonic()

    return await asyncio.get_running_loop().run_in_executor(executor, call)


def start_once(tasks: dict, make) -> None:
    """Run the coroutine `make()` as one task per event loop: started if there is none, or it ended.

    For the process's background loops (the session sweep, the alert engine), which every
    server process runs once, whatever starts them first.
    """
    loop = asyncio.get_running_loop()
    task = tasks.get(loop)
    if task is None or task.done():
        tasks[loop] = loop.create_task(make())
