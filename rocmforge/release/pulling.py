"""Pull a target's images back only when the registry still serves exactly what its publish record
(release.publish wrote it) says was published: the same digests, image IDs, labels and, for a
target pushed as one index, the same variants."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.host import registry as reg
from rocmforge.host.enginebase import EngineError
from rocmforge.release import imageindex
from rocmforge.release.publish import DIGEST_RE, LABEL_HASH, LABEL_TARGET
from rocmforge.resolve import bases
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.records import BadRecord, read_json

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # the registry's own rule for a tag
RECORD_KEYS = ("content_hash", "digest", "image_id", "registry", "repository", "suites", "tags", "target")

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
            f"`{program.command('push --target ' + target_name)} --registry ...` again",
            file=str(path),
            line=exc.line,
        ) from None
    except OSError as exc:
        raise UserError(f"unreadable publish record: {exc.strerror or exc}", file=str(path)) from None
    if record is None:
        raise UserError(
            f"no publish record for {target_name!r}; run "
            f"`{program.command('push --target ' + target_name)} --registry ...` first",
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
