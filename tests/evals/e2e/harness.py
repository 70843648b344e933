"""Run the dashboard's exported scenarios with the real `pipecat eval` CLI against the local bot (bot.py).

    folder = write_scenario(tmp_path / "agent", "order", turns, audio={1: "Where is my order 1234"})
    run = run_suite(folder, tmp_path / "runs", modality="text", env={"E2E_BOT_WRONG": "1"})
    run.records        # results.jsonl, parsed: one record per (scenario, attempt)
    run.link(record)   # what the bot that served that record printed: its dashboard session, body, log

How it runs (the CLI's own code: pipecat/cli/commands/eval.py and pipecat/evals/suite.py):

- `pipecat eval suite <manifest>` is the command that spawns bots and writes results.jsonl
  (`pipecat eval run` connects to a bot already running and writes no results.jsonl). The manifest
  (written here, beside the run's output) names bot.py once per scenario file, with the
  interpreter, a free port range (`base_port`; each run gets base_port + its index), and
  `runner_body: {data: {...}}`, which the suite writes to `<prefix>.body.json` and passes to
  the bot as `--runner-body`; Pipecat's runner hands it to the bot as `RunnerArguments.body`.
  The body carries the file's scenario name and the `user:` lines of its audio scenario, which
  bot.py's scripted STT speaks back for the clips.
- Modality: each exported file holds a scenario `text` and, with clips, `audio`; the suite runs
  every scenario of every file unless `-s text` / `-s audio` picks one (a scenario filter, either
  half of `<file>/<scenario>`).
- Repeats: `--repeat N` (or `repeat:` in the manifest) runs every (bot, scenario) N times, each a
  fresh bot, and exits 0 even when attempts fail (a repeated sweep measures a rate).
- Output: `<runs>/<name>/results.jsonl` (one JSON line per run) and `<runs>/<name>/logs/`: the bot's
  own output `<prefix>.log` (results.jsonl's `artifacts.log`), the harness's `<prefix>.eval.log`.

The CLI needs Pipecat's `cli` extra's typer and rich and the dev runner's fastapi and uvicorn
(requirements-pipecat.txt). It runs with E2E_PIPECAT_PYTHON, else this interpreter; the bots with the same.
"""

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BOT = Path(__file__).resolve().parent / "bot.py"
DASHBOARD_ENV = (
    "RTVI_DASHBOARD_URL",
    "RTVI_DASHBOARD_TOKEN",
    "RTVI_DASHBOARD_AGENT_ID",
    "RTVI_DASHBOARD_SESSION_ID",
    "RTVI_DASHBOARD_EVAL_RUN",
    "RTVI_DASHBOARD_EVAL_SCENARIO",
    "RTVI_DASHBOARD_DEPLOYMENT",
)
CLI_MODULES = ("typer", "rich", "fastapi", "uvicorn")
RUN_CLI = "import sys; from pipecat.cli.main import run; sys.argv[0] = 'pipecat'; sys.exit(run())"


def python() -> str:
    return os.environ.get("E2E_PIPECAT_PYTHON") or sys.executable


def missing_cli_modules() -> list[str]:
    """The modules `pipecat eval suite` and the dev runner need that the interpreter lacks."""
    code = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    out = subprocess.run([python(), "-c", code, *CLI_MODULES], capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def need_pipecat_cli():
    from tests.conftest import skip_or_fail

    try:
        import pipecat.evals.suite  # noqa: F401
    except ImportError:
        skip_or_fail("pipecat-ai is not installed (pip install -r requirements-pipecat.txt)")
    missing = missing_cli_modules()
    if missing:
        skip_or_fail(
            f"`pipecat eval` cannot run here: {', '.join(missing)} missing in {python()}"
            " (pip install -r requirements-pipecat.txt: pipecat-ai[runner,websocket] and the cli extra's typer, rich)"
        )


def cli_argv() -> list[str]:
    """The `pipecat` console script next to the interpreter, else the same entry point (pipecat.cli.main:run)."""
    script = Path(python()).parent / "pipecat"
    if script.exists():
        return [str(script)]
    return [python(), "-c", RUN_CLI]


# --- scenario folders ---------------------------------------------------------------------------------------


def turn(
    number: int,
    user: str,
    *,
    calls=None,
    within_ms: int | None = None,
    contains: str = "",
    excludes: str = "",
    latency_ms: float | None = None,
) -> dict:
    """A turn as rtvi_monitor.evals.scenario.draft makes it (and the draft page edits it)."""
    from rtvi_monitor.evals.scenario import default_wait

    return {
        "number": number,
        "user": user,
        "bot": "",
        "include": True,
        "calls": calls or [],
        "latency_ms": latency_ms,
        "within_ms": within_ms if within_ms is not None else default_wait(latency_ms),
        "contains": contains,
        "excludes": excludes,
        "speech": None,
    }


def write_wav(path: Path, text: str, rate: int = 16000) -> Path:
    """`text` spoken by espeak-ng (tests/speech.py), padded as suite.cut pads a caller's clip, as a 16-bit mono WAV."""
    import numpy as np

    from rtvi_monitor.evals.scenario import SPEECH_PAD_SECONDS
    from tests.speech import silence, speak

    pcm = np.concatenate([silence(SPEECH_PAD_SECONDS, rate), speak(text, rate=rate), silence(SPEECH_PAD_SECONDS, rate)])
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm.astype("<i2").tobytes())
    return path


def write_scenario(folder: Path, name: str, turns: list[dict], *, audio: bool = False, about: str = "") -> Path:
    """The agent's folder as suite.zip_of lays it out: `<name>.yaml` by the project's own `document()`, and with
    `audio`, each turn's `audio/<name>/turn-<n>.wav` (its `user:` words spoken by espeak-ng)."""
    from rtvi_monitor.evals.scenario import document, slug

    folder.mkdir(parents=True, exist_ok=True)
    name = slug(name)
    clips = None
    if audio:
        clips = {}
        for one in turns:
            relative = f"audio/{name}/turn-{one['number']}.wav"
            write_wav(folder / relative, one["user"])
            clips[one["number"]] = relative
    (folder / f"{name}.yaml").write_text(document(name, turns, clips, about))
    return folder


def write_files(folder: Path, files: dict[str, str | bytes]) -> Path:
    """A folder of the given files (path inside it -> contents): a scenario file a test writes itself."""
    for relative, data in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return folder


def scenario_files(folder: Path) -> list[Path]:
    from pipecat.evals.scenario import is_scenario_file

    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and is_scenario_file(p))


def user_lines(path: Path) -> list[str]:
    """The `user:` lines of the file's audio scenario (what the caller's clips say), in order."""
    data = yaml.safe_load(path.read_text()) or {}
    for one in data.get("scenarios") or []:
        if (one.get("user") or {}).get("modality") == "audio":
            return [str(t["user"]) for t in one.get("turns") or [] if t.get("user") is not None]
    return []


# --- running ------------------------------------------------------------------------------------------------


def free_port_range(count: int, tries: int = 50) -> int:
    """A first port of `count` consecutive ports that nothing listens on (the suite gives run i base_port + i)."""
    for _ in range(tries):
        base = random.randint(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} free consecutive ports")


def write_manifest(folder: Path, out: Path, *, repeat: int | None, concurrency: int, label: str, runs: int) -> Path:
    """One entry per scenario file: bot.py, named `label`, with the file's scenario name and its clips' words as
    its runner body."""
    entries = []
    for path in scenario_files(folder):
        entries.append(
            {
                "bot": str(BOT),
                "name": f"{label}/{path.stem}",
                "runner_body": {"data": {"scenario_file": path.name, "user_lines": user_lines(path)}},
                "scenarios": [str(path.resolve())],
            }
        )
    manifest = {
        "python": python(),
        "concurrency": concurrency,
        "base_port": free_port_range(max(1, runs)),
        "suite": entries,
    }
    if repeat is not None:
        manifest["repeat"] = repeat
    out.mkdir(parents=True, exist_ok=True)
    path = out / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def _count_runs(folder: Path, modality: str | None, repeat: int | None) -> int:
    count = 0
    for path in scenario_files(folder):
        names = [s.get("name") for s in (yaml.safe_load(path.read_text()) or {}).get("scenarios") or []]
        count += sum(1 for n in names if modality is None or n == modality)
    return count * (repeat or 1)


@dataclass
class SuiteRun:
    argv: list[str]
    returncode: int
    output: str
    run_dir: Path
    seconds: float
    records: list[dict] = field(default_factory=list)

    def link(self, record: dict) -> dict | None:
        """What the bot that served `record` printed first (bot.py's `E2E-LINK {...}` line): its dashboard session
        id, the runner's session id, its runner body and its log path (which is `record["artifacts"]["log"]`)."""
        log = Path(record.get("artifacts", {}).get("log", ""))
        if not log.is_file():
            return None
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("E2E-LINK "):
                return json.loads(line[len("E2E-LINK ") :])
        return None

    @staticmethod
    def dashboard_session(record: dict) -> str:
        """The dashboard session the bot of `record` streamed to (when the run had RTVI_DASHBOARD_URL and _TOKEN)."""
        from rtvi_dashboard.evals import eval_session_id

        return eval_session_id(record["artifacts"]["log"])

    def by_scenario(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for record in self.records:
            out.setdefault(record["scenario"], []).append(record)
        return out

    def explain(self) -> str:
        logs = self.run_dir / "logs"
        tails = []
        if logs.is_dir():
            for path in sorted(logs.glob("*.log")):
                tails.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return f"$ {' '.join(self.argv)}\n(exit {self.returncode}, {self.seconds:.1f}s)\n{self.output}\n" + "\n".join(
            tails
        )


def run_suite(
    folder: Path,
    runs_dir: Path,
    *,
    modality: str | None = None,
    repeat: int | None = None,
    env: dict[str, str] | None = None,
    label: str = "bot",
    concurrency: int = 4,
    name: str = "run",
    timeout_s: float = 170,
    extra_args: tuple[str, ...] = (),
) -> SuiteRun:
    """`pipecat eval suite` over every scenario file in `folder` against bot.py: `modality` "text" or "audio" picks
    that scenario of each file (None: both), `repeat` runs each N times, `env` is added to the bots' (and the
    CLI's) environment. The dashboard's variables are taken from `env` only, never from this process's."""
    folder = Path(folder).resolve()
    runs_dir = Path(runs_dir).resolve()
    manifest = write_manifest(
        folder,
        runs_dir,
        repeat=repeat,
        concurrency=concurrency,
        label=label,
        runs=_count_runs(folder, modality, repeat),
    )
    argv = [*cli_argv(), "eval", "suite", str(manifest), "--runs-dir", str(runs_dir), "--name", name]
    if modality:
        argv += ["--scenario", modality]
    argv += list(extra_args)
    child_env = {k: v for k, v in os.environ.items() if k not in DASHBOARD_ENV and not k.startswith("E2E_BOT_")}
    child_env.update({"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "COLUMNS": "200"})
    child_env.update(env or {})
    started = time.monotonic()
    # The run's folder is the working directory: the CLI loads the nearest .env from there (none), not the checkout's.
    proc = subprocess.Popen(
        argv,
        cwd=runs_dir,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the CLI, its harness workers and the bots it spawned: its own process group
        output, _ = proc.communicate()
        output += f"\n(timed out after {timeout_s}s)"
    run_dir = runs_dir / name
    results = run_dir / "results.jsonl"
    records = (
        [json.loads(line) for line in results.read_text().splitlines() if line.strip()] if results.exists() else []
    )
    return SuiteRun(argv, proc.returncode, output, run_dir, time.monotonic() - started, records)


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None
