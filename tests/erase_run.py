"""Run by tests/privacy/test_contents.py in a process of its own, against the database its environment names.

    python tests/erase_run.py erase|purge WORD

SQLITE_PATH (a file) or DATABASE_URL (PostgreSQL) says which database; it is migrated first. One ended
call is stored with WORD in every place a call's contents were ever kept: its messages (a transcript, a
bot's answer, a fatal error), its derived state and transcript text, the spans of its trace (an LLM span
with no conversation.id among them), an alert fired by the real evaluator, an alert and a send-text
audit entry as they were written before they held no words, and a note on that alert. Beside it, a
span of another trace that must stay. Then the call is erased (`erase`: sessions.erase_session) or its
contents purged by retention (`purge`: retention.purge_round), with the connection still open, as a
running server's would be. Prints JSON: where WORD was found before and after (SQLite: in the bytes of
the database file, its -wal and -shm; PostgreSQL: in which tables' rows as text), and what was kept.
"""

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from dashboard.org import audit  # noqa: E402
from dashboard.org.models import Organization  # noqa: E402
from rtvi_monitor.alerts import rules as alerts  # noqa: E402
from rtvi_monitor.alerts.models import Alert, AlertNote, AlertRule  # noqa: E402
from rtvi_monitor.privacy import retention  # noqa: E402
from rtvi_monitor.privacy.erase import erase_session  # noqa: E402
from rtvi_monitor.sessions import events, otlp  # noqa: E402
from rtvi_monitor.sessions.models import Event, Session, Span, summary_fields  # noqa: E402


def rtvi(type_: str, data: dict) -> dict:
    return {"label": "rtvi-ai", "type": type_, "data": data}


def span(trace: str, span_id: str, name: str, parent: str = "", **attributes) -> dict:
    now = time.time_ns()
    return {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(now - 2_000_000_000),
        "endTimeUnixNano": str(now - 1_000_000_000),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }


def seed(word: str) -> tuple[Session, Organization]:
    org = Organization.objects.create(name=f"erase {word[-8:]}")
    session = Session.objects.create(organization=org, session_id=f"call-{word[-8:]}", agent_name="support")
    said = [
        ("to-client", rtvi("bot-ready", {"version": "2.1.0"})),
        ("to-client", rtvi("user-transcription", {"text": f"my name is {word}", "final": True, "user_id": "u"})),
        ("to-client", rtvi("bot-llm-text", {"text": f"Hello {word}"})),
        ("to-client", rtvi("bot-tts-text", {"text": f"Hello {word}"})),
        ("to-client", rtvi("error", {"error": f"cannot book {word}", "fatal": True})),
    ]
    now = time.time()
    Event.objects.bulk_create(
        Event(session=session, seq=i, direction=d, type=m["type"], received_at=now - 5 + i, message=json.dumps(m))
        for i, (d, m) in enumerate(said, 1)
    )
    state = events.load_state(session.pk)[0]
    Session.objects.filter(pk=session.pk).update(
        status=Session.Status.ENDED, ended_at=timezone.now(), state=state.to_dict(), **summary_fields(state)
    )
    session.refresh_from_db()

    # Pipecat's shape: conversation.id on the conversation and turn spans only; the LLM and TTS under them.
    trace, other = "a1" * 16, "b2" * 16
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bot"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            span(trace, "01" * 8, "conversation", **{"conversation.id": session.session_id}),
                            span(trace, "02" * 8, "turn", "01" * 8, **{"conversation.id": session.session_id}),
                            span(trace, "03" * 8, "llm", "02" * 8, **{"gen_ai.completion": f"Hello {word}"}),
                            span(trace, "04" * 8, "tts", "02" * 8, text=f"Hello {word}"),
                            span(other, "05" * 8, "llm", **{"gen_ai.completion": "another call's"}),
                        ]
                    }
                ],
            }
        ]
    }
    Span.objects.bulk_create(otlp.spans_of(otlp.parse(json.dumps(body).encode(), otlp.JSON), org))

    rule = AlertRule.objects.create(organization=org, name="Fatal errors", condition=AlertRule.Condition.FATAL_ERROR)
    rule = AlertRule.objects.select_related("organization", "agent").get(pk=rule.pk)
    assert alerts.evaluate_rule(rule, timezone.now(), {}) == (1, 0)
    # As alerts and send-text entries were written before they held no words:
    old = Alert.objects.create(
        rule=rule,
        organization=org,
        key="old",
        status=Alert.Status.RESOLVED,
        summary=f"Fatal error in 1 session (support): cannot book {word}",
        figures={"sessions": 1, "errors": [f"cannot book {word}"], "window_minutes": 15},
        session_ids=[session.session_id],
    )
    AlertNote.objects.create(alert=old, author_name="ana", text=f"the caller {word} asked twice")
    audit.record(
        org,
        audit.Action.SESSION_TEXT_SENT,
        session.session_id,
        actor="ana",
        text_length=5,
        ok=False,
        error=f"the bot did not take it: {word}",
    )
    return session, org


def found(word: str) -> dict:
    """Where the word is now: the SQLite files' bytes, or the PostgreSQL tables whose rows hold it."""
    if connection.vendor == "sqlite":
        name = Path(connection.settings_dict["NAME"])
        paths = [name, Path(f"{name}-wal"), Path(f"{name}-shm")]
        needle = word.encode()
        return {p.name: p.exists() and needle in p.read_bytes() for p in paths}
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")
        tables = [row[0] for row in cursor.fetchall()]
        holding = {}
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', [f"%{word}%"])
            holding[table] = cursor.fetchone()[0] > 0
    return holding


def main(mode: str, word: str) -> None:
    call_command("migrate", verbosity=0, interactive=False)
    session, org = seed(word)
    if connection.vendor == "sqlite":  # the words in the database file itself, not only in its log
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = found(word)
    if mode == "erase":
        result = erase_session(session)
    else:
        Session.objects.filter(pk=session.pk).update(ended_at=timezone.now() - timedelta(days=2))
        Organization.objects.filter(pk=org.pk).update(keep_messages_days=1)
        result = retention.purge_round()[org.pk]
    fired = Alert.objects.filter(organization=org).exclude(key="old").first()
    print(
        json.dumps(
            {
                "before": before,
                "after": found(word),
                "result": result,
                "fired_summary": fired.summary if fired else None,
                "session_row": Session.objects.filter(pk=session.pk).exists(),
                "spans_left": sorted(Span.objects.filter(organization=org).values_list("trace_id", flat=True)),
                "secure_delete": _secure_delete(),
            }
        )
    )


def _secure_delete():
    if connection.vendor != "sqlite":
        return None
    with connection.cursor() as cursor:
        return cursor.execute("PRAGMA secure_delete").fetchone()[0]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
