"""The CI step, as a team's pipeline runs it: the bot package's `rtvi-dashboard-eval` (a subprocess, the installed
console script) against the real server (daphne), uploading results.jsonl files and asking the gate, whose exit
code stops a promotion. tests/evals/e2e makes those files with the real `pipecat eval`."""

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.evals.test_eval_runs import jsonl, record

pytestmark = pytest.mark.timeout(180)
RUN = uuid.uuid4().hex[:6]
CLI = shutil.which("rtvi-dashboard-eval", path=str(Path(sys.executable).parent))

SETUP = """
from dashboard.models import ApiKey, Organization
from tests.session_samples import make_session
org = Organization.objects.create(name={org!r})
make_session(org, "call-7", agent_key="support", agent_name="Support line", status="ended")
record, secret = ApiKey.issue(org, "ci")
record.scopes = {scopes!r}
record.save()
print("SECRET=" + secret)
"""


def issue(server, scopes: str, org: str) -> str:
    out = server.manage("shell", "-c", SETUP.format(org=org, scopes=scopes))
    return next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("SECRET="))


@pytest.fixture(scope="module")
def server():
    from tests.server import DaphneServer

    running = DaphneServer().start()
    try:
        yield running
    finally:
        running.stop()


def cli(server, key: str, *args: str) -> subprocess.CompletedProcess:
    assert CLI, "the bot package's console script is installed with it (make test installs ./sdk)"
    env = {"RTVI_DASHBOARD_URL": server.url.replace("http://", "ws://"), "RTVI_DASHBOARD_API_KEY": key, "PATH": ""}
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=60)


def results_file(tmp_path, name: str, passes: int, runs: int) -> str:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(jsonl(record("suite/refund", n, passed=n <= passes) for n in range(1, runs + 1)))
    return str(path)


def test_a_ci_step_uploads_two_deployments_and_the_gate_stops_the_worse_one(server, tmp_path):
    key = issue(server, "read,write", f"CI-{RUN}")
    for deployment, passes in (("v1", 10), ("v2-good", 10), ("v2-bad", 3)):
        done = cli(
            server,
            key,
            "upload",
            results_file(tmp_path, deployment, passes, 10),
            "--agent",
            "support",
            "--deployment",
            deployment,
            "--run",
            f"ci-{deployment}",
        )
        assert done.returncode == 0, done.stderr
        assert f"Uploaded 10 results ({passes} passed) of support at {deployment}" in done.stdout
    good = cli(server, key, "gate", "--agent", "support", "--candidate", "v2-good", "--baseline", "v1")
    assert good.returncode == 0 and "v2-good against v1: pass" in good.stdout, good.stdout + good.stderr
    bad = cli(server, key, "gate", "--agent", "support", "--candidate", "v2-bad", "--baseline", "v1")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "v2-bad against v1: worse" in bad.stdout and "suite/refund passes 3 of 10 runs on v2-bad" in bad.stdout
    unknown = cli(server, key, "gate", "--agent", "support", "--candidate", "v3", "--baseline", "v1")
    assert unknown.returncode == 2 and "no eval results uploaded for v3" in unknown.stdout
    allowed = cli(
        server, key, "gate", "--agent", "support", "--candidate", "v3", "--baseline", "v1", "--allow-insufficient"
    )
    assert allowed.returncode == 0


def test_the_command_says_what_went_wrong_and_never_passes_a_gate_it_could_not_ask(server, tmp_path):
    key = issue(server, "read", f"CI-read-{RUN}")
    refused = cli(server, key, "upload", results_file(tmp_path, "v1", 1, 1), "--agent", "support", "--deployment", "v1")
    assert refused.returncode == 3 and "Not uploaded (403)" in refused.stderr and "needs 'write'" in refused.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record()) + "\nnot json\n")
    writer = issue(server, "read,write", f"CI-write-{RUN}")
    wrong = cli(server, writer, "upload", str(bad), "--agent", "support", "--deployment", "v1")
    assert wrong.returncode == 3 and "line 2: not JSON" in wrong.stderr
    revoked = cli(server, "pk_not-a-key", "gate", "--agent", "support", "--candidate", "v2")
    assert revoked.returncode == 3 and "(401)" in revoked.stderr
    env_less = subprocess.run(
        [CLI, "gate", "--agent", "a", "--candidate", "b"], capture_output=True, text=True, env={"PATH": ""}, timeout=30
    )
    assert env_less.returncode == 3 and "API key" in env_less.stderr
    down = subprocess.run(
        [CLI, "--url", "http://127.0.0.1:9", "--key", "k", "gate", "--agent", "a", "--candidate", "b"],
        capture_output=True,
        text=True,
        env={"PATH": ""},
        timeout=30,
    )
    assert down.returncode == 3 and "could not reach" in down.stderr
