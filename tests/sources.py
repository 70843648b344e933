"""The two apps' own source, read as text: for tests that hold a rule to one home (no second copy)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def files_containing(text: str) -> list[str]:
    """The Python files of dashboard/ and rtvi_monitor/ that contain `text`, as paths from the checkout, sorted."""
    return sorted(
        str(path.relative_to(ROOT))
        for app in ("dashboard", "rtvi_monitor")
        for path in (ROOT / app).rglob("*.py")
        if text in path.read_text()
    )
