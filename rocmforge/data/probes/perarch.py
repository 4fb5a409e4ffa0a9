#!/usr/bin/env python3
"""Per-architecture GPU data files: find them, prune those of undeclared archs, and prove that
every declared arch still has what its libraries open.

Standard library only, and importable beside gfxnames.py alone: the build copies this file and
gfxnames.py into the image before its package step and runs ``python3 perarch.py prune`` in the same
RUN, so removed bytes never reach a layer; the archs suite runs ``perarch.py check`` later.

Where the loading rules come from (read in each library's source):

* rocBLAS (library/src/tensile_host.cpp): the Tensile directory is ``<lib>/rocblas[/<ver>]/library``.
  The device's processor name is its gcnArchName without the ``:feature±`` suffixes. With lazy
  loading it opens ``TensileLibrary_lazy_<processor>.dat``, whose Placeholder entries name file
  stems that are loaded on first use: ``<stem>.dat`` plus ``<stem>.co``/``.hsaco`` (arch-free
  ``*_fallback`` stems load ``<stem>_<processor>[-xnack±].hsaco``). Without lazy loading it opens
  ``TensileLibrary.dat`` (or ``TensileLibrary_<processor>.dat``) and every code object matching
  ``*<processor>*co`` (a glob), so another arch's code object is never opened.
* hipBLASLt (library/src/amd_detail/rocblaslt/src/tensile_host.cpp): the same Tensile rules in
  ``<lib>/hipblaslt/library``, plus ``hipblasltExtOpLibrary.dat``, a cross-arch catalogue keyed by
  processor whose entries name ``co_path`` files (``extop_<processor>.co``), and
  ``TensileLiteLibrary_lazy_Mapping.dat``, solution index -> placeholder stem for every arch.
* MIOpen (src/target_properties.cpp ``InitDbId``, src/handle ``GetDbBasename``): system databases
  in ``miopen/db`` are named ``<processor>[_xnack]_<CUs>`` for up to 64 compute units and
  ``<processor>[_xnack]<CUs in hex>`` above, with ``<processor>.kdb`` as the kernel database's
  fallback; with no exact match it picks the closest CU count of the same processor.

A file is per-arch when its name carries exactly one known processor as a whole token (in MIOpen
databases, as the name's processor part). Files without one (cross-arch catalogues such as
``TensileLibrary.dat``, the fallback ``.dat`` files, the mapping) are always kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys
from dataclasses import dataclass, field

# Beside this file wherever it runs (sys.path[0] when it runs as a script).
from gfxnames import EF_AMDGPU_MACH

PROCESSORS = frozenset(n for n in EF_AMDGPU_MACH.values() if n.startswith("gfx") and "generic" not in n)
_BY_LENGTH = sorted(PROCESSORS, key=len, reverse=True)
_TOKEN = re.compile(r"(?<![0-9A-Za-z])gfx[0-9]{2,4}[0-9a-f]?(?![0-9A-Za-z])")
_MIOPEN_CU = re.compile(r"^(?:_xnack)?(?:_\d+|[0-9a-f]{2,3})?$")
DEFAULT_ROOTS = ("/usr/lib", "/usr/local/lib", "/usr/share", "/opt")
TENSILE_LIBRARIES = ("rocblas", "hipblaslt")

def data_dir_kind(path: str) -> str | None:
    """'tensile' for a rocBLAS/hipBLASLt Tensile directory, 'miopen' for MIOpen's databases."""
    parts = path.rstrip("/").split("/")
    if parts[-1] == "library" and any(p in TENSILE_LIBRARIES for p in parts[-3:-1]):
        return "tensile"
    if parts[-1] == "db" and len(parts) > 1 and parts[-2] == "miopen":
        return "miopen"
    return None

def file_arch(name: str, kind: str) -> str | None:
    """The one processor a data file serves, or None when it serves every arch (or none known)."""
    if kind == "miopen":
        stem = name.split(".", 1)[0]
        for p in _BY_LENGTH:
            if stem.startswith(p) and _MIOPEN_CU.match(stem[len(p):]):
                return p
        return None
    found = {t for t in _TOKEN.findall(name) if t in PROCESSORS}
    return found.pop() if len(found) == 1 else None

def data_dirs(roots) -> list[str]:
    out = []
    for root in roots:
        for dirpath, dirnames, _files in os.walk(root):
            dirnames.sort()
            if data_dir_kind(dirpath):
                out.append(dirpath)
    return sorted(set(out))

def _entries(d: str):
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.islink(p) or os.path.isfile(p):
            yield name, p

# ---------------------------------------------------------------------------------------------
# Pruning

def prune(roots, keep: set[str]) -> dict:
    """Removes every per-arch data file whose arch is not in keep; returns the record."""
    record = {"keep": sorted(keep), "dirs": {}, "removed_files": 0, "removed_bytes": 0}
    for d in data_dirs(roots):
        kind = data_dir_kind(d)
        removed = removed_bytes = kept = 0
        archs = set()
        for name, p in _entries(d):
            arch = file_arch(name, kind)
            if arch:
                archs.add(arch)
            if arch is None or arch in keep:
                kept += 1
                continue
            removed_bytes += 0 if os.path.islink(p) else os.lstat(p).st_size
            os.unlink(p)
            removed += 1
        record["dirs"][d] = {"kind": kind, "archs_shipped": sorted(archs), "removed_files": removed,
                             "removed_bytes": removed_bytes, "kept_files": kept}
        record["removed_files"] += removed
        record["removed_bytes"] += removed_bytes
    return record

# ---------------------------------------------------------------------------------------------
# Catalogues (msgpack, the format Tensile writes .dat files in)

def msgpack_load(data: bytes):
    value, end = _mp(data, 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the msgpack value")
    return value

_MP_FIXED = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q",
             0xca: ">f", 0xcb: ">d"}
_MP_LEN = {0xd9: 1, 0xda: 2, 0xdb: 4, 0xc4: 1, 0xc5: 2, 0xc6: 4, 0xdc: 2, 0xdd: 4, 0xde: 2, 0xdf: 4}

def _mp(b: bytes, i: int):
    t = b[i]
    i += 1
    if t <= 0x7f or t >= 0xe0:
        return (t if t <= 0x7f else t - 0x100), i
    if t in (0xc0, 0xc2, 0xc3):
        return {0xc0: None, 0xc2: False, 0xc3: True}[t], i
    if t in _MP_FIXED:
        return struct.unpack_from(_MP_FIXED[t], b, i)[0], i + struct.calcsize(_MP_FIXED[t])
    if 0x80 <= t <= 0x8f:
        return _mp_map(b, i, t & 0x0f)
    if 0x90 <= t <= 0x9f:
        return _mp_array(b, i, t & 0x0f)
    if 0xa0 <= t <= 0xbf:
        n = t & 0x1f
        return b[i:i + n].decode("utf-8", "replace"), i + n
    if t not in _MP_LEN:
        raise ValueError(f"msgpack type 0x{t:02x} at {i - 1} is not one Tensile writes")
    size = _MP_LEN[t]
    n = int.from_bytes(b[i:i + size], "big")
    i += size
    if t in (0xd9, 0xda, 0xdb):
        return b[i:i + n].decode("utf-8", "replace"), i + n
    if t in (0xc4, 0xc5, 0xc6):
        return bytes(b[i:i + n]), i + n
    return _mp_array(b, i, n) if t in (0xdc, 0xdd) else _mp_map(b, i, n)

def _mp_array(b, i, n):
    out = []
    for _ in range(n):
        v, i = _mp(b, i)
        out.append(v)
    return out, i

def _mp_map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = _mp(b, i)
        v, i = _mp(b, i)
        out[k if isinstance(k, (str, int, float, bool)) or k is None else repr(k)] = v
    return out, i

def _collect(node, pick) -> set[str]:
    """Every string pick(mapping) returns for the mappings anywhere inside node."""
    found, stack = set(), [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            value = pick(n)
            if isinstance(value, str):
                found.add(value)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found

def placeholders(node) -> set[str]:
    """Every stem a lazy catalogue's Placeholder entries name."""
    return _collect(node, lambda d: d.get("value") if d.get("type") == "Placeholder" else None)

# ---------------------------------------------------------------------------------------------
# Checking

@dataclass
class DirCheck:
    path: str
    kind: str
    per_arch_files: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    opened: dict[str, int] = field(default_factory=dict)   # declared arch -> files its device would open

def _tensile_opens(d: str, names: set[str], arch: str) -> tuple[list[str], list[str]]:
    """(files a device of this arch opens in this directory, the ones missing)."""
    lazy = f"TensileLibrary_lazy_{arch}.dat"
    wanted: list[str] = []
    missing: list[str] = []
    if any(n.startswith("TensileLibrary_lazy_") for n in names):
        wanted.append(lazy)
        if lazy not in names:
            return wanted, [lazy]
        with open(os.path.join(d, lazy), "rb") as f:
            for stem in sorted(placeholders(msgpack_load(f.read()))):
                wanted.append(f"{stem}.dat")
                if f"{stem}.dat" not in names:
                    missing.append(f"{stem}.dat")
                code = [n for n in names if n.startswith(stem) and n.endswith((".co", ".hsaco"))
                        and (n[len(stem)] == "." or file_arch(n, "tensile") == arch)]
                if not code:
                    missing.append(f"{stem}.co" if file_arch(stem, "tensile") else f"{stem}_{arch}*.hsaco")
                wanted.extend(code)
    else:
        cats = [n for n in ("TensileLibrary.dat", f"TensileLibrary_{arch}.dat") if n in names]
        if not cats:
            missing.append(f"TensileLibrary.dat or TensileLibrary_{arch}.dat")
        wanted.extend(cats)
        code = sorted(n for n in names if n.endswith("co") and arch in n and file_arch(n, "tensile") == arch)
        if not code:
            missing.append(f"*{arch}*co")
        wanted.extend(code)
    # Lazy loading opens Kernels.so-000-<processor>[-xnack±].hsaco when the library starts.
    kernels = sorted(n for n in names if n.startswith("Kernels.so-") and file_arch(n, "tensile") == arch)
    if not kernels and any(n.startswith("Kernels.so-") for n in names):
        missing.append(f"Kernels.so-000-{arch}*.hsaco")
    wanted.extend(kernels)
    mapping = "TensileLiteLibrary_lazy_Mapping.dat"
    if mapping in names:
        with open(os.path.join(d, mapping), "rb") as f:
            table = msgpack_load(f.read())
        stems = {v for v in (table.values() if isinstance(table, dict) else ()) if isinstance(v, str)}
        mine = sorted(f"{s}.dat" for s in stems if file_arch(s, "tensile") == arch)
        wanted.append(mapping)
        missing.extend(n for n in mine if n not in names)
    extops = "hipblasltExtOpLibrary.dat"
    if extops in names:
        with open(os.path.join(d, extops), "rb") as f:
            catalogue = msgpack_load(f.read())
        paths = _co_paths(catalogue.get(arch, {})) if isinstance(catalogue, dict) else set()
        wanted.extend(sorted(paths))
        missing.extend(sorted(p for p in paths if p not in names))
    return wanted, missing

def _co_paths(node) -> set[str]:
    """The code object files hipBLASLt's extension-op catalogue names."""
    return _collect(node, lambda d: d.get("co_path"))

def check_dir(d: str, declared: list[str], pruned: bool) -> DirCheck:
    kind = data_dir_kind(d) or "tensile"
    names = {n for n, _p in _entries(d)}
    dc = DirCheck(d, kind)
    for n in names:
        arch = file_arch(n, kind)
        if arch:
            dc.per_arch_files[arch] = dc.per_arch_files.get(arch, 0) + 1
    if not dc.per_arch_files:
        return dc
    for arch in declared:
        if not dc.per_arch_files.get(arch):
            dc.problems.append(f"declared {arch} has no files here (shipped: {', '.join(sorted(dc.per_arch_files))})")
            continue
        if kind == "tensile":
            wanted, missing = _tensile_opens(d, names, arch)
            dc.opened[arch] = len(wanted)
            if missing:
                dc.problems.append(f"a {arch} device opens {len(missing)} missing file(s): {', '.join(missing[:5])}")
    if pruned:
        extra = sorted(a for a in dc.per_arch_files if a not in declared)
        if extra:
            dc.problems.append("pruned, yet files of undeclared archs remain: "
                               + ", ".join(f"{a} ({dc.per_arch_files[a]})" for a in extra))
    return dc

def check(roots, declared: list[str], pruned: bool) -> list[DirCheck]:
    return [check_dir(d, declared, pruned) for d in data_dirs(roots)]

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prune", help="remove per-arch data files of archs not in --keep")
    p.add_argument("--keep", required=True, help="comma-separated gfx processors")
    p.add_argument("--record", help="write the JSON record here")
    p.add_argument("roots", nargs="*", default=list(DEFAULT_ROOTS))
    c = sub.add_parser("check", help="every declared arch has what its libraries open (JSON; exit 1 on problems)")
    c.add_argument("--archs", required=True)
    c.add_argument("--pruned", action="store_true", help="also fail on files of undeclared archs")
    c.add_argument("roots", nargs="*", default=list(DEFAULT_ROOTS))
    args = ap.parse_args(argv)
    roots = [r for r in args.roots if os.path.isdir(r)]
    if args.cmd == "prune":
        keep = {a.strip() for a in args.keep.split(",") if a.strip()}
        unknown = sorted(keep - PROCESSORS)
        if unknown:
            print(f"perarch: unknown processor(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
        record = prune(roots, keep)
        if args.record:
            os.makedirs(os.path.dirname(args.record) or ".", exist_ok=True)
            with open(args.record, "w", encoding="utf-8") as f:
                json.dump(record, f, sort_keys=True)   # one line: records are read back as lines
                f.write("\n")
        print(f"perarch: kept {', '.join(record['keep'])}; removed {record['removed_files']} files, "
              f"{record['removed_bytes']} bytes, in {len(record['dirs'])} director(ies)")
        return 0
    declared = [a.strip() for a in args.archs.split(",") if a.strip()]
    results = check(roots, declared, args.pruned)
    print(json.dumps([r.__dict__ for r in results], indent=1, sort_keys=True))
    return 1 if any(r.problems for r in results) else 0

if __name__ == "__main__":
    sys.exit(main())
