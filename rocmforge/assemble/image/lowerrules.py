"""One layer rewritten relative to the filesystem below it, so that every engine's differ gives
the same tar for the same change. What a container sees is unchanged.

Engines write a RUN step's layer differently: Docker's overlay2 differ takes the upper directory
as it is (copy-ups of files only opened for writing, opaque markers on directories the step
created, whiteouts with the upper's metadata); the containerd differ compares with the lower
layers and writes only what differs, with whiteouts of mode 0. The canonical form here is the
smallest one, in RULES. (layers.rewrite_layer has already made the layer canonical on its own.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

from rocmforge.assemble.image.layers import LayerResult, layer_path, sort_key
from rocmforge.assemble.image.lowerindex import OPAQUE, WHITEOUT, LowerIndex, Node, join, node_of, split
from rocmforge.assemble.image.tarcodec import DIR, LNK, REG, TarEntry, TarReader, TarWriter
from rocmforge.shared.streams import ChunkStream

RULES = (
    "W: every whiteout is written with mode 0, owner 0:0, mtime 0, no data, no xattrs",
    "A: an opaque marker on a directory with nothing below it is dropped",
    "B: an opaque marker on a directory with children below becomes a whiteout for each child the "
    "layer does not make again (and so on down a directory the layer makes again), and is dropped",
    "C: an entry equal to the one below at its path is dropped: a directory by mode, owner and "
    "xattrs (not its mtime, which the differs treat alike); a file, symlink, device or fifo by "
    "mode, owner, mtime, xattrs and content (sha256), target or device number, as containerd's "
    "differ compares them (a file's mtime matters: a pyc is checked against its source's). Hard "
    "links are kept, and so is an equal file that a hard link of the layer names",
    "D: a whiteout naming nothing below is dropped",
    "a layer with nothing below (an image's first) gets W alone: its markers and whiteouts stay, fixed like whiteouts",
)

WHITEOUT_MODE = 0


@dataclass
class CanonicalResult(LayerResult):
    """A LayerResult after lowerrules: diff_id, size and entries are the final layer's."""

    whiteouts_fixed: int = 0  # W
    opaque_dropped: int = 0  # A and B
    whiteouts_added: int = 0  # B
    copyups_dropped: int = 0  # C
    targets_kept: int = 0  # C: equal, kept for a hard link
    whiteouts_dropped: int = 0  # D
    built_paths: list[bytes] = field(default_factory=list, repr=False, compare=False)  # paths before lowerrules

    @classmethod
    def of(cls, res: LayerResult) -> CanonicalResult:
        return cls(**{f.name: getattr(res, f.name) for f in fields(LayerResult)})

    @property
    def changed_by_lower(self) -> bool:
        return any(
            (
                self.whiteouts_fixed,
                self.opaque_dropped,
                self.whiteouts_added,
                self.copyups_dropped,
                self.whiteouts_dropped,
            )
        )


def _whiteout(name: bytes) -> TarEntry:
    return TarEntry(name=name, type=REG, mode=WHITEOUT_MODE, uid=0, gid=0, size=0, mtime=0)


def _equal(e: TarEntry, below: Node | None) -> bool:
    """Whether e equals the node below in all but a regular file's content (C)."""
    if below is None or e.type == LNK or below.type != e.type:
        return False
    mine = node_of(e, below.data)  # the digest is compared separately, after hashing
    if e.type == DIR:
        return mine._replace(mtime=below.mtime) == below
    return mine == below


@dataclass
class _Plan:
    """What the first read of a layer found: the second writes it out."""

    drop: set[bytes]  # rel paths of entries dropped (C)
    added: list[bytes]  # names of the whiteouts B adds, sorted
    gone: set[bytes]  # rel paths of whiteouts dropped (D)
    markers: bool = False  # opaque markers kept (nothing below)
    replaced: set[bytes] = field(default_factory=set)  # directories kept over another node below


def _entries(path: Path) -> Iterator[tuple[TarEntry, TarReader]]:
    with open(path, "rb") as f:
        reader = TarReader(ChunkStream(f))
        for e in reader:
            yield e, reader


def _first_plan(path: Path, res: CanonicalResult) -> _Plan:
    for e, _ in _entries(path):
        if split(layer_path(e.name))[1].startswith(WHITEOUT) and e != _whiteout(e.name):
            res.whiteouts_fixed += 1
    return _Plan(set(), [], set(), markers=True)


def _plan(path: Path, lower: LowerIndex, res: CanonicalResult) -> _Plan:
    made: dict[bytes, bytes | None] = {}  # rel -> a directory's name as spelled, None: not a directory
    whited: set[bytes] = set()  # what the layer's own whiteouts name
    opaque: list[tuple[bytes, bytes]] = []  # (directory rel, its spelling in names + "/")
    targets: set[bytes] = set()
    equal: set[bytes] = set()
    gone: set[bytes] = set()
    replaced: set[bytes] = set()
    for e, reader in _entries(path):
        rel = layer_path(e.name)
        parent, name = split(rel)
        if name == OPAQUE:
            opaque.append((parent, e.name[: -len(OPAQUE)]))
        elif name.startswith(WHITEOUT):
            named = join(parent, name[len(WHITEOUT) :])
            whited.add(named)
            if lower.get(named) is None:
                gone.add(rel)
            elif e != _whiteout(e.name):
                res.whiteouts_fixed += 1
        else:
            made[rel] = e.name if e.type == DIR else None
            if e.type == LNK:
                targets.add(layer_path(e.linkname))
            below = lower.get(rel)
            if e.type == DIR and below is not None and not _equal(e, below):
                replaced.add(rel)
            if below is not None and _equal(e, below):
                if e.type == REG:
                    h = hashlib.sha256()
                    for piece in reader.data():
                        h.update(piece)
                    if h.digest() != below.data:
                        continue
                equal.add(rel)
    res.opaque_dropped = len(opaque)
    res.whiteouts_dropped = len(gone)
    res.targets_kept = len(equal & targets)
    res.copyups_dropped = len(equal - targets)
    added = _whiteouts_for(opaque, made, whited, lower)
    res.whiteouts_added = len(added)
    return _Plan(equal - targets, sorted(added, key=sort_key), gone, replaced=replaced)


def _whiteouts_for(
    opaque: list[tuple[bytes, bytes]], made: dict[bytes, bytes | None], whited: set[bytes], lower: LowerIndex
) -> list[bytes]:
    """B: the explicit whiteouts that hide what the opaque directories hid. A directory the layer
    makes again inside one hides its own lower children too (overlayfs copies nothing into an
    opaque directory), so the walk goes down into those."""
    out: list[bytes] = []
    todo = list(opaque)
    while todo:
        d, spelled = todo.pop()
        for child in lower.children(d):
            rel = join(d, child)
            if rel in whited:
                continue
            if rel not in made:
                out.append(spelled + WHITEOUT + child)
            elif (remade := made[rel]) is not None and getattr(lower.get(rel), "type", None) == DIR:
                todo.append((rel, remade + b"/"))
    return out


def _write(src: Path, dst: Path, plan: _Plan) -> tuple[str, int, int]:
    """The layer with the plan applied, in the same name order (B's whiteouts merged in)."""
    pending = iter(plan.added)
    nxt = next(pending, None)
    with open(dst, "wb") as f:
        w = TarWriter(f)
        for e, reader in _entries(src):
            key = sort_key(e.name)
            while nxt is not None and sort_key(nxt) < key:
                w.add(_whiteout(nxt))
                nxt = next(pending, None)
            rel = layer_path(e.name)
            parent, name = split(rel)
            if (name == OPAQUE and not plan.markers) or rel in plan.gone:
                continue
            if name.startswith(WHITEOUT):
                w.add(_whiteout(e.name))
            elif rel not in plan.drop:
                w.add(e, reader.data() if e.type == REG else None)
        while nxt is not None:
            w.add(_whiteout(nxt))
            nxt = next(pending, None)
        return w.close(), w.size, w.count


def _final_paths(paths: list[bytes], plan: _Plan) -> list[bytes]:
    """LayerResult.paths of the canonical layer: without the copy-ups and whiteouts it drops, with
    the whiteouts B adds; a directory kept over another node below (a symlink, another mode or
    owner) is spelled without its "/", as any other name that replaces what was there."""
    removed = plan.drop | plan.gone
    kept = [p.rstrip(b"/") if p.rstrip(b"/") in plan.replaced else p for p in paths if p.rstrip(b"/") not in removed]
    return kept + [layer_path(name) for name in plan.added]


def canonicalise(path: Path, lower: LowerIndex | None, res: LayerResult) -> CanonicalResult:
    """Rewrites the layer file at path (rewrite_layer's output) against lower, the index of the
    layers below it (None: there are none), in place; returns res with the final diff ID, size,
    entries and rule counts. Two reads of the layer (the first finds what to drop and add), one
    write when anything changes; nothing of it is held in memory but its names."""
    out = CanonicalResult.of(res)
    plan = _plan(path, lower, out) if lower is not None else _first_plan(path, out)
    out.built_paths, out.paths = out.paths, _final_paths(out.paths, plan)
    if not out.changed_by_lower:
        return out
    tmp = path.with_suffix(".lower")
    try:
        out.diff_id, out.size, out.entries = _write(path, tmp, plan)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return out
