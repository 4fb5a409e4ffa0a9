"""Reading the formats the generated files' rules parse: dpkg control stanzas, dpkg-divert calls in
maintainer scripts, glibc's ld.so.cache, an ELF library's SONAME; and following symlinks inside an
image's file list."""

from __future__ import annotations

import re
import struct
import tempfile
from typing import TYPE_CHECKING

from rocmforge.shared import packagedata

if TYPE_CHECKING:
    from rocmforge.verify.outside.imagefs import Have


_DIVERT_ARG_OPTIONS = {"--divert", "--package", "--admindir", "--instdir", "--root"}
_SHELL_VAR = re.compile(r"\\\$(?:\\\{)?[#A-Za-z_][A-Za-z0-9_#/]*(?:\\\})?")  # in re.escape()d text


def divert_calls(scripts: str) -> list[tuple[re.Pattern, re.Pattern]]:
    """(diverted path, divert-to path) of each `dpkg-divert ... --add ... --divert TO PATH` in scripts,
    in any order of its options, as patterns: a shell variable in them stands for any text."""

    def pattern(word: str) -> re.Pattern:
        return re.compile(_SHELL_VAR.sub(".+", re.escape(word.strip("'\""))))

    out = []
    for line in scripts.splitlines():
        if "dpkg-divert" not in line or "--add" not in line:
            continue
        words = line.split("dpkg-divert", 1)[1].split()
        to = path = None
        i = 0
        while i < len(words) and words[i] not in ("||", "&&", ";", "|"):
            w = words[i]
            if w in _DIVERT_ARG_OPTIONS and i + 1 < len(words):
                to = words[i + 1] if w == "--divert" else to
                i += 2
                continue
            if not w.startswith("-") and path is None:
                path = w
            i += 1
        if to and path:
            out.append((pattern(path), pattern(to)))
    return out


def resolve(files: dict[str, Have], rel: str, depth: int = 0) -> str | None:
    """rel with every symlink on its way followed inside the image (None: it leads nowhere)."""
    parts = [p for p in rel.split("/") if p]
    done: list[str] = []
    for part in parts:
        if part == "..":
            done = done[:-1]
            continue
        here = "/".join([*done, part])
        have = files.get(here)
        if have is None:
            return None
        if have.type == "l":
            if depth >= 40:  # a loop, as the kernel's ELOOP: it leads nowhere
                return None
            target = have.data if have.data.startswith("/") else "/".join([*done, have.data])
            found = resolve(files, target, depth + 1)
            if found is None:
                return None
            done = found.split("/") if found else []
        else:
            done.append(part)
    return "/".join(done)


def control_fields(block: str) -> dict[str, str]:
    """A control stanza's fields (continuation lines joined with newlines)."""
    fields: dict[str, str] = {}
    key = None
    for line in block.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


_NEW_MAGIC = b"glibc-ld.so.cache1.1"


def ld_cache_entries(data: bytes) -> list[tuple[str, str]] | None:
    """(key, path) of each entry of a glibc ld.so.cache (the new format; an old-format header is skipped)."""
    start = data.find(_NEW_MAGIC)
    if start < 0:
        return None
    nlibs = struct.unpack_from("<I", data, start + 20)[0]
    # header: magic(20) nlibs(4) len_strings(4) flags(1) pad(3) extension_offset(4) unused(3*4)
    entries_at = start + 48
    out = []
    for i in range(nlibs):
        _flags, key, value, _osv, _hwcap = struct.unpack_from("<iIIIQ", data, entries_at + i * 24)

        def string(off: int) -> str:
            # string offsets in the new format count from the start of the new header
            pos = start + off
            return data[pos : data.index(b"\0", pos)].decode(errors="replace")

        out.append((string(key), string(value)))
    return out


def elf_soname(data: bytes) -> str | None:
    """A 64-bit ELF library's DT_SONAME (what ldconfig names its link after), or None: read by the
    linkage probe's own reader (probes/load.py, which reads files), from a temporary copy."""
    with tempfile.NamedTemporaryFile(prefix="rocmforge-elf-") as f:
        f.write(data)
        f.flush()
        return packagedata.probe("load").elf_soname(f.name)
