"""Writing project state: every record is replaced whole or not at all, and every time is UTC."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Replace path with data; a reader sees the old file or the new one, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix="~")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            exc.filename = str(path)  # a full disk fails the write, which names no file
        raise


def keep_most_recent(folder: Path, pattern: str, keep: int) -> None:
    """Removes all but the `keep` most recently used files of folder named by pattern (by mtime:
    a cache's reader touches what it uses). One another process removed meanwhile is no error."""

    def used(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    for old in sorted(folder.glob(pattern), key=used, reverse=True)[keep:]:
        old.unlink(missing_ok=True)


def append_line(path: Path, text: str) -> None:
    """Logs grow by whole lines, so a log read while a build runs never ends mid-line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")


def iso_utc(epoch: float) -> str:
    """The time as ISO 8601 in UTC to the second, e.g. 2024-05-01T12:00:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def user_cache(name: str) -> Path:
    """A folder of the user's cache ($XDG_CACHE_HOME, else ~/.cache) for content-addressed data
    every checkout and state folder can share: each entry is named by, and checked against, what
    it holds."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rocmforge" / name
