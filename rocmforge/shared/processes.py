"""Stopping a child process that may not stop when asked."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still running after grace seconds; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
