"""A whole image normalised: its layers read from the engine's store (or `docker save`),
rewritten (rewrite.py: layers, config), and loaded back under the image ID its content gives."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble.image import ociload
from rocmforge.assemble.image.archive import RewrittenImage, archive_chunks
from rocmforge.assemble.image.rewrite import ReadMeter, rewrite_archive, rewrite_from_store
from rocmforge.host.engines import EngineError
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.files import iso_utc, user_cache

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine


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
    steps: list[str] | None,
    merged: int,
) -> tuple[RewrittenImage, str]:
    """The rewritten image and where its layers were read from: the engine's store when this
    process can read it, else `docker save` (the engine's API exports whole images only). An
    engine that loads only archives holding every layer and no layout without them would get the
    base's layers kept from the export too."""
    store = client.layer_reader(info["Id"])
    if store is None:
        log(f"  {client.unreadable()}: reading the whole image with docker save")
    else:
        try:
            from_store = rewrite_from_store(
                store,
                info["Id"],
                tmp,
                epoch=epoch,
                inherited=inherited,
                log=log,
                meter=meter,
                index_dir=index_dir,
                steps=steps,
                merged=merged,
            )
        except PermissionError as exc:  # a store this process reads only in part (files of other users)
            log(f"  {store.describe()}: {exc.strerror}: {exc.filename}; reading the whole image with docker save")
            from_store = None
        if from_store:
            return from_store, store.describe()
    meter.total, meter.done = int(info.get("Size") or 0), 0
    rw = rewrite_archive(
        meter.wrap(client.export(image_ref)),
        tmp,
        epoch=epoch,
        log=log,
        inherited=inherited,
        keep_inherited=not (client.loads_added_layers_only or client.loads_partial_layouts),
        index_dir=index_dir,
        diff_ids=(info.get("RootFS") or {}).get("Layers"),
        steps=steps,
        merged=merged,
    )
    return rw, "docker save"


def _load(
    client: Engine,
    rw: RewrittenImage,
    image_ref: str,
    tags: list[str],
    progress: Callable[[str], None] | None,
    log: Callable[[str], None],
) -> str:
    """Puts rw on the engine under tags; says how (an identical image may be there already) and
    how many bytes were sent. A store that knows an image by its manifest, or that takes a layout
    without the layers it holds when the base's layers are described (from its store, or from the
    export's uncompressed tars), gets it as an OCI layout with the manifest written here (ociload)."""
    engine_id, chunks = rw.image_id, None
    passed = sum(path is None for _, path, _ in rw.layers)
    if client.loads_by_manifest or client.loads_partial_layouts and rw.source_layers:
        manifest = ociload.manifest(rw, rw.source_layers or [])
        engine_id = client.remember_manifest(manifest)
        # named in the layout only where the store needs it (an unnamed image there is collected)
        chunks = ociload.layout_chunks(rw, manifest, tags[0] if tags and client.loads_by_manifest else None)
        form = f"an OCI layout naming the base's {passed} layer(s) {client.store_name} holds, which are not sent"
    elif passed:
        form = f"a docker-archive without the base's {passed} layer(s), which the engine holds"
    else:
        form = "a docker-archive holding every layer, the base's too (this engine takes nothing less)"
    if client.find(engine_id) is None:
        log(f"  load: {form}")
        if progress:
            progress(f"loading the normalised image ({sum(size for _, _, size in rw.layers) / 1e6:,.0f} MB)")
        try:
            sent = client.load(chunks or archive_chunks(rw, tags))
        except EngineError as exc:
            raise ImageArchiveError(f"docker load of the normalised {image_ref} failed: {exc}") from None
        if client.find(engine_id) is None:
            raise ImageArchiveError(f"docker load did not create {engine_id} for {image_ref}")
        shown = "" if engine_id == rw.image_id else f" (the engine shows it as {engine_id[7:19]})"
        how = f"loaded{shown}, {sent:,} bytes sent"
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
    steps: the image's own instructions as its Dockerfile words them (render.dockerfile.stage_steps), so
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
            steps=steps,
            merged=merged,
        )
        rewritten = time.monotonic()
        how = _load(client, rw, image_ref, tags, progress, log)
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
