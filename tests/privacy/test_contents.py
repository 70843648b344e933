"""Erase and retention reach every copy of a caller's words: one list of places (rtvi_monitor/privacy/contents.py).

Every model that can hold text is in an entry of the list or says why it holds no words; erasing a
session, erasing a caller and retention's purge all walk the list; and, through the real code in a
process of its own (tests/erase_run.py), a distinctive word stored everywhere a call's contents were
ever kept is, after an erase or a purge, in no byte of SQLite's files and in no row of PostgreSQL's
tables, where it was before.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.apps import apps
from django.core.cache import cache
from django.db import models

from rtvi_monitor.privacy import contents, retention
from rtvi_monitor.privacy.erase import erase_caller, erase_session
from rtvi_monitor.sessions.models import Session, SessionCaller, caller_key
from rtvi_monitor.sessions.platform_join import session_cache_keys
from rtvi_monitor.sessions.queries import _session_summary, summary_cache_key
from tests.agents.test_platform_pages import cloud, monitored  # noqa: F401 (cloud: a fixture)
from tests.conftest import DATABASE_URL, reachable, skip_or_fail
from tests.platform_samples import WARM_COMPLETED_SESSION, fake_pipecat_cloud, make_logs
from tests.session_samples import make_session

RUN = Path(__file__).resolve().parents[1] / "erase_run.py"
ROOT = RUN.parent.parent

# Models that can hold text yet are in no entry of the list, each with why it holds no caller's words.
HOLD_NO_WORDS = {
    "admin.LogEntry": "the admin's own log: object_repr is a row's __str__ (a session's is its id, an alert's its "
    "summary, which holds no words) and change_message names the fields changed",
    "sessions.Session": "a signed-in member's browser session (Django's): who they are, never a call",
    "dashboard.Organization": "its settings: audio_agents lists agent ids",
    "dashboard.Deployment": "an agent's deployment manifest, written by its owners",
    "rtvi_monitor.AlertDelivery": "last_error is the channel's answer (a status, a refusal); what it sends is built "
    "from the alert, which holds no words",
    "dashboard.LatencyBudget": "an agent's latency budget: milliseconds, by part key of its bots' breakdowns",
    "rtvi_monitor.EvalResult": "an eval result keeps what passed and failed (a failure's kind, turn, expectation and "
    "event name; never its reason, which quotes the bot) and points at the call the run made, whose words are there",
    "rtvi_monitor.ReviewQueue": "a saved filter of calls: its name and filter (agent and deployment ids, end kinds) "
    "are the organization's own words, it names no call (rtvi_monitor/reviews/queues.py)",
    "rtvi_monitor.CallFigures": "an ended call's turns in numbers (each stage's wait, the turn latency, the bots' "
    "breakdowns by part key and owner kind, turn numbers) and yes-or-no flags (rtvi_monitor/sessions/figures.py): "
    "kept with the call's row through retention, deleted with it (tests/sessions/test_fleet.py reads its bytes)",
    "rtvi_monitor.SessionCaller": "a keyed hash of the caller's id (models.caller_key), no words: kept with the call's "
    "row so that a caller's erase still finds it, deleted with the row",
}
TEXT_NAMES = ("summary", "detail", "text", "message", "note", "error", "reason", "repr", "transcript")


def _can_hold_words(model) -> bool:
    for field in model._meta.get_fields():
        if field.is_relation and field.concrete and field.related_model is Session:
            return True
        if isinstance(field, models.TextField | models.JSONField | models.BinaryField):
            return True
        if isinstance(field, models.CharField) and (field.max_length or 0) >= 200:
            if any(name in field.name for name in TEXT_NAMES):
                return True
    return False


def test_every_model_that_can_hold_a_sessions_words_is_in_an_entry_or_says_why_not():
    holding = {model._meta.label for model in apps.get_models() if _can_hold_words(model)}
    covered = {model._meta.label for place in contents.PLACES for model in place.models}
    assert holding - covered - set(HOLD_NO_WORDS) == set(), "add an entry to rtvi_monitor/contents.PLACES"
    assert set(HOLD_NO_WORDS) <= holding - covered  # no stale reason: each still names a model the list leaves out
    assert len({place.name for place in contents.PLACES}) == len(contents.PLACES)


@pytest.fixture
def walked(monkeypatch):
    """One more place in the list: the sessions each erase or purge reached through it."""
    reached: list[str] = []

    def erase(sessions):
        reached.extend(s.session_id for s in sessions)
        return len(sessions)

    monkeypatch.setattr(contents, "PLACES", (*contents.PLACES, contents.Place("new", "a new place", erase)))
    return reached


@pytest.mark.django_db
def test_a_place_added_to_the_list_is_erased_by_erase_caller_and_retention(org, walked):
    from datetime import timedelta

    from django.utils import timezone

    long_ago = timezone.now() - timedelta(days=10)
    for session_id in ("one", "of-a-caller", "messages-due", "call-due"):
        make_session(org, session_id, status="ended", ended_at=long_ago)
    assert erase_session(Session.objects.get(session_id="one"))["new"] == 1
    SessionCaller.objects.create(
        session=Session.objects.get(session_id="of-a-caller"), caller_key=caller_key(org.pk, "u")
    )
    erase_caller(org, "u")
    assert walked == ["one", "of-a-caller"]

    org.keep_messages_days = 5
    org.save()
    retention.purge_round()
    assert walked[2:] == ["call-due", "messages-due"] or walked[2:] == ["messages-due", "call-due"]
    assert Session.objects.filter(transcript_text="", state__isnull=True, contents_purged_at__isnull=False).count() == 2
    org.keep_sessions_days = 5
    org.save()
    retention.purge_round()
    assert sorted(walked[4:]) == ["call-due", "messages-due"] and not Session.objects.exists()


@pytest.mark.django_db
def test_an_erase_reaches_the_cached_copies(org, staff_client, cloud):  # noqa: F811
    fake_pipecat_cloud(cloud, logs=make_logs(30, [WARM_COMPLETED_SESSION]))
    session = monitored(org, WARM_COMPLETED_SESSION["sessionId"], state={})
    assert staff_client.get(f"/api/sessions/{session.session_id}/").json()["platform"]["logs"]
    platform = session_cache_keys(org, session)
    assert any(cache.get(key) is not None for key in platform)  # the keys are those the page filled
    summary = summary_cache_key(session.pk, session.event_count)
    _session_summary(session.pk, session.session_id, org.pk, True, summary, False)
    assert cache.get(summary) is not None

    erase_session(session)
    assert [key for key in [*platform, summary] if cache.get(key) is not None] == []


def run(mode: str, env: dict) -> tuple[str, dict]:
    word = f"zanzibarquux{uuid.uuid4().hex[:10]}"
    result = subprocess.run(
        [sys.executable, str(RUN), mode, word],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return word, json.loads(result.stdout.strip().splitlines()[-1])


def _sqlite(tmp_path) -> dict:
    return {"SQLITE_PATH": str(tmp_path / "db.sqlite3"), "AUDIO_ROOT": str(tmp_path / "audio"), "DATABASE_URL": ""}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["erase", "purge"])
def test_after_an_erase_or_a_purge_the_word_is_in_no_byte_of_the_sqlite_files(tmp_path, mode):
    _, found = run(mode, _sqlite(tmp_path))
    assert found["secure_delete"] == 1
    assert any(found["before"].values()), found  # it was there: in the database file (checkpointed), as stored
    assert found["after"] == {"db.sqlite3": False, "db.sqlite3-wal": False, "db.sqlite3-shm": False}
    assert found["fired_summary"] == "Fatal error in 1 session (no agent): 1 error"  # ids and counts, no words
    assert found["spans_left"] == ["b2" * 16]  # another trace's spans stay
    # An erase deletes the call; a purge keeps its row and figures.
    assert found["session_row"] is (mode == "purge")
    if mode == "erase":
        assert found["result"] == {"messages": 5, "spans": 4, "alerts": 2, "audit": 1}


@pytest.fixture(scope="module")
def postgresql():
    """A database of its own on the machine's PostgreSQL, dropped afterwards."""
    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = f"erase_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield DATABASE_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.services
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["erase", "purge"])
def test_after_an_erase_or_a_purge_no_postgresql_row_holds_the_word(postgresql, tmp_path, mode):
    _, found = run(mode, {"DATABASE_URL": postgresql, "AUDIO_ROOT": str(tmp_path / "audio")})
    held = {table for table, holds in found["before"].items() if holds}
    assert held >= {
        "rtvi_monitor_event",
        "rtvi_monitor_session",
        "rtvi_monitor_span",
        "rtvi_monitor_alert",
        "rtvi_monitor_alertnote",
        "dashboard_auditentry",
    }
    assert [table for table, holds in found["after"].items() if holds] == []
    assert found["spans_left"] == ["b2" * 16]
