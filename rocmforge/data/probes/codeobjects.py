#!/usr/bin/env python3
"""What one file holds for the GPU: AMDGPU ELF code objects (the processor from ``e_flags``,
xnack/sramecc from the feature bits, notes for code object V2), host files with offload bundles,
and Tensile files whose architecture is only in the name; and the walk over files and folders.

Standard library only; part of the architecture probe (archs.py)."""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass

from bundles import BUNDLE_MAGIC, CCOB_MAGIC, find_bundles
from gfxnames import EF_AMDGPU_MACH, arch_of_target_id, archs_from_name, sorted_archs, strip_features

EM_X86_64 = 62
EM_AMDGPU = 224
ELF_MAGIC = b"\x7fELF"

#: Tensile files whose names may carry the architecture.
TENSILE_SUFFIXES = (".co", ".hsaco", ".dat", ".yaml", ".yml")

_TARGET_IN_TEXT_RE = re.compile(rb"amdgcn-amd-amdhsa-{1,2}(gfx[0-9a-z-]+(?::[a-z0-9]+[+-])*)")


# ---------------------------------------------------------------------------------------------
# Result type

@dataclass(frozen=True)
class FileArchs:
    """What one file holds for the GPU.

    kind: "host-bundles" (host ELF or other container with offload bundles), "host" (host
    ELF without GPU code), "code-object" (AMDGPU ELF, or a standalone offload bundle such as
    ``hipcc --genco`` writes), "tensile-name" (architecture only from the file name), "other".
    """

    path: str
    kind: str
    archs: tuple[str, ...]
    entries: tuple[str, ...]
    error: str | None = None

    def to_json(self) -> dict:
        return {"path": self.path, "kind": self.kind, "archs": list(self.archs),
                "entries": list(self.entries), "error": self.error}


# ---------------------------------------------------------------------------------------------
# AMDGPU ELF code objects

def _features_from_flags(e_flags: int, abi_version: int) -> list[str]:
    feats = []
    if abi_version == 1:  # code object V3: single bits, set = on
        if e_flags & 0x200:
            feats.append("sramecc+")
        if e_flags & 0x100:
            feats.append("xnack+")
    elif abi_version >= 2:  # V4+: 2-bit selectors (0 unsupported, 1 any, 2 off, 3 on)
        for name, shift in (("sramecc", 10), ("xnack", 8)):
            sel = (e_flags >> shift) & 3
            if sel == 2:
                feats.append(name + "-")
            elif sel == 3:
                feats.append(name + "+")
    return feats


def _elf_notes_target(buf) -> str | None:
    """Target from the notes of a (V2) code object: NT_AMD_HSA_ISA_VERSION, ISA name, or the
    target string in the metadata. Best effort; None when nothing is found."""
    try:
        e_shoff, = struct.unpack("<Q", buf[0x28:0x30])
        e_shentsize, e_shnum = struct.unpack("<HH", buf[0x3A:0x3E])
        if not e_shoff or e_shentsize < 64 or e_shoff + e_shnum * e_shentsize > len(buf):
            return None
        for i in range(e_shnum):
            sh = e_shoff + i * e_shentsize
            sh_type, = struct.unpack("<I", buf[sh + 4:sh + 8])
            if sh_type != 7:  # SHT_NOTE
                continue
            off, size = struct.unpack("<QQ", buf[sh + 0x18:sh + 0x28])
            if off + size > len(buf):
                continue
            note = bytes(buf[off:off + size])
            p = 0
            while p + 12 <= len(note):
                namesz, descsz, ntype = struct.unpack("<III", note[p:p + 12])
                name_start = p + 12
                desc_start = name_start + ((namesz + 3) & ~3)
                desc = note[desc_start:desc_start + descsz]
                name = note[name_start:name_start + namesz].rstrip(b"\0")
                p = desc_start + ((descsz + 3) & ~3)
                if name == b"AMD" and ntype == 3 and len(desc) >= 16:  # NT_AMD_HSA_ISA_VERSION
                    major, minor, step = struct.unpack("<III", desc[4:16])
                    if major and major < 100 and minor < 10 and step < 16:
                        return f"gfx{major}{minor}{step:x}"
                m = _TARGET_IN_TEXT_RE.search(desc)
                if m:
                    return m.group(1).decode("ascii")
    except struct.error:
        return None
    return None


def _scan_code_object(buf, path: str) -> FileArchs:
    if len(buf) < 64:
        return FileArchs(path, "other", (), (), "truncated AMDGPU ELF header")
    abi_version = buf[8]
    e_flags, = struct.unpack("<I", buf[48:52])
    mach = EF_AMDGPU_MACH.get(e_flags & 0xFF)
    target = None
    if mach is not None:
        target = ":".join([mach, *_features_from_flags(e_flags, abi_version)])
    else:
        target = _elf_notes_target(buf)
    name_archs, _ = archs_from_name(os.path.basename(path))
    if target is None:
        if name_archs:
            return FileArchs(path, "tensile-name", sorted_archs(name_archs), (),
                             f"unknown EF_AMDGPU_MACH {e_flags & 0xFF:#04x}")
        return FileArchs(path, "code-object", (), (),
                         f"unknown EF_AMDGPU_MACH {e_flags & 0xFF:#04x}")
    arch = strip_features(target)
    error = None
    if name_archs and arch not in name_archs:
        error = f"file name names {', '.join(name_archs)} but the ELF header says {arch}"
    return FileArchs(path, "code-object", (arch,), (target,), error)


# ---------------------------------------------------------------------------------------------
# Scanning

def _scan_buffer(buf, path: str) -> FileArchs:
    """``buf`` supports len, slicing and find (bytes, bytearray or mmap)."""
    is_elf = buf[:4] == ELF_MAGIC
    e_machine = None
    if is_elf and len(buf) >= 20:
        e_machine, = struct.unpack("<H", buf[18:20])
        if buf[5] == 2:  # big-endian ELF (not a ROCm file, but read it right)
            e_machine, = struct.unpack(">H", buf[18:20])
    if e_machine == EM_AMDGPU:
        return _scan_code_object(buf, path)

    ids, errors = find_bundles(buf)
    error = "; ".join(errors) if errors else None
    if ids or errors:
        archs = sorted_archs(a for a in map(arch_of_target_id, ids) if a)
        entries = tuple(dict.fromkeys(ids))
        if is_elf:
            kind = "host-bundles"
        elif buf[:len(BUNDLE_MAGIC)] == BUNDLE_MAGIC or buf[:4] == CCOB_MAGIC:
            kind = "code-object"  # a standalone bundle, as `hipcc --genco` writes
        else:
            kind = "host-bundles"  # e.g. a static archive of HIP objects
        return FileArchs(path, kind, archs, entries, error)

    if is_elf:
        if len(buf) < 20:
            return FileArchs(path, "other", (), (), "truncated ELF header")
        return FileArchs(path, "host", (), ())
    base = os.path.basename(path)
    if base.endswith(TENSILE_SUFFIXES):
        archs, targets = archs_from_name(base)
        if archs:
            return FileArchs(path, "tensile-name", sorted_archs(archs),
                             tuple(dict.fromkeys(targets)))
    return FileArchs(path, "other", (), ())


def scan_bytes(data: bytes, path: str = "") -> FileArchs:
    """Scan an in-memory file image; ``path`` is reported and used for name-based archs."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    return _scan_buffer(data, str(path))


def scan_file(path) -> FileArchs:
    """Scan one file through mmap (large libraries are not copied into memory)."""
    spath = os.fspath(path)
    try:
        with open(spath, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return _scan_buffer(b"", spath)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                if hasattr(mm, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
                    try:
                        mm.madvise(mmap.MADV_SEQUENTIAL)
                    except OSError:
                        pass
                return _scan_buffer(mm, spath)
    except (OSError, ValueError) as exc:
        return FileArchs(spath, "other", (), (), f"cannot read: {exc}")


def _candidates(paths) -> list[str]:
    """Regular files under ``paths``: directories recursively and sorted, symlinks to files
    resolved and deduplicated (a given path or a real file wins over a symlink to it)."""
    chosen: dict[tuple[int, int], tuple[int, int, str]] = {}   # inode -> (rank, order, path)
    missing: list[tuple[int, str]] = []
    order = 0

    def offer(p: str, rank: int) -> None:
        nonlocal order
        try:
            st = os.stat(p)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        key = (st.st_dev, st.st_ino)
        order += 1
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, order, p)

    for raw in paths:
        p = os.fspath(raw)
        try:
            st = os.stat(p)
        except OSError:
            order += 1
            missing.append((order, p))
            continue
        if stat.S_ISDIR(st.st_mode):
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(root, name)
                    offer(full, 2 if os.path.islink(full) else 1)
        else:
            offer(p, 0)
    ordered = sorted([(o, p) for _r, o, p in chosen.values()] + missing)
    return [p for _o, p in ordered]


def scan_paths(paths) -> list[FileArchs]:
    """Scan files and directories (recursively). A path that does not exist gives a result with
    an error; non-regular files (devices, sockets, broken links) are skipped."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    results = []
    for p in _candidates(paths):
        if not os.path.exists(p):
            results.append(FileArchs(p, "other", (), (), "no such file or directory"))
        else:
            results.append(scan_file(p))
    return results

