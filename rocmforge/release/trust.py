"""`verify REF --key PUB` (or keyless: --certificate-identity, --certificate-oidc-issuer) and the
check `pull` makes before it tags anything: the signature, the three statements (each signed by that
signer and bound to REF's digest), their agreement with each
other and with the image, and the suites that must have passed. Nothing but manifests, the image
config and cosign's small signature layers is read from the registry: no image layer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rocmforge.host import registry as reg
from rocmforge.release import attestations as att
from rocmforge.release import imageindex, referrers, releasestore
from rocmforge.release.cosign import Cosign, CosignFailed, Identity
from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

LABEL_TARGET = "io.rocmforge.target"
LABEL_HASH = "io.rocmforge.content-hash"
_REF_RE = re.compile(
    rf"^(?P<repo>[^@\s]+?/{reg.REFERENCE_COMPONENT}(?:/{reg.REFERENCE_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[0-9a-f]{64}))$"
)
_CONTENT_TAG = re.compile(r"^content-([0-9a-f]{12})$")


class Refused(BuildError):
    """The image is not what its signatures and statements promise: exit 1, one message."""


# What cosign (go-containerregistry) says when the registry's answer, not the signature, was bad: a
# body cut off or altered (a blob is checked against its digest as it is read), a manifest naming a
# blob that is not there, an answer that is not HTTP, a registry that went away.
_REGISTRY_TROUBLE = (
    "unexpected EOF",
    "error verifying sha256 checksum",
    "BLOB_UNKNOWN",
    "malformed HTTP",
    "transport connection broken",
    "connection refused",
    "connection reset",
    "dial tcp",
    "i/o timeout",
    "server misbehaving",
)


def _unreadable(text: str) -> bool:
    return any(marker in text for marker in _REGISTRY_TROUBLE)


UNREADABLE = "could not be read intact from the registry (an answer cut off, altered or refused), so it is not trusted"


@dataclass(frozen=True)
class Reference:
    repository: str  # host[:port]/path
    tag: str | None
    digest: str | None

    @property
    def host(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def tag_or_digest(self) -> str:
        """What the registry is asked for: the digest when given, else the tag (parse_ref sets one)."""
        return self.digest or self.tag or ""

    def __str__(self) -> str:
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag}"


def parse_ref(text: str, field_name: str = "REF") -> Reference:
    """REF as REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:<64 hex>. Raises UserError (at
    field_name) for anything else, and for a registry host that --registry would refuse."""
    m = _REF_RE.match(text.strip())
    scheme, sep, rest = text.strip().partition("://")
    if sep and scheme.isalpha():
        raise UserError(f"{text!r} is a URL: give REGISTRY/REPOSITORY:TAG without {scheme}://", field=field_name)
    if not m:
        raise UserError(
            f"{text!r} is not REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:<64 hex>", field=field_name
        )
    reg.parse(m["repo"].split("/", 1)[0])  # the same host rules as --registry (no Docker Hub names)
    return Reference(m["repo"], m["tag"], m["digest"])


@dataclass
class Verified:
    ref: str
    repository: str
    digest: str
    config_digest: str
    labels: dict
    target: str
    content_hash: str
    signatures: int
    statements: dict = field(default_factory=dict)  # predicate type -> predicate

    def to_json(self) -> dict:
        prov = self.statements[att.PROVENANCE]
        result = self.statements[att.TEST_RESULT]
        return {
            "ref": self.ref,
            "repository": self.repository,
            "digest": self.digest,
            "config_digest": self.config_digest,
            "target": self.target,
            "content_hash": self.content_hash,
            "signatures": self.signatures,
            "sbom": sbom_summary(self.statements[att.SBOM]),
            "provenance": provenance_summary(prov),
            "test_result": result,
        }


def verify(client: Engine, cosign: Cosign, ref: Reference, signer: Identity) -> Verified:
    """Raises Refused naming the first thing that does not hold."""
    if signer.key is not None and not signer.key.is_file():
        raise UserError("no such public key file", file=str(signer.key), field="--key")
    http = reg.insecure(client, ref.host)
    digest = ref.digest or reg.manifest_digest(client, ref.repository, ref.tag_or_digest)
    if digest is None:
        raise Refused(f"{ref}: the registry has no such tag")
    _, raw = reg.get_document(client, ref.repository, digest)
    config_digest, config = _config(client, ref.repository, raw, digest)
    labels = (config.get("config") or {}).get("Labels") or {}
    pinned = f"{ref.repository}@{digest}"
    try:
        payloads = cosign.verify(signer, pinned, http=http)
    except CosignFailed as exc:
        if "no signatures found" in str(exc):
            raise Refused(f"{ref} ({digest}) is not signed: {exc}") from None
        if _unreadable(str(exc)):
            raise Refused(f"{ref} ({digest}): its signature {UNREADABLE}: {exc}") from None
        raise Refused(f"{ref} ({digest}) is not signed by {signer.describe()}: {exc}") from None
    for p in payloads:
        signed = (
            ((p.get("critical") or {}).get("image") or {}).get("docker-manifest-digest")
            if isinstance(p, dict)
            else None
        )
        if signed != digest:
            raise Refused(f"{ref}: a signature names {signed}, not the image's digest {digest}")
    signatures = releasestore.signatures(payloads, digest)
    if not signatures:
        raise Refused(
            f"{ref} ({digest}) is not signed: cosign found {len(payloads)} attestation(s) signed by "
            f"{signer.describe()} but no signature of the digest, and an attestation is not a signature"
        )
    every = {
        uri: _statements(client, cosign, signer, pinned, uri, kind, digest, http)
        for uri, kind in att.COSIGN_TYPES.items()
    }
    found = Verified(
        str(ref),
        ref.repository,
        digest,
        config_digest,
        labels,
        labels.get(LABEL_TARGET, ""),
        labels.get(LABEL_HASH, ""),
        signatures,
        {uri: first[0] for uri, first in every.items()},
    )
    # Several statements of one type (cosign 3 adds one per push where cosign 2 replaces): each is
    # held against the others' first, so no signed statement that would be refused can ride along.
    problems: list[str] = []
    for uri, predicates in every.items():
        for predicate in predicates:
            for problem in agreement(replace(found, statements={**found.statements, uri: predicate}), ref):
                if problem not in problems:
                    problems.append(problem)
    if problems:
        raise Refused(f"{ref} ({digest}): " + "; ".join(problems))
    return found


def _config(client: Engine, repository: str, raw: bytes, digest: str) -> tuple[str, dict]:
    try:
        manifest = json.loads(raw)
        config_digest = manifest["config"]["digest"]
    except (ValueError, KeyError, TypeError):
        raise Refused(f"{repository}@{digest} is not a single-image manifest (no config descriptor)") from None
    _, data = reg.get_document(client, repository, config_digest, blob=True)
    try:
        return config_digest, json.loads(data)
    except ValueError:
        raise Refused(f"{repository}: the image config {config_digest} is not JSON") from None


def _statements(
    client: Engine, cosign: Cosign, signer: Identity, pinned: str, uri: str, kind: str, digest: str, http: bool
) -> list[dict]:
    who = signer.describe()
    try:
        statements = cosign.verify_attestations(signer, pinned, kind, http=http)
    except CosignFailed as exc:
        text = str(exc)
        if _unreadable(text):
            raise Refused(f"{pinned}: the attestation {uri} {UNREADABLE}: {text}") from None
        moved = referrers.attested_elsewhere(client, pinned.split("@")[0], digest, uri)
        if moved or "no matching subject digest" in text:
            raise Refused(
                f"{pinned}: attestation {uri} signed for another digest ({moved or 'not this image'}), "
                f"not this image's {digest}: {text}"
            ) from None
        if "none of the attestations matched the predicate type" in text or "no attestations found" in text:
            raise Refused(f"{pinned}: missing attestation {uri} (no such statement signed by {who}): {text}") from None
        raise Refused(f"{pinned}: attestation {uri} does not verify with {who}: {text}") from None
    bound = []
    for st in statements:
        subjects = [
            (s.get("digest") or {}).get("sha256") if isinstance(s, dict) else None for s in st.get("subject") or []
        ]
        if st.get("predicateType") == uri and f"sha256:{subjects[0] if subjects else ''}" == digest:
            bound.append(st.get("predicate"))
        else:
            raise Refused(
                f"{pinned}: attestation {uri} signed for another digest "
                f"({', '.join(f'sha256:{s}' for s in subjects)}), not this image's {digest}"
            )
    predicates = [p for p in bound if isinstance(p, dict)]
    if not bound or len(predicates) != len(bound):
        raise Refused(f"{pinned}: attestation {uri} carries no predicate object")
    return predicates


def agreement(v: Verified, ref: Reference) -> list[str]:
    """Where the statements disagree with each other or with the image, or the suites did not pass."""
    problems = []
    prov, result, sbom = v.statements[att.PROVENANCE], v.statements[att.TEST_RESULT], v.statements[att.SBOM]
    build = prov.get("buildDefinition") or {}
    p_target = (build.get("externalParameters") or {}).get("target")
    p_hash = (build.get("internalParameters") or {}).get("content_hash")
    if not v.target or p_target != v.target:
        problems.append(f"the provenance names target {p_target!r}, the image's label {LABEL_TARGET} says {v.target!r}")
    if not v.content_hash or p_hash != v.content_hash:
        problems.append(f"the provenance names content hash {p_hash!r}, the image's label says {v.content_hash!r}")
    configs = [c for c in result.get("configuration") or [] if isinstance(c, dict)]
    tested = {f"sha256:{c.get('digest', {}).get('sha256')}" for c in configs if c.get("name") == "image-config"}
    if tested != {v.config_digest}:
        problems.append(
            f"the test result is for image {', '.join(sorted(tested)) or 'none'}, not this image {v.config_digest}"
        )
    suites_cfg = next((c.get("annotations") or {} for c in configs if c.get("name") == "suites"), {})
    if suites_cfg.get("target") != v.target:
        problems.append(f"the test result is for target {suites_cfg.get('target')!r}, not {v.target!r}")
    judged = suites_cfg.get("judged")
    if isinstance(judged, dict) and judged.get("content_hash") != v.content_hash:
        problems.append(
            f"the suites judged content hash {judged.get('content_hash')!r}, the image's label says {v.content_hash!r}"
        )
    component = (sbom.get("metadata") or {}).get("component") or {}
    if component.get("version") != v.config_digest or component.get("name") != v.target:
        problems.append(
            f"the SBOM describes {component.get('name')!r} {component.get('version')!r}, not "
            f"{v.target!r} {v.config_digest}"
        )
    if result.get("result") not in ("PASSED", "WARNED"):
        problems.append(
            f"the suites did not pass (test result {result.get('result')!r}: "
            f"{'; '.join(result.get('failedTests') or []) or 'no failed test named'})"
        )
    passed = {
        line.split(":", 1)[0]
        for line in result.get("passedTests") or []
        if isinstance(line, str) and ": not applicable:" not in line
    }
    missing = [s for s in att.REQUIRED_SUITES if s not in passed]
    if missing and result.get("result") in ("PASSED", "WARNED"):
        problems.append(f"suite(s) {', '.join(missing)} did not pass (each must: {', '.join(att.REQUIRED_SUITES)})")
    if ref.tag:
        m = _CONTENT_TAG.match(ref.tag)
        if m and not v.content_hash.startswith(m[1]):
            problems.append(
                f"tag {ref.tag} now points to an image of content {v.content_hash[:12] or 'unknown'}: "
                "the tag was moved to another image"
            )
    if v.target and ref.repository.rsplit("/", 1)[-1] != v.target:
        problems.append(
            f"the repository {ref.repository} is not target {v.target!r}'s: the image was "
            "pushed or moved there from elsewhere"
        )
    return problems


def sbom_summary(sbom: dict) -> dict:
    """What `verify` shows of the CycloneDX SBOM: its format, how many components (by purl type) and its
    serial number."""
    components = [c for c in sbom.get("components") or [] if isinstance(c, dict)]
    kinds: dict[str, int] = {}
    for c in components:
        purl = str(c.get("purl") or "")
        kind = purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else "other"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "format": f"CycloneDX {sbom.get('specVersion', '?')}",
        "components": len(components),
        "by_type": kinds,
        "serial": sbom.get("serialNumber"),
    }


def provenance_summary(prov: dict) -> dict:
    """What `verify` shows of the SLSA provenance: target, source commit, rocmforge version, the sha256 of
    matrix, lock and Dockerfile, and how many resolved dependencies; None for a field it lacks."""
    build = prov.get("buildDefinition") or {}
    ext = build.get("externalParameters") or {}
    builder = (prov.get("runDetails") or {}).get("builder") or {}
    return {
        "target": ext.get("target"),
        "source_commit": (builder.get("version") or {}).get("commit"),
        "rocmforge": (builder.get("version") or {}).get("rocmforge"),
        "matrix_sha256": (ext.get("matrix") or {}).get("digest", {}).get("sha256"),
        "lock_sha256": (ext.get("lock") or {}).get("digest", {}).get("sha256"),
        "dockerfile_sha256": (ext.get("dockerfile") or {}).get("digest", {}).get("sha256"),
        "resolved_dependencies": len(build.get("resolvedDependencies") or []),
    }


def format_text(v: Verified) -> str:
    """What `verify` prints for a verified image: its digests and target, each suite's result, the SBOM and
    the provenance in short."""
    result = v.statements[att.TEST_RESULT]
    sb, pv = sbom_summary(v.statements[att.SBOM]), provenance_summary(v.statements[att.PROVENANCE])
    suites = next(
        (
            c.get("annotations") or {}
            for c in result.get("configuration") or []
            if isinstance(c, dict) and c.get("name") == "suites"
        ),
        {},
    )
    lines = [
        f"verified: {v.ref}",
        f"  digest {v.digest}",
        f"  image (config) {v.config_digest}",
        f"  target {v.target}, content {v.content_hash[:12]}; {v.signatures} signature(s)",
        f"suites: {result.get('result')} (host: {suites.get('host', '?')}; archs "
        f"{', '.join(suites.get('archs') or [])})",
    ]
    for status, key in (("passed", "passedTests"), ("warned", "warnedTests"), ("FAILED", "failedTests")):
        lines += [f"  {status:<7} {line}" for line in result.get(key) or []]
    lines.append(
        f"sbom: {sb['format']}, {sb['components']} components "
        f"({', '.join(f'{k} {n}' for k, n in sorted(sb['by_type'].items()))})"
    )
    lines.append(
        f"provenance: rocmforge {pv['rocmforge']}, source commit {pv['source_commit']}, "
        f"matrix.lock sha256 {pv['lock_sha256']}, {pv['resolved_dependencies']} resolved dependencies"
    )
    return "\n".join(lines)


def verify_entry(
    client: Engine, cosign: Cosign, repository: str, entry: imageindex.Entry, position: int, signer: Identity
) -> Verified:
    """One image of a rocmforge index, verified by its digest like any image, then held against what
    the (unsigned) index says of it: the archs a host picked it by must be the signed image's own,
    and only the first entry may be the main image."""
    found = verify(client, cosign, Reference(repository, None, entry.digest), signer)
    labelled = imageindex.archs_of(found.labels.get(imageindex.ARCHS, ""))
    problems = []
    if set(labelled) != set(entry.archs):
        problems.append(
            f"the index names it for {','.join(entry.archs)}, but the signed image is labelled "
            f"{imageindex.ARCHS}={','.join(labelled) or 'nothing'}"
        )
    internal = (found.statements[att.PROVENANCE].get("buildDefinition") or {}).get("internalParameters") or {}
    if "variant" in internal and bool(internal["variant"]) != (position > 0):
        problems.append(
            f"entry {position} of the index is attested as {'a variant' if internal['variant'] else 'the main image'}"
            f"{'' if position else ', but the first entry is the main image'}"
        )
    if problems:
        raise Refused(f"{repository}@{entry.digest}: " + "; ".join(problems))
    return found
