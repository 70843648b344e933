"""Session pages through the real URLconf: login, isolation, filters, pagination, escaping."""

import pytest
from django.utils import timezone

from rtvi_monitor.sessions.models import Session
from tests.session_samples import make_session

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/sessions/", "/sessions/call-1/"])
def test_session_pages_need_a_login(client, org, path):
    make_session(org)
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_home_says_whether_everything_is_fine(staff_client, org, agents):
    make_session(org, "ok-call", agent=agents[0], latency_p50_ms=700, latency_p95_ms=1200)
    make_session(org, "bad-call", agent=agents[0], error_count=1, fatal=True, latency_p50_ms=900, latency_p95_ms=2000)
    make_session(org, "old-call", status="ended", started_at=timezone.now() - timezone.timedelta(days=2), error_count=3)
    response = staff_client.get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="live-count">2<' in html  # two live sessions
    assert "(1 of 2 sessions)" in html and "old-call" not in html
    (row,) = response.context["summary"]["agents"]
    # Latency to 10 ms: the middle of the bucket each figure falls in.
    assert (row["live"], row["sessions"], row["p50"], row["p95"], row["fatal"]) == (2, 2, 705, 2005, 1)
    # No agents API configured for this organization: said, not a 500.
    assert "No agents API key is configured" in html


def test_the_agents_page_shows_live_sessions_and_latency(staff_client, org, agents, httpx_mock, settings):
    from tests.agents_samples import AGENT, BASE, KEY, URL

    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    httpx_mock.add_response(url=URL, json={"services": [{**AGENT, "id": str(agents[0].pk)}]})
    make_session(org, "live-1", agent=agents[0], latency_p50_ms=650, latency_p95_ms=900, cost_usd=0.05)
    html = staff_client.get("/agents/").content.decode()
    # The Overview's figures (latency to 10 ms, the middle of its bucket): one source for both pages.
    assert 'data-testid="live-count">1<' in html and "655 ms / 905 ms" in html and "$0.05" in html
    assert f"/sessions/?agent={agents[0].pk}" in html


def test_the_list_shows_history_with_its_columns(staff_client, org, agents):
    make_session(
        org, agent=agents[0], status="ended", turn_count=4, latency_p50_ms=820, latency_p95_ms=1400, error_count=2
    )
    html = staff_client.get("/sessions/").content.decode()
    assert "call-1" in html and "support-bot" in html and "820 ms / 1.4 s" in html
    assert 'class="pill error">2<' in html
    assert '<th scope="col">Messages</th>' in html and 'data-label="Messages"' in html and ">Events<" not in html


def test_the_history_holds_ended_sessions_only(staff_client, org):
    """A live session, its bot away within the grace included, is the live table's (filled by the socket): the history
    the server renders, and the part the page fetches again, list only sessions that ended, whatever status is asked."""
    make_session(org, "done", status="ended", end_reason="bot finished")
    make_session(org, "talking")
    make_session(org, "away", bot_left_at=timezone.now(), end_reason="bot disconnected")
    for query in ("", "?status=live", "?status=ended", "?part=history", "?part=history&status=live"):
        response = staff_client.get(f"/sessions/{query}")
        assert [s.session_id for s in response.context["sessions"]] == ["done"], query
        html = response.content.decode()
        assert (
            'data-session="done"' in html and 'data-session="talking"' not in html and 'data-session="away"' not in html
        )
    part = staff_client.get("/sessions/?part=history").content.decode()
    assert part.lstrip().startswith('<div class="table-scroll">') and "<html" not in part and "<form" not in part


def test_the_list_filters_by_transcript_and_a_browser_local_time(staff_client, org):
    make_session(org, "a", status="ended", transcript_text="user: refund please")
    make_session(org, "b", status="ended", transcript_text="user: hello")
    html = staff_client.get("/sessions/?q=refund&started_after=2000-01-01T00:00").content.decode()
    assert ">a<" in html and ">b<" not in html


def test_a_bad_filter_is_explained_on_the_page(staff_client, org):
    response = staff_client.get("/sessions/?end=dead")
    assert response.status_code == 200 and b"end: expected one of client_hung_up, bot_finished" in response.content


def test_an_empty_history_says_why(staff_client, org):
    assert "No session has ended yet." in staff_client.get("/sessions/").content.decode()
    make_session(org, "done", status="ended", error_count=0)
    html = staff_client.get("/sessions/?has_errors=true").content.decode()
    assert "No ended session matches these filters." in html


def test_pagination_walks_every_session_once(staff_client, org):
    now = timezone.now()
    Session.objects.bulk_create(
        Session(
            organization=org, session_id=f"s{i:03d}", status="ended", started_at=now - timezone.timedelta(minutes=i)
        )
        for i in range(120)
    )
    seen, url = [], "/sessions/"
    while url:
        response = staff_client.get(url)
        seen += [s.session_id for s in response.context["sessions"]]
        url = "/sessions/" + response.context["next_url"] if response.context["next_url"] else ""
    assert seen == [f"s{i:03d}" for i in range(120)]


def test_another_organizations_session_is_a_404(staff_client, other_org):
    make_session(other_org, "globex-call")
    assert staff_client.get("/sessions/globex-call/").status_code == 404


def test_the_session_page_carries_its_socket_and_downloads(staff_client, org):
    make_session(org, "room:42.a")
    html = staff_client.get("/sessions/room:42.a/").content.decode()
    assert '"ws": "/ws/sessions/room:42.a/"' in html
    assert "/api/sessions/room:42.a/events.ndjson" in html and "/api/sessions/room:42.a/" in html


def test_the_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")


def test_the_failed_ends_have_one_home_the_page_sends_them_to_its_script(staff_client, org):
    """rtvi_monitor/sessions/models.py FAILED_ENDS is the list: the session page's config carries it (the
    header's pill reads it from there), and no script or template keeps a copy of the end kinds."""
    import json
    import re
    from pathlib import Path

    from rtvi_monitor.sessions.models import FAILED_ENDS, EndKind

    make_session(org, "call-ends")
    html = staff_client.get("/sessions/call-ends/").content.decode()
    config = json.loads(re.search(r'<script id="session-config" type="application/json">(.*?)</script>', html).group(1))
    assert config["failed_ends"] == sorted(FAILED_ENDS)
    root = Path(__file__).resolve().parents[2]
    copies = [
        str(path.relative_to(root))
        for folder in ("static/js", "templates")
        for path in (root / folder).rglob("*")
        if path.is_file()
        and "vendor" not in path.parts
        and any(f'"{kind}"' in path.read_text() for kind in EndKind.values)
    ]
    assert copies == []


def test_the_history_part_answers_as_the_access_policy_says(client, viewer_client, org, other_org):
    """?part=history is the sessions page's own door (sessions.figures): a viewer reads its figures and is refused a
    transcript search, as on the page; another organization's member gets their own history, none of this one's."""
    from tests.conftest import make_member

    make_session(org, "ours", status="ended", transcript_text="user: refund please")
    make_session(other_org, "theirs", status="ended")
    response = client.get("/sessions/?part=history")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    part = viewer_client.get("/sessions/?part=history").content.decode()
    assert 'data-session="ours"' in part and "theirs" not in part
    refused = viewer_client.get("/sessions/?part=history&q=refund").content.decode()
    assert "q: searching transcripts needs the operator role" in refused and 'data-session="ours"' not in refused
    client.force_login(make_member(other_org, "globex-admin"))
    theirs = client.get("/sessions/?part=history").content.decode()
    assert 'data-session="theirs"' in theirs and 'data-session="ours"' not in theirs
