"""Where the release record lives and how a client trusts it. The record is the annotation of an
OCI image index with no entries under the fixed tag `rocmforge-release` of the repository: plain
registries (no referrers API, no artifact support) store it, any client fetches it without a
checkout, and `cosign sign` signs its digest with the same key as the images, so `cosign verify`
checks it like any image. The highest serial a client has accepted, per repository and signer, is
kept in the user's cache ($XDG_CACHE_HOME/rocmforge/releases): a registry that later serves an
older record (its signature still genuine) is refused as rolled back."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host import registry as reg
from rocmforge.release import imageindex
from rocmforge.release import releaserecord as rr
from rocmforge.release.cosign import Cosign, CosignFailed, Identity
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

TAG = "rocmforge-release"
ANNOTATION = "io.rocmforge.release-record"
ARTIFACT_TYPE = "application/vnd.rocmforge.release-record.v1+json"
# What `cosign verify --output json` says a payload is: cosign 2's simple signing, cosign 3's
# signature bundle. cosign 3 also returns its attestation bundles ("…/attestation/v1"): those are
# statements about the image, not a signature of it, and never count as one.
SIGNATURE_TYPES = ("cosign container image signature", "https://sigstore.dev/cosign/sign/v1")


def manifest(record: rr.Record) -> bytes:
    doc = {
        "schemaVersion": 2,
        "mediaType": imageindex.OCI_INDEX,
        "artifactType": ARTIFACT_TYPE,
        "manifests": [],
        "annotations": {ANNOTATION: record.dumps()},
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def signatures(payloads: list, digest: str) -> int:
    """How many of cosign's verified payloads are signatures of digest (attestations never count)."""
    return sum(
        1
        for p in payloads
        if isinstance(p, dict)
        and (p.get("critical") or {}).get("type") in SIGNATURE_TYPES
        and ((p.get("critical") or {}).get("image") or {}).get("docker-manifest-digest") == digest
    )


def read_unverified(client: Engine, repository: str) -> tuple[str, rr.Record] | None:
    """The record the registry serves now, unchecked (push takes its serial to go past it); None
    when there is none or it cannot be read."""
    if reg.manifest_digest(client, repository, TAG) is None:
        return None
    try:
        digest, raw = reg.get_document(client, repository, TAG)
        return digest, rr.parse(_annotation(raw, repository), f"{repository}:{TAG}")
    except BuildError:
        return None


def _annotation(raw: bytes, repository: str) -> str:
    try:
        doc = json.loads(raw)
        text = doc["annotations"][ANNOTATION]
    except (ValueError, KeyError, TypeError):
        raise rr.BadRecord(
            f"{repository}:{TAG} is cut off or is not a release record (no {ANNOTATION} annotation)"
        ) from None
    if not isinstance(text, str):
        raise rr.BadRecord(f"{repository}:{TAG}: the {ANNOTATION} annotation is not a string")
    return text


def publish(
    client: Engine,
    cosign: Cosign,
    key: Path | None,
    repository: str,
    tags: dict[str, rr.Tagged],
    *,
    valid_for: int,
    http: bool,
    signer_id: str = "",
) -> rr.Record:
    """Writes and signs the next record of repository (its serial past the registry's and past the
    newest this host has seen), naming exactly tags."""
    previous = read_unverified(client, repository)
    seen = load_seen(repository, signer_id) if signer_id else None
    serial = max(previous[1].serial if previous else 0, seen["serial"] if seen else 0) + 1
    record = rr.make(repository, serial, tags, now=time.time(), valid_for=valid_for)
    digest = reg.put_manifest(client, repository, TAG, imageindex.OCI_INDEX, manifest(record))
    cosign.sign(key, f"{repository}@{digest}", http=http)
    if signer_id:
        remember(record, digest, signer_id)
    return record


def current(client: Engine, cosign: Cosign, repository: str, who: Identity, *, http: bool) -> rr.Record:
    """The record, trusted: signed by who, whole, not expired and not older than the newest seen.
    Raises BuildError (refused, exit 1) naming what failed."""
    if reg.manifest_digest(client, repository, TAG) is None:
        raise BuildError(
            f"{repository} has no release record ({repository}:{TAG}), so nothing says which image its tags "
            "should name today; `push --sign-key` publishes one"
        )
    digest, raw = reg.get_document(client, repository, TAG)
    try:
        payloads = cosign.verify(who, f"{repository}@{digest}", http=http)
    except CosignFailed as exc:
        raise BuildError(
            f"the release record {repository}:{TAG} ({digest}) is not signed by {who.describe()}: {exc}"
        ) from None
    if not signatures(payloads, digest):
        raise BuildError(f"the release record {repository}:{TAG} ({digest}) carries no signature of its digest")
    record = rr.parse(_annotation(raw, repository), f"{repository}:{TAG} ({digest})")
    if record.repository != repository:
        raise BuildError(f"the release record {repository}:{TAG} is {record.repository}'s, not this repository's")
    signer_id = identity_of(who)
    seen = load_seen(repository, signer_id)
    rr.fresh(record, time.time(), seen)
    if seen and record.serial == seen["serial"] and seen.get("record") not in (None, digest):
        raise BuildError(
            f"the release record {repository}:{TAG} is serial {record.serial} but not the record {seen['record']} "
            f"seen under that serial on {seen['seen']}: two records carry one serial"
        )
    remember(record, digest, signer_id)
    return record


def identity_of(who: Identity) -> str:
    """Whom the serials seen are kept for: the public key's bytes, or the keyless identity."""
    if who.key is not None:
        try:
            return key_id(Path(who.key).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return f"key:{who.key}"
    return f"keyless:{who.certificate_identity} {who.oidc_issuer}"


def key_id(public_key_pem: str) -> str:
    return "key:" + hashlib.sha256(public_key_pem.strip().encode()).hexdigest()


def _seen_path(repository: str, signer_id: str) -> Path:
    name = hashlib.sha256(f"{repository}\n{signer_id}".encode()).hexdigest()[:32]
    return user_cache("releases") / f"{name}.json"


def load_seen(repository: str, signer_id: str) -> dict | None:
    try:
        data = json.loads(_seen_path(repository, signer_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("serial"), int):
        return None
    return data


def remember(record: rr.Record, digest: str, signer_id: str) -> None:
    """Keeps the record as the newest seen unless a newer one already is (never lowers the serial)."""
    seen = load_seen(record.repository, signer_id)
    if seen and seen["serial"] >= record.serial:
        return
    path = _seen_path(record.repository, signer_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "repository": record.repository,
        "signer": signer_id,
        "serial": record.serial,
        "issued": record.issued,
        "record": digest,
        "seen": rr.iso(time.time()),
    }
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
