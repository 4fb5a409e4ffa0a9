"""The README's set-up works on a stock Debian host (PEP 668): in a container of the bootstrapped
Debian 13 base (minbase: no python3 at all), with a copy of the checkout mounted, the Python part of
scripts/with-engine (scripts/python-env) runs from nothing: apt's python3 and python3-venv, a .venv,
`pip install -e '.[test]'` into it; then `build.py list` and `render --check` succeed with it, the
system interpreter got nothing, and a second run reuses the environment without calling pip.
The engine part needs a host and is covered by CI (.ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rocmforge.define.matrix import load_matrix
from rocmforge.resolve import bases, bootstrap
from tests.conftest import ROOT

pytestmark = pytest.mark.docker

STACK = "debian13-rocm5.7"
# More stock images to try the same way, e.g. debootstrapped bookworm/jammy/noble imported with
# `docker import`: ROCMFORGE_STOCK_IMAGES="stock/bookworm:1 stock/jammy:1"
EXTRA = os.environ.get("ROCMFORGE_STOCK_IMAGES", "").split()


def _quiet(*_a, **_k):
    pass


def _ca_bundle() -> Path | None:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return Path(os.environ[var])
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def _copy_checkout(dst: Path) -> None:
    """The checkout's files (tracked and untracked-but-not-ignored): never the real .venv."""
    names = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        src = ROOT / name
        if not src.is_file() or name.startswith(".venv/"):
            continue  # deleted in the working tree
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / name)


@pytest.fixture(scope="module")
def base(docker_client, tmp_path_factory):
    """The bootstrapped Debian 13 base: the one present, else bootstrapped here (and removed afterwards)."""
    import docker.errors

    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    ref = bases.bootstrap_ref(STACK, stack)
    try:
        docker_client.images.get(ref)
        present = True
    except docker.errors.ImageNotFound:
        present = False
        ref = bootstrap.ensure_base(docker_client, STACK, stack, tmp_path_factory.mktemp("bootstrap"), _quiet)
    yield ref
    if not present:
        try:
            docker_client.images.remove(ref, force=True)
        except docker.errors.APIError:
            pass


@pytest.mark.parametrize("image", ["bootstrapped-trixie", *EXTRA])
def test_python_env_from_nothing_on_stock_debian(docker_client, base, tmp_path, image):
    src = tmp_path / "src"
    _copy_checkout(src)
    volumes = {str(src): {"bind": "/src", "mode": "rw"}}
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    ca = _ca_bundle()
    if ca:  # PyPI is reached through a TLS-intercepting proxy here
        volumes[str(ca)] = {"bind": "/etc/rocmforge-test-ca.crt", "mode": "ro"}
        env["PIP_CERT"] = "/etc/rocmforge-test-ca.crt"
    c = docker_client.containers.run(
        base if image == "bootstrapped-trixie" else image,
        ["sleep", "infinity"],
        detach=True,
        volumes=volumes,
        environment=env,
        working_dir="/src",
    )
    log: list[str] = []

    def run(cmd: str, timeout_note: str = "") -> tuple[int, str, float]:
        t0 = time.monotonic()
        rc, out = c.exec_run(["bash", "-c", cmd], workdir="/src")
        dt = time.monotonic() - t0
        text = out.decode(errors="replace")
        log.append(f"$ {cmd}  -> {rc} in {dt:.1f}s\n{text[-4000:]}")
        return rc, text, dt

    try:
        # The stock condition: no python3 on the host (minbase); Debian's python3 is PEP 668-managed.
        rc, out, _ = run("command -v python3 || echo none")
        assert out.strip() == "none", out

        rc, out, first = run("scripts/python-env python3 -c 'import sys; print(sys.prefix)'")
        assert rc == 0, "\n".join(log)
        assert out.strip().splitlines()[-1] == "/src/.venv", out
        print(f"\nfirst set-up: {first:.1f}s")

        rc, out, _ = run(
            "ls /usr/lib/python3*/EXTERNALLY-MANAGED; "
            "/usr/bin/python3 -c 'import docker' 2>&1; /usr/bin/python3 -m pip --version 2>&1; true"
        )
        if image == "bootstrapped-trixie":  # PEP 668 (Ubuntu 22.04's Python predates it)
            assert "EXTERNALLY-MANAGED" in out.split("\n")[0], out
        assert "No module named 'docker'" in out, "the system interpreter got packages:\n" + out
        assert "No module named pip" in out, "pip was installed into the system interpreter:\n" + out

        rc, out, _ = run("COLUMNS=200 .venv/bin/python build.py list")
        assert rc == 0, "\n".join(log)
        assert "hip-runtime" in out
        rc, out, _ = run(".venv/bin/python build.py render --check")
        assert rc == 0, "\n".join(log)
        rc, out, _ = run(
            "scripts/python-env sh -c 'command -v pytest; command -v hadolint; command -v check-jsonschema'"
        )
        assert rc == 0 and out.split() == [
            "/src/.venv/bin/pytest",
            "/src/.venv/bin/hadolint",
            "/src/.venv/bin/check-jsonschema",
        ], out

        # Second run: the environment is reused, pip is never started (a pip that fails proves it).
        stamp = src / ".venv" / ".rocmforge-pyproject.sha256"
        before = stamp.stat().st_mtime_ns
        run(
            "mkdir -p /tmp/nopip/pip && "
            "printf 'raise SystemExit(\"pip was called\")\\n' > /tmp/nopip/pip/__main__.py && "
            "touch /tmp/nopip/pip/__init__.py"
        )
        rc, out, second = run("PYTHONPATH=/tmp/nopip scripts/python-env python3 -c 'import sys; print(sys.prefix)'")
        assert rc == 0 and out.strip() == "/src/.venv", "\n".join(log)
        assert stamp.stat().st_mtime_ns == before
        assert second < 5, f"second run took {second:.1f}s"
        print(f"second set-up: {second:.2f}s")

        # pyproject.toml changed: the environment is refreshed (not recreated).
        with open(src / "pyproject.toml", "a") as f:
            f.write("\n# changed\n")
        rc, out, third = run("scripts/python-env python3 -c 'import rocmforge, sys; print(rocmforge.__file__)'")
        assert rc == 0, "\n".join(log)
        assert "refreshing" in out and "creating" not in out, out
        assert out.strip().splitlines()[-1] == "/src/rocmforge/__init__.py", out
        assert stamp.stat().st_mtime_ns != before
        print(f"refresh after a pyproject.toml change: {third:.1f}s")
        run(
            ".venv/bin/python -m pip list --format=freeze; "
            "dpkg-query -W -f '${Package}=${Version} ' python3 python3-venv"
        )
        print("\n".join(log))  # shown with -s: what each step printed
    finally:
        c.remove(force=True)
