"""Commands that publish and take back images: push (optionally signed and attested, with a key or
keyless), verify, pull."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from rocmforge.assemble import engine
from rocmforge.cli import host_gpus, results
from rocmforge.cli.invocation import Invocation
from rocmforge.define.matrix import variant_suffix
from rocmforge.doctor import pick
from rocmforge.host import registry as registries
from rocmforge.host.container import host_gpu_access
from rocmforge.host.engines import Engine
from rocmforge.release import cosign as cosigns
from rocmforge.release import current, imageindex, publish, pulling, releaserecord, trust
from rocmforge.shared.errors import UserError
from rocmforge.workflow.project import writable_dir


def push(inv: Invocation) -> int:
    """`push`: the target's images pushed, its publish record written (signed with --sign-key or --keyless)."""
    project, target, registry = inv.project, inv.required_target(), inv.args.registry
    registries.parse(registry)  # a malformed --registry is the user's to fix, whether or not the engine runs
    key = Path(inv.args.sign_key) if inv.args.sign_key else None
    keyless = bool(getattr(inv.args, "keyless", False))
    if key is not None and keyless:
        raise UserError("give either --sign-key FILE or --keyless, not both", field="--keyless")
    refresh = bool(getattr(inv.args, "refresh", False))
    valid_text = getattr(inv.args, "valid_for", None)
    valid_for = releaserecord.parse_duration(valid_text) if valid_text is not None else None
    if (refresh or valid_for is not None) and key is None and not keyless:
        raise UserError(
            "--valid-for and --refresh are about the signed release record: give --sign-key FILE or --keyless",
            field="--refresh" if refresh else "--valid-for",
        )
    project.target(target)
    writable_dir(project.record_dir, "publish records")
    project.buildable_target(target)
    if key is not None and not key.is_file():  # before the engine is asked anything
        raise UserError("no such key file", file=str(key), field="--sign-key")
    if keyless:
        cosigns.require_github_oidc()
    client = engine.connect()
    signer = None
    if key is not None or keyless:
        from rocmforge.release.signing import Inputs, Signer  # cyclonedx and the lock model: only when signing

        inputs = Inputs(
            inv.plan,
            project.lock(),
            project.matrix_path.read_bytes(),
            project.lock_path.read_bytes() if project.lock_path.is_file() else b"",
            project.revision(),
            project.state,
        )
        signer = Signer(cosigns.find(client, inv.progress.line), key, inputs)
        if valid_for is not None:
            signer.valid_for = valid_for
    started = time.monotonic()
    if refresh:
        if signer is None:
            raise UserError(
                "--refresh signs the release record again: give --sign-key FILE or --keyless", field="--refresh"
            )
        with inv.progress.status(f"signing the release record of {target} again"):
            rec = publish.refresh(client, target, record_dir=project.record_dir, signer=signer)
        return _pushed(inv, rec)
    how = " (signed keyless)" if keyless else " (signed)" if signer else ""
    with inv.progress.status(f"pushing {target} to {registry}{how}"):
        rec = publish.push(
            client,
            inv.plan,
            target,
            registry,
            state_dir=project.state,
            record_dir=project.record_dir,
            matrix_path=project.matrix_path,
            signer=signer,
        )
    inv.progress.line(
        f"publish record: {project.record_dir / (target + '.json')} ({time.monotonic() - started:.1f} s)", markup=False
    )
    return _pushed(inv, rec)


def _pushed(inv: Invocation, rec: dict) -> int:
    """What push prints: the publish record as it always has; under --json, inside the result
    object every acting command prints (cli/results.py)."""
    if getattr(inv.args, "json", False):
        return results.emit("push", 0, pushed=rec)
    print(json.dumps(rec, indent=2, sort_keys=True))
    return 0


def signer_of(args: argparse.Namespace) -> cosigns.Identity | None:
    """--key PUB, or keyless --certificate-identity with --certificate-oidc-issuer: one or the other,
    each checked before the engine or cosign runs. None when neither is given."""
    key = getattr(args, "key", None)
    identity = getattr(args, "certificate_identity", None)
    issuer = getattr(args, "certificate_oidc_issuer", None)
    if key is not None and (identity is not None or issuer is not None):
        raise UserError(
            "give either --key PUB or --certificate-identity with --certificate-oidc-issuer (keyless), not both",
            field="--key",
        )
    if identity is not None or issuer is not None:
        if identity is None:
            raise UserError(
                "--certificate-oidc-issuer needs --certificate-identity too: the signer's identity "
                "in its certificate (e.g. https://github.com/ORG/REPO/.github/workflows/FILE@refs/"
                "heads/main)",
                field="--certificate-identity",
            )
        if issuer is None:
            raise UserError(
                "--certificate-identity needs --certificate-oidc-issuer too: who vouched for that "
                f"identity (GitHub Actions: {cosigns.GITHUB_ISSUER})",
                field="--certificate-oidc-issuer",
            )
        return cosigns.keyless_identity(identity, issuer)
    if key is None:
        return None
    if not Path(key).is_file():
        raise UserError("no such public key file", file=str(key), field="--key")
    return cosigns.Identity(key=Path(key))


NEEDS_SIGNER = "--key PUB, or --certificate-identity ID with --certificate-oidc-issuer URL (keyless)"


def verify(inv: Invocation) -> int:
    """One image, or every image of a rocmforge index (each verified, each against what the index
    says of it), held against the repository's signed release record."""
    ref = trust.parse_ref(inv.args.ref)
    signer = signer_of(inv.args)
    if signer is None:
        raise UserError(f"verify needs the signer: {NEEDS_SIGNER}", field="--key")
    client = engine.connect()
    cosign = cosigns.find(client, inv.progress.line)
    with inv.progress.status(f"verifying {ref}"):
        checked = current.check(client, cosign, ref, signer, allow_superseded=inv.args.allow_superseded)
    if checked.index is None:
        found = checked.found[0]
        if inv.args.json:
            return results.emit("verify", 0, **found.to_json(), release=checked.release())
        else:
            print(trust.format_text(found) + "\n" + checked.describe())
        return 0
    entries, every = checked.entries, checked.found
    if inv.args.json:
        images = [
            {**f.to_json(), "archs": list(e.archs), "variant": i > 0} for i, (e, f) in enumerate(zip(entries, every))
        ]
        return results.emit("verify", 0, ref=str(ref), index=checked.index, images=images, release=checked.release())
    else:
        print(f"index {ref} ({checked.index}): {len(entries)} images, each verified; {checked.describe()}")
        for i, (e, f) in enumerate(zip(entries, every)):
            print(f"\n[{i}] {'variant' if i else 'main image'} for {','.join(e.archs)}")
            print(trust.format_text(f))
    return 0


def pull(inv: Invocation) -> int:
    """`pull --target X [--key PUB]` (the checkout's publish record) or `pull REF --key PUB` (no
    checkout: everything comes from the signed statements); keyless identities in place of --key.
    A target published as an index gives this host the smallest of its images that covers the
    GPUs the job will use (--rocminfo, --kfd-topology or --host-root: another host's; --arch: that
    arch)."""
    args = inv.args
    target, ref_text = inv.target_name(), getattr(args, "ref", None)
    if bool(target) == bool(ref_text):
        raise UserError(
            "give either --target TARGET (with its publish record) or REGISTRY/REPOSITORY:TAG|@DIGEST", field="pull"
        )
    signer = signer_of(args)
    host_gpus.check_arch(inv)
    root = host_gpus.host_root(inv)
    if not target:
        if signer is None:
            raise UserError(
                f"pulling by reference needs {NEEDS_SIGNER}: without a publish record the signature "
                "is the only thing to check the image against",
                field="--key",
            )
        return _pull_ref(inv, trust.parse_ref(str(ref_text)), signer, root)
    record_dir = inv.project.record_dir
    pulling.read_record(record_dir / f"{target}.json", target)  # a missing record needs no engine
    client = engine.connect()
    check = None
    if signer is not None:
        cosign = cosigns.find(client, inv.progress.line)
        check = lambda pinned: _check_target(client, cosign, pinned, signer, target)  # noqa: E731
    picker = _picker(inv, client, root, target, lambda e: f"{target}@{e.digest[:19]}")
    with inv.progress.status(f"pulling {target}"):
        rec = pulling.pull(client, target, record_dir=record_dir, check=check, pick=picker)
    return _pulled(inv, rec)


def _pulled(inv: Invocation, shown: dict) -> int:
    """What pull prints: the record (or the verified statements) as it always has; under --json,
    inside the result object every acting command prints (cli/results.py)."""
    if getattr(inv.args, "json", False):
        return results.emit("pull", 0, pulled=shown)
    print(json.dumps(shown, indent=2, sort_keys=True))
    return 0


def _picker(
    inv: Invocation, client: Engine, root: str | None, label: str, name_of: Callable[[imageindex.Entry], str]
) -> pulling.Pick:
    """Which entry of an index this host takes: the host's GPUs are read only when there is a choice."""

    def pick_entry(entries: list[imageindex.Entry]) -> tuple[int, str]:
        job = host_gpus.read(inv, client, None, kfd_present=host_gpu_access().present, root=root)
        candidates = [pick.Candidate(e.archs, name_of(e), e.size, variant=i > 0) for i, e in enumerate(entries)]
        choice = host_gpus.chooser(job, inv.args.arch, label)(candidates)
        chosen = candidates.index(choice.image)
        inv.note(f"image: {choice.image.describe()}: {choice.reason}")
        return chosen, choice.reason

    return pick_entry


def _check_target(client: Engine, cosign: cosigns.Cosign, pinned: str, signer: cosigns.Identity, target: str) -> None:
    found = trust.verify(client, cosign, trust.parse_ref(pinned), signer)
    if found.target != target:
        raise trust.Refused(f"{pinned} is attested as target {found.target!r}, not {target!r}")


def _pull_ref(inv: Invocation, ref: trust.Reference, signer: cosigns.Identity, root: str | None) -> int:
    client = engine.connect()
    cosign = cosigns.find(client, inv.progress.line)
    picked = None
    with inv.progress.status(f"verifying {ref}"):
        checked = current.check(client, cosign, ref, signer, allow_superseded=inv.args.allow_superseded)
        if checked.index is None:
            found, suffix = checked.found[0], ""
        else:
            entries = checked.entries
            chosen, why = _picker(inv, client, root, str(ref), lambda e: f"{ref.repository}@{e.digest[:19]}")(entries)
            found = checked.found[chosen]
            suffix = variant_suffix(entries[chosen].archs) if chosen else ""
            picked = {
                "archs": list(entries[chosen].archs),
                "digest": entries[chosen].digest,
                "index": checked.index,
                "variant": chosen > 0,
                "why": why,
            }
    stack = found.labels.get("io.rocmforge.stack", "")
    with inv.progress.status(f"pulling {ref.repository}@{found.digest}"):
        local = pulling.pull_verified(
            client,
            ref.repository,
            found.digest,
            target=found.target,
            content_hash=found.content_hash,
            stack=stack + suffix if stack else "",
            config_digest=found.config_digest,
            tag=ref.tag,
        )
    return _pulled(
        inv,
        {
            **found.to_json(),
            "local_tags": local,
            "release": checked.release(),
            **({"picked": picked} if picked else {}),
        },
    )
