"""rocminfo runs in the image; with a GPU its agents match the target, and an integrated +
discrete mix is reported with the HIP_VISIBLE_DEVICES value that keeps only the discrete GPUs."""

import pytest

from rocmforge.inspect import rocminfo
from tests.suites.conftest import not_gpu_verified


@pytest.fixture(scope="module")
def run(container):
    r = container.exec(["rocminfo"], timeout=120)
    assert "command not found" not in r.output and r.rc != 127, "rocminfo is not installed in the image"
    return r, rocminfo.parse(r.output)


def test_rocminfo_runs_and_reports_driver_state(run, gpu):
    r, info = run
    if gpu.present:
        assert r.rc == 0, f"rocminfo failed with the GPU devices passed: {r.output[-1500:]}"
        assert info.driver_loaded and info.gpus, "rocminfo lists no GPU agent although /dev/kfd was passed"
    else:
        assert not info.driver_loaded, f"rocminfo claims a loaded driver on a host without /dev/kfd: {r.output[:500]}"
        assert any("ROCk module is NOT loaded" in p for p in info.problems), r.output[:500]


def test_gpu_agents_match_target(run, gpu, declared_archs, record_property):
    _, info = run
    if not gpu.present:
        not_gpu_verified(f"{gpu.reason_absent()}; rocminfo reports the driver not loaded")
    ours = [g for g in info.gpus if g in declared_archs]
    assert ours, f"no GPU agent of a declared architecture: rocminfo lists {info.gpus}, target declares {declared_archs}"
    figures = {"gpus": info.gpus}
    select = rocminfo.discrete_only_visible_devices(info)
    if select is not None:
        figures["HIP_VISIBLE_DEVICES"] = select
    record_property("figures", figures)
    if select is not None:
        print(f"integrated + discrete GPUs: set HIP_VISIBLE_DEVICES={select} to use only the discrete ones")
