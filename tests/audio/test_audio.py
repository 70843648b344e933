"""Call audio through the real URLconf: a bot's uploads, what is stored and measured, who may hear it.

Speech is real (espeak-ng, tests/speech.py); sessions are rows here (the socket's part is in
tests/audio/test_audio_live.py and tests/audio/test_audio_pipecat.py).
"""

import io
import time
import warnings
import wave

import numpy as np
import pytest
import soundfile
from django.core.files.storage import storages
from django.test import Client
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from dashboard.org.models import AuditEntry, Role
from rtvi_monitor.audio import store as audio
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.live.signals import session_ended
from rtvi_monitor.sessions.models import Session
from tests.conftest import make_member
from tests.speech import silence, speak

# Chunks are stored on the audio thread, with its own connection: the test database is committed.
pytestmark = pytest.mark.usefixtures("live_path")

T0 = 1_764_000_000.0  # a call's wall-clock start


@pytest.fixture
def recording_org(org):
    org.record_audio = True
    org.save()
    return org


@pytest.fixture
def token(recording_org):
    return IngestToken.issue(recording_org, "bot")[1]


@pytest.fixture
def call(recording_org):
    return Session.objects.create(organization=recording_org, session_id="call-1", agent_key="support-bot")


def put(token, session_id, track, index, samples, *, start=T0, rate=16000, headers=None, client=None):
    extra = {
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "HTTP_X_AUDIO_SAMPLE_RATE": str(rate),
        "HTTP_X_AUDIO_START": str(start),
    }
    extra.update(headers or {})
    body = samples.tobytes() if isinstance(samples, np.ndarray) else samples
    return (client or Client()).put(
        f"/ingest/audio/{session_id}/{track}/{index}", body, content_type="application/octet-stream", **extra
    )


def content(response) -> bytes:
    """A streamed answer's bytes (the WAV is rendered by an async generator, as daphne serves it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sync test client consuming an async stream says so
        return b"".join(response)


def upload_call(token, session_id, user, bot, *, start=T0, chunk_seconds=5.0, rate=16000):
    """Both tracks in chunks of `chunk_seconds`, each stamped with its first sample's time."""
    per = int(chunk_seconds * rate)
    for track, samples in (("user", user), ("bot", bot)):
        for index, at in enumerate(range(0, len(samples), per)):
            response = put(token, session_id, track, index, samples[at : at + per], start=start + at / rate, rate=rate)
            assert response.status_code == 201, response.content


def conversation():
    """The caller speaks at 0.5 s; the bot answers 0.8 s after the caller stops; the caller barges in."""
    question = speak("Hi, I am calling about my order, it has not arrived yet.")
    answer = speak("I am sorry to hear that. Let me look up your order right away.", voice="en-gb")
    barge = speak("No wait, it is a different order.")
    user = np.concatenate([silence(0.5), question, silence(0.8), silence(1.0), barge, silence(4.0)])
    bot = np.zeros_like(user)
    bot_start = int((0.5 + len(question) / 16000 + 0.8) * 16000)
    bot[bot_start : bot_start + len(answer)] = answer[: len(bot) - bot_start]
    return user, bot, {"user_stop": 0.5 + len(question) / 16000, "bot_start": bot_start / 16000}


def test_a_chunk_is_stored_compressed_and_lossless_and_a_resend_is_stored_once(token, call):
    samples = speak("Thank you for calling.")
    response = put(token, "call-1", "user", 0, samples)
    assert response.status_code == 201
    assert response.json()["stored"] == {
        "track": "user",
        "index": 0,
        "samples": len(samples),
        "seconds": round(len(samples) / 16000, 3),
    }
    again = put(token, "call-1", "user", 0, samples)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    chunk = AudioChunk.objects.get()
    assert chunk.path.endswith(".flac") and chunk.size < samples.nbytes * 0.8
    data = storages["audio"].open(chunk.path).read()
    decoded, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == 16000 and np.array_equal(decoded, samples)
    assert SessionAudio.objects.get().chunks == 1


def test_every_bad_chunk_gets_a_clear_answer_and_changes_nothing(token, call, recording_org):
    samples = speak("One moment please.")
    assert put(token, "call-1", "user", 0, samples).status_code == 201
    conflict = put(token, "call-1", "user", 0, samples[::-1].copy())
    assert conflict.status_code == 409 and "other content" in conflict.json()["error"]
    other_rate = put(token, "call-1", "user", 1, samples, rate=24000)
    assert other_rate.status_code == 422 and "16000 Hz" in other_rate.json()["error"]
    odd = put(token, "call-1", "user", 1, samples.tobytes()[:-1])
    assert odd.status_code == 422 and "even number" in odd.json()["error"]
    missing = put(token, "call-1", "user", 1, samples, headers={"HTTP_X_AUDIO_START": ""})
    assert missing.status_code == 400 and "X-Audio-Start" in missing.json()["error"]
    nonsense = put(token, "call-1", "user", 1, samples, headers={"HTTP_X_AUDIO_SAMPLE_RATE": "fast"})
    assert nonsense.status_code == 400 and "not a number" in nonsense.json()["error"]
    assert put(token, "call-1", "user", 1, samples, rate=96000).status_code == 400
    assert put(token, "call-1", "user", 1, samples, start=float("nan")).status_code == 400
    assert put(token, "call-1", "voicemail", 1, samples).status_code == 400
    assert put("it_nope", "call-1", "user", 1, samples).status_code == 401
    unknown = put(token, "not-yet", "user", 0, samples)
    assert unknown.status_code == 404 and unknown["Retry-After"] and "again later" in unknown.json()["error"]
    too_big = put(token, "call-1", "user", 1, samples, headers={"CONTENT_LENGTH": str(5 * 1024 * 1024)})
    assert too_big.status_code == 413
    assert AudioChunk.objects.count() == 1 and SessionAudio.objects.get().chunks == 1
    call.contents_purged_at = call.started_at
    call.save()
    assert put(token, "call-1", "user", 1, samples).status_code == 410


def test_recording_is_off_until_the_organization_opts_in_and_then_only_for_its_agents(org, recording_org):
    samples = speak("Hello.")
    token = IngestToken.issue(org, "bot")[1]
    Session.objects.create(organization=org, session_id="s", agent_key="support-bot", agent_name="Support")
    org.record_audio = False
    org.save()
    status = Client().get("/ingest/audio/s/?agent=support-bot", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status["record"] is False and "off for this organization" in status["why"]
    refused = put(token, "s", "user", 0, samples)
    assert refused.status_code == 403 and "off for this organization" in refused.json()["why"]
    org.record_audio, org.audio_agents = True, "sales-bot\nbilling-bot"
    org.save()
    assert put(token, "s", "user", 0, samples).status_code == 403
    org.audio_agents = "sales-bot\nSupport"  # by name as well as by id
    org.save()
    assert put(token, "s", "user", 0, samples).status_code == 201
    # An agent id no agent can have (over 200 characters) is no agent: the session's own names decide, and the
    # bot gets its answer (a 400 would have its package ask again for ever).
    long_agent = Client().get("/ingest/audio/s/?agent=" + "a" * 201, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert long_agent.status_code == 200 and long_agent.json()["record"] is True
    status = Client().get("/ingest/audio/s/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status == {
        "record": True,
        "why": "",
        "max_chunk_bytes": 4 * 1024 * 1024,
        "sample_rate": 16000,
        "tracks": {"user": [[0, 0]], "bot": []},
    }


def test_an_overloaded_server_answers_at_once_and_stores_nothing(token, call, settings):
    settings.AUDIO_MAX_PENDING = 0  # as if that many chunks were already waiting for the audio thread
    answer = put(token, "call-1", "user", 0, speak("Hello."))
    assert answer.status_code == 503 and answer["Retry-After"] == "2"
    assert "AUDIO_MAX_PENDING" in answer.json()["error"] and not AudioChunk.objects.exists()
    settings.AUDIO_MAX_PENDING = 64
    assert put(token, "call-1", "user", 0, speak("Hello.")).status_code == 201


def test_a_bot_that_resumes_learns_what_is_stored(token, call):
    samples = speak("Let me check.")
    for index in (0, 1, 2, 5):
        assert put(token, "call-1", "bot", index, samples, start=T0 + index).status_code == 201
    status = Client().get("/ingest/audio/call-1/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status["tracks"] == {"user": [], "bot": [[0, 2], [5, 5]]}


def test_the_audio_measures_each_turn_and_the_barge_in(token, call):
    user, bot, truth = conversation()
    upload_call(token, "call-1", user, bot)
    recording = SessionAudio.objects.get()
    assert recording.analysis == {}  # not made per chunk (it reads every chunk): made when read, and at the end
    analysis = audio.current_analysis(recording, call)
    (turn,) = analysis["turns"]
    assert turn["user_stopped_at"] == pytest.approx(T0 + truth["user_stop"], abs=0.08)
    assert turn["bot_started_at"] == pytest.approx(T0 + truth["bot_start"], abs=0.08)
    assert turn["seconds"] == pytest.approx(0.8, abs=0.1) and turn["over_caller"] is False
    (barge,) = analysis["barge_ins"]
    assert barge["at"] == pytest.approx(T0 + truth["user_stop"] + 1.8, abs=0.1)
    assert analysis["talk_over_seconds"] > 0.5
    assert analysis["dead_air"] == []  # a silence counts only between speech: the trailing 4 s is not dead air


def test_the_messages_latency_is_shown_beside_the_audios(token, call, api_key):
    user, bot, truth = conversation()
    upload_call(token, "call-1", user, bot)
    reported_at = T0 + truth["bot_start"] - 0.25  # the bot said it started speaking 250 ms before its audio did
    call.status, call.state = (
        Session.Status.ENDED,
        {
            "turns": [
                {
                    "index": 0,
                    "user_stopped_at": T0 + truth["user_stop"],
                    "bot_started_at": reported_at,
                    "latency_ms": 550.0,
                }
            ]
        },
    )
    call.save()
    session_ended.send(sender=Session, session=call)  # as the lifecycle tells an end; audio subscribes
    body = Client().get("/api/sessions/call-1/audio/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    (row,) = body["comparison"]
    assert row["reported_seconds"] == 0.55 and row["audio_seconds"] == pytest.approx(0.8, abs=0.1)
    assert row["difference_seconds"] == pytest.approx(0.25, abs=0.1)
    stored = SessionAudio.objects.get()
    assert stored.difference_p50 == row["difference_seconds"] and stored.reported_p50 == 0.55
    assert body["summary"]["barge_ins"] == 1 and body["recorded"] is True and body["listen"] is True


def test_the_wav_is_both_tracks_on_one_clock_with_gaps_silent_and_ranges(token, call, api_key, settings):
    words = speak("Your order ships tomorrow.")
    put(token, "call-1", "user", 0, words, start=T0)
    put(token, "call-1", "bot", 0, words, start=T0 + 2.0)  # the bot's track begins 2 s later
    put(token, "call-1", "user", 2, words, start=T0 + 6.0)  # chunk 1 never came: silence, not a shift
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    whole = Client().get("/api/sessions/call-1/audio.wav", **auth)
    assert whole.status_code == 200 and whole["Accept-Ranges"] == "bytes"
    data = content(whole)
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getnchannels(), wav.getframerate(), wav.getsampwidth()) == (2, 16000, 2)
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    assert len(frames) == round((6.0 + len(words) / 16000) * 16000)
    assert np.array_equal(frames[: len(words), 0], words) and np.array_equal(
        frames[32000 : 32000 + len(words), 1], words
    )
    assert not frames[len(words) : 96000, 0].any()  # the missing chunk is silence
    assert np.array_equal(frames[96000 : 96000 + len(words), 0], words)
    part = Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=1000-1999", **auth)
    assert part.status_code == 206 and part["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    assert content(part) == data[1000:2000]
    settings.AUDIO_RANGE_MAX_BYTES = 5000  # a player's "bytes=N-" gets at most this much, then asks again
    open_ended = Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=100-", **auth)
    assert open_ended.status_code == 206 and open_ended["Content-Range"] == f"bytes 100-5099/{len(data)}"
    assert content(open_ended) == data[100:5100]
    tail = Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=-10", **auth)
    assert content(tail) == data[-10:]
    beyond = Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE=f"bytes={len(data)}-", **auth)
    assert beyond.status_code == 416 and beyond["Content-Range"] == f"bytes */{len(data)}"
    peaks = Client().get("/api/sessions/call-1/audio/peaks/?points=60", **auth).json()
    assert peaks["points"] == 60 and len(peaks["user"]) == len(peaks["bot"]) == 60
    loud = [i for i, v in enumerate(peaks["bot"]) if v > 20]
    assert loud and loud[0] == pytest.approx(2.0 / peaks["seconds_per_point"], abs=2)
    assert Client().get("/api/sessions/call-1/audio/peaks/?points=0", **auth).status_code == 400


def test_a_range_or_a_number_header_too_long_to_be_a_number_is_refused_with_what_was_wrong(token, call, api_key):
    put(token, "call-1", "user", 0, speak("One moment please."))
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    size = int(Client().head("/api/sessions/call-1/audio.wav", **auth)["Content-Length"])
    huge = "9" * 5000
    for asked, said in (
        (f"bytes={huge}-", "at most 18 digits"),
        (f"bytes=0-{huge}", "at most 18 digits"),
        (f"bytes=-{huge}", "at most 18 digits"),
        (f"bytes={size}-", "past the end"),
        ("bytes=-0", "nothing to send"),
        ("bytes=200-100", "before it starts"),
    ):
        refused = Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE=asked, **auth)
        assert refused.status_code == 416 and said in refused.json()["error"], asked
        assert refused["Content-Range"] == f"bytes */{size}"
    # A Range this does not read (another unit, several ranges, a digit that is not ASCII) is ignored: the whole.
    for ignored in ("items=0-1", "bytes=0-1,5-6", "bytes=\u0663-"):
        assert Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE=ignored, **auth).status_code == 200
    for header, value in (("HTTP_X_AUDIO_SAMPLE_RATE", huge), ("HTTP_X_AUDIO_START", huge)):
        answer = put(token, "call-1", "user", 1, speak("Hi."), headers={header: value})
        assert answer.status_code == 400 and "is not a number from" in answer.json()["error"]
    for length in (huge, "\u00b2"):
        answer = put(token, "call-1", "user", 1, speak("Hi."), headers={"CONTENT_LENGTH": length})
        assert answer.status_code == 400 and "is not a number of bytes" in answer.json()["error"]
    assert AudioChunk.objects.count() == 1


@pytest.fixture
def listener(recording_org):
    """An operator's browser that sends the CSRF token, as the page's player does."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_member(recording_org, "olga", Role.OPERATOR))
    client.get("/sessions/call-1/")  # the page sets the CSRF cookie
    return client, {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}


def listens(organization):
    return list(
        AuditEntry.objects.filter(organization=organization, action="audio_listen").values_list("actor", "target")
    )


def test_fetching_the_wav_is_not_listening_and_playing_is_one_entry(token, call, recording_org, listener):
    put(token, "call-1", "user", 0, speak("My card number is on file."))
    client, csrf = listener
    assert client.head("/api/sessions/call-1/audio.wav").status_code == 200  # the player's preload
    assert client.get("/api/sessions/call-1/audio.wav").status_code == 200
    assert client.get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=0-99").status_code == 206
    assert listens(recording_org) == []
    assert client.post("/api/sessions/call-1/audio/played/", **csrf).json() == {"logged": True}
    assert client.post("/api/sessions/call-1/audio/played/", **csrf).json() == {"logged": False}  # within the hour
    assert listens(recording_org) == [("olga", "call-1")]


def test_a_played_without_the_csrf_token_or_by_a_non_listener_is_refused_and_writes_nothing(
    token, call, recording_org, listener
):
    put(token, "call-1", "user", 0, speak("My card number is on file."))
    client, csrf = listener
    forged = client.post("/api/sessions/call-1/audio/played/")  # another site's form: no token
    assert forged.status_code == 403 and "CSRF" in forged.json()["error"]
    assert client.get("/api/sessions/call-1/audio/played/").status_code == 405
    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(make_member(recording_org, "vic", Role.VIEWER))
    viewer.get("/sessions/call-1/")
    refused = viewer.post("/api/sessions/call-1/audio/played/", HTTP_X_CSRFTOKEN=viewer.cookies["csrftoken"].value)
    assert refused.status_code == 403 and "Listening to calls needs the operator role" in refused.json()["error"]
    assert client.post("/api/sessions/nope/audio/played/", **csrf).status_code == 404
    recording_org.audio_role = "admin"
    recording_org.save()
    assert client.post("/api/sessions/call-1/audio/played/", **csrf).status_code == 403
    assert listens(recording_org) == []


def test_a_scripts_get_of_the_wav_is_a_download_once_an_hour(token, call, recording_org, api_key):
    put(token, "call-1", "user", 0, speak("My card number is on file."))
    for asked in ("", "bytes=0-99", "bytes=100-"):
        Client().get("/api/sessions/call-1/audio.wav", HTTP_RANGE=asked, HTTP_AUTHORIZATION=f"Bearer {api_key}")
    entries = AuditEntry.objects.filter(organization=recording_org, target="call-1")
    assert [entry.action for entry in entries] == ["audio_download"] and entries[0].actor.startswith("API key")


def test_only_roles_allowed_to_hear_get_audio_and_every_listen_and_download_is_audited(
    token, call, recording_org, other_org
):
    put(token, "call-1", "user", 0, speak("My card number is on file."))
    operator, viewer, admin = Client(), Client(), Client()
    make_member(recording_org, "olga", Role.OPERATOR)
    make_member(recording_org, "vic", Role.VIEWER)
    make_member(recording_org, "ada", Role.ADMIN)
    make_member(other_org, "mallory", Role.ADMIN)
    for client, name in ((operator, "olga"), (viewer, "vic"), (admin, "ada")):
        client.login(username=name, password="correct-horse-battery")
    stranger = Client()
    stranger.login(username="mallory", password="correct-horse-battery")

    assert viewer.get("/api/sessions/call-1/audio.wav").status_code == 403
    assert viewer.get("/api/sessions/call-1/audio/peaks/").status_code == 403
    figures = viewer.get("/api/sessions/call-1/audio/").json()
    assert figures["recorded"] is True and figures["listen"] is False  # figures yes, the voice no
    page = viewer.get("/sessions/call-1/").content.decode()
    assert 'data-testid="heard"' in page and "audio.wav" not in page and "<audio" not in page
    assert stranger.get("/api/sessions/call-1/audio.wav").status_code == 404
    assert Client().get("/api/sessions/call-1/audio.wav").status_code == 401

    for _ in range(3):  # a player's many range requests: one listen in the log
        assert operator.get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=0-99").status_code == 206
    assert operator.post("/api/sessions/call-1/audio/played/").json() == {"logged": True}
    assert operator.get("/api/sessions/call-1/audio.wav?download=1")["Content-Disposition"].startswith("attachment")
    assert operator.get("/api/sessions/call-1/audio.wav?download=1").status_code == 200
    entries = AuditEntry.objects.filter(organization=recording_org, target="call-1")
    assert entries.filter(action="audio_listen", actor="olga").count() == 1
    assert entries.filter(action="audio_download", actor="olga").count() == 2
    assert not entries.filter(actor__in=["vic", "mallory"]).exists()

    recording_org.audio_role = "admin"
    recording_org.save()
    assert "admin role" in operator.get("/api/sessions/call-1/audio.wav").json()["error"]
    assert admin.get("/api/sessions/call-1/audio.wav", HTTP_RANGE="bytes=0-99").status_code == 206


def test_erasing_a_call_deletes_its_recording_files(token, call, api_key, django_capture_on_commit_callbacks):
    upload_call(token, "call-1", speak("Please forget me."), speak("Of course.", voice="en-gb"))
    paths = list(AudioChunk.objects.values_list("path", flat=True))
    store = storages["audio"]
    assert paths and all(store.exists(p) for p in paths)
    call.status = Session.Status.ENDED
    call.save()
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().delete("/api/sessions/call-1/", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert response.status_code == 200, response.content
    assert not AudioChunk.objects.exists() and not any(store.exists(p) for p in paths)


@pytest.mark.django_db(transaction=True)
def test_retention_purges_recordings_with_their_own_days_or_the_messages(recording_org):
    from datetime import timedelta

    from django.utils import timezone

    from rtvi_monitor.privacy import retention

    token = IngestToken.issue(recording_org, "bot")[1]
    now = timezone.now()
    old = Session.objects.create(
        organization=recording_org, session_id="old", status=Session.Status.ENDED, ended_at=now - timedelta(hours=3)
    )
    fresh = Session.objects.create(
        organization=recording_org, session_id="fresh", status=Session.Status.ENDED, ended_at=now - timedelta(minutes=5)
    )
    for session in (old, fresh):
        put(token, session.session_id, "user", 0, speak("Hello there."))
    store = storages["audio"]
    old_paths = list(AudioChunk.objects.filter(session=old).values_list("path", flat=True))
    recording_org.keep_audio_days = 1 / 24  # an hour
    recording_org.save()
    removed = retention.purge_round()
    assert removed[recording_org.pk]["audio_chunks"] == 1
    assert not AudioChunk.objects.filter(session=old).exists() and AudioChunk.objects.filter(session=fresh).exists()
    assert not any(store.exists(p) for p in old_paths)
    assert Session.objects.filter(pk=old.pk).exists()  # the call's row and figures stay
    assert AuditEntry.objects.filter(action="purged", detail__audio_chunks=1).exists()
    # No days of its own: the recording goes with the call's messages.
    recording_org.keep_audio_days, recording_org.keep_messages_days = None, 1 / 288  # five minutes
    recording_org.save()
    retention.purge_round()
    assert not AudioChunk.objects.exists()


# The analysis, for any speech: properties --------------------------------------------------------------

runs = st.lists(
    st.tuples(st.floats(0, 600, allow_nan=False), st.floats(0.05, 20, allow_nan=False)).map(
        lambda p: [p[0], p[0] + p[1]]
    ),
    max_size=25,
)


@given(user=runs, bot=runs)
@hsettings(max_examples=300, deadline=None)
def test_the_analysis_holds_for_any_speech(user, bot):
    result = audio.analyse(user, bot, dead_air=3.0)
    merged_user, merged_bot = audio.merge_runs(user), audio.merge_runs(bot)
    spoken = lambda rs: sum(b - a for a, b in rs)  # noqa: E731
    assert 0 <= result["talk_over_seconds"] <= min(spoken(merged_user), spoken(merged_bot)) + 2e-3
    for turn in result["turns"]:
        # Every turn is a real bot start after real caller speech; measured to the end of that speech.
        assert any(abs(b[0] - turn["bot_started_at"]) < 1e-3 for b in merged_bot)
        assert any(abs(u[1] - turn["user_stopped_at"]) < 1e-3 for u in merged_user)
        assert turn["over_caller"] == (turn["seconds"] < 0)
    starts = [t["bot_started_at"] for t in result["turns"]]
    assert starts == sorted(starts) and len(starts) <= len(merged_bot)
    assert len(result["barge_ins"]) <= len(merged_user)
    for silence_ in result["dead_air"]:
        assert silence_["seconds"] >= 3.0
        at, end = silence_["at"], silence_["at"] + silence_["seconds"]
        assert not any(a < end - 1e-3 and b > at + 1e-3 for a, b in merged_user + merged_bot)  # nobody spoke in it
    v2v = [t["seconds"] for t in result["turns"] if not t["over_caller"]]
    if v2v:
        assert min(v2v) - 1e-3 <= result["voice_to_voice"]["p50"] <= max(v2v) + 1e-3


@given(shift=st.floats(-5, 5, allow_nan=False))
@hsettings(max_examples=50, deadline=None)
def test_the_analysis_moves_with_the_clock_and_nothing_else(shift):
    user, bot = [[1.0, 3.0], [6.0, 7.0]], [[3.8, 5.5], [6.5, 9.0]]
    moved = audio.analyse([[a + shift, b + shift] for a, b in user], [[a + shift, b + shift] for a, b in bot], 3.0)
    base = audio.analyse(user, bot, 3.0)
    assert [t["seconds"] for t in moved["turns"]] == pytest.approx([t["seconds"] for t in base["turns"]], abs=2e-3)
    assert moved["talk_over_seconds"] == pytest.approx(base["talk_over_seconds"], abs=2e-3)


def test_a_call_shorter_than_a_frame_and_pure_silence_say_nothing():
    assert audio.speech_runs(silence(2.0), 16000, time.time()) == []
    assert audio.speech_runs(np.zeros(10, dtype=np.int16), 16000, 0.0) == []
    assert audio.analyse([], [])["turns"] == [] and audio.analyse([], [])["voice_to_voice"]["p50"] is None


def reference(user, bot):
    """The analysis by brute force, every run against every run: what the sweeps must agree with."""
    user, bot = audio.merge_runs(user), audio.merge_runs(bot)
    turns, last_bot_end = [], float("-inf")
    for run in bot:
        spoke = [u for u in user if u[0] < run[0] and u[1] > last_bot_end]
        began_since = any(u[0] >= last_bot_end for u in spoke)
        if spoke and not (run[0] - last_bot_end < audio.BOT_TURN_GAP_SECONDS and not began_since):
            turns.append((round(spoke[-1][1], 3), round(run[0], 3)))
        last_bot_end = max(last_bot_end, run[1])
    talk_over = sum(max(0.0, min(u[1], b[1]) - max(u[0], b[0])) for u in user for b in bot)
    barge = [round(u[0], 3) for u in user if any(b[0] < u[0] < b[1] for b in bot)]
    return turns, round(talk_over, 3), barge


@given(user=runs, bot=runs)
@hsettings(max_examples=400, deadline=None)
def test_the_sweeps_agree_with_every_run_against_every_run(user, bot):
    result = audio.analyse(user, bot, dead_air=3.0)
    turns, talk_over, barge = reference(user, bot)
    assert [(t["user_stopped_at"], t["bot_started_at"]) for t in result["turns"]] == turns
    assert result["talk_over_seconds"] == pytest.approx(talk_over, abs=2e-3)
    assert [b["at"] for b in result["barge_ins"]] == barge
