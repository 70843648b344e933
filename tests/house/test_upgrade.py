"""An upgrade with data in it: a database made and filled by the release before the house moved into
packages (issue 34), then migrated and served by this one, on SQLite and on PostgreSQL.

The models changed package, not app: each keeps its table, so the upgrade has no migration of its own
(those added since, as issue 35's end kind, are applied, and only they).
This test holds that to the data: the old code (its tree taken from git at BEFORE) migrates a fresh
database and stores an organization with every kind of row a caller's call leaves (a session and its
messages, a caller, a span, an alert with a note and a delivery, a recording and its chunk, a redaction
rule, an ingest token, an audit entry); this code then migrates it (nothing to apply), finds no model
change that would need a migration, and reads every row back through the models' new homes.
"""

import json
import os
import subprocess
import sys
import tarfile
import uuid
from io import BytesIO
from pathlib import Path

import pytest

from tests.conftest import DATABASE_URL, reachable, skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "a6f7ffb"  # main before issue 34: every model in rtvi_monitor/models.py and dashboard/models.py

# Run by the old code: its models all came from the two apps' models.py.
FILL = """
import json, time
from django.utils import timezone
from dashboard.models import AuditEntry, Organization
from rtvi_monitor.models import (Alert, AlertDelivery, AlertNote, AlertRule, AudioChunk, Event, IngestToken,
    RedactionRule, Session, SessionAudio, SessionCaller, Span)
org = Organization.objects.create(name="Upgrade Co")
token, _ = IngestToken.issue(org, "bot", actor="upgrade test")
RedactionRule.objects.create(organization=org, name="ticket", pattern="T-[0-9]+")
now = time.time()
s = Session.objects.create(organization=org, session_id="call-1", status=Session.Status.ENDED,
    ended_at=timezone.now(), transcript_text="hello upgrade")
Event.objects.create(session=s, seq=1, direction="to-client", type="user-transcription", received_at=now,
    message=json.dumps({"label": "rtvi-ai", "type": "user-transcription", "data": {"text": "hello upgrade"}}))
SessionCaller.objects.create(session=s, caller_key="k" * 40)
Span.objects.create(organization=org, trace_id="a" * 32, span_id="b" * 16, name="llm", start_ns=1, end_ns=2,
    conversation_id="call-1")
rule = AlertRule.objects.create(organization=org, name="errors", condition=AlertRule.Condition.ERROR_RATE)
alert = Alert.objects.create(organization=org, rule=rule, summary="upgrade alert")
AlertNote.objects.create(alert=alert, author_name="ops", text="looked at it")
AlertDelivery.objects.create(alert=alert, event="fired", channel="webhook", target="https://example.com/h")
SessionAudio.objects.create(session=s, sample_rate=16000, origin=now, end=now + 1)
AudioChunk.objects.create(session=s, track="user", index=0, start=now, samples=320, sha256="0" * 64, path="a/0",
    size=640, peaks=bytes(1))
AuditEntry.objects.create(organization=org, actor="upgrade test", action="session_erased", target="call-1")
print(json.dumps({"org": str(org.pk)}))
"""

# Run by this code: every row read through its model's package.
READ = """
import json
from dashboard.org.models import AuditEntry, Organization
from rtvi_monitor.alerts.models import Alert, AlertDelivery, AlertNote, AlertRule
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions.models import Event, Session, SessionCaller, Span
org = Organization.objects.get(name="Upgrade Co")
s = Session.objects.get(organization=org, session_id="call-1")
print(json.dumps({
    "org": str(org.pk),
    "transcript": s.transcript_text,
    "event": json.loads(Event.objects.get(session=s, seq=1).message)["data"],
    "callers": SessionCaller.objects.filter(session=s).count(),
    "spans": Span.objects.filter(organization=org).count(),
    "alert": Alert.objects.get(organization=org).summary,
    "notes": AlertNote.objects.filter(alert__organization=org).count(),
    "deliveries": AlertDelivery.objects.filter(alert__organization=org).count(),
    "rules": AlertRule.objects.filter(organization=org).count(),
    "recordings": SessionAudio.objects.filter(session=s).count(),
    "chunks": AudioChunk.objects.filter(session=s).count(),
    "redaction": list(RedactionRule.objects.filter(organization=org).values_list("pattern", flat=True)),
    "redacts": RedactionRule.redactor_for(org.pk).text("ticket T-123", {}),
    "tokens": IngestToken.objects.filter(organization=org).count(),
    "audit": AuditEntry.objects.filter(organization=org).count(),
}))
"""


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory) -> Path:
    """The tree of the release before the move, from this checkout's git history."""
    where = tmp_path_factory.mktemp("before")
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True, check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.fail(f"this test reads the release before the move from git ({BEFORE}): {exc}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    return where


def manage(tree: Path, env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree,
        env={**os.environ, "CI": "", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{' '.join(args)} in {tree.name}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def migrations(tree: Path) -> set[str]:
    """The apps' migrations in a tree, as migrate names them ("rtvi_monitor.0014_...")."""
    return {
        f"{app}.{path.stem}"
        for app in ("dashboard", "rtvi_monitor")
        for path in (tree / app / "migrations").glob("[0-9]*.py")
    }


def upgrade(old_tree: Path, env: dict) -> dict:
    manage(old_tree, env, "migrate", "--noinput")
    filled = json.loads(manage(old_tree, env, "shell", "-c", FILL).strip().splitlines()[-1])
    applied = manage(ROOT, env, "migrate", "--noinput")
    # The move itself has no migration: what is applied is only what was added since, each named.
    since = migrations(ROOT) - migrations(old_tree)
    done = {line.split()[1].rstrip(".") for line in applied.splitlines() if line.strip().startswith("Applying ")}
    assert done == since, applied
    if not since:
        assert "No migrations to apply." in applied
    manage(ROOT, env, "makemigrations", "--check", "--dry-run")  # the move changed no table
    read = json.loads(manage(ROOT, env, "shell", "-c", READ).strip().splitlines()[-1])
    assert read["org"] == filled["org"]
    return read


EXPECTED = {
    "transcript": "hello upgrade",
    "event": {"text": "hello upgrade"},
    "callers": 1,
    "spans": 1,
    "alert": "upgrade alert",
    "notes": 1,
    "deliveries": 1,
    "rules": 1,
    "recordings": 1,
    "chunks": 1,
    "redaction": ["T-[0-9]+"],
    "tokens": 1,
    "audit": 2,  # the ingest token's creation, and the entry made above
}


def test_an_upgrade_from_before_the_move_keeps_every_row_on_sqlite(old_tree, tmp_path):
    read = upgrade(old_tree, {"SQLITE_PATH": str(tmp_path / "db.sqlite3"), "DATABASE_URL": ""})
    assert {k: read[k] for k in EXPECTED} == EXPECTED
    assert "T-123" not in read["redacts"]


def test_an_upgrade_from_before_the_move_keeps_every_row_on_postgresql(old_tree):
    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not running on 127.0.0.1:5432")
    import psycopg

    name = f"upgrade_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        read = upgrade(old_tree, {"DATABASE_URL": DATABASE_URL.rsplit("/", 1)[0] + "/" + name})
        assert {k: read[k] for k in EXPECTED} == EXPECTED
        assert "T-123" not in read["redacts"]
    finally:
        with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
