"""Take the README's screenshots from the demo: the dashboard seeded as `make run` seeds it, the demo bot
playing its scenarios into it over the public ingest socket for a few minutes.

.venv/bin/python docs/screenshots/take.py [--minutes 4] [--only session-control.png ...]

Needs Debian's Chromium (/usr/bin/chromium) and Playwright (requirements-dev.txt).
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.server import DaphneServer  # noqa: E402

HERE = Path(__file__).resolve().parent
# The screenshots of a part of a page, by the page's own.
PARTS = {
    "session.png": ("session-control.png",),
    "agent.png": ("agent-turns.png",),
    "session-detail-ended.png": ("session-turns.png", "session-transcript-playing.png", "session-audio.png"),
}


def first(api, **params) -> str:
    sessions = api.get("/api/sessions/", params={"limit": 50, **params}).json()["sessions"]
    if params.get("status") == "live":
        # The newest call that has had a turn: still going when the page opens.
        return next(s for s in sessions if s["turn_count"] >= 1 and s["bot"] == "connected")["id"]
    # The richest one: the most turns.
    return max(sessions, key=lambda s: (s["turn_count"], s["event_count"]))["id"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="retake only these screenshots")
    args = parser.parse_args()

    def wanted(*names: str) -> bool:
        return not args.only or any(name in args.only for name in names)

    with DaphneServer(env={"ALERT_EVALUATE_INTERVAL": "2"}) as server:
        username, password, key = server.seed_demo()
        bot = subprocess.Popen(
            [sys.executable, "manage.py", "demo_bot", "--url", server.ws_url, "--concurrent", "4", "--record-audio"],
            cwd=ROOT,
            env=server.env,
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(args.minutes * 60)
            api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})
            live = first(api, status="live")
            try:
                ended = first(api, status="ended", has_errors="true")  # one with something to diagnose
            except ValueError:
                ended = first(api, status="ended")
            agent = api.get(f"/api/sessions/{ended}/").json()["agent_id"]
            firing = api.get("/api/alerts/", params={"status": "firing"}).json()["alerts"]
            alert = f"/alerts/{firing[0]['id']}/" if firing else "/alerts/"
            if firing:  # an operator on call takes it: the alert's page then shows the workflow
                base = f"/api/alerts/{firing[0]['id']}"
                api.post(f"{base}/acknowledge/", json={})
                api.post(f"{base}/assign/", json={"user": username})
                note = "Looking at it: the TTS provider's status page shows degraded latency."
                api.post(f"{base}/notes/", json={"text": note})
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                for scheme, width, height, shots in (
                    (
                        "light",
                        1280,
                        900,
                        {
                            "home.png": "/",
                            "alerts.png": "/alerts/",
                            "sessions.png": "/sessions/",
                            "agents.png": "/agents/",
                            "agent.png": f"/agents/{agent}/",
                            "session.png": f"/sessions/{live}/",
                            "session-detail-ended.png": f"/sessions/{ended}/",
                            "settings-members.png": "/settings/members/",
                            "settings-keys.png": "/settings/keys/",
                            "settings-retention.png": "/settings/retention/",
                            "settings-recording.png": "/settings/recording/",
                            "settings-alert-rules.png": "/settings/alert-rules/",
                            "alert.png": alert,
                            "eval-draft.png": f"/sessions/{ended}/scenario/",
                        },
                    ),
                    ("dark", 1280, 900, {"session-dark.png": f"/sessions/{live}/"}),
                    (
                        "light",
                        390,
                        844,
                        {
                            "home-390.png": "/",
                            "session-detail-live-390.png": f"/sessions/{live}/",
                            "session-detail-ended-390.png": f"/sessions/{ended}/",
                            "alerts-390.png": "/alerts/",
                            "agents-390.png": "/agents/",
                        },
                    ),
                ):
                    context = browser.new_context(
                        viewport={"width": width, "height": height},
                        color_scheme=scheme,
                        timezone_id="Europe/Paris",
                        locale="en-GB",
                    )
                    page = context.new_page()
                    page.goto(f"{server.url}/login/")
                    page.fill("#id_username", username)
                    page.fill("#id_password", password)
                    page.click("button[type=submit]")
                    page.wait_for_load_state()
                    for name, path in shots.items():
                        if not wanted(name, *PARTS.get(name, ())):
                            continue
                        if path.startswith("/sessions/") and live in path:
                            # A live call picked minutes ago may have ended since (a slow machine): the newest now.
                            live_now = first(api, status="live")
                            path = path.replace(live, live_now)
                        page.goto(f"{server.url}{path}")
                        page.wait_for_timeout(4000)  # the sockets connect, charts and times are drawn
                        if wanted(name):
                            page.screenshot(path=str(HERE / name), full_page=scheme == "light")
                            print(name, path)
                        if name == "session.png" and wanted("session-control.png"):  # what an operator can do
                            page.locator("#control").screenshot(path=str(HERE / "session-control.png"))
                            print("session-control.png", path)
                        if name == "agent.png" and wanted("agent-turns.png"):
                            page.locator("#turn-figures").screenshot(path=str(HERE / "agent-turns.png"))
                            print("agent-turns.png", path)
                        if name == "session-detail-ended.png" and wanted("session-turns.png"):  # why turns went wrong
                            page.locator("#turns").screenshot(path=str(HERE / "session-turns.png"))
                            print("session-turns.png", path)
                        if name == "session-detail-ended.png" and wanted(
                            "session-transcript-playing.png", "session-audio.png"
                        ):  # the call's audio, with its transcript
                            page.locator("#audio-card").scroll_into_view_if_needed()
                            page.locator("#transcript li.user").nth(1).click()  # plays from the caller's words
                            page.wait_for_timeout(2500)
                            page.click("#audio-play")  # paused where the cursor has followed it
                            page.locator(".grid").screenshot(path=str(HERE / "session-transcript-playing.png"))
                            page.locator("#audio-card").screenshot(path=str(HERE / "session-audio.png"))
                            print("session-audio.png", path)
                    context.close()
                browser.close()
        finally:
            bot.terminate()
            bot.wait(10)


if __name__ == "__main__":
    main()
