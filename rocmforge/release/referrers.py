"""What cosign left in the registry beside an image, read directly: when cosign finds no statement of
a type, whether one is attached that was signed for another digest (moved there from another image).
cosign 3 passes silently over a bundle whose subject is another digest, and cosign 2 says only that
no subject matched, so rocmforge looks itself to name the other digest."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from rocmforge.host import registry as reg
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

_BUNDLE_TYPE = "dev.sigstore.bundle.predicateType"


def _doc(client: Engine, repository: str, reference: str, blob: bool = False) -> dict | None:
    try:
        _, raw = reg.get_document(client, repository, reference, blob=blob)
        doc = json.loads(raw)
    except (BuildError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def attested_elsewhere(client: Engine, repository: str, digest: str, predicate_type: str) -> str | None:
    """The digest a statement of predicate_type attached to digest was signed for, when it is not
    digest; None when there is no such statement (or it cannot be read)."""
    tag = f"sha256-{digest.split(':', 1)[1]}"
    # cosign 3: bundles listed under the referrers tag, each manifest naming its subject
    index = _doc(client, repository, tag) if reg.manifest_digest(client, repository, tag) else None
    for entry in (index or {}).get("manifests") or []:
        child = _doc(client, repository, str((entry or {}).get("digest")))
        if not child or (child.get("annotations") or {}).get(_BUNDLE_TYPE) != predicate_type:
            continue
        subject = (child.get("subject") or {}).get("digest")
        if isinstance(subject, str) and subject != digest:
            return subject
    # cosign 2: one manifest of DSSE envelopes under .att, the subject inside each statement
    if reg.manifest_digest(client, repository, f"{tag}.att") is None:
        return None
    att = _doc(client, repository, f"{tag}.att") or {}
    for layer in att.get("layers") or []:
        if (layer.get("annotations") or {}).get("predicateType") != predicate_type:
            continue
        envelope = _doc(client, repository, str(layer.get("digest")), blob=True) or {}
        try:
            statement = json.loads(base64.b64decode(envelope["payload"]))
            subjects = [f"sha256:{s['digest']['sha256']}" for s in statement["subject"]]
        except (KeyError, TypeError, ValueError):
            continue
        if subjects and digest not in subjects:
            return subjects[0]
    return None
