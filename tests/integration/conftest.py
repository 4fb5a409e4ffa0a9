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
def local_registry():
    """HOST:PORT of a private registry on 127.0.0.1 (tests/local_registry.py)."""
    from tests import local_registry as registry

    try:
        with registry.serve() as address:
            yield address
    except registry.RegistryUnavailable as exc:
        _need(str(exc))
