"""Every number a request carries is bounded before it is converted: a clear 400 that names it, never a 500.

The audio's Range and X-Audio-* headers are tests/audio/test_audio.py's; query parameters are dashboard.web.http.Query's
(tests/web/test_query_params.py).
"""

import pytest
from django.contrib.messages import get_messages

from dashboard.org.models import ApiKey, AuditEntry
from tests.alerts.test_alert_workflow import firing  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

HUGE = "9" * 5000  # int() of it raises ValueError: past Python's 4,300 digits


@pytest.mark.parametrize("declared", [HUGE, "\u00b2", "12abc"])
def test_a_declared_body_size_that_is_not_a_number_is_a_400(client, declared):
    answer = client.post("/api/alerts/rules/", b"{}", content_type="application/json", CONTENT_LENGTH=declared)
    assert answer.status_code == 400 and "is not a number of bytes" in answer.json()["error"]


@pytest.mark.parametrize(
    ("path", "form", "name"),
    [
        ("/settings/members/", {"do": "role", "membership": HUGE, "role": "viewer"}, "membership"),
        ("/settings/members/", {"do": "revoke", "invitation": "abc"}, "invitation"),
        ("/settings/keys/", {"do": "revoke-key", "id": HUGE}, "id"),
        ("/settings/keys/", {"do": "revoke-token", "id": str(2**63)}, "id"),
        ("/settings/retention/", {"do": "forget-agent", "id": "\u00b2"}, "id"),
        ("/settings/alert-rules/", {"do": "delete-channel", "rule": HUGE}, "rule"),
    ],
)
def test_a_forms_row_id_that_is_not_an_id_is_a_400_naming_it(staff_client, path, form, name):
    answer = staff_client.post(path, form)
    assert answer.status_code == 400
    assert answer.content.decode().startswith(f"{name}: expected the id of a row on this page")
    assert not AuditEntry.objects.exclude(action="sign_in").exists()


def test_an_edit_link_with_no_id_in_it_is_a_400(staff_client):
    answer = staff_client.get(f"/settings/prices/?edit={HUGE}")
    assert answer.status_code == 400 and b"edit: expected the id" in answer.content


def test_a_real_id_still_works(staff_client, org):
    key, _ = ApiKey.issue(org, "script")
    staff_client.post("/settings/keys/", {"do": "revoke-key", "id": str(key.pk)})
    key.refresh_from_db()
    assert key.revoked_at is not None


@pytest.mark.parametrize("cursor", ["2025-01-01T00:00:00+00:00_" + "9" * 30, f"{'9' * 60}_1", "x_\u00b2"])
def test_a_session_list_cursor_with_a_number_too_long_is_a_400_that_says_so(staff_client, cursor):
    answer = staff_client.get("/sessions/", {"before": cursor})
    assert answer.status_code == 400 and answer.content == b"before: not a cursor this page made"


def test_a_session_list_cursor_too_long_to_be_one_is_named_on_the_page(staff_client):
    answer = staff_client.get("/sessions/", {"before": HUGE})
    assert answer.status_code == 200 and b"before: expected at most 200 characters" in answer.content


@pytest.mark.parametrize("minutes", [HUGE, "\u00b2", "-5"])
def test_silencing_for_minutes_that_are_not_a_number_says_what_it_takes(operator_client, firing, minutes):  # noqa: F811
    answer = operator_client.post(f"/alerts/{firing.pk}/act/", {"do": "silence", "minutes": minutes})
    assert answer.status_code == 302
    (said,) = [str(m) for m in get_messages(answer.wsgi_request)]
    assert said.startswith("minutes: expected a whole number from 0")
    firing.refresh_from_db()
    assert firing.silenced_until is None
