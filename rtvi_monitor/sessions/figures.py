"""An ended call's turns in figures, kept (models.CallFigures): what an agent's figures over a fleet's history read.

A call's figures are its turns taken apart (core/diagnosis.summary: each stage's wait, the turn latency and the
bots' breakdowns, turn by turn) and the yes-or-no flags the deployments' rates count. Computing them reads every
message of the call, so they are computed once and kept:

- when the call ends (`keep`, a receiver of the live path's `session_ended`, connected in rtvi_monitor/apps.py);
- by a sweep when a server process starts (`start`): calls that ended before figures were kept (an upgrade),
  and every call again after the thresholds changed (settings, read at start);
- and by `fill`, for the newest calls an agent's figures read, where they have none or out-of-date ones: a
  call reopened since (more messages), a call whose traces came after its end (rtvi_monitor/sessions/otlp.py
  drops its figures), calls the sweep has not reached yet. At most FILL_AT_ONCE a read, newest first, so a page
  is never kept waiting by the whole history (it says how many are left).

Numbers and the names of stages and parts only: no words (rtvi_monitor/privacy/contents.py). A session's
figures go with it when it is erased (the row cascades); retention, which keeps the session's row and figures,
keeps them too. Eval runs' calls (Session.eval_run) are not the fleet's: they have none.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from rtvi_monitor.sessions import queries
from rtvi_monitor.sessions.models import FAILED_ENDS, CallFigures, Session, Span

logger = logging.getLogger(__name__)
FILL_AT_ONCE = 100  # calls a read computes at most (each reads its messages once)
VOICE_TO_VOICE = "voice_to_voice"  # a recorded call's turns as the audio measured them, beside the messages' figures
# The figures' own thread rests as long as it worked after each call (at least PACE_MIN seconds): taking calls
# apart is Python (the GIL), and a sweep after an upgrade, or a thousand calls ending together, must leave the
# live path's event loop most of the interpreter.
PACE_MIN = 0.005
_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtvi-figures")


def compute(session: Session) -> CallFigures:
    """The call's figures, from its stored messages and traces (not saved)."""
    traced = Span.objects.filter(organization_id=session.organization_id, conversation_id=session.session_id)
    summary = queries.summarise(session.pk, session.session_id, session.organization_id, True, traced.exists())
    heard = _voice_to_voice(session.pk)
    if heard:
        summary["values"][VOICE_TO_VOICE] = heard
    flags = {
        "barge_in": summary["counts"]["barge_ins"] > 0,
        # As HAS_ERRORS counts a session with errors, and FAILED_ENDS one that ended badly.
        "errors": session.error_count > 0 or session.fatal,
        "ended_badly": session.end_kind in FAILED_ENDS if session.end_kind else None,
    }
    return CallFigures(
        session_id=session.pk,
        organization_id=session.organization_id,
        agent_key=session.agent_key,
        deployment_id=session.deployment_id,
        region=session.region,
        started_at=session.started_at,
        event_count=session.event_count,
        judged=queries.judged(),
        summary=summary,
        flags=flags,
    )


def _voice_to_voice(session_pk: int) -> list[float]:
    """The call's waits as its recording measured them (ms: the caller's voice stopping to the bot's starting, as
    rtvi_monitor/audio/store.py `analyse` keeps them, read through the session's reverse relation, so sessions does
    not import audio), the bot's speech over the caller's left out; none without a recording."""
    found = Session.objects.filter(pk=session_pk).values_list("audio__analysis", flat=True).first()
    turns = found.get("turns") if isinstance(found, dict) else None
    return [
        round(t["seconds"] * 1000, 1)
        for t in turns or ()
        if isinstance(t, dict) and not t.get("over_caller") and isinstance(t.get("seconds"), int | float)
    ]


def _save(figures: CallFigures) -> None:
    fields = {f.attname: getattr(figures, f.attname) for f in CallFigures._meta.concrete_fields if not f.primary_key}
    try:
        with transaction.atomic():
            CallFigures.objects.update_or_create(session_id=figures.session_id, defaults=fields)
    except IntegrityError:  # erased meanwhile, or kept by another reader at the same moment: nothing to keep
        pass


def _paced(session: Session) -> None:
    """Compute and keep the call's figures, then rest as long (on the figures' own thread only)."""
    started = time.monotonic()
    _save(compute(session))
    time.sleep(max(PACE_MIN, time.monotonic() - started))


def _keep_now(session_pk: int) -> None:
    try:
        session = Session.objects.filter(pk=session_pk, status=Session.Status.ENDED).first()
        if session is not None:
            _paced(session)
    except Exception:  # logged; the next read of the agent's figures computes it (`fill`)
        logger.exception("The figures of session %s were not kept", session_pk)
    finally:
        connection.close()  # a thread of its own: no connection left open between calls


def keep(sender=None, session: Session | None = None, **kwargs) -> None:
    """`session_ended`'s receiver: the ended call's figures computed and kept on a thread of their own, never the
    live path's (reading a call's messages must not hold up another bot's acks). None for a call without an agent,
    nor for an eval run's."""
    if session is None or not session.agent_key or session.eval_run:
        return
    _THREAD.submit(_keep_now, session.pk)


def stale(sessions):
    """Those of `sessions` (ended, of an agent) whose kept figures are missing or out of date."""
    current = Q(figures__event_count=F("event_count"), figures__judged=queries.judged())
    return sessions.filter(status=Session.Status.ENDED).exclude(agent_key="").filter(Q(figures__isnull=True) | ~current)


def fill(sessions, newest: int, limit: int = FILL_AT_ONCE) -> tuple[int, int]:
    """Bring the kept figures of the `newest` of `sessions` (a queryset of real calls, Session.objects.calls()) up
    to date: at most `limit` computed, newest first. Returns how many it computed and how many are left."""
    among = Session.objects.filter(pk__in=sessions.order_by("-started_at", "-pk").values("pk")[:newest])
    done = 0
    for session in stale(among).order_by("-started_at", "-pk")[:limit]:
        _save(compute(session))
        done += 1
    return done, stale(among).count() if done == limit else 0


SWEEP_BATCH = 1000  # sessions a sweep's step looks at (by primary key, newest first)


def _sweep() -> None:
    """Every real call's figures brought up to date, newest first, in steps: after an upgrade (calls that ended
    before figures were kept) and after the thresholds changed (a setting: a restart)."""
    try:
        calls = Session.objects.calls()
        top = calls.order_by("-pk").values_list("pk", flat=True).first()
        done = 0
        while top is not None and top > 0:
            for session in stale(calls.filter(pk__gt=top - SWEEP_BATCH, pk__lte=top)).order_by("-pk"):
                _paced(session)
                done += 1
            top -= SWEEP_BATCH
        if done:
            logger.info("Kept the turn figures of %d earlier calls", done)
    except Exception:
        logger.exception("The sweep of the calls' turn figures stopped; the agent pages fill their newest")
    finally:
        connection.close()


_swept: list = []


def start() -> None:
    """A server process starts (rtvi_monitor/apps.py): the sweep, once, on the figures' own thread."""
    if not _swept:
        _swept.append(_THREAD.submit(_sweep))


def forget(organization_id, session_ids) -> int:
    """Drop the kept figures of these calls (traces came after they ended): the next read computes them again."""
    return CallFigures.objects.filter(
        organization_id=organization_id, session__session_id__in=list(session_ids)
    ).delete()[0]
