"""doctor and run on this host (the real engine; a GPU only where the host has one)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_cli
from rocmforge.container import host_gpu_access

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
    line = proc.stdout.strip()
    assert line.startswith("docker run --rm") and line.endswith("rocminfo") and "--ipc=host" in line
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
