"""The live side's models, for Django's registry: each is defined in, and imported from, its package.

sessions/models.py: sessions, their stored messages, callers, spans and redaction rules;
live/models.py: ingest tokens, server processes, leases; alerts/models.py; audio/models.py; evals/models.py
(calls saved as eval scenarios); reviews/models.py (marks on calls, reasons, queues).
"""

from rtvi_monitor.alerts.models import Alert, AlertChannel, AlertDelivery, AlertNote, AlertRule
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.evals.models import EvalResult, EvalRun, Scenario
from rtvi_monitor.live.models import IngestToken, Lease, ServerProcess
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.reviews.models import Review, ReviewQueue, ReviewReason
from rtvi_monitor.sessions.models import Event, Session, SessionCaller, Span

__all__ = [
    "Alert",
    "AlertChannel",
    "AlertDelivery",
    "AlertNote",
    "AlertRule",
    "AudioChunk",
    "EvalResult",
    "EvalRun",
    "Event",
    "IngestToken",
    "Lease",
    "RedactionRule",
    "Review",
    "ReviewQueue",
    "ReviewReason",
    "Scenario",
    "ServerProcess",
    "Session",
    "SessionAudio",
    "SessionCaller",
    "Span",
]
