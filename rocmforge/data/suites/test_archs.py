"""Every GPU library the image should hold is there and carries code that every device the target
declares can run: the GPU-free predictor of hipErrorNoBinaryForGpu.

The libraries come from what the target installs (conftest.gpu_inventory), so a deleted library is
named, not silently skipped. Coverage is judged on full target IDs as the HIP runtime matches them
(probes/gfxnames.py: device_targets, runs_on): code only for gfx90a:xnack+ does not cover a declared
gfx90a, whose default-mode devices run with XNACK off. Every file of a GPU package and every
component output must carry GPU code, unless it is on the probe's HOST_ONLY list with a reason; a
Python distribution's files are held to that only where their name says they are GPU libraries
(bitsandbytes' ROCm library, torch's HIP library).

Every file is read whole inside the image (probes/wholefile.py): each code object's layout and
notes, each offload bundle's entries, each compressed bundle decompressed, each Tensile catalogue
walked to its last byte; an empty or foreign file where code is expected fails, and a per-arch
file of a Tensile folder must hold code for the target its name says (xnack/sramecc included),
each file judged on its own. The Tensile folders are walked too, so a file the packages never
listed (a kernel file copied in) is read like the rest."""

import json
import os
import re

import pytest

from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, missing_expected
from rocmforge.render import archprune
from rocmforge.verify.readers import archs

# Files of a Python distribution that are GPU libraries by name; its other files are host code.
PYTHON_GPU_LIBRARY = re.compile(
    r"(?:^|/)lib(?:bitsandbytes_(?:rocm|hip)\w*|torch_hip|c10_hip|MIOpen|rocblas|"
    r"hipblaslt|rccl|rocsolver|rocsparse|rocrand|rocfft)[\w.-]*\.so[\d.]*$"
)
REALPATHS = "import json, os, sys; print(json.dumps({p: os.path.realpath(p) for p in sys.argv[1:]}))"


def tensile_folders(paths) -> list[str]:
    """The folders of the Tensile files among paths (the libraries choose files there by name)."""
    return sorted(
        {
            os.path.dirname(p)
            for p in paths
            if p.endswith(archs.TENSILE_SUFFIXES) and os.path.basename(os.path.dirname(p)) == "library"
        }
    )


def must_carry_gpu_code(path: str, source: str) -> bool:
    if source.startswith("python "):
        return bool(PYTHON_GPU_LIBRARY.search(path))
    return True  # a GPU package's file or a component's output


def test_declared_archs_are_covered(container, gpu_inventory, gpu_library_paths, declared_archs, record_property):
    missing_files = missing_expected(gpu_inventory)
    problems = []
    if missing_files:
        problems.append(
            "GPU libraries missing (hipErrorNoBinaryForGpu or a load failure ahead):\n  " + "\n  ".join(missing_files)
        )
    results = []
    if gpu_library_paths:
        r = container.exec(
            [
                "python3",
                f"{PROBES_IN_CONTAINER}/archs.py",
                "--json",
                *gpu_library_paths,
                *tensile_folders(gpu_library_paths),
            ],
            timeout=900,
        )
        assert r.rc in (0, 1) and r.stdout.strip().startswith("["), f"architecture scanner failed: {r.output[-2000:]}"
        results = [
            archs.FileArchs(**{**d, "archs": tuple(d["archs"]), "entries": tuple(d["entries"])})
            for d in json.loads(r.stdout)
        ]
    # The scanner reports a file once, under one of its names (a .so link and its target are one
    # file): judge each expected name by the file it is.
    real = {}
    if gpu_library_paths:
        rp = container.exec(["python3", "-c", REALPATHS, *gpu_library_paths], timeout=300)
        assert rp.rc == 0, f"resolving the GPU libraries' paths failed: {rp.output[-2000:]}"
        real = json.loads(rp.stdout)
    by_file = {real.get(f.path, f.path): f.path for f in results}
    must = {
        by_file[real[p]]
        for p, f in gpu_inventory["files"].items()
        if f["exists"] and real.get(p) in by_file and must_carry_gpu_code(p, f["source"])
    }
    gpu_libs = [f for f in results if f.archs]
    errors = [f"{f.path}: {f.error}" for f in results if f.error]
    record_property(
        "figures",
        {
            "gpu_libraries": len(gpu_libs),
            "declared": declared_archs,
            "files_that_must_carry_gpu_code": len(must),
            "device_targets": {a: archs.device_targets(a) for a in declared_archs},
        },
    )
    if results and not gpu_libs:
        problems.append("no GPU code in any of the image's GPU libraries: " + ", ".join(gpu_library_paths[:10]))
    if errors:
        problems.append("GPU code that is unreadable, cut short or not what its name says:\n  " + "\n  ".join(errors))
    gaps = archs.library_coverage(results, declared_archs, must_carry=must)
    if gaps:
        problems.append(
            "GPU libraries without code every declared device can run (hipErrorNoBinaryForGpu ahead):\n"
            + "\n".join(f"  {lib}: missing {'; '.join(g)}" for lib, g in sorted(gaps.items()))
        )
    assert not problems, "\n".join(problems)


def test_per_arch_files_cover_declared_archs(container, has_python, declared_archs, image, record_property):
    """Every rocBLAS/hipBLASLt Tensile folder and MIOpen database folder holds what a device of
    each declared arch opens (its lazy catalogue, every file the catalogue names, its code objects;
    probes/perarch.py has the rules and where they were read), and a pruned image holds no other
    arch's per-arch files."""
    if not has_python:
        pytest.fail("python3 is not in the image: the per-arch file probe cannot run", pytrace=False)
    pruned = image.labels.get(archprune.LABEL) == "true"
    r = container.exec(
        [
            "python3",
            "-B",
            f"{PROBES_IN_CONTAINER}/perarch.py",
            "check",
            "--archs",
            ",".join(declared_archs),
            *(["--pruned"] if pruned else []),
        ],
        timeout=900,
    )
    assert r.rc in (0, 1) and r.stdout.lstrip().startswith("["), f"per-arch file probe failed: {r.output[-2000:]}"
    dirs = json.loads(r.stdout)
    record_property(
        "figures",
        {
            "pruned": pruned,
            "folders": {
                d["path"]: {"per_arch_files": d["per_arch_files"], "opened_by_declared": d["opened"]} for d in dirs
            },
        },
    )
    problems = [f"{d['path']}: {p}" for d in dirs for p in d["problems"]]
    assert not problems, "per-arch GPU files (hipErrorNoBinaryForGpu or a missing-file error ahead):\n  " + "\n  ".join(
        problems
    )
