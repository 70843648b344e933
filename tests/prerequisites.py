"""What `make test` needs beyond Python, checked before anything runs (plain Python, no venv needed).

Every test runs under `make test`: none is skipped because the machine lacks something. So a
machine without Chromium, espeak-ng, Node.js, Redis or PostgreSQL stops here at once, saying what
is missing and the one command that installs and starts it all (`.ci/run`, as CI runs it).
"""

import os
import shutil
import socket
import sys
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
REDIS_URL = os.getenv("TEST_REDIS_URL", "redis://127.0.0.1:6379/2")
DATABASE_URL = os.getenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")


def listening(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1).close()
        return True
    except OSError:
        return False


def missing() -> list[str]:
    """What this machine lacks for the whole suite, each with what needs it."""
    lacks = []
    if not os.access(CHROMIUM, os.X_OK):
        lacks.append(f"Chromium at {CHROMIUM} (the browser tests; Debian's package chromium)")
    if shutil.which("espeak-ng") is None:
        lacks.append("espeak-ng (the audio tests speak real speech; Debian's package espeak-ng)")
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            lacks.append(f"{tool} (the pages' JavaScript tests and lint)")
    if not listening(REDIS_URL, 6379):
        lacks.append(f"Redis listening at {REDIS_URL} (the scale-out tests; TEST_REDIS_URL to point elsewhere)")
    if not listening(DATABASE_URL, 5432):
        lacks.append(
            f"PostgreSQL listening at {DATABASE_URL} (the database tests; TEST_DATABASE_URL to point elsewhere)"
        )
    return lacks


def main() -> int:
    lacks = missing()
    if not lacks:
        return 0
    print("make test runs every test, and this machine lacks what some of them need:", file=sys.stderr)
    for what in lacks:
        print(f"  - {what}", file=sys.stderr)
    print(
        "\nOne command installs and starts all of it (Debian; as root), then runs the tests as CI does:\n"
        "  sudo .ci/run",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
