"""rocmforge installed without -e, run from a folder that is no checkout: the console script
renders and checks the checkout's matrix, reads archs and runs the in-image suites with only
what the package carries (rocmforge/data/: templates, probes, suites)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FIXTURE_CO = ROOT / "tests" / "fixtures" / "archs" / "co_gfx1100.hsaco"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install --no-deps .` (a wheel built from a copy of the sources) into a folder of its
    own; the dependencies come from the interpreter running the tests."""
    tmp = tmp_path_factory.mktemp("installed")
    src, site = tmp / "src", tmp / "site"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "rocmforge", src / "rocmforge", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shutil.rmtree(src)  # nothing may be read from the sources it was built from
    return site


def rocmforge(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, str(site / "bin" / "rocmforge"), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_the_package_carries_its_data_and_no_tests(installed):
    data = installed / "rocmforge" / "data"
    for rel in (
        "templates/Dockerfile.j2",
        "templates/partials/_common.j2",
        "templates/kinds/python-env.j2",
        "probes/archs.py",
        "probes/gfxnames.py",
        "probes/workload.py",
        "probes/rocblas_gemm_smoke.cpp",
        "suites/conftest.py",
        "suites/test_linkage.py",
        "suites/pytest.ini",
    ):
        assert (data / rel).is_file(), rel
    assert not (installed / "tests").exists()


def test_the_installed_package_is_the_one_that_runs(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    proc = subprocess.run(
        [sys.executable, "-c", "import rocmforge; print(rocmforge.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(proc.stdout.strip()).is_relative_to(installed), proc.stdout


def test_list_and_render_check_from_outside_a_checkout(installed, tmp_path):
    proc = rocmforge(installed, "--matrix", str(ROOT / "matrix.yaml"), "list", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"hip-runtime", "llama31-qlora-debian"} <= {r["name"] for r in json.loads(proc.stdout)}
    # The checkout's folder has no templates/ or probes/: the package's render the committed files.
    proc = rocmforge(installed, "--matrix", str(ROOT / "matrix.yaml"), "render", "--check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "up to date" in proc.stdout + proc.stderr


def test_archs_reads_a_code_object_with_the_shipped_probe(installed, tmp_path):
    proc = rocmforge(installed, "archs", str(FIXTURE_CO), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gfx1100" in proc.stdout


@pytest.mark.docker
def test_suites_run_from_the_package(installed, hip_runtime_built, docker_client, tmp_path):
    image = "rocmforge/hip-runtime:debian13-rocm5.7"
    proc = rocmforge(
        installed,
        "--matrix",
        str(ROOT / "matrix.yaml"),
        "--state-dir",
        str(tmp_path / "state"),
        "test",
        "--image",
        image,
        "--target",
        "hip-runtime",
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    suites = json.loads(proc.stdout)["suites"]
    assert {suites[s]["status"] for s in ("linkage", "archs", "versions")} == {"passed"}, suites
