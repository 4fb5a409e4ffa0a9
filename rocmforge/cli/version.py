"""`--version`: the package's version and the git commit it comes from, when that is known: the
checkout's HEAD when running from one (build.py, an editable install), else the commit setup.py
wrote into the package when it was built; "unknown" when neither is there (built from a copy)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rocmforge import __version__

PACKAGE = Path(__file__).resolve().parent.parent
BUILD_COMMIT = PACKAGE / "data" / "build-commit"


def commit() -> str:
    """The commit's full hash, or "unknown"."""
    checkout = PACKAGE.parent
    if (checkout / ".git").exists():
        try:
            proc = subprocess.run(
                ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass  # no git program: what the build recorded, if anything
    try:
        return BUILD_COMMIT.read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"


def describe(prog: str) -> str:
    return f"{prog} {__version__} (commit {commit()})"
