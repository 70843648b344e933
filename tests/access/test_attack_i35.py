"""Issue 35 attacked from outside: a bot forging an operator, an operator's words after an erase, viewers,
other organizations, hostile parameters (alert pages, the sessions list's part, thresholds)."""

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from rtvi_monitor.core.state import Event, SessionState
from rtvi_monitor.sessions.models import Session
from tests.sockets import application, receive, rtvi, send, wrap

T0 = 1_750_000_000.0


def forged_record(control_id="c1", action="end", operator="mallory", content="Refund approved, says the operator."):
    about = {"action": action, "id": control_id, "operator": operator, "ok": True}
    if action == "send-text":
        about |= {"content": content, "options": {"run_immediately": True, "audio_response": True}}
    else:
        about["cancel"] = False
    data = {"text": f"operator {operator} did it", "dashboard": about}
    return rtvi("server-message", data, id=f"dashboard-{control_id}")


# --- (1) a bot forging an operator ------------------------------------------------------------


async def _ended(session_id, timeout=5.0) -> Session:
    deadline = asyncio.get_running_loop().time() + timeout
    while (stored := await sync_to_async(Session.objects.get)(session_id=session_id)).status != "ended":
        assert asyncio.get_running_loop().time() < deadline, f"{session_id} never ended"
        await asyncio.sleep(0.05)
    return stored


@pytest.mark.usefixtures("live_path")
@pytest.mark.parametrize("stream", ["dashboard", "bot-1"])
async def test_a_bot_naming_the_dashboards_stream_is_no_operator(ingest_token, stream):
    """A bot may name its stream (?stream=): "dashboard" is the dashboard's own, where the operators' actions
    are stored. A bot that names it is refused, and whatever stream a bot uses, a record shaped like the
    dashboard's says nothing of an operator: no operator line, no operator_ended end."""
    path = f"/ws/ingest/forger-{stream}/?stream={stream}"
    bot = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Bearer {ingest_token}".encode())])
    assert (await bot.connect())[0]
    if stream == "dashboard":
        first = await receive(bot)
        assert first.get("fatal") is True and "stream" in first["error"]
        assert not await sync_to_async(Session.objects.filter(session_id=f"forger-{stream}").exists)()
        return
    for seq, message in enumerate(
        [forged_record("c1", "send-text"), forged_record("c2", "end"), rtvi("bot-llm-text", {"text": "Bye"})], 1
    ):
        await send(bot, wrap(seq, message))
    await bot.disconnect(code=1000)
    stored = await _ended(f"forger-{stream}")
    assert stored.end_kind == "bot_finished" and "mallory" not in stored.end_reason
    assert stored.state["ended_by"] == ""
    assert not [line for line in stored.state["transcript"] if line["role"] == "operator"]


def fold(steps) -> SessionState:
    """Steps are (stream, direction, message): the bot's stream is "bot", the dashboard's "dashboard"."""
    state = SessionState()
    for seq, (stream, direction, message) in enumerate(steps, 1):
        state.apply(Event(seq, direction, T0 + seq, message, True, "", None, stream))
    return state


def operator_lines(state):
    return [(item["operator"], item["text"]) for item in state.transcript_items() if item["role"] == "operator"]


def bot_send_text(control_id, content):
    return ("bot", "from-client", rtvi("send-text", {"content": content}, id=f"dashboard-{control_id}"))


def test_a_bots_send_text_of_a_dashboard_id_no_operator_sent_is_no_operators_line():
    """Any bot may report a send-text of id "dashboard-…": without the dashboard's record of it, it is nobody's
    line (not an operator's, and not the caller's either: the id says the dashboard sent it)."""
    state = fold([bot_send_text("never-sent", "Operator here: your refund is approved.")])
    assert operator_lines(state) == []
    assert "refund" not in str(state.transcript_items())


@pytest.mark.parametrize("report_first", [True, False])
def test_the_operators_words_are_the_dashboards_record_not_what_the_bot_reports(report_first):
    """The bot is handed the operator's text and the id: it may report other words under that id. The line says
    what the operator typed (the dashboard's record), whichever came first."""
    record = ("dashboard", "to-client", forged_record("c1", "send-text", operator="ann", content="Please hold."))
    report = bot_send_text("c1", "Operator ann: your refund is approved.")
    state = fold([report, record] if report_first else [record, report])
    assert operator_lines(state) == [("ann", "Please hold.")]


def test_a_bots_record_on_its_own_stream_ends_nothing_and_names_nobody():
    state = fold(
        [
            ("bot", "to-client", forged_record("c1", "end", operator="mallory")),
            ("", "to-client", forged_record("c2", "send-text", operator="mallory")),
        ]
    )
    assert operator_lines(state) == [] and state.ended_by == ""
    from rtvi_monitor.live.lifecycle import LEFT, end_of

    assert end_of(state, LEFT)[0] != "operator_ended"


# --- (2) an operator's words are erased with the call ------------------------------------------


def _sqlite_files() -> dict[str, bytes]:
    """The test database's files as they are on disk, the WAL checkpointed into the database first."""
    from pathlib import Path

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    name = Path(connection.settings_dict["NAME"])
    files = [name, name.with_name(name.name + "-wal"), name.with_name(name.name + "-shm")]
    return {path.name: path.read_bytes() for path in files if path.exists()}


@pytest.mark.usefixtures("live_path")
async def test_an_operators_words_go_with_the_erased_call_and_were_never_in_the_audit(org, ingest_token):
    """The operator's text is in the dashboard's record, the bot's report of it and the transcript: the API's erase
    (a write key) takes every copy, in every byte of SQLite's files; the audit entry never held it."""
    import uuid

    from django.db import connection

    from dashboard.org.models import ApiKey, AuditEntry
    from tests.live.test_live_control import connect_bot, operator, post, stored

    if connection.vendor != "sqlite":
        pytest.skip("the bytes of SQLite's files")
    word = f"zanzibarquux{uuid.uuid4().hex[:10]}"
    bot = await connect_bot(ingest_token, "erase-op")
    client = await operator(org)
    request = asyncio.ensure_future(post(client, "/api/sessions/erase-op/send-text/", {"content": f"Tell {word} hi"}))
    frame = await receive(bot)
    assert frame["action"] == "send-text" and word in frame["content"]
    # The package reports the send-text it handled, with the operator's words, then answers.
    report = rtvi("send-text", {"content": frame["content"]}, id=f"dashboard-{frame['id']}")
    await send(bot, wrap(2, report, "from-client"))
    await send(bot, {"type": "control-result", "id": frame["id"], "ok": True})
    assert (await request).status_code == 200
    await stored("erase-op", stream="dashboard")
    state = (await client.get("/api/sessions/erase-op/")).json()
    assert [(i["operator"], i["text"]) for i in state["transcript"] if i["role"] == "operator"] == [
        ("alice", f"Tell {word} hi")
    ]
    await bot.disconnect(code=1000)
    await _ended("erase-op")
    entries = await sync_to_async(lambda: [e.detail for e in AuditEntry.objects.all()])()
    assert entries and word not in str(entries)
    before = await sync_to_async(_sqlite_files)()
    assert any(word.encode() in data for data in before.values())  # the positive control: it was stored

    key = (await sync_to_async(ApiKey.issue)(org, "eraser"))[1]  # read,write by default
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    erased = await sync_to_async(api.delete)("/api/sessions/erase-op/")
    assert erased.status_code == 200, erased.content
    for url in ("/api/sessions/", "/api/sessions/erase-op/", "/api/audit/"):
        answer = await sync_to_async(api.get)(url, {"q": word} if url == "/api/sessions/" else {})
        assert word not in answer.content.decode(), url
    after = await sync_to_async(_sqlite_files)()
    assert {name: word.encode() in data for name, data in after.items() if data} == {
        name: False for name, data in after.items() if data
    }


# --- an ended call of ours, with a caller's and an operator's words ------------------------------

CALLER_WORD = "xylophonecaller"
OPERATOR_WORD = "quetzaloperator"


def ended_call(org, session_id="ours-1", ended_by="ann"):
    """An ended call as the writer stores one: the caller's words, the operator's record (their words), its end."""
    import time
    from json import dumps

    from django.utils import timezone

    from rtvi_monitor.sessions import events
    from rtvi_monitor.sessions.models import Event as Row
    from rtvi_monitor.sessions.models import summary_fields

    session = Session.objects.create(organization=org, session_id=session_id, agent_name="support")
    said = [
        ("", "to-client", rtvi("user-transcription", {"text": f"I am {CALLER_WORD}", "final": True, "user_id": "u"})),
        ("dashboard", "to-client", forged_record("c1", "send-text", operator=ended_by, content=f"Say {OPERATOR_WORD}")),
        ("dashboard", "to-client", forged_record("c2", "end", operator=ended_by)),
    ]
    now = time.time()
    Row.objects.bulk_create(
        Row(session=session, seq=i, stream=s, direction=d, type=m["type"], received_at=now - 5 + i, message=dumps(m))
        for i, (s, d, m) in enumerate(said, 1)
    )
    state = events.load_state(session.pk)[0]
    from rtvi_monitor.live.lifecycle import LEFT, end_of

    kind, reason = end_of(state, LEFT)
    Session.objects.filter(pk=session.pk).update(
        status=Session.Status.ENDED,
        ended_at=timezone.now(),
        end_kind=kind,
        end_reason=reason,
        state=state.to_dict(),
        **summary_fields(state),
    )
    session.refresh_from_db()
    return session


def firing_alert(org, session_ids, name="Fatal errors"):
    from rtvi_monitor.alerts.models import Alert, AlertRule

    rule = AlertRule.objects.create(organization=org, name=name, condition=AlertRule.Condition.FATAL_ERROR)
    return Alert.objects.create(
        rule=rule, organization=org, key="k", summary="Fatal error in 1 session", session_ids=list(session_ids)
    )


def test_the_stored_call_is_an_operators_end_and_line_the_control_of_what_follows(org, staff_client):
    session = ended_call(org)
    assert session.end_kind == "operator_ended" and session.end_reason == "by operator ann"
    page = staff_client.get(f"/sessions/{session.session_id}/").content.decode()
    assert "by operator ann" in page
    state = staff_client.get(f"/api/sessions/{session.session_id}/").json()
    said = [(i["operator"], i["text"]) for i in state["transcript"] if i["role"] == "operator"]
    assert said == [("ann", f"Say {OPERATOR_WORD}"), ("ann", "")]


# --- (3) a viewer --------------------------------------------------------------------------------


def test_a_viewers_overview_offers_no_alert_action_and_its_post_is_refused(org, viewer_client, staff_client):
    from rtvi_monitor.alerts.models import Alert

    alert = firing_alert(org, ["ours-1"])
    for url in ("/", "/overview/panel/"):
        page = viewer_client.get(url)
        assert page.status_code == 200
        html = page.content.decode()
        assert f"/alerts/{alert.pk}/act/" not in html and 'name="do"' not in html, url
    assert f"/alerts/{alert.pk}/act/" in staff_client.get("/overview/panel/").content.decode()  # the control
    for do in ("acknowledge", "silence", "assign", "note"):
        answer = viewer_client.post(f"/alerts/{alert.pk}/act/", {"do": do, "minutes": "60", "text": "x"})
        assert answer.status_code in (403, 404), (do, answer.status_code)
    alert.refresh_from_db()
    assert (alert.acknowledged_at, alert.silenced_until, alert.assignee_id) == (None, None, None)
    assert not alert.notes.exists() and Alert.objects.count() == 1


def test_a_viewer_gets_no_words_from_the_history_part_the_alert_pages_or_the_session_page(org, viewer_client):
    session = ended_call(org)
    alert = firing_alert(org, [session.session_id])
    pages = {
        "history": viewer_client.get("/sessions/", {"part": "history"}),
        "alert": viewer_client.get(f"/alerts/{alert.pk}/"),
        "alert page 1": viewer_client.get(f"/alerts/{alert.pk}/", {"page": "1"}),
        "session": viewer_client.get(f"/sessions/{session.session_id}/"),
        "session api": viewer_client.get(f"/api/sessions/{session.session_id}/"),
        "list api": viewer_client.get("/api/sessions/"),
        "alert api": viewer_client.get(f"/api/alerts/{alert.pk}/"),
    }
    assert {name: answer.status_code for name, answer in pages.items()} == dict.fromkeys(pages, 200)
    for name, answer in pages.items():
        html = answer.content.decode()
        assert session.session_id in html, name  # the call is listed: its words are not
        assert CALLER_WORD not in html and OPERATOR_WORD not in html, name


def test_a_viewers_transcript_search_on_the_history_part_tells_nothing(org, viewer_client):
    """A search that matched or not must read the same to a viewer: no oracle on the call's words."""
    ended_call(org)
    hit = viewer_client.get("/sessions/", {"part": "history", "q": OPERATOR_WORD})
    miss = viewer_client.get("/sessions/", {"part": "history", "q": "nothingsaidlikethis"})
    assert hit.status_code == miss.status_code and hit.status_code != 500
    assert "ours-1" not in hit.content.decode()
    assert hit.content.decode().replace(OPERATOR_WORD, "?") == miss.content.decode().replace("nothingsaidlikethis", "?")


# --- (4) another organization --------------------------------------------------------------------


def test_another_organizations_member_reaches_nothing_of_ours(org, other_org):
    session = ended_call(org)
    alert = firing_alert(org, [session.session_id])
    stranger = Client()
    from tests.conftest import make_member

    stranger.force_login(make_member(other_org, "globex-admin", "admin"))
    for url, params in [
        (f"/alerts/{alert.pk}/", {}),
        (f"/alerts/{alert.pk}/", {"page": "2"}),
        (f"/api/alerts/{alert.pk}/", {}),
    ]:
        assert stranger.get(url, params).status_code == 404, url
    answer = stranger.post(f"/alerts/{alert.pk}/act/", {"do": "acknowledge"})
    assert answer.status_code == 404
    alert.refresh_from_db()
    assert alert.acknowledged_at is None
    history = stranger.get("/sessions/", {"part": "history"}).content.decode()
    assert session.session_id not in history and CALLER_WORD not in history
    overview = stranger.get("/overview/panel/").content.decode()
    assert f"/alerts/{alert.pk}/" not in overview


def test_the_only_admin_rule_is_each_organizations_own(org, other_org):
    """Ours has two admins, theirs one: each page offers Remove by its own organization's admins."""
    from dashboard.org.models import Membership
    from tests.conftest import make_member

    ours = [make_member(org, "a1", "admin"), make_member(org, "a2", "admin")]
    theirs = make_member(other_org, "solo", "admin")
    mine, them = Client(), Client()
    mine.force_login(ours[0])
    them.force_login(theirs)
    our_page = mine.get("/settings/members/").content.decode()
    their_page = them.get("/settings/members/").content.decode()
    # Names read from the member rows: a bare substring test also matched the random CSRF token.
    assert set(re.findall(r'data-member="([^"]+)"', our_page)) == {"a1", "a2"}
    assert set(re.findall(r'data-member="([^"]+)"', their_page)) == {"solo"}
    assert our_page.count('value="remove"') == 2 and 'value="remove"' not in their_page
    # The only admin cannot be removed (the server says so, whatever the page offered).
    solo = Membership.objects.get(user=theirs, organization=other_org)
    them.post("/settings/members/", {"do": "remove", "membership": solo.pk})
    assert Membership.objects.filter(pk=solo.pk, role="admin").exists()
    # Nor may they remove one of ours by its id.
    target = Membership.objects.get(user=ours[1], organization=org)
    answer = them.post("/settings/members/", {"do": "remove", "membership": target.pk})
    assert answer.status_code == 404 and Membership.objects.filter(pk=target.pk).exists()


# --- (5) hostile parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "page=99999999999999999999999",
        "page=-1",
        "page=0",
        "page=abc",
        "page=1e3",
        "page=%D9%A3",  # an Arabic-Indic three
        "page=",
        "page=1&page=2",
        "page=%00",
        "page=" + "9" * 5000,
    ],
)
def test_hostile_pages_of_an_alerts_sessions_are_answered_never_a_500(org, staff_client, query):
    alert = firing_alert(org, [f"call-{i:03d}" for i in range(45)])
    answer = staff_client.get(f"/alerts/{alert.pk}/?{query}")
    assert answer.status_code in (200, 400), answer.status_code
    if answer.status_code == 400:
        assert b"page" in answer.content


def test_a_page_past_the_last_of_an_alerts_sessions_is_the_last(org, staff_client):
    alert = firing_alert(org, [f"call-{i:03d}" for i in range(45)])
    for page in ("3", "10000"):
        last = staff_client.get(f"/alerts/{alert.pk}/", {"page": page}).content.decode()
        assert "call-044" in last and "call-040" in last and "call-039" not in last, page


@pytest.mark.parametrize("part", ["History", "history ", "live", "../history", "", "history%00", "<script>"])
def test_odd_parts_of_the_sessions_list_are_the_whole_page_never_a_500(org, staff_client, part):
    answer = staff_client.get("/sessions/", {"part": part})
    assert answer.status_code == 200
    assert b"<html" in answer.content.lower() and b"<script>" not in answer.content.replace(b"<script>\n", b"")


def test_repeated_part_and_the_history_part_with_a_bad_filter_are_answered(org, staff_client):
    assert staff_client.get("/sessions/?part=history&part=x").status_code == 200
    answer = staff_client.get("/sessions/", {"part": "history", "before": "not-a-cursor"})
    assert answer.status_code in (200, 400)


RULE_FORM = {"name": "latency", "condition": "turn_latency_p95_ms", "window_minutes": "15", "enabled": "on"}


@pytest.mark.parametrize(
    "typed",
    ["NaN", "nan", "inf", "-inf", "Infinity", "1e309", "-5", "5 s", "5s", "1,5", "0x10", "1e1000000000", "--1", "١٢"],
)
def test_a_hostile_threshold_in_the_settings_form_is_a_form_error_and_nothing_stored(org, staff_client, typed):
    from rtvi_monitor.alerts.models import AlertRule

    answer = staff_client.post("/settings/alert-rules/", {**RULE_FORM, "threshold": typed})
    stored = list(AlertRule.objects.values_list("threshold", flat=True))
    if typed == "١٢":  # Arabic-Indic digits: Django's DecimalField reads 12 (s), as it would "12"
        assert (answer.status_code, stored) == (302, [12000.0])
        return
    assert answer.status_code == 400, answer.status_code
    assert b"errorlist" in answer.content
    assert stored == [], (typed, stored)


def test_a_threshold_typed_in_seconds_is_stored_in_ms_the_control_of_the_hostile_ones(org, staff_client):
    from rtvi_monitor.alerts.models import AlertRule

    answer = staff_client.post("/settings/alert-rules/", {**RULE_FORM, "threshold": "1.5"})
    assert answer.status_code == 302
    assert list(AlertRule.objects.values_list("threshold", flat=True)) == [1500.0]


@pytest.mark.parametrize("percent", ["101", "100.0000001", "1e3", "-0.1"])
def test_a_share_out_of_range_in_the_settings_form_is_refused(org, staff_client, percent):
    from rtvi_monitor.alerts.models import AlertRule

    staff_client.post("/settings/alert-rules/", {**RULE_FORM, "condition": "error_rate", "threshold": percent})
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": NaN}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": Infinity}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": -Infinity}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": 1e309}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": -1}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": "5 s"}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": "5000"}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": true}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": [5]}',
        '{"name": "r", "condition": "error_rate", "threshold": 100.5}',
        '{"name": "r", "condition": "fatal_error", "threshold": 5}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": 1' + "0" * 5000 + "}",
        # Finite but absurd: past what the settings form takes (10^9 s, 10^9 sessions), which could not save it again.
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": 1e300}',
        '{"name": "r", "condition": "turn_latency_p95_ms", "threshold": 1000000000001}',
        '{"name": "r", "condition": "ended_badly", "threshold": 1.7976931348623157e308}',
        '{"name": "r", "condition": "no_sessions_minutes", "threshold": 1e10}',
    ],
)
def test_a_hostile_threshold_through_the_api_is_a_400_and_nothing_stored(org, api_key, body):
    from rtvi_monitor.alerts.models import AlertRule

    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    answer = api.post("/api/alerts/rules/", body, content_type="application/json")
    assert answer.status_code == 400, (answer.status_code, answer.content[:300])
    assert "threshold" in answer.json()["error"] or "JSON" in answer.json()["error"]
    assert not AlertRule.objects.exists()


def test_the_largest_threshold_the_form_takes_the_api_takes_too(org, api_key):
    from rtvi_monitor.alerts.models import AlertRule

    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    body = {"name": "r", "condition": "turn_latency_p95_ms", "threshold": 10**12}  # 10^9 s, the form's most
    assert api.post("/api/alerts/rules/", body, content_type="application/json").status_code == 201
    assert list(AlertRule.objects.values_list("threshold", flat=True)) == [1e12]


@pytest.mark.parametrize("back", ["https://evil.example/", "//evil.example/alerts/", "javascript:alert(1)", "/\\evil"])
def test_alert_acts_next_never_leaves_the_site(org, staff_client, back):
    alert = firing_alert(org, ["ours-1"])
    answer = staff_client.post(f"/alerts/{alert.pk}/act/", {"do": "acknowledge", "next": back})
    assert answer.status_code == 302 and answer["Location"] == f"/alerts/#alert-{alert.pk}"


@pytest.mark.parametrize("minutes", ["-5", "1e9", "NaN", "9" * 5000, "٣", "", "resolved "])
def test_hostile_silences_from_the_overview_are_refused_with_a_reason_never_a_500(org, staff_client, minutes):
    alert = firing_alert(org, ["ours-1"])
    answer = staff_client.post(f"/alerts/{alert.pk}/act/", {"do": "silence", "minutes": minutes, "next": "/"})
    assert answer.status_code == 302 and answer["Location"] == f"/#alert-{alert.pk}"
    alert.refresh_from_db()
    assert alert.silenced_until is None or (alert.silenced_until - alert.fired_at).days < 400


def test_retentions_purge_of_messages_takes_the_operators_words_and_keeps_their_end(org, staff_client):
    """Retention keeps the call's row and figures, and its end by the operator (a name, no words): the operator's
    text goes with the messages, from every copy (the stored messages, the frozen state, transcript search)."""
    from datetime import timedelta

    from django.utils import timezone

    from rtvi_monitor.privacy import retention
    from rtvi_monitor.sessions.models import Event as Row

    session = ended_call(org)
    Session.objects.filter(pk=session.pk).update(
        started_at=timezone.now() - timedelta(days=40), ended_at=timezone.now() - timedelta(days=40)
    )
    org.keep_messages_days = 30
    org.save(update_fields=["keep_messages_days"])
    retention.purge_round()
    session.refresh_from_db()
    assert not Row.objects.filter(session=session).exists()
    assert OPERATOR_WORD not in str(session.state) and OPERATOR_WORD not in (session.transcript_text or "")
    assert (session.end_kind, session.end_reason) == ("operator_ended", "by operator ann")
    for url in (f"/sessions/{session.session_id}/", f"/api/sessions/{session.session_id}/"):
        assert OPERATOR_WORD not in staff_client.get(url).content.decode(), url
    assert staff_client.get("/api/sessions/", {"q": OPERATOR_WORD}).json()["sessions"] == []


# --- prices and the figures made of them ----------------------------------------------------------------


PRICE_FORM = {
    "model": "gpt-x",
    "usd_per_million_input_tokens": "3",
    "usd_per_million_output_tokens": "15",
    "usd_per_thousand_characters": "0",
    "usd_per_audio_minute": "0",
}


@pytest.mark.parametrize("typed", ["1e308", "-3", "NaN", "inf", "1e309", "3 $"])
def test_an_absurd_price_is_a_form_error_and_nothing_stored(org, staff_client, typed):
    from dashboard.org.models import Price

    answer = staff_client.post("/settings/prices/", {**PRICE_FORM, "usd_per_million_input_tokens": typed})
    assert answer.status_code == 400 and b"errorlist" in answer.content
    assert not Price.objects.exists()


def test_a_price_is_stored_as_typed_the_control_of_the_absurd_ones(org, staff_client):
    from dashboard.org.models import Price

    assert staff_client.post("/settings/prices/", PRICE_FORM).status_code == 302
    assert Price.objects.get().usd_per_million_input_tokens == 3.0


@pytest.mark.parametrize("usd", [1e308, -1e308, 1.7976931348623157e308, 1e20])
def test_money_and_shares_as_large_as_a_float_holds_are_said_never_a_500(usd):
    from dashboard.web import display

    assert display.money_text(usd).startswith(("$", "-$", "<"))
    assert display.percent_text(usd).endswith("%")


def test_the_overview_and_agents_say_a_huge_cost_never_a_500(org, staff_client):
    """Prices stored before the form bounded them (1e308 per million tokens was taken): calls' costs are floats,
    and the Overview and the agent pages add them up past what money_text's cents could hold (2e306 × 100)."""
    from django.utils import timezone

    from tests.conftest import make_agent

    agent = make_agent(org, "support-bot")
    for i in range(2):
        Session.objects.create(
            organization=org,
            session_id=f"dear-{i}",
            agent=agent,
            started_at=timezone.now(),
            status="ended",
            cost_usd=1e306,
        )
    for url in ("/", "/overview/panel/", "/agents/", "/sessions/dear-0/"):
        assert staff_client.get(url).status_code == 200, url
    assert "$" in staff_client.get("/overview/panel/").content.decode()
