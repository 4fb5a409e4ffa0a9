#!/usr/bin/env python3
"""List the AMD GPU architectures (gfx targets) compiled into files.

Standard library only (plus the optional ``zstandard`` module, or ``compression.zstd`` on
Python >= 3.14, for zstd-compressed bundles), because this file and its parts are also copied into
containers and run there as ``python3 archs.py [--json] PATH...``. This file holds the coverage
rules and the command line; its parts sit beside it: gfxnames.py (processor tables, target IDs),
bundles.py (offload bundles), codeobjects.py (ELF code objects, Tensile names, the file walk),
wholefile.py (each file read to its end).

What it understands:

* Clang offload bundles (``__CLANG_OFFLOAD_BUNDLE__``), wherever they sit in a file: a linked
  HIP library holds many of them in ``.hip_fatbin``. Each candidate is validated (entry count,
  offsets and sizes inside the buffer, ASCII entry IDs of a known offload kind), so a stray
  magic string (libamdhip64 contains one) is not taken for a bundle.
* Compressed offload bundles (``CCOB``, clang's CompressedOffloadBundle, header versions 1/2/3,
  zlib or zstd), decompressed and then parsed as above.
* AMDGPU ELF code objects (e_machine 224): the processor from ``e_flags & EF_AMDGPU_MACH``,
  xnack/sramecc from the feature bits; notes as a fallback for code object V2.
* Tensile files (``TensileLibrary_gfx90a.co``, ``Kernels.so-000-gfx90a-xnack-.hsaco``, lazy
  ``.dat`` files) whose architecture is only in the file name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# The probe's parts, beside it in the image's probe folder (sys.path[0] when it runs as a script).
from codeobjects import TENSILE_SUFFIXES, FileArchs, scan_bytes, scan_file, scan_paths
from gfxnames import (EF_AMDGPU_MACH, GENERIC_TARGETS, arch_sort_key, device_targets, parse_target_id, runs_on,
                      strip_features)

__all__ = [
    "EF_AMDGPU_MACH",
    "GENERIC_TARGETS",
    "FileArchs",
    "HOST_ONLY",
    "arch_sort_key",
    "code_targets",
    "device_targets",
    "host_only_reason",
    "library_coverage",
    "parse_target_id",
    "runs_on",
    "main",
    "scan_bytes",
    "scan_file",
    "scan_paths",
]


def code_targets(r: FileArchs) -> list[str]:
    """The target IDs a file carries code for (features kept); archs alone when no ID says more."""
    ids = [e for e in r.entries if parse_target_id(e)]
    return ids or list(r.archs)


# ---------------------------------------------------------------------------------------------
# Coverage

#: Libraries of ROCm packages that carry no GPU code by design, and why: a file on this list
#: that has none is fine; any other file of a GPU package, or a component's output, with no
#: GPU code at all is a library built without an offload arch. Matched on the file name.
HOST_ONLY = (
    (r"libamdhip64\.so", "the HIP runtime: host code that loads the GPU code of its callers"),
    (r"libhsa-runtime64\.so", "ROCr, the HSA runtime: host code"),
    (r"libhsakmt\.so", "the amdgpu kernel-driver interface: host code"),
    (r"libamd_comgr\.so", "the code-object manager: a compiler and linker library, host code"),
    (r"libhiprtc(-builtins)?\.so", "HIP's run-time compiler: it makes GPU code, it carries none"),
    (r"libhipblas\.so", "hipBLAS: marshals calls to rocBLAS, whose GPU code is checked"),
    (r"libhipblaslt\.so", "hipBLASLt (Debian's build): its kernels are the code objects of its library folder, "
                           "checked as a folder"),
    (r"libhipsparse\.so", "hipSPARSE: marshals calls to rocSPARSE, whose GPU code is checked"),
    (r"libhiprand\.so", "hipRAND: marshals calls to rocRAND, whose GPU code is checked"),
    (r"libhipsolver\.so", "hipSOLVER: marshals calls to rocSOLVER, whose GPU code is checked"),
    (r"libhipfft\.so", "hipFFT: marshals calls to rocFFT, whose GPU code is checked"),
    (r"libroctx64\.so|libroctracer64\.so|librocprofiler[\w-]*\.so", "tracing and profiling: host code"),
    (r"librocm_smi64\.so|libamd_smi\.so|librocm-core\.so|liboam\.so", "device management: host code"),
    (r"libbitsandbytes_cpu\.so", "bitsandbytes' CPU library (the ROCm one is checked)"),
)
_HOST_ONLY_RE = [(re.compile(r"^(?:" + pat + r")(?:\.[0-9.]*)?$"), why) for pat, why in HOST_ONLY]


def host_only_reason(path: str) -> str | None:
    """Why the file at path carries no GPU code by design (HOST_ONLY), or None."""
    base = os.path.basename(path)
    return next((why for rx, why in _HOST_ONLY_RE if rx.match(base)), None)


def _is_tensile_member(r: FileArchs) -> bool:
    return r.kind in ("code-object", "tensile-name") or (
        r.kind == "host-bundles" and os.path.basename(r.path).endswith(TENSILE_SUFFIXES))


def _in_kernel_folder(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)) == "library" and path.endswith(TENSILE_SUFFIXES)


def _gaps(declared: list[str], targets: list[str]) -> list[str]:
    """What a library with code for these target IDs lacks for the declared archs."""
    out = []
    for want in declared:
        proc = strip_features(want)
        unserved = [d for d in device_targets(want) if not any(runs_on(t, d) for t in targets)]
        if not unserved:
            continue
        near = sorted({t.rsplit("--", 1)[-1] for t in targets if (parse_target_id(t) or ("",))[0] == proc})
        if not near:
            out.append(want)
        else:
            out.append(f"{want} for a {' or '.join(unserved)} device (XNACK off unless HSA_XNACK=1): "
                       f"its code is only for {', '.join(near)}")
    return out


def library_coverage(results, declared_archs, must_carry=None) -> dict[str, list[str]]:
    """Declared archs that each GPU library does not cover, judged on full target IDs.

    GPU libraries: every "host-bundles" file (key: its path) and every folder of code objects /
    Tensile files taken as a whole (key: the folder; the union of its files' code). A declared
    arch is covered when every device it stands for (device_targets) runs some of the code
    (runs_on). must_carry: paths that must carry GPU code (a GPU package's files, a component's
    output); one with none at all, and not on the HOST_ONLY list, misses every declared arch.
    Only libraries with gaps appear.
    """
    declared = list(dict.fromkeys(a.strip() for a in declared_archs if a.strip()))
    must = set(must_carry or ())
    libraries: dict[str, list[str]] = {}
    out: dict[str, list[str]] = {}
    for r in results:
        if _is_tensile_member(r):
            libraries.setdefault(os.path.dirname(r.path) or ".", []).extend(code_targets(r))
        elif r.kind == "host-bundles":
            libraries.setdefault(r.path, []).extend(code_targets(r))
        elif (r.path in must and not r.archs and not host_only_reason(r.path)
              and not _in_kernel_folder(r.path)):      # a kernel folder is judged as a whole
            if r.kind == "other":       # not even an ELF file: emptied, cut short or replaced
                out[r.path] = [", ".join(declared) + ": it is no ELF file (empty, cut short or replaced), "
                               "so it carries no GPU code"]
                continue
            out[r.path] = [", ".join(declared) + ": it carries no GPU code at all (built without an offload "
                           "arch?); if it is host code by design, add it to HOST_ONLY with the reason"]
    for lib, targets in libraries.items():
        gaps = _gaps(declared, targets)
        if gaps:
            out[lib] = gaps
    return out


# ---------------------------------------------------------------------------------------------
# Command line

def _table(results: list[FileArchs]) -> str:
    rows = [("PATH", "KIND", "ARCHS", "NOTE")]
    for r in results:
        rows.append((r.path, r.kind, ",".join(r.archs) or "-", r.error or ""))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" + (f"  {d}" if d else "")
                     for a, b, c, d in rows)


def main(argv=None) -> int:
    """``archs.py [--json] PATH...``; exit 0, 1 when a file had an error, 2 on bad usage."""
    parser = argparse.ArgumentParser(
        prog="archs.py", description="List the AMD GPU architectures compiled into files.")
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    results = scan_paths(args.paths)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        print(_table(results))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
