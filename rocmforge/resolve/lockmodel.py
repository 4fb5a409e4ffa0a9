"""matrix.lock's typed model: what `build.py lock` resolved (bases, apt closures, Python wheels, held torch
families, git commits), and the message each refused field gets. The resolve stage owns the lock:
resolve/lockfile.py reads and writes the file, resolve/lock.py and resolve/entries.py fill it in; the
kinds' plans read only what it holds for their component (define.kinds.ComponentLock)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from rocmforge.define.schema import COMMIT_RE, DIGEST_RE

# held: per Python environment on a torch image, the torch family the image already has (pinned
# as constraints) and the torch.__version__ / torch.version.hip the build must leave unchanged.
# debs: per stack, the SHA-256 of each locked .deb (name=version) as its archive's signed index gives
# it: what the outside check downloads against. Since schema 2; a schema 1 lock has none.
SECTIONS = ("bases", "apt", "debs", "python", "git", "held")
SCHEMA: Literal[2] = 2  # what `build.py lock` writes
READABLE_SCHEMAS = (1, 2)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def _matching(pattern: re.Pattern, message: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(message)
        return value

    return AfterValidator(check)


def _present(value: Any) -> Any:
    if value is None:
        raise ValueError("is null")
    return value


# A key `build.py lock` writes only once it knows the value: absent reads as None, a null is refused.
Recorded = BeforeValidator(_present)


Version = Annotated[str, Field(min_length=1)]
Digest = Annotated[str, _matching(DIGEST_RE, "must be sha256:<64 hex> or null")]
ImageId = Annotated[str, _matching(IMAGE_ID_RE, "must be sha256:<64 hex> or null")]
Sha256 = Annotated[str, _matching(SHA256_RE, "is not a 64-hex sha256")]
Commit = Annotated[str, _matching(COMMIT_RE, "must be a 40-character commit or null")]


class Entry(BaseModel):
    """An entry keeps what the file holds as it holds it: a key is dumped only when it was read or
    set (model_dump(exclude_unset=True)), and keys the tool does not know are kept (extra)."""

    model_config = ConfigDict(extra="allow", strict=True)

    def __bool__(self) -> bool:
        """True when the entry holds any key, as the mapping it is in the file (`git: {x: {}}` is none)."""
        return bool(self.model_fields_set)


class BaseEntry(Entry):
    """bases.<stack>: a bootstrapped base (recipe, image_id, packages) or a registry one (image, digest,
    apt_sources, packages, apt_lists_found). Fields in the order they are checked."""

    kind: Literal["bootstrap", "registry"] = "bootstrap"
    digest: Digest | None = None
    image_id: ImageId | None = None
    recipe: Annotated[str, _matching(SHA256_RE, "must be 64 hex digits or null")] | None = None
    packages: Annotated[dict[str, Version] | None, Recorded] = None
    apt_sources: Annotated[dict[Any, Any] | None, Recorded] = None
    apt_lists_found: list[str] = Field(default_factory=list)
    image: str | None = None
    index_digest: Digest | None = None


class PythonFile(Entry):
    """python.<env>.<package>: one wheel of the environment's closure."""

    version: str
    sha256: list[Sha256]
    file: str = ""


class HeldEntry(Entry):
    """held.<env>: the torch family a torch image already has, and the torch the build must leave."""

    packages: dict[str, Version]
    torch_version: str
    torch_hip: str | None = None


class GitEntry(Entry):
    """git.<component>: a ref resolved to a commit (None: not resolved here)."""

    commit: Commit | None = None
    url: str = ""
    ref: str = ""


class Lock(BaseModel):
    """The whole lock; its writers (resolve/lock.py and resolve/entries.py) update its sections in place."""

    model_config = ConfigDict(extra="forbid", strict=True)
    schema_version: Literal[1, 2] = Field(default=SCHEMA, alias="schema")
    bases: dict[str, BaseEntry] = Field(default_factory=dict)
    apt: dict[str, dict[str, Version]] = Field(default_factory=dict)
    debs: dict[str, dict[str, Sha256]] = Field(default_factory=dict)
    python: dict[str, dict[str, PythonFile] | None] = Field(default_factory=dict)
    held: dict[str, HeldEntry] = Field(default_factory=dict)
    git: dict[str, GitEntry | None] = Field(default_factory=dict)

    def base(self, stack: str) -> BaseEntry:
        """The stack's base entry, or an empty one (no key: digest, image_id, recipe, packages and
        apt_sources None) when there is none."""
        return self.bases.get(stack) or BaseEntry()

    def plain(self, section: str) -> dict:
        """A section as plain data, each entry with the keys it was read or written with."""
        return {k: _plain(v) for k, v in getattr(self, section).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def python_files(wheels: dict[str, dict]) -> dict[str, PythonFile]:
    """An environment's wheels as host.fetch and host.pylock report them (name → version, file, sha256)."""
    return {name: PythonFile.model_validate(entry) for name, entry in wheels.items()}


# The message of a refused field, by section and the field's first key below the entry.
_BASE = {
    "kind": "must be 'bootstrap' or 'registry'",
    "digest": "must be sha256:<64 hex> or null",
    "image_id": "must be sha256:<64 hex> or null",
    "recipe": "must be 64 hex digits or null",
    "packages": "must map package names to version strings",
    "apt_sources": "must be a mapping (keep, drop, replace) as the stack states it",
    "apt_lists_found": "must be a list of file names",
    "image": "must be an image reference (a string)",
    "index_digest": "must be sha256:<64 hex> or null",
}
_HELD = "needs 'packages' (name: version) and 'torch_version'"
_KEY = "must be a name (a string)"


def refusal(loc: tuple, data: dict) -> tuple[tuple, str]:
    """Where and why the first field pydantic refused is wrong (loc: its path; data: the file as read),
    as the lock's messages say it: at the entry, or at the field of it the message names."""
    if len(loc) < 2:
        return loc, "must be a mapping of names"
    section, name, rest = loc[0], loc[1], tuple(loc[2:])
    head = (section, name)
    if section == "bases":
        if not rest:
            return head, "must be a mapping"
        return head + rest[:1], _BASE.get(rest[0], _KEY)
    if section == "apt":
        if not rest:
            return head, "must map package names to version strings"
        version = data[section][name][rest[0]]
        return head + rest[:1], f"{version!r} is not a version string (quote versions that look like numbers)"
    if section == "debs":
        if not rest:
            return head, "must map name=version to the .deb's sha256"
        return head + rest[:1], "is not a 64-hex sha256 (cut short?)"
    if section == "python":
        if not rest:
            return head, "must map package names to their version, file and sha256 hashes"
        pkg, sub = rest[0], rest[1:]
        if not sub or sub[0] == "version":
            return head + (pkg,), "needs 'version' and 'sha256' (a list of 64-hex hashes)"
        if sub[0] == "sha256" and len(sub) == 1:
            return head + (pkg, "sha256"), "must be a list of 64-hex hashes"
        if sub[0] == "sha256":
            h = data[section][name][pkg]["sha256"][sub[1]]
            return head + (pkg, "sha256", sub[1]), f"{h!r} is not a 64-hex sha256 (cut short?)"
        if sub[0] == "file":
            return head + (pkg, "file"), "must be a wheel file name"
        if sub[0] == "[key]":
            return head + (pkg,), "must be a package name (a string)"
        return head + (pkg,) + sub[:1], _KEY
    if section == "held":
        if not rest or rest[0] in ("packages", "torch_version"):
            return head, _HELD
        if rest[0] == "torch_hip":
            return head + ("torch_hip",), "must be a version string or null"
        return head + rest[:1], _KEY
    if section == "git":
        if not rest:
            return head, "must be a mapping with 'url', 'ref' and 'commit'"
        if rest[0] == "commit":
            return head + ("commit",), "must be a 40-character commit or null"
        return head + rest[:1], "must be a string" if rest[0] in ("url", "ref") else _KEY
    return loc, "not a section of a rocmforge lock"
