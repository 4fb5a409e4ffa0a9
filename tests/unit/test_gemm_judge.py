"""The GEMM suite's verdict on throughput figures: bounded below by a fraction of the GPU's peak
and above by 1.1x it (a faster figure means the work did not run), with the peaks from the
matrix. Pure: no GPU, no engine."""

from __future__ import annotations

import pytest

from rocmforge.data.suites.test_gemm import MAX_FRACTION_OF_PEAK, _judge, peak_for
from rocmforge.define.matrix import load_matrix
from rocmforge.shared.packagedata import PROBES
from tests.conftest import ROOT

GPUS = load_matrix(ROOT / "matrix.yaml").gpus


def figures(fp32, fp16, bf16, copy):
    return {
        "status": "ok",
        "fp32": {"tflops": fp32},
        "fp16": {"tflops": fp16},
        "bf16": {"tflops": bf16},
        "copy_tbps": copy,
    }


def test_a_plausible_mi210_passes_both_bounds():
    # rocBLAS SGEMM runs on MFMA on CDNA2: above the 22.6 vector peak, below the 45.3 matrix peak
    fr, low, high = _judge(figures(38.0, 150.0, 140.0, 1.35), GPUS["gfx90a"])
    assert low == [] and high == []
    assert fr["fp32_fraction_of_peak"] == round(38.0 / 45.3, 3)


@pytest.mark.parametrize(
    "figure, data",
    [
        ("fp32", figures(60.0, 150.0, 140.0, 1.35)),
        ("fp16", figures(38.0, 400.0, 140.0, 1.35)),
        ("bf16", figures(38.0, 150.0, 250.0, 1.35)),
        ("copy", figures(38.0, 150.0, 140.0, 9.9)),  # what a copy kernel that never ran reports
    ],
)
def test_a_figure_above_1_1x_peak_fails(figure, data):
    _, _, high = _judge(data, GPUS["gfx90a"])
    assert len(high) == 1 and high[0].startswith(figure + " ") and "impossible" in high[0]


def test_exactly_at_the_bound_passes_and_just_above_fails():
    peak = GPUS["gfx90a"].hbm_tbps
    assert _judge({"copy_tbps": peak * MAX_FRACTION_OF_PEAK}, GPUS["gfx90a"])[2] == []
    assert _judge({"copy_tbps": peak * MAX_FRACTION_OF_PEAK * 1.01}, GPUS["gfx90a"])[2]


def test_low_figures_still_fail_low():
    _, low, high = _judge(figures(2.0, 150.0, 140.0, 1.35), GPUS["gfx90a"])
    assert high == [] and len(low) == 1 and low[0].startswith("fp32 2.0 TFLOPS")


def test_bf16_without_its_own_peak_is_bounded_by_fp16():
    assert GPUS["gfx1100"].bf16_tflops is None
    assert peak_for(GPUS["gfx1100"], "bf16") == (GPUS["gfx1100"].fp16_tflops, "FP16 (no BF16 figure)")
    assert _judge({"bf16": {"tflops": 500.0}}, GPUS["gfx1100"])[2]


def test_every_figure_of_every_discrete_gpu_in_the_matrix_can_be_bounded():
    for gfx, gpu in GPUS.items():
        if gpu.integrated:
            continue
        for name in ("fp32", "fp16", "bf16", "copy"):
            assert peak_for(gpu, name)[0], f"{gfx}: no peak bounds {name}"


def test_a_figure_without_a_peak_beside_others_fails_as_unbounded():
    partial = GPUS["gfx90a"].model_copy(update={"fp16_tflops": None, "bf16_tflops": None})
    _, _, high = _judge({"fp16": {"tflops": 1.0}}, partial)
    assert high and "cannot be bounded" in high[0]
    # a GPU with no figures at all is not judged (the suite reports "not applicable")
    assert _judge({"fp32": {"tflops": 1.0}}, GPUS["gfx1036"]) == ({}, [], [])


def test_every_kernel_launch_in_the_smoke_program_is_checked():
    """A launch reports its errors (no code object for this GPU) only through hipGetLastError: each
    `<<<...>>>` in the program is followed by LAUNCH_OK on the same line, and dst is compared."""
    src = (PROBES / "rocblas_gemm_smoke.cpp").read_text()
    launches = [ln for ln in src.splitlines() if "<<<" in ln and "__global__" not in ln]
    assert len(launches) >= 3
    for ln in launches:
        for stmt in ln.split(";"):
            if "<<<" in stmt:
                assert "LAUNCH_OK" in ln[ln.index(stmt) :], f"unchecked launch: {ln.strip()}"
    assert "count_mismatches<<<" in src and '\\"copy_mismatches\\"' in src
    assert "copy_mismatches == 0" in src  # a wrong copy makes the run a wrong result
