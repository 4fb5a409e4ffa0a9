"""GEMM smoke: FP32/FP16/BF16 results against a float64 reference, TFLOPS against the GPU's
peak, and copy bandwidth. Backends: PyTorch when the image has it, else the rocBLAS program."""

import json

import pytest

from tests.suites.conftest import PROBES_IN_CONTAINER, not_gpu_verified

GEMM_BIN = "/opt/rocmforge/bin/rocblas-gemm-smoke"


@pytest.fixture(scope="module")
def backend(container, torch_info, declared_archs):
    if torch_info is not None:
        return "torch", ["python3", f"{PROBES_IN_CONTAINER}/gemm_torch.py"]
    if container.exec(["test", "-x", GEMM_BIN]).rc == 0:
        return "rocblas", [GEMM_BIN]
    if container.exec(["sh", "-c", "command -v hipcc"]).rc == 0:
        # A devel image: compile the same probe for the target's archs, as the runtime image does.
        arch_flags = " ".join(f"--offload-arch={a}" for a in declared_archs)
        r = container.exec(f"hipcc -O2 {arch_flags} -o /tmp/rocblas-gemm-smoke "
                           f"{PROBES_IN_CONTAINER}/rocblas_gemm_smoke.cpp -lrocblas", timeout=600)
        assert r.rc == 0, f"compiling the GEMM probe failed: {r.output[-2000:]}"
        return "rocblas", ["/tmp/rocblas-gemm-smoke"]
    pytest.fail("no GEMM backend in the image (no torch, no rocblas-gemm-smoke, no hipcc)")


@pytest.fixture(scope="module")
def result(container, backend):
    name, cmd = backend
    r = container.exec(cmd, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{name} GEMM probe printed no result (exit {r.rc}): {r.output[-2000:]}"
    return r.rc, json.loads(lines[-1])


def test_gemm_correctness(result, backend):
    rc, data = result
    if data["status"] == "no-gpu" and "cpu_check" not in data:
        not_gpu_verified(f"{backend[0]} GEMM could not run: {data.get('reason')}; no CPU backend in this image")
    if data["status"] == "no-gpu":
        bad = {k: v for k, v in data["cpu_check"].items() if not v["ok"]}
        assert not bad, f"CPU GEMM disagrees with the float64 reference: {bad}"
        return
    assert data["status"] == "ok", f"GEMM results wrong: {data}"


def test_gemm_throughput(result, backend, matrix, record_property):
    rc, data = result
    if data["status"] == "no-gpu":
        not_gpu_verified(f"{data.get('reason')} ({backend[0]} backend)")
    gpu = matrix.gpus.get(data.get("gfx", "").split(":")[0])
    figures = {k: data[k] for k in ("fp32", "fp16", "bf16", "copy_tbps", "gfx", "device") if k in data}
    if gpu:
        for dtype, peak in (("fp32", gpu.fp32_tflops), ("fp16", gpu.fp16_tflops), ("bf16", gpu.bf16_tflops)):
            if peak and dtype in data:
                figures[f"{dtype}_fraction_of_peak"] = round(data[dtype]["tflops"] / peak, 3)
        if gpu.hbm_tbps:
            figures["copy_fraction_of_peak"] = round(data["copy_tbps"] / gpu.hbm_tbps, 3)
    record_property("figures", figures)
    base = matrix.baselines
    if data.get("gfx", "").split(":")[0] == base.gpu:
        low = [f"{k} {v:.1f} < {t}" for k, v, t in (("fp32 TFLOPS", data["fp32"]["tflops"], base.fp32_tflops),
                                                   ("fp16 TFLOPS", data["fp16"]["tflops"], base.fp16_tflops),
                                                   ("copy TB/s", data["copy_tbps"], base.hbm_tbps)) if v < t]
        assert not low, f"below the seed's baselines on {base.gpu}: {'; '.join(low)}"
