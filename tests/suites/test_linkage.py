"""Every host ELF object among the image's GPU libraries resolves all its shared libraries."""

import json

from rocmforge.inspect import ldd
from tests.suites.conftest import PROBES_IN_CONTAINER


def test_gpu_libraries_resolve(container, gpu_library_paths, has_python, record_property):
    assert has_python, "python3 is not in the image: the linkage probe cannot run"
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/linkage.py", *gpu_library_paths], timeout=600)
    assert r.rc == 0, f"linkage probe failed: {r.output[-2000:]}"
    objects = json.loads(r.stdout)
    host = {p: o for p, o in objects.items() if o["kind"] == "host"}
    gpu = [p for p, o in objects.items() if o["kind"] == "gpu"]
    assert host, f"no host ELF objects found under {gpu_library_paths}"
    broken = {}
    for path, o in sorted(host.items()):
        parsed = ldd.parse(o["ldd"])
        if parsed.missing:
            broken[path] = parsed.missing
        elif parsed.kind == "error":
            broken[path] = [parsed.message]
    record_property("figures", {"host_objects": len(host), "gpu_code_objects": len(gpu)})
    assert not broken, "unresolved shared libraries:\n" + "\n".join(
        f"  {p}: {', '.join(m)} not found" for p, m in broken.items())
