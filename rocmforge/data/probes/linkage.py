#!/usr/bin/env python3
"""Inventory probe, run inside an image: what the image *should* hold, each with whether it exists.

`linkage.py --inventory [--packages FILE] [--file PATH]... [--dist NAME]...` prints every GPU
library and GPU program of the image's ROCm packages (dpkg packages whose Maintainer or Homepage
names ROCm: shared objects and kernel files in lib folders, files in bin folders), every file
named with --file (a component's output, e.g. /opt/rocmforge/bin/rocblas-gemm-smoke) and the
shared libraries in the RECORD of each Python distribution named with --dist (torch,
bitsandbytes). The packages looked at are those named in FILE (a JSON list: the lock's closure for
the image, computed on the host) when it is given, else the ROCm packages still installed. A
package of FILE that is not installed is reported (`packages_not_installed`): its file list is
gone with it, and the suites fail on it by name. A deleted file stays in the lists, so it is
reported missing, except where the image's prune records (/opt/rocmforge/prune/*.json, left by
perarch.py prune) say the build removed it: a per-arch kernel file of an arch no record kept is
counted under `files_pruned` instead (perarch.py check proves the kept archs complete).

The loading is load.py's. By hand on a GPU host:
    python3 /opt/rocmforge/probes/linkage.py --inventory --file /opt/rocmforge/bin/rocblas-gemm-smoke
"""

import glob
import json
import os
import re
import subprocess
import sys

# Beside this file wherever it runs (sys.path[0] when it runs as a script).
import perarch

# A package is part of the ROCm stack when its Maintainer or Homepage says so (Debian's ROCm
# Team, github.com/ROCm/..., AMD's repository packages).
ROCM_PACKAGE_RE = re.compile(r"rocm|radeonopencompute", re.IGNORECASE)
# Files in those lists that are GPU libraries: shared objects in a lib folder, and the code
# objects / Tensile kernel files of the BLAS libraries; and the programs in bin folders.
SHARED_LIB_RE = re.compile(r"/lib[^/]*/(?:.*/)?[^/]+\.so(?:\.[0-9][0-9.]*)?$")
KERNEL_FILE_RE = re.compile(r"/library/[^/]+\.(?:co|hsaco|dat)$")
PROGRAM_RE = re.compile(r"/(?:s?bin|libexec)/[^/]+$")
PYTHONS = ("/opt/rocmforge/venv/bin/python", "/opt/conda/bin/python", "python3")
PRUNE_RECORDS = "/opt/rocmforge/prune/*.json"


def _kept_archs(pattern=PRUNE_RECORDS):
    """The archs whose per-arch files survived every prune step of the image (each record's
    kept archs, intersected), or None when the image was never pruned."""
    kept = None
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            keep = set(json.load(f).get("keep", []))
        kept = keep if kept is None else kept & keep
    return kept


def _pruned(path, kept):
    kind = perarch.data_dir_kind(os.path.dirname(path))
    arch = perarch.file_arch(os.path.basename(path), kind) if kind else None
    return arch is not None and arch not in kept


def _dpkg_packages():
    """{name: (installed, is a ROCm package)} for every package dpkg knows."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Maintainer}\t${Homepage}\n"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    except OSError:          # not a dpkg system
        return {}
    pkgs = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            pkgs[parts[0]] = (parts[1].strip() == "ii", bool(ROCM_PACKAGE_RE.search(parts[2] + " " + parts[3])))
    return pkgs


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


def inventory(files, dists, wanted=None, kept=None):
    """wanted: package names the image must hold (the lock's closure), or None: what is installed.
    kept: the archs prune steps kept (None: not pruned)."""
    known = _dpkg_packages()
    pruned = 0
    names = sorted(wanted) if wanted is not None else sorted(n for n, (inst, _) in known.items() if inst)
    not_installed = [n for n in names if not known.get(n, (False, False))[0]]
    packages = [n for n in names if n not in not_installed and known[n][1]]
    expected, programs = {}, {}
    for pkg in packages:
        for path in _dpkg_files(pkg):
            if KERNEL_FILE_RE.search(path) and kept is not None and _pruned(path, kept):
                pruned += 1
            elif SHARED_LIB_RE.search(path) or KERNEL_FILE_RE.search(path):
                expected.setdefault(path, f"dpkg {pkg}")
            elif PROGRAM_RE.search(path):
                programs.setdefault(path, f"dpkg {pkg}")
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

    def listed(paths):
        # A symlink whose target is gone is missing too (the link is listed, the file is not there).
        return {p: {"source": s, "exists": os.path.exists(p)} for p, s in sorted(paths.items())}
    return {"rocm_packages": packages, "packages_not_installed": not_installed, "files": listed(expected),
            "programs": listed({p: s for p, s in programs.items() if os.path.isfile(p) or not os.path.lexists(p)}),
            "dists_not_installed": undeclared, "files_pruned": pruned}


def main(argv):
    if argv[:1] != ["--inventory"]:
        print(__doc__, file=sys.stderr)
        return 2
    files, dists, wanted, rest = [], [], None, argv[1:]
    while rest:
        opt, val, rest = rest[0], rest[1] if len(rest) > 1 else "", rest[2:]
        if opt == "--packages":
            with open(val) as f:
                wanted = json.load(f)
        else:
            (files if opt == "--file" else dists).append(val)
    json.dump(inventory(files, dists, wanted, _kept_archs()), sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
