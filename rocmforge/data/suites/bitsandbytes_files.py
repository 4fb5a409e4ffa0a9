"""Where bitsandbytes lives in an image and which library file ROCm's fork loads: what the linkage and
versions suites both ask of an image that declares a bitsandbytes component."""

from __future__ import annotations

import json

import pytest

from rocmforge.host.container import IMAGE_PYTHON

FIND_PACKAGE = (
    "import importlib.util, json; s = importlib.util.find_spec('bitsandbytes'); "
    "print(json.dumps(list(s.submodule_search_locations) if s else None))"
)


def bitsandbytes_components(declared_components: list[str]) -> list[str]:
    """The target's bitsandbytes components; the test is not applicable (skipped) without one."""
    comps = [c for c in declared_components if c.startswith("bitsandbytes")]
    if not comps:
        pytest.skip("not applicable: the target declares no bitsandbytes component")
    return comps


def package_dirs(container, component: str) -> list[str]:
    """The folders Python imports bitsandbytes from in the image; the test fails when it is not installed."""
    r = container.exec([IMAGE_PYTHON, "-c", FIND_PACKAGE], timeout=120)
    dirs = json.loads(r.stdout.strip().splitlines()[-1]) if r.rc == 0 and r.stdout.strip() else None
    assert dirs, f"component {component} is declared but bitsandbytes is not installed: {r.output[-500:]}"
    return dirs


def bnb_rocm_library_name(hip_version: str) -> str:
    """The one file name ROCm's bitsandbytes fork (cextension.get_cuda_bnb_library_path at 4aad810)
    loads for a HIP version M.m: libbitsandbytes_rocmMm.so, with _nohipblaslt below HIP 6.1."""
    major, minor = (int(x) for x in hip_version.split(".")[:2])
    return f"libbitsandbytes_rocm{major}{minor}{'_nohipblaslt' if major * 100 + minor < 601 else ''}.so"
