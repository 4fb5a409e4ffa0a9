"""matrix.lock: resolution in real base containers, drift detection, and git sources (a local
repository stands in for GitHub, which is unreachable here)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from rocmforge.host import fetch
from rocmforge.resolve import lockfile, lockmodel
from tests.conftest import ROOT, copy_project, run_cli

pytestmark = pytest.mark.docker
OFFLINE = ["--target", "hip-python"]  # the chain that resolves here: hip-devel, hip-runtime, hip-python


def test_committed_lock_checks_clean(docker_client):
    proc = run_cli("lock", "--check", *OFFLINE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_lists_every_bad_pin_at_once(docker_client, tmp_path):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["stacks"]["debian13-rocm5.7"]["apt"]["hipcc"] = "9.9.9-1"
    data["stacks"]["debian13-rocm5.7"]["apt"]["rocminfo"] = "0.0.1-1"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    before = (tmp_path / "matrix.lock").read_bytes()
    proc = run_cli("--matrix", str(matrix), "lock", "--check", *OFFLINE)
    assert proc.returncode == 1
    out = proc.stdout
    assert "hipcc=9.9.9-1 is not in the mirror (it has: 5.7.1-6+deb13u1)" in out
    assert "rocminfo=0.0.1-1 is not in the mirror (it has: 6.1.2-2)" in out
    assert "hipcc matrix 9.9.9-1 vs lock 5.7.1-6+deb13u1" in out
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "matrix.lock").read_bytes() == before, "--check must write nothing"
    # and a build is refused because the lock no longer agrees with the matrix
    build = run_cli("--matrix", str(matrix), "build", "--target", "hip-devel")
    assert build.returncode == 2 and "lock is stale for hip-devel" in build.stderr


AMD_TARGETS = ["llama7b-train", "llama7b-infer", "llama31-qlora-w7900"]


def test_lock_resolves_what_it_can_and_keeps_the_rest(docker_client, tmp_path):
    matrix = copy_project(tmp_path)
    args = [a for t in ["hip-python", *AMD_TARGETS] for a in ("--target", t)]
    proc = run_cli(
        "--matrix", str(matrix), "lock", *args, env={"ROCMFORGE_GIT_MIRRORS": "", "ROCMFORGE_REGISTRY_MIRROR": ""}
    )
    assert proc.returncode == 1, "entries needing Docker Hub and GitHub cannot resolve here"
    err = proc.stderr
    # Each entry was tried, and says where and why it failed.
    for stack in ("rocm5.7-ubuntu20.04", "rocm6.2-ubuntu22.04"):
        line = next(ln for ln in err.splitlines() if ln.startswith(f"unresolved: base {stack}:"))
        assert "registry-1.docker.io" in line, line
    assert "unresolved: git bitsandbytes-hip" in err and "github.com" in err
    for env in ("llama7b-train-env", "llama7b-infer-env", "llama31-qlora-env"):
        assert f"unresolved: python {env}:" in err and "has no digest yet" in err
    assert "unreachable from here" not in err and "not reachable from here" not in err
    assert "resolved: apt hip-devel" in proc.stdout and "resolved: python numpy-env" in proc.stdout
    new = lockfile.load(tmp_path / "matrix.lock")
    old = lockfile.load(ROOT / "matrix.lock")
    assert new.apt["hip-devel"] == old.apt["hip-devel"]
    assert new.python["numpy-env"] == old.python["numpy-env"]
    assert new.bases["rocm5.7-ubuntu20.04"].digest is None
    assert lockfile.dump(new) == (tmp_path / "matrix.lock").read_text(), "the lock is written deterministically"


def _git(*args, cwd):
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "PATH": "/usr/bin:/bin",
        },
    )


@pytest.fixture
def upstream(tmp_path):
    """A local repository with branch rocm_enabled_multi_backend, reached by a file:// URL."""
    work = tmp_path / "upstream"
    work.mkdir()
    _git("init", "-q", "-b", "rocm_enabled_multi_backend", cwd=work)
    (work / "CMakeLists.txt").write_text("project(bnb)\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    return work


def _head(repo):
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def test_git_branch_to_commit_moved_branch_and_missing_commit(docker_client, tmp_path, upstream):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    # llama7b-infer's bitsandbytes is the ROCm 5.7 build of the fork.
    data["components"]["bitsandbytes-hip-rocm5.7"]["source"]["url"] = f"file://{upstream}"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    run_cli("--matrix", str(matrix), "lock", "--target", "llama7b-infer")
    locked = lockfile.load(tmp_path / "matrix.lock").git["bitsandbytes-hip-rocm5.7"]
    assert locked.commit == _head(upstream) and locked.ref == "rocm_enabled_multi_backend"

    (upstream / "new.txt").write_text("moved\n")
    _git("add", ".", cwd=upstream)
    _git("commit", "-q", "-m", "two", cwd=upstream)
    proc = run_cli("--matrix", str(matrix), "lock", "--check", "--target", "llama7b-infer")
    assert proc.returncode == 1
    assert f"rocm_enabled_multi_backend moved: locked {locked.commit}, now {_head(upstream)}" in proc.stdout

    tree = fetch.source_tree(f"file://{upstream}", locked.commit, tmp_path / "work")
    assert tree[".rocmforge-commit"].decode().strip() == locked.commit and "new.txt" not in tree
    with pytest.raises(fetch.FetchError, match="has no commit"):
        fetch.source_tree(f"file://{upstream}", "0" * 40, tmp_path / "work")


def test_malformed_lock_is_a_user_error(tmp_path):
    matrix = copy_project(tmp_path)
    text = (tmp_path / "matrix.lock").read_text().replace(f"schema: {lockmodel.SCHEMA}", "schema: 7")
    (tmp_path / "matrix.lock").write_text(text)
    proc = run_cli("--matrix", str(matrix), "list")
    assert proc.returncode == 2 and "matrix.lock" in proc.stderr and "schema" in proc.stderr
