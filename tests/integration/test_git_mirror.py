"""Git sources through a mirror, the way an air-gapped site serves them: the bundle of ROCm's
bitsandbytes fork (../shared/sources) becomes a bare repository, ROCMFORGE_GIT_MIRRORS rewrites
the upstream URL to it, and lock and fetch keep and report the upstream URL."""

from __future__ import annotations

import os
import subprocess

import pytest

from rocmforge.host import fetch
from tests.conftest import ROOT

UPSTREAM = "https://github.com/ROCm/bitsandbytes"
REF = "rocm_enabled_multi_backend"
COMMIT = "4aad810bc1d93c38a5316ec54c822cd12b1f1cd2"
BUNDLE = ROOT.parent / "shared" / "sources" / "bitsandbytes-rocm.bundle"
BUNDLE = type(BUNDLE)(os.environ.get("ROCMFORGE_SOURCES", BUNDLE.parent)) / BUNDLE.name


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    if not BUNDLE.exists():
        message = f"the source bundle {BUNDLE} is missing (set ROCMFORGE_SOURCES to its folder)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "git-mirror"), str(tmp_path / "mirror"), str(BUNDLE), UPSTREAM],
        capture_output=True,
        text=True,
        check=True,
    )
    setting = proc.stdout.strip().split("=", 1)[1].strip("'")
    monkeypatch.setenv(fetch.MIRRORS_ENV, setting)
    return tmp_path / "mirror" / "github.com" / "ROCm" / "bitsandbytes"


def test_branch_resolves_through_the_mirror(mirror):
    assert fetch.ls_remote(UPSTREAM, REF) == COMMIT
    assert fetch.mirror_of(UPSTREAM) == f"file://{mirror}"


def test_source_tree_is_the_locked_commit(mirror, tmp_path):
    tree = fetch.source_tree(UPSTREAM, COMMIT, tmp_path / "work")
    assert tree[".rocmforge-commit"].decode().strip() == COMMIT
    assert b'__version__ = "0.43.3.dev"' in tree["bitsandbytes/__init__.py"]
    assert b"COMPUTE_BACKEND" in tree["CMakeLists.txt"]


def test_missing_commit_names_upstream_and_mirror(mirror, tmp_path):
    with pytest.raises(fetch.FetchError) as exc:
        fetch.source_tree(UPSTREAM, "0" * 40, tmp_path / "work")
    assert UPSTREAM in str(exc.value) and "through the mirror" in str(exc.value)


def test_bad_mirror_setting_is_named(monkeypatch):
    monkeypatch.setenv(fetch.MIRRORS_ENV, "https://github.com/")
    with pytest.raises(fetch.FetchError, match="ROCMFORGE_GIT_MIRRORS.*UPSTREAM=MIRROR"):
        fetch.ls_remote(UPSTREAM, REF)


def test_without_mirror_github_is_tried_and_named(monkeypatch):
    monkeypatch.delenv(fetch.MIRRORS_ENV, raising=False)
    with pytest.raises(fetch.FetchError, match="github.com/ROCm/bitsandbytes"):
        fetch.ls_remote(UPSTREAM, REF, timeout=30)
