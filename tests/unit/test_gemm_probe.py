"""The PyTorch GEMM probe on this (GPU-less) host: CPU correctness against float64, and an honest
"no-gpu" status instead of a throughput figure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

torch = pytest.importorskip("torch", reason="torch not installed (scripts/with-engine installs the CPU build)")
PROBE = ROOT / "probes" / "gemm_torch.py"


def _probe_module():
    spec = importlib.util.spec_from_file_location("gemm_torch", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_correctness_and_no_gpu_status():
    if torch.cuda.is_available():
        pytest.skip("not applicable: this host has a torch GPU device; the GPU path is for the suites")
    proc = subprocess.run([sys.executable, str(PROBE), "512"], capture_output=True, text=True, timeout=600)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 3 and data["status"] == "no-gpu"
    assert "tflops" not in json.dumps(data), "no throughput may be claimed without a GPU"
    for dtype in ("fp32", "fp16", "bf16"):
        assert data["cpu_check"][dtype]["ok"], data["cpu_check"]


def test_wrong_results_are_caught():
    mod = _probe_module()
    a = torch.rand(64, 64) * 2 - 1
    b = torch.rand(64, 64) * 2 - 1
    assert mod.rel_err(a @ b, a, b) <= mod.TOL["fp32"]
    wrong = a @ b
    wrong[3, 5] += 5.0
    assert mod.rel_err(wrong, a, b) > mod.TOL["bf16"]
