"""The release record: a repository's signed statement of what is current. cosign signs digests and
knows nothing of tags, so whoever can write to the registry could otherwise put any older genuinely
signed image (or a variant) under a tag. The record names, for each readable tag, the digest it must
serve and the role of what it serves (an index of the main image and its variants, the main image,
or a variant with its archs), with a serial that only grows and an expiry (TUF's snapshot and
timestamp roles in one small document).

This module is the record's pure logic: making it, parsing it, and judging a reference against it
and against the highest serial this client has seen. releasestore.py keeps it in the registry."""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import dataclass

from rocmforge.shared.errors import BuildError, UserError

TYPE = "https://rocmforge.dev/release-record/v1"
ROLES = ("index", "main", "variant")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_VALID_FOR = "30d"


class BadRecord(BuildError):
    """A record that cannot be read as one (cut off, not JSON, a field missing or of the wrong kind)."""


class Stale(BuildError):
    """A record that reads well but must not be trusted now: expired, or older than one already seen."""


def parse_duration(text: str, field: str = "--valid-for") -> int:
    """'30d', '12h', '90m', '45s' -> seconds; anything else (or zero) is refused at field."""
    m = _DURATION.match(text.strip())
    if not m or int(m[1]) == 0:
        raise UserError(f"{text!r} is not a duration such as 30d, 12h, 90m or 45s", field=field)
    return int(m[1]) * _UNIT[m[2]]


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def epoch_of(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


@dataclass(frozen=True)
class Image:
    digest: str
    role: str  # "main" or "variant"
    archs: tuple[str, ...]

    def describe(self) -> str:
        return f"the {','.join(self.archs)} variant" if self.role == "variant" else "the main image"


@dataclass(frozen=True)
class Tagged:
    """What one tag must serve: an image, or (role "index") an index of exactly these entries."""

    digest: str
    role: str
    archs: tuple[str, ...] = ()
    entries: tuple[Image, ...] = ()


@dataclass(frozen=True)
class Record:
    repository: str
    serial: int
    issued: str
    expires: str
    tags: dict[str, Tagged]

    def digests(self) -> dict[str, Image]:
        """Every image digest the record names (an index's entries included), with its role."""
        out: dict[str, Image] = {}
        for t in self.tags.values():
            if t.role == "index":
                out.update({e.digest: e for e in t.entries})
            else:
                out[t.digest] = Image(t.digest, t.role, t.archs)
        return out

    def to_json(self) -> dict:
        tags = {}
        for name, t in sorted(self.tags.items()):
            entry: dict = {"digest": t.digest, "role": t.role}
            if t.role == "index":
                entry["entries"] = [{"digest": e.digest, "role": e.role, "archs": list(e.archs)} for e in t.entries]
            else:
                entry["archs"] = list(t.archs)
            tags[name] = entry
        return {
            "_type": TYPE,
            "repository": self.repository,
            "serial": self.serial,
            "issued": self.issued,
            "expires": self.expires,
            "tags": tags,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def make(repository: str, serial: int, tags: dict[str, Tagged], *, now: float, valid_for: int) -> Record:
    return Record(repository, serial, iso(now), iso(now + valid_for), dict(tags))


def parse(text: str, where: str) -> Record:
    """The record in text; raises BadRecord naming what is wrong (a cut-off record is not JSON)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadRecord(f"the release record {where} is cut off or not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("_type") != TYPE:
        raise BadRecord(f"the release record {where} is not a {TYPE} document")

    def need(ok: bool, name: str) -> None:
        if not ok:
            raise BadRecord(f"the release record {where} has no valid {name!r}")

    need(isinstance(data.get("repository"), str) and bool(data["repository"]), "repository")
    need(isinstance(data.get("serial"), int) and not isinstance(data["serial"], bool) and data["serial"] > 0, "serial")
    for key in ("issued", "expires"):
        try:
            value = data.get(key)
            epoch_of(value if isinstance(value, str) else "")
        except ValueError:
            need(False, key)
    need(isinstance(data.get("tags"), dict) and bool(data["tags"]), "tags")
    tags = {}
    for name, t in data["tags"].items():
        need(
            isinstance(t, dict) and t.get("role") in ROLES and _DIGEST.match(str(t.get("digest"))) is not None,
            f"tags.{name}",
        )
        if t["role"] == "index":
            entries = t.get("entries")
            need(isinstance(entries, list) and bool(entries), f"tags.{name}.entries")
            tags[name] = Tagged(t["digest"], "index", (), tuple(_image(e, f"{where} tags.{name}") for e in entries))
        else:
            tags[name] = Tagged(t["digest"], t["role"], _archs(t.get("archs"), f"{where} tags.{name}"))
    return Record(data["repository"], data["serial"], data["issued"], data["expires"], tags)


def _image(e: object, where: str) -> Image:
    if not isinstance(e, dict) or e.get("role") not in ("main", "variant") or not _DIGEST.match(str(e.get("digest"))):
        raise BadRecord(f"the release record {where} has an entry that is not {{digest, role, archs}}")
    return Image(e["digest"], e["role"], _archs(e.get("archs"), where))


def _archs(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise BadRecord(f"the release record {where} has no list of archs")
    return tuple(value)


def fresh(record: Record, now: float, seen: dict | None) -> None:
    """Raises Stale for a record past its expiry, or older than the newest this client has seen
    (seen: {'serial', 'issued', 'seen', 'record'} from the user's cache, or None)."""
    if now > epoch_of(record.expires):
        raise Stale(
            f"the release record of {record.repository} (serial {record.serial}, issued {record.issued}) "
            f"expired on {record.expires}: the registry may be serving a frozen view; the publisher "
            "renews it with `push --refresh`"
        )
    if not seen:
        return
    if record.serial < seen["serial"]:
        raise Stale(
            f"rolled back: the release record of {record.repository} is serial {record.serial} "
            f"({record.issued}), which is older than serial {seen['serial']} ({seen['issued']}), seen on "
            f"{seen['seen']}"
        )


def role_problem(tag: str, tagged: Tagged | None, image: Image) -> str | None:
    """What is wrong with reaching `image` (its attested role and archs) through `tag`."""
    if tagged is None:
        return None
    if tagged.role in ("index", "main"):
        if image.role == "variant":
            kind = "main" if tagged.role == "index" else tagged.role
            return f"the image reached through the {kind} tag {tag} is {image.describe()}"
        return None
    if image.role != "variant" or set(image.archs) != set(tagged.archs):
        return f"the image reached through the {','.join(tagged.archs)} variant tag {tag} is {image.describe()}"
    return None


def judge(record: Record, tag: str | None, served: str, images: list[Image], indexed: bool) -> str:
    """'current' or 'superseded' for what a reference reached; raises BuildError naming the first
    thing the record contradicts. served: the digest the reference reached (the index's, for an
    index); images: what it holds with their attested roles (the index's entries in order, with the
    archs its annotations name)."""
    named = record.digests()
    tagged = record.tags.get(tag) if tag else None
    if tag and tagged is not None:
        for image in images[:1] if not indexed else []:
            problem = role_problem(tag, tagged, image)
            if problem:
                raise BuildError(problem)
        if indexed:
            want = [(e.digest, e.role, e.archs) for e in tagged.entries]
            got = [(i.digest, i.role, i.archs) for i in images]
            if want != got:
                raise BuildError(
                    f"the index under {tag} does not list what the release record names: {_diff(want, got)}"
                )
        if served != tagged.digest:
            raise BuildError(
                f"tag {tag} serves {served}, but the release record (serial {record.serial}, issued "
                f"{record.issued}) names {tagged.digest}: the tag was moved or rolled back"
            )
        return "current"
    if indexed:
        listed = {t.digest: t for t in record.tags.values() if t.role == "index"}
        if served in listed:
            want = [(e.digest, e.role, e.archs) for e in listed[served].entries]
            got = [(i.digest, i.role, i.archs) for i in images]
            if want != got:
                raise BuildError(f"the index {served} does not list what the release record names: {_diff(want, got)}")
            return "current"
        return "superseded"
    return "current" if all(i.digest in named for i in images) else "superseded"


def _diff(want: list, got: list) -> str:
    def show(items: list) -> str:
        return "; ".join(f"{d[:19]} {r} {','.join(a)}" for d, r, a in items) or "nothing"

    digests = [g[0] for g in got]
    dup = sorted({d for d in digests if digests.count(d) > 1})
    missing = [w for w in want if w[0] not in digests]
    notes = []
    if dup:
        notes.append(f"listed twice: {', '.join(d[:19] for d in dup)}")
    if missing:
        notes.append(f"missing: {show(missing)}")
    if not notes:
        notes.append("entries annotated or ordered otherwise")
    return f"{'; '.join(notes)} (record: {show(want)}; index: {show(got)})"


def tags_of(published: dict) -> dict[str, Tagged]:
    """What each tag of a publish record (release.publish wrote it) must serve, with its role: a
    target with variants has its readable tag as the index, every other tag names one image."""
    main_archs = tuple(published.get("archs") or ())
    variants = list(published.get("variants") or [])
    index = published.get("index")
    tags: dict[str, Tagged] = {}
    for tag in published["tags"]:
        tags[tag] = Tagged(published["digest"], "main", main_archs)
    for v in variants:
        for tag in v["tags"]:
            tags[tag] = Tagged(v["digest"], "variant", tuple(v["archs"]))
    if index:
        entries = (Image(published["digest"], "main", main_archs),) + tuple(
            Image(v["digest"], "variant", tuple(v["archs"])) for v in variants
        )
        tags[index["tag"]] = Tagged(index["digest"], "index", (), entries)
    return tags
