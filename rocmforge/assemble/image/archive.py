"""The docker-archive format: what `docker save` writes and `docker load` reads. A tar of the
image config, a manifest.json naming it and the layer tars, and (Engine 20.10) v1 directories
where a layer repeated in the image is a symlink to its first copy. With the containerd image
store (Docker 29's default) `docker save` writes an OCI image layout instead (oci), which is read
here too; what is written for `docker load` is always a docker-archive."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from rocmforge.assemble.image.blobs import layer_window
from rocmforge.assemble.image.layers import LayerResult
from rocmforge.assemble.image.tarcodec import EMPTY_TAR, REG, SYM, TarEntry, TarReader, encode_header, padding
from rocmforge.host.ocilayout import read_index
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream, HashingWindow

# Members that are never layers, whatever their first block looks like.
META_SUFFIXES = (".json", "/json", "VERSION", "repositories", "oci-layout")

T = TypeVar("T")


@dataclass
class RewrittenImage:
    config: bytes
    image_id: str
    layers: list[tuple[str, Path | None, int]]  # (diff ID, file or None for the base's, size) in image order
    results: list[LayerResult]  # in image order
    source_config: dict
    # The source manifest's layer descriptors when the archive was an OCI layout (the containerd
    # store's export): how that store's content names the base's layers.
    source_layers: list[dict] | None = None


def _member_name(name: str) -> str:
    """A member's name as manifests spell it (some writers prefix every name with "./")."""
    while name.startswith("./"):
        name = name[2:]
    return name


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


def walk_archive(
    source: Iterable[bytes] | BinaryIO, on_layer: Callable[[str, HashingWindow], T], small_limit: int = 64 << 20
) -> tuple[dict[str, bytes], dict[str, str], dict[str, T]]:
    """Reads an image archive (chunks or a file) front to back: a docker-archive or an OCI image
    layout. on_layer(member name, window) consumes each layer tar (decompressed, when its blob
    is) and returns what to remember of it. Returns (small members' bytes, symlinks, what
    on_layer returned by member name). A layer is known by its first bytes, since an OCI layout
    names layers by digest alone and its members may come in any order (the config after the
    layers), so which name is which layer is settled only after the walk (read_manifest)."""
    outer = TarReader(ChunkStream(source))
    small: dict[str, bytes] = {}
    links: dict[str, str] = {}
    layers: dict[str, T] = {}
    for m in outer:
        name = _member_name(m.name.decode())
        if m.type == SYM:
            links[name] = m.linkname.decode()
            continue
        if m.type != REG:
            continue
        member = outer.member_stream()
        head = b""
        if not name.endswith(META_SUFFIXES):
            head, window = layer_window(name, member, m.size)
            if window is not None:
                layers[name] = on_layer(name, window)
                continue
        if m.size <= small_limit:
            small[name] = head + member.read(m.size)
    return small, links, layers


def read_manifest(small: dict[str, bytes], links: dict[str, str]) -> tuple[dict, str, list[str]]:
    """(image config, its member name, layer member names in image order) of a walked archive.
    An OCI layout's manifest.json (which `docker save` adds) names the same blobs as its
    index.json, and is read like a docker-archive's; a pure OCI export has only the index."""
    if "manifest.json" not in small:
        if "index.json" in small:
            return read_index(small)
        raise ImageArchiveError("the image archive has neither a manifest.json nor an OCI index.json")
    manifest = json.loads(small["manifest.json"])
    if len(manifest) != 1:
        raise ImageArchiveError(f"the image archive holds {len(manifest)} images, expected one")
    cfg_name = _resolve_link(manifest[0]["Config"], links)
    if cfg_name not in small:
        raise ImageArchiveError(f"the image archive lacks its config {cfg_name}")
    config = json.loads(small[cfg_name])
    return config, cfg_name, [_resolve_link(p, links) for p in manifest[0]["Layers"]]


def tar_member(name: str, size: int) -> bytes:
    """The header of a regular file member of an archive rocmforge writes for `docker load`."""
    return encode_header(TarEntry(name=name.encode(), type=REG, mode=0o644, size=size))


def small_member(name: str, data: bytes) -> bytes:
    """A whole regular file member (header, data, padding) of an archive rocmforge writes."""
    return tar_member(name, len(data)) + data + bytes(padding(len(data)))


def layer_members(rw: RewrittenImage, name_of: Callable[[str], str]) -> Iterator[bytes]:
    """Each added layer of rw once, as the member name_of(diff ID). The base's (no file) are
    already on the engine."""
    done: set[str] = set()
    for diff_id, path, size in rw.layers:
        if diff_id in done or path is None:
            continue
        done.add(diff_id)
        yield tar_member(name_of(diff_id), size)
        with open(path, "rb") as f:
            yield from iter(lambda: f.read(CHUNK_SIZE), b"")
        yield bytes(padding(size))


def archive_chunks(rw: RewrittenImage, tags: list[str]) -> Iterator[bytes]:
    """The docker-archive of rw, as chunks for `docker load`."""
    cfg_name = rw.image_id[7:] + ".json"
    manifest = [
        {"Config": cfg_name, "RepoTags": list(tags) or None, "Layers": [f"{d[7:]}/layer.tar" for d, _, _ in rw.layers]}
    ]
    yield small_member(cfg_name, rw.config)
    yield from layer_members(rw, lambda diff_id: f"{diff_id[7:]}/layer.tar")
    yield small_member("manifest.json", json.dumps(manifest, separators=(",", ":")).encode()) + EMPTY_TAR
