"""Fixtures shared by the integration tests: a private Docker registry (Debian's docker-registry) on
a free 127.0.0.1 port; other Docker engines (tests/engine_host.py), each in a container on the host
engine."""

from __future__ import annotations

import os

import pytest

from tests import engine_host


def _need(message: str):
    if os.environ.get("CI"):
        pytest.fail(message + " (CI requires it)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def hip_runtime_built(docker_client):
    """hip-runtime (and hip-devel, its builder) built or up to date, through the command users type."""
    from tests.conftest import run_cli

    # classic by name: the reference BuildKit's rebuilds are held against, whatever the host has installed
    proc = run_cli("build", "--target", "hip-runtime", "--builder", "classic")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def local_registry():
    """HOST:PORT of a private registry on 127.0.0.1 (tests/local_registry.py)."""
    from tests import local_registry as registry

    try:
        with registry.serve() as address:
            yield address
    except registry.RegistryUnavailable as exc:
        _need(str(exc))


@pytest.fixture(scope="session", params=sorted(engine_host.ENGINES))
def other_engine(request, docker_client, tmp_path_factory):
    """A RunningEngine (tests/engine_host.py) for each engine in engine_host.ENGINES, one at a time:
    its DOCKER_HOST URL (`.docker_host`, `.env()`, `.client()`), server version, storage driver, the
    containerd snapshotter flag, the installed package versions and the host's registry address as
    the engine reaches it (`.registry_address`). Narrow it with
    `@pytest.mark.parametrize("other_engine", ["podman5"], indirect=True)`."""
    try:
        with engine_host.running(
            docker_client, request.param, workdir=tmp_path_factory.mktemp("engine-bootstrap")
        ) as engine:
            yield engine
    except engine_host.EngineUnavailable as exc:
        _need(f"engine {request.param} unavailable: {exc}")
