"""The verification suites against real images: honest results on a GPU-less host, and broken
images failing the right suite with a message naming the file."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import ROOT, build_image, copy_project, run_cli
from rocmforge.container import host_gpu_access
from rocmforge.plan import load_plan

pytestmark = pytest.mark.docker
PLAN = load_plan(ROOT / "matrix.yaml")
NO_GPU = not host_gpu_access().present


@pytest.fixture(scope="module")
def built(docker_client, session_images):
    proc = run_cli("build", "--target", "hip-runtime")
    assert proc.returncode == 0, proc.stderr[-3000:]


def suites(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)["suites"]


@pytest.mark.parametrize("name", ["hip-runtime", "hip-devel"])
def test_suites_pass_or_say_not_gpu_verified(built, name, tmp_path):
    junit = tmp_path / "junit.xml"
    proc = run_cli("test", "--target", name, "--json", "--junit", str(junit))
    s = suites(proc)
    assert proc.returncode == 0, json.dumps(s, indent=1)
    assert s["linkage"]["status"] == "passed"
    assert s["archs"]["status"] == "passed"
    assert s["versions"]["status"] == "passed"
    if NO_GPU:
        for suite in ("rocminfo", "gemm"):
            assert s[suite]["status"] == "not GPU-verified", s[suite]
            assert "no /dev/kfd" in s[suite]["detail"] or "no ROCm-capable device" in s[suite]["detail"]
    assert junit.read_text().startswith("<?xml")


def test_shorthand_builds_then_prints_the_table(built):
    proc = run_cli("--target", "hip-runtime")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "up to date" in proc.stderr
    for suite in ("linkage", "rocminfo", "gemm", "versions", "archs"):
        assert suite in proc.stdout
    if NO_GPU:
        assert "not GPU-verified" in proc.stdout


def _derive(client, dockerfile: str, tag: str) -> str:
    build_image(client, dockerfile, tag=tag)
    return tag


def test_missing_gpu_library_fails_linkage(built, docker_client):
    runtime = PLAN.targets["hip-runtime"].content_tag
    ref = _derive(docker_client, f"FROM {runtime}\nRUN rm /usr/lib/x86_64-linux-gnu/librocblas.so.0.1\n",
                  "rocmforge-test/broken-linkage:1")
    proc = run_cli("test", "--image", ref, "--target", "hip-runtime", "--json")
    s = suites(proc)
    assert proc.returncode == 1
    assert s["linkage"]["status"] == "failed"
    assert "/opt/rocmforge/bin/rocblas-gemm-smoke: librocblas.so.0 not found" in s["linkage"]["detail"]


def test_gemm_program_for_another_arch_fails_archs(built, docker_client):
    devel, runtime = PLAN.targets["hip-devel"].content_tag, PLAN.targets["hip-runtime"].content_tag
    ref = _derive(docker_client, f"""FROM {devel} AS b
RUN hipcc --offload-arch=gfx906 -o /g /opt/rocmforge/probes/rocblas_gemm_smoke.cpp -lrocblas
FROM {runtime}
COPY --from=b /g /opt/rocmforge/bin/rocblas-gemm-smoke
""", "rocmforge-test/broken-archs:1")
    proc = run_cli("test", "--image", ref, "--target", "hip-runtime", "--json")
    s = suites(proc)
    assert proc.returncode == 1
    assert s["archs"]["status"] == "failed"
    assert "/opt/rocmforge/bin/rocblas-gemm-smoke: missing gfx90a, gfx1100" in s["archs"]["detail"]
    assert s["linkage"]["status"] == "passed"


def test_target_declaring_an_uncovered_arch_fails_archs(built, tmp_path):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"]["hip-runtime"]["archs"] = ["gfx90a", "gfx1100", "gfx942"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("--matrix", str(matrix), "test", "--image", PLAN.targets["hip-runtime"].content_tag,
                   "--target", "hip-runtime", "--json")
    s = suites(proc)
    assert proc.returncode == 1
    detail = s["archs"]["detail"]
    assert re.search(r"librocblas\.so\.0(\.1)?: missing gfx942", detail), detail
    assert "rocblas/2.47.0/library: missing gfx942" in detail
    assert "/opt/rocmforge/bin/rocblas-gemm-smoke: missing gfx942" in detail


def test_results_are_recorded_by_image_id(built, docker_client):
    run_cli("test", "--target", "hip-runtime", "--json")
    image_id = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag).id
    stored = ROOT / ".rocmforge" / "results" / f"{image_id.split(':')[1]}.json"
    assert json.loads(stored.read_text())["image_id"] == image_id


def test_no_test_container_left_behind(built, docker_client):
    from rocmforge.container import TEST_LABEL

    run_cli("test", "--target", "hip-runtime", "--json")
    assert docker_client.containers.list(all=True, filters={"label": TEST_LABEL}) == []
