"""Fault injection: every suite fails, naming the fault, on a broken copy of a built image.

Each row of FAULTS takes a target's built image (built here when the engine lacks it), derives a
broken copy with a tiny Dockerfile (`FROM <image>` + one RUN), optionally checks it against an
edited copy of the matrix (e.g. a target that declares torch), runs `build.py test --json` on it
and asserts: exit code 1, the named suite failed, and its detail matches the message pattern.
The derived images have their own unique tags and are removed afterwards; nothing else is touched.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

import pytest
import yaml

from tests.conftest import ROOT, build_image, copy_project, run_cli
from rocmforge.container import host_gpu_access
from rocmforge.matrix import load_matrix
from rocmforge.plan import load_plan

pytestmark = pytest.mark.docker
LIB = "/usr/lib/x86_64-linux-gnu"
VENV_SITE = "/opt/rocmforge/venv/lib/python3.13/site-packages"
NO_GPU = not host_gpu_access().present
WORKLOAD_SUITE = ROOT / "tests" / "suites" / "test_workload.py"


@dataclass(frozen=True)
class Fault:
    name: str                 # row id
    target: str               # built image the broken copy starts from (and --target for the suites)
    run: str                  # the RUN line that breaks it ("" for a matrix-only fault)
    suite: str                # the suite that must fail
    message: str              # regex the suite's detail must match
    matrix_edit: dict = field(default_factory=dict)   # {target field: value} on a matrix copy
    also_failed: tuple = ()   # other suites that must fail too


FAULTS = [
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
    # A declared torch that does not import.
    Fault("torch-import-fails", "hip-python",
          f"mkdir -p {VENV_SITE}/torch && echo 'raise ImportError(\"libtorch_cpu.so: cannot open shared object file\")'"
          f" > {VENV_SITE}/torch/__init__.py",
          "versions", r"declares torch 2\.14\.1 \(cpu build\) but `import torch` fails: ImportError: libtorch_cpu\.so",
          matrix_edit={"pytorch": "2.14.1", "pytorch_build": "cpu"}),
    # A torch that imports but is not the matrix's.
    Fault("torch-wrong-version", "hip-python",
          f"mkdir -p {VENV_SITE}/torch && printf 'import types\\n__version__ = \"2.13.0+cpu\"\\n"
          f"version = types.SimpleNamespace(hip=None)\\ncuda = types.SimpleNamespace(is_available=lambda: False)\\n'"
          f" > {VENV_SITE}/torch/__init__.py",
          "versions", r"torch 2\.13\.0\+cpu in the image, 2\.14\.1 in the matrix",
          matrix_edit={"pytorch": "2.14.1", "pytorch_build": "cpu"}),
    # A declared bitsandbytes that is not there.
    Fault("bitsandbytes-declared-missing", "hip-python", "",
          "versions", r"component bitsandbytes-hip is declared but bitsandbytes is not installed",
          matrix_edit={"components": ["numpy-env", "bitsandbytes-hip"]}),
    # A pinned package at another version (apt and pip).
    Fault("apt-pin-wrong", "hip-runtime",
          r"sed -i '/^Package: rocminfo$/,/^$/s/^Version: 6.1.2-2$/Version: 6.1.2-1/' /var/lib/dpkg/status",
          "versions", r"rocminfo: pinned 6\.1\.2-2, installed 6\.1\.2-1"),
    Fault("pip-pin-wrong", "hip-python",
          f"sed -i 's/^Version: 2.3.5$/Version: 2.3.4/' {VENV_SITE}/numpy-2.3.5.dist-info/METADATA",
          "versions", r"numpy \(numpy-env\): pinned 2\.3\.5, installed 2\.3\.4"),
    # rocminfo that crashes, or prints garbage.
    Fault("rocminfo-crashes", "hip-runtime",
          "printf '#!/bin/sh\\nkill -SEGV $$\\n' > /usr/bin/rocminfo",
          "rocminfo", r"rocminfo crashed \(exit 139, signal 11\)"),
    Fault("rocminfo-garbage", "hip-runtime",
          "printf '#!/bin/sh\\necho \"<html>502 Bad Gateway</html>\"\\n' > /usr/bin/rocminfo",
          "rocminfo", r"must report 'ROCk module is NOT loaded'.*502 Bad Gateway" if NO_GPU
          else r"rocminfo lists no GPU agent"),
    # The target declares an arch the image has no code for.
    Fault("declared-arch-missing", "hip-runtime", "",
          "archs", r"librocblas\.so\.0(\.1)?: missing gfx942",
          matrix_edit={"archs": ["gfx90a", "gfx1100", "gfx942"]}),
]


@pytest.fixture(scope="module")
def built_targets(docker_client):
    """Build (or find up to date) every target a row starts from; their image IDs by name (an ID,
    not a tag: the broken copies start from exactly the image that was checked here)."""
    out = {}
    for name in sorted({f.target for f in FAULTS}):
        proc = run_cli("build", "--target", name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        tag = re.findall(r"rocmforge/" + re.escape(name) + r":content-[0-9a-f]+", proc.stderr + proc.stdout)
        assert tag, proc.stderr[-2000:]
        out[name] = docker_client.images.get(tag[-1]).id
    return out


@pytest.fixture
def own_images(docker_client):
    tags: list[str] = []
    yield tags
    for tag in tags:            # only what this test built
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:
            pass


def _matrix_copy(tmp_path, target: str, edit: dict):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"][target].update(edit)
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix


def _run_fault(docker_client, own_images, tmp_path, fault: Fault, base: str, extra_matrix_edit=None) -> dict:
    ref = base
    if fault.run:
        ref = f"rocmforge-test/fault-{fault.name}:{uuid.uuid4().hex[:12]}"
        own_images.append(ref)
        build_image(docker_client, f"FROM {base}\nRUN {fault.run}\n", tag=ref)
    args = []
    if fault.matrix_edit:
        args = ["--matrix", str(_matrix_copy(tmp_path, fault.target, fault.matrix_edit))]
    proc = run_cli(*args, "test", "--image", ref, "--target", fault.target, "--json")
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["exit"] = proc.returncode
    return report


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_fails_the_right_suite(docker_client, built_targets, own_images, tmp_path, fault):
    report = _run_fault(docker_client, own_images, tmp_path, fault, built_targets[fault.target])
    suites = report["suites"]
    assert report["exit"] == 1 and not report["ok"], json.dumps(suites, indent=1)
    s = suites[fault.suite]
    assert s["status"] == "failed", f"{fault.suite} is {s['status']}: {s['detail']}"
    assert re.search(fault.message, s["detail"], re.S), s["detail"]
    for other in fault.also_failed:
        assert suites[other]["status"] == "failed", f"{other}: {suites[other]}"
    # What the table below prints for the report: mutation -> suite -> message.
    print(f"\nFAULT {fault.name} -> {fault.suite}: {s['detail'][:400]}")


def _torch_image(docker_client):
    """An image on the engine of a matrix target that declares torch and installs
    training_args.json (the current content tag if built, else the newest image labelled with that
    target), or None. Nothing is built here: such images are large."""
    m = load_matrix(ROOT / "matrix.yaml")
    plan = load_plan(ROOT / "matrix.yaml")

    def ships_training_args(name):
        t = m.targets[name]
        return any(m.components[c].kind == "settings" and "training_args.json" in m.components[c].files
                   for c in t.components) or \
            bool(t.from_target and ships_training_args(t.from_target))

    for name in sorted(m.targets):
        if not m.torch_of(name)[0] or not ships_training_args(name):
            continue
        try:
            return name, docker_client.images.get(plan.targets[name].content_tag).id
        except Exception:
            pass
        images = docker_client.images.list(filters={"label": f"io.rocmforge.target={name}"})
        if images:
            return name, max(images, key=lambda i: i.attrs["Created"]).id
    return None


def test_workload_settings_with_unknown_key_fails(docker_client, own_images, tmp_path):
    if not WORKLOAD_SUITE.is_file():
        pytest.skip("workload suite not yet in the tree")
    found = _torch_image(docker_client)
    if found is None:
        pytest.skip("workload suite not yet in the tree for this engine: no built image of a target with torch "
                    "(build e.g. llama31-qlora-debian first)")
    target, base = found
    path = "/opt/rocmforge/config/training_args.json"
    fault = Fault("workload-unknown-key", target,
                  f"python3 -c \"import json; p='{path}'; d=json.load(open(p)); "
                  f"d['rocmforge_fault_unknown_key'] = 1; json.dump(d, open(p, 'w'))\"",
                  "workload", r"rocmforge_fault_unknown_key")
    report = _run_fault(docker_client, own_images, tmp_path, fault, base)
    s = report["suites"]["workload"]
    assert report["exit"] == 1 and s["status"] == "failed", s
    assert re.search(fault.message, s["detail"]), s["detail"]
    print(f"\nFAULT {fault.name} -> workload: {s['detail'][:400]}")
