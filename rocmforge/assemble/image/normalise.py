"""A whole image normalised: its layers read from the engine's store (or `docker save`),
rewritten (layers, config), and loaded back under the image ID its content gives."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble.image import lowerindex, ociload
from rocmforge.assemble.image.archive import RewrittenImage, archive_chunks, read_manifest, walk_archive
from rocmforge.assemble.image.config import normalise_config
from rocmforge.assemble.image.layers import LayerResult, rewrite_layer
from rocmforge.assemble.image.lowerrules import CanonicalResult, canonicalise
from rocmforge.host.engines import EngineError
from rocmforge.host.ocilayout import manifest_layers
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.files import iso_utc, user_cache
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream, HashingWindow

if TYPE_CHECKING:
    from rocmforge.host.contentstore import ContentStore
    from rocmforge.host.engines import Engine
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
        if path in seen:
            files[i] = (diff_id, path.with_name(f"{path.stem}.{i}.tar"), size)
            shutil.copyfile(path, files[i][1])
        seen.add(path)
    t = time.monotonic()
    lower = lowerindex.open_lower(
        workdir / "lower.sqlite", [r.source_diff_id for r in results[:inherited]], base, cache=index_dir, log=log
    )
    try:
        for i in range(inherited, len(results)):
            path = files[i][1]
            res = results[i] = canonicalise(path, lower if i else None, results[i])
            files[i] = (res.diff_id, path, res.size)
            if i + 1 < len(results):
                lower.apply(path)
            seconds[i], t = time.monotonic() - t, time.monotonic()
    finally:
        lower.close()
        (workdir / "lower.sqlite").unlink(missing_ok=True)
    return seconds


def _finish(
    config: dict,
    results: list[LayerResult],
    files: list[tuple[str, Path | None, int]],
    epoch: int,
    steps: list[str] | None = None,
    source_layers: list[dict] | None = None,
    merged: int = 0,
) -> RewrittenImage:
    cfg_bytes = normalise_config(config, [r.diff_id for r in results], epoch=epoch, steps=steps, merged=merged)
    return RewrittenImage(
        cfg_bytes, "sha256:" + hashlib.sha256(cfg_bytes).hexdigest(), files, results, config, source_layers
    )


class _Tee:
    """A layer window whose bytes are also written to a file: the base's layer as the engine has
    it, for the lower index, when its rewrite differs from it."""

    def __init__(self, win: HashingWindow, out):
        self.win, self.out = win, out

    @property
    def passed(self) -> int:
        return self.win.passed

    def read(self, n: int) -> bytes:
        data = self.win.read(n)
        self.out.write(data)
        return data

    def pieces(self, n: int):
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
    source,
    workdir: Path,
    *,
    epoch: int,
    log: Callable[[str], None] = print,
    inherited: int = 0,
    keep_inherited: bool = False,
    index_dir: Path | None = None,
    diff_ids: list[str] | None = None,
) -> RewrittenImage:
    """Reads an image archive (`docker save` output, as chunks or a file: a docker-archive or an
    OCI image layout) once, front to back, and writes its normalised layers into workdir. The
    first `inherited` layers (the base's) are kept as they are (with keep_inherited, their bytes
    too, for an engine that loads only whole archives); the archive gives no way to know which
    member they are before reading it. The lower index of the base is cached in index_dir;
    diff_ids (the image's, when the caller knows them) tell whether it is there already. When it
    is not, every layer whose rewrite changed it is also kept as read, until the walk shows which
    are the base's."""
    counter = iter(range(1 << 30))
    need_raw = inherited > 0 and not (diff_ids and lowerindex.is_cached(index_dir, diff_ids[:inherited]))
    raw: dict[str, Path] = {}  # source diff ID -> the layer as read

    def on_layer(name: str, win: HashingWindow) -> tuple[LayerResult, Path, int, float]:
        t = time.monotonic()
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
    results, files = _passed_through(old_ids[:inherited]), [(d, None, 0) for d in old_ids[:inherited]]
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

    def base(i: int) -> Path:
        return raw.get(old_ids[i]) or by_id[old_ids[i]][1]  # unchanged: the rewrite is the layer

    try:
        seconds = _against_lower(results, files, inherited, base, workdir, index_dir, log)
    finally:
        for copy in raw.values():
            copy.unlink(missing_ok=True)
    for i, name in enumerate(layer_names):
        first, _, passed, took = layers[name]
        log(_layer_note(results[i] if i >= inherited else first, passed, took + seconds.get(i, 0.0)))
    rw = _finish(config, results, files, epoch)
    rw.source_layers = manifest_layers(small)
    return rw


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
) -> RewrittenImage | None:
    """The same result as rewrite_archive, reading only the layers the image adds from the engine's
    store (and the base's, once, when index_dir holds no lower index of it). None when the store
    lacks any of them."""
    raw = store.config(image_id)
    if raw is None:
        return None
    config = json.loads(raw)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    layers = [store.layer(diff_ids, i) for i in range(inherited, len(diff_ids))]
    if any(layer is None for layer in layers):
        return None
    if meter is not None:
        meter.total = sum(layer.tar_size or layer.size for layer in layers)
    results, files = _passed_through(diff_ids[:inherited]), [(d, None, 0) for d in diff_ids[:inherited]]
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

    def base(i: int):
        layer = store.layer(diff_ids, i)
        return layer and layer.chunks()

    try:
        seconds = _against_lower(results, files, inherited, base, workdir, index_dir, log)
    except (ImageArchiveError, OSError, ValueError) as exc:  # the base's layers gone from the store, or not
        log(f"  lower index: {exc}; exporting the image instead")  # what they claim
        return None
    for i, layer in enumerate(layers):
        log(_layer_note(results[inherited + i], layer.size, took[i] + seconds.get(inherited + i, 0.0)))
    # An OCI layout names the base's layers as the store describes them (containerd: its blobs).
    return _finish(config, results, files, epoch, source_layers=getattr(store, "manifest", {}).get("layers"))


# --- the engine ---------------------------------------------------------------------------------


def inherited_layers(client: Engine, image_ref: str, base_ref: str | None) -> int:
    """How many of image_ref's layers are its base's (the image its last stage starts FROM)."""
    if not base_ref:
        return 0
    own = (client.inspect(image_ref).get("RootFS") or {}).get("Layers") or []
    base = (client.inspect(base_ref).get("RootFS") or {}).get("Layers") or []
    if own[: len(base)] != base:
        raise ImageArchiveError(f"{image_ref} does not start with the layers of its base {base_ref}")
    return len(base)


def _rewrite(
    client: Engine,
    image_ref: str,
    info: dict,
    tmp: Path,
    *,
    epoch: int,
    inherited: int,
    log: Callable[[str], None],
    meter: ReadMeter,
    index_dir: Path,
) -> tuple[RewrittenImage, str]:
    """The rewritten image and where its layers were read from: the engine's store when this
    process can read it, else `docker save`. An engine that loads only archives holding every
    layer (podman) gets the base's layers kept from the export too."""
    store = client.layer_reader(info["Id"])
    rw = store and rewrite_from_store(
        store, info["Id"], tmp, epoch=epoch, inherited=inherited, log=log, meter=meter, index_dir=index_dir
    )
    if rw:
        return rw, store.describe()
    if store is None:
        log(f"  {client.unreadable()}: reading the whole image with docker save")
    meter.total, meter.done = int(info.get("Size") or 0), 0
    rw = rewrite_archive(
        meter.wrap(client.export(image_ref)),
        tmp,
        epoch=epoch,
        log=log,
        inherited=inherited,
        keep_inherited=not client.loads_added_layers_only,
        index_dir=index_dir,
        diff_ids=(info.get("RootFS") or {}).get("Layers"),
    )
    return rw, "docker save"


def _load(
    client: Engine, rw: RewrittenImage, image_ref: str, tags: list[str], progress: Callable[[str], None] | None
) -> str:
    """Puts rw on the engine under tags; says how (an identical image may be there already). A
    store that knows an image by its manifest, or that takes a layout without the layers it holds
    when the base's layers were described from its store, gets it as an OCI layout with the
    manifest written here (ociload)."""
    engine_id, chunks = rw.image_id, None
    if client.loads_by_manifest or client.loads_partial_layouts and rw.source_layers:
        manifest = ociload.manifest(rw, rw.source_layers or [])
        engine_id = client.remember_manifest(manifest)
        # named in the layout only where the store needs it (an unnamed image there is collected)
        chunks = ociload.layout_chunks(rw, manifest, tags[0] if tags and client.loads_by_manifest else None)
    if client.find(engine_id) is None:
        if progress:
            progress(f"loading the normalised image ({sum(size for _, _, size in rw.layers) / 1e6:,.0f} MB)")
        try:
            client.load(chunks or archive_chunks(rw, tags))
        except EngineError as exc:
            raise ImageArchiveError(f"docker load of the normalised {image_ref} failed: {exc}") from None
        if client.find(engine_id) is None:
            raise ImageArchiveError(f"docker load did not create {engine_id} for {image_ref}")
        how = "loaded" if engine_id == rw.image_id else f"loaded (the engine shows it as {engine_id[7:19]})"
    else:
        how = "already present, tagged"
    for t in tags:
        client.tag(engine_id, t)
    return how


@dataclass(frozen=True)
class NormalisedImage:
    image_id: str
    added_paths: list[bytes]  # every name the layers the build added held (LayerResult.paths)


def normalise_image(
    client: Engine,
    image_ref: str,
    *,
    epoch: int,
    tags: list[str],
    workdir: Path,
    base_ref: str | None = None,
    log: Callable[[str], None] = print,
    progress: Callable[[str], None] | None = None,
    steps: list[str] | None = None,
    merged: int = 0,
    index_dir: Path | None = None,
) -> NormalisedImage:
    """Rewrites image_ref into its canonical form (see the package doc), loads it tagged with tags
    and returns its image ID with the names its own layers held. Two builds that differ only in
    times and run-specific files (layers.RULES) give the same ID. The layers of base_ref, which
    image_ref starts with, pass through untouched (a registry base keeps its digest's layers, stored
    once); only the layers the build added are read, and each is then made canonical against the
    filesystem below it (lowerrules), so that every engine gives the same layers. workdir holds the
    rewritten layers, removed before returning; index_dir (default: the user's cache, shared by
    every checkout and state folder: it is keyed by the base's chain ID) the index of each base's
    filesystem, kept (the base is read once for it, on the first build on that base anywhere).
    steps: the image's own instructions as its Dockerfile words them (history.stage_steps), so
    that its history reads the same whichever builder ran them; merged: how many trailing LABEL
    steps were sent as one LABEL line with the last (config.normalise_config).
    image_ref itself is left as it is (its tags move when tags name them)."""
    started = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="repro-", dir=workdir))
    try:
        log(f"normalise {image_ref}: epoch {epoch} ({iso_utc(epoch)})")
        info = client.inspect(image_ref)
        inherited = inherited_layers(client, image_ref, base_ref)
        if inherited:
            log(f"  {inherited} layer(s) of the base {base_ref} passed through")
        meter = ReadMeter(0, progress)
        rw, source = _rewrite(
            client,
            image_ref,
            info,
            tmp,
            epoch=epoch,
            inherited=inherited,
            log=log,
            meter=meter,
            index_dir=index_dir or user_cache("lower-index"),
        )
        if steps:
            rw = _finish(rw.source_config, rw.results, rw.layers, epoch, steps, rw.source_layers, merged)
        rewritten = time.monotonic()
        how = _load(client, rw, image_ref, tags, progress)
        own = [r for r in rw.results if not r.inherited]
        log(
            f"normalise {image_ref}: {rw.image_id} {how} ({len(rw.results)} layers: {inherited} inherited, "
            f"{len(own)} normalised, {sum(r.unchanged for r in own)} of them unchanged; "
            f"read {meter.done / 1e6:,.0f} MB from the {source}; "
            f"read+rewrite {rewritten - started:.1f}s, load {time.monotonic() - rewritten:.1f}s)"
        )
        return NormalisedImage(rw.image_id, [p for r in own for p in r.paths])
    except EngineError as exc:
        raise ImageArchiveError(f"normalise {image_ref}: the engine refused: {exc}") from None
    except OSError as exc:  # a write to an open layer file names no path: "No space left" says where
        if exc.errno is not None and exc.filename is None:
            exc.filename = str(tmp)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
