"""The layers of an image read from podman's own storage (containers/storage with its overlay
driver) instead of an export of the whole image.

containers/storage keeps what Docker's overlay2 store keeps, under other names: each layer's files
in `overlay/<layer id>/diff` with the tar-split records of its original tar in
`overlay-layers/<layer id>.tar-split.gz` (the format Docker uses, so a layer's tar is rebuilt byte
for byte as `layerstore.StoredLayer` does), the layers' parents and diff IDs in
`overlay-layers/layers.json`, and each image's config as one of its "big data" items,
`overlay-images/<image id>/=<base64 of the config digest>`. The layout is containers/storage's
implementation detail, not an interface, so everything read is checked: the config against its
digest, the layer chain against the config's diff IDs, each layer's bytes (by the caller) against
its diff ID. Anything else (another driver, a layer without tar-split records, a remote engine)
gives None, and the caller exports the image."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from rocmforge.host.layerstore import StoredLayer

LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar"


class PodmanStore:
    """The overlay storage of a podman engine (root: its graphroot, e.g. /var/lib/containers/storage)."""

    def __init__(self, root: Path):
        self.root = root
        self.layer_meta = root / "overlay-layers"
        self.chain: list[dict] = []  # the layers of the image `config` read, bottom first
        self.manifest: dict = {}  # their descriptors, as a manifest naming them would

    @classmethod
    def of(cls, root: Path | None, driver: str) -> PodmanStore | None:
        if driver != "overlay" or root is None:
            return None
        store = cls(root)
        return store if os.access(store.layer_meta / "layers.json", os.R_OK) else None

    def describe(self) -> str:
        return "podman storage"

    def _json(self, path: Path):
        try:
            return json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None

    def config(self, image_id: str) -> bytes | None:
        """The image's config bytes (image_id: its config digest, as podman names images), with
        the chain of its layers; None when either is missing or not what it claims."""
        hexpart = image_id.split(":")[-1]
        name = "=" + base64.b64encode(f"sha256:{hexpart}".encode()).decode()
        try:
            data = (self.root / "overlay-images" / hexpart / name).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != hexpart:
            return None
        images = self._json(self.root / "overlay-images" / "images.json") or []
        layers = {
            entry.get("id"): entry
            for entry in self._json(self.layer_meta / "layers.json") or []
            if isinstance(entry, dict)
        }
        top = next((i.get("layer") for i in images if isinstance(i, dict) and i.get("id") == hexpart), None)
        chain: list[dict] = []
        while top:
            if top not in layers or len(chain) > 1000:
                return None
            chain.append(layers[top])
            top = layers[top].get("parent")
        chain.reverse()
        try:
            diff_ids = json.loads(data)["rootfs"]["diff_ids"]
        except (ValueError, KeyError, TypeError):
            return None
        if [entry.get("diff-digest") for entry in chain] != diff_ids:
            return None
        self.chain = chain
        self.manifest = {
            "layers": [{"mediaType": LAYER_TYPE, "digest": e["diff-digest"], "size": e.get("diff-size")} for e in chain]
        }
        return data

    def layer(self, diff_ids: list[str], index: int) -> StoredLayer | None:
        """Layer `index` of the image `config` read, or None when it is not that diff ID or has no records."""
        if index >= len(self.chain) or self.chain[index].get("diff-digest") != diff_ids[index]:
            return None
        layer_id = self.chain[index]["id"]
        if not isinstance(layer_id, str) or "/" in layer_id or layer_id.startswith("."):
            return None
        layer = StoredLayer(
            diff_ids[index], 0, self.root / "overlay" / layer_id / "diff", self.layer_meta / f"{layer_id}.tar-split.gz"
        )
        try:
            layer.size = sum(len(s) if isinstance(s, bytes) else s[1] for s in layer.segments())
        except (OSError, ValueError, KeyError, EOFError):
            return None
        return layer
