"""Every place a session's contents are kept: what its caller said, what its bot answered, and their copies.

One entry per place, each a function that erases that place for a set of sessions. `erase` walks them
all, and everything that removes contents calls it: erasing a session (sessions.erase_session, from the
API, the admin and the organization's Erase page), erasing a caller (sessions.erase_caller) and
retention's purges (rtvi_monitor/privacy/retention.py). A place added here is reached by all three;
tests/privacy/test_contents.py fails when a model that can hold text (or points at a session) is in no entry
(nor in its short list of what holds no words, each with its reason).

The places that hold no words, so nothing needs erasing there (said once, here):
- an alert's summary and figures: counts, kinds and ids (rtvi_monitor/alerts/rules.py); the `alerts` entry
  still cleans rows written before, and their notes;
- an audit entry's detail: counts, flags, the dashboard's own words (dashboard/org/audit.py `wordless`;
  a send-text's entry says how long the text was and what came of it, rtvi_monitor/sessions/api.py);
- the session row's figures, end kind and reason, client and bot "about" (library names and versions),
  and its callers' keys (keyed hashes: models.caller_key). Retention keeps the row; an erase deletes it;
- the Overview's and agent pages' cached counts and percentiles, and each ended call's kept turn figures
  (rtvi_monitor/sessions/figures.py CallFigures: waits in ms by stage and by part key, turn numbers, flags);
- an eval run's results (rtvi_monitor/evals/models.py EvalRun, EvalResult): what passed and failed, a
  failure's kind, turn and expectation, never its reason (which quotes the bot); a result points at the call
  the run made, whose words are that call's, erased with it.

No search index of its own: transcript search reads Session.transcript_text (the `derived` entry).
On SQLite, deleted rows are overwritten with zeros (`PRAGMA secure_delete`, dashboard/settings.py) and
`settle` folds the write-ahead log back into the database file, so the erased words are not left in the
files' bytes; PostgreSQL keeps dead rows until VACUUM (docs/DEPLOY.md, "Erasing for good").
"""

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Q

from dashboard.org.models import AuditEntry
from rtvi_monitor.alerts.models import Alert, AlertNote
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.evals.models import Scenario
from rtvi_monitor.reviews.models import Review
from rtvi_monitor.sessions.models import Event, Session, Span

logger = logging.getLogger(__name__)
BATCH = 500  # ids per IN (...): well under SQLite's limit on a statement's parameters


@dataclass(frozen=True)
class Place:
    """One place a session's contents are kept: `erase(sessions)` removes them there, returns how many rows
    (or entries) it changed; `models` are those it covers (the coverage test reads them)."""

    name: str
    holds: str
    erase: Callable[[list[Session]], int]
    models: tuple = ()


def _chunks(values: list) -> Iterable[list]:
    for start in range(0, len(values), BATCH):
        yield values[start : start + BATCH]


def _by_organization(sessions: list[Session]) -> dict:
    found = defaultdict(list)
    for session in sessions:
        found[session.organization_id].append(session)
    return found


def _messages(sessions: list[Session]) -> int:
    deleted = 0
    for pks in _chunks([s.pk for s in sessions]):
        deleted += Event.objects.filter(session_id__in=pks).delete()[0]
    return deleted


def _traces(sessions: list[Session]) -> int:
    """Every span of the sessions' traces, by trace id: Pipecat names the conversation only on its conversation
    and turn spans, and the STT, LLM and TTS spans under them (their prompts, outputs, spoken text) are the
    session's all the same (rtvi_monitor/sessions/traces.py reads them so)."""
    deleted = 0
    for organization_id, of_org in _by_organization(sessions).items():
        for ids in _chunks([s.session_id for s in of_org]):
            named = Span.objects.filter(organization_id=organization_id, conversation_id__in=ids)
            traces = list(named.values_list("trace_id", flat=True).distinct())
            for trace_ids in _chunks(traces):
                deleted += Span.objects.filter(organization_id=organization_id, trace_id__in=trace_ids).delete()[0]
    return deleted


def _audio(sessions: list[Session]) -> int:
    """Recordings: the files (once the transaction commits), their chunks' peaks and speech, the figures' row."""
    from rtvi_monitor.audio import store as audio

    pks = [s.pk for s in sessions]
    chunks = audio.delete_audio(pks)
    SessionAudio.objects.filter(session_id__in=pks).delete()
    return chunks


def _derived(sessions: list[Session]) -> int:
    """What the session row derives from its messages: the frozen state (transcript, errors, function calls)
    and the transcript text that search reads. Its figures stay (retention keeps the row)."""
    return Session.objects.filter(pk__in=[s.pk for s in sessions]).update(state=None, transcript_text="")


def _alerts(sessions: list[Session]) -> int:
    """Alerts that name the sessions: one written before alerts held no words (a fatal error's text in its
    summary and figures) loses them, and members' notes on them (free text, which may quote the call) are
    replaced by a line saying why."""
    changed = 0
    for organization_id, of_org in _by_organization(sessions).items():
        ids = {s.session_id for s in of_org}
        # Only those with something to clean (old figures with texts, or notes), then those naming the calls.
        alerts = Alert.objects.filter(organization_id=organization_id).filter(
            Q(figures__has_key="errors") | Q(notes__isnull=False)
        )
        naming = [alert for alert in alerts.distinct().select_related("rule") if ids & set(alert.session_ids or ())]
        for alert in naming:
            if isinstance((alert.figures or {}).get("errors"), list):  # the texts, as fatal_error kept them
                figures = {k: v for k, v in alert.figures.items() if k != "errors"}
                changed += Alert.objects.filter(pk=alert.pk).update(summary=alert.masked_summary, figures=figures)
        notes = AlertNote.objects.filter(alert__in=[alert.pk for alert in naming]).exclude(text=ERASED_NOTE)
        changed += notes.update(text=ERASED_NOTE)
    return changed


ERASED_NOTE = "(This note was removed with the contents of a call the alert names.)"


def _audit(sessions: list[Session]) -> int:
    """Audit entries about the sessions keep who did what and when; their details, no words."""
    from dashboard.org import audit

    changed = 0
    for organization_id, of_org in _by_organization(sessions).items():
        since = min(s.started_at for s in of_org)  # nothing is about a call before it began: the log's index
        changed += audit.forget_contents(organization_id, [s.session_id for s in of_org], since)
    return changed


def _caches(sessions: list[Session]) -> int:
    """Cached copies derived from the messages: a session's turn summary (rtvi_monitor/sessions/queries.py), the
    turns its recording replays (rtvi_monitor/audio/views.py) and its recording's analysis (audio.py)."""
    from rtvi_monitor.audio import store as audio
    from rtvi_monitor.sessions.queries import summary_cache_key

    recorded = dict(SessionAudio.objects.filter(session_id__in=[s.pk for s in sessions]).values_list("pk", "chunks"))
    keys = []
    for session in sessions:
        keys += [summary_cache_key(session.pk, session.event_count), f"audio-turns:{session.pk}"]
        if session.pk in recorded:
            keys.append(audio.analysis_cache_key(session.pk, recorded[session.pk]))
    cache.delete_many(keys)
    return 0  # a cache cannot say what it had


def _platform(sessions: list[Session]) -> int:
    """The agents API's record and log lines of the session, as the session page cached them
    (rtvi_monitor/sessions/platform_join.py). The platform keeps its own: ask it, as its terms say."""
    from rtvi_monitor.sessions.platform_join import session_cache_keys

    keys = []
    for session in sessions:
        keys += session_cache_keys(session.organization, session)
    cache.delete_many(keys)
    return 0


# In order: the caches' keys are read from rows the other entries delete.
def _scenarios(sessions: list[Session]) -> int:
    """A scenario replays its call's caller turns (rtvi_monitor/evals/models.py): it goes with the call's contents."""
    deleted = 0
    for pks in _chunks([s.pk for s in sessions]):
        deleted += Scenario.objects.filter(session_id__in=pks).delete()[0]
    return deleted


def _reviews(sessions: list[Session]) -> int:
    """Review marks' notes on the call or its turns (rtvi_monitor/reviews/models.py): the reviewer's words, which
    may quote the caller. Blanked; the verdict and reasons (no words) stay, as does the mark when the call's row
    goes (its agent, deployment and start were copied: the bad share still counts it)."""
    changed = 0
    for pks in _chunks([s.pk for s in sessions]):
        changed += Review.objects.filter(session_id__in=pks).exclude(note="").update(note="")
    return changed


PLACES: tuple[Place, ...] = (
    Place("caches", "turn summaries, replayed turns, recording analyses", _caches),
    Place("platform", "the agents API's record and log lines of the session, cached", _platform),
    Place("messages", "every message the bot and its client sent, as stored", _messages, (Event,)),
    Place("spans", "the spans of the session's traces (LLM prompts and outputs, TTS text)", _traces, (Span,)),
    Place("audio", "the recording: files, peaks, speech, figures", _audio, (AudioChunk, SessionAudio)),
    Place("derived", "the frozen state and the transcript text search reads", _derived, (Session,)),
    Place("alerts", "old alerts' quoted errors, members' notes on alerts naming it", _alerts, (Alert, AlertNote)),
    Place("audit", "words in the details of audit entries about it", _audit, (AuditEntry,)),
    Place("evals", "eval scenarios made of the call: the caller's turns, edited", _scenarios, (Scenario,)),
    Place("reviews", "review marks' notes on the call and its turns", _reviews, (Review,)),
)


def erase(sessions: Iterable[Session]) -> dict[str, int]:
    """Erase the sessions' contents from every place of PLACES: {place: rows changed}. The caller holds the
    transaction (recording files go once it commits) and then calls `settle`. The session rows stay."""
    sessions = list(Session.objects.filter(pk__in=[s.pk for s in sessions]).select_related("organization", "agent"))
    if not sessions:
        return {}
    return {place.name: place.erase(sessions) for place in PLACES}


def settle() -> None:
    """After an erase or a purge (once it has committed): on SQLite, fold the write-ahead log into the
    database file and truncate it, so the old pages (the words before secure_delete zeroed them) are in no
    file. Waits for readers as the connection's timeout allows; one that could not finish is logged, and
    the next erase's or purge's finishes it (as does the last connection's close)."""
    if connection.vendor != "sqlite":
        return
    if connection.in_atomic_block:  # the site admin deletes inside its own transaction: once that commits
        transaction.on_commit(settle)
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        busy, _, _ = cursor.fetchone()
    if busy:
        logger.warning("The write-ahead log could not be truncated after an erase: a reader held it")
