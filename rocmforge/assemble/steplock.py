"""Builds that share one engine must not remove each other's step images.

The classic builder reuses any earlier step image as a cache hit, and a build's stages are
untagged images until the build ends, so a step image one build made may be what another build
is standing on (or about to COPY --from). Each build therefore holds a shared lock on a file
named for the engine while the builder runs it; untagged step images are removed only under the exclusive
lock, that is when no other build runs. A build that cannot get it leaves its step images in a
pending list that the last build out (or `clean`) removes.

POSIX record locks (lockf), not flock: a process's shared lock then converts to exclusive in
place, and a refused conversion keeps the shared lock. The lock lives in the temporary folder,
so it covers the processes of one machine; builds on one engine from different machines or
containers are not coordinated (the engine's own conflict checks still refuse to remove an image
that a running container uses)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

# One descriptor for the life of the process: closing any descriptor of the file would drop every
# POSIX lock the process holds on it.
_fd: int | None = None
_shared = False  # this process is building
_exclusive = False  # this process holds the exclusive lock (nested uses see True at once)


def engine_path() -> Path:
    """The lock files of this machine's builds on the engine DOCKER_HOST names start with this path."""
    engine = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    key = hashlib.sha256(engine.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"rocmforge-engine-{key}"


def _lock_fd() -> int:
    global _fd
    if _fd is None:
        _fd = os.open(str(engine_path()) + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    return _fd


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Marks this process as building on the engine for the length of the block (waits while
    `clean` runs)."""
    global _shared
    if _shared:
        yield
        return
    if not _exclusive:
        fcntl.lockf(_lock_fd(), fcntl.LOCK_SH)
    _shared = True
    try:
        yield
    finally:
        _shared = False
        if not _exclusive:
            fcntl.lockf(_lock_fd(), fcntl.LOCK_UN)


@contextlib.contextmanager
def exclusive() -> Iterator[bool]:
    """Yields True while no other process builds on the engine (and holds that off), else False."""
    global _exclusive
    if _exclusive:
        yield True
        return
    fd = _lock_fd()
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        yield False
        return
    _exclusive = True
    try:
        yield True
    finally:
        _exclusive = False
        fcntl.lockf(fd, fcntl.LOCK_SH if _shared else fcntl.LOCK_UN)


@contextlib.contextmanager
def _pending_file() -> Iterator[list[str]]:
    path = Path(str(engine_path()) + ".pending")
    fd = os.open(str(path) + ".mutex", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        try:
            items = json.loads(path.read_text()) if path.exists() else []
        except (OSError, ValueError):  # a torn list from a killed process: its images are found by `clean`
            items = []
        box = [i for i in items if isinstance(i, str)]
        yield box
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(box))
        os.replace(tmp, path)
    finally:
        os.close(fd)


def defer(images: list[str]) -> None:
    """Adds images to the pending list, for the last build out (or `clean`) to remove."""
    with _pending_file() as box:
        box.extend(i for i in images if i not in box)


def take_pending() -> list[str]:
    """The deferred images, removed from the list (call under exclusive())."""
    with _pending_file() as box:
        out = list(box)
        box.clear()
    return out
