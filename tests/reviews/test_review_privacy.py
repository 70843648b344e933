"""A mark's note is call contents (rtvi_monitor/privacy/contents.py, the `reviews` place): erasing the call (through
the API), erasing its caller, and retention's purge blank it, and after each no byte of SQLite's files holds it.
The verdict and reasons, which are no words, stay: the bad share still counts the call."""

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from dashboard.org.models import ApiKey
from rtvi_monitor.privacy import retention
from rtvi_monitor.reviews.models import Review, ReviewReason
from rtvi_monitor.sessions.models import Session, SessionCaller, caller_key
from tests.reviews.test_reviews import call, signed_in


def stored_bytes() -> bytes:
    name = Path(connection.settings_dict["NAME"])
    return b"".join(p.read_bytes() for p in name.parent.glob(name.name + "*") if p.is_file())


def erased_by(path: str, org) -> None:
    if path == "purge":
        Session.objects.filter(session_id="erase-me").update(ended_at=timezone.now() - timedelta(days=10))
        org.keep_messages_days = 5
        org.save()
        retention.purge_round()
        return
    key = ApiKey.issue(org, "eraser")[1]
    url = "/api/sessions/erase-me/" if path == "session" else "/api/sessions/?caller=u"
    response = Client().delete(url, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    if path == "session":
        assert response.json()["reviews"] == 2  # the call's mark and its turn's


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["session", "caller", "purge"])
def test_after_the_call_is_erased_or_purged_no_byte_of_sqlite_holds_the_note(org, path):
    if connection.vendor != "sqlite" or connection.settings_dict["NAME"].startswith(("file:", ":memory:")):
        pytest.skip("the bytes of a SQLite file: run with SQLITE_TEST_PATH")
    note = f"notequux{uuid.uuid4().hex[:12]}"
    session = call(org, "erase-me")
    SessionCaller.objects.create(session=session, caller_key=caller_key(org.pk, "u"))
    operator = signed_in(org, "operator", "op")
    operator.get("/sessions/erase-me/")  # the default reasons
    wrong = ReviewReason.objects.get(organization=org, label="wrong answer").pk
    for turn in ("", "2"):
        form = {"verdict": "bad", "turn": turn, "reason": [wrong], "note": f"{note} turn {turn}"}
        assert operator.post("/sessions/erase-me/review/", form).status_code == 302
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert note.encode() in stored_bytes()  # it was there, as stored

    erased_by(path, org)
    after = stored_bytes()
    assert note.encode() not in after
    kept = list(Review.objects.order_by("turn"))
    assert len(kept) == 2 and all(r.note == "" and r.verdict == "bad" for r in kept)
    assert all([r.label for r in review.reasons.all()] == ["wrong answer"] for review in kept)
    if path == "purge":
        assert all(r.session_id is not None for r in kept)  # retention keeps the call's row
    else:
        assert all(r.session_id is None and r.session_key == "erase-me" for r in kept)
    assert "100 % (1/1)" in operator.get("/reviews/").content.decode()  # the share still counts it
