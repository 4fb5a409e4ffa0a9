"""Per-image manifest and CycloneDX SBOM, written to .rocmforge/artifacts/<target>/. Both are
byte-identical for the same image: no wall-clock time, a serial number derived from content."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
import warnings
from pathlib import Path

from rocmforge.define.kinds import GitSourceFetch
from rocmforge.define.matrix import variant_suffix
from rocmforge.host import aptmirror
from rocmforge.render import archprune
from rocmforge.render.plan import TargetPlan
from rocmforge.resolve.lockmodel import Lock
from rocmforge.shared import program
from rocmforge.shared.files import atomic_write
from rocmforge.shared.records import load_internal, warn_ignored
from rocmforge.shared.statedir import StateDir


def make_manifest(
    tp: TargetPlan, image_id: str, inv: dict, lock: Lock, suites: dict | None, apt_mirror: str | None = None
) -> dict:
    """apt_mirror: the Debian archive the build's apt read from (recorded; not part of the image)."""
    git = {
        item.component: {"url": item.url, "commit": item.commit}
        for item in tp.fetches
        if isinstance(item, GitSourceFetch)
    }
    base = lock.base(tp.stack)
    return {
        "target": tp.name,
        **({"variant": list(tp.variant)} if tp.variant else {}),
        "stack": tp.stack,
        "archs": list(tp.archs),
        "image_id": image_id,
        "content_hash": tp.content_hash,
        "tags": [tp.content_tag, tp.readable_tag],
        "created": tp.labels["org.opencontainers.image.created"],
        "base": {
            "name": tp.labels["org.opencontainers.image.base.name"],
            "digest": tp.labels.get("org.opencontainers.image.base.digest") or base.digest,
            "image_id": base.image_id,
            "recipe": base.recipe,
            # a registry base's own apt lists: what the stack did to them, and which it shipped
            **(
                {"apt_sources": base.apt_sources, "apt_lists_found": base.apt_lists_found}
                if base.apt_sources is not None
                else {}
            ),
        },
        "prune": archprune.summary(tp.labels.get(archprune.LABEL) == "true", inv.get("prune_records", [])),
        "dpkg": inv["dpkg"],
        "python": inv["python"],
        "git": git,
        "suites": suites,
        "apt_mirror": apt_mirror or aptmirror.effective(),
    }


# Imported only for the SBOM (0.11 s); a build loads them while the engine builds.
SBOM_LIBRARIES = ("cyclonedx.model.bom", "cyclonedx.model.component", "cyclonedx.output.json", "packageurl")


def make_sbom(manifest: dict) -> str:
    """The CycloneDX 1.5 JSON SBOM of a manifest: its dpkg, Python and git components."""
    from cyclonedx.model.bom import Bom  # SBOM_LIBRARIES: only for the SBOM
    from cyclonedx.model.component import Component, ComponentType  # SBOM_LIBRARIES: only for the SBOM
    from cyclonedx.output.json import JsonV1Dot5  # SBOM_LIBRARIES: only for the SBOM
    from packageurl import PackageURL  # SBOM_LIBRARIES: only for the SBOM

    bom = Bom()
    content = json.dumps({k: manifest[k] for k in ("image_id", "dpkg", "python", "git")}, sort_keys=True)
    bom.serial_number = uuid.uuid5(uuid.NAMESPACE_URL, "rocmforge:" + hashlib.sha256(content.encode()).hexdigest())
    bom.metadata.timestamp = dt.datetime.strptime(manifest["created"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=dt.timezone.utc
    )
    bom.metadata.component = Component(
        name=manifest["target"], version=manifest["image_id"], type=ComponentType.CONTAINER, bom_ref="image"
    )
    distro = manifest["stack"].split("-")[0]
    for name, version in manifest["dpkg"].items():
        purl = PackageURL("deb", "debian", name, version, {"arch": "amd64", "distro": distro})
        bom.components.add(
            Component(name=name, version=version, type=ComponentType.LIBRARY, purl=purl, bom_ref=purl.to_string())
        )
    for name, version in manifest["python"].items():
        purl = PackageURL("pypi", None, name.lower(), version)
        bom.components.add(
            Component(name=name, version=version, type=ComponentType.LIBRARY, purl=purl, bom_ref=purl.to_string())
        )
    for name, src in manifest["git"].items():
        purl = PackageURL("generic", None, name, src["commit"], {"vcs_url": f"git+{src['url']}@{src['commit']}"})
        bom.components.add(
            Component(name=name, version=src["commit"], type=ComponentType.LIBRARY, purl=purl, bom_ref=purl.to_string())
        )
    with warnings.catch_warnings():  # the dependency graph of an image's packages is not modelled
        warnings.simplefilter("ignore")
        return JsonV1Dot5(bom).output_as_string(indent=2) + "\n"


def write(state: Path, manifest: dict) -> Path:
    """Writes the manifest and its SBOM (with the SBOM's sha256) into the target's artifacts folder;
    returns that folder."""
    folder = StateDir(state).artifacts(manifest["target"] + variant_suffix(manifest.get("variant", ())))
    folder.mkdir(parents=True, exist_ok=True)
    sbom = make_sbom(manifest)
    # Each replaced whole: a full disk leaves the previous file, never a truncated one.
    atomic_write(folder / "sbom.cdx.json", sbom.encode())
    digest = hashlib.sha256(sbom.encode()).hexdigest()
    atomic_write(folder / "sbom.cdx.json.sha256", f"{digest}  sbom.cdx.json\n".encode())
    manifest = {**manifest, "sbom_sha256": digest}
    atomic_write(folder / "manifest.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return folder


def describes(state: Path, key: str, image_id: str) -> bool:
    """Whether the state dir holds a manifest of the target (or variant: TargetPlan.key) that names
    exactly this image."""
    try:
        data = json.loads((StateDir(state).artifacts(key) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("image_id") == image_id


# -- reading side: what the report links to ----------------------------------------------------
def checked_artifacts(state: Path, target: str) -> tuple[Path | None, Path | None]:
    """The target's manifest and SBOM, each only when it is what `write` made: a manifest of this
    target, and an SBOM whose sha256 its manifest records. Anything else is not linked, with a
    warning naming the file."""
    folder = StateDir(state).artifacts(target)
    fix = f"run `{program.command('manifest --target ' + target)}` again"
    manifest = load_internal(folder / "manifest.json", lambda d: _manifest_problem(d, target), fix)
    if manifest is None:
        return None, None
    sbom = folder / "sbom.cdx.json"
    try:
        digest = hashlib.sha256(sbom.read_bytes()).hexdigest()
    except OSError:
        return folder / "manifest.json", None
    if digest != manifest.get("sbom_sha256"):
        warn_ignored(sbom, "does not match the sbom_sha256 its manifest records", fix=fix)
        return folder / "manifest.json", None
    return folder / "manifest.json", sbom


def _manifest_problem(data: object, target: str) -> str | None:
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("variant", []), list)
        or f"{data.get('target')}{variant_suffix(data.get('variant', []))}" != target
    ):
        return f"not a manifest of {target}"
    if not isinstance(data.get("image_id"), str) or not isinstance(data.get("sbom_sha256"), str):
        return "not a manifest written by rocmforge (no 'image_id' or 'sbom_sha256')"
    return None


def prune_summary(state: Path, target: str) -> dict | None:
    """The prune summary of the target's last written manifest, if there is one."""
    path, _sbom = checked_artifacts(state, target)
    if path is None:
        return None
    prune = json.loads(path.read_text(encoding="utf-8")).get("prune")
    return prune if isinstance(prune, dict) else None
