"""Fixtures shared by the integration tests: a private Docker registry (Debian's docker-registry) on
a free 127.0.0.1 port."""

from __future__ import annotations

import os

import pytest


def _need(message: str):
    if os.environ.get("CI"):
        pytest.fail(message + " (CI requires it)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def hip_runtime_built(docker_client):
    """hip-runtime (and hip-devel, its builder) built or up to date, through the command users type."""
    from tests.conftest import run_cli

    proc = run_cli("build", "--target", "hip-runtime")
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
