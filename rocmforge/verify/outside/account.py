"""Every path of an image accounted for, from outside: what its layers hold (imagefs) against its
pinned base and what its sources say (expected), with the generated files' rules (generated).
Anything unaccounted for is a finding that names the path and what it does."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from rocmforge.verify.outside import rules as generated_rules
from rocmforge.verify.outside.expected import Expected, Want
from rocmforge.verify.outside.imagefs import Have

# Where a file changes what every process, every program lookup or every Python start does.
_EFFECTS = (
    (re.compile(r"^etc/ld\.so\.preload$"), "preloaded into every process"),
    (re.compile(r"^etc/ld\.so\.conf(\.d/.*)?$"), "adds folders to the dynamic loader's search path"),
    (re.compile(r"(^|/)(site|dist)-packages/[^/]+\.pth$"), "a .pth file: its import lines run at every Python start"),
    (re.compile(r"(^|/)(sitecustomize|usercustomize)\.py$"), "imported at every Python start"),
    (re.compile(r"(^|/)(site|dist)-packages/[^/]+\.(dist|egg)-info(/|$)"), "an extra Python distribution"),
    (re.compile(r"^etc/(passwd|group|shadow|gshadow|sudoers(\.d/.*)?)$"), "changes the users or their rights"),
    (re.compile(r"^etc/dpkg/dpkg\.cfg\.d/"), "changes what dpkg unpacks or excuses"),
    (re.compile(r"^etc/(environment|profile(\.d/.*)?|bash\.bashrc)$"), "runs or sets variables in every login shell"),
)


@dataclass
class Accounting:
    findings: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # paths by how they were accounted for
    bytes_hashed: int = 0

    def count(self, how: str) -> None:
        self.checked[how] = self.checked.get(how, 0) + 1


def _mode(m: int) -> str:
    return f"{m:04o}" + (" (setuid)" if m & stat.S_ISUID else "") + (" (setgid)" if m & stat.S_ISGID else "")


def _differs(want: Want, have: Have) -> str | None:
    """How have differs from want, or None."""
    kinds = {"f": "a file", "d": "a folder", "l": "a symlink", "c": "a device", "b": "a device", "p": "a fifo"}
    if want.type != have.type:
        return f"is {kinds.get(have.type, have.type)}, {want.source} ships {kinds.get(want.type, want.type)}"
    if want.type == "f" and want.data != have.data:
        return f"content differs from {want.source} (sha256 {have.data[:12]}, expected {want.data[:12]})"
    if want.type == "l" and want.data != have.data:
        return f"symlink points to {have.data!r}, {want.source} points it to {want.data!r}"
    if want.mode != have.mode:
        return f"mode {_mode(have.mode)}, {want.source} has {_mode(want.mode)}"
    if (want.uid, want.gid) != (have.uid, have.gid):
        return f"owner {have.uid}:{have.gid}, {want.source} has {want.uid}:{want.gid}"
    if have.xattrs:
        return f"carries extended attributes (file capabilities or others) that {want.source} does not give it"
    return None


def _path_dirs(env_path: str) -> list[str]:
    return [d.strip("/") for d in env_path.split(":") if d.startswith("/")]


def effect(rel: str, have: Have, exp: Expected, path_dirs: list[str]) -> str:
    """What an unaccounted path does, for its finding."""
    for pattern, what in _EFFECTS:
        if pattern.search(rel):
            return what
    folder, _, name = rel.rpartition("/")
    if folder in path_dirs and have.type != "d":
        later = [d for d in path_dirs[path_dirs.index(folder) + 1 :] if f"{d}/{name}" in exp.paths]
        if later:
            return f"shadows the packaged /{later[0]}/{name} on PATH"
        return "a program on PATH"
    if re.search(r"\.so(\.\d+)*$", name):
        packaged = sorted(p for p in exp.paths if p.endswith("/" + name))
        return f"a library named like the packaged /{packaged[0]}" if packaged else "a shared library"
    if have.mode & (stat.S_ISUID | stat.S_ISGID):
        return "a setuid/setgid program"
    return "no package, wheel or build step accounts for it"


def _hard_links(files: dict[str, Have], base: dict[str, Have], exp: Expected, acc: Accounting) -> None:
    """Each hard link the image holds is one a package's data.tar makes (its names in either order,
    as a layer's tar may write either first) or the base's own, both names unchanged."""
    for rel, have in files.items():
        if not have.link:
            continue
        other = have.link
        if exp.links.get(rel) is not None and exp.links.get(rel) == exp.links.get(other):
            acc.count("hard-link")
        elif rel in base and base[rel].link == other and base[rel] == have and base.get(other) == files.get(other):
            acc.count("base")
        else:
            acc.findings.append(f"/{rel}: a hard link of /{other} (one file, two names), which no package links")


def account(
    files: dict[str, Have],
    base: dict[str, Have],
    exp: Expected,
    env_path: str,
    contents: Callable[[str], bytes | None] = lambda rel: None,
    base_contents: Callable[[str], bytes | None] = lambda rel: None,
) -> Accounting:
    """Checks every path of files (the image) against base (its pinned base, unchanged paths are the
    base's) and exp (what the build adds); generated files by their rule."""
    acc = Accounting()
    path_dirs = _path_dirs(env_path)
    rules = generated_rules.Rules(files, base, exp, contents, base_contents)
    for rel, want in exp.paths.items():
        have = files.get(rel)
        if have is None:
            excuse = rules.absence_excused(rel, want)
            if excuse:
                acc.count(excuse)
            else:
                acc.findings.append(f"/{rel}: missing; {want.source} ships it")
            continue
        why = _differs(want, have)
        if why and rules.owned_by_rule(rel):
            continue  # a generated file some package also ships (judged by its rule below)
        if why and want.type == have.type == "d" and rules.mode_set_by_declaration(rel, have):
            acc.count("tmpfiles.d")
            continue
        if why:
            acc.findings.append(f"/{rel}: {why}")
        else:
            acc.count(want.source.split(" ", 1)[0])
            if have.type == "f":
                acc.bytes_hashed += have.size
    for rel, have in files.items():
        if rel in exp.paths and not rules.owned_by_rule(rel):
            continue
        old = base.get(rel)
        if old is not None and old.brief() == have.brief() and old.xattrs == have.xattrs:
            acc.count("base")
            continue
        verdict = rules.judge(rel, have)
        if verdict is None:
            if have.type == "d" and rules.implied_folder(rel, have):
                acc.count("folder")
                continue
            changed = "changed from the base's" if old is not None else effect(rel, have, exp, path_dirs)
            acc.findings.append(f"/{rel}: {changed}")
        elif verdict.ok:
            acc.count(verdict.rule)
        else:
            acc.findings.append(f"/{rel}: {verdict.why}")
    for rel in base:
        if rel not in files and not rules.removal_excused(rel):
            acc.findings.append(f"/{rel}: removed; the base ships it")
    _hard_links(files, base, exp, acc)
    acc.findings.extend(rules.whole_image_findings())
    return acc
