"""A private Docker registry (Debian's docker-registry) on a free 127.0.0.1 port, for tests and
benches: our own config (never the package's, which listens on all interfaces with htpasswd),
loopback only, no auth, temporary storage removed afterwards."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rocmforge.shared import processes


class RegistryUnavailable(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ready(port: int, proc: subprocess.Popen, timeout: float = 15, host: str = "127.0.0.1") -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


@contextlib.contextmanager
def serve(host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Yields HOST:PORT of a running registry; raises RegistryUnavailable when there is none. HOST is
    loopback unless a caller needs another address (e.g. the bridge gateway, for an engine in a
    container: tests/engine_host.py); PORT is a free one unless given."""
    exe = shutil.which("docker-registry")
    if not exe:
        raise RegistryUnavailable("docker-registry is not installed (apt-get install docker-registry)")
    root = Path(tempfile.mkdtemp(prefix="rocmforge-registry-"))
    proc = None
    try:
        for _ in range(1 if port else 3):  # a free port can be taken between probe and bind
            bound = port or free_port(host)
            config = root / "config.yml"
            config.write_text(
                f"version: 0.1\nlog:\n  level: warn\nhttp:\n  addr: {host}:{bound}\n"
                f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n"
                "  delete:\n    enabled: true\n"
            )
            with open(root / "registry.log", "ab") as log:
                proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
            if _ready(bound, proc, host=host):
                break
            processes.stop(proc)
            proc = None
        if proc is None:
            raise RegistryUnavailable("docker-registry did not answer:\n" + (root / "registry.log").read_text()[-2000:])
        yield f"{host}:{bound}"
    finally:
        if proc is not None:
            processes.stop(proc)
        shutil.rmtree(root, ignore_errors=True)
