"""A call made into a Pipecat eval scenario, through the real URLconf, and read back by Pipecat's own loader.

The draft page, saving, the agent's suite and its download are an operator's (the scenario holds the caller's
words); each is audited in words of its own. The downloaded folder is what `pipecat eval` runs: its files are
loaded here with `pipecat.evals.scenario.EvalScenarioFile` (Pipecat 1.14), not by reading the YAML ourselves.
"""

import io
import json
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.test import Client
from pipecat.evals.scenario import EvalScenarioFile

from dashboard.org.models import AuditEntry
from rtvi_monitor.evals import scenario as scenarios
from rtvi_monitor.evals.models import Scenario
from rtvi_monitor.privacy import contents
from tests.conftest import make_member
from tests.session_samples import CONVERSATION, make_session
from tests.sockets import rtvi

CALL = [
    *CONVERSATION[:6],
    ("to-client", rtvi("bot-llm-started")),
    (
        "to-client",
        rtvi(
            "llm-function-call-in-progress",
            {"function_name": "lookup_order", "tool_call_id": "c1", "arguments": {"order": "A-17"}},
        ),
    ),
    (
        "to-client",
        rtvi(
            "llm-function-call-stopped",
            {"function_name": "lookup_order", "tool_call_id": "c1", "result": {"eta": "today"}},
        ),
    ),
    *CONVERSATION[7:],
]


def signed_in(org, role: str, name: str) -> Client:
    client = Client()
    client.force_login(make_member(org, name, role))
    return client


@pytest.fixture
def call(org):
    return make_session(org, "call-7", messages=CALL, agent_key="support", agent_name="Support line")


@pytest.fixture
def operator(org):
    return signed_in(org, "operator", "op")


def save(client, session_id: str, **fields):
    form = {"name": "late-order", "note": "took too long", "include-1": "on", "calls-1": "on", "within-1": "4.5"}
    form.update(fields)
    return client.post(f"/sessions/{session_id}/scenario/", form)


def unzip(data: bytes, into: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(into)
    return into


def test_the_draft_shows_the_callers_turn_with_what_the_bot_did(call, operator):
    page = operator.get("/sessions/call-7/scenario/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Where is my order?" in html and "lookup_order" in html
    # The caller stopped at T0 + 3 s, the bot spoke at T0 + 7 s: 4 s waited, half again allowed.
    assert 'name="within-1"' in html and 'value="6"' in html and "4.0 s" in html
    assert "cut from the recording" not in html  # no recording: no clip promised


def test_a_saved_scenario_downloads_as_a_folder_pipecat_eval_loads(call, operator, tmp_path):
    response = save(operator, "call-7", **{"contains-1": "today", "excludes-1": "sorry"})
    assert response.status_code == 302 and response["Location"] == "/evals/support/#s-late-order"
    suite = operator.get("/evals/support/")
    assert "late-order.yaml" in suite.content.decode()
    download = operator.get("/evals/support/suite.zip")
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    folder = unzip(download.content, tmp_path)
    loaded = EvalScenarioFile.load(folder / "support-line" / "late-order.yaml")
    (text,) = list(loaded)  # no recording: the text modality only
    (turn,) = text.turns
    assert turn.user == "Where is my order?"
    events = [e.event for e in turn.expect]
    assert events == ["function_call", "llm_response"]  # in text modality Pipecat reads a reply as the LLM's text
    call_expected, reply = turn.expect
    assert [(c.name, c.args) for c in call_expected.calls] == [("lookup_order", {"order": "A-17"})]
    assert reply.within_ms == 4500 and reply.text_contains == "today" and reply.text_excludes == "sorry"


def test_each_step_is_audited_without_the_callers_words(call, operator, org):
    save(operator, "call-7")
    operator.get("/evals/support/suite.zip")
    operator.post("/evals/support/", {"delete": "late-order"})
    entries = AuditEntry.objects.filter(organization=org).order_by("pk")
    actions = [e.action for e in entries if e.action.startswith(("scenario", "suite"))]
    assert actions == ["scenario_saved", "suite_download", "scenario_deleted"]
    assert "Where is my order" not in json.dumps([e.detail for e in entries])
    assert not Scenario.objects.exists()


def test_bad_edits_save_nothing_and_say_what_was_wrong(call, operator):
    response = save(operator, "call-7", **{"within-1": "soon", "name": "!!!"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "the wait allowed must be a number of seconds" in html and "Name it" in html
    response = save(operator, "call-7", **{"include-1": ""})
    assert response.status_code == 400 and "Tick at least one turn" in response.content.decode()
    assert save(operator, "call-7").status_code == 302
    again = save(operator, "call-7")
    assert again.status_code == 400 and "already has a scenario named" in again.content.decode()
    assert Scenario.objects.count() == 1


def test_a_viewer_is_refused_every_eval_page_with_the_reason(call, operator, org):
    save(operator, "call-7")
    viewer = signed_in(org, "viewer", "watcher")
    for url in ("/sessions/call-7/scenario/", "/evals/support/", "/evals/support/suite.zip"):
        response = viewer.get(url)
        assert response.status_code == 403, url
        assert "operator" in response.content.decode()
    assert viewer.post("/evals/support/", {"delete": "late-order"}).status_code == 403
    assert Scenario.objects.count() == 1


def test_another_organization_finds_nothing_of_ours(call, operator, other_org):
    save(operator, "call-7")
    stranger = signed_in(other_org, "admin", "globex")
    assert stranger.get("/sessions/call-7/scenario/").status_code == 404
    assert "late-order" not in stranger.get("/evals/support/").content.decode()
    assert stranger.get("/evals/support/suite.zip").status_code == 404
    assert stranger.post("/evals/support/", {"delete": "late-order"}).status_code == 404
    assert Scenario.objects.count() == 1


def test_erasing_the_call_or_purging_its_contents_takes_its_scenarios(call, operator, org):
    save(operator, "call-7")
    assert contents.erase([call])["evals"] == 1  # the privacy list's entry, which erase and retention walk
    assert not Scenario.objects.exists()


def test_the_wait_allowed_by_default():
    assert scenarios.default_wait(3000) == 4500
    assert scenarios.default_wait(800) == scenarios.DEFAULT_FLOOR_MS
    assert scenarios.default_wait(None) == scenarios.UNKNOWN_WAIT_MS
    assert scenarios.default_wait(3100) == 5000  # 4,650 ms rounded up to the next half second


def test_a_recorded_call_gives_each_turn_the_callers_own_speech(call, operator, org, tmp_path, live_path):
    from rtvi_monitor.live.models import IngestToken
    from tests.audio.test_audio import put
    from tests.session_samples import T0
    from tests.speech import silence, speak

    org.record_audio = True
    org.save()
    token = IngestToken.issue(org, "bot")[1]
    words = speak("Where is my order?")
    track = np.concatenate([silence(1.5), words, silence(1.0)])  # the caller speaks from T0 + 1.5 s
    assert put(token, "call-7", "user", 0, track, start=T0).status_code == 201
    assert "cut from the recording" in operator.get("/sessions/call-7/scenario/").content.decode()
    assert save(operator, "call-7").status_code == 302
    folder = unzip(operator.get("/evals/support/suite.zip").content, tmp_path)
    loaded = EvalScenarioFile.load(folder / "support-line" / "late-order.yaml")
    text, audio = list(loaded)
    assert audio.user_audio and not text.user_audio
    clip = Path(audio.turns[0].audio)
    clip = clip if clip.is_absolute() else folder / "support-line" / clip
    with wave.open(str(clip)) as read:
        assert read.getframerate() == 16000 and read.getnchannels() == 1
        seconds = read.getnframes() / 16000
    spoken = len(words) / 16000
    assert spoken <= seconds <= spoken + 0.6  # the caller's speech and the padding, not the silence around it


def test_reading_the_draft_is_a_read_of_the_calls_contents_in_the_audit_log(call, operator, org):
    """The draft shows the caller's words: the operator's read is audited, a viewer's refused one is not."""
    viewer = signed_in(org, "viewer", "watcher")
    assert viewer.get("/sessions/call-7/scenario/").status_code == 403
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.SESSION_READ, target="call-7").exists()
    assert operator.get("/sessions/call-7/scenario/").status_code == 200
    (entry,) = AuditEntry.objects.filter(action=AuditEntry.Action.SESSION_READ, target="call-7")
    assert entry.actor == "op" and "Where is my order" not in json.dumps(entry.detail)
