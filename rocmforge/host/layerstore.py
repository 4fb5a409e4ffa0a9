"""One layer of an image, read from the engine's own store instead of `docker save`.

The Engine API (20.10 and later) can only export a whole image: `docker save` of an image that
adds one file to a 5 GB base writes and streams all 5 GB. When the engine runs on this host with
the overlay2 driver, its store already holds each layer as a directory plus tar-split metadata
(the headers and padding of the layer's original tar), which is how the engine itself rebuilds a
layer's tar for `docker save` and `docker push`. Reading that costs what the layer holds.

Everything read here is checked against the content it claims to be: a config against its image
ID, a layer stream against its diff ID (by the caller, which hashes every byte it reads). When the
store cannot be read (a remote engine, another storage driver, no permission), `LayerStore.of`
returns None and the caller falls back to `docker save`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocmforge.shared.streams import CHUNK_SIZE


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The engine's chain ID of each layer: the identity of the layer with everything below it."""
    out: list[str] = []
    for d in diff_ids:
        out.append(d if not out else "sha256:" + hashlib.sha256(f"{out[-1]} {d}".encode()).hexdigest())
    return out


@dataclass
class StoredLayer:
    diff_id: str
    size: int  # bytes of the layer tar
    files: Path  # the layer's directory
    tar_split: Path  # its tar-split records (gzipped JSON lines)

    @property
    def tar_size(self) -> int:
        return self.size

    def segments(self) -> Iterator[bytes | tuple[Path, int]]:
        """The layer's tar in order: raw bytes, or (file, size) for a file's content."""
        with gzip.open(self.tar_split, "rt", encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if rec["type"] == 2:  # raw tar bytes: headers, padding, the end blocks
                    yield base64.b64decode(rec.get("payload") or "")
                elif rec.get("size"):  # a file's content, from the layer's directory
                    if ".." in Path(rec["name"]).parts:
                        raise ValueError(f"layer record names {rec['name']!r}")
                    yield self.files / rec["name"].lstrip("/"), rec["size"]

    def chunks(self) -> Iterator[bytes]:
        """The layer's tar, byte for byte as the engine would export it."""
        for seg in self.segments():
            if isinstance(seg, bytes):
                yield seg
                continue
            path, size = seg
            with open(path, "rb") as f:
                while size:
                    piece = f.read(min(size, CHUNK_SIZE))
                    if not piece:
                        raise OSError(f"{path} is shorter than the layer records")
                    size -= len(piece)
                    yield piece


class LayerStore:
    """The overlay2 store of the engine this process runs beside (root: its DockerRootDir)."""

    def __init__(self, root: Path):
        self.root = root
        self.layerdb = root / "image" / "overlay2" / "layerdb" / "sha256"
        self.imagedb = root / "image" / "overlay2" / "imagedb" / "content" / "sha256"

    @classmethod
    def of(cls, root: Path | None, driver: str) -> LayerStore | None:
        """The store under the engine data root when it is overlay2 and this process can read it."""
        if driver != "overlay2" or root is None:
            return None
        store = cls(root)
        return store if os.access(store.layerdb, os.R_OK | os.X_OK) else None

    def describe(self) -> str:
        return "engine's overlay2 store"

    def config(self, image_id: str) -> bytes | None:
        """The image's config bytes, or None when they are not here (or are not what image_id names)."""
        try:
            data = (self.imagedb / image_id.split(":")[-1]).read_bytes()
        except OSError:
            return None
        return data if "sha256:" + hashlib.sha256(data).hexdigest() == image_id else None

    def layer(self, diff_ids: list[str], index: int) -> StoredLayer | None:
        """Layer `index` of an image whose layers are diff_ids, or None when the store lacks it."""
        chain = chain_ids(diff_ids[: index + 1])[-1]
        meta = self.layerdb / chain.split(":")[-1]
        try:
            if (meta / "diff").read_text().strip() != diff_ids[index]:
                return None
            files = self.root / "overlay2" / (meta / "cache-id").read_text().strip() / "diff"
            layer = StoredLayer(diff_ids[index], 0, files, meta / "tar-split.json.gz")
            layer.size = sum(len(s) if isinstance(s, bytes) else s[1] for s in layer.segments())
        except (OSError, ValueError, KeyError, EOFError):
            return None
        return layer
