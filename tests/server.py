"""Run the real dashboard (daphne + dashboard.asgi) in a subprocess, for tests and benchmarks.

The server gets its own SQLite file (or the DATABASE_URL given), so tests and
benchmarks see exactly what a deployment sees: the real ASGI stack, sockets on
loopback, one server process per instance.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DaphneServer:
    def __init__(self, env: dict | None = None, port: int | None = None, workdir: str | None = None):
        self.port = port or free_port()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="rtvi-dashboard-"))
        self.env = {
            **os.environ,
            "SQLITE_PATH": str(self.workdir / "db.sqlite3"),
            "AUDIO_ROOT": str(self.workdir / "audio"),
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen | None = None
        self.log_path = self.workdir / f"daphne-{self.port}.log"
        self.access_log = self.workdir / f"access-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def manage(self, *args: str) -> str:
        """Run a management command against this server's database; returns its stdout."""
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, check=False
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def issue(self, command: str, org: str) -> str:
        """A credential of `org` (create_ingest_token or create_api_key), the organization made if need be.

        For benches that also run another checkout's server: one from before `--create` made every
        organization it was asked for, and refuses the flag.
        """
        try:
            return self.manage(command, "--create", "--org", org).splitlines()[-1]
        except RuntimeError as error:
            if "--create" not in str(error):
                raise
            return self.manage(command, "--org", org).splitlines()[-1]

    def seed_demo(self) -> tuple[str, str, str]:
        """Seed the demo organization as `make run` does; returns (username, password, private API key)."""
        lines = self.manage("seed_demo").splitlines()
        username, password = next(x for x in lines if x.startswith("Login:")).removeprefix("Login: ").split(" / ")
        return username, password, lines[-1]

    def command(self) -> list[str]:
        """The server's command line (another server's, in a subclass: bench/relay.py --server)."""
        return [
            sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
            "--access-log", str(self.access_log), "--websocket_connect_timeout", "30",
            "dashboard.asgi:application",
        ]  # fmt: skip

    def start(self, migrate: bool = True) -> "DaphneServer":
        if migrate:
            self.manage("migrate", "--noinput")
        self.process = subprocess.Popen(
            self.command(), cwd=ROOT, env=self.env, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the server did not start in 30 s")

    def stop(self, timeout: float = 10) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start(migrate=False)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
