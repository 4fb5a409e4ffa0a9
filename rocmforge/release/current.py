"""`verify REF` and `pull REF --key`: the image (or every image of the index) verified as trust.py
does, then held against the repository's signed release record: the tag must serve the digest the
newest record names, with the role it names; a digest is current or superseded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.host import registry as reg
from rocmforge.release import attestations as att
from rocmforge.release import imageindex, releasestore
from rocmforge.release import releaserecord as rr
from rocmforge.release.trust import Refused, Verified, verify, verify_entry
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.release.cosign import Cosign, Identity
    from rocmforge.release.trust import Reference


@dataclass
class Checked:
    record: rr.Record
    status: str  # "current" or "superseded"
    index: str | None  # the index's digest, when the reference reached one
    entries: list[imageindex.Entry]  # the index's entries (empty for a single image)
    found: list[Verified]  # each image verified (one, or one per entry)

    def release(self) -> dict:
        r = self.record
        return {"serial": r.serial, "issued": r.issued, "expires": r.expires, "status": self.status}

    def describe(self) -> str:
        r = self.record
        return f"release record: serial {r.serial}, issued {r.issued}, expires {r.expires}; {self.status}"


def attested(found: Verified, archs: tuple[str, ...] | None = None) -> rr.Image:
    """The role and archs the signed provenance gives the image (its label's archs when it names none)."""
    internal = (found.statements[att.PROVENANCE].get("buildDefinition") or {}).get("internalParameters") or {}
    role = "variant" if internal.get("variant") else "main"
    named = internal.get("archs")
    if archs is None:
        archs = tuple(named) if isinstance(named, list) else imageindex.archs_of(found.labels.get(imageindex.ARCHS, ""))
    return rr.Image(found.digest, role, tuple(archs))


def check(client: Engine, cosign: Cosign, ref: Reference, signer: Identity, *, allow_superseded: bool) -> Checked:
    """Raises Refused naming the first thing that does not hold; every entry of an index is verified,
    whichever one the host then takes."""
    http = reg.insecure(client, ref.host)
    try:
        record = releasestore.current(client, cosign, ref.repository, signer, http=http)
    except Refused:
        raise
    except BuildError as exc:
        raise Refused(f"{ref}: {exc}") from None
    index = imageindex.read(client, ref.repository, ref.tag_or_digest)
    entries: list[imageindex.Entry] = []
    if index is None:
        found = [verify(client, cosign, ref, signer)]
        served, images = found[0].digest, [attested(found[0])]
    else:
        served, entries = index
        found = [verify_entry(client, cosign, ref.repository, e, i, signer) for i, e in enumerate(entries)]
        images = [attested(f, e.archs) for f, e in zip(found, entries)]
    try:
        status = rr.judge(record, ref.tag, served, images, index is not None)
    except BuildError as exc:
        raise Refused(f"{ref}: {exc}") from None
    if status == "superseded" and not allow_superseded:
        raise Refused(
            f"{ref} ({served}) is superseded: the release record of {ref.repository} (serial {record.serial}, "
            f"issued {record.issued}) names it under no tag; give --allow-superseded to take an older release"
        )
    return Checked(record, status, served if index else None, entries, found)
