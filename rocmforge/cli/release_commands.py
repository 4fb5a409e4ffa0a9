"""Commands that publish and take back images: push (optionally signed and attested), verify, pull."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rocmforge.build import engine
from rocmforge.cli.invocation import Invocation
from rocmforge.release import cosign as cosigns, publish, trust
from rocmforge.shared.errors import UserError
from rocmforge.workflow.project import writable_dir


def push(inv: Invocation) -> int:
    project, target, registry = inv.project, inv.target_name(), inv.args.registry
    key = Path(inv.args.sign_key) if inv.args.sign_key else None
    project.target(target)
    writable_dir(project.record_dir, "publish records")
    project.buildable_target(target)
    if key is not None and not key.is_file():        # before the engine is asked anything
        raise UserError("no such key file", file=str(key), field="--sign-key")
    client = engine.connect()
    signer = None
    if key is not None:
        from rocmforge.release.signing import Inputs, Signer   # cyclonedx and the lock model: only when signing
        inputs = Inputs(inv.plan, project.lock(), project.matrix_path.read_bytes(),
                        project.lock_path.read_bytes() if project.lock_path.is_file() else b"",
                        project.revision(), project.state)
        signer = Signer(cosigns.find(client, inv.progress.line), key, inputs)
    started = time.monotonic()
    with inv.progress.status(f"pushing {target} to {registry}" + (" (signed)" if signer else "")):
        rec = publish.push(client, inv.plan, target, registry, state_dir=project.state,
                           record_dir=project.record_dir, matrix_path=project.matrix_path, signer=signer)
    print(json.dumps(rec, indent=2, sort_keys=True))
    inv.progress.line(f"publish record: {project.record_dir / (target + '.json')} "
                      f"({time.monotonic() - started:.1f} s)", markup=False)
    return 0


def verify(inv: Invocation) -> int:
    ref = trust.parse_ref(inv.args.ref)
    key = Path(inv.args.key)
    if not key.is_file():
        raise UserError("no such public key file", file=str(key), field="--key")
    client = engine.connect()
    cosign = cosigns.find(client, inv.progress.line)
    with inv.progress.status(f"verifying {ref}"):
        found = trust.verify(client, cosign, ref, key)
    print(json.dumps(found.to_json(), indent=2, sort_keys=True) if inv.args.json else trust.format_text(found))
    return 0


def pull(inv: Invocation) -> int:
    """`pull --target X [--key PUB]` (the checkout's publish record) or `pull REF --key PUB` (no
    checkout: everything comes from the signed statements)."""
    args = inv.args
    target, ref_text = inv.target_name(), getattr(args, "ref", None)
    key = Path(args.key) if getattr(args, "key", None) else None
    if bool(target) == bool(ref_text):
        raise UserError("give either --target TARGET (with its publish record) or REGISTRY/REPOSITORY:TAG|@DIGEST",
                        field="pull")
    if key is not None and not key.is_file():
        raise UserError("no such public key file", file=str(key), field="--key")
    if ref_text:
        if key is None:
            raise UserError("pulling by reference needs --key PUB: without a publish record the signature is "
                            "the only thing to check the image against", field="--key")
        return _pull_ref(inv, trust.parse_ref(ref_text), key)
    record_dir = inv.project.record_dir
    publish.read_record(record_dir / f"{target}.json", target)   # a missing record needs no engine
    client = engine.connect()
    check = None
    if key is not None:
        cosign = cosigns.find(client, inv.progress.line)
        check = lambda pinned: _check_target(client, cosign, pinned, key, target)   # noqa: E731
    with inv.progress.status(f"pulling {target}"):
        rec = publish.pull(client, target, record_dir=record_dir, check=check)
    print(json.dumps(rec, indent=2, sort_keys=True))
    return 0


def _check_target(client, cosign, pinned: str, key: Path, target: str) -> None:
    found = trust.verify(client, cosign, trust.parse_ref(pinned), key)
    if found.target != target:
        raise trust.Refused(f"{pinned} is attested as target {found.target!r}, not {target!r}")


def _pull_ref(inv: Invocation, ref: trust.Reference, key: Path) -> int:
    client = engine.connect()
    cosign = cosigns.find(client, inv.progress.line)
    with inv.progress.status(f"verifying {ref}"):
        found = trust.verify(client, cosign, ref, key)
    with inv.progress.status(f"pulling {ref.repository}@{found.digest}"):
        local = publish.pull_verified(client, ref.repository, found.digest, target=found.target,
                                      content_hash=found.content_hash, stack=found.labels.get("io.rocmforge.stack", ""),
                                      config_digest=found.config_digest, tag=ref.tag)
    print(json.dumps({**found.to_json(), "local_tags": local}, indent=2, sort_keys=True))
    return 0
