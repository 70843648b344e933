"""Issue 36 attacked from outside: calls made into eval scenarios, through the real URLconf.

Who must get nothing: a viewer (403 with the reason, none of the caller's words), a member of another
organization (404, nothing of ours: scenarios, calls, agents' names), an operator where recordings are the
admins' (a suite with no WAV), a member removed or demoted, a form posted without its CSRF token. What must
not break it: names made to climb out of the folder, an agent key with odd characters, thousands of turns,
huge fields, waits that are no number, fields given twice. What must be gone: after the call is erased
through the API, no byte of SQLite's files holds the scenario's words; no audit entry ever held them.
"""

import io
import json
import random
import time
import uuid
import zipfile
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import numpy as np
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from pipecat.evals.scenario import EvalScenarioFile

from dashboard.org.models import ApiKey, AuditEntry, Membership
from rtvi_monitor.evals import scenario as scenarios
from rtvi_monitor.evals.models import Scenario
from tests.conftest import make_member
from tests.evals.test_scenario_export import CALL, save, signed_in, unzip
from tests.session_samples import CONVERSATION, T0, make_session
from tests.sockets import rtvi

WORDS = "Where is my order?"  # the caller's words in CALL


@pytest.fixture
def call(org):
    return make_session(org, "call-7", messages=CALL, agent_key="support", agent_name="Support line", status="ended")


@pytest.fixture
def operator(org):
    return signed_in(org, "operator", "op")


@pytest.fixture
def saved(call, operator):
    assert save(operator, "call-7").status_code == 302
    return Scenario.objects.get()


def names_in(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.namelist()


def inside(folder: str, name: str) -> bool:
    """A zip member's path stays in `folder`: relative, no '..', no backslash or drive, no control character."""
    path = PurePosixPath(name)
    return (
        not name.startswith("/")
        and "\\" not in name
        and ":" not in name
        and ".." not in path.parts
        and path.parts[0] == folder
        and len(path.parts) >= 2
        and all(ch.isprintable() for ch in name)
    )


# --- a viewer -------------------------------------------------------------------------------------------


def test_a_viewer_gets_the_reason_and_none_of_the_callers_words_by_any_method(saved, org):
    viewer = signed_in(org, "viewer", "watcher")
    pages = ("/sessions/call-7/scenario/", "/evals/support/", "/evals/support/suite.zip")
    for url in pages:
        for method in ("get", "post", "head"):
            response = getattr(viewer, method)(url, {"name": "x", "include-1": "on", "delete": "late-order"})
            assert response.status_code == 403, (method, url)
            body = response.content.decode()
            assert WORDS not in body and "late-order" not in body and "lookup_order" not in body
            if method != "head":
                assert "operator" in body  # the role it takes, said
    assert Scenario.objects.count() == 1 and Scenario.objects.get().name == "late-order"
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.SUITE_DOWNLOAD).exists()


def test_a_viewers_post_of_the_draft_form_saves_nothing(call, org):
    viewer = signed_in(org, "viewer", "watcher")
    response = viewer.post("/sessions/call-7/scenario/", {"name": "sneaky", "include-1": "on", "within-1": "3"})
    assert response.status_code == 403 and not Scenario.objects.exists()


# --- another organization -------------------------------------------------------------------------------


def test_another_organizations_admin_finds_not_one_of_our_names(saved, other_org):
    stranger = signed_in(other_org, "admin", "globex")
    ours = (WORDS, "late-order", "Support line", "support-line", "call-7", "took too long", "lookup_order")
    for url in (
        "/sessions/call-7/scenario/",
        "/evals/support/",
        "/evals/support/suite.zip",
        "/evals/unknown-agent/",
        "/evals/unknown-agent/suite.zip",
    ):
        response = stranger.get(url)
        assert response.status_code == 404, url
        assert not [word for word in ours if word in response.content.decode(errors="replace")], url
    posted = stranger.post("/sessions/call-7/scenario/", {"name": "mine", "include-1": "on", "within-1": "3"})
    assert posted.status_code == 404
    assert stranger.post("/evals/support/", {"delete": "late-order"}).status_code == 404
    assert list(Scenario.objects.values_list("organization_id", "name")) == [(saved.organization_id, "late-order")]
    assert not AuditEntry.objects.filter(organization=other_org).exclude(action=AuditEntry.Action.SIGN_IN).exists()


def test_an_agent_key_both_organizations_use_shows_each_only_its_own(saved, other_org, tmp_path):
    make_session(other_org, "their-call", messages=CALL, agent_key="support", agent_name="Their bot", status="ended")
    stranger = signed_in(other_org, "operator", "globex")
    page = stranger.get("/evals/support/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "late-order" not in html and "call-7" not in html and "Support line" not in html
    assert "Their bot" in html and 'data-testid="empty-suite"' in html
    assert stranger.get("/evals/support/suite.zip").status_code == 404  # their suite is empty, ours not theirs
    assert stranger.post("/evals/support/", {"delete": "late-order"}).status_code == 404
    # They save one of the same name: a suite of their own, and each downloads only its own.
    assert save(stranger, "their-call").status_code == 302
    theirs = stranger.get("/evals/support/suite.zip")
    assert names_in(theirs.content) == ["their-bot/late-order.yaml"]
    assert b"call-7" not in zipfile.ZipFile(io.BytesIO(theirs.content)).read("their-bot/late-order.yaml")
    assert Scenario.objects.filter(name="late-order").count() == 2


def test_our_operator_cannot_make_a_scenario_of_another_organizations_call(call, operator, other_org):
    make_session(other_org, "their-call", messages=CALL, agent_key="theirs", agent_name="Globex bot", status="ended")
    for method in ("get", "post"):
        response = getattr(operator, method)("/sessions/their-call/scenario/", {"name": "x", "include-1": "on"})
        assert response.status_code == 404
        assert "Globex bot" not in response.content.decode() and WORDS not in response.content.decode()
    assert operator.get("/evals/theirs/").status_code == 404
    assert not Scenario.objects.exists()


# --- recordings the admins' alone --------------------------------------------------------------------------


@pytest.fixture
def recorded(call, org, live_path):
    from rtvi_monitor.live.models import IngestToken
    from tests.audio.test_audio import put
    from tests.speech import silence, speak

    org.record_audio = True
    org.save()
    token = IngestToken.issue(org, "bot")[1]
    track = np.concatenate([silence(1.5), speak(WORDS), silence(1.0)])
    assert put(token, "call-7", "user", 0, track, start=T0).status_code == 201
    return call


def test_where_audio_is_the_admins_an_operators_suite_holds_no_wav(recorded, org, operator, tmp_path):
    org.audio_role = "admin"
    org.save()
    assert save(operator, "call-7").status_code == 302
    page = operator.get("/evals/support/").content.decode()
    assert "text only" in page
    download = operator.get("/evals/support/suite.zip")
    assert download.status_code == 200
    assert names_in(download.content) == ["support-line/late-order.yaml"]
    assert b"RIFF" not in download.content and b"audio" not in zipfile.ZipFile(io.BytesIO(download.content)).read(
        "support-line/late-order.yaml"
    )
    entry = AuditEntry.objects.get(action=AuditEntry.Action.SUITE_DOWNLOAD)
    assert entry.detail["audio_clips"] == 0
    # The admin's download has the clip, and Pipecat loads both modalities.
    admin = signed_in(org, "admin", "boss")
    full = admin.get("/evals/support/suite.zip")
    assert names_in(full.content) == ["support-line/audio/late-order/turn-1.wav", "support-line/late-order.yaml"]
    loaded = EvalScenarioFile.load(unzip(full.content, tmp_path) / "support-line" / "late-order.yaml")
    assert [bool(s.user_audio) for s in loaded] == [False, True]


def test_an_operator_demoted_below_the_audio_role_mid_session_gets_no_wav_next_time(recorded, org, operator):
    assert save(operator, "call-7").status_code == 302
    assert any(n.endswith(".wav") for n in names_in(operator.get("/evals/support/suite.zip").content))
    org.audio_role = "admin"
    org.save()
    assert not any(n.endswith(".wav") for n in names_in(operator.get("/evals/support/suite.zip").content))


# --- removed and demoted members ------------------------------------------------------------------------------


def test_a_removed_member_gets_nothing_with_the_session_they_still_hold(saved, org, operator):
    Membership.objects.filter(user__username="op").delete()
    for url in ("/sessions/call-7/scenario/", "/evals/support/", "/evals/support/suite.zip"):
        response = operator.get(url)
        assert response.status_code in (302, 403), url
        assert WORDS not in response.content.decode() and "late-order" not in response.content.decode()
    assert operator.post("/evals/support/", {"delete": "late-order"}).status_code in (302, 403)
    assert Scenario.objects.count() == 1


def test_a_member_demoted_to_viewer_is_refused_at_once(saved, org, operator):
    Membership.objects.filter(user__username="op").update(role="viewer")
    assert operator.get("/evals/support/suite.zip").status_code == 403
    assert operator.post("/evals/support/", {"delete": "late-order"}).status_code == 403
    response = save(operator, "call-7", name="again")
    assert response.status_code == 403 and Scenario.objects.count() == 1


def test_a_member_moved_to_another_organization_takes_nothing_of_ours_along(saved, org, other_org, operator):
    user = Membership.objects.get(user__username="op").user
    Membership.objects.filter(user=user).delete()
    make_member(other_org, "op", "admin")
    for url in ("/sessions/call-7/scenario/", "/evals/support/", "/evals/support/suite.zip"):
        assert operator.get(url).status_code == 404, url


def test_a_signed_out_visitor_is_sent_to_log_in(saved):
    anonymous = Client()
    for url in ("/sessions/call-7/scenario/", "/evals/support/", "/evals/support/suite.zip"):
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    assert anonymous.post("/evals/support/", {"delete": "late-order"}).status_code in (302, 403)
    assert Scenario.objects.count() == 1


# --- CSRF ------------------------------------------------------------------------------------------------------


def test_a_post_without_its_csrf_token_saves_and_deletes_nothing(call, org):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_member(org, "op", "operator"))
    form = {"name": "forged", "include-1": "on", "within-1": "3"}
    assert strict.post("/sessions/call-7/scenario/", form).status_code == 403
    assert not Scenario.objects.exists()
    # Saved with its token (as the page's form sends it), then a forged delete.
    page = strict.get("/sessions/call-7/scenario/")
    token = page.cookies["csrftoken"].value
    assert strict.post("/sessions/call-7/scenario/", {**form, "csrfmiddlewaretoken": token}).status_code == 302
    assert strict.post("/evals/support/", {"delete": "forged"}).status_code == 403
    assert strict.post("/evals/support/", {"delete": "forged", "csrfmiddlewaretoken": "x" * 64}).status_code == 403
    assert list(Scenario.objects.values_list("name", flat=True)) == ["forged"]


# --- hostile names and keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        "../../../etc/passwd",
        "..\\..\\windows\\system32",
        "/absolute/path",
        "C:\\evil",
        "a/../../b",
        "\x00nul\x00",
        "name\nwith: newline",
        "ünïcödé-ﬁle",
        "x" * 100_000,
        "-" * 50 + "ok" + "_" * 50,
    ],
)
def test_a_hostile_name_becomes_a_plain_file_name_inside_the_folder(call, operator, given, tmp_path):
    response = save(operator, "call-7", name=given)
    assert response.status_code == 302, response.content.decode()[:500]
    saved = Scenario.objects.get()
    assert 0 < len(saved.name) <= 80 and all(ch.isalnum() or ch in "-_" for ch in saved.name)
    assert saved.name.isascii()
    download = operator.get("/evals/support/suite.zip")
    names = names_in(download.content)
    assert names and all(inside("support-line", name) for name in names), names
    folder = unzip(download.content, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml")) == [
        f"support-line/{saved.name}.yaml"
    ]
    EvalScenarioFile.load(folder / "support-line" / f"{saved.name}.yaml")


@pytest.mark.parametrize("given", ["", "   ", "../..", "/", "!!!", "\x00", "---", "...", "\u202e"])
def test_a_name_with_nothing_of_a_file_name_left_is_refused(call, operator, given):
    response = save(operator, "call-7", name=given)
    assert response.status_code == 400 and "Name it" in response.content.decode()
    assert not Scenario.objects.exists()


@pytest.mark.parametrize(
    "agent_name", ["../../../etc", "..", "/", "a/b\\c", "\x00", "CON", "  ", "ünï/../cödé", "x" * 300]
)
def test_an_agents_hostile_name_never_makes_a_folder_outside_the_zip(org, operator, agent_name):
    make_session(org, "call-x", messages=CALL, agent_key="support", agent_name=agent_name[:200], status="ended")
    assert save(operator, "call-x").status_code == 302
    download = operator.get("/evals/support/suite.zip")
    names = names_in(download.content)
    folder = names[0].split("/")[0]
    assert folder and folder not in (".", "..") and len(folder) <= 80
    assert all(inside(folder, name) for name in names), names
    assert download["Content-Disposition"] == f'attachment; filename="{folder}-evals.zip"'


@pytest.mark.parametrize(
    "key",
    [
        "..",
        "%2e%2e",
        "..%2f..%2fetc",
        "%00",
        "<script>alert(1)</script>",
        "x" * 5000,
        "%C0%AE%C0%AE",
        "support%20",
        "SUPPORT",
        "support'--",
        "%ff%fe",
    ],
)
def test_an_agent_key_with_odd_characters_is_a_404_never_a_500_nor_echoed(saved, operator, key):
    for url in (f"/evals/{key}/", f"/evals/{key}/suite.zip"):
        response = operator.get(url)
        assert response.status_code == 404, (url, response.status_code)
        body = response.content.decode(errors="replace")
        assert "<script>alert(1)" not in body and WORDS not in body and "late-order" not in body
    assert operator.post(f"/evals/{key}/", {"delete": "late-order"}).status_code == 404
    assert Scenario.objects.count() == 1


def test_an_agent_key_with_odd_characters_from_a_call_round_trips_its_links(org, operator, tmp_path):
    """An agents API's id is any path segment of up to 100 characters (sessions/agent_link.py): its pages and
    redirects work, quoted."""
    key = "ag #1?x=%2F&y=<b>"
    make_session(org, "odd-call", messages=CALL, agent_key=key, agent_name="Odd agent", status="ended")
    response = save(operator, "odd-call")
    assert response.status_code == 302
    location = response["Location"]
    assert location.endswith("#s-late-order") and "<" not in location and " " not in location
    page = operator.get(location.split("#")[0])
    assert page.status_code == 200 and "late-order.yaml" in page.content.decode()
    assert "<b>" not in page.content.decode().split("<h1>")[1].split("</h1>")[0]
    href = page.content.decode().split('data-testid="download"')[0].rsplit('href="', 1)[1].split('"')[0]
    download = operator.get(href.replace("&amp;", "&"))
    assert download.status_code == 200 and names_in(download.content) == ["odd-agent/late-order.yaml"]
    assert operator.post(location.split("#")[0], {"delete": "late-order"}).status_code == 302
    assert not Scenario.objects.exists()


@pytest.mark.parametrize(
    "session_id", ["..%2Fcall-7", "call-7%00", "CALL-7", "call-7%20", "x" * 5000, "%ff", "call-7'--"]
)
def test_a_session_id_with_odd_characters_is_a_404_never_a_500(saved, operator, session_id):
    for method in ("get", "post"):
        response = getattr(operator, method)(f"/sessions/{session_id}/scenario/", {"name": "odd", "include-1": "on"})
        assert response.status_code == 404, (method, session_id)
    assert list(Scenario.objects.values_list("name", flat=True)) == ["late-order"]


# --- hostile forms -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wait",
    [
        "soon",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e309",
        "-1",
        "0",
        "0.09",
        "600.01",
        "",
        " ",
        "0x10",
        "1/2",
        "١٠٠٠",
        "1" * 500,
    ],
)
def test_a_wait_that_is_no_sane_number_of_seconds_is_refused_with_its_reason(call, operator, wait):
    response = save(operator, "call-7", **{"within-1": wait})
    assert response.status_code == 400, wait
    assert "Turn 1: the wait allowed must be" in response.content.decode()
    assert not Scenario.objects.exists()


@pytest.mark.parametrize(
    "wait, ms", [("0.1", 100), ("600", 600_000), (" 2.5 ", 2500), ("1e2", 100_000), ("1_5", 15_000)]
)
def test_a_wait_within_bounds_is_kept_in_milliseconds(call, operator, wait, ms):
    assert save(operator, "call-7", **{"within-1": wait}).status_code == 302
    (turn,) = Scenario.objects.get().turns
    assert turn["within_ms"] == ms


def test_huge_fields_are_cut_to_their_limits_and_still_load(call, operator, tmp_path):
    big = "é" * 300_000
    response = save(operator, "call-7", **{"user-1": big, "note": big, "contains-1": big, "excludes-1": big})
    assert response.status_code == 302
    saved = Scenario.objects.get()
    (turn,) = saved.turns
    assert len(turn["user"]) == 2000 and len(turn["contains"]) == 200 and len(turn["excludes"]) == 200
    assert len(saved.note) == 2000
    folder = unzip(operator.get("/evals/support/suite.zip").content, tmp_path)
    (text,) = list(EvalScenarioFile.load(folder / "support-line" / "late-order.yaml"))
    assert text.turns[0].user == "é" * 2000


def test_a_body_over_djangos_limit_is_refused_not_a_500(call, operator):
    response = save(operator, "call-7", note="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10))
    assert response.status_code == 413 and not Scenario.objects.exists()


def test_fields_given_twice_take_one_value_and_never_break_the_page(call, operator):
    form = (
        "name=first&name=second&include-1=on&include-1=&within-1=soon&within-1=3"
        "&user-1=one&user-1=two&calls-1=on&calls-1=on&contains-1=a&contains-1=b&note=x&note=y"
    )
    response = operator.post("/sessions/call-7/scenario/", form, content_type="application/x-www-form-urlencoded")
    assert response.status_code in (302, 400)
    if response.status_code == 302:
        saved = Scenario.objects.get()
        assert saved.name in ("first", "second")
        (turn,) = saved.turns
        assert turn["user"] in ("one", "two") and turn["within_ms"] in (3000,)


def test_fields_for_turns_the_call_never_had_are_ignored(call, operator):
    extra = {
        "include-2": "on",
        "user-2": "injected",
        "within-2": "1",
        "include-0": "on",
        "user-0": "zero",
        "include--1": "on",
        "speech-1": "[0, 99999999]",
        "number-1": "7",
        "calls-99": "on",
    }
    assert save(operator, "call-7", **extra).status_code == 302
    (turn,) = Scenario.objects.get().turns
    assert turn["number"] == 1 and turn["user"] == WORDS
    assert "injected" not in json.dumps(Scenario.objects.get().turns)


def test_a_json_or_multipart_body_saves_nothing_odd(call, operator):
    response = operator.post(
        "/sessions/call-7/scenario/",
        json.dumps({"name": "j", "include-1": "on", "turns": [{"number": 1, "user": "x" * 10}]}),
        content_type="application/json",
    )
    assert response.status_code == 400 and not Scenario.objects.exists()  # no name: nothing saved
    files = {"name": "m", "include-1": "on", "within-1": "3", "user-1": io.BytesIO(b"file body")}
    response = operator.post("/sessions/call-7/scenario/", files)
    assert response.status_code in (302, 400)
    assert "file body" not in json.dumps(list(Scenario.objects.values_list("turns", flat=True)))


def test_a_call_with_no_caller_words_saves_no_empty_scenario_that_passes_whatever_the_bot_does(org, operator):
    """Its page has no form, but a POST made by hand saved a scenario of no turns: a test that always passes."""
    make_session(org, "quiet", messages=CONVERSATION[:2], agent_key="support", agent_name="Support", status="ended")
    assert 'data-testid="no-turns"' in operator.get("/sessions/quiet/scenario/").content.decode()
    response = operator.post("/sessions/quiet/scenario/", {"name": "empty", "include-1": "on", "user-1": "forged"})
    assert response.status_code == 400 and "nothing to replay" in response.content.decode()
    assert not Scenario.objects.exists()


def test_a_scenario_name_or_note_in_markup_is_shown_as_text(call, operator):
    assert save(operator, "call-7", note="<script>alert(1)</script>").status_code == 302
    html = operator.get("/evals/support/").content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- thousands of turns -------------------------------------------------------------------------------------------


def long_call(turns: int) -> list[tuple[str, dict]]:
    messages = []
    for n in range(turns):
        messages += [
            ("to-client", rtvi("user-started-speaking")),
            ("to-client", rtvi("user-transcription", {"text": f"turn {n} words", "final": True, "user_id": "u"})),
            ("to-client", rtvi("user-stopped-speaking")),
            ("to-client", rtvi("bot-llm-started")),
            (
                "to-client",
                rtvi("llm-function-call-in-progress", {"function_name": "f", "tool_call_id": f"c{n}", "arguments": {}}),
            ),
            ("to-client", rtvi("bot-llm-text", {"text": f"answer {n}"})),
            ("to-client", rtvi("bot-llm-stopped")),
        ]
    return messages


@pytest.mark.timeout(300)
def test_a_call_of_thousands_of_turns_drafts_at_most_max_turns_in_reasonable_time(org, operator):
    make_session(org, "long", messages=long_call(3000), agent_key="support", agent_name="Support", status="ended")
    started = time.monotonic()
    page = operator.get("/sessions/long/scenario/")
    took = time.monotonic() - started
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="scenario-turn"') == scenarios.MAX_TURNS and 'data-testid="turns-cut"' in html
    assert took < 30, took


class FormFields(HTMLParser):
    """The fields a browser sends from a page's form: inputs (checkboxes when checked) and textareas."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name"):
            if attrs.get("type") == "checkbox":
                if "checked" in attrs:
                    self.fields.append((attrs["name"], "on"))
            else:
                self.fields.append((attrs["name"], attrs.get("value") or ""))
        elif tag == "textarea":
            self._textarea = attrs.get("name")
            self.fields.append((self._textarea, ""))

    def handle_data(self, data):
        if self._textarea is not None:
            self.fields[-1] = (self._textarea, self.fields[-1][1] + data)

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None


def test_a_scenario_of_max_turns_is_saved_from_its_own_page_as_a_browser_sends_it(org, operator):
    """A call of more caller turns than a scenario takes: the page says it kept the first MAX_TURNS, and its own
    form, every field as a browser sends it, is saved, never refused whole by Django's limit on a form's fields
    (it was, with 200 turns: 1,203 fields)."""
    make_session(org, "long", messages=long_call(scenarios.MAX_TURNS + 5), agent_key="support", status="ended")
    page = operator.get("/sessions/long/scenario/")
    assert 'data-testid="turns-cut"' in page.content.decode()
    parser = FormFields()
    parser.feed(page.content.decode())
    per_turn = [name for name, _ in parser.fields if name.endswith("-1") and not name.endswith("-11")]
    assert len(per_turn) == scenarios.FIELDS_PER_TURN, per_turn
    assert len(parser.fields) <= settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    form = "&".join(f"{quote(k)}={quote(v)}" for k, v in [*parser.fields, ("name", "long-one")] if k != "name")
    form += "&name=long-one"
    response = operator.post("/sessions/long/scenario/", form, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 302, response.content[:300]
    assert len(Scenario.objects.get().included) == scenarios.MAX_TURNS


def naive_calls_by_turn(calls, starts):
    """The rule as first written: each call in the last turn whose start is at or before it."""
    found = [[] for _ in starts]
    for call in calls:
        at, name = call.get("started_at"), call.get("function_name")
        if at is None or not name:
            continue
        index = max((i for i, start in enumerate(starts) if start is not None and start <= at), default=None)
        if index is not None:
            found[index].append({"name": name, "args": call.get("args") if isinstance(call.get("args"), dict) else {}})
    return found


def test_function_calls_land_in_the_same_turns_as_the_rule_says_in_any_order_of_starts():
    rng = random.Random(36)
    for _ in range(300):
        starts = [rng.choice([None, rng.randint(0, 20) / 2]) for _ in range(rng.randint(0, 12))]
        calls = [
            {"started_at": rng.choice([None, rng.randint(-2, 24) / 2]), "function_name": rng.choice(["", "f", "g"])}
            | ({"args": {"n": rng.randint(0, 3)}} if rng.random() < 0.5 else {"args": "not a dict"})
            for _ in range(rng.randint(0, 12))
        ]
        assert scenarios._calls_by_turn(calls, starts) == naive_calls_by_turn(calls, starts), (calls, starts)


class Counted(float):
    """A time that counts the comparisons made of it (not a clock: a count is the same on any machine)."""

    made = 0

    def __lt__(self, other):
        Counted.made += 1
        return float(self) < float(other)

    def __gt__(self, other):
        Counted.made += 1
        return float(self) > float(other)

    def __le__(self, other):
        Counted.made += 1
        return float(self) <= float(other)

    def __ge__(self, other):
        Counted.made += 1
        return float(self) >= float(other)


def test_ten_thousand_calls_over_two_thousand_turns_are_placed_without_comparing_each_with_each():
    starts = [Counted(i) for i in range(2000)]
    calls = [{"started_at": Counted(i / 5), "function_name": "f", "args": {}} for i in range(10_000)]
    Counted.made = 0
    placed = scenarios._calls_by_turn(calls, starts)
    # Each with each would be 20,000,000 comparisons; sorting once and a binary search per call, a few hundred
    # thousand at most.
    assert Counted.made < 400_000, Counted.made
    assert sum(map(len, placed)) == 10_000 and len(placed[0]) == 5


# --- the audit log ----------------------------------------------------------------------------------------------


def test_no_audit_entry_holds_the_callers_words_nor_the_operators_edits(call, operator, org):
    secret = f"zq{uuid.uuid4().hex[:8]}"
    save(operator, "call-7", **{"user-1": f"my code is {secret}", "contains-1": secret, "note": secret})
    operator.get("/evals/support/")
    operator.get("/evals/support/suite.zip")
    operator.post("/evals/support/", {"delete": "late-order"})
    entries = list(AuditEntry.objects.filter(organization=org).values())
    assert {e["action"] for e in entries} >= {"scenario_saved", "suite_download", "scenario_deleted"}
    dumped = json.dumps(entries, default=str)
    assert secret not in dumped and WORDS not in dumped and "lookup_order" not in dumped and "A-17" not in dumped


# --- the stored bytes ----------------------------------------------------------------------------------------------


def stored_bytes() -> bytes:
    name = Path(connection.settings_dict["NAME"])
    return b"".join(p.read_bytes() for p in name.parent.glob(name.name + "*") if p.is_file())


def erased_by(path: str, org) -> None:
    """The call's contents gone the real way: the API's erase of the call or of its caller, or retention."""
    if path == "purge":
        from datetime import timedelta

        from django.utils import timezone

        from rtvi_monitor.privacy import retention
        from rtvi_monitor.sessions.models import Session

        Session.objects.filter(session_id="erase-me").update(ended_at=timezone.now() - timedelta(days=10))
        org.keep_messages_days = 5
        org.save()
        retention.purge_round()
        return
    key = ApiKey.issue(org, "eraser")[1]  # read and write: an erase takes "write"
    url = "/api/sessions/erase-me/" if path == "session" else "/api/sessions/?caller=u"
    response = Client().delete(url, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    if path == "session":
        assert response.json()["evals"] == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["session", "caller", "purge"])
def test_after_the_call_is_erased_no_byte_of_sqlite_holds_the_scenario(org, path):
    if connection.vendor != "sqlite" or connection.settings_dict["NAME"].startswith(("file:", ":memory:")):
        pytest.skip("the bytes of a SQLite file: run with SQLITE_TEST_PATH")
    word = f"zanzibarquux{uuid.uuid4().hex[:10]}"
    note = f"notezq{uuid.uuid4().hex[:10]}"
    messages = [
        ("to-client", rtvi("user-started-speaking")),
        ("to-client", rtvi("user-transcription", {"text": f"my name is {word}", "final": True, "user_id": "u"})),
        ("to-client", rtvi("user-stopped-speaking")),
        ("to-client", rtvi("bot-llm-started")),
        ("to-client", rtvi("bot-llm-text", {"text": "Hello."})),
        ("to-client", rtvi("bot-llm-stopped")),
    ]
    session = make_session(org, "erase-me", messages=messages, agent_key="support", status="ended")
    if path == "caller":
        from rtvi_monitor.sessions.models import SessionCaller, caller_key

        SessionCaller.objects.create(session=session, caller_key=caller_key(org.pk, "u"))
    operator = signed_in(org, "operator", "op")
    form = {"name": "named", "note": note, "include-1": "on", "within-1": "3", "contains-1": word}
    assert operator.post("/sessions/erase-me/scenario/", form).status_code == 302
    assert operator.get("/evals/support/suite.zip").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = stored_bytes()
    assert note.encode() in before and word.encode() in before  # it was there, as stored

    erased_by(path, org)
    assert not Scenario.objects.exists()
    after = stored_bytes()
    assert note.encode() not in after and word.encode() not in after
    listed = operator.get("/evals/support/")
    assert "named.yaml" not in listed.content.decode() and operator.get("/evals/support/suite.zip").status_code == 404
