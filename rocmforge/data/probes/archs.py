#!/usr/bin/env python3
"""List the AMD GPU architectures (gfx targets) compiled into files.

Self-contained on purpose: standard library only (plus the optional ``zstandard`` module, or
``compression.zstd`` on Python >= 3.14, for zstd-compressed bundles), because this file is also
copied into containers and run there as ``python3 archs.py [--json] PATH...``.

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
import mmap
import os
import re
import stat
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Iterable

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

# ---------------------------------------------------------------------------------------------
# Tables

#: EF_AMDGPU_MACH values (``e_flags & 0xff`` of an AMDGPU ELF) -> processor name, from LLVM's
#: AMDGPUUsage "EF_AMDGPU_MACH Values" table / llvm/BinaryFormat/ELF.h. The values for every
#: processor clang-17 knows were checked against what llc-17 emits (see the tests).
#: 0x040 gfx940 and 0x04b gfx941 were dropped from LLVM 20 but exist in shipped binaries.
EF_AMDGPU_MACH: dict[int, str] = {
    # R600-based processors (not GCN; no HIP code objects, listed for completeness).
    0x001: "r600", 0x002: "r630", 0x003: "rs880", 0x004: "rv670", 0x005: "rv710",
    0x006: "rv730", 0x007: "rv770", 0x008: "cedar", 0x009: "cypress", 0x00A: "juniper",
    0x00B: "redwood", 0x00C: "sumo", 0x00D: "barts", 0x00E: "caicos", 0x00F: "cayman",
    0x010: "turks",
    # AMDGCN-based processors.
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704",
    0x028: "gfx801", 0x029: "gfx802", 0x02A: "gfx803", 0x02B: "gfx810",
    0x02C: "gfx900", 0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906", 0x030: "gfx908",
    0x031: "gfx909", 0x032: "gfx90c",
    0x033: "gfx1010", 0x034: "gfx1011", 0x035: "gfx1012",
    0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032", 0x039: "gfx1033",
    0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805",
    0x03D: "gfx1035", 0x03E: "gfx1034", 0x03F: "gfx90a", 0x040: "gfx940",
    0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150", 0x044: "gfx1103",
    0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200",
    0x049: "gfx1250", 0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942",
    0x04E: "gfx1201", 0x04F: "gfx950", 0x050: "gfx1310",
    0x051: "gfx9-generic", 0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic",
    0x054: "gfx11-generic", 0x055: "gfx1152", 0x057: "gfx1154", 0x058: "gfx1153",
    0x059: "gfx12-generic", 0x05A: "gfx1251", 0x05B: "gfx12-5-generic",
    0x05C: "gfx1172", 0x05D: "gfx1170", 0x05E: "gfx1171", 0x05F: "gfx9-4-generic",
    0x062: "gfx11-7-generic", 0x063: "gfx13-generic",
}

#: Generic targets -> the processors their code objects run on (AMDGPUUsage "AMDGPU Generic
#: Processors"). Used by library_coverage: gfx11-generic code covers a declared gfx1101.
GENERIC_TARGETS: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset({"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034",
                                  "gfx1035", "gfx1036"}),
    "gfx11-generic": frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
                                "gfx1151", "gfx1152", "gfx1153"}),
    "gfx11-7-generic": frozenset({"gfx1170", "gfx1171", "gfx1172"}),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
    "gfx12-5-generic": frozenset({"gfx1250", "gfx1251"}),
    "gfx13-generic": frozenset({"gfx1310"}),
}

EM_X86_64 = 62
EM_AMDGPU = 224
ELF_MAGIC = b"\x7fELF"

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
BUNDLE_KINDS = frozenset({"hip", "hipv4", "host", "openmp", "hcc"})
MAX_BUNDLE_ENTRIES = 4096
MAX_ENTRY_ID_LEN = 1024
MAX_UNCOMPRESSED = 1 << 34          # 16 GiB: far above any real bundle, guards the allocator
_CCOB_HEADER_SIZE = {1: 4 + 2 + 2 + 4 + 8, 2: 4 + 2 + 2 + 4 + 4 + 8, 3: 4 + 2 + 2 + 8 + 8 + 8}
_CCOB_ZLIB, _CCOB_ZSTD = 0, 1       # llvm::compression::Format
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"

#: Tensile files whose names may carry the architecture.
TENSILE_SUFFIXES = (".co", ".hsaco", ".dat", ".yaml", ".yml")

ZSTD_MISSING = "zstd-compressed bundle but the zstandard module is not installed"

# A gfx processor at the end of a target ID (features after ':'), e.g. "gfx90a:xnack-".
_ID_ARCH_RE = re.compile(r"(?:^|-)(gfx[0-9a-z]+(?:-[0-9a-z]+)*?)((?::[a-z0-9_]+[+-]?)*)$")
# A gfx processor inside a file name; Tensile spells features with '-', e.g. gfx90a-xnack+.
_NAME_ARCH_RE = re.compile(
    r"(?<![0-9a-zA-Z])(gfx(?:\d+(?:-\d+)*-generic|\d{1,2}\d[0-9a-f]))(?![0-9a-zA-Z])"
    r"((?:[-:_](?:xnack|sramecc)[+-])*)")
_SPECIFIC_RE = re.compile(r"gfx(\d{1,2})(\d)([0-9a-f])")
_GENERIC_RE = re.compile(r"gfx(\d+)(?:-(\d+))?-generic")
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
# Architecture names

def arch_sort_key(name: str) -> tuple:
    """Order gfx names by generation: gfx803 < gfx900 < gfx90a < gfx1010 < gfx1100."""
    m = _SPECIFIC_RE.fullmatch(name)
    if m:
        return (int(m.group(1)), int(m.group(2)), int(m.group(3), 16), name)
    m = _GENERIC_RE.fullmatch(name)
    if m:
        return (int(m.group(1)), int(m.group(2) or 0), -1, name)
    return (1 << 20, 0, 0, name)


def _sorted_archs(archs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(archs), key=arch_sort_key))


def arch_of_target_id(target: str) -> str | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` or ``gfx90a:xnack-`` -> ``gfx90a``."""
    m = _ID_ARCH_RE.search(target)
    return m.group(1) if m else None


def strip_features(arch: str) -> str:
    """``gfx90a:xnack-`` -> ``gfx90a`` (declared archs may carry features)."""
    return arch.strip().split(":", 1)[0]


def _archs_from_name(name: str) -> tuple[list[str], list[str]]:
    archs, targets = [], []
    for m in _NAME_ARCH_RE.finditer(name):
        archs.append(m.group(1))
        feats = [f[1:] for f in re.findall(r"[-:_](?:xnack|sramecc)[+-]", m.group(2))]
        targets.append(":".join([m.group(1), *sorted(feats)]))
    return archs, targets


# ---------------------------------------------------------------------------------------------
# Offload bundles

def _u64(buf, off: int) -> int:
    return struct.unpack("<Q", buf[off:off + 8])[0]


def parse_bundle(buf, start: int = 0) -> tuple[list[str], int] | None:
    """Parse the uncompressed offload bundle at ``buf[start]``.

    Returns (entry IDs, offset just past the header) or None when the bytes there are not a
    valid bundle. Entry offsets are relative to the bundle start and must lie inside ``buf``.
    """
    end = len(buf)
    pos = start + len(BUNDLE_MAGIC)
    if buf[start:pos] != BUNDLE_MAGIC or pos + 8 > end:
        return None
    count = _u64(buf, pos)
    pos += 8
    if not 1 <= count <= MAX_BUNDLE_ENTRIES:
        return None
    ids = []
    for _ in range(count):
        if pos + 24 > end:
            return None
        offset, size, id_len = struct.unpack("<QQQ", buf[pos:pos + 24])
        pos += 24
        if not 1 <= id_len <= MAX_ENTRY_ID_LEN or pos + id_len > end:
            return None
        if start + offset + size > end:
            return None
        raw = bytes(buf[pos:pos + id_len])
        pos += id_len
        if not all(0x21 <= b < 0x7F for b in raw):
            return None
        entry_id = raw.decode("ascii")
        if entry_id.split("-", 1)[0] not in BUNDLE_KINDS or "-" not in entry_id:
            return None
        ids.append(entry_id)
    return ids, pos


class _NoZstd(Exception):
    pass


def _zstd_decompressor():
    """A zstd decompressobj-like object (stream API), or raise _NoZstd."""
    try:  # Python >= 3.14
        from compression import zstd as _stdlib_zstd  # type: ignore[import-not-found]
        return _stdlib_zstd.ZstdDecompressor()
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        raise _NoZstd() from None
    return zstandard.ZstdDecompressor().decompressobj()


def _ccob_header(buf, start: int):
    """Validate a CCOB header; returns (version, method, header size, compressed end or None,
    uncompressed size) or None when these bytes are not a compressed bundle."""
    end = len(buf)
    if start + 8 > end:
        return None
    version, method = struct.unpack("<HH", buf[start + 4:start + 8])
    hsize = _CCOB_HEADER_SIZE.get(version)
    if hsize is None or method not in (_CCOB_ZLIB, _CCOB_ZSTD) or start + hsize > end:
        return None
    if version == 1:
        (usize,) = struct.unpack("<I", buf[start + 8:start + 12])
        total = None
    elif version == 2:
        total, usize = struct.unpack("<II", buf[start + 8:start + 16])
    else:
        total, usize = struct.unpack("<QQ", buf[start + 8:start + 24])
    if not len(BUNDLE_MAGIC) + 8 <= usize <= MAX_UNCOMPRESSED:
        return None
    stream_end = None
    if total is not None:
        if total <= hsize or start + total > end:
            return None
        stream_end = start + total
    head = bytes(buf[start + hsize:start + hsize + 4])
    if method == _CCOB_ZLIB:
        if len(head) < 2 or head[0] & 0x0F != 8 or (head[0] << 8 | head[1]) % 31:
            return None
    elif head != _ZSTD_FRAME_MAGIC:
        return None
    return version, method, hsize, stream_end, usize


def decompress_ccob(buf, start: int = 0) -> bytes | None:
    """Decompress the CCOB blob at ``buf[start]``.

    Returns the uncompressed bundle, or None when the bytes are not a valid compressed bundle.
    Raises _NoZstd for a zstd blob without a zstd module, ValueError for a corrupt stream.
    """
    header = _ccob_header(buf, start)
    if header is None:
        return None
    _version, method, hsize, stream_end, usize = header
    decomp = zlib.decompressobj() if method == _CCOB_ZLIB else _zstd_decompressor()
    pos = start + hsize
    limit = stream_end if stream_end is not None else len(buf)
    out = []
    got = 0
    chunk = 1 << 20
    try:
        while pos < limit and got < usize:
            piece = bytes(buf[pos:min(pos + chunk, limit)])
            pos += len(piece)
            data = decomp.decompress(piece)
            got += len(data)
            out.append(data)
            if got > usize:
                raise ValueError(f"more than the {usize} bytes the header announces")
            if getattr(decomp, "eof", False):
                break
    except (zlib.error, ValueError) as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # zstandard.ZstdError / compression.zstd.ZstdError
        raise ValueError(str(exc)) from None
    result = b"".join(out)
    if len(result) != usize:
        raise ValueError(f"decompressed {len(result)} bytes, header announces {usize}")
    return result


def find_bundles(buf) -> tuple[list[str], list[str]]:
    """Every offload bundle entry ID in ``buf`` (uncompressed and CCOB), and errors met."""
    ids: list[str] = []
    errors: list[str] = []
    pos = buf.find(BUNDLE_MAGIC)
    while pos != -1:
        parsed = parse_bundle(buf, pos)
        if parsed:
            ids.extend(parsed[0])
            pos = buf.find(BUNDLE_MAGIC, parsed[1])
        else:
            pos = buf.find(BUNDLE_MAGIC, pos + 1)
    pos = buf.find(CCOB_MAGIC)
    while pos != -1:
        nxt = pos + 1
        try:
            data = decompress_ccob(buf, pos)
        except _NoZstd:
            if ZSTD_MISSING not in errors:
                errors.append(ZSTD_MISSING)
            data = None
        except ValueError as exc:
            errors.append(f"corrupt compressed offload bundle at offset {pos:#x}: {exc}")
            data = None
        if data is not None:
            inner_ids, inner_err = find_bundles(data) if data[:4] != CCOB_MAGIC else ([], [])
            if inner_ids:
                ids.extend(inner_ids)
            else:
                errors.append(f"compressed offload bundle at offset {pos:#x} holds no valid "
                              "bundle")
            errors.extend(inner_err)
        pos = buf.find(CCOB_MAGIC, nxt)
    return ids, errors


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
    name_archs, _ = _archs_from_name(os.path.basename(path))
    if target is None:
        if name_archs:
            return FileArchs(path, "tensile-name", _sorted_archs(name_archs), (),
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
        archs = _sorted_archs(a for a in map(arch_of_target_id, ids) if a)
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
        archs, targets = _archs_from_name(base)
        if archs:
            return FileArchs(path, "tensile-name", _sorted_archs(archs),
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


# ---------------------------------------------------------------------------------------------
# Target IDs: which code a device runs

#: Processors with the xnack / sramecc target features (LLVM AMDGPUUsage, "AMDGPU Processors",
#: column "Target Features"). A device of any other processor reports its bare name.
XNACK_PROCESSORS = frozenset({
    "gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
    "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013",
    "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic"})
SRAMECC_PROCESSORS = frozenset({"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
                                "gfx9-4-generic"})


def parse_target_id(target: str) -> tuple[str, dict[str, str]] | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`` or ``gfx90a:xnack-`` -> ("gfx90a",
    {"sramecc": "+", "xnack": "-"}); a feature left out is absent ("any"). None: no gfx target."""
    m = _ID_ARCH_RE.search(target.strip())
    if not m:
        return None
    feats = {}
    for f in m.group(2).split(":")[1:]:
        if f[-1:] in "+-" and f[:-1] in ("xnack", "sramecc"):
            feats[f[:-1]] = f[-1]
    return m.group(1), feats


def device_targets(declared: str) -> list[str]:
    """The devices a declared arch stands for, as target IDs the runtime reports for them. A
    feature the declaration leaves out takes the device's default: XNACK off (the driver turns
    it on only for processes run with HSA_XNACK=1), SRAM ECC either way (a board setting:
    MI210s ship with it on, Radeon Pro VIIs with it off). ``gfx90a`` -> gfx90a:sramecc+:xnack-
    and gfx90a:sramecc-:xnack-; ``gfx1100`` -> gfx1100."""
    parsed = parse_target_id(declared)
    if parsed is None:
        return [declared.strip()]
    proc, feats = parsed
    xnack = feats.get("xnack", "-") if proc in XNACK_PROCESSORS else None
    eccs = [feats["sramecc"]] if "sramecc" in feats else ["+", "-"]
    eccs = eccs if proc in SRAMECC_PROCESSORS else [None]
    return [":".join([proc] + ([f"sramecc{e}"] if e else []) + ([f"xnack{xnack}"] if xnack else []))
            for e in eccs]


def runs_on(code_target: str, device_target: str) -> bool:
    """Whether a device runs code built for code_target, by the HIP runtime's rule (ROCm/clr,
    hipamd/src/hip_comgr_helper.cpp, isCodeObjectCompatibleWithDevice; hip_code_object.cpp in
    older releases): the same processor (or a generic target that includes it), and every
    feature the code names ('+' or '-') equal to the device's; a feature the code leaves out
    runs either way. So code only for gfx90a:xnack+ runs on no default-mode (XNACK off) MI210."""
    code, dev = parse_target_id(code_target), parse_target_id(device_target)
    if code is None or dev is None:
        return False
    (cproc, cfeats), (dproc, dfeats) = code, dev
    if cproc != dproc and dproc not in GENERIC_TARGETS.get(cproc, ()):
        return False
    return all(dfeats.get(k) == v for k, v in cfeats.items())


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
