"""GET /api/sessions/<id>/events/ through the real URLconf: pages both ways, filters, limits, errors, scoping."""

import json
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from rtvi_monitor.sessions.models import Event, Session
from tests.session_samples import CONVERSATION, make_session
from tests.sockets import rtvi

pytestmark = pytest.mark.django_db

URL = "/api/sessions/call-1/events/"
COUNT = len(CONVERSATION) + 1  # make_session also stores one message that is not JSON


def page(client, key, query=""):
    response = client.get(f"{URL}?{query}", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    return response.json()


def seqs(body):
    return [e["seq"] for e in body["events"]]


def test_without_a_cursor_the_page_is_the_newest_messages(client, org, api_key):
    make_session(org)
    body = page(client, api_key, "limit=5")
    assert seqs(body) == list(range(COUNT - 4, COUNT + 1))
    assert body["next_after"] is None and body["prev_before"] == COUNT - 4
    first = body["events"][0]
    assert set(first) == {
        "seq",
        "stream",
        "bot_seq",
        "direction",
        "type",
        "received_at",
        "sent_at",
        "message",
        "valid",
        "error",
        "redacted",
    }
    assert body["events"][-1]["message"] == "not json at all" and body["events"][-1]["valid"] is False


def test_paging_back_reaches_the_first_message_and_forward_the_last(client, org, api_key):
    make_session(org)
    seen, body = [], page(client, api_key, "limit=4")
    seen = seqs(body) + seen
    while body["prev_before"] is not None:
        body = page(client, api_key, f"limit=4&before={body['prev_before']}")
        seen = seqs(body) + seen
    assert seen == list(range(1, COUNT + 1))  # every message once, in order

    seen, body = [], page(client, api_key, "limit=4&after=0")
    assert body["prev_before"] is None
    seen += seqs(body)
    while body["next_after"] is not None:
        body = page(client, api_key, f"limit=4&after={body['next_after']}")
        seen += seqs(body)
    assert seen == list(range(1, COUNT + 1))


def test_after_and_before_bound_a_window(client, org, api_key):
    make_session(org)
    body = page(client, api_key, "after=3&before=9")
    assert seqs(body) == [4, 5, 6, 7, 8]
    # The cursors say whether the session has more each way, beyond the window too.
    assert body["prev_before"] == 4 and body["next_after"] == 8
    assert page(client, api_key, "after=3&before=4")["events"] == []


def test_type_and_direction_filter_every_page(client, org, api_key):
    make_session(org)
    body = page(client, api_key, "type=bot-llm-text")
    assert [e["message"]["data"]["text"] for e in body["events"]] == ["It ships", " today."]
    assert body["next_after"] is None and body["prev_before"] is None
    body = page(client, api_key, "type=bot-llm-text&limit=1")
    assert seqs(body) == [9] and body["prev_before"] == 9
    assert seqs(page(client, api_key, "type=bot-llm-text&limit=1&before=9")) == [8]

    body = page(client, api_key, "direction=from-client")
    assert seqs(body) == [1] and body["events"][0]["type"] == "client-ready"
    assert seqs(page(client, api_key, "direction=to-client&after=0&limit=2")) == [2, 3]
    assert page(client, api_key, "direction=from-client&type=bot-llm-text")["events"] == []


def test_long_messages_come_as_previews(client, org, api_key):
    long_text = "x" * 9000
    make_session(org, messages=[("to-client", rtvi("server-message", {"blob": long_text}))])
    (event, _) = page(client, api_key)["events"]
    assert event["message"]["truncated"] is True and event["message"]["length"] > 9000
    whole = client.get(f"{URL}1/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    assert whole["message"]["data"]["blob"] == long_text


@pytest.mark.parametrize(
    "query,name",
    [
        ("after=x", "after"),
        ("after=-1", "after"),
        ("after=1.5", "after"),
        ("after=²", "after"),  # a digit to str.isdigit(), not to int()
        (f"before={2**63}", "before"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("direction=sideways", "direction"),
        ("type=" + "t" * 65, "type"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(client, org, api_key, query, name):
    make_session(org)
    response = client.get(f"{URL}?{query}", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{name}:")


def test_limits_at_their_bounds_are_taken(client, org, api_key):
    make_session(org)
    assert seqs(page(client, api_key, "limit=1")) == [COUNT]
    assert len(page(client, api_key, "limit=500")["events"]) == COUNT


def test_it_needs_a_key_or_a_staff_login(staff_client, org):
    make_session(org)
    anonymous = Client()
    assert anonymous.get(URL).status_code == 401
    assert anonymous.get(URL, HTTP_AUTHORIZATION="Bearer pk_bogus").status_code == 401
    assert [e["seq"] for e in staff_client.get(f"{URL}?limit=2").json()["events"]] == [COUNT - 1, COUNT]


def test_another_organizations_session_is_a_404(client, org, other_org, api_key):
    make_session(other_org, "globex-call")
    for path in ("/api/sessions/globex-call/events/", "/api/sessions/no-such-call/events/"):
        response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {api_key}")
        assert response.status_code == 404 and response.json()["code"] == "404"


def test_a_wrong_method_is_a_json_405(client, org, api_key):
    make_session(org)
    response = client.post(URL, HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 405 and response["Allow"] == "GET"


def test_a_page_deep_in_a_long_session_is_a_keyset_seek(client, org, api_key):
    """100,000 messages: every query of a page seeks on the (session, seq) index; none counts or skips rows."""
    session = Session.objects.create(organization=org, session_id="call-1")
    message = json.dumps(rtvi("bot-llm-text", {"text": " word"}))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {Event._meta.db_table} (session_id, seq, direction, type, received_at, message, valid, error)"
            " VALUES (%s, %s, 'to-client', 'bot-llm-text', %s, %s, %s, '')",
            [(session.pk, seq, 1_750_000_000 + seq / 100, message, True) for seq in range(1, 100_001)],
        )
    with CaptureQueriesContext(connection) as queries:
        body = page(client, api_key, "before=50001&limit=100")
    assert seqs(body) == list(range(49_901, 50_001))
    assert body["prev_before"] == 49_901 and body["next_after"] == 50_000
    event_queries = [q["sql"] for q in queries.captured_queries if Event._meta.db_table in q["sql"]]
    assert len(event_queries) == 3  # the page, and one look each way
    for sql in event_queries:
        assert "OFFSET" not in sql.upper() and "COUNT(" not in sql.upper()
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                plan = " ".join(str(row) for row in cursor.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
            # A seek on the unique (session_id, seq) index, read in its order: no scan, no sort.
            assert re.search(r"USING (COVERING )?INDEX \S+ \(session_id=\? AND seq[<>]\?\)", plan), plan
            assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan
