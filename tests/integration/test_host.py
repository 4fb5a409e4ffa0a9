"""doctor and run on this host (the real engine; a GPU only where the host has one)."""

from __future__ import annotations

import json
import re

import pytest

from rocmforge.host.container import host_gpu_access
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.docker
FIX = ROOT / "tests" / "fixtures" / "rocminfo" / "handwritten"
GPU = host_gpu_access()


def test_doctor_reports_the_host(docker_client):
    proc = run_cli("doctor", "--json")
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["engine"]["status"] == "ok"
    if not GPU.present:
        assert checks["kfd"]["status"] == "fail"
        assert "no AMD GPU device nodes" in checks["kfd"]["detail"]
        assert proc.returncode == 1
    assert proc.returncode == (1 if any(c["status"] == "fail" for c in report["checks"]) else 0)
    text = run_cli("doctor").stdout
    assert "kfd" in text and ("FAIL" in text) == (proc.returncode == 1)


@pytest.mark.parametrize("fixture, select", [("w7900-with-igpu-first.txt", "1"), ("w7900-with-igpu-second.txt", "0")])
def test_doctor_on_saved_rocminfo_selects_the_discrete_gpu(docker_client, fixture, select):
    proc = run_cli("doctor", "--json", "--rocminfo", str(FIX / fixture))
    report = json.loads(proc.stdout)
    recs = [r for r in report["recommendations"] if "HIP_VISIBLE_DEVICES" in r["env"]]
    assert recs and recs[0]["env"]["HIP_VISIBLE_DEVICES"] == select
    assert "gfx1036" in recs[0]["reason"]
    assert {c["name"]: c["status"] for c in report["checks"]}["kfd"] == "skipped"


def test_doctor_unreadable_rocminfo_is_a_user_error():
    proc = run_cli("doctor", "--rocminfo", "/nonexistent/rocminfo.txt")
    assert proc.returncode == 2 and "/nonexistent/rocminfo.txt" in proc.stderr and "Traceback" not in proc.stderr


def test_run_dry_run_prints_the_docker_command(docker_client):
    build = run_cli("build", "--target", "hip-devel")
    assert build.returncode == 0, build.stderr[-2000:]
    proc = run_cli("run", "--target", "hip-devel", "--dry-run", "--", "rocminfo")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "# docker" and lines[2] == "# podman", lines
    line, podman = lines[1], lines[3]
    assert podman.startswith("podman run --rm") and podman.endswith("rocminfo")
    assert (
        line.startswith("docker run --rm")
        and line.endswith("rocminfo")
        and "--shm-size=" in line
        and "--ipc=host" not in line
    )
    assert "rocmforge/hip-devel:content-" in line
    if GPU.present:
        assert "--device /dev/kfd" in line and "--group-add" in line
    else:
        assert "--device" not in line
        assert "WITHOUT a GPU" in proc.stderr


def test_run_executes_without_gpu(docker_client):
    proc = run_cli("run", "--target", "hip-devel", "--", "cat", "/etc/debian_version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("13")


KFD = ROOT / "tests" / "fixtures" / "kfd"


def _containers_of(client, *images: str) -> set[str]:
    """Containers of these images (by tag or ID: the ancestor filter matches no bare repository name)
    that `run` could have started. The suites' containers, which other tests on the same engine
    start meanwhile, carry the test-session label: they are not `run`'s."""
    from rocmforge.host.container import TEST_LABEL

    return {
        c.id
        for image in images
        for c in client.containers.list(all=True, filters={"ancestor": image})
        if TEST_LABEL not in (c.labels or {})
    }


def _content_tags(target: str) -> list[str]:
    from rocmforge.render.plan import load_plan

    return [tp.content_tag for tp in load_plan(ROOT / "matrix.yaml").images_of(target)]


def test_run_refuses_a_pruned_image_on_a_gpu_it_has_no_code_for(docker_client):
    """hip-devel keeps GPU files only for gfx90a and gfx1100: on a host whose KFD topology lists a
    gfx1030 it is refused before any container starts; on a gfx90a host it runs."""
    build = run_cli("build", "--target", "hip-devel")
    assert build.returncode == 0, build.stderr[-2000:]
    before = _containers_of(docker_client, *_content_tags("hip-devel"))
    proc = run_cli(
        "run",
        "--target",
        "hip-devel",
        "--kfd-topology",
        str(KFD / "rx6800-gfx1030"),
        "--",
        "cat",
        "/etc/debian_version",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "gfx1030" in lines[0] and "gfx90a, gfx1100 (pruned)" in lines[0], proc.stderr
    assert proc.stdout == ""
    assert _containers_of(docker_client, *_content_tags("hip-devel")) == before
    doctor = run_cli("doctor", "--kfd-topology", str(KFD / "rx6800-gfx1030"))
    assert doctor.returncode == 1 and re.search(
        r"^FAIL\s+coverage:hip-devel\s+target hip-devel: ", doctor.stdout, re.M
    ), doctor.stdout
    ok = run_cli("run", "--target", "hip-devel", "--kfd-topology", str(KFD / "mi210-gfx90a"), "--dry-run", "--", "true")
    assert ok.returncode == 0, ok.stderr


ROCMINFO = ROOT / "tests" / "fixtures" / "rocminfo" / "handwritten"


def test_run_picks_the_smallest_image_for_the_hosts_gpus(docker_client):
    """hip-runtime's main image and its gfx90a and gfx1100 variants: a saved W7900 host (its iGPU
    first) runs the gfx1100 variant, an MI210 the gfx90a one; --arch overrides; GPUs no image
    covers are refused (exit 1) with the list of images, before any container starts."""
    from rocmforge.render.plan import load_plan

    build = run_cli("build", "--target", "hip-runtime")
    assert build.returncode == 0, build.stderr[-2000:]
    plan = load_plan(ROOT / "matrix.yaml")
    gfx90a, gfx1100 = (plan.variant("hip-runtime", (a,)).content_tag for a in ("gfx90a", "gfx1100"))

    def dry_run(*args, env=None):
        return run_cli("run", "--target", "hip-runtime", *args, "--dry-run", "--", "rocminfo", env=env)

    w7900 = dry_run("--rocminfo", str(ROCMINFO / "w7900-with-igpu-first.txt"))
    assert w7900.returncode == 0 and gfx1100 in w7900.stdout, w7900.stderr
    assert "integrated GPU(s) left out" in w7900.stderr
    mi210 = dry_run("--kfd-topology", str(KFD / "mi210-gfx90a"))
    assert mi210.returncode == 0 and gfx90a in mi210.stdout, mi210.stderr
    forced = dry_run("--rocminfo", str(ROCMINFO / "mi210.txt"), "--arch", "gfx1100")
    assert forced.returncode == 0 and gfx1100 in forced.stdout, forced.stderr
    everything = _content_tags("hip-runtime")
    assert gfx90a in everything and gfx1100 in everything
    before = _containers_of(docker_client, *everything)
    igpu_only = dry_run("--rocminfo", str(ROCMINFO / "w7900-with-igpu-first.txt"), env={"HIP_VISIBLE_DEVICES": "0"})
    assert igpu_only.returncode == 1 and igpu_only.stdout == "", igpu_only.stderr
    assert "gfx1036" in igpu_only.stderr and gfx90a in igpu_only.stderr and gfx1100 in igpu_only.stderr
    assert _containers_of(docker_client, *everything) == before
