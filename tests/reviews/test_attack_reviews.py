"""Review of calls attacked from outside, through the real URLconf.

Who must get nothing: a viewer posting a mark by every door (403 with the reason, nothing saved or audited), a
member of another organization naming our call, our queue or our reasons (404, nothing of ours), a member demoted
or removed, a browser's post without its CSRF token. What must not break it or leak: markup in a note, a reason's
label and a queue's name (shown as text everywhere, the audit log too), an overlong note (refused, not cut),
numbers past what an id holds, odd session ids, reason ids of another organization, JSON of the wrong shapes.
"""

import json
from html import unescape

import pytest
from django.test import Client

from dashboard.org.models import AuditEntry, Membership
from rtvi_monitor.reviews.models import NOTE_MAX, Review, ReviewQueue, ReviewReason
from tests.conftest import make_member
from tests.reviews.test_reviews import call, keyed, mark_form, reason_ids, review_entries, signed_in

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def session(org):
    return call(org)


@pytest.fixture
def operator(org, session):
    client = signed_in(org, "operator", "op")
    client.get("/sessions/call-7/")
    return client


def nothing_changed(org) -> bool:
    return not Review.objects.exists() and not review_entries(org)


# --- a viewer, by every door ------------------------------------------------------------------------------------


def test_a_viewer_marks_nothing_by_any_door_or_method(org, operator):
    viewer = signed_in(org, "viewer", "watcher")
    form = mark_form(org)
    for method in ("post", "put", "patch", "delete"):
        response = getattr(viewer, method)("/sessions/call-7/review/", form)
        assert response.status_code in (403, 405), method
    for url in ("/reviews/", "/reviews/reasons/"):
        assert viewer.post(url, {"name": "mine", "days": "7", "add": "mine"}).status_code == 403
    token_client = Client(enforce_csrf_checks=True)
    token_client.force_login(Membership.objects.get(role="viewer").user)
    page = token_client.get("/sessions/call-7/")
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else ""
    body = {"verdict": "bad", "reasons": reason_ids(org, "wrong answer")}
    api = token_client.post(
        "/api/sessions/call-7/reviews/", body, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert api.status_code == 403 and "operator" in api.json()["error"]
    assert nothing_changed(org) and not ReviewQueue.objects.exists()


def test_a_member_demoted_or_removed_is_refused_at_once(org, operator):
    membership = Membership.objects.get(user__username="op")
    membership.role = "viewer"
    membership.save()
    assert operator.post("/sessions/call-7/review/", mark_form(org)).status_code == 403
    membership.delete()
    assert operator.post("/sessions/call-7/review/", mark_form(org)).status_code in (302, 403)
    assert nothing_changed(org)


def test_a_browser_post_without_its_csrf_token_marks_nothing(org, operator):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(Membership.objects.get(user__username="op").user)
    assert browser.post("/sessions/call-7/review/", mark_form(org)).status_code == 403
    json_post = browser.post("/api/sessions/call-7/reviews/", {"verdict": "bad"}, content_type="application/json")
    assert json_post.status_code == 403
    assert browser.post("/reviews/", {"name": "q", "days": "7"}).status_code == 403
    assert nothing_changed(org) and not ReviewQueue.objects.exists()


# --- another organization ---------------------------------------------------------------------------------------


def test_our_operator_cannot_mark_another_organizations_call_nor_use_its_reasons(org, other_org, operator):
    call(other_org, "their-call", agent_key="theirs")
    theirs = signed_in(other_org, "operator", "globex")
    theirs.get("/sessions/their-call/")  # their default list
    their_reason = ReviewReason.objects.filter(organization=other_org).first().pk
    response = operator.post("/sessions/their-call/review/", {"verdict": "bad"})
    assert response.status_code == 404 and "theirs" not in response.content.decode()
    assert operator.get("/api/sessions/their-call/reviews/").status_code == 404
    refused = operator.post("/sessions/call-7/review/", {"verdict": "bad", "reason": [their_reason]})
    assert refused.status_code == 400  # their reason is no reason of ours
    assert nothing_changed(org) and not review_entries(other_org)


def test_a_queue_of_another_organization_is_a_404_for_every_method_and_id(org, other_org, operator):
    theirs = signed_in(other_org, "operator", "globex")
    theirs.post("/reviews/", {"name": "Globex secret queue", "days": "7"})
    queue = ReviewQueue.objects.get()
    for path in (f"/reviews/queues/{queue.pk}/", "/reviews/queues/99999999999999999999999/", "/reviews/queues/0/"):
        assert operator.get(path).status_code == 404, path
        assert operator.post(path, {"delete": "1"}).status_code == 404, path
    assert "Globex secret queue" not in operator.get("/reviews/").content.decode()
    assert ReviewQueue.objects.filter(pk=queue.pk).exists() and not review_entries(org)


# --- markup, shown as text --------------------------------------------------------------------------------------


def test_markup_in_a_note_a_label_and_a_queue_name_is_text_everywhere(org, operator):
    admin = signed_in(org, "admin", "boss")
    assert admin.post("/reviews/reasons/", {"add": HOSTILE[:60]}).status_code == 302
    hostile = ReviewReason.objects.get(label=HOSTILE[:60])
    form = {"verdict": "bad", "note": HOSTILE, "reason": [hostile.pk]}
    assert operator.post("/sessions/call-7/review/", form).status_code == 302
    assert operator.post("/reviews/", {"name": HOSTILE[:80], "days": "7"}).status_code == 302
    queue = ReviewQueue.objects.get()
    pages = [
        operator.get("/sessions/call-7/"),
        signed_in(org, "viewer", "watcher").get("/sessions/call-7/"),
        operator.get("/reviews/"),
        operator.get(f"/reviews/queues/{queue.pk}/"),
        admin.get("/reviews/reasons/"),
        admin.get("/audit/"),
    ]
    for response in pages:
        html = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in html and "<img src=x" not in html, response.request["PATH_INFO"]
    assert "&lt;script&gt;" in pages[0].content.decode()
    answer = operator.get("/api/sessions/call-7/reviews/")
    assert answer["Content-Type"].startswith("application/json") and answer.json()["marks"][0]["note"] == HOSTILE


def test_an_overlong_note_is_refused_whole_never_cut(org, operator):
    too_long = "n" * (NOTE_MAX + 1)
    response = operator.post("/sessions/call-7/review/", {**mark_form(org), "note": too_long})
    assert response.status_code == 400 and f"at most {NOTE_MAX}" in response.content.decode()
    key = keyed(org, "read,write")
    api = key.post(
        "/api/sessions/call-7/reviews/", {"verdict": "bad", "note": too_long}, content_type="application/json"
    )
    assert api.status_code == 400
    assert nothing_changed(org)
    assert operator.post("/sessions/call-7/review/", {**mark_form(org), "note": "n" * NOTE_MAX}).status_code == 302
    assert len(Review.objects.get().note) == NOTE_MAX


def test_a_body_past_djangos_limit_is_refused_not_a_500(org, operator):
    response = operator.post("/sessions/call-7/review/", {**mark_form(org), "note": "n" * 3_000_000})
    assert response.status_code == 413 and nothing_changed(org)  # the project's answer to a body past the limit


# --- numbers and ids that are no ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        {"turn": "99999999999999999999999999"},
        {"turn": "-1"},
        {"turn": "1" * 5000},
        {"turn": "²"},
        {"reason": ["99999999999999999999999999"]},
        {"reason": ["-3"]},
        {"reason": ["1" * 5000]},
    ],
)
def test_numbers_past_an_id_are_refused_with_a_reason_never_a_500(org, operator, field):
    response = operator.post("/sessions/call-7/review/", {**mark_form(org), **field})
    assert response.status_code == 400 and "review-refused" in response.content.decode()
    assert nothing_changed(org)


@pytest.mark.parametrize("assignee", ["99999999999999999999999", "-1", "x", "1" * 5000])
def test_an_assignee_that_is_no_member_is_refused(org, operator, assignee):
    response = operator.post("/reviews/", {"name": "q", "days": "7", "assignee": assignee})
    assert response.status_code == 400 and "member of the organization" in unescape(response.content.decode())
    assert not ReviewQueue.objects.exists()


@pytest.mark.parametrize("session_id", ["..", "a%2Fb", "x" * 500, "call-7%00", "%F0%9F%92%A5"])
def test_odd_session_ids_are_a_404_never_a_500(org, operator, session_id):
    assert operator.post(f"/sessions/{session_id}/review/", mark_form(org)).status_code == 404
    assert operator.get(f"/api/sessions/{session_id}/reviews/").status_code == 404
    assert nothing_changed(org)


@pytest.mark.parametrize(
    "body",
    [
        {"verdict": "bad", "turn": True},
        {"verdict": "bad", "turn": 1.5},
        {"verdict": "bad", "turn": [1]},
        {"verdict": "bad", "reasons": [True]},
        {"verdict": "bad", "reasons": [{"id": 1}]},
        {"verdict": ["bad"]},
        {"verdict": "bad", "note": ["a"]},
        {"remove": True, "turn": "x"},
    ],
)
def test_json_of_the_wrong_shapes_is_a_400(org, operator, body):
    response = keyed(org, "read,write").post("/api/sessions/call-7/reviews/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]
    assert nothing_changed(org)


def test_no_audit_entry_ever_holds_a_note(org, operator):
    secret = "the caller's account is 99887766"
    operator.post("/sessions/call-7/review/", {**mark_form(org), "note": secret})
    operator.post("/sessions/call-7/review/", {**mark_form(org, turn="1"), "note": secret})
    operator.post("/sessions/call-7/review/", {"remove": "1"})
    entries = list(AuditEntry.objects.filter(organization=org).values("detail", "target", "actor"))
    assert len(review_entries(org)) == 3
    assert "99887766" not in json.dumps(entries)


def test_two_members_in_two_organizations_with_the_same_session_id_see_only_their_own(org, other_org, operator):
    call(other_org, "call-7", agent_key="theirs")
    theirs = signed_in(other_org, "operator", "globex")
    operator.post("/sessions/call-7/review/", {**mark_form(org), "note": "ours only"})
    html = theirs.get("/sessions/call-7/").content.decode()
    assert "ours only" not in html and 'data-testid="no-marks"' in html
    assert theirs.get("/api/sessions/call-7/reviews/").json()["marks"] == []
    make_member(other_org, "globex-viewer", "viewer")
    assert "ours only" not in json.dumps(keyed(other_org, "read").get("/api/reviews/").json())


def test_the_reason_form_changes_no_reason_of_another_organization(org, other_org, operator):
    theirs = signed_in(other_org, "operator", "globex")
    call(other_org, "their-call")
    theirs.get("/sessions/their-call/")
    their_reason = ReviewReason.objects.filter(organization=other_org).first()
    admin = signed_in(org, "admin", "boss")
    form = {f"rename-{their_reason.pk}": "pwned", "retire": str(their_reason.pk), "restore": str(their_reason.pk)}
    assert admin.post("/reviews/reasons/", form).status_code == 302
    their_reason.refresh_from_db()
    assert their_reason.label != "pwned" and their_reason.active
    assert not review_entries(org) and not review_entries(other_org)


def test_reading_notes_through_the_api_is_a_read_of_the_calls_contents_in_the_audit_log(org, operator):
    operator.post("/sessions/call-7/review/", mark_form(org))
    reader = keyed(org, "read")
    assert reader.get("/api/sessions/call-7/reviews/").json()["marks"][0]["note"]
    reads = AuditEntry.objects.filter(
        organization=org, action=AuditEntry.Action.SESSION_READ, actor__startswith="API key"
    )
    assert reads.count() == 1 and reads.get().detail == {"via": "review notes"}
    viewer = signed_in(org, "viewer", "watcher")
    viewer.get("/api/sessions/call-7/reviews/")  # no note shown: no read of contents
    assert not AuditEntry.objects.filter(
        organization=org, action=AuditEntry.Action.SESSION_READ, actor="watcher"
    ).exists()
