"""The OCI image layout (what `docker save` writes with the containerd image store, and what
OCI exporters write): oci-layout, index.json, and every config, manifest and layer as
blobs/<algorithm>/<hex digest>. index.json points at the image's manifest, or at an image index
(one per image saved by Docker) whose manifests are one per platform plus attestations."""

from __future__ import annotations

import json
import re

from rocmforge.shared.errors import ImageArchiveError

PLATFORM = ("linux", "amd64")  # what rocmforge builds
NESTED_INDEXES = 1  # Docker's: index.json -> the image's index -> manifests


def blob_name(digest: object) -> str:
    """The member holding the blob with this digest; ImageArchiveError when it is not a digest (it
    comes from a JSON document of the archive, so it may be anything)."""
    if not isinstance(digest, str) or not re.fullmatch(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+", digest):
        raise ImageArchiveError(f"the OCI index names a malformed digest {digest!r}")
    algorithm, _, encoded = digest.partition(":")
    return f"blobs/{algorithm}/{encoded}"


def _blob_json(small: dict[str, bytes], digest: object, what: str) -> dict:
    name = blob_name(digest)
    if name not in small:
        raise ImageArchiveError(f"the image archive lacks its {what} {name}")
    try:
        return json.loads(small[name])
    except ValueError as exc:
        raise ImageArchiveError(f"the {what} {name} is not JSON ({exc})") from None


def _is_attestation(desc: dict) -> bool:
    """Buildkit's provenance and SBOM manifests, listed beside the platforms as unknown/unknown."""
    platform = desc.get("platform") or {}
    return (
        platform.get("os") == "unknown"
        or (desc.get("annotations") or {}).get("vnd.docker.reference.type") == "attestation-manifest"
    )


def _platform(desc: dict) -> tuple:
    platform = desc.get("platform") or {}
    return platform.get("os"), platform.get("architecture")


def _choose(index: dict, small: dict[str, bytes]) -> dict:
    """The one image an index's manifests stand for: the only one, else the linux/amd64 one, else
    the only one whose blob was saved (Docker saves only the platforms it holds)."""
    images = [d for d in index.get("manifests") or [] if not _is_attestation(d)]
    if len(images) != 1:
        images = [d for d in images if _platform(d) == PLATFORM] or [
            d for d in images if blob_name(d.get("digest")) in small
        ]
    if len(images) != 1:
        platforms = sorted("/".join(map(str, _platform(d))) for d in index.get("manifests") or [])
        raise ImageArchiveError(
            f"the OCI index lists {len(index.get('manifests') or [])} images "
            f"({', '.join(platforms) or 'none'}), expected one, or one for linux/amd64"
        )
    return images[0]


def _image_manifest(small: dict[str, bytes], node: dict | None = None) -> dict:
    """The image manifest index.json (or the given index) stands for."""
    if node is None:
        try:
            node = json.loads(small["index.json"])
        except ValueError as exc:
            raise ImageArchiveError(f"the image archive's index.json is not JSON ({exc})") from None
    for _ in range(NESTED_INDEXES + 1):
        desc = _choose(node, small)
        node = _blob_json(small, desc.get("digest"), "image manifest")
        if "manifests" not in node:  # a manifest, not another index (media types are optional)
            return node
    raise ImageArchiveError(f"the OCI index nests image indexes deeper than {NESTED_INDEXES}")


def config_digest(small: dict[str, bytes], digest: str) -> str | None:
    """The config digest the manifest (or image index) with this digest names; None while its blob,
    or the blob of the manifest an index chooses, is not among small."""
    name = blob_name(digest)
    if name not in small:
        return None
    node = _blob_json(small, digest, "image manifest")
    if "manifests" in node:
        try:
            node = _image_manifest(small, node)
        except ImageArchiveError:
            return None
    return (node.get("config") or {}).get("digest")


def manifest_layers(small: dict[str, bytes]) -> list[dict] | None:
    """The image manifest's layer descriptors (media type, digest, size) of an OCI layout; None
    for a docker-archive."""
    if "index.json" not in small:
        return None
    return [dict(d) for d in _image_manifest(small).get("layers") or []]


def read_index(small: dict[str, bytes]) -> tuple[dict, str, list[str]]:
    """(image config, its member name, layer member names in image order) from index.json."""
    node = _image_manifest(small)
    cfg_digest = (node.get("config") or {}).get("digest")
    cfg_name = blob_name(cfg_digest)
    config = _blob_json(small, cfg_digest, "config")
    return config, cfg_name, [blob_name(layer.get("digest")) for layer in node.get("layers") or []]
