"""Shared fixtures. Tests that need the Docker engine fail in CI when it is missing (CI=true);
elsewhere they skip with the reason."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rocmforge.shared.packagedata import DATA
from tests import observed

ROOT = Path(__file__).resolve().parents[1]
BUILD_PY = ROOT / "build.py"


INTEGRATION = ROOT / "tests" / "integration"
# Integration modules whose engine work happens in engines of their own (tests/engine_host.py runs
# them in containers) or in state, registries and tags of their own: they make up the second lane,
# beside the unit tests, while the rest of the integration tests run on the other worker.
OWN_ENGINE_LANE = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_amd_standin",
        "test_debootstrap_versions",
        "test_engine_harness",
        "test_engines",
        "test_signing",
        "test_signing_faults",
        "test_stock_host",
        "test_with_engine",
    )
)
RUN_DIR = pytest.StashKey[Path]()


def _lane(nodeid: str) -> str | None:
    """The integration lane a test belongs to; None for a unit test."""
    if not nodeid.startswith("tests/integration/"):
        return None
    return "own-engine lane" if nodeid.split("::", 1)[0] in OWN_ENGINE_LANE else "main-engine lane"


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without xdist nothing changes
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under pytest-xdist (`-n`, the README's command: pyproject.toml's addopts) the integration
    tests form two lanes, each one scope run by one worker in collection order, so that each
    module's fixtures build its images once and a worker never runs two engine-heavy tests at once.
    The main-engine lane holds the tests that judge the host engine's own images, containers and
    state; the own-engine lane holds those whose engines, registries and tags are their own, and
    every judgement there is by names or labels of its own, so the lanes can run side by side.
    (xdist hands out the largest scopes first, one per worker.) Each unit test is a scope of its own
    and goes to whichever worker is free. (Not xdist_group and `--dist loadgroup`: xdist 3.8 marks a
    group by rewriting item._nodeid, which pytest 9 no longer reads, so the group would be split.)"""
    from xdist.scheduler import LoadScopeScheduling

    class TwoEngineLanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _lane(nodeid) or nodeid

    return TwoEngineLanes(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (the workers collect; the scheduler takes their order) the integration
    tests come first, so that their lanes are handed out at once, not after every unit test.
    Without xdist nothing moves."""
    if hasattr(config, "workerinput"):
        items[:] = [i for i in items if _lane(i.nodeid)] + [i for i in items if not _lane(i.nodeid)]


def pytest_configure(config: pytest.Config) -> None:
    """The process that starts the run (xdist's controller, or pytest without xdist) keeps a folder
    for what the whole run shares: the engine's images before the run's first build."""
    if not hasattr(config, "workerinput"):
        config.stash[RUN_DIR] = Path(tempfile.mkdtemp(prefix="rocmforge-tests-"))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_configure_node(node) -> None:
    node.workerinput["rocmforge_run_dir"] = str(node.config.stash[RUN_DIR])


def run_dir(config: pytest.Config) -> Path:
    if hasattr(config, "workerinput"):
        return Path(config.workerinput["rocmforge_run_dir"])
    return config.stash[RUN_DIR]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's images are removed once every worker is done (session_images): a worker that
    finished first must not remove an image the other lane still uses."""
    config = session.config
    if hasattr(config, "workerinput") or RUN_DIR not in config.stash:
        return
    folder = config.stash[RUN_DIR]
    try:
        before_file = folder / IMAGES_BEFORE
        if before_file.exists():
            remove_images_since(set(json.loads(before_file.read_text())))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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


IMAGES_BEFORE = "images-before.json"


@pytest.fixture(scope="session")
def session_images(docker_client, request):
    """Every image the run creates from the first use of this fixture on, in either lane, is removed
    when the whole run ends (pytest_sessionfinish), not when this worker's session ends."""
    path = run_dir(request.config) / IMAGES_BEFORE
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker to get here takes the picture
        if not path.exists():
            path.write_text(json.dumps(sorted(img.id for img in docker_client.images.list(all=True))))


def remove_images_since(before: set[str]) -> None:
    try:
        client = observed.connect()
    except Exception:  # the engine is gone: nothing to tidy
        return
    for listing in (client.images.list(), client.images.list(all=True)):
        for img in listing:
            if img.id not in before:
                try:
                    client.images.remove(img.id, force=True)
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
