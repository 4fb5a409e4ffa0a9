"""Publish only images whose exact image ID passed its suites, and pull them back only when the
registry still serves exactly what was published. The publish record (one JSON file per target)
is the link between the two."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.host import registry as reg
from rocmforge.host.enginebase import EngineError
from rocmforge.release import cosign as cosigns
from rocmforge.release import imageindex
from rocmforge.resolve import bases
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import atomic_write
from rocmforge.shared.records import BadRecord, read_json
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import suites

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.release.signing import Signer
    from rocmforge.render.plan import BuildPlan, TargetPlan

LABEL_TARGET = "io.rocmforge.target"
LABEL_HASH = "io.rocmforge.content-hash"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # the registry's own rule for a tag
RECORD_KEYS = ("content_hash", "digest", "image_id", "registry", "repository", "suites", "tags", "target")


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
    test_cmd = f"`python build.py test --target {tp.name}`"
    what = _what(tp)
    image_id = engine.image_id(client, tp.content_tag)
    if image_id is None:
        raise UserError(
            f"{what} is not built ({tp.content_tag} not found); run "
            f"`python build.py build --target {tp.name}`, then {test_cmd}",
            field="--target",
        )
    result = _require_passed(state, tp, image_id, test_cmd, matrix_path)
    # The pull side trusts these labels, so refuse an image that was tagged by hand with other content.
    labels = client.labels(tp.content_tag)
    if labels.get(LABEL_TARGET) != tp.name or labels.get(LABEL_HASH) != tp.content_hash:
        raise UserError(
            f"image {image_id} under {tp.content_tag} has labels {LABEL_TARGET}="
            f"{labels.get(LABEL_TARGET)!r}, {LABEL_HASH}={labels.get(LABEL_HASH)!r}, not {what}'s "
            f"{tp.name!r}, {tp.content_hash!r}; rebuild with `python build.py build --target {tp.name}`",
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


# -- pull ---------------------------------------------------------------------------------------
Pick = Callable[[list[imageindex.Entry]], tuple[int, str]]


def pull(
    client: Engine,
    target_name: str,
    *,
    record_dir: Path,
    check: Callable[[str], None] | None = None,
    pick: Pick | None = None,
) -> dict:
    """Pull the published image by digest, check it, then tag it rocmforge/<target>:<tag> for each
    of its recorded tags. A target published as an index: pick(entries, main image first) says
    which of its images this host takes and why (without pick, the main image). Returns the record
    plus 'local_tags' and, for an index, 'picked'. check(repository@digest) runs before the pull
    (signature and statements): it raises to refuse."""
    path = Path(record_dir) / f"{target_name}.json"
    record = read_record(path, target_name)
    repository = record["repository"]
    images = [record] + list(record.get("variants") or [])
    index = record.get("index")
    # A moved tag means someone else published under our name: refuse before touching the engine.
    for image in images:
        for tag in image["tags"]:
            want = index["digest"] if index and tag == index["tag"] else image["digest"]
            now = reg.manifest_digest(client, repository, tag)
            if now != want:
                raise UserError(
                    f"registry tag {repository}:{tag} now points to {now or 'nothing (it was deleted)'}, "
                    f"but {path} published {want} under it: it was overwritten or deleted behind "
                    "rocmforge's back. Nothing was pulled or tagged",
                    field="--target",
                )
    chosen, picked = 0, None
    if index:
        entries = _served_index(client, repository, index["digest"], images, path)
        if pick is not None:
            chosen, why = pick(entries)
            picked = {
                "archs": list(entries[chosen].archs),
                "digest": entries[chosen].digest,
                "image_id": images[chosen]["image_id"],
                "variant": chosen > 0,
                "why": why,
            }
    image = images[chosen]
    digest = image["digest"]
    ref = f"{repository}@{digest}"
    if check is not None:
        check(ref)
    before = client.image_ids()
    had_ref = engine.image_id(client, ref) is not None
    pull_one(client, repository, digest)
    pulled = client.inspect(ref)
    labels = (pulled.get("Config") or {}).get("Labels") or {}
    problems = []
    pulled_id = engine.image_id(client, ref)
    if pulled_id != image["image_id"]:
        problems.append(f"image ID {pulled_id}, recorded {image['image_id']}")
    for label, want in ((LABEL_TARGET, record["target"]), (LABEL_HASH, image["content_hash"])):
        if labels.get(label) != want:
            problems.append(f"label {label}={labels.get(label)!r}, recorded {want!r}")
    if problems:
        leftover = "" if had_ref else undo_pull(client, ref, existed=pulled["Id"] in before)
        raise UserError(
            f"{ref} does not match {path}: {'; '.join(problems)}. Nothing was tagged{leftover}", field="--target"
        )
    local = []
    for tag in image["tags"]:
        client.tag(pulled["Id"], f"{bases.IMAGE_NAMESPACE}/{target_name}:{tag}")
        local.append(f"{bases.IMAGE_NAMESPACE}/{target_name}:{tag}")
    return {**record, "local_tags": local, **({"picked": picked} if picked else {})}


def _served_index(
    client: Engine, repository: str, digest: str, images: list[dict], path: Path
) -> list[imageindex.Entry]:
    """The index the registry serves, refused unless it lists exactly the recorded images."""
    served = imageindex.read(client, repository, digest)
    listed = [(e.digest, e.archs) for e in served[1]] if served else []
    recorded = [(i["digest"], tuple(i.get("archs") or ())) for i in images]
    if listed != recorded:
        raise UserError(
            f"the index {repository}@{digest} lists {listed or 'no images'}, but {path} published "
            f"{recorded}. Nothing was pulled or tagged",
            field="--target",
        )
    return served[1] if served else []


def pull_verified(
    client: Engine,
    repository: str,
    digest: str,
    *,
    target: str,
    content_hash: str,
    stack: str,
    config_digest: str,
    tag: str | None,
) -> list[str]:
    """Pull what `verify` accepted, by its digest, and tag it only when the engine holds exactly the
    attested image: as the reference named it (when by tag) and as rocmforge/<target>'s content and
    stack tags, so `run --target` finds it. Returns the tags made."""
    ref = f"{repository}@{digest}"
    before = client.image_ids()
    had_ref = engine.image_id(client, ref) is not None
    pull_one(client, repository, digest)
    shown = client.shown_id(ref)
    got = engine.image_id(client, ref)
    if got != config_digest:
        leftover = "" if had_ref else undo_pull(client, ref, existed=shown in before)
        raise BuildError(
            f"{ref}: the engine holds image {got} after the pull, but the signed statements are "
            f"for {config_digest}. Nothing was tagged{leftover}"
        )
    local = []
    wanted = [(f"{bases.IMAGE_NAMESPACE}/{target}", f"content-{content_hash[:12]}")]
    if stack:
        wanted.append((f"{bases.IMAGE_NAMESPACE}/{target}", stack))
    if tag:
        wanted.append((repository, tag))
    for repo, t in wanted:
        client.tag(shown or ref, f"{repo}:{t}")
        local.append(f"{repo}:{t}")
    return local


def read_record(path: Path, target_name: str) -> dict:
    """The publish record `pull` trusts: refused (exit 2, naming file, line or field) unless it is
    exactly what `push` writes."""
    try:
        record = read_json(path)
    except BadRecord as exc:
        raise UserError(
            f"not a usable publish record: {exc.message}; restore it from version control or run "
            f"`python build.py push --target {target_name} --registry ...` again",
            file=str(path),
            line=exc.line,
        ) from None
    except OSError as exc:
        raise UserError(f"unreadable publish record: {exc.strerror or exc}", file=str(path)) from None
    if record is None:
        raise UserError(
            f"no publish record for {target_name!r}; run `python build.py push --target "
            f"{target_name} --registry ...` first",
            file=str(path),
        )
    if not isinstance(record, dict):
        raise UserError(f"not a publish record: a JSON {type(record).__name__}, not an object", file=str(path))
    for key in RECORD_KEYS:
        if key not in record:
            raise UserError("missing from the publish record", file=str(path), field=key)
    for key in ("registry", "repository", "target"):
        if not isinstance(record[key], str) or not record[key].strip():
            raise UserError(f"{record[key]!r} is not a non-empty string", file=str(path), field=key)
    if record["target"] != target_name:
        raise UserError(
            f"the record is for target {record['target']!r}, not {target_name!r}", file=str(path), field="target"
        )
    _check_image(record, path, "")
    index, variants = record.get("index"), record.get("variants")
    if (index is None) != (variants is None):
        raise UserError(
            "'index' and 'variants' come together (a target published with its per-arch variants)",
            file=str(path),
            field="index" if index is None else "variants",
        )
    if index is not None:
        if (
            not isinstance(index, dict)
            or not isinstance(index.get("digest"), str)
            or not DIGEST_RE.match(index["digest"])
            or index.get("tag") not in record["tags"]
        ):
            raise UserError(
                "an object with the index's sha256 'digest' and its 'tag' (one of the record's tags) is expected",
                file=str(path),
                field="index",
            )
        if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
            raise UserError("a non-empty list of the variants' records is expected", file=str(path), field="variants")
        for i, v in enumerate(variants):
            _check_image(v, path, f"variants[{i}].")
            if (
                not isinstance(v.get("archs"), list)
                or not v["archs"]
                or not all(isinstance(a, str) for a in v["archs"])
            ):
                raise UserError(
                    "a non-empty list of gfx names is expected", file=str(path), field=f"variants[{i}].archs"
                )
    return record


def _check_image(image: dict, path: Path, where: str) -> None:
    """One published image's fields: the record's own, or a variant's under variants[i]."""
    for key in ("content_hash", "digest", "image_id", "suites", "tags"):
        if key not in image:
            raise UserError("missing from the publish record", file=str(path), field=where + key)
    if not isinstance(image["content_hash"], str) or not image["content_hash"].strip():
        raise UserError(
            f"{image['content_hash']!r} is not a non-empty string", file=str(path), field=where + "content_hash"
        )
    for key in ("digest", "image_id"):
        if not isinstance(image[key], str) or not DIGEST_RE.match(image[key]):
            raise UserError(f"{image[key]!r} is not a sha256 digest", file=str(path), field=where + key)
    if (
        not isinstance(image["tags"], list)
        or not image["tags"]
        or not all(isinstance(t, str) and _TAG_RE.match(t) for t in image["tags"])
    ):
        raise UserError("a non-empty list of image tags is expected", file=str(path), field=where + "tags")
    if not isinstance(image["suites"], dict):
        raise UserError("a mapping of suite names to their status is expected", file=str(path), field=where + "suites")


def pull_one(client: Engine, repository: str, digest: str) -> None:
    """Pull repository@digest into the engine; raises BuildError when the engine or the registry refuses."""
    try:
        for chunk in client.pull(repository, digest):
            if "error" in chunk:
                message = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise BuildError(f"pull of {repository}@{digest} failed: {message.strip()}")
    except EngineError as exc:
        raise BuildError(f"pull of {repository}@{digest} failed: {exc}") from None


def undo_pull(client: Engine, ref: str, *, existed: bool) -> str:
    """Drop what the refused pull added. An image that was here before loses only the new digest
    reference, and only when other references keep it alive."""
    pulled = client.inspect(ref)
    others = [r for r in (pulled.get("RepoTags") or []) + (pulled.get("RepoDigests") or []) if r != ref]
    if existed and not others:
        return f" ({ref} stays: removing it would delete the image {pulled['Id']}, which was here before)"
    try:
        client.remove_image(ref)
    except EngineError as exc:
        return f" (could not remove {ref}: {exc})"
    return ""
