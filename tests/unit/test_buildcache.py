"""The build cache's budget, read from the environment."""

from __future__ import annotations

import pytest

from rocmforge.assemble import buildcache
from rocmforge.shared.errors import UserError


def test_build_cache_budget_from_the_environment(monkeypatch):
    monkeypatch.delenv("ROCMFORGE_BUILD_CACHE_MAX", raising=False)
    assert buildcache.budget() == 2 * 10**9
    monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", "0")
    assert buildcache.budget() == 0
    monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", "5e8")
    assert buildcache.budget() == 500_000_000
    for bad in ("lots", "-1"):
        monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", bad)
        with pytest.raises(UserError, match="ROCMFORGE_BUILD_CACHE_MAX"):
            buildcache.budget()
