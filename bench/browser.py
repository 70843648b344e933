"""Session page figures in Debian's Chromium: opening a 10,000-message session, keeping up with 50 msg/s.

.venv/bin/python bench/browser.py [--stored 10000] [--rate 50] [--seconds 20]
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import websockets.sync.client as ws
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.relay import message
from tests.server import DaphneServer


def stream(server, token, session_id, count, rate=None):
    """Send `count` wrapped messages (in batches when no rate), waiting for every ack."""
    socket = ws.connect(
        f"{server.ws_url}/ws/ingest/{session_id}/", additional_headers={"Authorization": f"Bearer {token}"}
    )
    start = time.monotonic()
    if rate is None:
        for first in range(1, count + 1, 200):
            batch = [
                {"seq": s, "direction": "to-client", "sent_at": time.time(), "message": message(s)}
                for s in range(first, min(first + 200, count + 1))
            ]
            socket.send(json.dumps({"batch": batch}))
            for _ in batch:
                socket.recv(timeout=30)
    else:
        for seq in range(1, count + 1):
            delay = start + (seq - 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            socket.send(
                json.dumps({"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message(seq)})
            )
            socket.recv(timeout=30)
    return socket


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    with DaphneServer(env={"INGEST_RATE_LIMIT": "100000"}) as server:  # the backlog goes in at once
        lines = server.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        stream(server, token, "bench-stored", args.stored).close()

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{server.url}/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_selector("text=Is everything fine?")

            opens = []
            for _ in range(3):
                page.goto(f"{server.url}/sessions/bench-stored/")
                page.wait_for_function(
                    "() => window.rtviSession.model && Object.keys(window.rtviSession.charts).length === 3 && document.querySelectorAll('#log tr').length > 0 && document.querySelector('#transcript li')"
                )
                opens.append(page.evaluate("() => performance.now()"))
            print(f"machine: {platform.node()}, Python {platform.python_version()}, {browser.version}")
            print(
                f"open a session with {args.stored} stored messages until transcript, charts and log are drawn: "
                + ", ".join(f"{ms:.0f} ms" for ms in opens)
            )

            count = int(args.rate * args.seconds)
            page.goto(f"{server.url}/sessions/")
            first = stream(server, token, "bench-live", 1)  # the session exists, so its page can open
            page.goto(f"{server.url}/sessions/bench-live/")
            page.wait_for_function("() => window.rtviSession.model")
            page.evaluate("""() => { window.lags = []; setInterval(() => {
                const last = window.rtviSession.log.at(-1); if (last) window.lags.push(Date.now() / 1000 - last.sent_at); }, 100); }""")
            first.close()
            socket = ws.connect(
                f"{server.ws_url}/ws/ingest/bench-live/", additional_headers={"Authorization": f"Bearer {token}"}
            )
            start = time.monotonic()
            for seq in range(2, count + 2):
                delay = start + (seq - 2) / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                socket.send(
                    json.dumps({"seq": seq, "direction": "to-client", "sent_at": time.time(), "message": message(seq)})
                )
                socket.recv(timeout=30)
            sent_done = time.monotonic()
            page.wait_for_function(f"() => window.rtviSession.log.at(-1)?.seq === {count + 1}", timeout=60000)
            caught_up = time.monotonic() - sent_done
            # The page's model is the server's: every message folded in, none twice.
            stored = page.request.get(f"{server.url}/api/sessions/bench-live/").json()
            page.wait_for_function(
                "(v) => window.rtviSession.model.version === v", arg=stored["version"], timeout=10000
            )
            lags = sorted(page.evaluate("() => window.lags"))
            p50, p99 = lags[len(lags) // 2], lags[int(len(lags) * 0.99)]
            print(
                f"live at {args.rate:g} msg/s for {args.seconds:g} s ({count} messages): page caught up {caught_up * 1000:.0f} ms "
                f"after the last send; age of the newest message shown, sampled every 100 ms: p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms (includes up to 100 ms of sampling and the 50 ms write cadence)"
            )
            socket.close()
            browser.close()


if __name__ == "__main__":
    main()
