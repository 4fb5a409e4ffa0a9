"""The layers of an image read from the containerd content store of Docker's containerd image store
(Docker 29's default, Docker 28's `containerd-snapshotter` feature), instead of `docker save`.

Under that store an image is its manifest: the engine's image ID is the manifest's digest, and the
manifest names the config and each layer's blob (gzip-compressed as the builder commits it, or an
uncompressed tar as rocmforge loads it). The blobs are plain files named by their digest, in the
content store of the containerd the engine uses:

* `<DockerRootDir>/containerd/daemon/io.containerd.content.v1.content` when dockerd runs its own
  containerd (Debian's and Ubuntu's docker.io, a dockerd started by hand);
* `/var/lib/containerd/io.containerd.content.v1.content` when it uses the system's containerd
  (Docker's own packages, where containerd.io is a service of its own).

Which one holds the image is found by looking for its manifest there. Everything read is checked:
the manifest against the image ID, the config against its digest, each decompressed layer (by the
caller) against its diff ID. When none can be read (a remote engine, no permission), `of` returns
None and the caller takes `docker save`, and says so."""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocmforge.shared.streams import CHUNK_SIZE

CONTENT = "io.containerd.content.v1.content"
SYSTEM_CONTAINERD = Path("/var/lib/containerd")
UNCOMPRESSED = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar")
GZIP = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip")
INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


def candidates(engine_root: Path) -> list[Path]:
    """Where the engine's content store may be, its own containerd's first."""
    return [engine_root / "containerd" / "daemon" / CONTENT, SYSTEM_CONTAINERD / CONTENT]


@dataclass
class BlobLayer:
    diff_id: str
    size: int  # the blob's bytes: what is read from the store
    blob: Path
    gzipped: bool

    @property
    def tar_size(self) -> int | None:
        """The layer tar's length; known up front only for an uncompressed blob."""
        return None if self.gzipped else self.size

    def chunks(self) -> Iterator[bytes]:
        """The layer's tar, decompressed as it is read (the caller hashes it against diff_id)."""
        with open(self.blob, "rb") as f:
            if not self.gzipped:
                while piece := f.read(CHUNK_SIZE):
                    yield piece
                return
            inflate = zlib.decompressobj(wbits=31)
            while piece := f.read(CHUNK_SIZE):
                while piece:
                    out = inflate.decompress(piece)
                    if out:
                        yield out
                    if inflate.eof:  # a gzip stream of several members: the next starts here
                        piece, inflate = inflate.unused_data, zlib.decompressobj(wbits=31)
                    else:
                        piece = b""
            tail = inflate.flush()
            if tail:
                yield tail


class ContentStore:
    """The blobs folder of one containerd content store, holding one image's manifest."""

    def __init__(self, root: Path):
        self.blobs = root / "blobs" / "sha256"
        self.manifest: dict = {}

    @classmethod
    def of(cls, engine_root: Path, image_id: str) -> ContentStore | None:
        """The content store under engine_root (or the system's) that holds image_id's manifest,
        when this process can read it; else None."""
        for root in candidates(engine_root):
            store = cls(root)
            if os.access(store.blobs, os.R_OK | os.X_OK) and store._blob(image_id) is not None:
                return store
        return None

    def _blob(self, digest: str) -> bytes | None:
        """A small blob (manifest, config), only when its bytes are what the digest names."""
        algo, _, hexpart = digest.partition(":")
        if algo != "sha256" or len(hexpart) != 64:
            return None
        try:
            data = (self.blobs / hexpart).read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == hexpart else None

    def describe(self) -> str:
        return "containerd content store"

    def config(self, image_id: str) -> bytes | None:
        """The image's config bytes, read through its manifest (image_id: the manifest's digest, as
        the containerd store names images); None when either is missing or not what it claims."""
        raw = self._blob(image_id)
        try:
            manifest = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        if not isinstance(manifest, dict) or manifest.get("mediaType") in INDEXES:
            return None  # a multi-platform image: its layers come by `docker save`
        config = (manifest.get("config") or {}).get("digest")
        data = self._blob(config) if isinstance(config, str) else None
        if data is not None:
            self.manifest = manifest
        return data

    def layer(self, diff_ids: list[str], index: int) -> BlobLayer | None:
        """Layer `index` (diff_ids: the config's) from the manifest `config` read, or None when its
        blob is not here or of a kind not read here."""
        layers = self.manifest.get("layers") or []
        if index >= len(layers) or len(layers) != len(diff_ids):
            return None
        desc = layers[index]
        media, digest = desc.get("mediaType"), desc.get("digest") or ""
        if media not in UNCOMPRESSED + GZIP or not digest.startswith("sha256:"):
            return None
        blob = self.blobs / digest.split(":", 1)[1]
        try:
            size = blob.stat().st_size
        except OSError:
            return None
        if size != desc.get("size"):
            return None
        return BlobLayer(diff_ids[index], size, blob, media in GZIP)
