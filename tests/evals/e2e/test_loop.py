"""Issue 36 end to end, offline, as a team runs it: a bad call recorded in the dashboard becomes a scenario (the
operator's page), its suite downloads (the caller's own voice cut from the recording), `pipecat eval suite` runs it
in text and in audio against a local Pipecat bot (bot.py: a scripted LLM, espeak-ng, Silero VAD) that streams every
call into the dashboard through the bot package, tagged with its run and deployment; `rtvi-dashboard-eval upload`
sends each run's results.jsonl, and `rtvi-dashboard-eval gate` passes the good candidate and blocks the ones made
wrong or slow on purpose, saying why. Each result opens the call its attempt made.

Every step goes through what a team touches: the real server (daphne), its pages and API over HTTP, the CLI as a
subprocess, Pipecat's own harness. Only the call's first recording is seeded (its messages through the shell, as the
other browser tests seed; its audio through the ingest endpoint).
"""

import io
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.evals.e2e import harness
from tests.speech import need_espeak, silence, speak

pytestmark = pytest.mark.timeout(600)
RUN = uuid.uuid4().hex[:6]
PASSWORD = "loop-test-password-1"
CLI = shutil.which("rtvi-dashboard-eval", path=str(Path(sys.executable).parent))
SAID = "Where is my order 1234"

SETUP = """
from django.contrib.auth import get_user_model
from dashboard.models import ApiKey, Membership, Organization
from rtvi_monitor.live.models import IngestToken
from tests.session_samples import make_session
from tests.sockets import rtvi

org = Organization.objects.create(name={org!r}, record_audio=True)
user = get_user_model().objects.create_user({user!r}, password={password!r})
Membership.objects.create(user=user, organization=org, role="operator")
said = {said!r}
call = [
    ("from-client", rtvi("client-ready", {{"version": "2.1.0", "about": {{"library": "@pipecat-ai/client-js"}}}})),
    ("to-client", rtvi("bot-ready", {{"version": "2.1.0", "about": {{"name": "support"}}}}, id="r1")),
    ("to-client", rtvi("user-started-speaking")),
    ("to-client", rtvi("user-transcription", {{"text": said, "final": True, "timestamp": "t", "user_id": "u"}})),
    ("to-client", rtvi("bot-llm-started")),
    ("to-client", rtvi("user-stopped-speaking")),
    ("to-client", rtvi("llm-function-call-in-progress",
        {{"function_name": "lookup_order", "tool_call_id": "c1", "arguments": {{"order_id": "1234"}}}})),
    ("to-client", rtvi("llm-function-call-stopped",
        {{"function_name": "lookup_order", "tool_call_id": "c1", "result": {{"status": "shipped"}}}})),
    ("to-client", rtvi("bot-llm-text", {{"text": "Your order 1234 has shipped and arrives Friday."}})),
    ("to-client", rtvi("bot-tts-started")),
    ("to-client", rtvi("bot-started-speaking")),
    ("to-client", rtvi("bot-stopped-speaking")),
]
make_session(org, "bad-call", messages=call, agent_key="support", agent_name="Support line", status="ended",
             deployment_id="v1")
print("TOKEN=" + IngestToken.issue(org, "bots")[1])
key, secret = ApiKey.issue(org, "ci")
key.scopes = "read,write"
key.save()
print("KEY=" + secret)
"""


def value(out: str, name: str) -> str:
    return next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith(f"{name}="))


def signed_in(server, username: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=30)
    page = client.get("/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    client.post("/login/", data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf})
    return client


def form_token(page: httpx.Response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def cli(server, key: str, *args: str) -> subprocess.CompletedProcess:
    env = {"RTVI_DASHBOARD_URL": server.ws_url, "RTVI_DASHBOARD_API_KEY": key, "PATH": ""}
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(autouse=True)
def _tools():
    harness.need_pipecat_cli()
    need_espeak()


def test_from_a_bad_call_to_a_blocked_deploy(tmp_path):
    from tests.server import DaphneServer
    from tests.session_samples import T0

    operator = f"loop-{RUN}"
    with DaphneServer() as server:
        out = server.manage("shell", "-c", SETUP.format(org=f"Loop-{RUN}", user=operator, password=PASSWORD, said=SAID))
        token, key = value(out, "TOKEN"), value(out, "KEY")
        # The call's recording: the caller speaks from T0 + 1.5 s (user-started-speaking), through the ingest door.
        track = np.concatenate([silence(1.5), speak(SAID), silence(1.0)])
        put = httpx.put(
            f"{server.url}/ingest/audio/bad-call/user/0",
            content=track.astype("<i2").tobytes(),
            headers={"Authorization": f"Bearer {token}", "X-Audio-Sample-Rate": "16000", "X-Audio-Start": str(T0)},
        )
        assert put.status_code == 201, put.text

        # 1. The operator makes a test of the call: the draft has the caller's words and the bot's function call.
        browser = signed_in(server, operator)
        draft = browser.get("/sessions/bad-call/scenario/")
        assert draft.status_code == 200 and SAID in draft.text and "cut from the recording" in draft.text
        form = {
            "csrfmiddlewaretoken": form_token(draft),
            "name": "order-status",
            "note": "answered late",
            "include-1": "on",
            "calls-1": "on",
            "within-1": "6",
            "contains-1": "arrives Friday",
        }
        saved = browser.post("/sessions/bad-call/scenario/", data=form, follow_redirects=False)
        assert saved.status_code == 302, saved.text[:2000]
        download = browser.get("/evals/support/suite.zip")
        assert download.status_code == 200
        with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
            archive.extractall(tmp_path / "suite")
        folder = tmp_path / "suite" / "support-line"
        assert (folder / "order-status.yaml").is_file() and (folder / "audio" / "order-status" / "turn-1.wav").is_file()

        # 2. Each deployment's run: the suite against the bot, streamed into the dashboard, uploaded.
        deployments = {
            "v1": {},
            "v2-good": {},
            "v2-wrong": {"E2E_BOT_WRONG": "1"},
            "v2-slow": {"E2E_BOT_DELAY_MS": "7000"},
        }
        for deployment, knobs in deployments.items():
            label = f"ci-{deployment}"
            env = {
                "RTVI_DASHBOARD_URL": server.ws_url,
                "RTVI_DASHBOARD_TOKEN": token,
                "RTVI_DASHBOARD_AGENT_ID": "support",
                "RTVI_DASHBOARD_EVAL_RUN": label,
                "RTVI_DASHBOARD_DEPLOYMENT": deployment,
                **knobs,
            }
            for modality, repeat in (("text", 6), ("audio", 2)):
                run = harness.run_suite(
                    folder,
                    tmp_path / "runs" / deployment,
                    modality=modality,
                    repeat=repeat,
                    env=env,
                    name=f"{deployment}-{modality}",
                    label=deployment,
                )
                assert len(run.records) == repeat, run.explain()
                results = run.run_dir / "results.jsonl"
                done = cli(
                    server,
                    key,
                    "upload",
                    str(results),
                    "--agent",
                    "support",
                    "--deployment",
                    deployment,
                    "--run",
                    label,
                )
                assert done.returncode == 0, done.stdout + done.stderr
                assert f"{repeat} linked to their calls" in done.stdout, done.stdout  # every attempt opens its call

        # 3. The gate: the good candidate passes, the wrong one and the slow one are blocked with the reason.
        good = cli(server, key, "gate", "--agent", "support", "--candidate", "v2-good", "--baseline", "v1")
        assert good.returncode == 0, good.stdout + good.stderr
        wrong = cli(server, key, "gate", "--agent", "support", "--candidate", "v2-wrong", "--baseline", "v1")
        assert wrong.returncode == 1, wrong.stdout
        assert "order-status/text passes 0 of 6 runs on v2-wrong, 6 of 6 on v1" in wrong.stdout
        slow = cli(server, key, "gate", "--agent", "support", "--candidate", "v2-slow", "--baseline", "v1")
        assert slow.returncode == 1, slow.stdout
        assert "v2-slow against v1: worse" in slow.stdout

        # 4. A failed attempt opens its call: its transcript is the scenario's turn, streamed by the bot under test.
        page = browser.get("/evals/support/gate/", params={"candidate": "v2-wrong", "baseline": "v1"})
        linked = re.findall(r'href="/sessions/(eval-[0-9a-f]{32})/"', page.text)
        assert len(set(linked)) == 8
        call = httpx.get(f"{server.url}/api/sessions/{linked[0]}/", headers={"Authorization": f"Bearer {key}"}).json()
        assert call["deployment_id"] == "v2-wrong" and call["eval_run"] == "ci-v2-wrong"
        assert [t["text"] for t in call["transcript"] if t["role"] == "user"] == [SAID]
