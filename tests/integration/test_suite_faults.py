"""Fault injection: one row per mutation, each failing the right suite with a message naming what
broke.

FAULTS is the table, as data. A row names the matrix target whose built image it starts from (by
that target's content tag in this checkout, built here when the engine lacks it: never "the
newest image" of a name), the RUN line that breaks a copy of it (`FROM <image ID>` + one RUN; ""
for a matrix-only fault), optional edits of a matrix copy (e.g. a declared ROCm torch), the suite
that must fail and a regex its detail must match. The test runs `build.py test --json` on the
broken copy and asserts: exit 1, that suite failed, its detail matches, and `also_failed` failed
too. Nothing here skips: a missing engine fails under CI (tests/conftest.docker_client) and a
target that does not build fails the row. The derived images get unique tags and are removed.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

import pytest
import yaml

from tests.conftest import ROOT, build_image, copy_project, run_cli
from rocmforge.host.container import host_gpu_access
from rocmforge.render.plan import load_plan

pytestmark = pytest.mark.docker
LIB = "/usr/lib/x86_64-linux-gnu"
VENV_SITE = "/opt/rocmforge/venv/lib/python3.13/site-packages"        # debian13-rocm5.7 targets
SEED_SITE = "/opt/rocmforge/venv/lib/python3.14/site-packages"        # llama31-qlora-debian (Python 3.14)
SEED = "llama31-qlora-debian"
NO_GPU = not host_gpu_access().present
# A host-only library every image has, to put where a GPU library belongs: it loads, but it exports
# none of the GPU library's entry points and carries no GPU code.
HOST_ONLY_LIB = f"{LIB}/libz.so.1"


@dataclass(frozen=True)
class Fault:
    name: str                 # row id
    target: str               # matrix target whose built image the broken copy starts from (and --target)
    run: str                  # the RUN line that breaks it ("" for a matrix-only fault)
    suite: str                # the suite that must fail
    message: str              # regex the suite's detail must match (re.S)
    matrix_edit: dict = field(default_factory=dict)   # {target or "stacks.<stack>": {field: value}} on a matrix copy
    also_failed: tuple = ()   # other suites that must fail too


FAULTS = [
    # -- files deleted from a package ---------------------------------------------------------
    # A GPU library the GEMM program does not link, deleted: both suites name it.
    Fault("librocsolver-deleted-linkage", "hip-devel", f"rm {LIB}/librocsolver.so.0.1",
          "linkage", re.escape(f"{LIB}/librocsolver.so.0.1 (dpkg librocsolver0)"), also_failed=("archs",)),
    Fault("librocsolver-deleted-archs", "hip-devel", f"rm {LIB}/librocsolver.so.0.1",
          "archs", re.escape(f"{LIB}/librocsolver.so.0.1 (dpkg librocsolver0)")),
    Fault("libamd-comgr-deleted", "hip-runtime", f"rm {LIB}/libamd_comgr.so.2.6.0",
          "archs", re.escape(f"{LIB}/libamd_comgr.so.2.6.0 (dpkg libamd-comgr2)"), also_failed=("linkage",)),
    # rocBLAS's gfx90a kernels (a code object nothing links): rocBLAS would fail at run time on an MI210.
    Fault("rocblas-kernel-file-deleted", "hip-runtime",
          f"rm {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co",
          "linkage", re.escape(f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co (dpkg librocblas0)"),
          also_failed=("archs",)),

    # -- libraries and programs that cannot load (issue 25) -----------------------------------
    # The HIP runtime replaced by another library at the same path: plain ldd resolves it, RTLD_NOW
    # does not (every library linking it names a missing hip* symbol), nor hipRuntimeGetVersion.
    Fault("hip-runtime-replaced", SEED,
          f"cp -L {HOST_ONLY_LIB} \"$(readlink -f {LIB}/libamdhip64.so.6)\"",
          "linkage", r"lib\w+\.so[\d.]*: (undefined symbol: hip\w+|version `hip_[\d.]+' not found)",
          also_failed=("versions",)),
    # A whole ROCm package removed behind dpkg's back: it is still in the lock's closure.
    Fault("rocm-package-removed", SEED, "dpkg -r --force-depends libhipsparse1",
          "versions", r"not installed\): libhipsparse1=6\.4\.3-1", also_failed=("linkage",)),
    # bitsandbytes' ROCm library replaced by a host-only library: it loads, but none of bnb's entry
    # points resolve (and bnb itself would silently fall back to its CPU library).
    Fault("bitsandbytes-rocm-host-only", SEED,
          f"cp -L {HOST_ONLY_LIB} {SEED_SITE}/bitsandbytes/libbitsandbytes_rocm64.so",
          "linkage", r"libbitsandbytes_rocm64\.so: entry point \w+ not found"),
    # A CPU torch where the stack declares a ROCm torch (the image keeps Debian's CPU build).
    Fault("cpu-torch-declared-rocm", SEED, "",
          "versions", r"torch 2\.14\.1\S* is not a ROCm build \(torch\.version\.hip is None\)",
          matrix_edit={"hip64-torch": {"pytorch_build": "rocm"}}),
    # A GEMM smoke binary that cannot load (a needed library renamed in its dynamic section).
    Fault("gemm-smoke-cannot-load", "hip-runtime",
          "sed -i 's/librocblas\\.so\\.0/librocblaX.so.0/' /opt/rocmforge/bin/rocblas-gemm-smoke",
          "gemm", r"rocblas-gemm-smoke.*librocblaX\.so\.0", also_failed=("linkage",)),

    # -- torch and Python components ----------------------------------------------------------
    # A declared torch that does not import.
    Fault("torch-import-fails", "hip-python",
          f"mkdir -p {VENV_SITE}/torch && echo 'raise ImportError(\"libtorch_cpu.so: cannot open shared object file\")'"
          f" > {VENV_SITE}/torch/__init__.py",
          "versions", r"declares torch 2\.14\.1 \(cpu build\) but `import torch` fails: ImportError: libtorch_cpu\.so",
          matrix_edit={"hip-python": {"pytorch": "2.14.1", "pytorch_build": "cpu"}}),
    # A torch that imports but is not the matrix's.
    Fault("torch-wrong-version", "hip-python",
          f"mkdir -p {VENV_SITE}/torch && printf 'import types\\n__version__ = \"2.13.0+cpu\"\\n"
          f"version = types.SimpleNamespace(hip=None)\\ncuda = types.SimpleNamespace(is_available=lambda: False)\\n'"
          f" > {VENV_SITE}/torch/__init__.py",
          "versions", r"torch 2\.13\.0\+cpu in the image, 2\.14\.1 in the matrix",
          matrix_edit={"hip-python": {"pytorch": "2.14.1", "pytorch_build": "cpu"}}),
    # A declared bitsandbytes that is not there.
    # (On hip64-torch: the fork names its library for the HIP versions of bitsandbytes-hip's
    # built_library, 6.2 and 6.4, so a ROCm 5.7 target could not declare it at all.)
    Fault("bitsandbytes-declared-missing", "hip64-torch", "",
          "versions", r"component bitsandbytes-hip is declared but bitsandbytes is not installed",
          matrix_edit={"hip64-torch": {"components": ["bitsandbytes-hip"]}}),

    # -- pins -----------------------------------------------------------------------------------
    # A pinned package at another version (apt and pip).
    Fault("apt-pin-wrong", "hip-runtime",
          r"sed -i '/^Package: rocminfo$/,/^$/s/^Version: 6.1.2-2$/Version: 6.1.2-1/' /var/lib/dpkg/status",
          "versions", r"rocminfo: pinned 6\.1\.2-2, installed 6\.1\.2-1"),
    Fault("pip-pin-wrong", "hip-python",
          f"sed -i 's/^Version: 2.3.5$/Version: 2.3.4/' {VENV_SITE}/numpy-2.3.5.dist-info/METADATA",
          "versions", r"numpy \(numpy-env\): pinned 2\.3\.5, installed 2\.3\.4"),

    # -- rocminfo ---------------------------------------------------------------------------------
    Fault("rocminfo-crashes", "hip-runtime",
          "printf '#!/bin/sh\\nkill -SEGV $$\\n' > /usr/bin/rocminfo",
          "rocminfo", r"rocminfo crashed \(exit 139, signal 11\)"),
    Fault("rocminfo-garbage", "hip-runtime",
          "printf '#!/bin/sh\\necho \"<html>502 Bad Gateway</html>\"\\n' > /usr/bin/rocminfo",
          "rocminfo", r"must report 'ROCk module is NOT loaded'.*502 Bad Gateway" if NO_GPU
          else r"rocminfo lists no GPU agent"),

    # -- architectures ----------------------------------------------------------------------------
    # The target declares an arch the image has no code for (past a stack whose gpu_archs wrongly
    # claims it: matrix load would refuse it otherwise, and the suite is the proof either way).
    Fault("declared-arch-missing", "hip-runtime", "",
          "archs", r"librocblas\.so\.0(\.1)?: missing gfx942",
          matrix_edit={"hip-runtime": {"archs": ["gfx90a", "gfx1100", "gfx942"]},
                       "stacks.debian13-rocm5.7": {"gpu_archs": ["gfx90a", "gfx1100", "gfx942"]}}),
    # A GPU library rebuilt with code only for gfx90a:xnack+ (and gfx1100): its arch list still says
    # gfx90a, but a default MI210 runs with XNACK off and the runtime gives it nothing from it.
    Fault("gpu-library-only-xnack-on", "hip-devel",
          "printf '#include <hip/hip_runtime.h>\\n__global__ void k(float* x) { x[0] = 1; }\\n"
          "extern \"C\" void launch(float* x) { k<<<1, 1>>>(x); }\\n' > /tmp/k.hip"
          f" && hipcc -shared -fPIC --offload-arch=gfx90a:xnack+ --offload-arch=gfx1100 -o {LIB}/librocsolver.so.0.1"
          " /tmp/k.hip && rm /tmp/k.hip",
          "archs", re.escape(f"{LIB}/librocsolver.so.0") + r"(\.1)?: "
          + re.escape("missing gfx90a for a gfx90a:sramecc+:xnack- or gfx90a:sramecc-:xnack- device")
          + r".*its code is only for gfx90a:xnack\+"),
    # One declared arch's rocBLAS kernels removed (every Tensile file for gfx90a): librocblas itself
    # still has gfx90a code, its kernel folder does not.
    Fault("rocblas-gfx90a-kernels-removed", "hip-runtime", f"rm {LIB}/rocblas/2.47.0/library/*gfx90a*",
          "archs", re.escape(f"{LIB}/rocblas/2.47.0/library: missing gfx90a") + r"(\n|;|$)",
          also_failed=("linkage",)),
    # -- per-arch files of a pruned image (prune_archs) -----------------------------------------
    # Another arch's Tensile file where the build kept only gfx90a and gfx1100.
    Fault("undeclared-arch-file-left", "hip-runtime",
          f"cp {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx1100.co {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx908.co",
          "archs", re.escape(f"{LIB}/rocblas/2.47.0/library: pruned, yet files of undeclared archs remain: gfx908 (1)")),
    # A placeholder that rocBLAS 6.4's lazy gfx90a catalogue names, gone: a GEMM of that type would
    # fail to load its solutions on an MI210.
    Fault("lazy-catalogue-entry-missing", SEED,
          f"rm {LIB}/rocblas/4.4.1/library/TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.dat",
          "archs", re.escape(f"{LIB}/rocblas/4.4.1/library: a gfx90a device opens 1 missing file(s): "
                             "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.dat"),
          also_failed=("linkage",)),

    # -- workload ---------------------------------------------------------------------------------
    # A settings file with a key the image's transformers does not know.
    Fault("workload-unknown-key", SEED,
          "python3 -c \"import json; p='/opt/rocmforge/config/training_args.json'; d=json.load(open(p)); "
          "d['rocmforge_fault_unknown_key'] = 1; json.dump(d, open(p, 'w'))\"",
          "workload", r"rocmforge_fault_unknown_key"),
    # generate() that returns the prompt: no new tokens (deterministic, so "twice identically" alone
    # would pass it).
    Fault("inference-no-new-tokens", SEED,
          "printf '\\nGenerationMixin.generate = lambda self, *args, **kwargs: kwargs[\"input_ids\"]\\n'"
          " >> /usr/lib/python3/dist-packages/transformers/generation/utils.py",
          "workload", r"inference: .*generate\(\) did not count on from the prompt: row 0: 0 new tokens, "
                      r"want exactly max_new_tokens=16"),
]


@pytest.fixture(scope="module")
def built_image(docker_client):
    """name -> the image ID of that target, found by its content tag in this checkout (built first,
    or found up to date, once per module and only for the rows selected): the broken copies start
    from exactly that image."""
    plan = load_plan(ROOT / "matrix.yaml")
    ids: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in ids:
            proc = run_cli("build", "--target", name)
            assert proc.returncode == 0, f"build of {name} failed:\n{proc.stderr[-3000:]}"
            ids[name] = docker_client.images.get(plan.targets[name].content_tag).id
        return ids[name]
    return get


@pytest.fixture
def own_images(docker_client):
    tags: list[str] = []
    yield tags
    for tag in tags:            # only what this test built
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:
            pass


def _matrix_copy(tmp_path, edits: dict):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    for name, fields in edits.items():      # a target's name, or "stacks.<stack>"
        section, _, key = name.partition(".") if name.startswith("stacks.") else ("targets", "", name)
        data[section][key].update(fields)
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix


def _run_fault(docker_client, own_images, tmp_path, fault: Fault, base: str) -> dict:
    ref = base
    if fault.run:
        ref = f"rocmforge-test/fault-{fault.name}:{uuid.uuid4().hex[:12]}"
        own_images.append(ref)
        build_image(docker_client, f"FROM {base}\nRUN {fault.run}\n", tag=ref)
    args = ["--matrix", str(_matrix_copy(tmp_path, fault.matrix_edit))] if fault.matrix_edit else []
    proc = run_cli(*args, "test", "--image", ref, "--target", fault.target, "--json")
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["exit"] = proc.returncode
    return report


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_fails_the_right_suite(docker_client, built_image, own_images, tmp_path, fault):
    report = _run_fault(docker_client, own_images, tmp_path, fault, built_image(fault.target))
    suites = report["suites"]
    assert report["exit"] == 1 and not report["ok"], json.dumps(suites, indent=1)
    s = suites[fault.suite]
    assert s["status"] == "failed", f"{fault.suite} is {s['status']}: {s['detail']}"
    assert re.search(fault.message, s["detail"], re.S), s["detail"]
    for other in fault.also_failed:
        assert suites[other]["status"] == "failed", f"{other}: {suites[other]}"
    # What the table below prints for the report: mutation -> suite -> message.
    print(f"\nFAULT {fault.name} -> {fault.suite}: {s['detail'][:400]}")


def test_table_is_well_formed():
    """Every row names a target of the matrix, a suite that exists, and a unique id."""
    from rocmforge.define.matrix import load_matrix
    from rocmforge.verify.suites import SUITES

    m = load_matrix(ROOT / "matrix.yaml")
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names)), "duplicate row ids"
    for f in FAULTS:
        assert f.target in m.targets, f"{f.name}: no target {f.target}"
        assert f.suite in SUITES and set(f.also_failed) <= set(SUITES), f"{f.name}: unknown suite"
        assert set(f.matrix_edit) <= set(m.targets) | {f"stacks.{s}" for s in m.stacks}, \
            f"{f.name}: edits an unknown target or stack"
        assert f.run or f.matrix_edit, f"{f.name}: neither a mutation nor a matrix edit"
