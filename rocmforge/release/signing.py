"""`push --sign-key` / `--keyless`: everything that can refuse is checked before the first layer
leaves (the key opens with COSIGN_PASSWORD, or GitHub's OIDC token is at hand; the SBOM is this
image's, the suites of this image are recorded), the three statements are written then; after the
push the manifest digest is signed and they are attached to it."""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import rocmforge
from rocmforge.release import attestations as att
from rocmforge.release import cosign as cosigns
from rocmforge.release import releaserecord, releasestore
from rocmforge.release.cosign import Cosign
from rocmforge.shared import program
from rocmforge.shared.errors import UserError
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import manifest as manifests

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan
    from rocmforge.resolve.lockmodel import Lock
    from rocmforge.verify.suites import SuitesReport


@dataclass(frozen=True)
class Inputs:
    """What the provenance names, from the checkout that pushes."""

    plan: BuildPlan
    lock: Lock
    matrix_bytes: bytes
    lock_bytes: bytes
    commit: str
    state: Path


@dataclass
class Signer:
    cosign: Cosign
    key: Path | None  # None: keyless (Fulcio certificate for GitHub's OIDC identity, Rekor entry)
    inputs: Inputs
    public_key: str = ""
    files: dict[str, Path] = field(default_factory=dict)  # predicate type -> its file
    valid_for: int = releaserecord.parse_duration(releaserecord.DEFAULT_VALID_FOR)  # the release record's, in s
    _tmp: tempfile.TemporaryDirectory | None = None

    def check_key(self) -> None:
        """Refuses (exit 2) a missing file, a file that is no cosign key or a wrong password; keyless,
        a job without GitHub's OIDC token."""
        if self.key is None:
            cosigns.require_github_oidc()
            return
        if not self.key.is_file():
            raise UserError("no such key file", file=str(self.key), field="--sign-key")
        self.public_key = self.cosign.public_key(self.key)

    def prepare(self, key: str, image_id: str, report: SuitesReport) -> None:
        """Writes the three predicates of this image (a target's main image by its name, a variant by
        its key) into a private folder, refusing what they would misstate: an SBOM of another image,
        or none."""
        inputs, plan = self.inputs, self.inputs.plan
        self._tmp = tempfile.TemporaryDirectory(prefix="rocmforge-attest-")
        folder = Path(self._tmp.name)
        self.files = {
            att.SBOM: folder / "sbom.cdx.json",
            att.PROVENANCE: folder / "provenance.json",
            att.TEST_RESULT: folder / "test-result.json",
        }
        self.files[att.SBOM].write_bytes(_sbom_of(inputs.state, key, image_id, plan.by_key(key).name))
        prov = att.provenance(
            plan,
            inputs.lock,
            key,
            matrix_bytes=inputs.matrix_bytes,
            lock_bytes=inputs.lock_bytes,
            version=rocmforge.__version__,
            commit=inputs.commit,
            repro=_repro_record(inputs.state, plan.by_key(key).name, image_id),
        )
        tp = plan.by_key(key)
        result = att.test_result(
            report,
            archs=list(tp.archs),
            host=att.host_kind(report, report.host),
            version=rocmforge.__version__,
            config_digest=image_id,
        )
        for uri, data in ((att.PROVENANCE, prov), (att.TEST_RESULT, result)):
            self.files[uri].write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    def attach(self, repository: str, digest: str, *, http: bool) -> dict:
        """Signs the pushed manifest and attaches each statement to it; returns what the publish
        record keeps of it."""
        ref = f"{repository}@{digest}"
        try:
            self.cosign.sign(self.key, ref, http=http)
            for uri, path in self.files.items():
                self.cosign.attest(self.key, ref, path, att.COSIGN_TYPES[uri], http=http)
            sizes = {uri: path.stat().st_size for uri, path in self.files.items()}
        finally:
            self.close()
        signer = (
            {"keyless": {"oidc_issuer": cosigns.GITHUB_ISSUER}}
            if self.key is None
            else {"public_key_sha256": hashlib.sha256(self.public_key.encode()).hexdigest()}
        )
        return {"cosign": self.cosign.version, **signer, "attestations": sorted(sizes), "predicate_bytes": sizes}

    def release(self, client: Engine, repository: str, published: dict, *, http: bool) -> dict:
        """Signs the repository's next release record, naming what the publish record says each tag
        serves; returns what the publish record keeps of it."""
        signer_id = releasestore.key_id(self.public_key) if self.key is not None else ""
        rec = releasestore.publish(
            client,
            self.cosign,
            self.key,
            repository,
            releaserecord.tags_of(published),
            valid_for=self.valid_for,
            http=http,
            signer_id=signer_id,
        )
        return {"tag": releasestore.TAG, "serial": rec.serial, "issued": rec.issued, "expires": rec.expires}

    def cancel(self) -> None:
        """Stops a cosign that `attach` runs in another thread (Ctrl-C, a failed tag push)."""
        self.cosign.cancel()

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _sbom_of(state: Path, key: str, image_id: str, target: str) -> bytes:
    fix = (
        f"run `{program.command('manifest --target ' + target)}`"
        if key == target
        else f"run `{program.command('build --target ' + target)}` (it writes each variant's)"
    )
    path, sbom = manifests.checked_artifacts(state, key)
    if path is None or sbom is None:
        raise UserError(f"{key!r} has no SBOM in {state / 'artifacts' / key}; {fix}", field="--sign-key")
    recorded = json.loads(path.read_text(encoding="utf-8")).get("image_id")
    if recorded != image_id:
        raise UserError(
            f"the SBOM in {sbom.parent} describes image {recorded}, not the image {image_id} being pushed; {fix}",
            field="--sign-key",
        )
    return sbom.read_bytes()


def _repro_record(state: Path, target: str, image_id: str) -> dict | None:
    """The last verify-repro of the target (or of the variant among its `variants`), when it built
    this very image (a byproduct, never required: a record of another image, or an unreadable one,
    is left out)."""
    try:
        data = json.loads(StateDir(state).check(f"repro-{target}").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    reports = [data] + [v for v in data.get("variants") or [] if isinstance(v, dict)]
    return next((r for r in reports if image_id in (r.get("image_ids") or [])), None)
