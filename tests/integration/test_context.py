"""`build.py context`: the one documented way to `docker build` a target by hand. The folder holds
the committed Dockerfile, the single copy of the probes and the rest of the context, and the
engine builds it."""

from __future__ import annotations

import uuid

import docker.errors
import pytest

from rocmforge.render.dockerfile import COPIED_DIR_MTIME
from rocmforge.render.plan import load_plan
from rocmforge.shared.packagedata import PROBES
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.docker
PLAN = load_plan(ROOT / "matrix.yaml")


def written(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_context_is_the_plans_files(tmp_path):
    out = tmp_path / "context"
    proc = run_cli("--state-dir", str(tmp_path / "state"), "context", "--target", "hip-runtime", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    files = written(out)
    assert files == PLAN.targets["hip-runtime"].files
    # the times of rocmforge's own context: a hand build (BuildKit's cache ignores times) gives its layers
    times = {p.relative_to(out).as_posix(): p.stat().st_mtime for p in [out, *out.rglob("*")]}
    assert times.pop("probes") == COPIED_DIR_MTIME  # the folder `COPY probes/ ...` takes (render.dockerfile)
    assert set(times.values()) == {0}
    assert files["Dockerfile"] == (ROOT / "images" / "hip-runtime" / "Dockerfile").read_bytes()
    probes = {
        f"probes/{p.relative_to(PROBES).as_posix()}": p.read_bytes()
        for p in PROBES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert probes and {k: v for k, v in files.items() if k.startswith("probes/")} == probes
    assert not (ROOT / "images" / "hip-runtime" / "probes").exists()  # one copy in the repository


def test_context_refuses_a_folder_with_files(tmp_path):
    (tmp_path / "keep.txt").write_text("mine\n")
    proc = run_cli("context", "--target", "hip-runtime", "--out", str(tmp_path))
    assert proc.returncode == 2 and "must be an empty folder" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_docker_builds_the_context_by_hand(hip_runtime_built, docker_client, tmp_path):
    out = tmp_path / "context"
    proc = run_cli("context", "--target", "hip-runtime", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    tag = f"rocmforge-test-context/hip-runtime:{uuid.uuid4().hex[:8]}"
    try:
        try:
            image, _ = docker_client.images.build(path=str(out), tag=tag, rm=True, forcerm=True, pull=False)
        except docker.errors.BuildError as exc:  # the engine's own words, not docker-py's docstring
            log = "".join(chunk.get("stream", "") for chunk in exc.build_log)
            pytest.fail(f"docker build of the context failed: {exc.msg}\n{log[-3000:]}")
        binary = docker_client.containers.run(image.id, ["sh", "-c", "command -v rocblas-gemm-smoke"], remove=True)
        assert binary.decode().strip() == "/opt/rocmforge/bin/rocblas-gemm-smoke"
    finally:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - the build failed before tagging
            pass
