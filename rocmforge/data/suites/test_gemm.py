"""GEMM smoke: FP32/FP16/BF16 results against a float64 reference, TFLOPS and copy bandwidth
against each GPU's peak in the matrix, bounded above by 1.1x that peak. Backends: PyTorch when
the image has it, else the rocBLAS program.

Both checks need a GPU (marked `gpu`): without one they are "not GPU-verified" (a CPU-only
correctness check is reported in the reason, never as a pass), and where a GPU is required they
fail. A probe that reports an error fails. Throughput is judged for every arch with a peak in the
matrix: each measured figure must reach MIN_FRACTION_OF_PEAK of it; the seed's baselines are
checked on their reference GPU as well."""

import json

import pytest

from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, not_gpu_verified
from rocmforge.host.container import IMAGE_PYTHON

GEMM_BIN = "/opt/rocmforge/bin/rocblas-gemm-smoke"
# A working GPU reaches far more than this at n=8192; less means a wrong code path (e.g. a
# fallback kernel, an emulated ISA through HSA_OVERRIDE_GFX_VERSION) or a throttled device.
MIN_FRACTION_OF_PEAK = {"tflops": 0.25, "copy": 0.5}
# No figure may beat the vendor's peak: more than this means the work did not run (a failed
# launch returns at once) or the timing is wrong, and is a failure, never a fast GPU.
MAX_FRACTION_OF_PEAK = 1.1


def peak_for(peaks, figure: str) -> tuple[float | None, str]:
    """The highest rate the GPU can reach for a figure, and where it comes from: the dtype's own
    peak, the FP32 matrix-core peak where one is known (rocBLAS SGEMM uses MFMA on CDNA), and
    for BF16 without a figure the FP16 one (no AMD GPU runs dense BF16 faster than FP16)."""
    if figure == "copy":
        return peaks.hbm_tbps, "HBM"
    own = getattr(peaks, f"{figure}_tflops", None)
    if figure == "fp32" and getattr(peaks, "fp32_matrix_tflops", None):
        return max(own or 0, peaks.fp32_matrix_tflops), "FP32 matrix-core"
    if figure == "bf16" and not own and peaks.fp16_tflops:
        return peaks.fp16_tflops, "FP16 (no BF16 figure)"
    return own, figure.upper()


@pytest.fixture(scope="module")
def backend(container, torch_info, declared_archs):
    if torch_info is not None:
        return "torch", [IMAGE_PYTHON, f"{PROBES_IN_CONTAINER}/gemm_torch.py"]  # torch: the image's own
    if container.exec(["test", "-x", GEMM_BIN]).rc == 0:
        return "rocblas", [GEMM_BIN]
    if container.exec(["sh", "-c", "command -v hipcc"]).rc == 0:
        # A devel image: compile the same probe for the target's archs, as the runtime image does.
        arch_flags = " ".join(f"--offload-arch={a}" for a in declared_archs)
        r = container.exec(
            f"hipcc -O2 {arch_flags} -o /tmp/rocblas-gemm-smoke {PROBES_IN_CONTAINER}/rocblas_gemm_smoke.cpp -lrocblas",
            timeout=600,
        )
        assert r.rc == 0, f"compiling the GEMM probe failed: {r.output[-2000:]}"
        return "rocblas", ["/tmp/rocblas-gemm-smoke"]
    pytest.fail("no GEMM backend in the image (no torch, no rocblas-gemm-smoke, no hipcc)")


@pytest.fixture(scope="module")
def result(container, backend):
    name, cmd = backend
    r = container.exec(cmd, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{name} GEMM probe printed no result (exit {r.rc}): {r.output[-2000:]}"
    data = json.loads(lines[-1])
    assert data.get("status") in ("ok", "wrong-result", "no-gpu"), (
        f"{name} GEMM probe reported an error (exit {r.rc}): {json.dumps(data)}"
    )
    return r.rc, data


@pytest.mark.gpu
def test_gemm_correctness(result, backend):
    rc, data = result
    if data["status"] == "no-gpu":
        cpu = data.get("cpu_check")
        if cpu:
            bad = {k: v for k, v in cpu.items() if not v["ok"]}
            assert not bad, f"CPU GEMM disagrees with the float64 reference: {bad}"
            not_gpu_verified(
                f"{data.get('reason')}; only the CPU GEMM was checked against float64 ({backend[0]} backend)"
            )
        not_gpu_verified(f"{backend[0]} GEMM could not run: {data.get('reason')}; no CPU backend in this image")
    assert data["status"] == "ok", f"GEMM results wrong: {data}"


def _judge(data: dict, peaks) -> tuple[dict, list[str], list[str]]:
    """(fractions of peak, figures too low, figures impossibly high)."""
    figures, low, high = {}, [], []
    if not any(peak_for(peaks, name)[0] for name in ("fp32", "fp16", "bf16", "copy")):
        return figures, low, high  # nothing to judge by: the test reports "not applicable"
    for name in ("fp32", "fp16", "bf16", "copy"):
        value = data.get("copy_tbps") if name == "copy" else (data.get(name) or {}).get("tflops")
        if value is None:
            continue
        unit, shown = ("TB/s", f"{value:.3f}") if name == "copy" else ("TFLOPS", f"{value:.1f}")
        peak, which = peak_for(peaks, name)
        if not peak:
            high.append(f"{name} {shown} {unit} cannot be bounded: the matrix has no peak for it")
            continue
        frac = value / peak
        figures[f"{name}_fraction_of_peak"] = round(frac, 3)
        if frac > MAX_FRACTION_OF_PEAK:
            high.append(
                f"{name} {shown} {unit} is {frac:.0%} of the {which} peak {peak} (more than "
                f"{MAX_FRACTION_OF_PEAK:.0%} of peak is impossible: the work did not run or the timing is wrong)"
            )
        floor = MIN_FRACTION_OF_PEAK["copy" if name == "copy" else "tflops"]
        own = peaks.hbm_tbps if name == "copy" else getattr(peaks, f"{name}_tflops", None)
        if own and value / own < floor:
            label = f"{own} TB/s" if name == "copy" else f"{own}"
            low.append(f"{name} {shown} {unit} is {value / own:.0%} of the {label} peak (minimum {floor:.0%})")
    return figures, low, high


@pytest.mark.gpu
def test_gemm_throughput(result, backend, matrix, record_property):
    rc, data = result
    if data["status"] == "no-gpu":
        not_gpu_verified(f"{data.get('reason')} ({backend[0]} backend)")
    assert data["status"] == "ok", f"no throughput from a GEMM with wrong results: {data}"
    arch = data.get("gfx", "").split(":")[0]
    figures = {k: data[k] for k in ("fp32", "fp16", "bf16", "copy_tbps", "gfx", "device") if k in data}
    gpu = matrix.gpus.get(arch)
    low, high = [], []
    if gpu:
        judged, low, high = _judge(data, gpu)
        figures.update(judged)
    record_property("figures", figures)
    assert not high, f"impossible throughput on {arch} ({data.get('device')}): " + "; ".join(high)
    base = matrix.baselines
    if arch == base.gpu:
        low += [
            f"{k} {v:.2f} below the seed's baseline {t}"
            for k, v, t in (
                ("fp32 TFLOPS", data["fp32"]["tflops"], base.fp32_tflops),
                ("fp16 TFLOPS", data["fp16"]["tflops"], base.fp16_tflops),
                ("copy TB/s", data["copy_tbps"], base.hbm_tbps),
            )
            if v < t
        ]
    assert not low, f"throughput too low on {arch} ({data.get('device')}): " + "; ".join(low)
    if not gpu or not any(k.endswith("_fraction_of_peak") for k in figures):
        pytest.skip(f"not applicable: the matrix has no peak figures for {arch or 'this GPU'}; measured {figures}")


def users_command(backend) -> list[str] | None:
    """The GEMM smoke as a user types it (docs/gpu-host.md): the program by name, found
    through the image's PATH, or torch's probe as installed in the image; small, so it is quick on
    a GPU too. None: the image has no GEMM program of its own (a devel image compiles one)."""
    name, cmd = backend
    if name == "rocblas" and cmd == [GEMM_BIN]:
        return ["rocblas-gemm-smoke", "256", "1"]
    if name == "torch":
        return ["python3", "/opt/rocmforge/probes/gemm_torch.py", "256"]
    return None


# The exit code each status ends with (rocblas_gemm_smoke.cpp, gemm_torch.py).
STATUS_EXIT = {"ok": 0, "wrong-result": 1, "no-gpu": 3}


def test_gemm_as_users_run_it(result, backend, run_as_users, record_property):
    """The smoke program run through the image's own entrypoint and environment reaches the same
    verdict as the exec'd one (no GPU: "no-gpu", exit 3); a broken entrypoint or PATH fails,
    naming the command and what it printed."""
    argv = users_command(backend)
    if argv is None:
        pytest.skip(f"not applicable: the image has no GEMM program of its own ({backend[0]} backend compiled here)")
    what, r = run_as_users(argv, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{what} printed no result (exit {r.rc}): {r.output[-1500:]!r}"
    data = json.loads(lines[-1])
    want = result[1]["status"]
    record_property("figures", {"users_run_status": data.get("status")})
    assert data.get("status") == want and r.rc == STATUS_EXIT.get(want), (
        f"{what} says {data.get('status')!r} (exit {r.rc}), the exec'd probe {want!r}: {r.output[-800:]!r}"
    )
