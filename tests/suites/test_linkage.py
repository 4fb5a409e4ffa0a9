"""Every GPU library the image should hold is there, and every host ELF object among them
resolves all its shared libraries. "Should hold" comes from what the target installs: the file
lists of its ROCm packages, its components' outputs and its Python distributions' RECORDs
(conftest.gpu_inventory), never from a pattern list that may rightly match nothing."""

import json

from rocmforge.readers import ldd
from tests.suites.conftest import PROBES_IN_CONTAINER, missing_expected


def test_expected_gpu_libraries_present(gpu_inventory, record_property):
    missing = missing_expected(gpu_inventory)
    record_property("figures", {"expected_gpu_files": len(gpu_inventory["files"]),
                                "rocm_packages": len(gpu_inventory["rocm_packages"])})
    assert not missing, "GPU libraries the image's packages and components install are missing:\n  " + \
        "\n  ".join(missing)


def test_gpu_libraries_resolve(container, gpu_library_paths, record_property):
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/linkage.py", *gpu_library_paths], timeout=600)
    assert r.rc == 0, f"linkage probe failed: {r.output[-2000:]}"
    objects = json.loads(r.stdout)
    host = {p: o for p, o in objects.items() if o["kind"] == "host"}
    gpu = [p for p, o in objects.items() if o["kind"] == "gpu"]
    assert host, f"no host ELF object among the image's GPU libraries ({len(gpu_library_paths)} files)"
    broken = {}
    for path, o in sorted(host.items()):
        parsed = ldd.parse(o["ldd"])
        if parsed.missing:
            broken[path] = [f"{m} not found" for m in parsed.missing]
        elif parsed.kind == "error":
            broken[path] = [parsed.message or o["ldd"][-300:]]
    record_property("figures", {"host_objects": len(host), "gpu_code_objects": len(gpu)})
    assert not broken, "unresolved shared libraries:\n" + "\n".join(
        f"  {p}: {', '.join(m)}" for p, m in broken.items())
