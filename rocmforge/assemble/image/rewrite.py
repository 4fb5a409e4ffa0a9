"""One image's layers and config rewritten into the canonical form, read from a docker-archive
stream (`docker save`) or from the engine's own store; normalise.py loads the result back."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from rocmforge.assemble.image import lowerindex, ociload
from rocmforge.assemble.image.archive import RewrittenImage, read_manifest, walk_archive
from rocmforge.assemble.image.config import normalise_config
from rocmforge.assemble.image.layers import LayerResult, rewrite_layer
from rocmforge.assemble.image.lowerrules import CanonicalResult, canonicalise
from rocmforge.host.ocilayout import manifest_layers
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream, HashingWindow

if TYPE_CHECKING:
    from rocmforge.host.contentstore import ContentStore
    from rocmforge.host.layerstore import LayerStore
    from rocmforge.host.podmanstore import PodmanStore


class ReadMeter:
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
    notes = [
        f"{res.entries} entries",
        f"{len(res.dropped)} dropped",
        f"{len(res.blanked)} blanked",
        f"{res.clamped} times clamped",
    ]
    if res.pycs_clamped:
        notes.append(f"{res.pycs_clamped} pyc headers clamped")
    if res.resorted:
        notes.append("re-sorted")
    if isinstance(res, CanonicalResult):
        for count, what in (
            (res.whiteouts_fixed, "whiteouts fixed"),
            (res.opaque_dropped, "opaque markers dropped"),
            (res.whiteouts_added, "whiteouts added"),
            (res.copyups_dropped, "copy-ups dropped"),
            (res.targets_kept, "equal hard link targets kept"),
            (res.whiteouts_dropped, "whiteouts of nothing dropped"),
        ):
            if count:
                notes.append(f"{count} {what}")
    return (
        f"  layer {res.source_diff_id[7:19]} -> {res.diff_id[7:19]}{' (unchanged)' if res.unchanged else ''}: "
        f"{', '.join(notes)}; {size / 1e6:.0f} MB in {seconds:.1f}s"
    )


def _passed_through(diff_ids: list[str]) -> list[LayerResult]:
    return [LayerResult(d, 0, d, inherited=True) for d in diff_ids]


def _against_lower(
    results: list[LayerResult],
    files: list[tuple[str, Path | None, int]],
    inherited: int,
    base: Callable[[int], lowerindex.LayerSource | None],
    workdir: Path,
    index_dir: Path | None,
    log: Callable[[str], None],
) -> dict[int, float]:
    """The second pass (lowerrules), in image order: each rewritten layer made canonical against
    everything below it, in results and files. base(i) gives the tar of the base's layer i, read
    only when no index of the base is cached in index_dir. Returns the seconds each layer took."""
    seconds: dict[int, float] = {}
    if len(results) <= inherited:
        return seconds
    seen: set[Path] = set()
    for i in range(inherited, len(files)):  # a layer the image holds twice: each canonical on its own
        diff_id, path, size = files[i]
        assert path is not None, "only the base's layers are passed through without a file"
        if path in seen:
            copy = path.with_name(f"{path.stem}.{i}.tar")
            files[i] = (diff_id, copy, size)
            shutil.copyfile(path, copy)
        seen.add(path)
    t = time.monotonic()
    lower = lowerindex.open_lower(
        workdir / "lower.sqlite", [r.source_diff_id for r in results[:inherited]], base, cache=index_dir, log=log
    )
    try:
        for i in range(inherited, len(results)):
            path = files[i][1]
            assert path is not None, "only the base's layers are passed through without a file"
            res = results[i] = canonicalise(path, lower if i else None, results[i])
            files[i] = (res.diff_id, path, res.size)
            if i + 1 < len(results):
                lower.apply(path)
            seconds[i], t = time.monotonic() - t, time.monotonic()
    finally:
        lower.close()
        (workdir / "lower.sqlite").unlink(missing_ok=True)
    return seconds


def _finish_image(
    config: dict,
    results: list[LayerResult],
    files: list[tuple[str, Path | None, int]],
    epoch: int,
    steps: list[str] | None = None,
    source_layers: list[dict] | None = None,
    merged: int = 0,
) -> RewrittenImage:
    """The rewritten image whose layers are results (their files: files) under the canonical config."""
    config, results, files = without_empty_layers(config, results, files)
    cfg_bytes = normalise_config(config, [r.diff_id for r in results], epoch=epoch, steps=steps, merged=merged)
    return RewrittenImage(
        cfg_bytes, "sha256:" + hashlib.sha256(cfg_bytes).hexdigest(), files, results, config, source_layers
    )


# The diff ID of a tar with no entries (1024 zero bytes).
EMPTY_TAR = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
BUILDKIT_STEP = "buildkit.dockerfile.v0"  # the comment BuildKit gives each history entry it writes
# What BuildKit's layer of a step that changed no file holds: /etc, where it mounts the step's
# hosts and resolv.conf (the classic builder's containers keep those mount points below the layer).
BUILDKIT_MOUNT_PATHS = frozenset({b"etc/"})


def without_empty_layers(
    config: dict, results: list[LayerResult], files: list[tuple[str, Path | None, int]]
) -> tuple[dict, list[LayerResult], list[tuple[str, Path | None, int]]]:
    """The image without the layers BuildKit commits for steps that changed no file. The classic
    builder commits no layer for such a step (`RUN true`) and marks its history entry empty_layer;
    BuildKit commits a layer holding /etc (its mount points), which lowerrules makes empty. Such a
    layer (BuildKit's history entry, canonically empty, nothing but BUILDKIT_MOUNT_PATHS before
    lowerrules) is dropped and its history entry marked, so both builders give one config. Nothing
    else changes: a layer the classic builder made, or one that held anything else, stays (an empty
    one as well), and a history that does not pair with the layers is left alone."""
    history = [dict(h) for h in config.get("history") or []]
    layered = [h for h in history if not h.get("empty_layer")]
    if len(layered) != len(results):
        return config, results, files
    empty = [
        i
        for i, (r, h) in enumerate(zip(results, layered))
        if not r.inherited
        and h.get("comment") == BUILDKIT_STEP
        and r.diff_id == EMPTY_TAR
        and set(getattr(r, "built_paths", r.paths)) <= BUILDKIT_MOUNT_PATHS
    ]
    if not empty:
        return config, results, files
    for i in empty:
        layered[i]["empty_layer"] = True
    keep = [i for i in range(len(results)) if i not in set(empty)]
    return {**config, "history": history}, [results[i] for i in keep], [files[i] for i in keep]


class _Tee:
    """A layer window whose bytes are also written to a file: the base's layer as the engine has
    it, for the lower index, when its rewrite differs from it."""

    def __init__(self, win: HashingWindow, out: BinaryIO) -> None:
        self.win, self.out = win, out

    @property
    def passed(self) -> int:
        return self.win.passed

    def read(self, n: int) -> bytes:
        data = self.win.read(n)
        self.out.write(data)
        return data

    def pieces(self, n: int) -> Iterator[memoryview]:
        for p in self.win.pieces(n):
            self.out.write(p)
            yield p

    def drain(self) -> None:
        if self.win.remaining is not None:
            for _ in self.pieces(self.win.remaining):
                pass
        else:
            while self.read(CHUNK_SIZE):
                pass

    def digest(self) -> str:
        return self.win.digest()


def rewrite_archive(
    source: Iterable[bytes] | BinaryIO,
    workdir: Path,
    *,
    epoch: int,
    log: Callable[[str], None] = print,
    inherited: int = 0,
    keep_inherited: bool = False,
    index_dir: Path | None = None,
    diff_ids: list[str] | None = None,
    steps: list[str] | None = None,
    merged: int = 0,
) -> RewrittenImage:
    """Reads an image archive (`docker save` output, as chunks or a file: a docker-archive or an
    OCI image layout) once, front to back, and writes its normalised layers into workdir. The
    first `inherited` layers (the base's) are kept as they are (with keep_inherited, their bytes
    too, for an engine that loads only whole archives); the archive gives no way to know which
    member they are before reading it. The lower index of the base is cached in index_dir;
    diff_ids (the image's, when the caller knows them) tell whether it is there already. When it
    is not, every layer whose rewrite changed it is also kept as read, until the walk shows which
    are the base's. steps and merged: the history as the Dockerfile states it (_finish_image)."""
    counter = iter(range(1 << 30))
    need_raw = inherited > 0 and not (diff_ids and lowerindex.is_cached(index_dir, diff_ids[:inherited]))
    raw: dict[str, Path] = {}  # source diff ID -> the layer as read
    # A member named by a base layer's diff ID (podman's `<diff ID>.tar`, an uncompressed OCI blob)
    # is known before it is read; when neither the load nor the lower index needs its bytes it is
    # only hashed, not rewritten onto disk (3.7 GB under a small step on hip-devel).
    own = {d[7:] for d in (diff_ids or [])[inherited:]}
    only_hash = set() if need_raw or keep_inherited else {d[7:] for d in (diff_ids or [])[:inherited]} - own

    def on_layer(name: str, win: HashingWindow) -> tuple[LayerResult, Path | None, int, float]:
        t = time.monotonic()
        named = name.rsplit("/", 1)[-1].removesuffix(".tar")
        if named in only_hash:
            win.drain()
            if win.digest() != f"sha256:{named}":
                raise ImageArchiveError(f"layer {name} of the image archive hashes to {win.digest()}")
            return _passed_through([win.digest()])[0], None, win.passed, time.monotonic() - t
        path = workdir / f"layer-{next(counter)}.tar"
        if not need_raw:
            res = rewrite_layer(win, path, epoch, log)
        else:
            copy = path.with_suffix(".raw")
            with open(copy, "wb") as f:
                res = rewrite_layer(_Tee(win, f), path, epoch, log)
            if res.unchanged:
                copy.unlink()
            else:
                raw[res.source_diff_id] = copy
        return res, path, win.passed, time.monotonic() - t

    small, links, layers = walk_archive(source, on_layer)
    config, _, layer_names = read_manifest(small, links)
    old_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    if len(old_ids) != len(layer_names):
        raise ImageArchiveError(f"the manifest names {len(layer_names)} layers, the config {len(old_ids)}")
    results = _passed_through(old_ids[:inherited])
    files: list[tuple[str, Path | None, int]] = [(d, None, 0) for d in old_ids[:inherited]]
    for i, name in enumerate(layer_names):
        if name not in layers:
            if name in small:
                raise ImageArchiveError(
                    f"layer {name} of the image archive is not a tar, nor a gzip- or zstd-compressed one"
                )
            raise ImageArchiveError(f"the image archive lacks layer {name}")
        res, path, _, _ = layers[name]
        if res.source_diff_id != old_ids[i]:
            raise ImageArchiveError(f"layer {i} ({name}) hashes to {res.source_diff_id}, the config says {old_ids[i]}")
        if i >= inherited:
            results.append(res)
            files.append((res.diff_id, path, res.size))
        elif keep_inherited:  # the base's layer travels as it is; its rewrite is that only when unchanged
            if not res.unchanged:
                raise ImageArchiveError(
                    f"this engine loads only archives holding every layer, and layer {i} of the "
                    f"base ({old_ids[i][7:19]}) is not in canonical form: its bytes cannot be kept"
                )
            files[i] = (res.diff_id, path, res.size)
    by_id = {layers[n][0].source_diff_id: layers[n] for n in layer_names}
    for d in [d for d in raw if d not in old_ids[:inherited]]:
        raw.pop(d).unlink(missing_ok=True)

    def base(i: int) -> Path | None:
        return raw.get(old_ids[i]) or by_id[old_ids[i]][1]  # unchanged: the rewrite is the layer

    try:
        seconds = _against_lower(results, files, inherited, base, workdir, index_dir, log)
    finally:
        for copy in raw.values():
            copy.unlink(missing_ok=True)
    for i, name in enumerate(layer_names):
        first, kept, passed, took = layers[name]
        if kept is None:
            log(f"  layer {first.diff_id[7:19]}: the base's, hashed only; {passed / 1e6:.0f} MB in {took:.1f}s")
        else:
            log(_layer_note(results[i] if i >= inherited else first, passed, took + seconds.get(i, 0.0)))
    # A docker-archive's layers are the uncompressed tars: the base's are named by their diff IDs,
    # as podman's storage knows them, so a layout can name them without sending them.
    described = manifest_layers(small) or [
        {"mediaType": ociload.LAYER_TYPE, "digest": layers[n][0].source_diff_id, "size": layers[n][2]}
        for n in layer_names
    ]
    return _finish_image(config, results, files, epoch, steps, described, merged)


def rewrite_from_store(
    store: LayerStore | ContentStore | PodmanStore,
    image_id: str,
    workdir: Path,
    *,
    epoch: int,
    inherited: int,
    log: Callable[[str], None],
    meter: ReadMeter | None = None,
    index_dir: Path | None = None,
    steps: list[str] | None = None,
    merged: int = 0,
) -> RewrittenImage | None:
    """The same result as rewrite_archive, reading only the layers the image adds from the engine's
    store (and the base's, once, when index_dir holds no lower index of it). None when the store
    lacks any of them."""
    raw = store.config(image_id)
    if raw is None:
        return None
    config = json.loads(raw)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    found = [store.layer(diff_ids, i) for i in range(inherited, len(diff_ids))]
    layers = [layer for layer in found if layer is not None]
    if len(layers) < len(found):
        return None
    if meter is not None:
        meter.total = sum(layer.tar_size or layer.size for layer in layers)
    results = _passed_through(diff_ids[:inherited])
    files: list[tuple[str, Path | None, int]] = [(d, None, 0) for d in diff_ids[:inherited]]
    took: list[float] = []
    for i, layer in enumerate(layers):
        t = time.monotonic()
        path = workdir / f"layer-{i}.tar"
        chunks = layer.chunks() if meter is None else meter.wrap(layer.chunks())
        res = rewrite_layer(HashingWindow(ChunkStream(chunks), layer.tar_size), path, epoch, log)
        if res.source_diff_id != layer.diff_id:
            log(
                f"  layer {layer.diff_id[7:19]} read from the engine's store hashes to {res.source_diff_id[7:19]}; "
                "exporting the image instead"
            )
            return None
        took.append(time.monotonic() - t)
        results.append(res)
        files.append((res.diff_id, path, res.size))

    def base(i: int) -> Iterator[bytes] | None:
        layer = store.layer(diff_ids, i)
        return None if layer is None else layer.chunks()

    try:
        seconds = _against_lower(results, files, inherited, base, workdir, index_dir, log)
    except (ImageArchiveError, OSError, ValueError) as exc:  # the base's layers gone from the store, or not
        log(f"  lower index: {exc}; exporting the image instead")  # what they claim
        return None
    for i, layer in enumerate(layers):
        log(_layer_note(results[inherited + i], layer.size, took[i] + seconds.get(inherited + i, 0.0)))
    # An OCI layout names the base's layers as the store describes them (containerd: its blobs).
    source_layers = getattr(store, "manifest", {}).get("layers")
    return _finish_image(config, results, files, epoch, steps, source_layers, merged)
