"""GPU honesty of the suites, both ways, without a GPU or an engine: the suites' own functions
are called directly.

- without /dev/kfd a GPU check is skipped "not GPU-verified: ..." (never passed);
- with /dev/kfd, or --require-gpu, the same check fails;
- a CPU-only GEMM correctness check is not a pass;
- throughput is judged against every arch's peak in the matrix, not only the baseline GPU's."""

from __future__ import annotations

import warnings

import pytest

from rocmforge.data.suites import conftest as suites
from rocmforge.define.matrix import load_matrix
from rocmforge.host.container import GpuAccess
from rocmforge.shared.packagedata import SUITES
from rocmforge.verify import suites as suite_runs
from tests.conftest import ROOT

with warnings.catch_warnings():  # its `gpu` marker is registered by the suites' conftest, not here
    warnings.simplefilter("ignore")
    from rocmforge.data.suites import test_gemm

MATRIX = load_matrix(ROOT / "matrix.yaml")


class FakeConfig:
    def __init__(self, require_gpu=False):
        self.require_gpu, self.markers = require_gpu, []

    def getoption(self, name, default=None):
        return self.require_gpu if name == "--require-gpu" else default

    def addinivalue_line(self, key, line):
        self.markers.append(line)


@pytest.fixture
def host(monkeypatch):
    def configure(kfd: bool, require_gpu: bool = False):
        access = GpuAccess(devices=("/dev/kfd",)) if kfd else GpuAccess()
        monkeypatch.setattr(suites, "host_gpu_access", lambda: access)
        monkeypatch.setitem(suites._GPU_REQUIRED, "why", None)
        suites.pytest_configure(FakeConfig(require_gpu))

    return configure


def test_gpu_less_host_skips_as_not_gpu_verified(host):
    host(kfd=False)
    with pytest.raises(pytest.skip.Exception, match="^not GPU-verified: no device"):
        suites.not_gpu_verified("no device")


@pytest.mark.parametrize(
    "kfd, require, why",
    [
        (True, False, "this host has /dev/kfd"),
        (False, True, "--require-gpu was given"),
        (True, True, "--require-gpu was given"),
    ],
)
def test_gpu_required_turns_it_into_a_failure(host, kfd, require, why):
    host(kfd=kfd, require_gpu=require)
    with pytest.raises(pytest.fail.Exception, match=f"GPU required \\({why}\\).*no ROCm-capable device"):
        suites.not_gpu_verified("no ROCm-capable device is detected")


CPU_OK = {
    "status": "no-gpu",
    "reason": "torch.cuda.is_available() is False",
    "cpu_check": {d: {"max_rel_err": 1e-6, "ok": True} for d in ("fp32", "fp16", "bf16")},
}


def test_cpu_only_gemm_is_not_a_pass(host):
    host(kfd=False)
    with pytest.raises(pytest.skip.Exception, match="^not GPU-verified: .*only the CPU GEMM was checked"):
        test_gemm.test_gemm_correctness((3, CPU_OK), ("torch", []))
    host(kfd=True)
    with pytest.raises(pytest.fail.Exception, match="GPU required"):
        test_gemm.test_gemm_correctness((3, CPU_OK), ("torch", []))


def test_wrong_cpu_gemm_fails_even_without_a_gpu(host):
    host(kfd=False)
    bad = {**CPU_OK, "cpu_check": {**CPU_OK["cpu_check"], "bf16": {"max_rel_err": 0.9, "ok": False}}}
    with pytest.raises(AssertionError, match="CPU GEMM disagrees"):
        test_gemm.test_gemm_correctness((1, bad), ("torch", []))


def gpu_result(gfx, fp32, fp16, bf16, copy):
    return {
        "status": "ok",
        "gfx": gfx,
        "device": "test",
        "copy_tbps": copy,
        **{k: {"tflops": v, "max_rel_err": 0.0} for k, v in (("fp32", fp32), ("fp16", fp16), ("bf16", bf16))},
    }


def test_throughput_judged_on_every_arch_with_a_peak(host):
    host(kfd=True)
    props = []
    record = lambda k, v: props.append((k, v))  # noqa: E731
    # gfx1100 is not the baseline GPU: before, any figure passed there.
    with pytest.raises(AssertionError, match=r"fp32 1\.0 TFLOPS is 2% of the 61\.3 peak"):
        test_gemm.test_gemm_throughput(
            (0, gpu_result("gfx1100", 1.0, 100.0, 90.0, 0.8)), ("rocblas", []), MATRIX, record
        )
    # Healthy figures pass (fp16 on the W7900 and copy judged, bf16 has no peak there).
    test_gemm.test_gemm_throughput(
        (0, gpu_result("gfx1100:xnack-", 30.0, 100.0, 90.0, 0.8)), ("rocblas", []), MATRIX, record
    )
    assert props[-1][1]["fp16_fraction_of_peak"] == round(100.0 / 122.6, 3)
    # Baselines still apply on the reference GPU.
    with pytest.raises(AssertionError, match="below the seed's baseline 28.0"):
        test_gemm.test_gemm_throughput(
            (0, gpu_result("gfx90a", 20.0, 150.0, 150.0, 1.6)), ("rocblas", []), MATRIX, record
        )


def test_throughput_without_peaks_is_not_a_pass(host):
    host(kfd=True)
    with pytest.raises(pytest.skip.Exception, match="not applicable: the matrix has no peak figures for gfx1036"):
        test_gemm.test_gemm_throughput(
            (0, gpu_result("gfx1036", 1.0, 1.0, 1.0, 0.1)), ("rocblas", []), MATRIX, lambda *a: None
        )


def test_throughput_never_from_wrong_results(host):
    host(kfd=True)
    with pytest.raises(AssertionError, match="no throughput from a GEMM with wrong results"):
        test_gemm.test_gemm_throughput(
            (1, {**gpu_result("gfx1100", 60, 120, 120, 0.8), "status": "wrong-result"}),
            ("rocblas", []),
            MATRIX,
            lambda *a: None,
        )


def test_summary_keeps_not_gpu_verified_and_failures_apart():
    rows = [
        {
            "suite": "gemm",
            "test": "a",
            "phase": "call",
            "outcome": "skipped",
            "detail": "not GPU-verified: no /dev/kfd",
            "figures": None,
        },
        {
            "suite": "rocminfo",
            "test": "b",
            "phase": "call",
            "outcome": "failed",
            "detail": "GPU required (--require-gpu was given) but ...",
            "figures": None,
        },
    ]
    s = suite_runs.summarise(rows)
    assert s["gemm"].status == "not GPU-verified" and s["gemm"].passed == 0
    assert s["rocminfo"].status == "failed"
    assert s["linkage"].status == "failed" and s["linkage"].detail == "the suite did not run"
    assert ("workload" in s) == (SUITES / "test_workload.py").is_file()


def test_pytest_exit_status_is_part_of_the_verdict():
    """A run that exits non-zero with no suite failed (a collection error, a crash) is not a pass."""
    rows = [
        {"suite": s, "test": "t", "phase": "call", "outcome": "passed", "detail": "", "figures": None}
        for s in suite_runs.suites_present()
    ]
    clean = suite_runs.judge(suite_runs.summarise(rows), rows, 0, "")
    assert "pytest" not in clean and all(s.status == "passed" for s in clean.values())
    crashed = suite_runs.judge(suite_runs.summarise(rows), rows, 2, "ERROR collecting tests/suites/test_archs.py")
    assert crashed["pytest"].status == "failed"
    assert "pytest exited 2" in crashed["pytest"].detail and "ERROR collecting" in crashed["pytest"].detail
    assert suite_runs.judge({}, [], 1, "boom")["suites"].status == "failed"
