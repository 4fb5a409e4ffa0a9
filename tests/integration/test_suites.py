"""The verification suites against real images: honest results on a GPU-less host (never a pass
for a GPU check: not in the table, the JSON or the JUnit report), --require-gpu turning those into
failures, and broken images failing the right suite with a message naming the file. The full
mutation table is in test_suite_faults.py."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET

import pytest

from rocmforge.host.container import host_gpu_access
from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, build_image, run_cli

pytestmark = pytest.mark.docker
PLAN = load_plan(ROOT / "matrix.yaml")
NO_GPU = not host_gpu_access().present


GPU_TESTS = {
    ("gemm", "test_gemm_correctness"),
    ("gemm", "test_gemm_throughput"),
    ("rocminfo", "test_gpu_agents_match_target"),
}


@pytest.fixture
def own_images(docker_client):
    tags: list[str] = []
    yield tags
    for tag in tags:  # only the images this test derived
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:
            pass


def suites(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)["suites"]


def failing_suites(ref: str, own_images: list[str]) -> dict:
    """The suites of a broken derivative of hip-runtime, checked against hip-runtime's pins: exit 1."""
    own_images.append(ref)
    proc = run_cli("test", "--image", ref, "--target", "hip-runtime", "--json")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return suites(proc)


@pytest.mark.parametrize("name", ["hip-runtime", "hip-devel"])
def test_suites_pass_or_say_not_gpu_verified(hip_runtime_built, name, tmp_path):
    junit = tmp_path / "junit.xml"
    proc = run_cli("test", "--target", name, "--json", "--junit", str(junit))
    s = suites(proc)
    assert proc.returncode == 0, json.dumps(s, indent=1)
    assert s["linkage"]["status"] == "passed"
    assert s["archs"]["status"] == "passed"
    assert s["versions"]["status"] == "passed"
    assert s["linkage"]["figures"]["expected_gpu_files"] > 10
    tests = json.loads(proc.stdout)["tests"]
    cases = {
        (c.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_"), c.get("name")): c
        for c in ET.parse(junit).getroot().iter("testcase")
    }
    assert GPU_TESTS <= set(cases)
    if NO_GPU:
        for suite in ("rocminfo", "gemm"):
            assert s[suite]["status"] == "not GPU-verified", s[suite]
            assert "no /dev/kfd" in s[suite]["detail"] or "no ROCm-capable device" in s[suite]["detail"]
        for key in GPU_TESTS:  # never a pass: skipped, with the reason, in the JSON and the JUnit report
            rows = [t for t in tests if (t["suite"], t["test"]) == key and t["phase"] == "call"]
            assert [r["outcome"] for r in rows] == ["skipped"], rows
            assert rows[0]["detail"].startswith("not GPU-verified: ")
            skipped = cases[key].find("skipped")
            assert skipped is not None, ET.tostring(cases[key])
            assert "not GPU-verified: " in skipped.get("message", ""), ET.tostring(cases[key])


def test_require_gpu_makes_gpu_checks_fail_without_a_gpu(hip_runtime_built, tmp_path):
    if not NO_GPU:
        pytest.skip("not applicable: this host has /dev/kfd (--require-gpu changes nothing here)")
    junit = tmp_path / "junit.xml"
    proc = run_cli("test", "--target", "hip-runtime", "--require-gpu", "--json", "--junit", str(junit))
    s = suites(proc)
    assert proc.returncode == 1, json.dumps(s, indent=1)
    for suite in ("rocminfo", "gemm"):
        assert s[suite]["status"] == "failed", s[suite]
        assert "GPU required (--require-gpu was given)" in s[suite]["detail"]
    assert s["linkage"]["status"] == "passed"
    failures = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert len(failures) == len(GPU_TESTS)


def test_shorthand_builds_then_prints_the_table(hip_runtime_built):
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


def test_missing_gpu_library_fails_linkage(hip_runtime_built, docker_client, own_images):
    runtime = PLAN.targets["hip-runtime"].content_tag
    ref = _derive(
        docker_client,
        f"FROM {runtime}\nRUN rm /usr/lib/x86_64-linux-gnu/librocblas.so.0.1\n",
        f"rocmforge-test/broken-linkage:{uuid.uuid4().hex[:12]}",
    )
    s = failing_suites(ref, own_images)
    assert s["linkage"]["status"] == "failed"
    assert "/opt/rocmforge/bin/rocblas-gemm-smoke: librocblas.so.0 not found" in s["linkage"]["detail"]
    assert "/usr/lib/x86_64-linux-gnu/librocblas.so.0.1 (dpkg librocblas0)" in s["linkage"]["detail"]
    assert s["archs"]["status"] == "failed" and "librocblas.so.0.1 (dpkg librocblas0)" in s["archs"]["detail"]


def test_gemm_program_for_another_arch_fails_archs(hip_runtime_built, docker_client, own_images):
    devel, runtime = PLAN.targets["hip-devel"].content_tag, PLAN.targets["hip-runtime"].content_tag
    ref = _derive(
        docker_client,
        f"""FROM {devel} AS b
RUN hipcc --offload-arch=gfx906 -o /g /opt/rocmforge/probes/rocblas_gemm_smoke.cpp -lrocblas
FROM {runtime}
COPY --from=b /g /opt/rocmforge/bin/rocblas-gemm-smoke
""",
        f"rocmforge-test/broken-archs:{uuid.uuid4().hex[:12]}",
    )
    s = failing_suites(ref, own_images)
    assert s["archs"]["status"] == "failed"
    assert "/opt/rocmforge/bin/rocblas-gemm-smoke: missing gfx90a; gfx1100" in s["archs"]["detail"]
    assert s["linkage"]["status"] == "passed"


def test_results_are_recorded_by_image_id(hip_runtime_built, docker_client):
    proc = run_cli("test", "--target", "hip-runtime", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    image_id = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag).id
    stored = ROOT / ".rocmforge" / "results" / f"{image_id.split(':')[1]}.json"
    record = json.loads(stored.read_text())
    assert record["image_id"] == image_id and record["ok"] is True
    assert record["suites"] == json.loads(proc.stdout)["suites"]


def test_suite_results_reach_the_manifest(hip_runtime_built, tmp_path):
    """`test --target` rewrites the target's manifest with what the suites found (a fresh state folder:
    no manifest before, so only `test` can have written it)."""
    state = tmp_path / "state"
    proc = run_cli("--state-dir", str(state), "test", "--target", "hip-runtime", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    written = json.loads((state / "artifacts" / "hip-runtime" / "manifest.json").read_text())
    assert written["suites"] == {n: s["status"] for n, s in json.loads(proc.stdout)["suites"].items()}
    assert written["suites"]["linkage"] == "passed"


def test_no_test_container_left_behind(hip_runtime_built, docker_client):
    """The image is tested under a tag of this test's own: the containers a run creates name the
    reference they were created from, so other runs' containers on the same engine (tests in the
    other lane run suites meanwhile) are told apart without waiting for them."""
    image = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag)
    ref = f"rocmforge-leftover-check:{uuid.uuid4().hex[:12]}"
    image.tag(*ref.split(":"))
    try:
        proc = run_cli("test", "--image", ref, "--target", "hip-runtime", "--json")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        created = [c for c in docker_client.containers.list(all=True) if c.attrs["Config"]["Image"] == ref]
        assert created == [], [c.name for c in created]
    finally:
        docker_client.images.remove(ref)


def test_a_partial_run_is_neither_recorded_nor_in_the_manifest(hip_runtime_built, tmp_path):
    """`test --suite contents` runs that suite alone (the outside check and the contents probe) and
    says so; push needs every suite, so nothing is recorded for the image (a fresh state folder)."""
    state = tmp_path / "state"
    proc = run_cli("--state-dir", str(state), "test", "--target", "hip-runtime", "--suite", "contents", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert set(report["suites"]) == {"contents"} and report["suites"]["contents"]["status"] == "passed"
    outside = next(t for t in report["tests"] if t["test"] == "test_every_file_accounted_for_from_outside")
    assert outside["outcome"] == "passed" and outside["figures"]["accounted"]["package"] > 0
    assert not (state / "results").exists() or not list((state / "results").iterdir())
    assert not (state / "artifacts" / "hip-runtime" / "manifest.json").exists()
