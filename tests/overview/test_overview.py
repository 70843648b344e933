"""The Overview through the real URLconf: error groups, sessions that ended badly, agents worst first, the panel."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from rtvi_monitor.overview.figures import overview
from rtvi_monitor.sessions.error_groups import error_groups, normalise
from rtvi_monitor.sessions.models import Event, Session
from tests.session_samples import error_event

pytestmark = pytest.mark.django_db


def error(session, seq, text, *, ago=60.0, **kwargs):
    return error_event(session, seq, text, ago=ago, **kwargs)


@pytest.mark.parametrize(
    ("text", "group"),
    [
        ("TTS websocket reconnected after 1532 ms", "TTS websocket reconnected after <n> ms"),
        ("STT stream stalled for 2.1 s (request id 7f3a9c2e)", "STT stream stalled for <n> s (request id <id>)"),
        ("call_abc123 failed: 502", "<id> failed: <n>"),
        ("session 3f2b8c1e-1111-4e2b-9a7c-0123456789ab gone", "session <id> gone"),
        ("  spaced   out  ", "spaced out"),
        (None, "(no message)"),
        ({"code": 7}, '{"code": <n>}'),
    ],
)
def test_numbers_and_ids_are_masked(text, group):
    assert normalise(text) == group


def test_masking_is_bounded_whatever_a_bot_sends():
    # A pattern with lookaheads took minutes on this (a bot chooses its error text); these are linear.
    assert normalise("a-" * 130_000).startswith("a-a-a-") and len(normalise("a-" * 130_000)) == 300
    assert normalise("x1" * 100_000) == "<id>"


def test_a_huge_error_message_is_grouped_by_the_start_of_its_text(org):
    session = Session.objects.create(organization=org, session_id="big")
    text = "Pipeline crashed: " + "x" * 50_000
    # Fatal stated before the long text: a message this long is read by its start (MAX_READ).
    message = {"label": "rtvi-ai", "type": "error", "data": {"fatal": True, "error": text}}
    Event.objects.create(
        session=session,
        seq=1,
        direction="to-client",
        type="error",
        received_at=time.time(),
        message=json.dumps(message),
    )
    (group,) = error_groups(org, timezone.now())
    assert group.text == "Pipeline crashed: " + "x" * 282 and group.fatal  # its first 300 characters
    # Pipecat writes "fatal" after the text: read from the message's end.
    error_event(Session.objects.create(organization=org, session_id="big-2"), 1, text, fatal=True)
    assert all(g.fatal for g in error_groups(org, timezone.now()))


def test_errors_are_grouped_by_text_agent_and_fatality(org, other_org, agents):
    support, sales = agents[0], agents[1]
    a = Session.objects.create(organization=org, session_id="a", agent=support)
    b = Session.objects.create(organization=org, session_id="b", agent=support)
    c = Session.objects.create(organization=org, session_id="c", agent=sales)
    error(a, 1, "TTS websocket reconnected after 1532 ms", ago=3000)
    error(a, 2, "TTS websocket reconnected after 88 ms", ago=100)
    error(b, 1, "TTS websocket reconnected after 9 ms", ago=50)
    error(c, 1, "TTS websocket reconnected after 12 ms", ago=40)  # another agent: another group
    error(b, 2, "LLM service returned 401 Unauthorized", fatal=True, ago=20)
    error(c, 2, "unknown action 'x'", kind="error-response", ago=10)
    error(c, 3, "this one was invalid", valid=False, ago=10)  # the reducer counts it invalid, not an error
    error(a, 3, "too old", ago=4000)
    stranger = Session.objects.create(organization=other_org, session_id="a")
    error(stranger, 1, "TTS websocket reconnected after 5 ms", ago=10)

    groups = error_groups(org, timezone.now())
    assert [(g.text, g.agent_id == str(support.pk), g.fatal, g.count) for g in groups] == [
        ("LLM service returned <n> Unauthorized", True, True, 1),  # fatal first
        ("TTS websocket reconnected after <n> ms", True, False, 3),  # then the biggest
        ("unknown action 'x'", False, False, 1),  # then the newest
        ("TTS websocket reconnected after <n> ms", False, False, 1),
    ]
    tts = groups[1]
    assert tts.shown_sessions == ["b", "a"]  # newest first
    assert tts.example == "TTS websocket reconnected after 9 ms"  # the newest one's own words
    assert tts.last_at - tts.first_at == pytest.approx(2950, abs=1)
    assert len(tts.spark) == 12 and sum(tts.spark) == 3 and tts.spark[-1] == 2  # five-minute bars, oldest first


def test_the_overview_puts_the_worst_agent_first_and_sessions_that_ended_badly_apart(org, agents):
    now = timezone.now()
    support, sales = agents[0], agents[1]
    for i in range(4):
        Session.objects.create(
            organization=org, session_id=f"s{i}", agent=support, latency_p50_ms=500, latency_p95_ms=800, cost_usd=0.01
        )
    Session.objects.create(organization=org, session_id="bad", agent=sales, error_count=2, latency_p95_ms=3000)
    Session.objects.create(
        organization=org,
        session_id="dead",
        agent=sales,
        fatal=True,
        status="ended",
        ended_at=now,
        end_reason="fatal error",
    )
    Session.objects.create(
        organization=org,
        session_id="restarted",
        agent=support,
        status="ended",
        ended_at=now,
        end_reason="server restarted",
    )
    Session.objects.create(organization=org, session_id="fine", agent=support, status="ended", ended_at=now)
    summary = overview(org, now)
    assert [a["name"] for a in summary["agents"]] == ["sales-bot", "support-bot"]
    sales_row, support_row = summary["agents"]
    assert (sales_row["fatal"], sales_row["with_errors"], sales_row["sessions"]) == (1, 2, 2)
    assert (support_row["live"], support_row["sessions"], support_row["cost_usd"]) == (4, 6, pytest.approx(0.04))
    assert support_row["hours_sessions"][-1] == 6 and len(support_row["hours"]) == 24
    assert {s.session_id for s in summary["ended_badly"]} == {"dead", "restarted"}
    assert summary["ended_badly_count"] == 2
    assert summary["cost_usd"] == pytest.approx(0.04)  # the sessions with a price; the others add nothing


def test_the_overview_page_and_its_panel(staff_client, org, agents):
    session = Session.objects.create(organization=org, session_id="loud", agent=agents[0], error_count=1)
    error(session, 1, "<img src=x onerror=alert(1)> failed 3 times")
    for path in ("/", "/overview/panel/"):
        response = staff_client.get(path)
        html = response.content.decode()
        assert response.status_code == 200
        assert 'data-testid="error-groups"' in html and "failed &lt;n&gt; times" in html
        assert "<img src=x" not in html and "&lt;img src=x" in html  # bot text is text
    assert "<html" not in staff_client.get("/overview/panel/").content.decode()  # the content alone


def test_the_panel_needs_a_login(client):
    response = client.get("/overview/panel/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_cost_is_unknown_until_prices_are_set(staff_client, org, agents):
    Session.objects.create(organization=org, session_id="a", agent=agents[0])
    assert overview(org, timezone.now())["cost_usd"] is None
    html = staff_client.get("/").content.decode()
    assert 'data-testid="cost">—<' in html and "set prices in the admin" in html
    Session.objects.create(organization=org, session_id="b", agent=agents[0], cost_usd=0.123)
    Session.objects.create(organization=org, session_id="c", cost_usd=0.1)  # no agent: counted all the same
    assert 'data-testid="cost">$0.22<' in staff_client.get("/").content.decode()


def test_sessions_older_than_the_window_are_not_counted(org, agents):
    old = Session.objects.create(organization=org, session_id="old", agent=agents[0], status="ended")
    Session.objects.filter(pk=old.pk).update(started_at=timezone.now() - timedelta(days=2))
    assert overview(org, timezone.now())["agents"] == []
