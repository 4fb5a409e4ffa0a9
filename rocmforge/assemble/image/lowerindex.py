"""The merged filesystem of an image's lower layers (what a container on layers 0..i-1 sees), as
an sqlite file: path -> type, mode, owner, size, mtime, content digest or link target, xattrs.

lowerrules compares a layer with it. It is built by applying each layer tar in order the way the
engine does (whiteouts and opaque markers remove lower paths), which means reading every byte of
the base, so the index of a base is kept on disk under its chain ID (layerstore.chain_ids): every
build on that base reuses it and reads none of the base's layers again.

sqlite rather than a flat file: lookups and a directory's children come without loading the
index into memory (a 10 GB base holds ~100k paths, some 10 MB here), and a truncated or damaged
file is detected (quick_check) instead of being half-read. Rows are keyed by (parent, name), so
that a directory's children and its whole subtree are index ranges.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from rocmforge.assemble.image.layers import layer_path
from rocmforge.assemble.image.tarcodec import BLK, CHR, DIR, LNK, REG, TarEntry, TarReader
from rocmforge.host.layerstore import chain_ids
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.files import keep_most_recent
from rocmforge.shared.streams import ChunkStream, HashingWindow

# Bump when what a row holds changes. The format is in a cache file's name, so a checkout that still
# writes the older one (sharing the user's cache) neither reads nor replaces this one's files.
FORMAT = 2  # 2: hard links (their own table)
KEEP = 16  # cached indexes kept (most recently used): one per base in use
OPAQUE = b".wh..wh..opq"
WHITEOUT = b".wh."

LayerSource = Iterable[bytes] | BinaryIO | Path


class Node(NamedTuple):
    type: bytes
    mode: int
    uid: int
    gid: int
    size: int
    mtime: int
    data: bytes  # a file's sha256 digest, a symlink's target, a device's b"major,minor"
    xattrs: bytes  # xattr_blob of the entry's xattrs


def xattr_blob(xattrs: dict[bytes, bytes]) -> bytes:
    """xattrs in one comparable value: sorted, each key and value length-prefixed."""
    out = bytearray()
    for k in sorted(xattrs):
        for part in (k, xattrs[k]):
            out += len(part).to_bytes(4, "big") + part
    return bytes(out)


def split(rel: bytes) -> tuple[bytes, bytes]:
    """(parent folder, name) of a path relative to the layer root; the parent of a top-level name is b""."""
    parent, _, name = rel.rpartition(b"/")
    return parent, name


def join(parent: bytes, name: bytes) -> bytes:
    """The path of name in the folder parent (split's inverse)."""
    return parent + b"/" + name if parent else name


def node_of(e: TarEntry, digest: bytes = b"") -> Node:
    """The node a (non-hardlink) entry makes; digest: a regular file's content sha256."""
    if e.type == REG:
        data = digest
    elif e.type in (CHR, BLK):
        data = b"%d,%d" % (e.devmajor, e.devminor)
    else:
        data = e.linkname
    # Some writers keep the file-type bits in the mode field (0100644): the engine does not.
    return Node(
        e.type, e.mode & 0o7777, e.uid, e.gid, e.size if e.type == REG else 0, e.mtime, data, xattr_blob(e.xattrs)
    )


def _below(parent: bytes) -> tuple[str, tuple]:
    """The SQL condition for every row strictly under the directory `parent`."""
    if not parent:
        return "NOT (parent = x'' AND name = x'')", ()
    # '0' follows '/': rows whose parent starts with "parent/" are one blob range.
    return "(parent = ? OR (parent >= ? AND parent < ?))", (parent, parent + b"/", parent + b"0")


class LowerIndex:
    """One index file, open. `gen` counts the layers applied: a layer's whiteouts and opaque
    markers remove only what earlier layers made, whatever their place in its tar."""

    def __init__(self, path: Path, *, create: bool = False):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        if create:
            self.db.executescript(
                "CREATE TABLE node (parent BLOB NOT NULL, name BLOB NOT NULL, type BLOB, mode INT, uid INT, "
                "gid INT, size INT, mtime INT, data BLOB, xattrs BLOB, gen INT, PRIMARY KEY (parent, name)) "
                "WITHOUT ROWID;"
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
                # a tar hard link: (parent, name) is another name of (tparent, tname), made in layer gen
                "CREATE TABLE hardlink (parent BLOB NOT NULL, name BLOB NOT NULL, tparent BLOB, tname BLOB, gen INT, "
                "PRIMARY KEY (parent, name)) WITHOUT ROWID;"
            )
            self._set_meta(format=FORMAT, chain="", layers=0, rows=0)

    def close(self) -> None:
        self.db.close()

    # --- reading ---

    def meta(self, key: str) -> Any:  # the value as stored: sqlite columns of meta have no type
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def get(self, rel: bytes) -> Node | None:
        row = self.db.execute(
            "SELECT type, mode, uid, gid, size, mtime, data, xattrs FROM node WHERE parent = ? AND name = ?", split(rel)
        ).fetchone()
        return Node(*row) if row else None

    def children(self, rel: bytes) -> list[bytes]:
        """The names directly in the directory rel, in byte order."""
        return [
            r[0]
            for r in self.db.execute("SELECT name FROM node WHERE parent = ? AND name != x'' ORDER BY name", (rel,))
        ]

    def hardlinks(self) -> list[tuple[bytes, bytes]]:
        """(path, the path it is a hard link of) for each hard link the final filesystem still holds:
        both names last written by the layer that linked them (a later layer that rewrites or
        removes either one leaves two files, or one)."""
        return [
            (join(bytes(r[0]), bytes(r[1])), join(bytes(r[2]), bytes(r[3])))
            for r in self.db.execute(
                "SELECT h.parent, h.name, h.tparent, h.tname FROM hardlink h "
                "JOIN node a ON a.parent = h.parent AND a.name = h.name AND a.gen = h.gen "
                "JOIN node b ON b.parent = h.tparent AND b.name = h.tname AND b.gen = h.gen "
                "ORDER BY h.parent, h.name"
            )
        ]

    def rows(self) -> int:
        return self.db.execute("SELECT count(*) FROM node").fetchone()[0]

    # --- writing ---

    def _set_meta(self, **values: object) -> None:
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())

    def _remove_below(self, parent: bytes, gen: int) -> None:
        cond, args = _below(parent)
        self.db.execute(f"DELETE FROM node WHERE gen < ? AND {cond}", (gen, *args))

    def apply(self, source: LayerSource) -> str:
        """Applies one layer tar (chunks, a file object or a path) on top; returns its diff ID."""
        if isinstance(source, Path):
            with open(source, "rb") as f:
                return self.apply(f)
        gen = int(self.meta("layers")) + 1
        win = HashingWindow(ChunkStream(source), None)
        reader = TarReader(win)
        self.db.execute("BEGIN")
        for e in reader:
            rel = layer_path(e.name)
            parent, name = split(rel)
            if name == OPAQUE:
                self._remove_below(parent, gen)
            elif name.startswith(WHITEOUT):
                gone = join(parent, name[len(WHITEOUT) :])
                self._remove_below(gone, gen)
                self.db.execute("DELETE FROM node WHERE gen < ? AND parent = ? AND name = ?", (gen, *split(gone)))
            else:
                self._add(rel, e, reader, gen)
        win.drain()
        self._set_meta(layers=gen, rows=self.rows())
        self.db.execute("COMMIT")
        return win.digest()

    def _add(self, rel: bytes, e: TarEntry, reader: TarReader, gen: int) -> None:
        if e.type == LNK:
            # Another name of a file this layer holds: the same inode, so the same node.
            node = self.get(layer_path(e.linkname))
            if node is None:
                return
            self.db.execute(
                "INSERT OR REPLACE INTO hardlink VALUES (?, ?, ?, ?, ?)",
                (*split(rel), *split(layer_path(e.linkname)), gen),
            )
        elif e.type == REG:
            h = hashlib.sha256()
            for piece in reader.data():
                h.update(piece)
            node = node_of(e, h.digest())
        else:
            node = node_of(e)
        if node.type != DIR:
            self._remove_below(rel, gen)  # a file replacing a directory takes its subtree
        self.db.execute(
            "INSERT OR REPLACE INTO node VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*split(rel), *node, gen)
        )

    def seal(self, chain: str) -> None:
        self._set_meta(chain=chain)


# --- the cache ----------------------------------------------------------------------------------


def cache_file(cache: Path, chain: str) -> Path:
    """Where cache keeps the index of the layers whose chain ID is chain."""
    return cache / f"{chain.split(':')[-1]}.v{FORMAT}.sqlite"


def _valid(path: Path, chain: str) -> bool:
    """Whether path is a whole index of chain; a damaged or partial file is not."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if db.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return False
            meta = dict(db.execute("SELECT key, value FROM meta"))
            rows = db.execute("SELECT count(*) FROM node").fetchone()[0]
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False
    return meta.get("format") == FORMAT and meta.get("chain") == chain and meta.get("rows") == rows


def _cached(cache: Path | None, chain: str, log: Callable[[str], None]) -> Path | None:
    if cache is None:
        return None
    path = cache_file(cache, chain)
    if not path.exists():
        return None
    if _valid(path, chain):
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used: pruned last
        return path
    log(f"  lower index {path.name[:12]}: damaged or incomplete, rebuilt")
    path.unlink(missing_ok=True)
    return None


def is_cached(cache: Path | None, diff_ids: list[str]) -> bool:
    """Whether cache holds a whole index of the layers diff_ids (trivially so for no layers)."""
    return not diff_ids or (cache is not None and _cached(cache, chain_ids(diff_ids)[-1], lambda m: None) is not None)


def _store(cache: Path, work: Path, chain: str) -> None:
    """Copies the finished index into the cache under its chain ID, atomically (a reader sees the
    old file or the whole new one), and drops the least recently used beyond KEEP."""
    cache.mkdir(parents=True, exist_ok=True)
    dst = cache_file(cache, chain)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(work, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    keep_most_recent(cache, "*.sqlite", KEEP)


def open_lower(
    work: Path,
    diff_ids: list[str],
    layer: Callable[[int], LayerSource | None],
    *,
    cache: Path | None,
    log: Callable[[str], None] = print,
    store: bool = True,
) -> LowerIndex:
    """An index of the layers diff_ids, open for changes at work (a copy: applying more layers
    leaves the cache alone). Starts from the longest cached prefix of the chain; layer(i) gives
    the tar of layer i for the rest (None: not available, an ImageArchiveError). The result is
    cached under its chain ID (store=False: only read from the cache, for an index no build reuses)."""
    chains = chain_ids(diff_ids)
    start, found = 0, None
    for k in range(len(chains), 0, -1):
        found = _cached(cache, chains[k - 1], log)
        if found:
            start = k
            break
    work.unlink(missing_ok=True)
    if found:
        shutil.copyfile(found, work)
        index = LowerIndex(work)
    else:
        index = LowerIndex(work, create=True)
    try:
        for i in range(start, len(diff_ids)):
            source = layer(i)
            if source is None:
                raise ImageArchiveError(
                    f"layer {i} ({diff_ids[i][7:19]}) is needed for the lower index and is not available"
                )
            got = index.apply(source)
            if got != diff_ids[i]:
                raise ImageArchiveError(f"layer {i} read for the lower index hashes to {got}, not {diff_ids[i]}")
        if diff_ids:
            index.seal(chains[-1])
        if cache is not None and store and start < len(diff_ids):
            index.close()
            try:
                _store(cache, work, chains[-1])
                log(
                    f"  lower index of {len(diff_ids)} layer(s) cached in {cache}: "
                    f"{cache_file(cache, chains[-1]).name[:12]}"
                )
            except OSError as exc:  # a cache that cannot be written costs a re-read next time, not the build
                log(f"  lower index not cached ({exc.strerror or exc}: {exc.filename or cache})")
            index = LowerIndex(work)
    except BaseException:
        index.close()
        raise
    return index
