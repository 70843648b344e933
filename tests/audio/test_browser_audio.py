"""The session page's audio, in Debian's Chromium against the real server.

A bot streams a two-turn call over the public ingest socket, its messages stamped on a scripted clock,
and uploads both tracks (real speech: espeak-ng) over HTTP PUT with the same clock, the bot reporting
each reply as starting a little before the caller hears it. An operator's page shows the recording's
figures beside the reported ones, both waveforms where each side spoke, and plays: a transcript line
plays from its moment and the page's cursor follows the playhead through the transcript, the timeline
and the log. A viewer gets no player and asks for no audio; an operator of an organization whose
recordings are for admins gets the figures and a line saying so. A live call's recording grows while
the page is open, its source renewed without losing the playhead, and the page stops asking once the
call ended. At 390 px nothing pokes out.
"""

import json
import re
import time
import uuid

import httpx
import numpy as np
import pytest
import websockets.sync.client as ws

from dashboard.templatetags.dashboard_format import duration
from tests.conftest import CHROMIUM, SCREENSHOTS, log_in, overflow, skip_or_fail
from tests.speech import need_espeak, silence, speak

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
WAIT_MS = 15_000
RATE = 16000
CHUNK_SECONDS = 4.0
RUN = uuid.uuid4().hex[:6]
LOUD, HUSHED = f"Recorded-{RUN}", f"AdminsListen-{RUN}"
OPERATOR, VIEWER, HUSHED_OPERATOR, LISTENER = (
    f"{name}-{RUN}" for name in ("operator", "viewer", "hushed-op", "listener")
)
PASSWORD = "audio-test-password-1"
AUDIO_API = re.compile(r"/audio(/|\.wav)")  # the figures, the peaks, the WAV (not a session id with "audio" in it)
# The bot reports its stop of the caller's speech this late, and its own start this early, against the sound.
REPORTED_STOP_LATE, REPORTED_START_EARLY = 0.2, 0.3

# One `manage.py shell` for both organizations (recording on; one lets admins alone listen), their ingest
# tokens and private API keys, and the members. Prints {"organization": [ingest token, api key]}.
SETUP = """
import json
from django.contrib.auth import get_user_model
from dashboard.models import ApiKey, Membership, Organization
from rtvi_monitor.models import IngestToken
secrets = {{}}
for name, role in {organizations!r}:
    organization = Organization.objects.create(name=name, record_audio=True, audio_role=role)
    secrets[name] = [IngestToken.issue(organization, "bot")[1], ApiKey.issue(organization, "test")[1]]
for username, name, role in {members!r}:
    user = get_user_model().objects.create_user(username, password={password!r})
    Membership.objects.create(user=user, organization=Organization.objects.get(name=name), role=role)
print(json.dumps(secrets))
"""


@pytest.fixture(scope="module")
def browser():
    """Chromium as conftest's, but media may play without a gesture (headless, a page's play() is not one)."""
    import os

    if not os.path.exists(CHROMIUM):
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    need_espeak()
    server = DaphneServer(env={"SESSION_END_GRACE": "1", "SESSION_SWEEP_INTERVAL": "0.3"}).start()
    try:
        script = SETUP.format(
            organizations=[(LOUD, "operator"), (HUSHED, "admin")],
            members=[
                (OPERATOR, LOUD, "operator"),
                (VIEWER, LOUD, "viewer"),
                (HUSHED_OPERATOR, HUSHED, "operator"),
                (LISTENER, LOUD, "operator"),
            ],
            password=PASSWORD,
        )
        server.secrets = json.loads(server.manage("shell", "-c", script).splitlines()[-1])
        yield server
    finally:
        server.stop()


# --- a bot: its messages on the socket, its audio over HTTP ------------------------------------------


class Bot:
    def __init__(self, server, organization: str, session_id: str):
        self.server, self.session_id = server, session_id
        self.token = server.secrets[organization][0]
        self.socket = ws.connect(
            f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {self.token}"}
        )
        self.seq = 0

    def send(self, messages: list[tuple[float, dict]]) -> None:
        """Messages stamped with the given times (sent_at), every one stored before this returns."""
        first = self.seq + 1
        for at, message in messages:
            self.seq += 1
            frame = {"seq": self.seq, "direction": "to-client", "sent_at": at, "message": message}
            self.socket.send(json.dumps(frame))
        acked = set()
        while len(acked) < self.seq - first + 1:
            reply = json.loads(self.socket.recv(timeout=10))
            assert "error" not in reply, reply
            acked.add(reply["ack"])

    def upload(self, track: str, index: int, samples: np.ndarray, start: float) -> None:
        response = httpx.put(
            f"{self.server.url}/ingest/audio/{self.session_id}/{track}/{index}",
            content=samples.astype("<i2").tobytes(),
            headers={
                "Authorization": f"Bearer {self.token}",
                "X-Audio-Sample-Rate": str(RATE),
                "X-Audio-Start": repr(start),
                "Content-Type": "application/octet-stream",
            },
            timeout=30,
        )
        assert response.status_code == 201, response.text

    def upload_tracks(self, user: np.ndarray, bot: np.ndarray, start: float, first_index: int = 0) -> None:
        per = int(CHUNK_SECONDS * RATE)
        for track, samples in (("user", user), ("bot", bot)):
            for i, at in enumerate(range(0, len(samples), per)):
                self.upload(track, first_index + i, samples[at : at + per], start + at / RATE)

    def close(self) -> None:
        self.socket.close()


def rtvi(type_: str, data=None) -> dict:
    return {"label": "rtvi-ai", "type": type_, **({"data": data} if data is not None else {})}


def conversation(t0: float):
    """Two turns, as sound (both tracks from t0) and as the bot's messages on the same clock.

    Returns (user samples, bot samples, messages, moments): moments are where each side spoke.
    """
    said = [
        ("Hello, I am calling about my order, it has not arrived.", "I am sorry to hear that. Let me look it up."),
        ("It was the blue kettle.", "Thank you. It ships tomorrow morning."),
    ]
    user, bot = [silence(0.4)], [silence(0.4)]
    now, messages, moments = 0.4, [(t0, rtvi("bot-ready", {"version": "2.2.0"}))], []
    for question, answer in said:
        asked, replied = speak(question), speak(answer, voice="en-gb")
        user_start, user_end = now, now + len(asked) / RATE
        bot_start = user_end + 0.9
        bot_end = bot_start + len(replied) / RATE
        user += [asked, silence(bot_end - user_end + 0.7)]
        bot += [silence(bot_start - user_start), replied, silence(0.7)]
        messages += [
            (t0 + user_start, rtvi("user-started-speaking")),
            (t0 + user_end + 0.1, rtvi("user-transcription", {"text": question, "final": True, "user_id": "u"})),
            (t0 + user_end + REPORTED_STOP_LATE, rtvi("user-stopped-speaking")),
            (t0 + bot_start - REPORTED_START_EARLY, rtvi("bot-started-speaking")),
            (t0 + bot_start + 0.05, rtvi("bot-tts-text", {"text": answer})),
            (t0 + bot_end, rtvi("bot-stopped-speaking")),
        ]
        moments.append({"user": (t0 + user_start, t0 + user_end), "bot": (t0 + bot_start, t0 + bot_end)})
        now = bot_end + 0.7
    user, bot = np.concatenate(user), np.concatenate(bot)
    length = min(len(user), len(bot))
    return user[:length], bot[:length], messages, moments


def wait_ended(server, organization: str, session_id: str) -> None:
    key = server.secrets[organization][1]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        answer = httpx.get(f"{server.url}/api/sessions/{session_id}/", headers={"Authorization": f"Bearer {key}"})
        if answer.status_code == 200 and answer.json().get("status") == "ended":
            return
        time.sleep(0.1)
    raise AssertionError(f"{session_id} did not end")


@pytest.fixture(scope="module")
def ended_call(server):
    """A two-turn call, recorded, over."""
    session_id = f"audio-{RUN}"
    t0 = time.time() - 30
    user, bot, messages, moments = conversation(t0)
    caller = Bot(server, LOUD, session_id)
    caller.send(messages)
    caller.upload_tracks(user, bot, t0)
    caller.close()
    wait_ended(server, LOUD, session_id)
    return session_id, t0, moments


@pytest.fixture(scope="module")
def hushed_call(server):
    """A short recorded call of the organization whose recordings only admins may hear."""
    session_id = f"hushed-{RUN}"
    t0 = time.time() - 10
    bot = Bot(server, HUSHED, session_id)
    bot.send([(t0, rtvi("bot-ready", {"version": "2.2.0"}))])
    spoken = np.concatenate([silence(0.3), speak("Good morning."), silence(0.3)])
    bot.upload_tracks(spoken, np.zeros_like(spoken), t0)
    bot.close()
    return session_id


@pytest.fixture(scope="module")
def silent_call(server):
    """A call whose bot recorded nothing."""
    session_id = f"silent-{RUN}"
    bot = Bot(server, LOUD, session_id)
    bot.send([(time.time(), rtvi("bot-ready", {"version": "2.2.0"}))])
    bot.close()
    return session_id


def signed_in(browser, server, username: str, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 844 if width < 600 else 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    log_in(page, server, username, PASSWORD)
    page.wait_for_url(f"{server.url}/")
    return context, page


def open_session(page, server, session_id: str, requests: list | None = None):
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{server.url}/sessions/{session_id}/")
    page.wait_for_function("() => window.rtviSession && window.rtviSession.model !== null")


def player_ready(page):
    """The figures are in, the peaks drawn and the source's metadata loaded."""
    page.wait_for_function(
        "() => window.rtviAudio.state.peaks && document.getElementById('audio').readyState >= 1"
        " && !window.rtviAudio.state.pending"
    )
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


# What the waveform canvas shows: for each track's row, how many device pixels are in the track's colour,
# in all and in the columns of each span of time ([from, to], epoch seconds).
WAVE_PIXELS = """(spans) => {
    const wave = document.getElementById('audio-wave');
    const g = window.rtviAudio.layout;
    const css = getComputedStyle(document.documentElement);
    const probe = document.createElement('canvas').getContext('2d');
    const rgb = (name) => { probe.fillStyle = css.getPropertyValue(name).trim(); probe.fillRect(0, 0, 1, 1);
        return [...probe.getImageData(0, 0, 1, 1).data].slice(0, 3); };
    const { data, width } = wave.getContext('2d').getImageData(0, 0, wave.width, wave.height);
    const like = (i, c) => data[i + 3] > 200 && Math.abs(data[i] - c[0]) < 12 && Math.abs(data[i + 1] - c[1]) < 12
        && Math.abs(data[i + 2] - c[2]) < 12;
    const row = (track, name, x0, x1) => {
        const top = Math.round((g.top + track * g.row) * g.ratio), bottom = Math.round((g.top + (track + 1) * g.row) * g.ratio);
        let n = 0;
        for (let y = top; y < bottom; y++) for (let x = x0; x < x1; x++) if (like((y * width + x) * 4, rgb(name))) n++;
        return n;
    };
    const left = Math.round(g.left * g.ratio), right = Math.round((g.left + g.plot) * g.ratio);
    const column = (at) => Math.round((g.left + ((at - g.origin) / g.duration) * g.plot) * g.ratio);
    return {
        caller: row(0, '--user', left, right), bot: row(1, '--bot', left, right),
        at: spans.map(([a, b]) => [row(0, '--user', column(a), column(b) + 1), row(1, '--bot', column(a), column(b) + 1)]),
    };
}"""


def test_a_transcript_line_plays_from_its_moment_and_the_cursor_follows(browser, server, ended_call):
    session_id, t0, moments = ended_call
    context, page = signed_in(browser, server, OPERATOR)
    requests: list[str] = []
    try:
        open_session(page, server, session_id, requests)
        player_ready(page)
        answer = page.evaluate("() => window.rtviAudio.state.answer")
        assert answer["recorded"] and answer["listen"] and not answer["live"]
        origin = answer["origin"]
        assert origin == pytest.approx(t0, abs=1e-3)

        # The figures: the audio's voice to voice beside what the bot reported, and their signed difference.
        fact = lambda key: page.locator(f"[data-fact='{key}']").inner_text()  # noqa: E731
        summary = answer["summary"]
        assert summary["matched_turns"] == 2 and summary["turns"] == 2, answer
        assert summary["difference_p50"] == pytest.approx(REPORTED_STOP_LATE + REPORTED_START_EARLY, abs=0.25)
        assert fact("voice-to-voice").startswith(duration(summary["voice_to_voice_p50"], "s") + "\np95 ")
        assert fact("reported") == duration(summary["reported_p50"], "s")
        assert fact("difference") == f"+{summary['difference_p50']:.2f} s"
        assert fact("barge-ins") == "0" and fact("over-caller") == "0"
        assert "silences over" in fact("dead-air")
        rows = page.locator("#audio-turns tr")
        assert rows.count() == 2
        cells = rows.nth(0).locator("th, td").all_inner_texts()
        turn = answer["comparison"][0]
        assert cells[0].endswith("1") and cells[3] == f"+{turn['difference_seconds']:.2f} s", cells
        download = page.locator("#audio-download")
        assert download.get_attribute("href") == f"/api/sessions/{session_id}/audio.wav?download=1"

        # Both waveforms are drawn, each where its side spoke: the caller's question, then the bot's reply.
        asked, replied = moments[0]["user"], moments[0]["bot"]
        pixels = page.evaluate(WAVE_PIXELS, [asked, replied])
        assert pixels["caller"] > 500 and pixels["bot"] > 500, pixels
        (caller_asks, bot_asks), (caller_replies, bot_replies) = pixels["at"]
        assert caller_asks > 200 and bot_asks == 0 and bot_replies > 200 and caller_replies == 0, pixels
        replied = replied[0] + 0.5  # where the waveform is clicked, below

        # A transcript line plays from its moment: the caller's second line from where the caller began saying
        # it (the line itself arrives with the speech-to-text's final, after the words), within 100 ms.
        state = page.evaluate("() => window.rtviSession.model.state")
        lines = [item for item in state["transcript"] if item["role"] == "user"]
        at = lines[1]["at"]
        assert at > moments[1]["user"][1]  # the line's time is after the words
        page.locator("#transcript li.user").nth(1).click()
        started = page.evaluate("() => [document.getElementById('audio').currentTime, performance.now()]")
        assert origin + started[0] == pytest.approx(moments[1]["user"][0], abs=0.1)
        page.wait_for_function("() => !document.getElementById('audio').paused")
        # The page's cursor follows the playhead: the bot's reply becomes the transcript's current line.
        cursor = page.locator("#cursor-text").inner_text()
        page.wait_for_function(
            "() => window.rtviSession.cursor.from === 'audio'"
            " && document.querySelectorAll('#transcript li.bot')[1].classList.contains('cursor')"
            " && document.querySelectorAll('#transcript li.cursor').length === 1",
            timeout=WAIT_MS,
        )
        assert page.locator("#cursor-text").inner_text() != cursor
        reply = page.locator("#transcript li.bot").nth(1)
        assert "cursor" in (reply.get_attribute("class") or "")
        playhead, cursor_at = page.evaluate(
            "() => [window.rtviAudio.position, window.rtviSession.cursor.at, document.getElementById('audio').pause()]"
        )[:2]
        assert cursor_at == pytest.approx(playhead, abs=0.4)
        assert playhead > at + 0.5  # it played on past the line
        # ...and the timeline's window and the message log with it.
        shown = page.evaluate("() => window.rtviSession.shown")
        assert shown["from"] <= cursor_at <= shown["to"]
        assert page.locator("#log tr.cursor").count() == 1
        page.screenshot(path=str(SCREENSHOTS / "session-audio.png"), full_page=True)

        # A click on the waveform seeks there, and takes the cursor with it (the first reply, the middle of it).
        layout = page.evaluate("() => window.rtviAudio.layout")
        page.locator("#audio-wave").scroll_into_view_if_needed()
        box = page.locator("#audio-wave").bounding_box()
        x = layout["left"] + (replied - origin) / layout["duration"] * layout["plot"]
        page.mouse.click(box["x"] + x, box["y"] + layout["top"] + layout["row"])
        # The click moves the cursor at once; the transcript marks it in the page's next animation frame.
        page.wait_for_function(
            f"() => Math.abs(window.rtviSession.cursor.at - {replied}) < 0.2"
            " && (document.querySelectorAll('#transcript li.bot')[0].getAttribute('class') || '').includes('cursor')"
        )
        position = page.evaluate("() => window.rtviAudio.position")
        assert position == pytest.approx(replied, abs=layout["duration"] / layout["plot"] + 0.01)
        assert page.evaluate("() => document.getElementById('audio').paused")  # it was paused: it stays so
        assert "cursor" in (page.locator("#transcript li.bot").nth(0).get_attribute("class") or "")
        # Play and pause.
        page.click("#audio-play")
        page.wait_for_function("() => !document.getElementById('audio').paused")
        assert page.locator("#audio-play").inner_text() == "❚❚ Pause"
        page.click("#audio-play")
        page.wait_for_function("() => document.getElementById('audio').paused")

        # Listening asked for the figures, the peaks and the WAV; the download is a file.
        assert any("/audio/peaks/?points=" in url for url in requests)
        assert any("/audio.wav?v=" in url for url in requests)
        download = page.request.get(f"{server.url}/api/sessions/{session_id}/audio.wav?download=1")
        assert download.status == 200 and download.headers["content-type"] == "audio/wav"
        assert download.headers["content-disposition"].startswith("attachment")
        assert not page.evaluate("() => window.rtviAudio.state.polling")  # an ended call: asked once
    finally:
        context.close()


def listen_entries(server, session_id: str) -> list[str]:
    """Who the audit log says listened to the call (its API, with the organization's key)."""
    key = server.secrets[LOUD][1]
    answer = httpx.get(
        f"{server.url}/api/audit/",
        params={"action": "audio_listen", "target": session_id},
        headers={"Authorization": f"Bearer {key}"},
    )
    return [entry["actor"] for entry in answer.json()["entries"]]


def test_the_audit_log_says_listened_when_the_call_played_not_when_the_page_opened(browser, server, ended_call):
    session_id = ended_call[0]
    context, page = signed_in(browser, server, LISTENER)
    requests: list[str] = []
    try:
        open_session(page, server, session_id, requests)
        player_ready(page)  # the WAV's header is fetched (preload="metadata"): not listening
        assert any(".wav" in url for url in requests), requests
        page.wait_for_load_state("networkidle")
        assert LISTENER not in listen_entries(server, session_id)

        with page.expect_response(lambda response: response.url.endswith("/audio/played/")) as told:
            page.click("#audio-play")
        assert told.value.json() == {"logged": True}
        assert listen_entries(server, session_id).count(LISTENER) == 1
        page.click("#audio-play")  # pause, seek, play again: the same listen
        page.wait_for_function("() => document.getElementById('audio').paused")
        page.locator("#audio-wave").press("Home")
        page.click("#audio-play")
        page.wait_for_function("() => !document.getElementById('audio').paused")
        page.reload()  # another page view within the hour: the same entry
        page.wait_for_function("() => window.rtviSession && window.rtviSession.model !== null")
        player_ready(page)
        with page.expect_response(lambda response: response.url.endswith("/audio/played/")) as told_again:
            page.click("#audio-play")
        assert told_again.value.json() == {"logged": False}
        assert listen_entries(server, session_id).count(LISTENER) == 1
        assert sum(url.endswith("/audio/played/") for url in requests) == 2  # one a page view: its first play
    finally:
        context.close()


def test_a_viewer_gets_no_player_and_asks_for_no_audio(browser, server, ended_call):
    session_id = ended_call[0]
    context, page = signed_in(browser, server, VIEWER)
    requests: list[str] = []
    try:
        page.on("request", lambda request: requests.append(request.url))
        page.goto(f"{server.url}/sessions/{session_id}/")
        page.wait_for_load_state("networkidle")
        assert page.locator("audio").count() == 0 and page.locator("#audio-wave").count() == 0
        assert not [url for url in requests if AUDIO_API.search(url)], requests
        # Nor may a viewer fetch it.
        assert page.request.get(f"{server.url}/api/sessions/{session_id}/audio.wav").status == 403
    finally:
        context.close()


def test_an_operator_where_admins_alone_listen_gets_the_figures_and_why_not_the_sound(browser, server, hushed_call):
    context, page = signed_in(browser, server, HUSHED_OPERATOR)
    requests: list[str] = []
    try:
        open_session(page, server, hushed_call, requests)
        page.wait_for_selector("#audio-figures:not([hidden])")
        assert page.locator("#audio-listen").inner_text() == "Listening needs the admin role."
        assert page.locator("audio").count() == 0 and page.locator("#audio-download").count() == 0
        assert page.locator("[data-fact='voice-to-voice']").inner_text() == "—"  # no reply in this call
        page.wait_for_load_state("networkidle")
        asked = {url for url in requests if AUDIO_API.search(url)}
        assert asked == {f"{server.url}/api/sessions/{hushed_call}/audio/"}, asked
    finally:
        context.close()


def test_a_call_without_a_recording_says_why_in_one_line(browser, server, silent_call):
    context, page = signed_in(browser, server, OPERATOR)
    requests: list[str] = []
    try:
        open_session(page, server, silent_call, requests)
        page.wait_for_function("() => window.rtviAudio.state.answer")
        status = page.locator("#audio-status")
        assert status.inner_text() == (
            "No recording: the bot sent no audio (it records with RTVI_DASHBOARD_RECORD_AUDIO=1)."
        )
        assert "muted" in status.get_attribute("class")
        assert page.locator("#audio-player").is_hidden() and page.locator("#audio-figures").is_hidden()
        assert page.locator("#audio-listen").is_hidden()
        assert {url for url in requests if AUDIO_API.search(url)} == {f"{server.url}/api/sessions/{silent_call}/audio/"}

        # The player's own words, as its module has them.
        words = page.evaluate(
            """async () => {
                const m = await import('/static/js/audio_player.js');
                return [m.mediaClock(0), m.mediaClock(4.29), m.mediaClock(3725.5), m.signedSeconds(0.244),
                    m.signedSeconds(-0.306), m.signedSeconds(0.001), m.signedSeconds(null), m.bytesText(1_300_000),
                    [...m.binPeaks([0, 10, 200, 30], {start: 100, step: 1}, {from: 100, to: 104}, 2)],
                    [...m.binPeaks([50, 60], {start: 101, step: 1}, {from: 100, to: 104}, 4)]];
            }"""
        )
        assert words == [
            "0:00.0",
            "0:04.2",
            "1:02:05.5",
            "+0.24 s",
            "−0.31 s",
            "±0.00 s",
            "—",
            "1.3 MB",
            [10, 200],
            [0, 50, 60, 0],
        ]
    finally:
        context.close()


def test_the_audio_card_fits_390_px(browser, server, ended_call):
    session_id = ended_call[0]
    context, page = signed_in(browser, server, OPERATOR, width=390)
    try:
        open_session(page, server, session_id)
        player_ready(page)
        page.wait_for_selector("#transcript li")
        wide = overflow(page, 390)
        assert wide["scrollWidth"] <= 390, wide
        pixels = page.evaluate(WAVE_PIXELS, [])
        assert pixels["caller"] > 100 and pixels["bot"] > 100, pixels
        assert page.locator("#audio-wave").bounding_box()["width"] <= 390
        page.locator("#audio-card").screenshot(path=str(SCREENSHOTS / "session-audio-390.png"))
    finally:
        context.close()


def test_a_live_calls_recording_grows_on_the_page_and_the_polling_stops_when_it_ends(browser, server):
    session_id = f"audio-live-{RUN}"
    t0 = time.time() - 2
    bot = Bot(server, LOUD, session_id)
    closed = False
    context, page = signed_in(browser, server, OPERATOR)
    try:
        bot.send([(t0, rtvi("bot-ready", {"version": "2.2.0"})), (t0 + 0.5, rtvi("user-started-speaking"))])
        first = np.concatenate([silence(0.5), speak("Hello, is anybody there?")])
        first = np.concatenate([first, silence(CHUNK_SECONDS - len(first) / RATE)])  # one chunk of each track
        bot.upload_tracks(first, np.zeros_like(first), t0)
        open_session(page, server, session_id)
        player_ready(page)
        assert page.evaluate("() => window.rtviAudio.state.answer.live")
        assert page.evaluate("() => document.getElementById('audio').duration") == pytest.approx(
            CHUNK_SECONDS, abs=0.01
        )
        assert page.locator("#audio-size").inner_text().endswith("· live")
        version = page.evaluate("() => window.rtviAudio.state.source.version")

        # Paused a second in, the recording grows by a chunk: the figures, the peaks and the source follow, the
        # playhead kept.
        page.evaluate("() => { document.getElementById('audio').currentTime = 1.0; }")
        more = np.concatenate([speak("Can you hear me?"), silence(1.0)])
        more = np.concatenate([more, silence(CHUNK_SECONDS - len(more) / RATE)])
        bot.upload_tracks(more, np.zeros_like(more), t0 + CHUNK_SECONDS, first_index=1)
        page.wait_for_function(
            f"() => window.rtviAudio.state.answer.duration > {CHUNK_SECONDS * 2 - 0.01}", timeout=12_000
        )
        page.wait_for_function(
            f"() => document.getElementById('audio').duration > {CHUNK_SECONDS * 2 - 0.01}"
            " && !window.rtviAudio.state.pending"
        )
        assert page.evaluate("() => window.rtviAudio.state.source.version") != version
        assert page.evaluate("() => document.getElementById('audio').currentTime") == pytest.approx(1.0, abs=0.05)
        page.wait_for_function(
            f"() => window.rtviAudio.state.peaks.points * window.rtviAudio.state.peaks.seconds_per_point"
            f" > {CHUNK_SECONDS * 2 - 0.05}"
        )
        pixels = page.evaluate(WAVE_PIXELS, [[t0 + CHUNK_SECONDS, t0 + CHUNK_SECONDS + 1.0]])
        assert pixels["at"][0][0] > 0, pixels  # the second chunk's speech is drawn

        # Playing, a third chunk comes: the player plays on to the old source's end (a poll comes before it gets
        # there; the sound is not cut for it), then on into the new part.
        page.evaluate("() => { const a = document.getElementById('audio'); a.currentTime = 0.5; a.play(); }")
        bot.upload_tracks(more, np.zeros_like(more), t0 + 2 * CHUNK_SECONDS, first_index=2)
        page.wait_for_function(
            f"() => window.rtviAudio.state.answer.duration > {CHUNK_SECONDS * 3 - 0.01}", timeout=12_000
        )
        playing = page.evaluate("() => { const a = document.getElementById('audio'); return [a.paused, a.duration]; }")
        assert playing == [False, pytest.approx(CHUNK_SECONDS * 2, abs=0.01)]
        # The call ends meanwhile.
        bot.close()
        closed = True
        page.wait_for_function(
            f"() => !document.getElementById('audio').paused && document.getElementById('audio').duration > {CHUNK_SECONDS * 3 - 0.01}"
            f" && window.rtviAudio.position > {t0 + CHUNK_SECONDS * 2 + 0.3}",
            timeout=12_000,
        )
        page.evaluate("() => document.getElementById('audio').pause()")

        # The page stops asking once the call ended (after a last look).
        page.wait_for_function("() => document.getElementById('status').textContent.startsWith('ended')")
        page.wait_for_function("() => !window.rtviAudio.state.polling", timeout=20_000)
        assert not page.locator("#audio-size").inner_text().endswith("live")
    finally:
        if not closed:
            bot.close()
        context.close()
