#!/usr/bin/env python3
"""Linkage probe, run inside an image in one exec: find every ELF object under the given paths
(files, folders or globs), tell x86-64 host objects from AMD GPU code objects by e_machine, and
run ldd on the host ones. Prints one JSON object: {path: {"kind": "host"|"gpu", "ldd": ..., "rc": n}}.

`linkage.py --inventory [--file PATH]... [--dist NAME]...` prints instead what the image *should*
hold: every GPU library that its package manager says was installed (the file lists of the
installed ROCm packages: dpkg packages whose Maintainer or Homepage names ROCm), every file named
with --file (a component's output, e.g. /opt/rocmforge/bin/rocblas-gemm-smoke) and the shared
libraries in the RECORD of each Python distribution named with --dist (e.g. torch, bitsandbytes),
each with whether it exists. A deleted file stays in those lists, so it is reported missing.

By hand on a GPU host:  python3 /opt/rocmforge/probes/linkage.py /opt/rocm/lib /opt/rocmforge/bin
"""

import glob
import json
import os
import re
import subprocess
import sys

# A package is part of the ROCm stack when its Maintainer or Homepage says so (Debian's ROCm
# Team, github.com/ROCm/..., AMD's repository packages).
ROCM_PACKAGE_RE = re.compile(r"rocm|radeonopencompute", re.IGNORECASE)
# Files in those lists that are GPU libraries: shared objects in a lib folder, and the code
# objects / Tensile kernel files of the BLAS libraries.
SHARED_LIB_RE = re.compile(r"/lib[^/]*/(?:.*/)?[^/]+\.so(?:\.[0-9][0-9.]*)?$")
KERNEL_FILE_RE = re.compile(r"/library/[^/]+\.(?:co|hsaco|dat)$")
PYTHONS = ("/opt/rocmforge/venv/bin/python", "/opt/conda/bin/python", "python3")

EM_X86_64, EM_AMDGPU = 62, 224


def elf_machine(path):
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def walk(paths):
    seen = set()
    for pattern in paths:
        for top in sorted(glob.glob(pattern)) or []:
            candidates = [top] if not os.path.isdir(top) else sorted(
                os.path.join(d, f) for d, _, files in os.walk(top) for f in files)
            for p in candidates:
                real = os.path.realpath(p)
                if real in seen or not os.path.isfile(real):
                    continue
                seen.add(real)
                yield real


def _dpkg_rocm_packages():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Maintainer}\t${Homepage}\n"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    except OSError:          # not a dpkg system
        return []
    pkgs = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[1].endswith(" installed") and ROCM_PACKAGE_RE.search(parts[2] + " " + parts[3]):
            pkgs.append(parts[0])
    return sorted(pkgs)


def _dpkg_files(pkg):
    out = subprocess.run(["dpkg-query", "-L", pkg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return [ln.strip() for ln in out.splitlines() if ln.startswith("/")]


def _dist_libraries(dist):
    """Shared libraries a Python distribution's RECORD lists, for the first interpreter that has it."""
    code = ("import importlib.metadata as m, json, sys\n"
            "try:\n d = m.distribution(sys.argv[1])\nexcept m.PackageNotFoundError:\n print('null'); sys.exit(0)\n"
            "print(json.dumps([str(d.locate_file(f)) for f in (d.files or []) if '.so' in f.name]))")
    for py in PYTHONS:
        try:
            proc = subprocess.run([py, "-c", code, dist], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            continue
        if proc.returncode == 0 and proc.stdout.strip() not in ("", "null"):
            return [os.path.normpath(p) for p in json.loads(proc.stdout)]
    return None


def inventory(files, dists):
    expected = {}
    packages = _dpkg_rocm_packages()
    for pkg in packages:
        for path in _dpkg_files(pkg):
            if SHARED_LIB_RE.search(path) or KERNEL_FILE_RE.search(path):
                expected.setdefault(path, f"dpkg {pkg}")
    for path in files:
        expected.setdefault(path, "component")
    undeclared = []
    for dist in dists:
        libs = _dist_libraries(dist)
        if libs is None:
            undeclared.append(dist)
            continue
        for path in libs:
            expected.setdefault(path, f"python {dist}")
    out = {}
    for path, source in sorted(expected.items()):
        # A symlink whose target is gone is missing too (the link is listed, the file is not there).
        out[path] = {"source": source, "exists": os.path.exists(path)}
    return {"rocm_packages": packages, "files": out, "dists_not_installed": undeclared}


def main(argv):
    if argv[:1] == ["--inventory"]:
        files, dists, rest = [], [], argv[1:]
        while rest:
            opt, val, rest = rest[0], rest[1] if len(rest) > 1 else "", rest[2:]
            (files if opt == "--file" else dists).append(val)
        json.dump(inventory(files, dists), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    result = {}
    for path in walk(argv):
        machine = elf_machine(path)
        if machine == EM_AMDGPU:
            result[path] = {"kind": "gpu"}
        elif machine == EM_X86_64:
            proc = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            result[path] = {"kind": "host", "ldd": proc.stdout, "rc": proc.returncode}
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
