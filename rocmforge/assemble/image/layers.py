"""One layer tar rewritten into its canonical form: run-specific files dropped or blanked (RULES),
times clamped to the epoch, owner names and pax times gone, entries in GNU tar's name order."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

from rocmforge.assemble.image.tarcodec import DIR, LNK, REG, TarEntry, TarReader, TarWriter
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream, HashingWindow, Stream

# What normalisation drops or blanks, and why (paths relative to the layer root). Whiteouts
# (`.wh.*`) are never dropped: they delete files of lower layers.
RULES = (
    "var/log/**: non-empty regular files dropped (apt, dpkg, alternatives logs differ in times); "
    "directories and empty files (wtmp, btmp, lastlog with their owners and modes) kept",
    "var/cache/ldconfig/aux-cache: dropped (holds inode numbers and times)",
    "var/cache/apt/*.bin: dropped (apt's binary caches embed times)",
    "var/lib/apt/lists/*: dropped except partial/ and lock",
    "var/cache/debconf/*-old, var/lib/dpkg/*-old: dropped (backups of the previous state)",
    "etc/machine-id: blanked",
    "tmp/**, root/.cache/**: dropped",
    "**/__pycache__/*.pyc: kept; a timestamp-checked pyc compiled during the build records its "
    "source's build-time mtime, which is clamped to the epoch like the source's own (so the pyc "
    "stays valid and the same on every build)",
)

KEEP, DROP, BLANK = "keep", "drop", "blank"


def layer_path(name: bytes) -> bytes:
    """An entry's name relative to the layer root, whichever way the tar spelled it."""
    while name.startswith(b"./"):
        name = name[2:]
    name = name.lstrip(b"/")
    return b"" if name == b"." else name


def classify(rel: bytes, e: TarEntry) -> str:
    """KEEP, DROP or BLANK for an entry at rel (relative to the layer root). See RULES."""
    parent, _, base = rel.rpartition(b"/")
    if base.startswith(b".wh."):
        return KEEP
    if rel.startswith((b"tmp/", b"root/.cache/")):
        return DROP
    if rel.startswith(b"var/log/"):
        return DROP if e.type == REG and e.size > 0 else KEEP
    if rel == b"var/cache/ldconfig/aux-cache":
        return DROP
    if rel.startswith(b"var/lib/apt/lists/"):
        return KEEP if rel in (b"var/lib/apt/lists/partial", b"var/lib/apt/lists/lock") else DROP
    if e.type != DIR:
        if parent == b"var/cache/apt" and base.endswith(b".bin"):
            return DROP
        if parent in (b"var/cache/debconf", b"var/lib/dpkg") and base.endswith(b"-old"):
            return DROP
    if rel == b"etc/machine-id" and e.type == REG:
        return BLANK
    return KEEP


def sort_key(name: bytes) -> tuple[bytes, ...]:
    """GNU tar --sort=name and Go's filepath.Walk order: a directory, then its children by name."""
    return tuple(name.split(b"/"))


@dataclass
class LayerResult:
    diff_id: str
    size: int
    source_diff_id: str
    entries: int = 0
    dropped: list[str] = field(default_factory=list)
    blanked: list[str] = field(default_factory=list)
    clamped: int = 0
    pycs_clamped: int = 0
    resorted: bool = False
    inherited: bool = False  # a layer of the base, passed through unread
    # Every name the layer holds (directories end in "/"), the ones rewrite_layer drops too; after
    # lowerrules, those of the canonical layer (lowerrules._final_paths). What the layer may have
    # changed, for a reader of the image that needs no container when none of its own files are
    # among them (verify/inventory).
    paths: list[bytes] = field(default_factory=list, repr=False, compare=False)

    @property
    def unchanged(self) -> bool:
        return self.diff_id == self.source_diff_id


class _Spooled(NamedTuple):
    """An entry written to the spool, with what it takes to write it again in name order."""

    key: tuple[bytes, ...]  # sort_key of its name
    arrival: int  # keeps the sort stable for equal keys
    entry: TarEntry
    offset: int  # of its data in the spool


def _clamp_pyc(pieces: Iterable[bytes | memoryview], epoch: int, res: LayerResult) -> Iterator[bytes | memoryview]:
    """A pyc's data with the source mtime in its header clamped like the source file's (PEP 552:
    magic, flags 0 = timestamp-checked, mtime, size). Hash-checked pycs are left alone."""
    it = iter(pieces)
    head = bytearray()
    for piece in it:
        head += piece
        if len(head) >= 16:
            break
    if len(head) >= 16 and head[2:4] == b"\r\n" and head[4:8] == bytes(4):
        if int.from_bytes(head[8:12], "little") > epoch:
            head[8:12] = (epoch & 0xFFFFFFFF).to_bytes(4, "little")
            res.pycs_clamped += 1
    yield bytes(head)
    yield from it


def _decide(e: TarEntry, rel: bytes, dropped_names: set[bytes], log: Callable[[str], None]) -> str:
    action = classify(rel, e)
    if action == KEEP and e.type == LNK and e.linkname in dropped_names:
        log(f"  hard link {rel.decode(errors='replace')} dropped with its target {e.linkname.decode(errors='replace')}")
        action = DROP
    return action


class LayerWindow(Stream, Protocol):
    """What a layer tar is rewritten from: a HashingWindow, or a wrapper that also keeps the bytes
    it passes on (rewrite._Tee)."""

    def drain(self) -> None: ...

    def digest(self) -> str: ...


def rewrite_layer(src: LayerWindow, dst: Path, epoch: int, log: Callable[[str], None]) -> LayerResult:
    """Writes the canonical form of the layer tar in src to dst. Entries are written as they come;
    when they did not come in name order, the spooled output is written again sorted."""
    spool = dst.with_suffix(".spool")
    records: list[_Spooled] = []
    dropped_names: set[bytes] = set()
    res = LayerResult("", 0, "")
    ordered, prev = True, None
    reader = TarReader(src)
    with open(spool, "wb") as f:
        w = TarWriter(f)
        for e in reader:
            rel = layer_path(e.name)
            res.paths.append(rel + b"/" if e.type == DIR and not rel.endswith(b"/") else rel)
            action = _decide(e, rel, dropped_names, log)
            if action == DROP:
                dropped_names.add(e.name)
                res.dropped.append(rel.decode(errors="replace"))
                continue
            out = replace(
                e, mode=e.mode & 0o7777, uname=b"", gname=b"", mtime=min(e.mtime, epoch), xattrs=dict(e.xattrs)
            )
            if e.mtime > epoch:
                res.clamped += 1
            data: Iterable[bytes | memoryview] | None = reader.data() if e.type == REG else None
            if data is not None and e.size >= 16 and rel.endswith(b".pyc") and b"__pycache__/" in rel:
                data = _clamp_pyc(data, epoch, res)
            if action == BLANK:
                if e.size:
                    res.blanked.append(rel.decode(errors="replace"))
                out.size, data = 0, None
            key = sort_key(out.name)
            if prev is not None and key < prev:
                ordered = False
            prev = key
            records.append(_Spooled(key, len(records), out, w.add(out, data)))
        src.drain()
        res.source_diff_id = src.digest()
        res.entries = len(records)
        if ordered:
            res.diff_id = w.close()
            res.size = w.size
    if ordered:
        spool.replace(dst)
        return res
    res.resorted = True
    res.diff_id, res.size = _write_sorted(records, spool, dst)
    spool.unlink()
    return res


def _write_sorted(records: list[_Spooled], spool: Path, dst: Path) -> tuple[str, int]:
    """Rewrites the spooled entries in name order. A hard link that now comes before the file it
    names takes the data, and the other names link to it (as GNU tar archives the first name)."""
    by_name = {r.entry.name: r for r in records}

    def root(name: bytes) -> bytes:
        seen = set()
        while name in by_name and by_name[name].entry.type == LNK and name not in seen:
            seen.add(name)
            name = by_name[name].entry.linkname
        return name

    targets = {root(r.entry.linkname) for r in records if r.entry.type == LNK}
    primary: dict[bytes, bytes] = {}
    with open(spool, "rb") as src, open(dst, "wb") as f:
        w = TarWriter(f)

        def data_of(rec: _Spooled) -> Iterator[bytes]:
            src.seek(rec.offset)
            n = rec.entry.size
            while n:
                piece = src.read(min(n, CHUNK_SIZE))
                n -= len(piece)
                yield piece

        for rec in sorted(records, key=lambda r: (r.key, r.arrival)):
            e = rec.entry
            if e.type == LNK and root(e.linkname) in by_name:
                r = root(e.linkname)
                if r in primary:
                    w.add(replace(e, linkname=primary[r]))
                else:
                    holder = by_name[r]
                    w.add(replace(e, type=REG, linkname=b"", size=holder.entry.size), data_of(holder))
                    primary[r] = e.name
            elif e.type == REG and e.name in targets and e.name in primary:
                w.add(replace(e, type=LNK, linkname=primary[e.name], size=0))
            else:
                w.add(e, data_of(rec) if e.type == REG else None)
                if e.name in targets:
                    primary[e.name] = e.name
        return w.close(), w.size


def normalise_layer(src: BinaryIO, dst: Path, *, epoch: int, log: Callable[[str], None] = print) -> LayerResult:
    """Rewrites the layer tar read from the file src into dst."""
    src.seek(0, os.SEEK_END)
    size = src.tell()
    src.seek(0)
    return rewrite_layer(HashingWindow(ChunkStream(src), size), dst, epoch, log)
