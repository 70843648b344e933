"""A bot's seqs are its own stream's: nothing another frame, client or restart sends can shift them.

Every test runs the real server (daphne, over real sockets) on SQLite and on
PostgreSQL. The examples are the cases the issue reproduced on main; the
state machine at the end drives random interleavings of well-behaved
clients (reconnecting, restarting, resending) and a rogue connection
(garbage, bare messages, frames too big or too deep, conflicting resends)
through the real ingest path, and checks after each run that:

- every acknowledged (stream, seq) is stored once, with what was sent, and
  is the first thing stored under that pair;
- every acknowledged message of a well-behaved stream is in the state
  (its transcript line is there), whatever else arrived;
- the state the ingesting process holds (what a page's snapshot is made of)
  equals a fresh replay of what is stored;
- the dashboard's own seqs are 1, 2, 3... in the order stored.
"""

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from rtvi_monitor.core.redaction import luhn
from rtvi_monitor.sessions.events import replay
from tests.conftest import DATABASE_URL, reachable, skip_or_fail
from tests.rtvi_samples import CALLER_PSEUDONYM, as_stored
from tests.server import DaphneServer
from tests.sockets import rtvi, wrap

pytestmark = pytest.mark.timeout(600)

RUN = uuid.uuid4().hex[:8]
FRAME_LIMIT = 8192  # small, so that a frame over it is cheap to send
PASSWORD = "streams-test-password-1"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request):
    env = {
        "SESSION_END_GRACE": "30",
        "INGEST_FLUSH_INTERVAL": "0.01",
        "INGEST_MAX_FRAME_BYTES": str(FRAME_LIMIT),
        # Transcripts here end in digits ("line4"), which wait for a number's next piece that never comes:
        # a short wait, so that replies() hears them within its quiet spell
        "REDACTION_HOLD_SECONDS": "0.2",
    }
    if request.param == "postgresql":
        if not reachable("127.0.0.1", 5432):
            skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
        env["DATABASE_URL"] = os.getenv("TEST_DATABASE_URL", DATABASE_URL)
    org, user = f"streams-{request.param}-{RUN}", f"streams-{request.param}-{RUN}"
    with DaphneServer(env=env) as running:
        running.ingest_token = running.manage("create_ingest_token", "--create", "--org", org).splitlines()[-1]
        running.api_key = running.manage("create_api_key", "--create", "--org", org).splitlines()[-1]
        running.manage("shell", "-c", STAFF_SETUP.format(user=user, org=org, password=PASSWORD))
        running.cookie = session_cookie(running, user)
        yield running


STAFF_SETUP = """
from django.contrib.auth import get_user_model
from dashboard.models import Membership, Organization
user = get_user_model().objects.create_user("{user}", password="{password}", is_staff=True)
Membership.objects.create(user=user, organization=Organization.objects.get(name="{org}"))
"""


def session_cookie(server, user: str) -> str:
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = client.post("/login/", data={"username": user, "password": PASSWORD, "csrfmiddlewaretoken": csrf})
        assert response.status_code == 302
        return f"sessionid={client.cookies['sessionid']}"


def bot(server, session_id: str, stream: str | None = None, acks: str | None = None):
    query = "&".join(f"{k}={v}" for k, v in (("stream", stream), ("acks", acks)) if v)
    return ws_connect(
        f"{server.ws_url}/ws/ingest/{session_id}/" + (f"?{query}" if query else ""),
        additional_headers={"Authorization": f"Bearer {server.ingest_token}"},
        max_size=None,
        open_timeout=10,
    )


def api(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"}, timeout=30)


def stored(server, session_id: str) -> list[dict]:
    """Every stored message of the session in the dashboard's order, as the events API gives them."""
    events, after = [], 0
    with api(server) as client:
        while True:
            body = client.get(f"/api/sessions/{session_id}/events/", params={"after": after, "limit": 500}).json()
            events += body["events"]
            if body["next_after"] is None:
                return events
            after = body["next_after"]


def detail(server, session_id: str) -> dict:
    with api(server) as client:
        return client.get(f"/api/sessions/{session_id}/").json()


def live_state(server, session_id: str) -> dict:
    """The state a page opening now gets: the ingesting process's own, while a bot is connected."""
    with ws_connect(
        f"{server.ws_url}/ws/sessions/{session_id}/",
        additional_headers={"Cookie": server.cookie},
        origin=server.url,
        max_size=None,
    ) as page:
        text = ""
        while True:
            frame = json.loads(page.recv(timeout=30))
            if frame.get("type") == "part":
                text += frame["data"]
                if not frame["last"]:
                    continue
                frame = json.loads(text)
            if frame.get("type") == "snapshot":
                return frame["state"]


def said(text: str) -> dict:
    return rtvi("user-transcription", {"text": text, "user_id": "caller", "timestamp": "t", "final": True})


def replies(socket, wait: float = 0.5) -> list[dict]:
    """Replies until the socket is quiet for `wait` seconds."""
    got = []
    while True:
        try:
            got.append(json.loads(socket.recv(timeout=wait)))
        except TimeoutError:
            return got


def acked(answers: list[dict]) -> list[int]:
    seqs = []
    for answer in answers:
        if "ack" in answer:
            seqs.append(answer["ack"])
        for first, last in answer.get("acks", ()):
            seqs += range(first, last + 1)
    return sorted(seqs)


def transcript(body: dict) -> str:
    return " ".join(line["text"] for line in body["transcript"])


# --- the cases reproduced on main -----------------------------------------------------------


def test_a_frame_that_is_not_json_takes_no_number_a_bot_may_send(server):
    session_id = f"garbage-first-{RUN}"
    with bot(server, session_id) as socket:
        socket.send("this is not JSON")
        for seq in range(1, 5):
            socket.send(json.dumps(wrap(seq, said(f"line{seq}"), sent_at=time.time())))
        answers = replies(socket)
    assert acked(answers) == [1, 2, 3, 4]
    errors = [a for a in answers if "error" in a]
    assert len(errors) == 1 and "not JSON" in errors[0]["error"] and errors[0]["seq"] is None
    body = detail(server, session_id)
    assert body["event_count"] == 5 and body["invalid_count"] == 1
    assert transcript(body).split() == ["line1", "line2", "line3", "line4"]
    events = stored(server, session_id)
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e["bot_seq"] for e in events] == [None, 1, 2, 3, 4]


def test_a_bare_message_takes_no_number_a_bot_may_send(server):
    session_id = f"bare-first-{RUN}"
    with bot(server, session_id) as socket:
        socket.send(json.dumps(rtvi("bot-ready", {"version": "1.0.0"})))
        for seq in range(1, 4):
            socket.send(json.dumps(wrap(seq, said(f"word{seq}"), sent_at=time.time())))
        assert acked(replies(socket)) == [1, 2, 3]
    body = detail(server, session_id)
    assert body["invalid_count"] == 0 and "word1 word2 word3" in transcript(body)


def test_a_restarted_bot_continues_its_session_from_seq_1(server):
    """A new client of the same session (the bot process restarted) numbers from 1 again: all of it is kept."""
    session_id = f"restarted-{RUN}"
    with bot(server, session_id, stream="first-process", acks="ranges") as socket:
        for seq in range(1, 4):
            socket.send(json.dumps(wrap(seq, said(f"before{seq}"), sent_at=time.time())))
        assert acked(replies(socket)) == [1, 2, 3]
    with bot(server, session_id, stream="second-process", acks="ranges") as socket:
        for seq in range(1, 4):
            socket.send(json.dumps(wrap(seq, said(f"after{seq}"), sent_at=time.time())))
        answers = replies(socket)
    assert acked(answers) == [1, 2, 3] and not [a for a in answers if "error" in a]
    body = detail(server, session_id)
    assert body["invalid_count"] == 0 and body["event_count"] == 6
    text = transcript(body)
    assert all(f"before{n}" in text and f"after{n}" in text for n in (1, 2, 3))


def test_two_clients_streaming_one_session_at_once_are_both_kept(server):
    session_id = f"two-clients-{RUN}"
    with bot(server, session_id, stream="setup-hook") as one, bot(server, session_id, stream="processor") as two:
        for seq in range(1, 6):
            one.send(json.dumps(wrap(seq, said(f"one{seq}"), sent_at=time.time())))
            two.send(json.dumps(wrap(seq, said(f"two{seq}"), sent_at=time.time())))
        assert acked(replies(one)) == [1, 2, 3, 4, 5]
        assert acked(replies(two)) == [1, 2, 3, 4, 5]
    events = stored(server, session_id)
    assert len(events) == 10 and all(e["valid"] for e in events)
    assert {(e["stream"], e["bot_seq"]) for e in events} == {
        (s, n) for s in ("setup-hook", "processor") for n in range(1, 6)
    }


def test_a_bot_that_names_no_stream_is_deduplicated_across_reconnects_as_before(server):
    session_id = f"old-bot-{RUN}"
    frames = [json.dumps(wrap(seq, said(f"old{seq}"), sent_at=time.time())) for seq in range(1, 4)]
    with bot(server, session_id) as socket:
        for frame in frames:
            socket.send(frame)
        assert acked(replies(socket)) == [1, 2, 3]
    with bot(server, session_id) as socket:  # an old client resends what it is unsure of
        for frame in frames:
            socket.send(frame)
        assert acked(replies(socket)) == [1, 2, 3]
    events = stored(server, session_id)
    assert [(e["stream"], e["bot_seq"]) for e in events] == [("", 1), ("", 2), ("", 3)]


def test_a_resend_with_other_content_is_recorded_and_reported_and_shifts_nothing(server):
    session_id = f"conflict-{RUN}"
    with bot(server, session_id, stream="s") as socket:
        socket.send(json.dumps(wrap(1, said("kept"), sent_at=time.time())))
        socket.send(json.dumps(wrap(1, said("conflicting"), sent_at=time.time())))
        socket.send(json.dumps(wrap(2, said("next"), sent_at=time.time())))
        answers = replies(socket)
    assert acked(answers) == [1, 2]
    assert [a["seq"] for a in answers if "error" in a] == [1]
    events = stored(server, session_id)
    assert [(e["bot_seq"], e["valid"]) for e in events] == [(1, True), (1, False), (2, True)]
    text = transcript(detail(server, session_id))
    assert "kept" in text and "next" in text and "conflicting" not in text


def test_a_stream_id_no_url_should_carry_is_refused_with_a_reason(server):
    with bot(server, f"bad-stream-{RUN}", stream="a" * 65) as socket:
        reason = json.loads(socket.recv(timeout=5))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=5)
    assert reason["fatal"] is True and reason["error"].startswith("stream: use 1-64 characters")
    assert closed.value.rcvd.code == 4400


def test_a_frame_of_exactly_the_limit_is_taken_and_one_byte_more_is_not(server):
    session_id = f"exact-{RUN}"
    head = json.dumps(wrap(1, rtvi("server-message", {"pad": ""}), sent_at=time.time()))
    frame = head.replace('"pad": ""', '"pad": "' + "x" * (FRAME_LIMIT - len(head)) + '"')
    assert len(frame.encode()) == FRAME_LIMIT
    with bot(server, session_id) as socket:
        socket.send(frame)
        assert replies(socket) == [{"ack": 1}]
        socket.send(frame.replace('"x', '"xx', 1).replace('"seq": 1', '"seq": 2'))
        reason = json.loads(socket.recv(timeout=5))
    assert reason["fatal"] is True and f"over the limit of {FRAME_LIMIT}" in reason["error"]


# --- the properties ------------------------------------------------------------------------------


@dataclass
class Client:
    """A well-behaved bot client: numbers its messages, keeps them until acked, resends after reconnecting."""

    stream: str | None  # None: an old client that names no stream
    ranged: bool
    socket: object = None
    seq: int = 0
    unacked: dict[int, str] = field(default_factory=dict)  # seq -> frame
    acked: dict[int, dict] = field(default_factory=dict)  # seq -> message

    @property
    def key(self) -> str:
        return self.stream or ""


GARBAGE = [
    "not json at all",
    "",
    "[1, 2, 3]",
    '{"label": "rtvi-ai"}',
    '{"label":"rtvi-ai","type":"server-message","data":{"v": NaN}}',
    '{"label":"rtvi-ai","type":"server-message","data":' + "[" * 40 + "]" * 40 + "}",
    json.dumps({"seq": "seven", "message": rtvi("bot-ready")}),
    json.dumps({"seq": 0, "message": rtvi("bot-ready")}),
    json.dumps({"batch": 5}),
]


class IngestMachine(RuleBasedStateMachine):
    """One session, on a real server: well-behaved clients, and a rogue connection beside them."""

    server: DaphneServer = None  # set by the test

    def __init__(self):
        super().__init__()
        self.session_id = f"prop-{uuid.uuid4().hex[:12]}"
        self.words = 0
        self.clients: list[Client] = []
        self.retired: list[Client] = []  # clients whose process "died": what they had acked must stay
        self.rogue = None
        self.rogue_seq = 0
        self.rogue_sent: dict[int, str] = {}
        self.cards: set[str] = set()  # card numbers the rogue said: none may be stored

    # --- connections ---

    def _open(self, client: Client) -> None:
        client.socket = bot(self.server, self.session_id, client.stream, "ranges" if client.ranged else None)
        for frame in list(client.unacked.values()):  # what was not acknowledged, again
            self._send(client, frame)

    def _send(self, client: Client, frame: str) -> None:
        try:
            client.socket.send(frame)
        except ConnectionClosed:
            self._open(client)

    def _read(self, client: Client, wait: float = 0.0) -> None:
        if client.socket is None:
            return
        try:
            while True:
                answer = json.loads(client.socket.recv(timeout=wait))
                for seq in acked([answer]):
                    frame = client.unacked.pop(seq, None)
                    if frame is not None:
                        client.acked[seq] = json.loads(frame)["message"]
                assert "seq" not in answer or answer.get("retry") or answer["seq"] is None, (
                    f"a well-behaved client was told {answer}"
                )
                wait = 0.0
        except TimeoutError:
            pass
        except ConnectionClosed:
            client.socket = None

    @rule(stream=st.sampled_from([None, "named"]), ranged=st.booleans())
    @precondition(lambda self: len(self.clients) < 3)
    def start_a_client(self, stream, ranged):
        if stream is None and any(c.stream is None for c in self.clients + self.retired):
            stream = "named"  # one old-style client per session: two would share one number space by design
        client = Client(None if stream is None else f"{stream}-{uuid.uuid4().hex[:8]}", ranged)
        self.clients.append(client)
        self._open(client)

    @rule(data=st.data(), count=st.integers(1, 4), batched=st.booleans())
    @precondition(lambda self: self.clients)
    def send_messages(self, data, count, batched):
        client = data.draw(st.sampled_from(self.clients))
        if client.socket is None:
            self._open(client)
        frames = []
        for _ in range(count):
            self.words += 1
            client.seq += 1
            frame = json.dumps(wrap(client.seq, said(f"w{self.words}z"), sent_at=time.time()))
            client.unacked[client.seq] = frame
            frames.append(frame)
        if batched:
            self._send(client, '{"batch": [' + ", ".join(frames) + "]}")
        else:
            for frame in frames:
                self._send(client, frame)
        self._read(client)

    @rule(data=st.data())
    @precondition(lambda self: any(c.acked or c.unacked for c in self.clients))
    def resend_one(self, data):
        client = data.draw(st.sampled_from([c for c in self.clients if c.acked or c.unacked]))
        seq = data.draw(st.sampled_from(sorted({*client.acked, *client.unacked})))
        message = client.acked.get(seq)
        frame = client.unacked.get(seq) or json.dumps(wrap(seq, message, sent_at=time.time()))
        if client.socket is None:
            self._open(client)
        self._send(client, frame)
        self._read(client)

    @rule(data=st.data(), clean=st.booleans())
    @precondition(lambda self: any(c.socket for c in self.clients))
    def disconnect(self, data, clean):
        client = data.draw(st.sampled_from([c for c in self.clients if c.socket]))
        if clean:
            client.socket.close()
        else:
            client.socket.socket.close()  # the TCP connection drops: no close frame
        client.socket = None

    @rule(data=st.data())
    @precondition(lambda self: any(c.socket is None for c in self.clients))
    def reconnect(self, data):
        self._open(data.draw(st.sampled_from([c for c in self.clients if c.socket is None])))

    @rule(data=st.data())
    @precondition(lambda self: self.clients)
    def restart_a_client(self, data):
        """The bot process restarts: a new client, a new stream, seq 1 again; the old one's unacked are lost."""
        client = data.draw(st.sampled_from(self.clients))
        self._read(client, 0.2)
        if client.socket is not None:
            client.socket.close()
        client.socket, client.unacked = None, {}
        self.clients.remove(client)
        self.retired.append(client)
        replacement = Client(f"restarted-{uuid.uuid4().hex[:8]}", client.ranged)
        self.clients.append(replacement)
        self._open(replacement)

    # --- the rogue: garbage, bare messages, frames too big, conflicting resends ---

    def _rogue_send(self, frame: str) -> None:
        for _ in range(2):
            if self.rogue is None:
                self.rogue = bot(self.server, self.session_id, "rogue")
            try:
                self.rogue.send(frame)
                return
            except ConnectionClosed:
                self.rogue = None

    def _rogue_replies(self, wait: float = 0.0) -> list[dict]:
        """What the rogue was told (never an ack it did not earn); None once the server closed it."""
        got = []
        if self.rogue is None:
            return got
        try:
            while True:
                got.append(json.loads(self.rogue.recv(timeout=wait)))
                wait = 0.0
        except TimeoutError:
            pass
        except ConnectionClosed:
            self.rogue = None
        return got

    @rule(garbage=st.sampled_from(GARBAGE))
    def rogue_sends_garbage(self, garbage):
        self._rogue_send(garbage)

    @rule(n=st.integers(0, 1000))
    def rogue_sends_a_bare_message(self, n):
        self._rogue_send(json.dumps(rtvi("server-message", {"n": n})))

    @rule()
    def rogue_sends_a_frame_too_big(self):
        self._rogue_send(json.dumps(rtvi("server-message", {"blob": "x" * FRAME_LIMIT})))
        while self.rogue is not None:  # told why, then closed (4009): it connects again next time
            self._rogue_replies(5.0)

    @rule(data=st.data())
    def rogue_numbers_its_own(self, data):
        if self.rogue_sent and data.draw(st.booleans()):
            seq = data.draw(st.sampled_from(sorted(self.rogue_sent)))  # again: the same, or something else
            frame = data.draw(
                st.sampled_from([self.rogue_sent[seq], json.dumps(wrap(seq, rtvi("server-message", {"other": seq})))])
            )
        else:
            self.rogue_seq += 1
            seq, frame = self.rogue_seq, json.dumps(wrap(self.rogue_seq, rtvi("server-message", {"r": self.rogue_seq})))
            self.rogue_sent[seq] = frame
        self._rogue_send(frame)

    @rule(digits=st.lists(st.integers(0, 9), min_size=12, max_size=18), separator=st.sampled_from(["", " ", "-"]))
    def rogue_says_a_card_number(self, digits, separator):
        body = "".join(map(str, digits))
        number = next(body + d for d in "0123456789" if luhn(body + d))
        self.cards.add(number)
        written = separator.join(number[i : i + 4] for i in range(0, len(number), 4))
        self.rogue_seq += 1
        message = said(f"my card is {written}, mail ana@example.com")
        frame = json.dumps(wrap(self.rogue_seq, message, sent_at=time.time()))
        self.rogue_sent[self.rogue_seq] = frame
        self._rogue_send(frame)

    @invariant()
    def read_what_came(self):
        for client in self.clients:
            self._read(client)
        self._rogue_replies()

    # --- the end: everything acknowledged, then the checks ---

    def teardown(self):
        try:
            if self.clients or self.rogue is not None:
                self._settle()
                self._check()
        finally:
            for socket in [c.socket for c in self.clients] + [self.rogue]:
                if socket is not None:
                    socket.close()

    def _settle(self) -> None:
        deadline = time.monotonic() + 20
        for client in self.clients:
            while client.unacked:
                assert time.monotonic() < deadline, f"never acknowledged: {sorted(client.unacked)}"
                if client.socket is None:
                    self._open(client)
                self._read(client, 0.3)
        # The rogue's last frames are stored once one of its own, sent after them, is acknowledged.
        self.rogue_seq += 1
        sentinel = json.dumps(wrap(self.rogue_seq, rtvi("server-message", {"sentinel": True})))
        self._rogue_send(sentinel)
        while self.rogue_seq not in acked(self._rogue_replies(0.3)):
            assert time.monotonic() < deadline, "the rogue's sentinel was never acknowledged"
            if self.rogue is None:
                self._rogue_send(sentinel)

    def _check(self) -> None:
        events = stored(self.server, self.session_id)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "the dashboard's order has a gap"
        everything = re.sub(r"[ -]", "", json.dumps(events))
        assert not [number for number in self.cards if number in everything], "a card number was stored"
        assert "ana@example.com" not in everything
        firsts: dict[tuple[str, int], dict] = {}
        counts: dict[tuple[str, int, str], int] = {}
        for event in events:
            if event["bot_seq"] is not None:
                key = (event["stream"], event["bot_seq"])
                firsts.setdefault(key, event)
                content = json.dumps(as_stored(event["message"]), sort_keys=True)
                counts[(*key, content)] = counts.get((*key, content), 0) + 1
        words, pseudonyms = [], set()
        for client in self.clients + self.retired:
            for seq, message in client.acked.items():
                content = json.dumps(as_stored(message), sort_keys=True)
                kept = firsts[(client.key, seq)]["message"]
                assert as_stored(kept) == as_stored(message), f"({client.key!r}, {seq}) holds another"
                assert counts[(client.key, seq, content)] == 1, f"({client.key!r}, {seq}) stored twice"
                assert CALLER_PSEUDONYM.fullmatch(kept["data"]["user_id"]), "a caller's id was stored as sent"
                pseudonyms.add(kept["data"]["user_id"])
                words.append(message["data"]["text"])
        assert len(pseudonyms) <= 1, "one caller, several pseudonyms"
        live = live_state(self.server, self.session_id)
        fresh = json.loads(json.dumps(replay(events).to_dict()))
        assert live == fresh, "the live state is not a replay of what is stored"
        said_so = " ".join(line["text"] for line in live["transcript"])
        missing = [w for w in words if w not in said_so.split()]
        assert not missing, f"acknowledged but not in the transcript: {missing}"


def test_any_interleaving_keeps_every_acknowledged_message_once_and_the_state_a_replay(server):
    IngestMachine.server = server
    run_state_machine_as_test(
        IngestMachine,
        settings=settings(
            max_examples=int(os.getenv("STREAMS_EXAMPLES", "25")),
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=os.getenv("CI", "").lower() == "true",
            database=None,
        ),
    )
