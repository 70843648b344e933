"""Each turn's latency breakdown, as Pipecat's UserBotLatencyObserver names it, to the dashboard.

Pipecat (1.9 and later) can take a turn's wait apart: its UserBotLatencyObserver
emits, as the bot starts speaking, a LatencyBreakdown whose `contributions`
name every part of the interval from the user's actual silence to the bot
speaking (endpointing wait, transcription, turn detection, LLM inference,
speech synthesis, the pipeline's own hops...), each with its owner and what
kind of thing that is (service, setting, bot, pipeline), summing to
`total_secs`. Pipecat's RTVI observer sends none of it to a client, so the
package sends it itself, on the ingest stream only (never to the bot's
client), as a message of its own type, `rtvi-dashboard-latency`
(docs/PROTOCOL.md):

    {"label": "rtvi-ai", "type": "rtvi-dashboard-latency",
     "data": {"v": 1, "measured_from": "user_silence", "total_secs": 1.02,
              "user_turn_secs": 0.41, "released_ago_secs": 0.61,
              "contributions": [{"key": "endpointing_wait", "label": "endpointing wait",
                                 "owner": "config: VAD stop_secs", "owner_kind": "setting",
                                 "start_secs": 0.0, "duration_secs": 0.2}, ...]}}

Durations only, in seconds rounded to the microsecond: no epoch times (the
dashboard's redaction reads a long run of digits as a card or phone number).
`start_secs` is where a part begins in the interval; `released_ago_secs` how
long before the message the user's turn was released (its
user-stopped-speaking), so the dashboard can tell which turn it is.

The observer: the worker's own when it has one (a bot that added it, or
Pipecat's tracing, which makes one), else the package adds one, so that a bot
needs no code change for it; it watches a handful of frame types and does
its arithmetic once a turn. `latency=False` (DashboardRTVIProcessor, attach)
or RTVI_DASHBOARD_LATENCY=0 turns it off. A Pipecat without the observer, or
whose breakdown has no contributions (before 1.9), is left as it is: nothing
is sent, nothing fails.
"""

import importlib
import logging
import os
import time

LATENCY_TYPE = "rtvi-dashboard-latency"  # the dashboard's rtvi_monitor/core/contributions.LATENCY_TYPE
LATENCY_VERSION = 1
LATENCY_ENV = "RTVI_DASHBOARD_LATENCY"
MAX_PARTS = 64  # the dashboard refuses more (a breakdown of Pipecat 1.14 has at most ~15)
_OFF = {"0", "false", "no", "off"}

logger = logging.getLogger("rtvi_dashboard.latency")


def latency_from_env(latency: bool | None = None) -> bool:
    """Whether to send each turn's breakdown: `latency`, else RTVI_DASHBOARD_LATENCY (on unless 0/false/no/off)."""
    if latency is not None:
        return bool(latency)
    return os.environ.get(LATENCY_ENV, "1").strip().lower() not in _OFF


def observer_class():
    """Pipecat's UserBotLatencyObserver when this Pipecat has one whose breakdown names contributions; else None."""
    try:
        module = importlib.import_module("pipecat.observers.user_bot_latency_observer")
    except ImportError:
        return None
    observer, breakdown = getattr(module, "UserBotLatencyObserver", None), getattr(module, "LatencyBreakdown", None)
    fields = getattr(breakdown, "model_fields", None) or {}
    if observer is None or "contributions" not in fields or "total_secs" not in fields:
        return None
    return observer


def _text(value) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _secs(value) -> float:
    return round(max(0.0, float(value)), 6)


def breakdown_message(breakdown, now: float | None = None) -> dict:
    """The rtvi-dashboard-latency message of one LatencyBreakdown, made at `now` (epoch seconds)."""
    now = time.time() if now is None else now
    origin = getattr(breakdown, "user_turn_start_time", None)
    if origin is None and breakdown.contributions:
        origin = min(part.start_time for part in breakdown.contributions)
    parts = [
        {
            "key": str(part.key),
            "label": str(part.label),
            "owner": str(part.owner),
            "owner_kind": _text(part.owner_kind),
            "start_secs": _secs(part.start_time - origin),
            "duration_secs": _secs(part.duration_secs),
        }
        for part in breakdown.contributions
    ]
    if len(parts) > MAX_PARTS:  # never from Pipecat 1.14; the rest as one part, so that they still sum to the total
        rest = parts[MAX_PARTS - 1 :]
        parts = parts[: MAX_PARTS - 1]
        parts.append({"key": "other", "label": f"{len(rest)} more parts", "owner": "rtvi_dashboard", "owner_kind": "pipeline", "start_secs": rest[0]["start_secs"], "duration_secs": _secs(sum(p["duration_secs"] for p in rest))})  # fmt: skip # noqa: E501
    user_turn = getattr(breakdown, "user_turn_secs", None)
    start = getattr(breakdown, "user_turn_start_time", None)
    released = None if user_turn is None or start is None else _secs(now - (start + user_turn))
    data = {
        "v": LATENCY_VERSION,
        "measured_from": _text(getattr(breakdown, "measured_from", None)),
        "total_secs": _secs(breakdown.total_secs),
        "user_turn_secs": None if user_turn is None else _secs(user_turn),
        "released_ago_secs": released,
        "contributions": parts,
    }
    return {"label": "rtvi-ai", "type": LATENCY_TYPE, "data": {k: v for k, v in data.items() if v is not None}}


def find_observer(worker, cls):
    """The worker's own UserBotLatencyObserver: the one its tracing made, or one the bot gave it; else None."""
    own = getattr(worker, "_user_bot_latency_observer", None)
    if isinstance(own, cls):
        return own
    observers = getattr(getattr(worker, "_observer", None), "_observers", None) or []
    return next((o for o in observers if isinstance(o, cls)), None)


def watch_latency(worker, client, latency: bool | None = None):
    """Send each turn's breakdown of `worker`'s pipeline through `client`; the observer watched, or None.

    Before the pipeline starts (a setup file, or a processor's setup). The
    worker's own observer is used when it has one, else one is added. None
    (and nothing sent) when turned off, without a worker, or when this
    Pipecat has no observer with contributions.
    """
    if worker is None or not latency_from_env(latency):
        return None
    try:
        return _watch(worker, client)
    except Exception as exc:  # whatever this worker is, the bot goes on without its breakdowns
        logger.warning("rtvi_dashboard: each turn's latency breakdown is not sent (%s)", exc)
        return None


def _watch(worker, client):
    cls = observer_class()
    if cls is None:
        logger.info("rtvi_dashboard: this Pipecat has no UserBotLatencyObserver with contributions; none is sent")
        return None
    observer = find_observer(worker, cls)
    if observer is None:
        observer = cls()
        worker.add_observer(observer)
    watching = getattr(observer, "_rtvi_dashboard_clients", None)
    if watching is None:
        watching = observer._rtvi_dashboard_clients = []
    if any(c is client for c in watching):
        return observer
    watching.append(client)

    async def on_latency_breakdown(_observer, breakdown):
        try:
            message = breakdown_message(breakdown)
        except Exception as exc:  # a breakdown of a shape this package does not know: the bot goes on
            logger.warning("rtvi_dashboard: a latency breakdown could not be read (%s); not sent", exc)
            return
        client.send(message, "to-client")

    observer.add_event_handler("on_latency_breakdown", on_latency_breakdown)
    return observer
