"""Session pages opened while the bot is mid-reply show what a page opened afterwards shows, and what the server derived.

A realistic Pipecat session streams into the real server over the public
ingest socket, a message every 20-40 ms. Each time the bot is part-way
through a reply, a new page opens on the session: its snapshot is taken
mid-reply, while batches keep arriving. When everything is stored, one more
page opens; every page's transcript, read from the DOM, must equal that
page's and the server's (GET /api/sessions/<id>/), with no sentence doubled.
"""

import json
import random
import threading
import time
import uuid

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in
from tests.rtvi_samples import SCRIPT, pipecat_conversation_pairs

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

TURNS = 4
# Where pages open: (turn, sentence messages of its reply sent so far). A sentence
# message is a bot-output, bot-tts-text or bot-transcription while the bot speaks.
POINTS = [(0, 1), (1, 2), (2, 5), (3, 3)]
SENTENCE_MESSAGES = {"bot-output", "bot-tts-text", "bot-transcription"}
WAIT_MS = 60_000  # generous: two cores, other test runs beside this one

READ_TRANSCRIPT = """() => [...document.querySelectorAll('#transcript li[data-role]')].map(
    (li) => [li.dataset.role, li.querySelector('.text').textContent])"""


def mid_reply_points(pairs: list[tuple[str, dict]]) -> dict[int, tuple[int, int]]:
    """Index in `pairs` after which each point of POINTS is reached -> the point."""
    wanted, found = set(POINTS), {}
    turn, speaking, said = -1, False, 0
    for i, (_, message) in enumerate(pairs):
        kind = message["type"]
        if kind == "bot-started-speaking":
            turn, speaking, said = turn + 1, True, 0
        elif kind == "bot-stopped-speaking":
            speaking = False
        elif speaking and kind in SENTENCE_MESSAGES:
            said += 1
            if (turn, said) in wanted:
                found[i] = (turn, said)
    assert sorted(found.values()) == sorted(POINTS), "the script has fewer sentence messages than a point needs"
    return found


class Point:
    """One mid-reply moment: the stream says when it is stored; the test says when a page has its snapshot."""

    def __init__(self, turn: int, said: int):
        self.turn, self.said = turn, said
        self.reached = threading.Event()
        self.opened = threading.Event()
        self.snapshot: dict | None = None


class Stream(threading.Thread):
    """The bot: wrapped messages on the ingest socket, acks read on another thread.

    At a point it waits until the point's message is stored (acknowledged),
    says so, then goes on slowly; it holds the reply's bot-stopped-speaking
    until the point's page has its snapshot, so that the snapshot is mid-reply.
    """

    def __init__(self, server, token: str, session_id: str, pairs, points: dict[int, Point]):
        super().__init__(daemon=True)
        self.url = f"{server.ws_url}/ws/ingest/{session_id}/"
        self.token, self.pairs, self.points = token, pairs, points
        self.acked: set[int] = set()
        self.replies: list[dict] = []
        self.changed = threading.Condition()
        self.error: BaseException | None = None
        self.rng = random.Random(7)

    def run(self):
        try:
            self.stream()
        except BaseException as exc:  # re-raised by the test
            self.error = exc
            for point in self.points.values():
                point.reached.set()  # nobody waits forever

    def read(self, socket):
        for raw in socket:
            reply = json.loads(raw)
            with self.changed:
                self.replies.append(reply)
                if "ack" in reply:
                    self.acked.add(reply["ack"])
                self.changed.notify_all()

    def wait_acked(self, seqs: set[int], timeout: float = 30):
        with self.changed:
            if not self.changed.wait_for(lambda: seqs <= self.acked, timeout):
                raise AssertionError(f"not acknowledged in {timeout} s: {sorted(seqs - self.acked)[:10]}")

    def stream(self):
        with ws.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"}) as socket:
            reader = threading.Thread(target=self.read, args=(socket,), daemon=True)
            reader.start()
            pending: Point | None = None
            for i, (direction, message) in enumerate(self.pairs):
                seq = i + 1
                if pending is not None and message["type"] == "bot-stopped-speaking":
                    if not pending.opened.wait(WAIT_MS / 1000):
                        raise AssertionError(f"no page opened at turn {pending.turn} in time")
                frame = {"seq": seq, "direction": direction, "sent_at": time.time(), "message": message}
                socket.send(json.dumps(frame))
                if i in self.points:
                    self.wait_acked({seq})
                    pending = self.points[i]
                    pending.reached.set()
                if pending is not None and pending.opened.is_set():
                    pending = None
                time.sleep(0.15 if pending is not None else self.rng.uniform(0.02, 0.04))
            self.wait_acked(set(range(1, len(self.pairs) + 1)))
        errors = [r for r in self.replies if "error" in r]
        assert not errors, errors


def open_session(context, server, session_id: str, point: Point | None = None):
    """A new page on the session; with a point, its first snapshot is kept and the point marked opened."""
    page = context.new_page()
    parts: list[str] = []

    def on_frame(payload):
        if point is None or point.snapshot is not None:
            return
        frame = json.loads(payload)
        if frame.get("type") == "part":
            parts.append(frame["data"])
            if not frame["last"]:
                return
            frame = json.loads("".join(parts))
            parts.clear()
        if frame.get("type") == "snapshot":
            point.snapshot = frame
            point.opened.set()

    page.on(
        "websocket",
        lambda socket: socket.on("framereceived", on_frame) if f"/ws/sessions/{session_id}/" in socket.url else None,
    )
    page.goto(f"{server.url}/sessions/{session_id}/")
    page.wait_for_function("() => window.rtviSession.model !== null", timeout=WAIT_MS)
    return page


def settled_transcript(page, version: int) -> list[list[str]]:
    """The page's transcript once its model has `version` and the page has drawn it."""
    page.wait_for_function("(v) => window.rtviSession.model?.version === v", arg=version, timeout=WAIT_MS)
    # The page draws in the animation frame after a patch: two frames on, it has drawn this version.
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return page.evaluate(READ_TRANSCRIPT)


@pytest.mark.parametrize("word_timestamps", [False, True], ids=["sentence-tts", "word-timestamp-tts"])
def test_pages_opened_mid_reply_show_what_a_fresh_page_and_the_server_show(browser, demo_server, word_timestamps):
    server, username, password, _ = demo_server
    session_id = f"browser-midreply-{uuid.uuid4().hex[:6]}"
    token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
    pairs = pipecat_conversation_pairs(TURNS, word_timestamps=word_timestamps)
    points = {i: Point(*where) for i, where in mid_reply_points(pairs).items()}

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        log_in(context.new_page(), server, username, password)
        context.pages[0].wait_for_url(f"{server.url}/")
        stream = Stream(server, token, session_id, pairs, points)
        stream.start()
        pages = []
        for point in points.values():
            assert point.reached.wait(WAIT_MS / 1000), f"the stream never reached turn {point.turn}"
            if stream.error:
                raise stream.error
            pages.append(open_session(context, server, session_id, point))
            assert point.opened.wait(WAIT_MS / 1000)
        stream.join(WAIT_MS / 1000)
        assert not stream.is_alive(), "the stream did not finish"
        if stream.error:
            raise stream.error

        # Every snapshot was taken mid-reply: after the point's message, before the bot stopped speaking.
        for i, point in points.items():
            state = point.snapshot["state"]
            assert state["speaking"]["bot"] is True, (point.turn, point.said, state["speaking"])
            assert i + 1 <= state["version"] < len(pairs), (point.turn, point.said, state["version"])
            assert [t["role"] for t in state["transcript"]][-1] == "bot"

        # The bot closed its socket with 1000 (its pipeline over): the session ends at once, as finished; the end
        # is one more version of the state.
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            response = context.request.get(f"{server.url}/api/sessions/{session_id}/")
            assert response.ok, response.text()
            api = response.json()
            if api["status"] == "ended" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (api["status"], api["end_kind"]) == ("ended", "bot_finished")
        assert api["version"] == len(pairs) + 1
        expected = [[item["role"], item["text"]] for item in api["transcript"]]

        # The server's transcript is the script's, each sentence once.
        script = []
        for turn in range(TURNS):
            user, sentences = SCRIPT[turn % len(SCRIPT)]
            script += [["user", user], ["bot", " ".join(sentences)]]
        assert expected == script

        fresh = open_session(context, server, session_id)
        fresh_transcript = settled_transcript(fresh, api["version"])
        assert fresh_transcript == expected
        for point, page in zip(points.values(), pages, strict=True):
            shown = settled_transcript(page, api["version"])
            assert shown == fresh_transcript, f"the page opened at turn {point.turn}, sentence message {point.said}"
            # The model under it is the server's, item for item (final flags, interruptions, times).
            assert page.evaluate("() => window.rtviSession.model.state.transcript") == api["transcript"]
            for role, text in shown:
                if role == "bot":
                    for sentence in {s for _, sentences in SCRIPT for s in sentences}:
                        assert text.count(sentence) <= 1, f"doubled {sentence!r} in {text!r}"
            assert page.locator("#transcript li.partial").count() == 0
    finally:
        context.close()
