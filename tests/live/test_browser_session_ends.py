"""How a session ended, as an operator sees it in Debian's Chromium against the real server.

Bots on the public ingest socket end their sessions each their own way: a clean 1000 close
(finished), a dropped connection (vanished, after the grace), a fatal error, a client that hung up.
The list and the session page say each in words, the failures in red and the others not; a page
watching a call whose bot closes with 1000 shows it ended at once, never "bot away".
"""

import json
import time
import uuid
from socket import SHUT_RDWR

import pytest
import websockets.sync.client as ws

from tests.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WAIT_MS = 15_000
ORG = "Demo Voice Co"  # seed_demo's organization


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    server = DaphneServer(env={"SESSION_END_GRACE": "1", "SESSION_SWEEP_INTERVAL": "0.3"}).start()
    try:
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        server.token = server.manage("create_ingest_token", "--org", ORG).splitlines()[-1]
        yield server, username, password
    finally:
        server.stop()


def rtvi(type_, data=None, **envelope):
    return {"label": "rtvi-ai", "type": type_, **envelope, **({"data": data} if data is not None else {})}


def bot(server, session_id, messages):
    """A bot that sends `messages` (direction, message) and waits for every ack; returns its open socket."""
    socket = ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {server.token}"}
    )
    for seq, (direction, message) in enumerate(messages, 1):
        socket.send(json.dumps({"seq": seq, "direction": direction, "sent_at": time.time(), "message": message}))
    acked = set()
    while len(acked) < len(messages):
        reply = json.loads(socket.recv(timeout=10))
        assert "error" not in reply, reply
        acked.add(reply["ack"])
    return socket


GREETING = [
    ("to-client", rtvi("bot-ready", {"version": "2.1.0"})),
    ("to-client", rtvi("user-transcription", {"text": "Is my order on its way?", "final": True, "user_id": "u"})),
    ("to-client", rtvi("bot-llm-text", {"text": "It ships today."})),
]


def red(page, selector) -> bool:
    """Whether the element is drawn in the page's error colour (--err), as the CSS decides."""
    return page.eval_on_selector(
        selector,
        "e => getComputedStyle(e).color === (() => { const p = document.createElement('span');"
        " p.style.color = getComputedStyle(document.documentElement).getPropertyValue('--err');"
        " document.body.append(p); const c = getComputedStyle(p).color; p.remove(); return c; })()",
    )


def test_each_end_reads_in_words_and_the_failures_are_red(server, page):
    server, username, password = server
    tag = uuid.uuid4().hex[:6]
    finished, vanished, fatal, hung_up = (f"{name}-{tag}" for name in ("finished", "vanished", "fatal", "hungup"))
    bot(server, finished, GREETING).close()  # 1000: the pipeline ended
    socket = bot(server, vanished, GREETING)
    socket.socket.shutdown(SHUT_RDWR)  # the process died: no close frame
    socket.socket.close()
    bot(server, fatal, [*GREETING, ("to-client", rtvi("error", {"message": "LLM quota exceeded", "fatal": True}))])
    bot(server, hung_up, [*GREETING, ("from-client", rtvi("disconnect-bot", id="bye"))]).close()

    log_in(page, server, username, password)
    page.goto(f"{server.url}/sessions/?status=ended")
    pills = {
        name: page.locator(f"#history tr[data-session='{session_id}'] td:nth-child(2) .pill")
        for name, session_id in (("finished", finished), ("vanished", vanished), ("fatal", fatal), ("hung", hung_up))
    }
    deadline = time.monotonic() + 10
    while pills["vanished"].count() == 0:  # it ends after the grace (1 s) and a sweep
        assert time.monotonic() < deadline, "the vanished bot's session never ended"
        time.sleep(0.3)
        page.reload()
    texts = {name: pill.inner_text(timeout=WAIT_MS) for name, pill in pills.items()}
    assert texts == {
        "finished": "ended (bot finished)",
        "vanished": "ended (bot vanished)",
        "fatal": "ended (fatal error)",
        "hung": "ended (client hung up)",
    }
    colours = {name: red(page, f"#history tr[data-session='{sid}'] td:nth-child(2) .pill") for name, sid in
               (("finished", finished), ("vanished", vanished), ("fatal", fatal), ("hung", hung_up))}  # fmt: skip
    assert colours == {"finished": False, "vanished": True, "fatal": True, "hung": False}

    page.goto(f"{server.url}/sessions/{vanished}/")
    page.wait_for_function("document.querySelector('#status').textContent === 'ended (bot vanished)'", timeout=WAIT_MS)
    assert red(page, "#status") and red(page, "#fact-status")
    page.goto(f"{server.url}/sessions/{finished}/")
    page.wait_for_function("document.querySelector('#status').textContent === 'ended (bot finished)'", timeout=WAIT_MS)
    assert not red(page, "#status") and not red(page, "#fact-status")


def test_a_page_watching_a_call_sees_it_finish_at_once_never_away(server, page):
    server, username, password = server
    session_id = f"watched-{uuid.uuid4().hex[:6]}"
    socket = bot(server, session_id, GREETING)
    log_in(page, server, username, password)
    page.goto(f"{server.url}/sessions/{session_id}/")
    page.wait_for_function("document.querySelector('#status').textContent === 'live'", timeout=WAIT_MS)
    page.evaluate(
        "window.seen = []; new MutationObserver(() => window.seen.push(document.querySelector('#status').textContent))"
        ".observe(document.querySelector('#status'), {childList: true, characterData: true, subtree: true})"
    )
    closed = time.monotonic()
    socket.close()  # 1000
    page.wait_for_function("document.querySelector('#status').textContent === 'ended (bot finished)'", timeout=WAIT_MS)
    # Never "bot away" on the way (a dropped bot's session is away for the grace first); the time is only a
    # loose bound, for a loaded machine: the property is the path, not the speed (bench/storm.py measures that).
    assert not [text for text in page.evaluate("window.seen") if text.startswith("bot away")], page.evaluate(
        "window.seen"
    )
    assert time.monotonic() - closed < 5.0
