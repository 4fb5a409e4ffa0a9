"""What a normalised image is loaded as on Docker's containerd image store: an OCI image layout
whose manifest rocmforge writes itself, so the ID that store shows (the manifest digest) and the
digest a push gives are functions of the image's content too.

That store refuses a docker-archive lacking the layers the engine already has ("failed to resolve
layers"), but loads a layout whose manifest names blobs its content store holds: the base's
layers are named with the descriptors of the built image's own manifest, and only the added,
normalised layers travel, uncompressed (no compressor's version can change a digest)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

from rocmforge.assemble.image.archive import RewrittenImage, layer_members, small_member
from rocmforge.assemble.image.tarcodec import EMPTY_TAR
from rocmforge.shared.errors import ImageArchiveError

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"


def _compact(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def manifest(rw: RewrittenImage, base_layers: list[dict]) -> bytes:
    """The manifest of rw: the base's layers as base_layers describes them (in order), then the
    added ones. Fields in the order Docker writes a manifest of its own."""
    layers = []
    for i, (diff_id, path, size) in enumerate(rw.layers):
        if path is None:
            if i >= len(base_layers):
                raise ImageArchiveError(f"no descriptor for the base's layer {i} ({diff_id})")
            d = base_layers[i]
            layers.append({"mediaType": d["mediaType"], "digest": d["digest"], "size": d["size"]})
        else:
            layers.append({"mediaType": LAYER_TYPE, "digest": diff_id, "size": size})
    return _compact(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": rw.image_id, "size": len(rw.config)},
            "layers": layers,
        }
    )


def full_name(ref: str) -> str:
    """A reference as containerd names images (docker.io/library/… for Docker Hub's short names)."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return f"{name}:{tag}"


def layout_chunks(rw: RewrittenImage, manifest_bytes: bytes, name: str | None) -> Iterator[bytes]:
    """The OCI layout (as a tar, in chunks for `docker load`): config, manifest, added layers, index."""
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    yield small_member("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    yield small_member(f"blobs/sha256/{rw.image_id[7:]}", rw.config)
    yield small_member(f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
    yield from layer_members(rw, lambda diff_id: f"blobs/sha256/{diff_id[7:]}")
    entry = {"mediaType": MANIFEST_TYPE, "digest": manifest_digest, "size": len(manifest_bytes)}
    if name:
        entry["annotations"] = {
            "io.containerd.image.name": full_name(name),
            "org.opencontainers.image.ref.name": full_name(name).rsplit(":", 1)[1],
        }
    yield (
        small_member("index.json", _compact({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [entry]}))
        + EMPTY_TAR
    )
