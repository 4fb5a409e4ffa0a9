"""Bit-identical rebuilds: rewrite a built image into a canonical form and load it back.

The classic builder stamps wall-clock time into the image config (`created`, history times,
`container`, `container_config`) and into every file a RUN step writes, and a few files (logs,
caches, apt lists) differ between two runs whatever their times. `normalise` streams `docker
save` of an image, rewrites every layer as a canonical tar and the config as canonical JSON, and
`docker load`s the result, so the same Dockerfile on the same base gives the same image ID on
every build. `diff_images` names the first thing that still differs; `describe` says it in a line.

The canonical layer is what GNU tar writes with `--format=gnu --sort=name --numeric-owner`
(bootstrap.layer_tar): a layer already in that form (the bootstrapped base) comes out byte for
byte identical, so its diff ID never changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from . import aptmirror
from .bases import canonical_json
from .errors import BuildError

BLOCK = 512
RECORD = 20 * BLOCK                 # GNU tar pads an archive to whole 10 KiB records
ZERO_BLOCK = bytes(BLOCK)
EMPTY_TAR = bytes(2 * BLOCK)        # a layer with no entries: docker's well-known empty layer
GNU_MAGIC = b"ustar  \x00"
CHUNK = 1 << 20

REG, LNK, SYM, CHR, BLK, DIR, FIFO = b"0", b"1", b"2", b"3", b"4", b"5", b"6"
TYPE_NAMES = {REG: "file", LNK: "hardlink", SYM: "symlink", CHR: "char device", BLK: "block device",
              DIR: "directory", FIFO: "fifo"}

# What normalise drops or blanks, and why (paths relative to the layer root). Whiteouts (`.wh.*`)
# are never dropped: they delete files of lower layers.
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

# Image config: what is kept. Everything else (container, container_config, docker_version,
# Hostname, Image, Domainname, Attach*, ...) names the build host or the build's containers.
TOP_KEYS = ("architecture", "os", "os.version", "os.features", "variant", "author", "config")
CONFIG_KEYS = ("User", "ExposedPorts", "Env", "Cmd", "Healthcheck", "ArgsEscaped", "Volumes",
               "WorkingDir", "Entrypoint", "OnBuild", "Labels", "StopSignal", "StopTimeout", "Shell")
HISTORY_KEYS = ("created_by", "author", "comment", "empty_layer")


class ReproError(BuildError):
    """An image archive could not be read or rewritten."""


def iso_time(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --- reading ------------------------------------------------------------------------------------

class _Stream:
    """Forward-only bytes over an iterable of chunks (the SDK's response generator) or a file."""

    def __init__(self, source: Iterable[bytes] | BinaryIO):
        if hasattr(source, "read"):
            f = source
            source = iter(lambda: f.read(CHUNK), b"")
        self._it = iter(source)
        self._buf = memoryview(b"")
        self._pos = 0

    def _fill(self) -> bool:
        for chunk in self._it:
            if chunk:
                self._buf, self._pos = memoryview(chunk), 0
                return True
        return False

    def read(self, n: int) -> bytes:
        """Up to n bytes; fewer only at the end."""
        parts = []
        while n > 0:
            if self._pos >= len(self._buf) and not self._fill():
                break
            take = min(n, len(self._buf) - self._pos)
            parts.append(self._buf[self._pos:self._pos + take])
            self._pos += take
            n -= take
        return b"".join(parts)

    def pieces(self, n: int) -> Iterator[memoryview]:
        """Exactly n bytes, as views of the chunks."""
        while n > 0:
            if self._pos >= len(self._buf) and not self._fill():
                raise ReproError("image archive ends early")
            take = min(n, len(self._buf) - self._pos)
            yield self._buf[self._pos:self._pos + take]
            self._pos += take
            n -= take


class _Window:
    """The next `size` bytes of a stream (one archive member), hashed as they pass."""

    def __init__(self, src: _Stream, size: int):
        self.src, self.size, self.remaining, self.hash = src, size, size, hashlib.sha256()

    def read(self, n: int) -> bytes:
        data = self.src.read(min(n, self.remaining))
        self.remaining -= len(data)
        self.hash.update(data)
        return data

    def pieces(self, n: int) -> Iterator[memoryview]:
        if n > self.remaining:
            raise ReproError("a tar member runs past the end of its layer")
        for p in self.src.pieces(n):
            self.remaining -= len(p)
            self.hash.update(p)
            yield p

    def drain(self) -> None:
        for _ in self.pieces(self.remaining):
            pass

    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


@dataclass(slots=True)
class Entry:
    name: bytes                     # as archived, but directories without the trailing "/"
    type: bytes                     # REG LNK SYM CHR BLK DIR FIFO
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    size: int = 0                   # data bytes (regular files only)
    mtime: int = 0
    linkname: bytes = b""
    devmajor: int = 0
    devminor: int = 0
    uname: bytes = b""
    gname: bytes = b""
    xattrs: dict = field(default_factory=dict)   # bytes -> bytes


def _num(f: bytes) -> int:
    if f and f[0] & 0x80:                       # GNU base-256
        if f[0] == 0xFF:
            return int.from_bytes(f, "big", signed=True)
        return int.from_bytes(bytes([f[0] & 0x7F]) + f[1:], "big")
    s = f.split(b"\0", 1)[0].strip(b" ")
    return int(s, 8) if s else 0


def _cstr(f: bytes) -> bytes:
    return f.split(b"\0", 1)[0]


def _parse_pax(data: bytes) -> dict[bytes, bytes]:
    out, pos = {}, 0
    while pos < len(data) and data[pos] != 0:
        sp = data.index(b" ", pos)
        length = int(data[pos:sp])
        key, _, value = data[sp + 1:pos + length - 1].partition(b"=")
        out[key] = value
        pos += length
    return out


def _pad(n: int) -> int:
    return -n % BLOCK


def _entry(hdr: bytes, rec: dict[bytes, bytes], longname: bytes | None, longlink: bytes | None) -> Entry:
    kind = hdr[156:157]
    name = _cstr(hdr[0:100])
    if hdr[257:263] == b"ustar\x00" and hdr[345] != 0:
        name = _cstr(hdr[345:500]) + b"/" + name
    e = Entry(name=longname or name, type=kind if kind not in (b"\0", b"7") else REG,
              mode=_num(hdr[100:108]), uid=_num(hdr[108:116]), gid=_num(hdr[116:124]),
              size=_num(hdr[124:136]), mtime=_num(hdr[136:148]), linkname=longlink or _cstr(hdr[157:257]),
              uname=_cstr(hdr[265:297]), gname=_cstr(hdr[297:329]))
    if kind in (CHR, BLK):
        e.devmajor, e.devminor = _num(hdr[329:337]), _num(hdr[337:345])
    for k, v in rec.items():
        if k == b"path":
            e.name = v
        elif k == b"linkpath":
            e.linkname = v
        elif k == b"size":
            e.size = int(v)
        elif k in (b"uid", b"gid"):
            setattr(e, k.decode(), int(v))
        elif k == b"mtime":
            e.mtime = math.floor(Fraction(v.decode()))
        elif k in (b"uname", b"gname"):
            setattr(e, k.decode(), v)
        elif k.startswith(b"SCHILY.xattr."):
            e.xattrs[k[len(b"SCHILY.xattr."):]] = v
        elif k.startswith(b"GNU.sparse."):
            raise ReproError(f"sparse file {e.name!r} in a layer: not supported")
    return e


class _TarReader:
    """Entries of a tar stream: GNU (long names, base-256), ustar (prefix) and pax headers."""

    def __init__(self, src):
        self.src = src
        self._left = 0          # data bytes of the current entry not yet consumed
        self._padding = 0
        self._global: dict[bytes, bytes] = {}

    def _skip(self) -> None:
        n = self._left + self._padding
        self._left = self._padding = 0
        for _ in self.src.pieces(n):
            pass

    def data(self) -> Iterator[memoryview]:
        n, self._left = self._left, 0
        yield from self.src.pieces(n)

    def _blob(self, size: int) -> bytes:
        data = self.src.read(size + _pad(size))
        if len(data) < size:
            raise ReproError("tar archive ends inside an extended header")
        return data[:size]

    def __iter__(self) -> Iterator[Entry]:
        longname = longlink = None
        pax: dict[bytes, bytes] = {}
        while True:
            self._skip()
            hdr = self.src.read(BLOCK)
            if not hdr or hdr == ZERO_BLOCK:
                return
            if len(hdr) < BLOCK:
                raise ReproError("tar archive ends inside a header")
            if not _looks_like_tar(hdr):
                raise ReproError("bad tar header checksum (not a tar archive, or a corrupt one)")
            try:
                kind = hdr[156:157]
                if kind in (b"L", b"K", b"x", b"g"):
                    blob = self._blob(_num(hdr[124:136]))
                    if kind == b"L":
                        longname = _cstr(blob)
                    elif kind == b"K":
                        longlink = _cstr(blob)
                    elif kind == b"x":
                        pax.update(_parse_pax(blob))
                    else:
                        self._global.update(_parse_pax(blob))
                    continue
                e = _entry(hdr, {**self._global, **pax}, longname, longlink)
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                raise ReproError(f"unreadable tar header ({exc})") from None
            longname = longlink = None
            pax = {}
            if e.type == REG and e.name.endswith(b"/"):
                e.type = DIR                                  # V7 directory
            if e.type not in TYPE_NAMES:
                raise ReproError(f"tar entry {e.name!r} has type {e.type!r}, which layers do not use")
            # Like Go's archive/tar (Docker's reader): only regular files carry data.
            self._left = e.size if e.type == REG else 0
            self._padding = _pad(self._left)
            if e.type != REG:
                e.size = 0
            if e.type == DIR and len(e.name) > 1:
                e.name = e.name.rstrip(b"/") or b"/"
            yield e


# --- writing ------------------------------------------------------------------------------------

def _field(value: int, width: int) -> bytes:
    """GNU tar's numeric field: octal and NUL, or base-256 when it does not fit."""
    if 0 <= value < 8 ** (width - 1):
        return b"%0*o\x00" % (width - 1, value)
    if value >= 0:
        return b"\x80" + value.to_bytes(width - 1, "big")
    return value.to_bytes(width, "big", signed=True)


def _header(name: bytes, mode: int, uid: int, gid: int, size: int, mtime: int, kind: bytes,
            linkname: bytes = b"", dev: tuple[int, int] | None = None) -> bytes:
    h = bytearray(BLOCK)
    h[0:len(name)] = name
    h[100:108] = _field(mode, 8)
    h[108:116] = _field(uid, 8)
    h[116:124] = _field(gid, 8)
    h[124:136] = _field(size, 12)
    h[136:148] = _field(mtime, 12)
    h[148:156] = b" " * 8
    h[156:157] = kind
    h[157:157 + len(linkname)] = linkname
    h[257:265] = GNU_MAGIC
    if dev is not None:
        h[329:337] = _field(dev[0], 8)
        h[337:345] = _field(dev[1], 8)
    h[148:156] = b"%06o\x00 " % sum(h)
    return bytes(h)


def _extended(kind: bytes, name: bytes, data: bytes) -> bytes:
    return _header(name, 0o644, 0, 0, len(data), 0, kind) + data + bytes(_pad(len(data)))


def _pax_records(items: dict[bytes, bytes]) -> bytes:
    out = []
    for key in sorted(items):
        body = b" " + key + b"=" + items[key] + b"\n"
        n = len(body) + 1
        while len(str(n)) + len(body) != n:
            n = len(str(n)) + len(body)
        out.append(str(n).encode() + body)
    return b"".join(out)


def encode_header(e: Entry) -> bytes:
    """The header blocks GNU tar (--format=gnu --numeric-owner) writes for e; xattrs, which GNU
    format cannot hold, go in a pax header before it."""
    name = e.name + b"/" if e.type == DIR and not e.name.endswith(b"/") else e.name
    out = []
    if e.xattrs:
        out.append(_extended(b"x", b"././@PaxHeader",
                             _pax_records({b"SCHILY.xattr." + k: v for k, v in e.xattrs.items()})))
    if len(e.linkname) > 100:
        out.append(_extended(b"K", b"././@LongLink", e.linkname + b"\0"))
    if len(name) > 100:
        out.append(_extended(b"L", b"././@LongLink", name + b"\0"))
    dev = (e.devmajor, e.devminor) if e.type in (CHR, BLK) else None
    out.append(_header(name[:100], e.mode, e.uid, e.gid, e.size if e.type == REG else 0, e.mtime,
                       e.type, e.linkname[:100], dev))
    return b"".join(out)


class _TarWriter:
    def __init__(self, out: BinaryIO):
        self.out, self.hash, self.size, self.count = out, hashlib.sha256(), 0, 0

    def write(self, data) -> None:
        self.out.write(data)
        self.hash.update(data)
        self.size += len(data)

    def add(self, e: Entry, data: Iterable | None = None) -> int:
        """Writes e; returns the offset of its data in the output."""
        self.write(encode_header(e))
        offset = self.size
        n = 0
        for piece in data or ():
            self.write(piece)
            n += len(piece)
        if n != (e.size if e.type == REG else 0):
            raise ReproError(f"{e.name!r}: {n} data bytes for a size of {e.size}")
        if n % BLOCK:
            self.write(bytes(_pad(n)))
        self.count += 1
        return offset

    def close(self) -> str:
        """The end-of-archive blocks; a non-empty archive is padded to whole records like GNU tar's,
        an empty one stays Docker's 1 KiB empty layer. Returns the diff ID."""
        self.write(EMPTY_TAR)
        if self.count and self.size % RECORD:
            self.write(bytes(-self.size % RECORD))
        return "sha256:" + self.hash.hexdigest()


# --- layer rules ------------------------------------------------------------------------------

KEEP, DROP, BLANK = "keep", "drop", "blank"


def _rel(name: bytes) -> bytes:
    while name.startswith(b"./"):
        name = name[2:]
    name = name.lstrip(b"/")
    return b"" if name == b"." else name


def classify(rel: bytes, e: Entry) -> str:
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


def _clamp_pyc(pieces: Iterable, epoch: int, res: "LayerResult") -> Iterator[bytes]:
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
    inherited: bool = False          # a layer of the base, passed through unread

    @property
    def unchanged(self) -> bool:
        return self.diff_id == self.source_diff_id


def _rewrite_layer(src: _Window, dst: Path, epoch: int, log: Callable[[str], None]) -> LayerResult:
    spool = dst.with_suffix(".spool")
    records: list[tuple[tuple, int, Entry, int]] = []
    dropped_names: set[bytes] = set()
    res = LayerResult("", 0, "")
    ordered, prev = True, None
    reader = _TarReader(src)
    with open(spool, "wb") as f:
        w = _TarWriter(f)
        for e in reader:
            rel = _rel(e.name)
            action = classify(rel, e)
            if action == KEEP and e.type == LNK and e.linkname in dropped_names:
                log(f"  hard link {rel.decode(errors='replace')} dropped with its target "
                    f"{e.linkname.decode(errors='replace')}")
                action = DROP
            if action == DROP:
                dropped_names.add(e.name)
                res.dropped.append(rel.decode(errors="replace"))
                continue
            out = replace(e, mode=e.mode & 0o7777, uname=b"", gname=b"", mtime=min(e.mtime, epoch),
                          xattrs=dict(e.xattrs))
            if e.mtime > epoch:
                res.clamped += 1
            data = reader.data() if e.type == REG else None
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
            records.append((key, len(records), out, w.add(out, data)))
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
    res.diff_id, res.size = _resort(records, spool, dst)
    spool.unlink()
    return res


def _resort(records, spool: Path, dst: Path) -> tuple[str, int]:
    """Rewrites the spooled entries in name order. A hard link that now comes before the file it
    names takes the data, and the other names link to it."""
    by_name = {r[2].name: r for r in records}

    def root(name: bytes) -> bytes:
        seen = set()
        while name in by_name and by_name[name][2].type == LNK and name not in seen:
            seen.add(name)
            name = by_name[name][2].linkname
        return name

    targets = {root(r[2].linkname) for r in records if r[2].type == LNK}
    primary: dict[bytes, bytes] = {}
    with open(spool, "rb") as src, open(dst, "wb") as f:
        w = _TarWriter(f)

        def data_of(rec):
            src.seek(rec[3])
            n = rec[2].size
            while n:
                piece = src.read(min(n, CHUNK))
                n -= len(piece)
                yield piece

        for rec in sorted(records, key=lambda r: (r[0], r[1])):
            e = rec[2]
            if e.type == LNK and root(e.linkname) in by_name:
                r = root(e.linkname)
                if r in primary:
                    w.add(replace(e, linkname=primary[r]))
                else:
                    holder = by_name[r]
                    w.add(replace(e, type=REG, linkname=b"", size=holder[2].size), data_of(holder))
                    primary[r] = e.name
            elif e.type == REG and e.name in targets and e.name in primary:
                w.add(replace(e, type=LNK, linkname=primary[e.name], size=0))
            else:
                w.add(e, data_of(rec) if e.type == REG else None)
                if e.name in targets:
                    primary[e.name] = e.name
        return w.close(), w.size


def normalise_layer(src: BinaryIO, dst: Path, *, epoch: int, log: Callable[[str], None] = print) -> LayerResult:
    """Rewrites the layer tar read from src into dst (see the module doc and RULES)."""
    src.seek(0, os.SEEK_END)
    size = src.tell()
    src.seek(0)
    return _rewrite_layer(_Window(_Stream(src), size), dst, epoch, log)


# --- image config -------------------------------------------------------------------------------

def normalise_config(cfg: dict, diff_ids: list[str], *, epoch: int) -> bytes:
    """The canonical config bytes: the image ID is their sha256."""
    created = iso_time(epoch)
    out = {k: cfg[k] for k in TOP_KEYS if cfg.get(k) is not None}
    if isinstance(cfg.get("config"), dict):
        out["config"] = {k: v for k, v in cfg["config"].items()
                         if k in CONFIG_KEYS and v is not None and v != ""}
    out["created"] = created
    out["history"] = [{**{k: h[k] for k in HISTORY_KEYS if h.get(k) not in (None, "")}, "created": created}
                      for h in cfg.get("history") or []]
    _content_sources(out["history"], diff_ids)
    for h in out["history"]:
        if "created_by" in h:
            h["created_by"] = drop_site_args(h["created_by"])
    if not out["history"]:
        del out["history"]
    out["rootfs"] = {"type": "layers", "diff_ids": list(diff_ids)}
    return canonical_json(out)


# The classic builder names a COPY/ADD source by a checksum of the copied files that includes
# their mtimes (`COPY dir:<hex> in /opt/...`), so a venv or binary made at another time changes the
# history although the normalised layer is identical. The layer's diff ID names the same content.
_SOURCE_SUM_RE = re.compile(r"\b(dir|file|multi):[0-9a-f]{64}\b")


def _content_sources(history: list[dict], diff_ids: list[str]) -> None:
    steps = [h for h in history if not h.get("empty_layer")]
    if len(steps) != len(diff_ids):
        return   # history and layers do not pair up (an unusual base): leave it as it is
    for h, diff_id in zip(steps, diff_ids):
        if "created_by" in h:
            h["created_by"] = _SOURCE_SUM_RE.sub(lambda m: f"{m.group(1)}:{diff_id.split(':')[-1]}", h["created_by"])


# The classic builder prefixes a RUN's history with the build arguments in scope ("|2 A=1 B=2 cmd").
# Site settings (the apt mirror) change where bytes come from, not what the image is.
SITE_ARGS = (aptmirror.ARG,)


def drop_site_args(created_by: str) -> str:
    m = re.match(r"\|(\d+) ", created_by)
    if not m:
        return created_by
    n = int(m.group(1))
    parts = created_by[m.end():].split(" ", n)
    args, rest = parts[:n], parts[n:]
    keep = [a for a in args if a.split("=", 1)[0] not in SITE_ARGS]
    if len(keep) == n:
        return created_by
    return (f"|{len(keep)} " + " ".join(keep) + " " if keep else "") + " ".join(rest)


# --- docker-archive -----------------------------------------------------------------------------

@dataclass
class Rewritten:
    config: bytes
    image_id: str
    layers: list[tuple[str, Path | None, int]]   # (diff ID, file or None for the base's, size) in image order
    results: list[LayerResult]                   # in image order
    source_config: dict


def _member_dir(name: str) -> str:
    return name.rpartition("/")[0]


def _resolve(name: str, links: dict[str, str]) -> str:
    seen = set()
    while name in links and name not in seen:
        seen.add(name)
        target = links[name]
        parts = (_member_dir(name).split("/") if "/" in name else []) + target.split("/")
        stack: list[str] = []
        for p in parts:
            if p == "..":
                if stack:
                    stack.pop()
            elif p not in ("", "."):
                stack.append(p)
        name = "/".join(stack)
    return name


def _looks_like_tar(block: bytes) -> bool:
    if block == ZERO_BLOCK:
        return True
    if len(block) < BLOCK:
        return False
    try:
        return _num(block[148:156]) == sum(block[:148]) + 256 + sum(block[156:])
    except ValueError:
        return False


class _Replay:
    """A stream that first returns bytes already read."""

    def __init__(self, head: bytes, src):
        self.head, self.src = head, src

    def read(self, n: int) -> bytes:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            return out + (self.src.read(n - len(out)) if n > len(out) else b"")
        return self.src.read(n)

    def pieces(self, n: int):
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            n -= len(out)
            yield memoryview(out)
        yield from self.src.pieces(n)


class _Sub:
    """The current member's data of a _TarReader, as a stream."""

    def __init__(self, reader: _TarReader):
        self.reader = reader

    def read(self, n: int) -> bytes:
        data = self.reader.src.read(min(n, self.reader._left))
        self.reader._left -= len(data)
        return data

    def pieces(self, n: int) -> Iterator[memoryview]:
        if n > self.reader._left:
            raise ReproError("a layer runs past its archive member")
        self.reader._left -= n
        yield from self.reader.src.pieces(n)


META_SUFFIXES = (".json", "/json", "VERSION", "repositories", "oci-layout")


def _walk_archive(source, on_layer: Callable[[str, _Window], object], small_limit: int = 64 << 20):
    """Reads a docker-archive front to back. on_layer(member name, window) consumes each layer tar
    and returns what to remember of it. Returns (small members' bytes, symlinks, layers by name)."""
    outer = _TarReader(_Stream(source))
    small: dict[str, bytes] = {}
    links: dict[str, str] = {}
    layers: dict[str, object] = {}
    for m in outer:
        name = m.name.decode()
        if m.type == SYM:
            links[name] = m.linkname.decode()
            continue
        if m.type != REG:
            continue
        sub = _Sub(outer)
        head = b""
        if not name.endswith(META_SUFFIXES) and m.size >= 2 * BLOCK:
            head = sub.read(BLOCK)
            if name.endswith("layer.tar") or _looks_like_tar(head):
                layers[name] = on_layer(name, _Window(_Replay(head, sub), m.size))
                continue
        if m.size <= small_limit:
            small[name] = head + sub.read(m.size)
    return small, links, layers


def _manifest(small: dict[str, bytes], links: dict[str, str]) -> tuple[dict, str, list[str]]:
    if "manifest.json" not in small:
        raise ReproError("the image archive has no manifest.json")
    manifest = json.loads(small["manifest.json"])
    if len(manifest) != 1:
        raise ReproError(f"the image archive holds {len(manifest)} images, expected one")
    cfg_name = _resolve(manifest[0]["Config"], links)
    if cfg_name not in small:
        raise ReproError(f"the image archive lacks its config {cfg_name}")
    config = json.loads(small[cfg_name])
    return config, cfg_name, [_resolve(p, links) for p in manifest[0]["Layers"]]


class _Meter:
    """Counts the bytes normalisation reads and reports them with a rate, at most twice a second."""

    def __init__(self, total: int, report: Callable[[str], None] | None):
        self.total, self.report, self.done = total, report, 0
        self.started = self.last = time.monotonic()

    def wrap(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.done += len(chunk)
            now = time.monotonic()
            if self.report and now - self.last >= 0.5:
                self.last = now
                rate = self.done / max(now - self.started, 1e-6) / 1e6
                self.report(f"normalising: {self.done / 1e6:,.0f} of {self.total / 1e6:,.0f} MB read, {rate:,.0f} MB/s")
            yield chunk


def _layer_note(res: LayerResult, size: int, seconds: float) -> str:
    notes = [f"{res.entries} entries", f"{len(res.dropped)} dropped", f"{len(res.blanked)} blanked",
             f"{res.clamped} times clamped"]
    if res.pycs_clamped:
        notes.append(f"{res.pycs_clamped} pyc headers clamped")
    if res.resorted:
        notes.append("re-sorted")
    return (f"  layer {res.source_diff_id[7:19]} -> {res.diff_id[7:19]}{' (unchanged)' if res.unchanged else ''}: "
            f"{', '.join(notes)}; {size / 1e6:.0f} MB in {seconds:.1f}s")


def _passed_through(diff_ids: list[str]) -> list[LayerResult]:
    return [LayerResult(d, 0, d, inherited=True) for d in diff_ids]


def _finish(config: dict, results: list[LayerResult], files: list[tuple[str, Path | None, int]], epoch: int) -> "Rewritten":
    cfg_bytes = normalise_config(config, [r.diff_id for r in results], epoch=epoch)
    return Rewritten(cfg_bytes, "sha256:" + hashlib.sha256(cfg_bytes).hexdigest(), files, results, config)


def rewrite_archive(source, workdir: Path, *, epoch: int, log: Callable[[str], None] = print,
                    inherited: int = 0) -> Rewritten:
    """Reads a docker-archive (`docker save` output, as chunks or a file) once, front to back,
    and writes its normalised layers into workdir. The first `inherited` layers (the base's) are
    kept as they are; the archive gives no way to know which member they are before reading it."""
    counter = iter(range(1 << 30))

    def on_layer(name: str, win: _Window) -> tuple[LayerResult, Path]:
        t = time.monotonic()
        path = workdir / f"layer-{next(counter)}.tar"
        res = _rewrite_layer(win, path, epoch, log)
        log(_layer_note(res, win.size, time.monotonic() - t))
        return res, path

    small, links, layers = _walk_archive(source, on_layer)
    config, _, layer_names = _manifest(small, links)
    old_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    if len(old_ids) != len(layer_names):
        raise ReproError(f"the manifest names {len(layer_names)} layers, the config {len(old_ids)}")
    results, files = _passed_through(old_ids[:inherited]), [(d, None, 0) for d in old_ids[:inherited]]
    for i, name in enumerate(layer_names):
        if name not in layers:
            raise ReproError(f"the image archive lacks layer {name}")
        res, path = layers[name]
        if res.source_diff_id != old_ids[i]:
            raise ReproError(f"layer {i} ({name}) hashes to {res.source_diff_id}, the config says {old_ids[i]}")
        if i >= inherited:
            results.append(res)
            files.append((res.diff_id, path, res.size))
    return _finish(config, results, files, epoch)


def rewrite_from_store(store, image_id: str, workdir: Path, *, epoch: int, inherited: int,
                       log: Callable[[str], None], meter: "_Meter | None" = None) -> Rewritten | None:
    """The same result as rewrite_archive, reading only the layers the image adds from the engine's
    store (layerstore). None when the store lacks any of them."""
    raw = store.config(image_id)
    if raw is None:
        return None
    config = json.loads(raw)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    layers = [store.layer(diff_ids, i) for i in range(inherited, len(diff_ids))]
    if any(layer is None for layer in layers):
        return None
    if meter is not None:
        meter.total = sum(layer.size for layer in layers)
    results, files = _passed_through(diff_ids[:inherited]), [(d, None, 0) for d in diff_ids[:inherited]]
    for i, layer in enumerate(layers):
        t = time.monotonic()
        path = workdir / f"layer-{i}.tar"
        chunks = layer.chunks() if meter is None else meter.wrap(layer.chunks())
        res = _rewrite_layer(_Window(_Stream(chunks), layer.size), path, epoch, log)
        if res.source_diff_id != layer.diff_id:
            log(f"  layer {layer.diff_id[7:19]} read from the engine's store hashes to {res.source_diff_id[7:19]}; "
                "exporting the image instead")
            return None
        log(_layer_note(res, layer.size, time.monotonic() - t))
        results.append(res)
        files.append((res.diff_id, path, res.size))
    return _finish(config, results, files, epoch)


def archive_chunks(rw: Rewritten, tags: list[str]) -> Iterator[bytes]:
    """The docker-archive of rw, as chunks for `docker load`."""
    cfg_name = rw.image_id[7:] + ".json"
    done: set[str] = set()
    manifest = [{"Config": cfg_name, "RepoTags": list(tags) or None,
                 "Layers": [f"{d[7:]}/layer.tar" for d, _, _ in rw.layers]}]

    def member(name: str, size: int) -> bytes:
        return encode_header(Entry(name=name.encode(), type=REG, mode=0o644, size=size))

    yield member(cfg_name, len(rw.config)) + rw.config + bytes(_pad(len(rw.config)))
    for diff_id, path, size in rw.layers:
        if diff_id in done or path is None:   # None: the base's, already on the engine (load skips it)
            continue
        done.add(diff_id)
        yield member(f"{diff_id[7:]}/layer.tar", size)
        with open(path, "rb") as f:
            for piece in iter(lambda: f.read(CHUNK), b""):
                yield piece
        yield bytes(_pad(size))
    data = json.dumps(manifest, separators=(",", ":")).encode()
    yield member("manifest.json", len(data)) + data + bytes(_pad(len(data))) + EMPTY_TAR


# --- the engine ---------------------------------------------------------------------------------

def _tag(client, image_id: str, tags: list[str]) -> None:
    from docker.utils import parse_repository_tag

    for t in tags:
        repo, tag = parse_repository_tag(t)
        client.api.tag(image_id, repo, tag or "latest")


def _exists(client, image_id: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_image(image_id)
        return True
    except docker.errors.ImageNotFound:
        return False


def inherited_layers(client, image_ref: str, base_ref: str | None) -> int:
    """How many of image_ref's layers are its base's (the image its last stage starts FROM)."""
    if not base_ref:
        return 0
    own = (client.api.inspect_image(image_ref).get("RootFS") or {}).get("Layers") or []
    base = (client.api.inspect_image(base_ref).get("RootFS") or {}).get("Layers") or []
    if own[:len(base)] != base:
        raise ReproError(f"{image_ref} does not start with the layers of its base {base_ref}")
    return len(base)


def normalise(client, image_ref: str, *, epoch: int, tags: list[str], workdir: Path, base_ref: str | None = None,
              log: Callable[[str], None] = print, progress: Callable[[str], None] | None = None) -> str:
    """Rewrites image_ref into its canonical form (see the module doc), loads it tagged with tags
    and returns its image ID. Two builds that differ only in times and run-specific files (RULES)
    give the same ID. The layers of base_ref, which image_ref starts with, pass through untouched
    (a registry base keeps its digest's layers, stored once); only the layers the build added are
    read, from the engine's store when it is local (layerstore), else from `docker save`. workdir
    holds only the rewritten layers, removed before returning. image_ref itself is left as it is
    (its tags move when tags name them)."""
    import docker.errors

    from . import layerstore

    started = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="repro-", dir=workdir))
    try:
        log(f"normalise {image_ref}: epoch {epoch} ({iso_time(epoch)})")
        info = client.api.inspect_image(image_ref)
        inherited = inherited_layers(client, image_ref, base_ref)
        if inherited:
            log(f"  {inherited} layer(s) of the base {base_ref} passed through")
        meter = _Meter(0, progress)
        store = layerstore.LayerStore.of(client)
        rw = store and rewrite_from_store(store, info["Id"], tmp, epoch=epoch, inherited=inherited, log=log, meter=meter)
        source = "engine store"
        if not rw:
            source = "docker save"
            meter.total, meter.done = int(info.get("Size") or 0), 0
            rw = rewrite_archive(meter.wrap(client.api.get_image(image_ref)), tmp, epoch=epoch, log=log,
                                 inherited=inherited)
        rewritten = time.monotonic()
        if _exists(client, rw.image_id):
            _tag(client, rw.image_id, tags)
            how = "already present, tagged"
        else:
            if progress:
                progress(f"loading the normalised image ({sum(size for _, _, size in rw.layers) / 1e6:,.0f} MB)")
            for msg in client.api.load_image(archive_chunks(rw, tags)):
                if isinstance(msg, dict) and (msg.get("error") or msg.get("errorDetail")):
                    raise ReproError(f"docker load of the normalised {image_ref} failed: "
                                     f"{msg.get('error') or msg['errorDetail']}")
            if not _exists(client, rw.image_id):
                raise ReproError(f"docker load did not create {rw.image_id} for {image_ref}")
            how = "loaded"
        own = [r for r in rw.results if not r.inherited]
        log(f"normalise {image_ref}: {rw.image_id} {how} ({len(rw.results)} layers: {inherited} inherited, "
            f"{len(own)} normalised, {sum(r.unchanged for r in own)} of them unchanged; read {meter.done / 1e6:,.0f} MB "
            f"from the {source}; read+rewrite {rewritten - started:.1f}s, load {time.monotonic() - rewritten:.1f}s)")
        return rw.image_id
    except docker.errors.APIError as exc:
        raise ReproError(f"normalise {image_ref}: the engine refused: {exc}") from None
    except OSError as exc:      # a write to an open layer file names no path: "No space left" says where
        if exc.errno is not None and exc.filename is None:
            exc.filename = str(tmp)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- finding what differs -------------------------------------------------------------------------

FIELDS = ("type", "linkname", "size", "content", "mode", "owner", "device", "xattrs", "mtime")


def _display(name: bytes) -> str:
    return "/" + _rel(name).decode(errors="replace")


def summarise_layer(src) -> list[tuple[str, dict]]:
    """Every entry of a layer tar (a stream or window) as (path, attributes), in archive order."""
    out = []
    reader = _TarReader(src)
    for e in reader:
        attrs = {"type": TYPE_NAMES[e.type], "linkname": e.linkname.decode(errors="replace"),
                 "size": e.size, "mode": f"{e.mode & 0o7777:04o}", "owner": f"{e.uid}:{e.gid}",
                 "device": f"{e.devmajor},{e.devminor}" if e.type in (CHR, BLK) else "",
                 "xattrs": sorted((k.decode(errors="replace"), v.hex()) for k, v in e.xattrs.items()),
                 "mtime": e.mtime, "content": ""}
        if e.uname or e.gname:
            attrs["owner"] += f" ({e.uname.decode(errors='replace')}:{e.gname.decode(errors='replace')})"
        if e.type == REG:
            h = hashlib.sha256()
            for piece in reader.data():
                h.update(piece)
            attrs["content"] = h.hexdigest()
        out.append((_display(e.name), attrs))
    return out


def compare_layers(a: list[tuple[str, dict]], b: list[tuple[str, dict]]) -> dict | None:
    """The first difference between two layer summaries, in path order."""
    da, db = dict(a), dict(b)
    for path in sorted(da.keys() | db.keys(), key=lambda p: tuple(p.split("/"))):
        if path not in da or path not in db:
            return {"path": path, "field": "presence", "a": path in da, "b": path in db}
        for f in FIELDS:
            if da[path][f] != db[path][f]:
                return {"path": path, "field": f, "a": da[path][f], "b": db[path][f]}
    if [p for p, _ in a] != [p for p, _ in b]:
        first = next(i for i, (x, y) in enumerate(zip(a, b)) if x[0] != y[0])
        return {"path": a[first][0], "field": "order", "a": a[first][0], "b": b[first][0]}
    return None


def _json_path(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def compare_configs(a, b, path: str = "") -> dict | None:
    """The first differing field of two image configs (keys in sorted order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if k not in a or k not in b:
                return {"where": "config", "field": _json_path(path, k), "a": a.get(k), "b": b.get(k)}
            d = compare_configs(a[k], b[k], _json_path(path, k))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = compare_configs(x, y, _json_path(path, i))
            if d:
                return d
        if len(a) != len(b):
            i = min(len(a), len(b))
            return {"where": "config", "field": _json_path(path, i),
                    "a": a[i] if i < len(a) else None, "b": b[i] if i < len(b) else None}
        return None
    if a != b or type(a) is not type(b):
        return {"where": "config", "field": path or "(root)", "a": a, "b": b}
    return None


def _layer_step(config: dict, index: int) -> str | None:
    steps = [h.get("created_by", "") for h in config.get("history") or [] if not h.get("empty_layer")]
    return steps[index] if index < len(steps) else None


def _scan(client, ref: str, want: str | None) -> tuple[dict, list | None]:
    """Streams ref once: its config, and the summary of its layer whose diff ID is want."""
    def on_layer(name: str, win: _Window):
        if want is None:
            win.drain()
            return None
        summary = summarise_layer(win)
        win.drain()
        return summary if win.digest() == want else None

    small, links, layers = _walk_archive(client.api.get_image(ref), on_layer)
    config, _, _ = _manifest(small, links)
    found = [s for s in layers.values() if s is not None]
    return config, (found[0] if found else None)


def diff_images(client, a: str, b: str, workdir: Path | None = None) -> dict | None:
    """None when a and b have the same image ID; else their first difference: the first layer
    (in image order) whose diff IDs differ, at its first differing path, then the config.
    Each image is streamed once and nothing is written (workdir is not needed)."""
    ia, ib = client.api.inspect_image(a), client.api.inspect_image(b)
    if ia["Id"] == ib["Id"]:
        return None
    la = (ia.get("RootFS") or {}).get("Layers") or []
    lb = (ib.get("RootFS") or {}).get("Layers") or []
    idx = next((i for i in range(min(len(la), len(lb))) if la[i] != lb[i]), None)
    if idx is None and len(la) != len(lb):
        idx = min(len(la), len(lb))
    want_a = la[idx] if idx is not None and idx < len(la) else None
    want_b = lb[idx] if idx is not None and idx < len(lb) else None
    with ThreadPoolExecutor(max_workers=2) as pool:       # the engine exports both at once
        fa, fb = pool.submit(_scan, client, a, want_a), pool.submit(_scan, client, b, want_b)
        (cfg_a, sum_a), (cfg_b, sum_b) = fa.result(), fb.result()
    if idx is not None:
        where = {"where": "layer", "index": idx,
                 "created_by": _layer_step(cfg_a, idx) if want_a else _layer_step(cfg_b, idx)}
        if want_a is None or want_b is None:
            return {**where, "path": None, "field": "presence", "a": want_a, "b": want_b}
        if sum_a is None or sum_b is None:
            raise ReproError(f"layer {idx} of {a if sum_a is None else b} was not found in its archive")
        d = compare_layers(sum_a, sum_b)
        if d:
            return {**where, **d}
        return {**where, "path": None, "field": "encoding", "a": want_a, "b": want_b}
    return compare_configs(cfg_a, cfg_b) or {"where": "config", "field": "(serialisation)",
                                             "a": ia["Id"], "b": ib["Id"]}


def step_text(created_by: str | None) -> str:
    """A history line as the Dockerfile step it came from: `RUN ...`, `COPY ...`."""
    s = (created_by or "").strip()
    i = s.find(" -c ")
    if i >= 0 and re.search(r"(^|\s)/\S*sh$", s[:i].split(" -")[0]):
        s = s[i + 4:].strip()
        s = s[len("#(nop)"):].strip() if s.startswith("#(nop)") else "RUN " + s
    return s if len(s) <= 80 else s[:79] + "…"


def _value(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= 60 else text[:59] + "…"


def describe(diff: dict | None) -> str:
    """One line for a diff_images result."""
    if diff is None:
        return "the images are identical"
    a, b, f = diff.get("a"), diff.get("b"), diff["field"]
    if diff["where"] == "config":
        return f"config {f} differs ({_value(a)} vs {_value(b)})"
    where = f"layer {diff['index']}"
    if diff.get("created_by"):
        where += f" ({step_text(diff['created_by'])})"
    path = diff.get("path")
    if f == "presence":
        if path is None:
            return f"{where}: only in the {'first' if a else 'second'} image ({_value(a or b)})"
        return f"{where}: {path} exists only in the {'first' if a else 'second'} image"
    if f == "content":
        return f"{where}: {path} content differs (sha256 {a[:12]}… vs {b[:12]}…)"
    if f == "order":
        return f"{where}: the same entries in another order (first {_value(a)} vs {_value(b)})"
    if f == "encoding":
        return (f"{where}: same files and metadata but different tar bytes "
                f"(diff IDs {a[7:19]}… vs {b[7:19]}…)")
    if f == "mtime":
        return f"{where}: {path} mtime differs ({iso_time(a)} vs {iso_time(b)})"
    return f"{where}: {path} {f} differs ({_value(a)} vs {_value(b)})"
