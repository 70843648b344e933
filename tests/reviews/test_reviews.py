"""Review of calls through the real URLconf: marks on a call and its turns, the reason list, queues, the bad share.

As a viewer (verdicts, reasons and counts, never a note), an operator (marks, queues), an admin (the reason
list), an API key with read or write scope, and another organization (a 404, nothing of ours). Every change is
in the audit log with the call, the turn, the verdict and the reasons' labels, never the note; a refused
attempt leaves no entry.
"""

import json
from html import unescape

import pytest
from django.test import Client

from dashboard.org.models import ApiKey, AuditEntry
from rtvi_monitor.reviews.marks import DEFAULT_REASONS
from rtvi_monitor.reviews.models import Review, ReviewQueue, ReviewReason
from tests.conftest import make_member
from tests.session_samples import make_session

NOTE = "The caller said her card number was 4111 and the bot read it back"
MARKED = AuditEntry.Action.REVIEW_MARKED
REVIEW_ACTIONS = [
    MARKED,
    AuditEntry.Action.REVIEW_QUEUE_MADE,
    AuditEntry.Action.REVIEW_QUEUE_ASSIGNED,
    AuditEntry.Action.REVIEW_QUEUE_DELETED,
    AuditEntry.Action.REVIEW_REASONS_CHANGED,
]


def signed_in(org, role: str, name: str) -> Client:
    client = Client()
    client.force_login(make_member(org, name, role))
    return client


def keyed(org, scopes: str) -> Client:
    record, secret = ApiKey.issue(org, f"{scopes} script")
    record.scopes = scopes
    record.save()
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def call(org, session_id="call-7", **fields):
    defaults = {"agent_key": "support", "deployment_id": "dep-1", "status": "ended", "turn_count": 3}
    return make_session(org, session_id, **{**defaults, **fields})


def reason_ids(org, *labels) -> list[int]:
    return [ReviewReason.objects.get(organization=org, label=label).pk for label in labels]


def mark_form(org, verdict="bad", turn="", note=NOTE, labels=("wrong answer", "too slow")) -> dict:
    return {"verdict": verdict, "turn": turn, "note": note, "reason": reason_ids(org, *labels)}


def review_entries(org) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(organization=org, action__in=REVIEW_ACTIONS).order_by("at", "id"))


@pytest.fixture
def session(org):
    return call(org)


@pytest.fixture
def operator(org, session):
    client = signed_in(org, "operator", "op")
    assert client.get("/sessions/call-7/").status_code == 200  # the page makes the default reasons, on first use
    return client


@pytest.fixture
def viewer(org):
    return signed_in(org, "viewer", "watcher")


# --- marking ---------------------------------------------------------------------------------------------------


def test_an_organization_without_reasons_gets_the_default_list_on_first_use(org, operator):
    labels = list(ReviewReason.objects.filter(organization=org).values_list("label", flat=True))
    assert labels == [label for label, _ in DEFAULT_REASONS]
    html = operator.get("/sessions/call-7/").content.decode()
    assert all(label in html for label, _ in DEFAULT_REASONS)
    assert ReviewReason.objects.filter(organization=org).count() == len(DEFAULT_REASONS)  # made once


def test_an_operator_marks_the_call_bad_with_two_reasons_and_it_is_audited_without_the_note(org, operator):
    response = operator.post("/sessions/call-7/review/", mark_form(org))
    assert response.status_code == 302 and response["Location"] == "/sessions/call-7/#reviews"
    review = Review.objects.get()
    assert (review.turn, review.verdict, review.note, review.reviewer_name) == (None, "bad", NOTE, "op")
    assert sorted(r.label for r in review.reasons.all()) == ["too slow", "wrong answer"]
    assert (review.agent_key, review.deployment_id, review.session_key) == ("support", "dep-1", "call-7")
    (entry,) = review_entries(org)
    assert entry.target == "call-7" and entry.actor == "op"
    assert entry.detail == {
        "change": "new",
        "turn": "whole call",
        "verdict": "bad",
        "reasons": ["wrong answer", "too slow"],
    }
    assert "4111" not in json.dumps(entry.detail) and "4111" not in entry.summary
    html = operator.get("/sessions/call-7/").content.decode()
    assert NOTE in html and "wrong answer, too slow" in html and "Remove my mark" in html


def test_marking_again_replaces_the_mark_and_says_changed(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    operator.post("/sessions/call-7/review/", mark_form(org, verdict="good", note="fine after all", labels=()))
    review = Review.objects.get()
    assert review.verdict == "good" and review.note == "fine after all" and not review.reasons.exists()
    assert [e.detail["change"] for e in review_entries(org)] == ["new", "changed"]
    assert review_entries(org)[1].detail == {
        "change": "changed",
        "turn": "whole call",
        "verdict": "good",
        "reasons": [],
    }


def test_a_turn_is_marked_apart_from_the_call_and_each_reviewer_has_their_own(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    operator.post("/sessions/call-7/review/", mark_form(org, turn="2", labels=("ignored a barge-in",)))
    other = signed_in(org, "operator", "op2")
    other.post("/sessions/call-7/review/", mark_form(org, verdict="good", labels=()))
    assert Review.objects.count() == 3
    assert set(Review.objects.values_list("turn", "reviewer_name")) == {(None, "op"), (2, "op"), (None, "op2")}
    assert review_entries(org)[1].detail["turn"] == 2


def test_removing_ones_mark_is_audited_and_removing_none_is_not(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org, turn="1"))
    assert operator.post("/sessions/call-7/review/", {"remove": "1"}).status_code == 302
    assert not Review.objects.exists()
    assert operator.post("/sessions/call-7/review/", {"remove": "1"}).status_code == 302
    assert [e.detail["change"] for e in review_entries(org)] == ["new", "removed"]
    assert review_entries(org)[1].detail["reasons"] == ["wrong answer", "too slow"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"verdict": "meh"}, "good or bad"),
        ({"verdict": ""}, "good or bad"),
        ({"turn": "9"}, "no turn 9"),
        ({"turn": "0"}, "no turn 0"),
        ({"turn": "two"}, "turn's number"),
        ({"reason": ["99999"]}, "not one of the organization's reasons"),
        ({"reason": ["x"]}, "one of the organization's reasons"),
    ],
)
def test_a_mark_that_cannot_be_is_refused_with_its_reason_and_nothing_audited(org, operator, change, says):
    response = operator.post("/sessions/call-7/review/", {**mark_form(org), **change})
    assert response.status_code == 400 and says in unescape(response.content.decode())
    assert not Review.objects.exists() and not review_entries(org)


def test_a_retired_reason_is_refused_on_a_new_mark_and_stays_on_old_ones(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    ReviewReason.objects.filter(organization=org, label="too slow").update(active=False)
    response = operator.post("/sessions/call-7/review/", mark_form(org, turn="1"))
    assert response.status_code == 400
    assert "too slow" in {r.label for r in Review.objects.get().reasons.all()}


# --- viewers ---------------------------------------------------------------------------------------------------


def test_a_viewer_sees_verdicts_and_reasons_never_a_note(org, operator, viewer):
    operator.post("/sessions/call-7/review/", mark_form(org))
    html = viewer.get("/sessions/call-7/").content.decode()
    assert 'data-testid="review-mark"' in html and "wrong answer, too slow" in html and ">bad<" in html
    assert NOTE not in html and "4111" not in html and 'data-testid="review-note"' not in html
    assert 'data-testid="review-form"' not in html  # nothing to mark with
    answer = viewer.get("/api/sessions/call-7/reviews/").json()
    assert answer["marks"][0]["verdict"] == "bad" and "note" not in answer["marks"][0]
    assert "4111" not in json.dumps(answer)
    assert operator.get("/api/sessions/call-7/reviews/").json()["marks"][0]["note"] == NOTE


def test_a_viewers_mark_is_refused_with_the_reason_and_leaves_nothing(org, operator, viewer):
    response = viewer.post("/sessions/call-7/review/", mark_form(org))
    assert response.status_code == 403 and "operator" in response.content.decode()
    api = viewer.post("/api/sessions/call-7/reviews/", {"verdict": "bad"}, content_type="application/json")
    assert api.status_code == 403  # without a CSRF token too: refused either way
    assert not Review.objects.exists() and not review_entries(org)


# --- API keys --------------------------------------------------------------------------------------------------


def test_a_read_key_reads_marks_and_a_write_key_marks(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    reader = keyed(org, "read")
    answer = reader.get("/api/sessions/call-7/reviews/")
    assert answer.status_code == 200 and answer.json()["marks"][0]["note"] == NOTE  # a key's "read" reads contents
    refused = reader.post("/api/sessions/call-7/reviews/", {"verdict": "bad"}, content_type="application/json")
    assert refused.status_code == 403 and "'write'" in refused.json()["error"]
    writer = keyed(org, "write")
    body = {"verdict": "bad", "turn": 3, "reasons": reason_ids(org, "hallucinated"), "note": "made up a refund"}
    made = writer.post("/api/sessions/call-7/reviews/", body, content_type="application/json")
    assert made.status_code == 200 and made.json()["change"] == "new"
    assert "note" not in made.json()["mark"]  # a write-only key reads no contents
    review = Review.objects.get(turn=3)
    assert review.reviewer is None and review.reviewer_name.startswith("API key ")
    entry = review_entries(org)[-1]
    assert entry.actor.startswith("API key ") and entry.detail["reasons"] == ["hallucinated"]
    assert writer.get("/api/sessions/call-7/reviews/").status_code == 403
    removed = writer.post("/api/sessions/call-7/reviews/", {"remove": True, "turn": 3}, content_type="application/json")
    assert removed.json() == {"removed": True} and not Review.objects.filter(turn=3).exists()


@pytest.mark.parametrize(
    "body", ["[]", "null", "not json", '{"verdict": "bad", "note": 5}', '{"verdict": "bad", "reasons": "1"}']
)
def test_a_json_body_that_is_no_mark_is_a_400_with_its_reason(org, session, body):
    response = keyed(org, "read,write").post("/api/sessions/call-7/reviews/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]
    assert not Review.objects.exists() and not review_entries(org)


# --- another organization --------------------------------------------------------------------------------------


def test_another_organization_gets_a_404_and_nothing_of_ours(org, other_org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    operator.post("/reviews/", {"name": "Acme barge-ins", "days": "7"})
    queue = ReviewQueue.objects.get()
    stranger = signed_in(other_org, "admin", "globex")
    key = keyed(other_org, "read,write")
    for client in (stranger, key):
        for response in (
            client.get("/api/sessions/call-7/reviews/"),
            client.post("/api/sessions/call-7/reviews/", {"verdict": "good"}, content_type="application/json"),
        ):
            assert response.status_code in (403, 404) and "wrong answer" not in response.content.decode()
    for response in (
        stranger.post("/sessions/call-7/review/", mark_form(org)),
        stranger.get(f"/reviews/queues/{queue.pk}/"),
        stranger.post(f"/reviews/queues/{queue.pk}/", {"delete": "1"}),
        stranger.post(f"/reviews/queues/{queue.pk}/", {"assignee": ""}),
    ):
        assert response.status_code == 404
    html = stranger.get("/reviews/").content.decode()
    assert "Acme barge-ins" not in html and "support" not in html and "call-7" not in html
    assert Review.objects.get().verdict == "bad" and ReviewQueue.objects.filter(pk=queue.pk).exists()
    assert not review_entries(other_org)
    assert key.get("/api/reviews/").json() == {"queues": [], "bad_share": []}


# --- queues ----------------------------------------------------------------------------------------------------


def test_a_queue_lists_the_calls_its_filter_matches_oldest_unreviewed_first(org, operator):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    call(org, "old-noisy", started_at=now - timedelta(days=3), error_count=2, interruption_count=1)
    call(org, "new-noisy", started_at=now - timedelta(days=1), error_count=1, interruption_count=2)
    call(org, "quiet", started_at=now - timedelta(days=1), interruption_count=1)  # no error
    call(org, "ancient", started_at=now - timedelta(days=30), error_count=1, interruption_count=1)
    call(org, "other-agent", agent_key="sales", error_count=1, interruption_count=1)
    call(org, "reviewed", started_at=now - timedelta(days=5), error_count=1, interruption_count=1)
    operator.post("/sessions/reviewed/review/", mark_form(org))
    member = make_member(org, "ana", "operator")
    form = {"name": "barge-ins with errors on support this week", "agent_key": "support", "days": "7"}
    form |= {"with_errors": "on", "with_interruptions": "on", "assignee": str(member.pk)}
    response = operator.post("/reviews/", form)
    queue = ReviewQueue.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/reviews/queues/{queue.pk}/"
    page = operator.get(response["Location"]).content.decode()
    order = [sid for sid in ("old-noisy", "new-noisy", "reviewed") if sid in page]
    assert order == ["old-noisy", "new-noisy", "reviewed"]
    assert page.index("old-noisy") < page.index("new-noisy") < page.index('href="/sessions/reviewed/')
    assert "quiet" not in page and "ancient" not in page and "other-agent" not in page
    assert "1/3 reviewed" in page and "ana" in page
    home = operator.get("/reviews/").content.decode()
    assert "1/3" in home and "barge-ins with errors on support this week" in home
    (made,) = [e for e in review_entries(org) if e.action == AuditEntry.Action.REVIEW_QUEUE_MADE]
    assert made.detail["assignee"] == "ana" and "with errors" in made.detail["filter"]


def test_assigning_and_deleting_a_queue_are_audited_and_a_stranger_cannot_be_assigned(org, other_org, operator):
    operator.post("/reviews/", {"name": "all", "days": "7"})
    queue = ReviewQueue.objects.get()
    ana = make_member(org, "ana", "viewer")
    stranger = make_member(other_org, "globex", "admin")
    refused = operator.post(f"/reviews/queues/{queue.pk}/", {"assignee": str(stranger.pk)})
    assert refused.status_code == 400 and "member of the organization" in refused.content.decode()
    assert operator.post(f"/reviews/queues/{queue.pk}/", {"assignee": str(ana.pk)}).status_code == 302
    queue.refresh_from_db()
    assert queue.assignee == ana
    assert operator.post(f"/reviews/queues/{queue.pk}/", {"delete": "1"}).status_code == 302
    assert not ReviewQueue.objects.exists()
    actions = [e.action for e in review_entries(org)]
    assert actions == [
        AuditEntry.Action.REVIEW_QUEUE_MADE,
        AuditEntry.Action.REVIEW_QUEUE_ASSIGNED,
        AuditEntry.Action.REVIEW_QUEUE_DELETED,
    ]
    assert review_entries(org)[1].detail == {"queue": queue.pk, "assignee": "ana", "was": "nobody"}


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"name": "", "days": "7"}, "Name the queue"),
        ({"name": "x", "days": "0"}, "from 1 to 90"),
        ({"name": "x", "days": "many"}, "from 1 to 90"),
        ({"name": "x", "days": "91"}, "from 1 to 90"),
        ({"name": "x" * 81, "days": "7"}, "at most 80"),
        ({"name": "x", "days": "7", "end_kind": "exploded"}, "end kind"),
        ({"name": "x", "days": "7", "assignee": "nobody"}, "member of the organization"),
    ],
)
def test_a_queue_that_cannot_be_is_refused_with_its_reason(org, operator, form, says):
    response = operator.post("/reviews/", form)
    assert response.status_code == 400 and says in response.content.decode()
    assert not ReviewQueue.objects.exists() and not review_entries(org)


def test_a_viewer_sees_queues_and_shares_but_cannot_make_or_change_one(org, operator, viewer):
    operator.post("/reviews/", {"name": "all", "days": "7"})
    queue = ReviewQueue.objects.get()
    page = viewer.get("/reviews/")
    assert page.status_code == 200 and "all" in page.content.decode()
    assert 'data-testid="queue-form"' not in page.content.decode()
    assert viewer.post("/reviews/", {"name": "mine", "days": "7"}).status_code == 403
    assert viewer.post(f"/reviews/queues/{queue.pk}/", {"delete": "1"}).status_code == 403
    assert viewer.get(f"/reviews/queues/{queue.pk}/").status_code == 200
    assert ReviewQueue.objects.count() == 1 and len(review_entries(org)) == 1


# --- the bad share ---------------------------------------------------------------------------------------------


def test_the_bad_share_counts_each_reviewed_call_once_by_its_latest_mark_with_its_base(org, operator):
    call(org, "call-8")
    call(org, "call-9", deployment_id="dep-2")
    operator.post("/sessions/call-7/review/", mark_form(org))
    operator.post("/sessions/call-8/review/", mark_form(org, verdict="good", labels=()))
    operator.post("/sessions/call-8/review/", mark_form(org, turn="1"))  # a turn's mark: not the call's
    operator.post("/sessions/call-9/review/", mark_form(org))
    html = operator.get("/reviews/").content.decode()
    assert "50 % (1/2)" in html and "100 % (1/1)" in html
    shares = operator.get("/api/reviews/").json()["bad_share"]
    assert sorted((r["deployment_id"], r["bad"], r["reviewed"]) for r in shares) == [("dep-1", 1, 2), ("dep-2", 1, 1)]
    later = signed_in(org, "operator", "op2")  # a second reviewer's later word is the call's
    later.post("/sessions/call-8/review/", mark_form(org))
    assert "100 % (2/2)" in operator.get("/reviews/").content.decode()


# --- the reason list -------------------------------------------------------------------------------------------


def test_an_admin_changes_the_reason_list_audited_and_an_operator_may_not(org, operator):
    admin = signed_in(org, "admin", "boss")
    assert operator.get("/reviews/reasons/").status_code == 403
    assert operator.post("/reviews/reasons/", {"add": "rude"}).status_code == 403
    assert admin.post("/reviews/reasons/", {"add": "  rude   to the caller "}).status_code == 302
    slow = ReviewReason.objects.get(label="too slow")
    assert admin.post("/reviews/reasons/", {f"rename-{slow.pk}": "slow to answer"}).status_code == 302
    assert admin.post("/reviews/reasons/", {"retire": str(slow.pk)}).status_code == 302
    slow.refresh_from_db()
    assert slow.label == "slow to answer" and not slow.active
    changes = [e.detail["change"] for e in review_entries(org)]
    assert changes == [["added rude to the caller"], ["renamed too slow to slow to answer"], ["retired slow to answer"]]
    duplicate = admin.post("/reviews/reasons/", {"add": "WRONG ANSWER"})
    assert duplicate.status_code == 400 and "already has" in duplicate.content.decode()
    assert admin.post("/reviews/reasons/", {"add": "x" * 61}).status_code == 400
    assert len(review_entries(org)) == 3


def test_a_call_marked_bad_becomes_a_scenario_that_starts_from_its_reviewers_reasons(org, operator):
    """Issue 36: from review to test. The draft names the marks that said the call went wrong, and its note starts
    from their reasons (the reviewer's own note stays on the mark: it is not copied)."""
    operator.post("/sessions/call-7/review/", mark_form(org))
    operator.post("/sessions/call-7/review/", mark_form(org, turn="1", labels=("cut the caller off",)))
    operator.post("/sessions/call-7/review/", mark_form(org, turn="2", verdict="good", labels=()))
    page = operator.get("/sessions/call-7/scenario/").content.decode()
    assert 'data-testid="reviewed"' in page
    assert "the whole call (wrong answer, too slow)" in page and "turn 1 (cut the caller off)" in page
    assert "turn 2" not in page[page.index('data-testid="reviewed"') :][:400]  # a good mark is no reason
    note = page[page.index('id="scenario-note"') :]
    assert "the whole call: wrong answer, too slow; turn 1: cut the caller off" in note[:1000]
    assert NOTE not in page
