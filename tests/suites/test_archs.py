"""Every GPU library in the image carries code for every architecture the target declares:
the GPU-free predictor of hipErrorNoBinaryForGpu."""

import json

from rocmforge.inspect import archs
from tests.suites.conftest import PROBES_IN_CONTAINER


def test_declared_archs_are_covered(container, gpu_library_paths, declared_archs, has_python, record_property):
    assert has_python, "python3 is not in the image: the architecture scanner cannot run"
    # bash expands the globs and keeps only the locations this image has.
    r = container.exec("shopt -s nullglob; found=(); for p in " + " ".join(gpu_library_paths) +
                       '; do [ -e "$p" ] && found+=("$p"); done; '
                       f'python3 {PROBES_IN_CONTAINER}/archs.py --json "${{found[@]}}"', timeout=600)
    assert r.rc == 0, f"architecture scanner failed: {r.output[-2000:]}"
    results = [archs.FileArchs(**{**d, "archs": tuple(d["archs"]), "entries": tuple(d["entries"])})
               for d in json.loads(r.stdout)]
    gpu_libs = [f for f in results if f.archs]
    errors = [f"{f.path}: {f.error}" for f in results if f.error]
    assert gpu_libs, "no GPU code found in any GPU library location"
    missing = archs.library_coverage(results, declared_archs)
    record_property("figures", {"gpu_libraries": len(gpu_libs), "declared": declared_archs})
    assert not errors, "unreadable GPU code:\n  " + "\n  ".join(errors)
    assert not missing, "GPU libraries without code for a declared architecture (hipErrorNoBinaryForGpu ahead):\n" + \
        "\n".join(f"  {lib}: missing {', '.join(m)}" for lib, m in sorted(missing.items()))
