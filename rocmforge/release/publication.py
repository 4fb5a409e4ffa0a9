"""What a target's publish record (published/<target>.json) says, for `report` and `list --json`:
where it was published, and whether `push --sign-key` signed and attested it.

Only the record is read: nothing here asks the registry (that is `verify` and `pull --key`), so
"signed" means what push recorded when it signed, not that the registry still serves it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from rocmforge.release import attestations as att
from rocmforge.release.publish import DIGEST_RE
from rocmforge.shared import program
from rocmforge.shared.records import BadRecord, read_json, warn_ignored

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# How the page and the JSON name each statement; an unknown predicate type is shown as its URI.
STATEMENT_NAMES = {att.SBOM: "SBOM", att.PROVENANCE: "SLSA provenance", att.TEST_RESULT: "test result"}
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
SIGNED, UNSIGNED, NOT_PUBLISHED, UNREADABLE = "signed", "unsigned", "not published", "unreadable"


def _record_problem(data: object, name: str) -> str | None:
    """What the report shows of a publish record must be sound (`pull` checks the whole record)."""
    if not isinstance(data, dict) or data.get("target") != name:
        return f"not a publish record of {name}"
    for key in ("digest", "image_id"):
        if not isinstance(data.get(key), str) or not DIGEST_RE.match(data[key]):
            return f"{key}: {data.get(key)!r} is not a sha256 digest"
    if not any(isinstance(data.get(k), str) and data[k] for k in ("registry", "repository")):
        return "names neither a registry nor a repository"
    return None


def record(record_dir: Path, name: str) -> tuple[dict | None, str | None]:
    """(the target's publish record, None); (None, None) when there is none; (None, why) when it is
    not usable, also warned about: a page that showed a damaged record as published would mislead,
    and one that showed it as "not published" would hide it."""
    path = record_dir / f"{name}.json"
    fix = f"restore it from version control or run `{program.command('push --target ' + name)}` again"
    try:
        data = read_json(path)
    except BadRecord as exc:
        warn_ignored(path, exc.message, exc.line, fix)
        return None, exc.message
    except OSError as exc:
        why = f"cannot read: {exc.strerror or exc}"
        warn_ignored(path, why, fix=fix)
        return None, why
    problem = None if data is None else _record_problem(data, name)
    if problem:
        warn_ignored(path, problem, fix=fix)
        return None, problem
    return data, None


def _signed_problem(signed: object) -> str | None:
    """The shape signing.Signer.attach writes; anything else is not taken as a signature."""
    if not isinstance(signed, dict):
        return f"a JSON {_JSON_TYPES.get(type(signed), type(signed).__name__)}, not an object"
    if not isinstance(signed.get("cosign"), str):
        return "'cosign' (the version that signed) is not a string"
    if not isinstance(signed.get("public_key_sha256"), str) or not _SHA256_HEX.match(signed["public_key_sha256"]):
        return "'public_key_sha256' is not 64 lowercase hex digits"
    kinds = signed.get("attestations")
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k for k in kinds) or len(set(kinds)) != len(kinds):
        return "'attestations' is not a list of distinct predicate types"
    sizes = signed.get("predicate_bytes")
    if (
        not isinstance(sizes, dict)
        or set(sizes) != set(kinds)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values())
    ):
        return "'predicate_bytes' does not give a size for each attestation"
    return None


def signed(rec: dict | None, unusable: str | None = None) -> dict:
    """The signed/attested state of one publish record (record()'s pair), the same for the page and
    `list --json`: state (signed, unsigned, not published, unreadable), text (the line the page
    shows) and, when signed, what push recorded of it."""
    if unusable:
        return {"state": UNREADABLE, "text": "publish record unreadable", "problem": unusable}
    if rec is None:
        return {"state": NOT_PUBLISHED, "text": NOT_PUBLISHED}
    if "signed" not in rec:
        # push without --sign-key: published, but nothing vouches for the digest
        return {"state": UNSIGNED, "text": UNSIGNED, "digest": rec["digest"]}
    problem = _signed_problem(rec["signed"])
    if problem:
        return {
            "state": UNREADABLE,
            "text": "signing record unreadable",
            "digest": rec["digest"],
            "problem": f"'signed': {problem}",
        }
    s = rec["signed"]
    kinds = list(s["attestations"])
    count = f"{len(kinds)} attestation{'' if len(kinds) == 1 else 's'}"
    return {
        "state": SIGNED,
        "text": f"signed + {count} (key sha256 {s['public_key_sha256'][:12]}…)",
        "digest": rec["digest"],
        "cosign": s["cosign"],
        "key_sha256": s["public_key_sha256"],
        "attestations": [
            {"type": k, "name": STATEMENT_NAMES.get(k, k), "bytes": s["predicate_bytes"][k]} for k in kinds
        ],
    }


def variant_of(rec: dict | None, archs: Iterable[str]) -> dict | None:
    """A variant's own entry in its target's record (a target pushed as one index): its digest,
    image ID and signature, with the target's registry and repository. None when the target was
    published without it."""
    rec = rec or {}
    for v in rec.get("variants") or []:
        if isinstance(v, dict) and set(v.get("archs") or ()) == set(archs):
            return {**v, "registry": rec.get("registry"), "repository": rec.get("repository")}
    return None
