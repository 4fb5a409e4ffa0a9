"""Publish only images whose exact image ID passed its suites, and write the publish record (one
JSON file per target) that release.pulling holds the registry to when they are pulled back."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.host import registry as reg
from rocmforge.host.enginebase import EngineError
from rocmforge.release import cosign as cosigns
from rocmforge.release import imageindex
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import atomic_write
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import suites

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.release.signing import Signer
    from rocmforge.render.plan import BuildPlan, TargetPlan

LABEL_TARGET = "io.rocmforge.target"
LABEL_HASH = "io.rocmforge.content-hash"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


# -- push ---------------------------------------------------------------------------------------
def push(
    client: Engine,
    plan: BuildPlan,
    target_name: str,
    registry: str,
    *,
    state_dir: Path,
    record_dir: Path,
    matrix_path: Path,
    signer: Signer | None = None,
) -> dict:
    """Push the target's content-tag image under its content and readable tags; returns the record.
    A target with per-arch variants is pushed with each of them (each under its own content tag and
    arch-suffixed readable tag), and its readable tag becomes one image index of them all, the main
    image first. matrix_path: the matrix the plan was made from (matrix.lock beside it): every
    image's suite results must have been judged against exactly these files. With a signer, the key
    and every image's statements are checked before any layer is pushed, and each pushed digest is
    signed and attested before the record is written."""
    if target_name not in plan.targets:
        raise UserError(f"unknown target {target_name!r}; known: {', '.join(sorted(plan.targets))}", field="--target")
    where = reg.parse(registry)
    images = [_publishable(client, tp, Path(state_dir), Path(matrix_path)) for tp in plan.images_of(target_name)]
    signers: list[Signer | None] = [None] * len(images)
    if signer is not None:
        signer.check_key()
        signers = [dataclasses.replace(signer, files={}) for _ in images]
    try:
        for s, (tp, image_id, result) in zip(signers, images):
            if s is not None:
                s.prepare(tp.key, image_id, result)
        return _push_all(client, images, where, registry, Path(record_dir), signers)
    finally:
        for s in signers:
            if s is not None:
                s.close()  # its statements' folder, also when the push failed


def _publishable(
    client: Engine, tp: TargetPlan, state: Path, matrix_path: Path
) -> tuple[TargetPlan, str, suites.SuitesReport]:
    """The image of tp (a main image or a variant) with the suite results that allow its publication."""
    test_cmd = f"`{program.command('test --target ' + tp.name)}`"
    what = _what(tp)
    image_id = engine.image_id(client, tp.content_tag)
    if image_id is None:
        raise UserError(
            f"{what} is not built ({tp.content_tag} not found); run "
            f"`{program.command('build --target ' + tp.name)}`, then {test_cmd}",
            field="--target",
        )
    result = _require_passed(state, tp, image_id, test_cmd, matrix_path)
    # The pull side trusts these labels, so refuse an image that was tagged by hand with other content.
    labels = client.labels(tp.content_tag)
    if labels.get(LABEL_TARGET) != tp.name or labels.get(LABEL_HASH) != tp.content_hash:
        raise UserError(
            f"image {image_id} under {tp.content_tag} has labels {LABEL_TARGET}="
            f"{labels.get(LABEL_TARGET)!r}, {LABEL_HASH}={labels.get(LABEL_HASH)!r}, not {what}'s "
            f"{tp.name!r}, {tp.content_hash!r}; rebuild with `{program.command('build --target ' + tp.name)}`",
            field="--target",
        )
    return tp, image_id, result


def _push_all(
    client: Engine, images: list, where: reg.Registry, registry: str, record_dir: Path, signers: list
) -> dict:
    main = images[0][0]
    repository = where.repository(main.name)
    record_path = record_dir / f"{main.name}.json"
    index_tag = main.readable_tag.rsplit(":", 1)[1]
    entries = []
    for (tp, image_id, result), s in zip(images, signers):
        tags = [tp.content_tag.rsplit(":", 1)[1], tp.readable_tag.rsplit(":", 1)[1]]
        # With variants the main image's readable tag is the index's, pushed once they all are.
        pushed = tags[:1] if len(images) > 1 and tp is main else tags
        entry = _push_tags(client, tp, where, repository, pushed, image_id, result, record_path, s)
        entries.append({**entry, "tags": tags, "archs": list(tp.archs)})
    record = {**entries[0], "registry": registry.strip(), "repository": repository, "target": main.name}
    if len(entries) > 1:
        digest = imageindex.push(client, repository, index_tag, [(e["digest"], tuple(e["archs"])) for e in entries])
        record["index"] = {"digest": digest, "tag": index_tag}
        record["variants"] = entries[1:]
    if signers[0] is not None:
        # Last: the record names the tags as they now stand, so it is never ahead of the registry.
        record["release"] = signers[0].release(client, repository, record, http=reg.insecure(client, where.host))
    _write_json(record_path, record)
    return record


def refresh(client: Engine, target_name: str, *, record_dir: Path, signer: Signer) -> dict:
    """`push --refresh`: the release record signed again (next serial, new expiry) for exactly what
    the checkout's publish record names, without pushing an image. The registry's own record is
    never the source: re-signing it would endorse whatever someone wrote there."""
    from rocmforge.release import pulling  # pulling imports this module

    record_path = Path(record_dir) / f"{target_name}.json"
    record = pulling.read_record(record_path, target_name)
    if "signed" not in record:
        raise UserError(
            f"{record_path} records an unsigned push; push with --sign-key (or --keyless) first", field="--refresh"
        )
    signer.check_key()
    where = reg.parse(record["registry"])
    record["release"] = signer.release(client, record["repository"], record, http=reg.insecure(client, where.host))
    _write_json(record_path, record)
    return record


def _push_tags(
    client: Engine,
    tp: TargetPlan,
    where: reg.Registry,
    repository: str,
    tags: list[str],
    image_id: str,
    result: suites.SuitesReport,
    record_path: Path,
    signer: Signer | None,
) -> dict:
    digests: dict[str, str] = {}
    # The digest is known once the first tag is pushed: cosign signs and attests it while the other
    # tags follow (they add no layers), so signing costs less than its own time.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        signing = None
        try:
            for tag in tags:
                with temporary_tag(client, tp.content_tag, repository, tag):
                    digests[tag] = push_one(client, repository, tag)
                if signer is not None and signing is None:
                    signing = pool.submit(
                        signer.attach, repository, digests[tag], http=reg.insecure(client, where.host)
                    )
            signed = _signed(signing, repository, tags, record_path) if signing is not None else None
        except BaseException:
            # Ctrl-C (it reaches this thread only) or a failed tag push: stop cosign now rather than
            # wait for it in the pool's exit; the record stays unwritten, and a rerun signs again.
            if signer is not None:
                signer.cancel()
            raise
    if len(set(digests.values())) != 1:
        raise BuildError(f"registry {where.host} gave one image different digests per tag: {digests}")
    return {
        "content_hash": tp.content_hash,
        "digest": digests[tags[0]],
        "image_id": image_id,
        "suites": result.statuses(),
        **({"signed": signed} if signed else {}),
    }


def _signed(signing: concurrent.futures.Future, repository: str, tags: list[str], record_path: Path) -> dict:
    """The signer's summary, or one message saying what the registry now holds when signing failed
    (the registry went away, refused the signature): pushed but unsigned, so not published."""
    try:
        return signing.result()
    except cosigns.Cancelled:
        raise
    except BuildError as exc:
        state = "left as it was" if record_path.exists() else "not written"
        raise BuildError(
            f"{repository} ({', '.join(tags)}) was pushed, but signing and attesting it failed, so it "
            f"is not published: {record_path} {state}; the tags stand in the registry without a "
            "complete signature and statements, which verify and pull refuse. Run the push again once "
            f"the registry answers. {exc}"
        ) from None


def _what(tp: TargetPlan) -> str:
    return f"target {tp.name!r}" + (f" (its {','.join(tp.variant)} variant)" if tp.variant else "")


def _require_passed(
    state: Path, tp: TargetPlan, image_id: str, test_cmd: str, matrix_path: Path
) -> suites.SuitesReport:
    what = _what(tp)
    result = suites.recorded(state, image_id)
    if result is None:
        earlier = _other_tested(state, tp.content_tag, image_id)
        if earlier:
            raise UserError(
                f"{what}: {tp.content_tag} is now image {image_id}, which was never "
                f"tested; it was rebuilt after the tested image {earlier}. Run {test_cmd} first",
                field="--target",
            )
        raise UserError(
            f"{what}: image {image_id} ({tp.content_tag}) has no recorded suite "
            f"results in {state / 'results'}; run {test_cmd} first",
            field="--target",
        )
    if result.judged is None:
        raise UserError(
            f"{what}: the suite results of image {image_id} "
            f"({suites.results_path(state, image_id)}) do not say which target, content hash, matrix "
            f"and lock they were judged against (recorded by an older rocmforge), so they count as not "
            f"judged; run {test_cmd} again",
            field="--target",
        )
    differ = _judged_elsewhere(result.judged, tp, matrix_path)
    if differ:
        raise UserError(
            f"{what}: the suite results of image {image_id} were judged against "
            f"{'; '.join(differ)}; they say nothing about what would be published. Run {test_cmd} "
            "again",
            field="--target",
        )
    if not result.ok:
        failed = [n for n, status in result.statuses().items() if status == suites.SuiteStatus.FAILED]
        raise UserError(
            f"{what}: image {image_id} ({tp.content_tag}) failed its suites "
            f"({', '.join(failed) or 'see the recorded results'}); only images that passed are "
            f"published. Fix, rebuild and run {test_cmd} again",
            field="--target",
        )
    return result


def _judged_elsewhere(judged: suites.Judged, tp: TargetPlan, matrix_path: Path) -> list[str]:
    """What the verdict was reached against that differs from what push has now, each with both values."""
    now = suites.judged_against(matrix_path, tp.name, tp.content_hash)
    lock_path = matrix_path.with_suffix(".lock")

    def digest(value: str | None) -> str:
        return f"sha256 {value}" if value else "no file"

    out = []
    if judged.target != now.target:
        out.append(f"another target: {judged.target!r}, not {now.target!r}")
    if judged.content_hash != now.content_hash:
        out.append(
            f"another content hash: {judged.content_hash}, not {now.content_hash} (the rendered context changed since)"
        )
    if judged.matrix_sha256 != now.matrix_sha256:
        out.append(f"another matrix: {digest(judged.matrix_sha256)}, not {matrix_path}'s {digest(now.matrix_sha256)}")
    if judged.lock_sha256 != now.lock_sha256:
        out.append(f"another lock: {digest(judged.lock_sha256)}, not {lock_path}'s {digest(now.lock_sha256)}")
    return out


def _other_tested(state: Path, content_tag: str, image_id: str) -> str | None:
    """The most recently tested other image under this content tag: tells 'rebuilt since' from
    'never tested' (a variant's tag is its own, so its main image's results do not count)."""
    found = []
    for path in StateDir(state).results.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("image") == content_tag and data.get("image_id") != image_id:
            found.append((path.stat().st_mtime, data.get("image_id")))
    return max(found)[1] if found else None


@contextlib.contextmanager
def temporary_tag(client: Engine, source: str, repository: str, tag: str):
    """The engine pushes only by name, so the image (named by source) needs the registry's name for
    the push alone; whatever that name pointed to before is put back afterwards."""
    ref = f"{repository}:{tag}"
    previous = client.shown_id(ref)  # the engine's own ID: what it can tag again
    client.tag(source, ref)
    try:
        yield
    finally:
        if previous is None:
            client.untag(ref)  # the image keeps its rocmforge/ tags
        elif previous != client.shown_id(source):
            client.tag(previous, ref)


def push_one(client: Engine, repository: str, tag: str) -> str:
    """Push repository:tag; returns the manifest digest the registry serves it under. Raises BuildError when
    the push fails or gives no usable digest."""
    digest = None
    try:
        for chunk in client.push(repository, tag):
            if "error" in chunk:
                message = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise BuildError(f"push of {repository}:{tag} failed: {message.strip()}")
            digest = (chunk.get("aux") or {}).get("Digest") or digest
    except EngineError as exc:
        raise BuildError(f"push of {repository}:{tag} failed: {exc}") from None
    # Older engines leave the digest out of the stream; the registry's answer is the same fact.
    digest = digest or reg.manifest_digest(client, repository, tag)
    if not digest or not DIGEST_RE.match(digest):
        raise BuildError(f"push of {repository}:{tag} gave no usable manifest digest ({digest!r})")
    return digest


def _write_json(path: Path, data: dict) -> None:
    """Sorted keys: the record is compared and committed."""
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
