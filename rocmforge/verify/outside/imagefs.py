"""An image's final filesystem, read on the host from its layers (whiteouts applied), never through
a process in the image: path -> type, mode, owner, size, sha256 or link target, xattrs.

The merged view is the lower index normalisation already keeps (assemble/image/lowerindex), over
every layer of the image instead of the layers below one: the index of the base (the longest
cached prefix of the chain) is reused, so checking an image reads only the layers its own build
added. Layers come from the engine's store when this host can read it, else from `docker save`.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble.image import lowerindex
from rocmforge.assemble.image.archive import read_manifest, walk_archive
from rocmforge.assemble.image.layers import layer_path
from rocmforge.assemble.image.lowerindex import LowerIndex, Node, chain_ids
from rocmforge.assemble.image.tarcodec import LNK, REG, TarReader
from rocmforge.host.layerstore import StoredLayer
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.files import keep_most_recent, user_cache
from rocmforge.shared.streams import ChunkStream, HashingWindow

KEEP_IMAGES = 48  # whole images' indexes kept (most recently used; a few MB each)

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine


def index_cache() -> Path:
    """The lower indexes kept between runs: the same folder normalisation keeps them in."""
    return user_cache("lower-index")


def diff_ids_of(client: Engine, ref: str) -> list[str]:
    return list((client.inspect(ref).get("RootFS") or {}).get("Layers") or [])


_KIND = {b"0": "f", b"5": "d", b"2": "l", b"3": "c", b"4": "b", b"6": "p"}


@dataclass(frozen=True)
class Have:
    """One path as the image holds it. type: f file, d directory, l symlink, c/b device, p fifo;
    data: a file's sha256 (hex), a symlink's target, a device's "major,minor"; link: for a file
    that is a hard link, the other name its layer links it to (the one the tar wrote first)."""

    type: str
    mode: int
    uid: int
    gid: int
    data: str
    size: int = 0
    xattrs: bytes = b""
    layer: int = 0  # which layer (1 = the first) last wrote it: where its bytes are stored
    link: str = ""

    def brief(self) -> tuple[str, int, int, int, str]:
        return (self.type, self.mode, self.uid, self.gid, self.data)


def have_of(node: Node, layer: int = 0) -> Have:
    data = node.data.hex() if node.type == b"0" else node.data.decode(errors="surrogateescape")
    return Have(_KIND.get(node.type, "?"), node.mode, node.uid, node.gid, data, node.size, node.xattrs, layer)


class ImageFS:
    """One image's merged filesystem, open read-only. Paths are relative to / as bytes, no leading
    slash ("usr/bin/python3"); the root itself is b""."""

    def __init__(self, index: LowerIndex, diff_ids: list[str]):
        self.index, self.diff_ids = index, diff_ids
        self.db: sqlite3.Connection = index.db

    def get(self, rel: bytes) -> Node | None:
        return self.index.get(rel)

    def nodes(self) -> Iterator[tuple[bytes, Node, int]]:
        """Every path, its node and the layer that last wrote it, in path order."""
        for row in self.db.execute(
            "SELECT parent, name, type, mode, uid, gid, size, mtime, data, xattrs, gen FROM node ORDER BY parent, name"
        ):
            parent, name = bytes(row[0]), bytes(row[1])
            if not parent and not name:
                continue
            kind, mode, uid, gid, size, mtime, data, xattrs, gen = row[2:]
            node = Node(bytes(kind), mode, uid, gid, size, mtime, bytes(data or b""), bytes(xattrs or b""))
            yield lowerindex.join(parent, name), node, gen

    def files(self) -> dict[str, Have]:
        """Every path (relative, str) and what it is, hard links naming their partner."""
        out = {rel.decode(errors="surrogateescape"): have_of(node, gen) for rel, node, gen in self.nodes()}
        for rel, target in self.index.hardlinks():
            name = rel.decode(errors="surrogateescape")
            out[name] = replace(out[name], link=target.decode(errors="surrogateescape"))
        return out

    def under(self, roots: list[str]) -> dict[str, tuple[str, int, int, int, str]]:
        """Each path at or below one of roots, briefly."""
        return {
            rel: have.brief()
            for rel, have in self.files().items()
            if any(rel == r or rel.startswith(r + "/") for r in roots)
        }


def _layers_from_save(client: Engine, ref: str, tmp: Path) -> list[Path]:
    """Each layer tar of ref, in image order, from `docker save` (a store this host cannot read)."""
    n = 0

    def keep(name: str, window: HashingWindow) -> Path:
        nonlocal n
        n += 1
        path = tmp / f"layer-{n}.tar"
        with open(path, "wb") as out:
            while chunk := window.read(1 << 20):
                out.write(chunk)
        return path

    small, links, layers = walk_archive(client.export(ref), keep)
    _, _, names = read_manifest(small, links)
    return [layers[name] for name in names]


def image_cache() -> Path:
    """Whole images' indexes, kept apart from the bases' so that checking many images never
    pushes out the base indexes builds reuse."""
    return user_cache("image-index")


class _Layers:
    """Layer i of ref as a tar source: from the engine's store, else from one `docker save`."""

    def __init__(self, client: Engine, ref: str, tmp: Path, log: Callable[[str], None]):
        self.client, self.ref, self.tmp, self.log = client, ref, tmp, log
        self.diff_ids = diff_ids_of(client, ref)
        self.reader = client.layer_reader(client.inspect(ref)["Id"])  # the ID the engine shows, as normalisation asks
        self.saved: list[Path] | None = None

    def __call__(self, i: int) -> lowerindex.LayerSource | None:
        if self.reader is not None:
            found = self.reader.layer(self.diff_ids, i)
            if found is not None:
                return found.chunks()
        if self.saved is None:
            self.log(f"  {self.client.unreadable()}: reading {self.ref} with docker save")
            self.saved = _layers_from_save(self.client, self.ref, self.tmp)
        return self.saved[i] if i < len(self.saved) else None


@contextmanager
def open_image(client: Engine, ref: str, *, log: Callable[[str], None] = lambda line: None) -> Iterator[ImageFS]:
    """The merged filesystem of ref (an image on client), open for the with-block. Every layer read
    is hashed against its diff ID (lowerindex.open_lower), so what is read is what the engine holds."""
    with tempfile.TemporaryDirectory(prefix="rocmforge-imagefs-") as tmpname:
        tmp = Path(tmpname)
        layers = _Layers(client, ref, tmp, log)
        diff_ids = layers.diff_ids
        kept = lowerindex.cache_file(image_cache(), chain_ids(diff_ids)[-1]) if diff_ids else None
        if kept is not None and lowerindex.is_cached(image_cache(), diff_ids):
            shutil.copyfile(kept, tmp / "image.sqlite")
            index = LowerIndex(tmp / "image.sqlite")
        else:
            index = lowerindex.open_lower(
                tmp / "image.sqlite", diff_ids, layers, cache=index_cache(), log=log, store=False
            )
            if kept is not None:
                index.seal(chain_ids(diff_ids)[-1])
                index.close()
                try:
                    image_cache().mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(tmp / "image.sqlite", kept.with_suffix(".tmp"))
                    kept.with_suffix(".tmp").replace(kept)
                    keep_most_recent(image_cache(), "*.sqlite", KEEP_IMAGES)
                except OSError:
                    pass  # not kept: the next check reads the layers again
                index = LowerIndex(tmp / "image.sqlite")
        try:
            yield ImageFS(index, diff_ids)
        finally:
            index.close()


_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


def _from_overlay_dir(folder: Path, rel: str) -> tuple[bool, bytes | None]:
    """(settled, bytes) for rel in one overlay layer folder: settled when this layer decides it (holds
    it, removes it with a whiteout device, or hides what is below with an opaque folder)."""
    parts = rel.split("/")
    here = folder
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            return False, None
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout: removed in this layer
            return True, None
        if i < len(parts) - 1:
            if not stat.S_ISDIR(st.st_mode):
                return True, None  # a file where a folder was: nothing below it
            if any(_xattr(here, x) == b"y" for x in _OPAQUE_XATTRS) and not (here / parts[i + 1]).exists():
                return True, None
    return True, here.read_bytes() if stat.S_ISREG(st.st_mode) else None


def _xattr(path: Path, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def _overlay_bytes(layers: _Layers, wanted: set[str] | dict[str, int], first_layer: int) -> dict[str, bytes] | None:
    """wanted files read straight from the engine's overlay layer folders: from the layer the index
    says last wrote each (wanted as a dict: path -> layer, 1 = the first), else topmost first; None
    when the layers are not stored as such folders (then the tars are read)."""
    if layers.reader is None:
        return None
    folders = []
    for i in range(len(layers.diff_ids)):
        found = layers.reader.layer(layers.diff_ids, i) if i >= first_layer else None
        if i >= first_layer and not isinstance(found, StoredLayer):
            return None
        folders.append(found.files if isinstance(found, StoredLayer) else None)
    out: dict[str, bytes] = {}
    for rel in wanted:
        layer = wanted[rel] if isinstance(wanted, dict) else 0
        own = folders[layer - 1] if first_layer < layer <= len(folders) else None
        if own is not None:
            try:
                out[rel] = (own / rel).read_bytes()
                continue
            except OSError:
                pass  # not where the index says: walk the layers
        for folder in reversed(folders[first_layer:]):
            assert folder is not None, "every layer from first_layer up is a folder"
            settled, data = _from_overlay_dir(folder, rel)
            if settled:
                if data is not None:
                    out[rel] = data
                break
    return out


def file_bytes(client: Engine, ref: str, wanted: set[str] | dict[str, int], first_layer: int = 0) -> dict[str, bytes]:
    """The bytes of the regular files `wanted` (relative paths) as the layers from first_layer up
    hold them (the topmost wins; a whiteout above removes). Small files only: the generated files a
    rule parses. A path the layers above first_layer do not hold is left out."""
    want = {w.encode(errors="surrogateescape") for w in wanted}
    found: dict[bytes, bytes | None] = {}
    with tempfile.TemporaryDirectory(prefix="rocmforge-imagefs-") as tmpname:
        layers = _Layers(client, ref, Path(tmpname), lambda line: None)
        direct = _overlay_bytes(layers, wanted, first_layer)
        if direct is not None:
            return direct
        for i in range(first_layer, len(layers.diff_ids)):
            source = layers(i)
            if source is None:
                raise ImageArchiveError(f"layer {i} of {ref} cannot be read")
            opened = open(source, "rb") if isinstance(source, Path) else None  # noqa: SIM115
            reader = TarReader(ChunkStream(opened if opened is not None else source))  # type: ignore[arg-type]
            for e in reader:
                rel = layer_path(e.name)
                parent, name = lowerindex.split(rel)
                if name.startswith(lowerindex.WHITEOUT):
                    # an opaque marker empties its folder; a whiteout removes one name and what is under it
                    opaque = name == lowerindex.OPAQUE
                    gone = parent if opaque else lowerindex.join(parent, name[len(lowerindex.WHITEOUT) :])
                    for k in found:
                        if k.startswith(gone + b"/") or (k == gone and not opaque):
                            found[k] = None
                    continue
                if rel in want:
                    if e.type == REG:
                        found[rel] = b"".join(bytes(p) for p in reader.data())
                    elif e.type == LNK:
                        found[rel] = found.get(layer_path(e.linkname))
                    else:
                        found[rel] = None
            if opened is not None:
                opened.close()
    return {k.decode(errors="surrogateescape"): v for k, v in found.items() if v is not None}
