"""rocminfo runs in the image; with a GPU its agents match the target, and an integrated +
discrete mix is reported with the HIP_VISIBLE_DEVICES value that keeps only the discrete GPUs.
Without a GPU it must still run and say exactly that the driver is not loaded: a rocminfo that
crashes or prints something else fails, whatever the host."""

import pytest

from rocmforge.data.suites.conftest import not_gpu_verified
from rocmforge.verify.readers import rocminfo


@pytest.fixture(scope="module")
def run(container):
    r = container.exec(["rocminfo"], timeout=120)
    assert "command not found" not in r.output and r.rc not in (126, 127), (
        f"rocminfo is not installed in the image (exit {r.rc}): {r.output[-300:]}"
    )
    assert not r.timed_out, "rocminfo hung (killed after 120 s)"
    return r, rocminfo.parse(r.output)


def _crashed(r) -> str | None:
    if r.rc >= 128:
        return f"rocminfo crashed (exit {r.rc}, signal {r.rc - 128}): {r.output[-500:]!r}"
    if r.rc not in (0, 1):
        return f"rocminfo failed (exit {r.rc}): {r.output[-500:]!r}"
    return None


def test_rocminfo_runs_and_reports_driver_state(run, gpu):
    r, info = run
    crash = _crashed(r)
    assert crash is None, crash
    if gpu.present:
        assert r.rc == 0, f"rocminfo failed with the GPU devices passed: {r.output[-1500:]}"
        assert info.driver_loaded and info.gpus, "rocminfo lists no GPU agent although /dev/kfd was passed"
    else:
        assert any("ROCk module is NOT loaded" in p for p in info.problems) and not info.driver_loaded, (
            f"without /dev/kfd rocminfo must report 'ROCk module is NOT loaded'; it printed (exit {r.rc}): "
            f"{r.output[:500]!r}"
        )
        assert r.rc == 1, f"rocminfo reported the driver not loaded but exited {r.rc}, not 1"


@pytest.mark.gpu
def test_gpu_agents_match_target(run, gpu, declared_archs, record_property):
    r, info = run
    if not gpu.present:
        not_gpu_verified(f"{gpu.reason_absent()}; rocminfo reports the driver not loaded")
    if not info.gpus:
        not_gpu_verified(
            f"/dev/kfd was passed but rocminfo lists no GPU agent (exit {r.rc}): "
            f"{'; '.join(info.problems) or r.output[-300:]}"
        )
    ours = [g for g in info.gpus if g in declared_archs]
    assert ours, (
        f"no GPU agent of a declared architecture: rocminfo lists {info.gpus}, target declares {declared_archs}"
    )
    figures = {"gpus": info.gpus}
    select = rocminfo.discrete_only_visible_devices(info)
    if select is not None:
        figures["HIP_VISIBLE_DEVICES"] = select
    record_property("figures", figures)
    if select is not None:
        print(f"integrated + discrete GPUs: set HIP_VISIBLE_DEVICES={select} to use only the discrete ones")


def test_rocminfo_as_users_run_it(run, run_as_users, gpu):
    """`docker run IMAGE rocminfo` (the image's entrypoint and environment, not an exec past
    them) gives the same verdict as the exec'd rocminfo: an entrypoint that is missing, exits
    at once or prints something else fails, naming the command and what it printed."""
    what, r = run_as_users(["rocminfo"], timeout=120)
    assert not r.timed_out, f"{what} hung (killed after 120 s)"
    info = rocminfo.parse(r.output)
    crash = _crashed(r)
    assert crash is None, f"{what}: {crash}"
    exec_r, exec_info = run
    if gpu.present:
        assert r.rc == 0 and info.driver_loaded and info.gpus == exec_info.gpus, (
            f"{what} lists GPU agents {info.gpus} (exit {r.rc}), the exec'd rocminfo {exec_info.gpus}: "
            f"{r.output[-800:]!r}"
        )
    else:
        assert r.rc == 1 and any("ROCk module is NOT loaded" in p for p in info.problems), (
            f"{what} must report 'ROCk module is NOT loaded' and exit 1 without /dev/kfd, as the exec'd "
            f"rocminfo does; it printed (exit {r.rc}): {r.output[:500]!r}"
        )
