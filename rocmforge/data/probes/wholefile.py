#!/usr/bin/env python3
"""GPU files read to their end: the layout of an ELF file (headers, segments and sections inside
it), the target an AMDGPU code object names in its notes and in ``e_flags`` (they must agree), a
msgpack value walked to its last byte, a Tensile catalogue's processors, and whether a per-arch
file's name agrees with the code it holds.

A file whose first bytes look right can still be cut short or overwritten further on, and the HIP
runtime or Tensile then fails on the device (hipErrorInvalidImage, a msgpack error) where no check
without a GPU looked: so every part the file declares is looked at, never only its header.

Standard library only; part of the architecture probe (archs.py). Functions take a buffer that
supports len, slicing and struct.unpack_from (bytes, mmap, memoryview) with the offset and size of
the part to read, so a code object inside a 1 GB library is read in place, not copied."""

from __future__ import annotations

import re
import struct

from gfxnames import (EF_AMDGPU_MACH, SRAMECC_PROCESSORS, XNACK_PROCESSORS, parse_target_id, runs_on)

TRUNCATED = "truncated"
SHT_NOTE, SHT_NOBITS, PT_NOTE = 7, 8, 4
NT_AMD_HSA_ISA_VERSION, NT_AMD_HSA_ISA_NAME, NT_AMDGPU_METADATA = 3, 11, 32
_TARGET_IN_TEXT_RE = re.compile(rb"amdgcn-amd-amdhsa-{1,2}(gfx[0-9a-z-]+(?::[a-z0-9]+[+-])*)")


# ---------------------------------------------------------------------------------------------
# msgpack, walked without building values (a 12 MB Tensile catalogue in ~0.2 s)

def _tables():
    step, kids = [-1] * 256, [0] * 256      # bytes a value of this type byte takes (type byte
    for t in list(range(0x00, 0x80)) + list(range(0xE0, 0x100)) + [0xC0, 0xC2, 0xC3]:   # included);
        step[t] = 1                                                                    # values inside
    for t, n in {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xCA: 4, 0xCB: 8,
                 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}.items():
        step[t] = 1 + n
    for t in range(0xA0, 0xC0):
        step[t] = 1 + (t & 0x1F)
    for t in range(0x80, 0x90):
        step[t], kids[t] = 1, 2 * (t & 0x0F)
    for t in range(0x90, 0xA0):
        step[t], kids[t] = 1, t & 0x0F
    return step, [k - 1 for k in kids]      # each value read leaves its children still to read


_STEP, _DELTA = _tables()
# Types with a length field: (bytes of the length, what it counts: bytes 0, values 1, pairs 2, ext 3).
_SIZED = {0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0), 0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),
          0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2), 0xC7: (1, 3), 0xC8: (2, 3), 0xC9: (4, 3)}


def msgpack_skip(buf, pos: int, end: int, values: int = 1) -> int:
    """The offset just past ``values`` msgpack values starting at ``pos``; ValueError when they run
    past ``end`` or hold a byte that starts no msgpack value. The loop is the suite's hottest (every
    catalogue byte passes through it), so it checks no bound: reading past the buffer ends it, and
    reading past ``end`` is caught once, at the end."""
    step, delta, pending = _STEP, _DELTA, values
    try:
        while pending:
            t = buf[pos]
            s = step[t]
            if s > 0:
                pos += s
                pending += delta[t]
                continue
            size, what = _SIZED[t]
            n = int.from_bytes(buf[pos + 1:pos + 1 + size], "big")
            pos += 1 + size
            pending -= 1
            if what == 0:
                pos += n
            elif what == 3:
                pos += n + 1
            else:
                pending += n * what
    except IndexError:
        pos = end + 1
    except KeyError:
        raise ValueError(f"byte {buf[pos]:#04x} at offset {pos} starts no msgpack value") from None
    if pos > end:
        raise ValueError(f"{TRUNCATED} msgpack data: a value runs past its end ({end} bytes)")
    return pos


def msgpack_whole(buf, pos: int = 0, end: int | None = None) -> None:
    """One msgpack value that fills buf[pos:end] exactly, or ValueError."""
    end = len(buf) if end is None else end
    stop = msgpack_skip(buf, pos, end)
    if stop != end:
        raise ValueError(f"{end - stop} bytes after the msgpack value")


def _mp_str(buf, pos: int, end: int) -> tuple[str | None, int]:
    """A msgpack string at pos (None for any other type) and the offset past the value."""
    t = buf[pos]
    if 0xA0 <= t <= 0xBF:
        n, start = t & 0x1F, pos + 1
    elif t in (0xD9, 0xDA, 0xDB):
        size = _SIZED[t][0]
        n, start = int.from_bytes(buf[pos + 1:pos + 1 + size], "big"), pos + 1 + size
    else:
        return None, msgpack_skip(buf, pos, end)
    if start + n > end:
        raise ValueError(f"{TRUNCATED} msgpack data: a string runs past its end")
    return bytes(buf[start:start + n]).decode("utf-8", "replace"), start + n


# ---------------------------------------------------------------------------------------------
# ELF layout

def elf_layout(buf, base: int = 0, size: int | None = None):
    """Check that every header, segment and section the ELF at buf[base:base+size] declares lies
    inside it. Returns (error or None, [(sh_type, offset, size)] of its sections, relative to base)."""
    size = len(buf) - base if size is None else size
    if size < 16:
        return f"{TRUNCATED} ELF file: {size} bytes, shorter than its 16-byte identification", []
    cls, data = buf[base + 4], buf[base + 5]
    if cls not in (1, 2) or data not in (1, 2):
        return f"corrupt ELF identification: class {cls}, data encoding {data}", []
    wide, order = cls == 2, "<" if data == 1 else ">"
    ehsize = 64 if wide else 52
    if size < ehsize:
        return f"{TRUNCATED} ELF file: {size} bytes, shorter than its {ehsize}-byte header", []
    phoff, shoff = struct.unpack_from(order + ("QQ" if wide else "II"), buf, base + (0x20 if wide else 0x1C))
    phent, phnum, shent, shnum, shstrndx = struct.unpack_from(order + "HHHHH", buf, base + (0x36 if wide else 0x2A))
    for what, off, ent, num, least in (("program headers", phoff, phent, phnum, 56 if wide else 32),
                                       ("section headers", shoff, shent, shnum, 64 if wide else 40)):
        if num and ent < least:
            return f"corrupt ELF header: {what} of {ent} bytes, fewer than the {least} they hold", []
        if num and off + ent * num > size:
            return f"{TRUNCATED} ELF file: its {what} end at byte {off + ent * num}, past its end ({size} bytes)", []
    for i in range(phnum):
        ph = base + phoff + i * phent
        offset, filesz = (struct.unpack_from(order + "Q16xQ", buf, ph + 8) if wide
                          else struct.unpack_from(order + "I8xI", buf, ph + 4))
        if offset + filesz > size:
            return f"{TRUNCATED} ELF file: segment {i} ends at byte {offset + filesz}, past its end ({size} bytes)", []
    sections = []
    for i in range(shnum):
        sh = base + shoff + i * shent
        sh_type, = struct.unpack_from(order + "I", buf, sh + 4)
        offset, sh_size = struct.unpack_from(order + ("QQ" if wide else "II"), buf, sh + (0x18 if wide else 0x10))
        if sh_type != SHT_NOBITS and offset + sh_size > size:
            return f"{TRUNCATED} ELF file: section {i} ends at byte {offset + sh_size}, past its end ({size} bytes)", []
        sections.append((sh_type, offset, sh_size))
    if shnum and shstrndx >= shnum and shstrndx != 0xFFFF:
        return f"corrupt ELF header: section name table {shstrndx} of {shnum} sections", []
    return None, sections


# ---------------------------------------------------------------------------------------------
# AMDGPU code objects: the target from the notes and from e_flags

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
            if sel in (2, 3):
                feats.append(name + "-+"[sel - 2])
    return feats


def flags_target(buf, base: int = 0) -> str | None:
    """The target ``e_flags`` names (processor and feature selectors), None for an unknown processor."""
    e_flags, = struct.unpack_from("<I", buf, base + 48)
    mach = EF_AMDGPU_MACH.get(e_flags & 0xFF)
    return None if mach is None else ":".join([mach, *_features_from_flags(e_flags, buf[base + 8])])


def _notes(buf, base: int, off: int, size: int):
    """(name, type, desc offset, desc size) of each note in a note section; ValueError when one
    runs past the section."""
    pos, end = base + off, base + off + size
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from("<III", buf, pos)
        name_at = pos + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        pos = desc_at + ((descsz + 3) & ~3)
        if desc_at + descsz > end:
            raise ValueError(f"a note runs past its section ({size} bytes)")
        yield bytes(buf[name_at:name_at + namesz]).rstrip(b"\0"), ntype, desc_at, descsz
    if pos < end and any(bytes(buf[pos:end])):
        raise ValueError(f"{end - pos} stray bytes at the end of a note section")


_TARGET_KEY = b"\xadamdhsa.target"        # the key as msgpack writes it (fixstr of 13 bytes)


def _metadata_target(buf, start: int, end: int) -> str | None:
    """``amdhsa.target`` of a metadata note: the string after its key. The kernels' metadata around
    it (megabytes in a Tensile code object) is not walked: the note's bounds were checked, and a
    walk of every note costs more than the whole rest of the suite."""
    if start >= end or not (0x80 <= buf[start] <= 0x8F or buf[start] in (0xDE, 0xDF)):
        raise ValueError("metadata note: not a msgpack map")
    at = buf.find(_TARGET_KEY, start, end)
    if at < 0:
        return None
    try:
        value, _ = _mp_str(buf, at + len(_TARGET_KEY), end)
    except (ValueError, IndexError):
        raise ValueError("metadata note: amdhsa.target runs past the note") from None
    if value is None:
        raise ValueError("metadata note: amdhsa.target is not a string")
    return value


def notes_target(buf, base: int, sections) -> str | None:
    """The target the notes name: ``amdhsa.target`` of the NT_AMDGPU_METADATA notes (code object
    V3+; a linker joining objects keeps one note per object, and assembler-made objects may leave
    the key out), else the ISA name or version of a V2 code object. ValueError when a note is cut
    short or corrupt, or two notes disagree."""
    targets, v2 = set(), None
    for sh_type, off, size in sections:
        if sh_type != SHT_NOTE:
            continue
        for name, ntype, desc, dsize in _notes(buf, base, off, size):
            if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                target = _metadata_target(buf, desc, desc + dsize)
                if target is not None:
                    m = _TARGET_IN_TEXT_RE.search(target.encode())
                    targets.add(m.group(1).decode() if m else target)
            elif name == b"AMD" and ntype == NT_AMD_HSA_ISA_NAME and v2 is None:
                m = _TARGET_IN_TEXT_RE.search(bytes(buf[desc:desc + dsize]))
                v2 = m.group(1).decode() if m else None
            elif name == b"AMD" and ntype == NT_AMD_HSA_ISA_VERSION and dsize >= 16 and v2 is None:
                major, minor, step = struct.unpack_from("<III", buf, desc + 4)
                if 0 < major < 100 and minor < 10 and step < 16:
                    v2 = f"gfx{major}{minor}{step:x}"
    if len(targets) > 1:
        raise ValueError(f"its metadata notes name {', '.join(sorted(targets))}")
    return targets.pop() if targets else v2


def code_object(buf, base: int = 0, size: int | None = None) -> tuple[str | None, str | None]:
    """(target, error) of the AMDGPU code object at buf[base:base+size], read whole: its layout,
    its notes, and the notes' target against e_flags'. The target is None when neither names one."""
    size = len(buf) - base if size is None else size
    if size < 64:
        return None, f"{TRUNCATED} AMDGPU ELF: {size} bytes, shorter than its 64-byte header"
    if buf[base + 4] != 2 or buf[base + 5] != 1:
        return None, "corrupt AMDGPU ELF: not 64-bit little-endian"
    error, sections = elf_layout(buf, base, size)
    if error:
        return None, error
    flags = flags_target(buf, base)
    try:
        noted = notes_target(buf, base, sections)
    except ValueError as exc:
        return flags, f"corrupt AMDGPU code object: {exc}"
    if noted and flags:
        a, b = parse_target_id(noted), parse_target_id(flags)
        v3 = buf[base + 8] == 1          # V3 spells features another way in its note: processors only
        if a is None or b is None or a[0] != b[0] or (not v3 and a[1] != b[1]):
            return noted, f"corrupt AMDGPU code object: its note says {noted}, its e_flags say {flags}"
    target = noted or flags
    if target is None:
        e_flags, = struct.unpack_from("<I", buf, base + 48)
        return None, f"unknown EF_AMDGPU_MACH {e_flags & 0xFF:#04x} and no target in its notes"
    return target, None


# ---------------------------------------------------------------------------------------------
# Tensile catalogues and per-arch names

_PROCESSOR_RE = re.compile(rb"\xa9Processor\xa5value[\xa0-\xbf](gfx[0-9a-z]+)")
# Tensile's kernel names carry the ISA; ISA000 marks kernels built for no processor in particular.
_ISA_RE = re.compile(rb"_ISA(?!000_)([0-9]{1,2}[0-9][0-9a-f])_")
# rocBLAS's placeholder catalogues have no hardware predicate, only kernel names: their solutions
# come first and are all of one ISA, so the first megabyte tells it.
_ISA_WINDOW = 1 << 20


def catalogue_processors(buf) -> tuple[set[str], str | None]:
    """(processors a Tensile catalogue names, error): it must be one msgpack value to its last byte.
    Processors come from its hardware predicates ("Processor"), else its kernels' names ("_ISA90a_")."""
    if not len(buf):
        return set(), "empty catalogue: Tensile reads no msgpack value from it"
    try:
        msgpack_whole(buf)
    except ValueError as exc:
        return set(), f"corrupt msgpack catalogue: {exc}"
    found = {m.group(1).decode() for m in _PROCESSOR_RE.finditer(buf)}
    if not found:
        found = {"gfx" + m.group(1).decode() for m in _ISA_RE.finditer(buf, 0, _ISA_WINDOW)}
    return found, None


def name_devices(target: str) -> list[str]:
    """Every device a per-arch file name serves: a feature the name leaves out is either way (the
    libraries load such a file on every device of the processor)."""
    parsed = parse_target_id(target)
    if parsed is None:
        return []
    proc, feats = parsed
    out = [proc]
    for feat, procs in (("sramecc", SRAMECC_PROCESSORS), ("xnack", XNACK_PROCESSORS)):
        if proc in procs:
            values = [feats[feat]] if feat in feats else ["+", "-"]
            out = [f"{d}:{feat}{v}" for d in out for v in values]
    return out


def name_disagrees(name_target: str, code_targets) -> str | None:
    """Why code for code_targets does not belong in a file named for name_target: some device the
    name serves runs none of it, or some of it is for another processor. None when they agree."""
    codes = [c for c in code_targets if parse_target_id(c)]
    devices = name_devices(name_target)
    if not codes or not devices:
        return None
    foreign = [c for c in codes if not any(runs_on(c, d) for d in devices)]
    unserved = [d for d in devices if not any(runs_on(c, d) for c in codes)]
    if not foreign and not unserved:
        return None
    shown = ", ".join(sorted({c.rsplit("--", 1)[-1] for c in codes}))
    why = (f"a {' or '.join(unserved)} device runs none of it" if unserved and not foreign
           else "code for another target")
    return f"its name says {name_target} but its code is for {shown} ({why})"
