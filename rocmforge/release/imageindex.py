"""A target published as one OCI image index: the all-archs main image first (a plain `docker pull`
takes the first entry for its platform, so it gets the image that runs everywhere), then each
per-arch variant. Every entry names its archs in the annotation io.rocmforge.archs, which is what a
host picks by; the annotation is not signed, so whoever pulls holds it against the signed image's
own label before trusting it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.host import registry as reg
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

ARCHS = "io.rocmforge.archs"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
INDEX_TYPES = (OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class Entry:
    digest: str
    archs: tuple[str, ...]
    size: int | None = None  # the image's compressed bytes (config and layers), as the registry serves it


def archs_of(text: str) -> tuple[str, ...]:
    """'gfx1100,gfx1030' -> ('gfx1100', 'gfx1030'): the archs an io.rocmforge.archs value names; () for an
    empty one."""
    return tuple(a for a in (text or "").split(",") if a)


def _manifest(client: Engine, repository: str, digest: str) -> tuple[bytes, dict]:
    _, raw = reg.get_document(client, repository, digest)
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BuildError(f"{repository}@{digest} is not a JSON manifest") from None
    if not isinstance(doc, dict):
        raise BuildError(f"{repository}@{digest} is not a manifest object")
    return raw, doc


def image_size(doc: dict) -> int:
    """What pulling the image moves: its config and its layers, as the manifest gives their sizes."""
    parts = [doc.get("config") or {}] + list(doc.get("layers") or [])
    return sum(p.get("size", 0) for p in parts if isinstance(p, dict) and isinstance(p.get("size"), int))


def build(client: Engine, repository: str, entries: list[tuple[str, tuple[str, ...]]]) -> bytes:
    """The index's bytes for the pushed images (digest, archs), in the order given; each descriptor
    carries the manifest's own media type, size and the platform its config names."""
    manifests = []
    for digest, archs in entries:
        raw, doc = _manifest(client, repository, digest)
        config = (doc.get("config") or {}).get("digest")
        if not isinstance(config, str):
            raise BuildError(f"{repository}@{digest} is not a single-image manifest (no config descriptor)")
        _, cfg_raw = reg.get_document(client, repository, config, blob=True)
        cfg = json.loads(cfg_raw)
        platform = {"architecture": cfg.get("architecture", ""), "os": cfg.get("os", "")}
        if cfg.get("variant"):
            platform["variant"] = cfg["variant"]
        manifests.append(
            {
                "mediaType": doc.get("mediaType") or "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": len(raw),
                "platform": platform,
                "annotations": {ARCHS: ",".join(archs)},
            }
        )
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()


def push(client: Engine, repository: str, tag: str, entries: list[tuple[str, tuple[str, ...]]]) -> str:
    """Publishes the index under tag; returns its digest."""
    return reg.put_manifest(client, repository, tag, OCI_INDEX, build(client, repository, entries))


def read(client: Engine, repository: str, reference: str) -> tuple[str, list[Entry]] | None:
    """The index repository:reference names, as (its digest, its entries with their sizes), or None
    when the reference is a single image. An index without rocmforge's annotations is refused: its
    images cannot be told apart by GPU."""
    digest, raw = reg.get_document(client, repository, reference)
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BuildError(f"{repository}:{reference} ({digest}) is not a JSON manifest") from None
    if not isinstance(doc, dict) or (doc.get("mediaType") not in INDEX_TYPES and "manifests" not in doc):
        return None
    entries = []
    for i, m in enumerate(doc.get("manifests") or []):
        annotations = (m.get("annotations") or {}) if isinstance(m, dict) else {}
        archs = archs_of(annotations.get(ARCHS, ""))
        if not archs or not isinstance(m.get("digest"), str):
            raise BuildError(
                f"{repository}@{digest}: entry {i} of the index has no {ARCHS} annotation, so it is not "
                "a rocmforge index of per-arch images; pull one of its images by digest instead"
            )
        _, child = _manifest(client, repository, m["digest"])
        entries.append(Entry(m["digest"], archs, image_size(child)))
    if not entries:
        raise BuildError(f"{repository}@{digest} is an image index with no entries")
    return digest, entries
