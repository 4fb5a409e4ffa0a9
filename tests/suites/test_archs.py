"""Every GPU library the image should hold is there and carries code for every architecture the
target declares: the GPU-free predictor of hipErrorNoBinaryForGpu. The libraries come from what
the target installs (conftest.gpu_inventory), so a deleted library is named, not silently skipped."""

import json

from rocmforge.readers import archs
from tests.suites.conftest import PROBES_IN_CONTAINER, missing_expected


def test_declared_archs_are_covered(container, gpu_inventory, gpu_library_paths, declared_archs, record_property):
    missing_files = missing_expected(gpu_inventory)
    assert not missing_files, "GPU libraries missing, so their architectures cannot be checked " \
        "(hipErrorNoBinaryForGpu or a load failure ahead):\n  " + "\n  ".join(missing_files)
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/archs.py", "--json", *gpu_library_paths], timeout=900)
    assert r.rc in (0, 1) and r.stdout.strip().startswith("["), f"architecture scanner failed: {r.output[-2000:]}"
    results = [archs.FileArchs(**{**d, "archs": tuple(d["archs"]), "entries": tuple(d["entries"])})
               for d in json.loads(r.stdout)]
    gpu_libs = [f for f in results if f.archs]
    errors = [f"{f.path}: {f.error}" for f in results if f.error]
    record_property("figures", {"gpu_libraries": len(gpu_libs), "declared": declared_archs})
    assert gpu_libs, "no GPU code in any of the image's GPU libraries: " + ", ".join(gpu_library_paths[:10])
    missing = archs.library_coverage(results, declared_archs)
    assert not errors, "unreadable GPU code:\n  " + "\n  ".join(errors)
    assert not missing, "GPU libraries without code for a declared architecture (hipErrorNoBinaryForGpu ahead):\n" + \
        "\n".join(f"  {lib}: missing {', '.join(m)}" for lib, m in sorted(missing.items()))
