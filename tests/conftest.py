"""Shared fixtures. Tests that need the Docker engine fail in CI when it is missing (CI=true);
elsewhere they skip with the reason."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rocmforge.shared.packagedata import DATA
from tests import observed

ROOT = Path(__file__).resolve().parents[1]
BUILD_PY = ROOT / "build.py"


INTEGRATION = ROOT / "tests" / "integration"


def _engine_heavy(nodeid: str) -> bool:
    return nodeid.startswith("tests/integration/")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without xdist nothing changes
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under pytest-xdist (`-n`, the README's command: pyproject.toml's addopts), every integration
    test is one scope, run by one worker in the order they run without xdist: their module and
    session fixtures (a session fixture is made once per worker) build each image once, and no two
    engine-heavy tests compete for a 2-core machine. Each unit test, which needs no engine, is a
    scope of its own and goes to whichever worker is free. (Not xdist_group and `--dist loadgroup`:
    xdist 3.8 marks a group by rewriting item._nodeid, which pytest 9 no longer reads, so the group
    would be split silently.)"""
    from xdist.scheduler import LoadScopeScheduling

    class EngineInOneScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/integration" if _engine_heavy(nodeid) else nodeid

    return EngineInOneScope(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (the workers collect; the scheduler takes their order) the integration
    tests come first, so that their scope is handed out at once, not after every unit test. Without
    xdist nothing moves."""
    if hasattr(config, "workerinput"):
        items[:] = [i for i in items if _engine_heavy(i.nodeid)] + [i for i in items if not _engine_heavy(i.nodeid)]


def interruptible() -> None:
    """preexec_fn for a child a test will stop with a signal: SIGINT, SIGTERM and SIGHUP back to
    their default actions. A launcher that ran the tests with one of them ignored (a background job
    of a non-interactive shell ignores SIGINT, `nohup` SIGHUP) passes that on, and rocmforge keeps an
    inherited-ignored SIGHUP or SIGTERM ignored on purpose, so the test would judge the launcher."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 3600):
    """Run `python build.py ARGS` and return the CompletedProcess (text)."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, str(BUILD_PY), *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def copy_project(dst: Path) -> Path:
    """A scratch copy of the parts of the project that rendering reads; returns its matrix path."""
    for name in ("templates", "probes"):
        shutil.copytree(DATA / name, dst / name)
    shutil.copy(ROOT / "matrix.yaml", dst / "matrix.yaml")
    shutil.copy(ROOT / "matrix.lock", dst / "matrix.lock")
    shutil.copy(ROOT / ".hadolint.yaml", dst / ".hadolint.yaml")
    return dst / "matrix.yaml"


@pytest.fixture(scope="session")
def docker_client():
    try:
        client = observed.connect()
    except Exception as exc:  # any failure to reach the engine
        message = f"Docker engine not reachable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI requires the engine: tests needing Docker never skip there)")
        pytest.skip(message)
    return client


@pytest.fixture(scope="session")
def session_images(docker_client):
    """Removes, at the end of the session, every image that the session created."""
    before = {img.id for img in docker_client.images.list(all=True)}
    yield
    for listing in (docker_client.images.list(), docker_client.images.list(all=True)):
        for img in listing:
            if img.id not in before:
                try:
                    docker_client.images.remove(img.id, force=True)
                except Exception:  # already removed with a child, or still in use: next pass
                    pass


def dpkg_versions(client, image: str) -> dict[str, str]:
    out = client.containers.run(image, ["dpkg-query", "-W", "-f", "${Package}=${Version}\\n"], remove=True)
    return dict(line.split("=", 1) for line in out.decode().splitlines() if line)


def sh(client, image: str, script: str) -> tuple[int, str]:
    """Run a shell script in a throw-away container; returns (exit code, output)."""
    c = client.containers.run(image, ["bash", "-c", script], detach=True)
    try:
        rc = c.wait(timeout=600)["StatusCode"]
        return rc, c.logs().decode(errors="replace")
    finally:
        c.remove(force=True)


def build_image(client, dockerfile: str, *, tag: str | None = None, nocache: bool = False) -> str:
    """A classic-builder build of a one-file context; returns the image ID, fails the test on error."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    image_id, log = None, []
    for chunk in client.api.build(
        fileobj=buf, custom_context=True, nocache=nocache, rm=True, forcerm=True, pull=False, decode=True, tag=tag
    ):
        log.append(chunk.get("stream", ""))
        if "error" in chunk:
            pytest.fail(f"build failed: {chunk['error']}\n{''.join(log)}")
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    assert image_id, "".join(log)
    return image_id
