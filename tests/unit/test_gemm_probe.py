"""The PyTorch GEMM probe on this (GPU-less) host: CPU correctness against float64, and an honest
"no-gpu" status instead of a throughput figure.

torch comes from the project's environment (scripts/python-env installs the CPU build from pip's
local wheel directory). Without it these tests skip on a workstation and fail under CI, where no
test may skip."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from rocmforge.shared.packagedata import PROBES

PROBE = PROBES / "gemm_torch.py"
# Every device hidden, so the probe takes its no-GPU path even on a host that has one.
NO_DEVICES = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


def _import_torch():
    try:
        import torch as module
    except ImportError as exc:
        message = (
            f"torch is not installed ({exc}); scripts/python-env installs the CPU build "
            "(torch==2.13.0 from pip's local wheel directory)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + " (CI requires it: no test skips there)", pytrace=False)
        pytest.skip(message)
    return module


@pytest.fixture(scope="module")
def torch():
    return _import_torch()


def _probe_module():
    spec = importlib.util.spec_from_file_location("gemm_torch", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_correctness_and_no_gpu_status(torch):
    proc = subprocess.run(
        [sys.executable, str(PROBE), "512"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **NO_DEVICES},
    )
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 3 and data["status"] == "no-gpu", data
    assert "tflops" not in json.dumps(data), "no throughput may be claimed without a GPU"
    for dtype in ("fp32", "fp16", "bf16"):
        assert data["cpu_check"][dtype]["ok"], data["cpu_check"]


def test_wrong_results_are_caught(torch):
    mod = _probe_module()
    a = torch.rand(64, 64) * 2 - 1
    b = torch.rand(64, 64) * 2 - 1
    assert mod.rel_err(a @ b, a, b) <= mod.TOL["fp32"]
    wrong = a @ b
    wrong[3, 5] += 5.0
    assert mod.rel_err(wrong, a, b) > mod.TOL["bf16"]


def test_missing_torch_fails_under_ci(monkeypatch):
    """The guard itself: under CI a missing torch is a failure, not a skip."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(pytest.fail.Exception, match="CI requires it"):
        _import_torch()
