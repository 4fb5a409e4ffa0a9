"""A build cache in any OCI registry, keyed by content tag: what one machine built, every other
machine (a CI runner, a new developer) pulls instead of building.

`build --cache-registry HOST[:PORT][/NS]` (or ROCMFORGE_CACHE_REGISTRY) asks the registry for
`HOST/NS/<target>:content-<full content hash>` before building a target. A hit is pulled by digest
and used only if it is what that tag must hold: labelled with the target and its full content
hash, normalised (created at the target's source_date_epoch), and starting with exactly the layers
of the image it is built on, which is present here. Anything else is refused with the reason, and
the target is built and pushed over it. A miss is built, then pushed. The cache is not publishing:
no suites are required, it has its own namespace (default `rocmforge-cache`), and published tags
are never touched. ROCMFORGE_CACHE_READONLY=1 (pull requests) reads and never pushes. A registry
that does not answer gives a warning and a local build.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.host import registry as reg
from rocmforge.host.enginebase import EngineError
from rocmforge.release import publish, pulling
from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import TargetPlan

ENV = "ROCMFORGE_CACHE_REGISTRY"
READONLY_ENV = "ROCMFORGE_CACHE_READONLY"
NAMESPACE = "rocmforge-cache"
LABEL_TARGET = "io.rocmforge.target"
LABEL_HASH = "io.rocmforge.content-hash"


@dataclass(frozen=True)
class Cache:
    where: reg.Registry
    readonly: bool

    def ref(self, tp: TargetPlan) -> tuple[str, str]:
        return self.where.repository(tp.name), f"content-{tp.content_hash}"


def from_options(text: str | None, readonly: bool = False) -> Cache | None:
    """The cache registry from --cache-registry or ROCMFORGE_CACHE_REGISTRY, or None; a Docker Hub name is refused."""
    text = text or os.environ.get(ENV) or ""
    if not text:
        return None
    try:
        where = reg.parse(text)
    except UserError as exc:
        raise UserError(exc.message, field="--cache-registry") from None
    if "/" not in text.strip().rstrip("/"):
        where = reg.Registry(where.host, NAMESPACE)
    return Cache(where, readonly or os.environ.get(READONLY_ENV, "") not in ("", "0", "false"))


def fetch(
    client: Engine, cache: Cache, tp: TargetPlan, base_ref: str | None, epoch_iso: str, warn: Callable[[str], None]
) -> str | None:
    """The target's image from the cache, tagged with its content and readable tags; None on a miss
    (or a refused or unreachable entry, after a warning)."""
    repository, tag = cache.ref(tp)
    try:
        digest = reg.manifest_digest(client, repository, tag, timeout=15)
    except BuildError as exc:
        warn(f"cache {cache.where.host} not usable ({exc}); building {tp.name} here")
        return None
    if digest is None:
        return None
    ref = f"{repository}@{digest}"
    existed = engine.image_id(client, ref) is not None
    try:
        pulling.pull_one(client, repository, digest)
    except BuildError as exc:
        warn(f"cache entry {repository}:{tag} could not be pulled ({exc}); building {tp.name} here")
        return None
    pulled = client.inspect(ref)
    why = _refusal(client, pulled, tp, base_ref, epoch_iso)
    if why:
        note = pulling.undo_pull(client, ref, existed=existed)
        warn(f"cache entry {repository}:{tag} ({digest}) refused: {why}{note}; building {tp.name} here")
        return None
    for full in (tp.content_tag, tp.readable_tag):
        client.tag(pulled["Id"], full)
    if not existed:
        try:
            client.untag(ref)  # only the digest reference: the image keeps our tags
        except EngineError:  # a reference left behind is harmless
            pass
    return engine.image_id(client, tp.content_tag)


def _refusal(client: Engine, attrs: dict, tp: TargetPlan, base_ref: str | None, epoch_iso: str) -> str | None:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_TARGET) != tp.name or labels.get(LABEL_HASH) != tp.content_hash:
        return (
            f"it is labelled {LABEL_TARGET}={labels.get(LABEL_TARGET)!r}, {LABEL_HASH}={labels.get(LABEL_HASH)!r}; "
            f"this target needs {tp.name!r}, {tp.content_hash!r}"
        )
    if attrs.get("Created") != epoch_iso:
        return (
            f"it was created {attrs.get('Created')}, not at the target's source_date_epoch ({epoch_iso}): "
            "not normalised"
        )
    if base_ref:
        base = client.inspect(base_ref)["RootFS"]["Layers"]
        if (attrs.get("RootFS") or {}).get("Layers", [])[: len(base)] != base:
            return f"its layers do not start with those of its base {base_ref}"
    return None


def store(client: Engine, cache: Cache, tp: TargetPlan, warn: Callable[[str], None]) -> str | None:
    """Pushes the built image under its cache tag; returns the digest, or None (read-only, or a
    warning when the registry refused)."""
    if cache.readonly:
        return None
    repository, tag = cache.ref(tp)
    try:
        with publish.temporary_tag(client, tp.content_tag, repository, tag):
            return publish.push_one(client, repository, tag)
    except BuildError as exc:
        warn(f"could not store {tp.name} in the cache: {exc}")
        return None
