"""rocmforge installed without -e, run from a folder that is no checkout: the console script
renders and checks the checkout's matrix, reads archs and runs the in-image suites with only
what the package carries (rocmforge/data/: templates, probes, suites). And the quick start as a
newcomer types it: --version, a bare `rocmforge`, doctor without a matrix, the matrix named after
the command, by $ROCMFORGE_MATRIX or found from a subfolder, every message naming `rocmforge`."""

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
DEAD_ENGINE = "unix:///nonexistent/rocmforge-no-engine.sock"
GIT = [
    "git",
    "-c",
    "user.name=rocmforge tests",
    "-c",
    "user.email=tests@rocmforge.invalid",
    "-c",
    "commit.gpgsign=false",
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install --no-deps .` (a wheel built from a copy of the sources, committed to a git
    repository of its own so the build records a commit) into a folder of its own; the
    dependencies come from the interpreter running the tests. Returns the site folder."""
    tmp = tmp_path_factory.mktemp("installed")
    src, site = tmp / "src", tmp / "site"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "rocmforge", src / "rocmforge", ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the sources installed"]):
        subprocess.run([*GIT, *args], cwd=src, check=True, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, check=True, capture_output=True, text=True)
    (tmp / "built-from").write_text(commit.stdout.strip())
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


def rocmforge(site: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200", "ROCMFORGE_MATRIX": "", **(env or {})}
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


def no_matrix_above(folder: Path) -> None:
    if any((p / "matrix.yaml").is_file() for p in [folder, *folder.parents]):
        pytest.skip(f"a matrix.yaml in or above {folder}")


def test_version_names_the_commit_it_was_built_from(installed, tmp_path):
    proc = rocmforge(installed, "--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    built_from = (installed.parent / "built-from").read_text()
    assert proc.stdout == f"rocmforge 0.1.0 (commit {built_from})\n"


def test_bare_rocmforge_is_its_help(installed, tmp_path):
    proc = rocmforge(installed, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: rocmforge ") and "\n  rocmforge list\n" in proc.stdout
    assert "build.py" not in proc.stdout + proc.stderr


def test_doctor_needs_no_matrix(installed, tmp_path):
    no_matrix_above(tmp_path)
    proc = rocmforge(installed, "doctor", cwd=tmp_path, env={"DOCKER_HOST": DEAD_ENGINE})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "matrix.yaml" not in proc.stderr and "build.py" not in proc.stdout + proc.stderr
    assert f"DOCKER_HOST={DEAD_ENGINE}" in proc.stdout  # the engine check names where it looked


def test_the_matrix_after_the_command_by_variable_and_from_a_subfolder(installed, tmp_path):
    no_matrix_above(tmp_path)
    matrix = str(ROOT / "matrix.yaml")
    runs = {
        "--matrix after list": rocmforge(installed, "list", "--json", "--matrix", matrix, cwd=tmp_path),
        "ROCMFORGE_MATRIX": rocmforge(installed, "list", "--json", cwd=tmp_path, env={"ROCMFORGE_MATRIX": matrix}),
        "a subfolder": rocmforge(installed, "list", "--json", cwd=ROOT / "images" / "hip-runtime"),
    }
    for how, proc in runs.items():
        assert proc.returncode == 0, f"{how}: {proc.stderr[-2000:]}"
        assert "hip-runtime" in {r["name"] for r in json.loads(proc.stdout)}, how
    proc = rocmforge(installed, "list", cwd=tmp_path)
    assert proc.returncode == 2 and "give --matrix FILE or set $ROCMFORGE_MATRIX" in proc.stderr, proc.stderr


def test_help_and_hints_name_rocmforge(installed, tmp_path):
    proc = rocmforge(installed, "build", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: rocmforge build "), proc.stdout
    assert "example:\n  rocmforge build --target" in proc.stdout
    proc = rocmforge(
        installed,
        "build",
        "--target",
        "llama7b-train",
        "--matrix",
        str(ROOT / "matrix.yaml"),
        cwd=tmp_path,
        env={"DOCKER_HOST": DEAD_ENGINE},
    )
    assert proc.returncode == 2, proc.stderr
    assert "`rocmforge lock --target llama7b-train`" in proc.stderr and "build.py" not in proc.stderr, proc.stderr
    proc = rocmforge(installed, "completion", "zsh", cwd=tmp_path)
    assert proc.returncode == 0 and "doctor" in proc.stdout and "--matrix" in proc.stdout, proc.stderr
