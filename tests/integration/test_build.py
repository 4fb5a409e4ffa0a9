"""The core loop on the real engine: bootstrap → hip-devel → hip-runtime (→ hip-python)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import docker.errors
import pytest
import yaml

from rocmforge.define.matrix import load_matrix
from rocmforge.render.plan import load_plan, make_plan
from rocmforge.resolve import lockfile
from rocmforge.shared.files import iso_utc
from tests.conftest import ROOT, copy_project, dpkg_versions, run_cli, sh
from tests.integration.test_build_leftovers import assert_nothing_left, engine_state

pytestmark = pytest.mark.docker

MATRIX = load_matrix(ROOT / "matrix.yaml")
PLAN = load_plan(ROOT / "matrix.yaml")


@pytest.fixture(scope="module")
def built_runtime(docker_client):
    proc = run_cli("build", "--target", "hip-runtime")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_prerequisites_built_first_and_tagged(built_runtime, docker_client):
    err = built_runtime.stderr
    # hip-devel (the builder) must be handled before hip-runtime.
    assert err.index("hip-devel") < err.index("hip-runtime")
    for name in ("hip-devel", "hip-runtime"):
        tp = PLAN.targets[name]
        by_content = docker_client.images.get(tp.content_tag)
        assert docker_client.images.get(tp.readable_tag).id == by_content.id


def test_each_variant_is_its_own_image_pruned_to_its_archs(built_runtime, docker_client):
    main = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag)
    variants = PLAN.variants["hip-runtime"]
    assert [v.variant for v in variants] == [tuple(g) for g in MATRIX.targets["hip-runtime"].variants]
    for v in variants:
        img = docker_client.images.get(v.content_tag)
        assert docker_client.images.get(v.readable_tag).id == img.id != main.id
        assert v.readable_tag.endswith("-" + "-".join(v.variant))
        assert img.labels["io.rocmforge.archs"] == ",".join(v.variant)
        assert img.labels["io.rocmforge.target"] == "hip-runtime"
        assert img.attrs["Size"] < main.attrs["Size"], f"{v.key} is not smaller than the all-archs image"
        rc, kept = sh(docker_client, v.content_tag, "cat /opt/rocmforge/prune/hip-runtime.json")
        assert rc == 0 and json.loads(kept)["keep"] == list(v.variant), kept
        manifest = json.loads((ROOT / ".rocmforge" / "artifacts" / v.key / "manifest.json").read_text())
        assert manifest["image_id"] == img.id and manifest["variant"] == list(v.variant)
    listed = {r["name"]: r for r in json.loads(run_cli("list", "--json").stdout)}["hip-runtime"]["variants"]
    assert [(r["archs"], r["content_tag"], r["tag"]) for r in listed] == [
        (list(v.variant), v.content_tag, v.readable_tag) for v in variants
    ]


@pytest.mark.parametrize("name", ["hip-devel", "hip-runtime"])
def test_dpkg_reports_exactly_the_pins(built_runtime, docker_client, name):
    stack = MATRIX.stacks[MATRIX.targets[name].stack]
    installed = dpkg_versions(docker_client, PLAN.targets[name].content_tag)
    for pkg in MATRIX.targets[name].apt:
        assert installed.get(pkg) == stack.apt[pkg], f"{name}: {pkg} is {installed.get(pkg)}, pinned {stack.apt[pkg]}"


def test_runtime_has_gemm_and_rocminfo_but_no_compiler(built_runtime, docker_client):
    rc, out = sh(
        docker_client,
        PLAN.targets["hip-runtime"].content_tag,
        """
        set -e
        test -x /opt/rocmforge/bin/rocblas-gemm-smoke
        command -v rocminfo
        test -f /opt/rocmforge/probes/rocblas_gemm_smoke.cpp
        if command -v hipcc || command -v clang || command -v clang++-17 || ls /usr/lib/llvm-17/bin/clang 2>/dev/null; then
            echo COMPILER-PRESENT; exit 1
        fi
        ldd /opt/rocmforge/bin/rocblas-gemm-smoke
    """,  # noqa: E501
    )
    assert rc == 0, out
    assert "not found" not in out
    assert "librocblas.so" in out and "libamdhip64.so" in out


def test_gemm_program_reports_no_gpu_honestly(built_runtime, docker_client):
    rc, out = sh(docker_client, PLAN.targets["hip-runtime"].content_tag, "rocblas-gemm-smoke 256 1")
    if Path("/dev/kfd").exists():
        pytest.skip("host has /dev/kfd but the container was started without devices: covered by the GPU suites")
    assert rc == 3, out
    assert json.loads(out.strip().splitlines()[-1])["status"] == "no-gpu"


def test_gemm_program_targets_declared_archs(built_runtime, docker_client):
    # roc-obj-ls lives in hipcc, so ask the devel image about the binary copied out of runtime.
    runtime = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag)
    c = docker_client.containers.create(runtime.id, ["true"])
    try:
        bits, _ = c.get_archive("/opt/rocmforge/bin/rocblas-gemm-smoke")
        blob = b"".join(bits)
    finally:
        c.remove(force=True)
    archs = set(re.findall(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)", blob))
    assert {a.decode() for a in archs} == set(MATRIX.targets["hip-runtime"].archs)


def test_oci_labels(built_runtime, docker_client):
    for name in ("hip-devel", "hip-runtime"):
        t = MATRIX.targets[name]
        labels = docker_client.images.get(PLAN.targets[name].content_tag).labels
        assert labels["org.opencontainers.image.created"] == iso_utc(t.source_date_epoch)
        assert labels["org.opencontainers.image.title"] == name
        assert labels["org.opencontainers.image.version"] == t.version
        assert labels["io.rocmforge.content-hash"] == PLAN.targets[name].content_hash
        assert labels["io.rocmforge.archs"] == ",".join(t.archs)


def test_up_to_date_target_skips_the_builder(built_runtime, docker_client):
    before = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag).id
    proc = run_cli("build", "--target", "hip-runtime")
    assert proc.returncode == 0, proc.stderr
    assert "Step " not in proc.stderr and "building" not in proc.stderr
    # hip-devel, hip-runtime and hip-runtime's two variants
    assert proc.stderr.count("up to date") == 2 + len(PLAN.variants["hip-runtime"])
    assert docker_client.images.get(PLAN.targets["hip-runtime"].content_tag).id == before


def test_up_to_date_target_leaves_its_manifest_in_a_fresh_state_dir(built_runtime, docker_client, tmp_path):
    state = tmp_path / "state"
    proc = run_cli("--state-dir", str(state), "build", "--target", "hip-runtime")
    assert proc.returncode == 0, proc.stderr
    assert "building" not in proc.stderr
    written = json.loads((state / "artifacts" / "hip-runtime" / "manifest.json").read_text())
    assert written["image_id"] == docker_client.images.get(PLAN.targets["hip-runtime"].content_tag).id
    assert (state / "artifacts" / "hip-runtime" / "sbom.cdx.json").is_file()
    # Only the target asked for: its prerequisites' manifests are not written on the way.
    assert not (state / "artifacts" / "hip-devel").exists()


def test_failed_build_names_step_moves_no_tag_leaves_no_container(built_runtime, docker_client, tmp_path):
    matrix_path = copy_project(tmp_path)
    data = yaml.safe_load(matrix_path.read_text())
    # libamdhip64-5 is named only by hip-runtime, so its builder (hip-devel) stays up to date.
    data["stacks"]["debian13-rocm5.7"]["apt"]["libamdhip64-5"] = "0.0.0-does-not-exist"
    matrix_path.write_text(yaml.safe_dump(data, sort_keys=False))
    # A lock edited to agree with it, so the build gets as far as apt (the real lock would refuse).
    lock_path = tmp_path / "matrix.lock"
    lock = lockfile.load(lock_path)
    lock.apt["hip-runtime"]["libamdhip64-5"] = "0.0.0-does-not-exist"
    lock_path.write_text(lockfile.dump(lock))
    bad_plan = make_plan(load_matrix(matrix_path), tmp_path, lockfile.load(lock_path))
    readable = PLAN.targets["hip-runtime"].readable_tag
    readable_before = docker_client.images.get(readable).id
    before = engine_state(docker_client, "0.0.0-does-not-exist")  # in the failing step's command

    proc = run_cli("--matrix", str(matrix_path), "build", "--target", "hip-runtime")

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(r"failed at Step \d+/\d+ : RUN", proc.stderr), proc.stderr
    log = re.search(r"full log: (\S+)", proc.stderr).group(1)
    assert "0.0.0-does-not-exist" in Path(log).read_text()
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(bad_plan.targets["hip-runtime"].content_tag)
    assert docker_client.images.get(readable).id == readable_before
    # No container left by this build: only objects that name its failing pin are judged, since
    # other builds on this engine may start and remove their own meanwhile.
    assert_nothing_left(docker_client, before)


def test_build_refuses_unresolved_target_without_engine_work():
    proc = run_cli("build", "--target", "llama7b-train")
    assert proc.returncode == 2
    unresolved = PLAN.targets["llama7b-train"].unresolved
    assert unresolved and all(u in proc.stderr for u in unresolved), proc.stderr
    assert "has no digest" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bootstrapped_base_is_cached_by_recipe(built_runtime, docker_client):
    from rocmforge.resolve import bases

    ref = bases.bootstrap_ref("debian13-rocm5.7", MATRIX.stacks["debian13-rocm5.7"])
    img = docker_client.images.get(ref)
    assert img.attrs["Created"].startswith("1970-01-01")
    assert img.labels["io.rocmforge.recipe"] == bases.recipe_hash(MATRIX.stacks["debian13-rocm5.7"])


def test_manifest_and_sbom_are_byte_identical_and_complete(built_runtime, docker_client):
    import hashlib

    folder = ROOT / ".rocmforge" / "artifacts" / "hip-runtime"
    first = run_cli("manifest", "--target", "hip-runtime")
    assert first.returncode == 0, first.stderr
    sbom1 = (folder / "sbom.cdx.json").read_bytes()
    man1 = (folder / "manifest.json").read_bytes()
    assert run_cli("manifest", "--target", "hip-runtime").returncode == 0
    assert (folder / "sbom.cdx.json").read_bytes() == sbom1
    man = json.loads((folder / "manifest.json").read_text())
    assert json.loads(man1)["sbom_sha256"] == man["sbom_sha256"] == hashlib.sha256(sbom1).hexdigest()
    assert (folder / "sbom.cdx.json.sha256").read_text().split()[0] == man["sbom_sha256"]
    image = docker_client.images.get(PLAN.targets["hip-runtime"].content_tag)
    assert man["image_id"] == image.id
    assert man["dpkg"] == dpkg_versions(docker_client, image.id)
    assert man["base"]["recipe"] and man["base"]["image_id"]
    sbom = json.loads(sbom1)
    assert sbom["metadata"]["timestamp"].startswith("2025-12-01T00:00:00")
    purls = {c["purl"] for c in sbom["components"]}
    assert "pkg:deb/debian/rocminfo@6.1.2-2?arch=amd64&distro=debian13" in purls
    assert len(sbom["components"]) == len(man["dpkg"]) + len(man["python"])
