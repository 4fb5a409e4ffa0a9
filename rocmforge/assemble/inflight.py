"""One build of an image at a time on this machine.

Two builds of the same target started side by side (two CI jobs on one runner, a user's build
beside the tests) would each run every step and load the same image twice. Each image a build is
about to make is claimed by an exclusive lock on a file named for the engine and the image's tag;
a second build of it waits, then finds the image in the engine and takes it as up to date. Builds
of different images never wait for each other. Like steplock, this covers one machine's processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator

from rocmforge.assemble import steplock


@contextlib.contextmanager
def claimed(ref: str, on_wait: Callable[[], None]) -> Iterator[None]:
    """Holds the claim on building ref for the block; calls on_wait first if another process holds it."""
    name = hashlib.sha256(ref.encode()).hexdigest()[:16]
    fd = os.open(f"{steplock.engine_path()}-image-{name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock
