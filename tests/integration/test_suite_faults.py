"""Fault injection: one row per mutation, each failing the right suite with a message naming what
broke.

FAULTS is the table, as data. A row names the matrix target whose built image it starts from (by
that target's content tag in this checkout, built here when the engine lacks it: never "the
newest image" of a name), the RUN line that breaks a copy of it (`FROM <image ID>` + one RUN; ""
for a matrix-only fault), optional edits of a matrix copy (e.g. a declared ROCm torch), the suite
that must fail and a regex its detail must match. The test runs `build.py test --json` on the
broken copy, with `--suite` naming that suite and `also_failed` (the other suites prove nothing about
the row), and asserts: exit 1, that suite failed, its detail matches, and `also_failed` failed too.
Nothing here skips: a missing engine fails under CI (tests/conftest.docker_client) and a target that
does not build fails the row. The derived images get unique tags and are removed.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

import pytest
import yaml

from rocmforge.host.container import host_gpu_access
from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, build_image, copy_project, run_cli

pytestmark = pytest.mark.docker
LIB = "/usr/lib/x86_64-linux-gnu"
VENV_SITE = "/opt/rocmforge/venv/lib/python3.13/site-packages"  # debian13-rocm5.7 targets
SEED_SITE = "/opt/rocmforge/venv/lib/python3.14/site-packages"  # llama31-qlora-debian (Python 3.14)
SEED = "llama31-qlora-debian"
NO_GPU = not host_gpu_access().present
# A host-only library every image has, to put where a GPU library belongs: it loads, but it exports
# none of the GPU library's entry points and carries no GPU code.
HOST_ONLY_LIB = f"{LIB}/libz.so.1"


@dataclass(frozen=True)
class Fault:
    name: str  # row id
    target: str  # matrix target whose built image the broken copy starts from (and --target)
    run: str  # the RUN line that breaks it ("" for a matrix-only fault)
    suite: str  # the suite that must fail
    message: str  # regex the suite's detail must match (re.S)
    matrix_edit: dict = field(default_factory=dict)  # {target or "stacks.<stack>": {field: value}} on a matrix copy
    also_failed: tuple = ()  # other suites that must fail too
    dockerfile: str = ""  # instructions after the RUN line, for faults in the image's config (ENV, ENTRYPOINT, ...)
    variant: tuple = ()  # start from this per-arch variant of target instead of its main image


FAULTS = [
    # -- files deleted from a package ---------------------------------------------------------
    # A GPU library the GEMM program does not link, deleted: both suites name it.
    Fault(
        "librocsolver-deleted-linkage",
        "hip-devel",
        f"rm {LIB}/librocsolver.so.0.1",
        "linkage",
        re.escape(f"{LIB}/librocsolver.so.0.1 (dpkg librocsolver0)"),
        also_failed=("archs",),
    ),
    Fault(
        "librocsolver-deleted-archs",
        "hip-devel",
        f"rm {LIB}/librocsolver.so.0.1",
        "archs",
        re.escape(f"{LIB}/librocsolver.so.0.1 (dpkg librocsolver0)"),
    ),
    Fault(
        "libamd-comgr-deleted",
        "hip-runtime",
        f"rm {LIB}/libamd_comgr.so.2.6.0",
        "archs",
        re.escape(f"{LIB}/libamd_comgr.so.2.6.0 (dpkg libamd-comgr2)"),
        also_failed=("linkage",),
    ),
    # rocBLAS's gfx90a kernels (a code object nothing links): rocBLAS would fail at run time on an MI210.
    Fault(
        "rocblas-kernel-file-deleted",
        "hip-runtime",
        f"rm {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co",
        "linkage",
        re.escape(f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co (dpkg librocblas0)"),
        also_failed=("archs",),
    ),
    # -- libraries and programs that cannot load (issue 25) -----------------------------------
    # The HIP runtime replaced by another library at the same path: plain ldd resolves it, RTLD_NOW
    # does not (every library linking it names a missing hip* symbol), nor hipRuntimeGetVersion.
    Fault(
        "hip-runtime-replaced",
        SEED,
        f'cp -L {HOST_ONLY_LIB} "$(readlink -f {LIB}/libamdhip64.so.6)"',
        "linkage",
        r"lib\w+\.so[\d.]*: (undefined symbol: hip\w+|version `hip_[\d.]+' not found)",
        also_failed=("versions",),
    ),
    # A whole ROCm package removed behind dpkg's back: it is still in the lock's closure.
    Fault(
        "rocm-package-removed",
        SEED,
        "dpkg -r --force-depends libhipsparse1",
        "versions",
        r"not installed\): libhipsparse1=6\.4\.3-1",
        also_failed=("linkage",),
    ),
    # bitsandbytes' ROCm library replaced by a host-only library: it loads, but none of bnb's entry
    # points resolve (and bnb itself would silently fall back to its CPU library).
    Fault(
        "bitsandbytes-rocm-host-only",
        SEED,
        f"cp -L {HOST_ONLY_LIB} {SEED_SITE}/bitsandbytes/libbitsandbytes_rocm64.so",
        "linkage",
        r"libbitsandbytes_rocm64\.so: entry point \w+ not found",
    ),
    # A CPU torch where the stack declares a ROCm torch (the image keeps Debian's CPU build).
    Fault(
        "cpu-torch-declared-rocm",
        SEED,
        "",
        "versions",
        r"torch 2\.14\.1\S* is not a ROCm build \(torch\.version\.hip is None\)",
        matrix_edit={"hip64-torch": {"pytorch_build": "rocm"}},
    ),
    # A GEMM smoke binary that cannot load (a needed library renamed in its dynamic section).
    Fault(
        "gemm-smoke-cannot-load",
        "hip-runtime",
        "sed -i 's/librocblas\\.so\\.0/librocblaX.so.0/' /opt/rocmforge/bin/rocblas-gemm-smoke",
        "gemm",
        r"rocblas-gemm-smoke.*librocblaX\.so\.0",
        also_failed=("linkage",),
    ),
    # -- torch and Python components ----------------------------------------------------------
    # A declared torch that does not import.
    Fault(
        "torch-import-fails",
        "hip-python",
        f"mkdir -p {VENV_SITE}/torch && echo 'raise ImportError(\"libtorch_cpu.so: cannot open shared object file\")'"
        f" > {VENV_SITE}/torch/__init__.py",
        "versions",
        r"declares torch 2\.14\.1 \(cpu build\) but `import torch` fails: ImportError: libtorch_cpu\.so",
        matrix_edit={"hip-python": {"pytorch": "2.14.1", "pytorch_build": "cpu"}},
    ),
    # A torch that imports but is not the matrix's.
    Fault(
        "torch-wrong-version",
        "hip-python",
        f'mkdir -p {VENV_SITE}/torch && printf \'import types\\n__version__ = "2.13.0+cpu"\\n'
        f"version = types.SimpleNamespace(hip=None)\\ncuda = types.SimpleNamespace(is_available=lambda: False)\\n'"
        f" > {VENV_SITE}/torch/__init__.py",
        "versions",
        r"torch 2\.13\.0\+cpu in the image, 2\.14\.1 in the matrix",
        matrix_edit={"hip-python": {"pytorch": "2.14.1", "pytorch_build": "cpu"}},
    ),
    # A declared bitsandbytes that is not there.
    # (On hip64-torch: the fork names its library for the HIP versions of bitsandbytes-hip's
    # built_library, 6.2 and 6.4, so a ROCm 5.7 target could not declare it at all.)
    Fault(
        "bitsandbytes-declared-missing",
        "hip64-torch",
        "",
        "versions",
        r"component bitsandbytes-hip is declared but bitsandbytes is not installed",
        matrix_edit={"hip64-torch": {"components": ["bitsandbytes-hip"]}},
    ),
    # -- pins -----------------------------------------------------------------------------------
    # A pinned package at another version (apt and pip).
    Fault(
        "apt-pin-wrong",
        "hip-runtime",
        r"sed -i '/^Package: rocminfo$/,/^$/s/^Version: 6.1.2-2$/Version: 6.1.2-1/' /var/lib/dpkg/status",
        "versions",
        r"rocminfo: pinned 6\.1\.2-2, installed 6\.1\.2-1",
    ),
    Fault(
        "pip-pin-wrong",
        "hip-python",
        f"sed -i 's/^Version: 2.3.5$/Version: 2.3.4/' {VENV_SITE}/numpy-2.3.5.dist-info/METADATA",
        "versions",
        r"numpy \(numpy-env\): pinned 2\.3\.5, installed 2\.3\.4",
    ),
    # -- rocminfo ---------------------------------------------------------------------------------
    Fault(
        "rocminfo-crashes",
        "hip-runtime",
        "printf '#!/bin/sh\\nkill -SEGV $$\\n' > /usr/bin/rocminfo",
        "rocminfo",
        r"rocminfo crashed \(exit 139, signal 11\)",
    ),
    Fault(
        "rocminfo-garbage",
        "hip-runtime",
        "printf '#!/bin/sh\\necho \"<html>502 Bad Gateway</html>\"\\n' > /usr/bin/rocminfo",
        "rocminfo",
        r"must report 'ROCk module is NOT loaded'.*502 Bad Gateway" if NO_GPU else r"rocminfo lists no GPU agent",
    ),
    # -- architectures ----------------------------------------------------------------------------
    # The target declares an arch the image has no code for (past a stack whose gpu_archs wrongly
    # claims it: matrix load would refuse it otherwise, and the suite is the proof either way).
    Fault(
        "declared-arch-missing",
        "hip-runtime",
        "",
        "archs",
        r"librocblas\.so\.0(\.1)?: missing gfx942",
        matrix_edit={
            "hip-runtime": {"archs": ["gfx90a", "gfx1100", "gfx942"]},
            "stacks.debian13-rocm5.7": {"gpu_archs": ["gfx90a", "gfx1100", "gfx942"]},
        },
    ),
    # A GPU library rebuilt with code only for gfx90a:xnack+ (and gfx1100): its arch list still says
    # gfx90a, but a default MI210 runs with XNACK off and the runtime gives it nothing from it.
    Fault(
        "gpu-library-only-xnack-on",
        "hip-devel",
        "printf '#include <hip/hip_runtime.h>\\n__global__ void k(float* x) { x[0] = 1; }\\n"
        'extern "C" void launch(float* x) { k<<<1, 1>>>(x); }\\n\' > /tmp/k.hip'
        f" && hipcc -shared -fPIC --offload-arch=gfx90a:xnack+ --offload-arch=gfx1100 -o {LIB}/librocsolver.so.0.1"
        " /tmp/k.hip && rm /tmp/k.hip",
        "archs",
        re.escape(f"{LIB}/librocsolver.so.0")
        + r"(\.1)?: "
        + re.escape("missing gfx90a for a gfx90a:sramecc+:xnack- or gfx90a:sramecc-:xnack- device")
        + r".*its code is only for gfx90a:xnack\+",
    ),
    # One declared arch's rocBLAS kernels removed (every Tensile file for gfx90a): librocblas itself
    # still has gfx90a code, its kernel folder does not.
    Fault(
        "rocblas-gfx90a-kernels-removed",
        "hip-runtime",
        f"rm {LIB}/rocblas/2.47.0/library/*gfx90a*",
        "archs",
        re.escape(f"{LIB}/rocblas/2.47.0/library: missing gfx90a") + r"(\n|;|$)",
        also_failed=("linkage",),
    ),
    # -- per-arch files of a pruned image (prune_archs) -----------------------------------------
    # Another arch's Tensile file where the build kept only gfx90a and gfx1100.
    Fault(
        "undeclared-arch-file-left",
        "hip-runtime",
        f"cp {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx1100.co "
        f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx908.co",
        "archs",
        re.escape(f"{LIB}/rocblas/2.47.0/library: pruned, yet files of undeclared archs remain: gfx908 (1)"),
    ),
    # A placeholder that rocBLAS 6.4's lazy gfx90a catalogue names, gone: a GEMM of that type would
    # fail to load its solutions on an MI210.
    Fault(
        "lazy-catalogue-entry-missing",
        SEED,
        f"rm {LIB}/rocblas/4.4.1/library/TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.dat",
        "archs",
        re.escape(
            f"{LIB}/rocblas/4.4.1/library: a gfx90a device opens 1 missing file(s): "
            "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.dat"
        ),
        also_failed=("linkage",),
    ),
    # -- workload ---------------------------------------------------------------------------------
    # A settings file with a key the image's transformers does not know.
    Fault(
        "workload-unknown-key",
        SEED,
        "python3 -c \"import json; p='/opt/rocmforge/config/training_args.json'; d=json.load(open(p)); "
        "d['rocmforge_fault_unknown_key'] = 1; json.dump(d, open(p, 'w'))\"",
        "workload",
        r"rocmforge_fault_unknown_key",
    ),
    # generate() that returns the prompt: no new tokens (deterministic, so "twice identically" alone
    # would pass it).
    Fault(
        "inference-no-new-tokens",
        SEED,
        "printf '\\nGenerationMixin.generate = lambda self, *args, **kwargs: kwargs[\"input_ids\"]\\n'"
        " >> /usr/lib/python3/dist-packages/transformers/generation/utils.py",
        "workload",
        r"inference: .*generate\(\) did not count on from the prompt: row 0: 0 new tokens, "
        r"want exactly max_new_tokens=16",
    ),
    # -- contents against their sources (issue 38) -------------------------------------------
    # One declared arch's rocBLAS kernels emptied: every file is still there, only its bytes are gone.
    Fault(
        "contents-rocblas-gfx90a-emptied",
        "hip-runtime",
        f"truncate -s 0 {LIB}/rocblas/2.47.0/library/*gfx90a*",
        "contents",
        re.escape(f"{LIB}/rocblas/2.47.0/library/") + r"\S*gfx90a\S* \(dpkg librocblas0\): empty, md5 ",
    ),
    # A file of a pip-installed distribution edited (its RECORD says otherwise).
    Fault(
        "contents-pip-file-edited",
        SEED,
        f"echo '# edited' >> {SEED_SITE}/peft/__init__.py",
        "contents",
        re.escape(f"{SEED_SITE}/peft/__init__.py (python peft 0.21.2): "),
    ),
    # One byte of the GEMM smoke program changed (in the ELF header's padding: it still loads and runs).
    Fault(
        "contents-gemm-smoke-byte",
        "hip-runtime",
        "printf '\\001' | dd of=/opt/rocmforge/bin/rocblas-gemm-smoke bs=1 seek=9 conv=notrunc status=none",
        "contents",
        re.escape("/opt/rocmforge/bin/rocblas-gemm-smoke (component rocblas-gemm-smoke): sha256 differs"),
    ),
    # rocminfo replaced by a script that says what the rocminfo suite expects without a GPU.
    Fault(
        "contents-rocminfo-impostor",
        "hip-runtime",
        "printf '#!/bin/sh\\necho \"ROCk module is NOT loaded\"\\nexit 1\\n' > /usr/bin/rocminfo",
        "contents",
        re.escape("/usr/bin/rocminfo (dpkg rocminfo): "),
    ),
    # The version of a dependency the lock records but matrix.yaml does not pin (peft's mpmath), edited.
    Fault(
        "contents-locked-dependency-version",
        SEED,
        f"sed -i 's/^Version: 1.3.0$/Version: 1.3.1/' {SEED_SITE}/mpmath-1.3.0.dist-info/METADATA",
        "contents",
        r"python mpmath: matrix\.lock python\.llama31-qlora-debian-env records 1\.3\.0, installed 1\.3\.1",
    ),
    # -- code objects read whole (issue 38) ------------------------------------------------------
    # Every file is read to its end inside the image: a name never stands for the code it promises.
    # (In hip-runtime's rocBLAS kernel folder, LIB/rocblas/2.47.0/library.)
    # A kernel file emptied (the file is there, its name still says gfx1100).
    Fault(
        "code-object-emptied",
        "hip-runtime",
        f"truncate -s 0 {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx1100.co",
        "archs",
        re.escape(f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx1100.co: ")
        + "an empty file where a GPU code object is expected",
        also_failed=("linkage",),
    ),
    # A short text file in place of a code object: the load probe sees it too, and names it.
    Fault(
        "code-object-not-elf-archs",
        "hip-runtime",
        f"printf 'not a code object\\n' > {LIB}/rocblas/2.47.0/library/Kernels.so-000-gfx1100.hsaco",
        "archs",
        re.escape(
            f"{LIB}/rocblas/2.47.0/library/Kernels.so-000-gfx1100.hsaco: 18 bytes that are no ELF "
            "code object or offload bundle where a GPU code object is expected"
        ),
        also_failed=("linkage",),
    ),
    Fault(
        "code-object-not-elf-linkage",
        "hip-runtime",
        f"printf 'not a code object\\n' > {LIB}/rocblas/2.47.0/library/Kernels.so-000-gfx1100.hsaco",
        "linkage",
        re.escape(
            f"{LIB}/rocblas/2.47.0/library/Kernels.so-000-gfx1100.hsaco: not an ELF file "
            "(18 bytes) where a GPU code object is expected"
        ),
    ),
    # gfx1100 code under a gfx90a name: gfx90a stays covered by the folder's other gfx90a files, so
    # only the per-file rule (name against content) catches it.
    Fault(
        "code-object-other-arch",
        "hip-runtime",
        f"cp {LIB}/rocblas/2.47.0/library/TensileLibrary_gfx1100.co "
        f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co",
        "archs",
        re.escape(
            f"{LIB}/rocblas/2.47.0/library/TensileLibrary_gfx90a.co: its name says gfx90a but its code is for gfx1100"
        ),
    ),
    # XNACK-on code in the file rocBLAS opens on a default (XNACK off) MI210: the folder as a whole
    # still has code such a device runs (TensileLibrary_gfx90a.co), the file itself is wrong.
    Fault(
        "code-object-xnack-minus-holds-xnack-plus",
        "hip-runtime",
        f"cd {LIB}/rocblas/2.47.0/library && cp Kernels.so-000-gfx90a-xnack+.hsaco Kernels.so-000-gfx90a-xnack-.hsaco",
        "archs",
        re.escape(
            f"{LIB}/rocblas/2.47.0/library/Kernels.so-000-gfx90a-xnack-.hsaco: its name says "
            "gfx90a:xnack- but its code is for gfx90a:xnack+"
        ),
    ),
    # -- the image as users run it, the loader's choice, full versions (issue 38) ----------------
    # A variable that steers HIP, set in the image but declared nowhere in the matrix.
    Fault(
        "config-undeclared-hip-visible-devices",
        "hip-runtime",
        "",
        "config",
        r'Env HIP_VISIBLE_DEVICES: the image has "1", the matrix renders none.*'
        r"HIP_VISIBLE_DEVICES='1': steers which GPUs HIP programs see",
        dockerfile="ENV HIP_VISIBLE_DEVICES=1",
    ),
    # An entrypoint that exits 0 printing nothing: every exec'd check still passes, users get nothing.
    Fault(
        "entrypoint-exits-silently",
        "hip-runtime",
        "",
        "rocminfo",
        r'`docker run \S+ rocminfo` \(entrypoint \["/bin/true"\].*'
        + (
            r"must report 'ROCk module is NOT loaded' and exit 1.*printed \(exit 0\): ''"
            if NO_GPU
            else r"lists GPU agents \[\] \(exit 0\)"
        ),
        dockerfile='ENTRYPOINT ["/bin/true"]',
        also_failed=("config", "gemm"),
    ),
    # An entrypoint that does not exist: `docker run` cannot start the container at all.
    Fault(
        "entrypoint-missing",
        "hip-runtime",
        "",
        "gemm",
        r'`docker run \S+ rocblas-gemm-smoke 256 1` \(entrypoint \["/nonexistent"\].*printed no result '
        r"\(exit 127\): .*/nonexistent",
        dockerfile='ENTRYPOINT ["/nonexistent"]',
        also_failed=("rocminfo", "config"),
    ),
    # A copy of rocBLAS in a folder an ld.so.conf.d file lists before the multiarch one: every
    # program linking librocblas.so.0 runs the copy; dlopen by path (the load check) never sees it.
    Fault(
        "loader-shadow-ld-so-conf",
        "hip-runtime",
        f"mkdir -p /usr/local/lib/shadow && cp -L {LIB}/librocblas.so.0 /usr/local/lib/shadow/"
        " && echo /usr/local/lib/shadow > /etc/ld.so.conf.d/00-shadow.conf && ldconfig",
        "linkage",
        re.escape(
            f"librocblas.so.0: the loader picks /usr/local/lib/shadow/librocblas.so.0, but the "
            f"image's package installed {LIB}/librocblas.so.0.1"
        ),
    ),
    # The same copy reached through LD_LIBRARY_PATH in the image's Env (ldconfig -p would not show it).
    Fault(
        "loader-shadow-ld-library-path",
        "hip-runtime",
        f"mkdir -p /usr/local/lib/shadow && cp -L {LIB}/librocblas.so.0 /usr/local/lib/shadow/",
        "linkage",
        re.escape(
            f"librocblas.so.0: the loader picks /usr/local/lib/shadow/librocblas.so.0, but the "
            f"image's package installed {LIB}/librocblas.so.0.1"
        ),
        dockerfile="ENV LD_LIBRARY_PATH=/usr/local/lib/shadow",
        also_failed=("config",),
    ),
    # hipconfig from another build of HIP 5.7 than the runtime (libamdhip64-dev's version file):
    # major.minor agree, the build number does not.
    Fault(
        "hipconfig-other-build",
        "hip-devel",
        "sed -i 's/^HIP_VERSION_PATCH=31921$/HIP_VERSION_PATCH=31920/' /usr/share/hip/version",
        "versions",
        r"HIP runtime versions disagree at major\.minor\.build: .*hipconfig --version=5\.7\.31920-0",
    ),
    # The HIP package of another ROCm patch release (as dpkg records it) than the stack's 5.7.1.
    Fault(
        "hip-package-other-patch",
        "hip-runtime",
        r"sed -i '/^Package: libamdhip64-5$/,/^$/s/^Version: 5.7.1-6+deb13u1$/Version: 5.7.0-6+deb13u1/'"
        " /var/lib/dpkg/status",
        "versions",
        re.escape(
            "the ROCm release differs from the stack's rocm 5.7.1 (major.minor.patch): dpkg libamdhip64-5 says 5.7.0"
        ),
    ),
    # The user and working folder changed from what the matrix renders.
    Fault(
        "config-user-and-workdir",
        "hip-runtime",
        "",
        "config",
        r'User: the image has "nobody", the matrix renders none.*WorkingDir: the image has "/tmp", the matrix '
        r"renders none",
        dockerfile="USER nobody\nWORKDIR /tmp",
    ),
    # -- per-arch variants (issue 40) --------------------------------------------------------
    # The gfx1100 variant relabelled as the all-archs image: it has no gfx90a code, and its labels
    # are not the main image's.
    Fault(
        "variant-posing-as-main",
        "hip-runtime",
        "",
        "archs",
        r"without code every declared device can run.*gfx90a",
        variant=("gfx1100",),
        dockerfile='LABEL io.rocmforge.archs="gfx90a,gfx1100"',
        also_failed=("config",),
    ),
    # A variant the target never declared.
    Fault(
        "variant-undeclared",
        "hip-runtime",
        "",
        "archs",
        r"io\.rocmforge\.archs=gfx906, which is neither target hip-runtime's archs",
        variant=("gfx1100",),
        dockerfile='LABEL io.rocmforge.archs="gfx906"',
    ),
    # -- settings equal the matrix (issue 38) ----------------------------------------------------
    # The settings folder gone: the probe would train on its defaults; the matrix says which file is missing.
    Fault(
        "settings-folder-deleted",
        SEED,
        "rm -r /opt/rocmforge/config",
        "workload",
        re.escape(
            "/opt/rocmforge/config/training_args.json (component llama31-qlora-debian-settings "
            "of target llama31-qlora-debian, matrix.yaml "
            "components.llama31-qlora-debian-settings.files.training_args.json): missing from the image"
        ),
    ),
    # One value changed: still a valid TrainingArguments file, only the matrix says it is wrong.
    Fault(
        "settings-value-changed",
        SEED,
        "python3 -c \"import json; p='/opt/rocmforge/config/training_args.json'; d=json.load(open(p)); "
        "d['learning_rate'] = 0.001; json.dump(d, open(p, 'w'))\"",
        "workload",
        re.escape("/opt/rocmforge/config/training_args.json (component llama31-qlora-debian-settings")
        + r"[^;]*: learning_rate is 0\.001 in the image, 4e-05 in the matrix",
    ),
]


@pytest.fixture(scope="module")
def built_image(docker_client):
    """name -> the image ID of that target, found by its content tag in this checkout (built first,
    or found up to date, once per module and only for the rows selected): the broken copies start
    from exactly that image."""
    plan = load_plan(ROOT / "matrix.yaml")
    ids: dict[str, str] = {}

    def get(name: str, variant: tuple = ()) -> str:
        if (name, variant) not in ids:
            proc = run_cli("build", "--target", name)
            assert proc.returncode == 0, f"build of {name} failed:\n{proc.stderr[-3000:]}"
            ids[name, variant] = docker_client.images.get(plan.image_for(name, variant).content_tag).id
        return ids[name, variant]

    return get


@pytest.fixture
def own_images(docker_client):
    tags: list[str] = []
    yield tags
    for tag in tags:  # only what this test built
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:
            pass


def _matrix_copy(tmp_path, edits: dict):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    for name, fields in edits.items():  # a target's name, or "stacks.<stack>"
        section, _, key = name.partition(".") if name.startswith("stacks.") else ("targets", "", name)
        data[section][key].update(fields)
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix


def _run_fault(docker_client, own_images, tmp_path, fault: Fault, base: str) -> dict:
    ref = base
    if fault.run or fault.dockerfile:
        ref = f"rocmforge-test/fault-{fault.name}:{uuid.uuid4().hex[:12]}"
        own_images.append(ref)
        run = f"RUN {fault.run}\n" if fault.run else ""
        build_image(docker_client, f"FROM {base}\n{run}{fault.dockerfile}\n", tag=ref)
    args = ["--matrix", str(_matrix_copy(tmp_path, fault.matrix_edit))] if fault.matrix_edit else []
    # Only the suites the row is about: each row proves its suite fails, naming the fault (issue 53)
    only = [a for s in (fault.suite, *fault.also_failed) for a in ("--suite", s)]
    proc = run_cli(*args, "test", "--image", ref, "--target", fault.target, "--json", *only)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["exit"] = proc.returncode
    return report


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_fails_the_right_suite(docker_client, built_image, own_images, tmp_path, fault):
    report = _run_fault(docker_client, own_images, tmp_path, fault, built_image(fault.target, fault.variant))
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
    from rocmforge.verify.suites import SUITE_NAMES

    m = load_matrix(ROOT / "matrix.yaml")
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names)), "duplicate row ids"
    for f in FAULTS:
        assert f.target in m.targets, f"{f.name}: no target {f.target}"
        assert f.suite in SUITE_NAMES and set(f.also_failed) <= set(SUITE_NAMES), f"{f.name}: unknown suite"
        assert set(f.matrix_edit) <= set(m.targets) | {f"stacks.{s}" for s in m.stacks}, (
            f"{f.name}: edits an unknown target or stack"
        )
        assert f.run or f.dockerfile or f.matrix_edit, f"{f.name}: neither a mutation nor a matrix edit"
        assert not f.variant or f.variant in [tuple(v) for v in m.targets[f.target].variants], (
            f"{f.name}: {f.target} declares no variant {f.variant}"
        )
