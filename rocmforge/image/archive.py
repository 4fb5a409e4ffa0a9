"""The docker-archive format: what `docker save` writes and `docker load` reads. A tar of the
image config, a manifest.json naming it and the layer tars, and (Engine 20.10) v1 directories
where a layer repeated in the image is a symlink to its first copy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .errors import ImageArchiveError
from .layers import LayerResult
from .streams import CHUNK_SIZE, ChunkStream, HashingWindow, PrefixedStream
from .tarcodec import BLOCK, EMPTY_TAR, REG, SYM, TarEntry, TarReader, encode_header, looks_like_tar_header, padding

# Members that are never layers, whatever their first block looks like.
META_SUFFIXES = (".json", "/json", "VERSION", "repositories", "oci-layout")


@dataclass
class RewrittenImage:
    config: bytes
    image_id: str
    layers: list[tuple[str, Path | None, int]]   # (diff ID, file or None for the base's, size) in image order
    results: list[LayerResult]                   # in image order
    source_config: dict
    # The source manifest's layer descriptors when the archive was an OCI layout (the containerd
    # store's export): how that store's content names the base's layers.
    source_layers: list[dict] | None = None


def _member_dir(name: str) -> str:
    return name.rpartition("/")[0]


def _resolve_link(name: str, links: dict[str, str]) -> str:
    """The member a name ends at after following the archive's symlinks."""
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


def walk_archive(source, on_layer: Callable[[str, HashingWindow], object], small_limit: int = 64 << 20):
    """Reads a docker-archive (chunks or a file) front to back. on_layer(member name, window)
    consumes each layer tar and returns what to remember of it. Returns (small members' bytes,
    symlinks, what on_layer returned by member name). A layer is known by its first block, since
    an OCI-style archive names layers by digest alone."""
    outer = TarReader(ChunkStream(source))
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
        member = outer.member_stream()
        head = b""
        if not name.endswith(META_SUFFIXES) and m.size >= 2 * BLOCK:
            head = member.read(BLOCK)
            if name.endswith("layer.tar") or looks_like_tar_header(head):
                layers[name] = on_layer(name, HashingWindow(PrefixedStream(head, member), m.size))
                continue
        if m.size <= small_limit:
            small[name] = head + member.read(m.size)
    return small, links, layers


def read_manifest(small: dict[str, bytes], links: dict[str, str]) -> tuple[dict, str, list[str]]:
    """(image config, its member name, layer member names in image order) of a walked archive."""
    if "manifest.json" not in small:
        raise ImageArchiveError("the image archive has no manifest.json")
    manifest = json.loads(small["manifest.json"])
    if len(manifest) != 1:
        raise ImageArchiveError(f"the image archive holds {len(manifest)} images, expected one")
    cfg_name = _resolve_link(manifest[0]["Config"], links)
    if cfg_name not in small:
        raise ImageArchiveError(f"the image archive lacks its config {cfg_name}")
    config = json.loads(small[cfg_name])
    return config, cfg_name, [_resolve_link(p, links) for p in manifest[0]["Layers"]]


def archive_chunks(rw: RewrittenImage, tags: list[str]) -> Iterator[bytes]:
    """The docker-archive of rw, as chunks for `docker load`."""
    cfg_name = rw.image_id[7:] + ".json"
    done: set[str] = set()
    manifest = [{"Config": cfg_name, "RepoTags": list(tags) or None,
                 "Layers": [f"{d[7:]}/layer.tar" for d, _, _ in rw.layers]}]

    def member(name: str, size: int) -> bytes:
        return encode_header(TarEntry(name=name.encode(), type=REG, mode=0o644, size=size))

    yield member(cfg_name, len(rw.config)) + rw.config + bytes(padding(len(rw.config)))
    for diff_id, path, size in rw.layers:
        if diff_id in done or path is None:   # None: the base's, already on the engine (load skips it)
            continue
        done.add(diff_id)
        yield member(f"{diff_id[7:]}/layer.tar", size)
        with open(path, "rb") as f:
            for piece in iter(lambda: f.read(CHUNK_SIZE), b""):
                yield piece
        yield bytes(padding(size))
    data = json.dumps(manifest, separators=(",", ":")).encode()
    yield member("manifest.json", len(data)) + data + bytes(padding(len(data))) + EMPTY_TAR
