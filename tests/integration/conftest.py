"""Fixtures shared by the integration tests: a private Docker registry (Debian's docker-registry) on
a free 127.0.0.1 port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest


def _need(message: str):
    if os.environ.get("CI"):
        pytest.fail(message + " (CI requires it)")
    pytest.skip(message)


# -- the registry -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(port: int, proc: subprocess.Popen, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def local_registry():
    """HOST:PORT of a private registry: our own config (never the package's, which listens on all
    interfaces with htpasswd), loopback only, no auth, temporary storage removed afterwards."""
    exe = shutil.which("docker-registry")
    if not exe:
        _need("docker-registry is not installed (apt-get install docker-registry)")
    root = Path(tempfile.mkdtemp(prefix="rocmforge-registry-"))
    proc = None
    try:
        # The free port can be taken between probe and bind: try a few.
        for _ in range(3):
            port = _free_port()
            config = root / "config.yml"
            config.write_text(f"version: 0.1\nlog:\n  level: warn\nhttp:\n  addr: 127.0.0.1:{port}\n"
                              f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n"
                              "  delete:\n    enabled: true\n")
            log = open(root / "registry.log", "ab")
            proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
            log.close()
            if _ready(port, proc):
                break
            _stop(proc)
            proc = None
        if proc is None:
            pytest.fail("docker-registry did not answer:\n" + (root / "registry.log").read_text()[-2000:])
        yield f"127.0.0.1:{port}"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)
