"""GPU architectures compiled into files: a thin shim over the probe ``rocmforge/data/probes/archs.py`` and its parts.

The implementation lives in the probe because it is also copied into containers and
run there with the container's python3 (standard library only); this module imports those files
(shipped with the package) and re-exports its public API. Its gfx tables (``GENERIC_TARGETS``) are
the project's only copy: the rest of rocmforge takes them from here.

It adds what `build.py archs` needs to refuse input (the probe itself only reports): a file named
on the command line that is no ELF file, offload bundle, ar archive or Tensile file is bad input
(:func:`not_scannable`), and :func:`scan_checked` marks every file (named, or found in a folder)
that is cut short: an ELF whose program headers, section headers, segments or sections lie past
its end, or an offload bundle whose entries do.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from rocmforge.shared import packagedata

PROBE_PATH = packagedata.PROBES / "archs.py"
# The files the probe is made of: a copy of it needs all of them in one folder.
PARTS = ("archs.py", "gfxnames.py", "bundles.py", "codeobjects.py", "wholefile.py")

_probe = packagedata.probe("archs")
_bundles = packagedata.probe("bundles")
_codeobjects = packagedata.probe("codeobjects")
_wholefile = packagedata.probe("wholefile")

EF_AMDGPU_MACH = _probe.EF_AMDGPU_MACH
GENERIC_TARGETS = _probe.GENERIC_TARGETS
FileArchs = _probe.FileArchs
arch_sort_key = _probe.arch_sort_key
library_coverage = _probe.library_coverage
device_targets = _probe.device_targets
host_only_reason = _probe.host_only_reason
parse_target_id = _probe.parse_target_id
runs_on = _probe.runs_on
main = _probe.main
scan_bytes = _probe.scan_bytes
scan_file = _probe.scan_file
scan_paths = _probe.scan_paths
TENSILE_SUFFIXES = _codeobjects.TENSILE_SUFFIXES

__all__ = [
    *_probe.__all__,
    "PARTS",
    "PROBE_PATH",
    "TENSILE_SUFFIXES",
    "damaged",
    "elf_truncation",
    "not_scannable",
    "scan_checked",
]

TRUNCATED = "truncated"  # how the errors scan_checked adds begin
AR_MAGIC = b"!<arch>\n"

# A file named on the command line or found by the probe.
_FilePath = str | os.PathLike[str]


class _Scanned(Protocol):
    """What damaged() reads of a FileArchs (the probe's class, which the type checker cannot see)."""

    @property
    def error(self) -> str | None: ...


def elf_truncation(path: _FilePath) -> str | None:
    """Why the ELF file at ``path`` is cut short (what it declares lies past its end); None when
    it is whole or is no ELF file. Reads only the headers (the probe's wholefile.elf_layout)."""
    with open(path, "rb") as f:
        if f.read(4) != _codeobjects.ELF_MAGIC:
            return None
        if os.fstat(f.fileno()).st_size < 64:  # mmap needs no more; elf_layout says why it is short
            f.seek(0)
            return _wholefile.elf_layout(f.read())[0]
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _wholefile.elf_layout(mm)[0]


def _bundle_truncation(path: _FilePath) -> str | None:
    """Why a standalone offload bundle (``hipcc --genco``, plain or compressed) does not parse:
    cut short or corrupt. None when it parses or is no bundle."""
    with open(path, "rb") as f:
        head = f.read(len(_bundles.BUNDLE_MAGIC))
        if not head.startswith((_bundles.BUNDLE_MAGIC, _bundles.CCOB_MAGIC)):
            return None
        data = head + f.read()
    if _bundles.find_bundles(data)[0]:
        return None
    kind = "clang offload bundle" if head == _bundles.BUNDLE_MAGIC else "compressed offload bundle"
    return f"{TRUNCATED} or corrupt {kind}: no whole entry in its {len(data)} bytes"


def damaged(result: _Scanned) -> bool:
    """A result whose file could not be read whole: cut short, corrupt, or unreadable."""
    error = result.error
    return error is not None and error.startswith((TRUNCATED, "corrupt", "cannot read"))


def scan_checked(paths: Iterable[_FilePath]) -> list:
    """scan_paths, with every file that is cut short marked: its error says "truncated ...", and
    whatever the probe found in the bytes that are there is kept."""
    out = []
    for r in scan_paths(paths):
        try:
            why = elf_truncation(r.path) or _bundle_truncation(r.path)
        except struct.error:  # header fields too short for what they must hold
            why = f"{TRUNCATED} or corrupt ELF headers"
        except OSError as exc:
            why = None if r.error else f"cannot read: {exc.strerror or exc}"
        if why:
            # the probe's own "truncated ..." says less than why; its other findings are kept
            kept = r.error if r.error and not r.error.startswith(TRUNCATED) else None
            r = dataclasses.replace(r, error=why + (f"; {kept}" if kept else ""))
        out.append(r)
    return out


def not_scannable(path: _FilePath) -> str | None:
    """Why a file named on the command line cannot hold GPU code: empty, or not an ELF file, offload
    bundle, ar archive or Tensile file. None when archs can read it (folders are walked instead)."""
    p = Path(path)
    if p.is_dir():
        return None
    with open(p, "rb") as f:
        head = f.read(len(_bundles.BUNDLE_MAGIC))
    if not head:
        return "empty file: not an ELF file, offload bundle or code object"
    if head.startswith((_codeobjects.ELF_MAGIC, _bundles.BUNDLE_MAGIC, _bundles.CCOB_MAGIC, AR_MAGIC)):
        return None
    if scan_file(str(p)).kind != "other":  # a Tensile file named for its architecture
        return None
    return "not an ELF file, offload bundle, ar archive or Tensile code object file: it can hold no GPU code"
