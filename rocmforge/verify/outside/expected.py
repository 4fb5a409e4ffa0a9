"""What an image's files must be, from sources the image cannot edit: the .debs of the packages its
build installs (at the lock's versions, fetched by the signed index's hashes), the build context's
files its Dockerfile copies in, and what each builder stage handed over (recorded on the host when
the image was built). Each expected path carries its source, for messages."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.define.kinds import WheelsFetch
from rocmforge.host import aptsources
from rocmforge.render.plan import BuildPlan, TargetPlan
from rocmforge.resolve import lockfile
from rocmforge.resolve.image_packages import expected_packages
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache
from rocmforge.verify.outside import debs, wheels

if TYPE_CHECKING:
    from rocmforge.verify.outside.imagefs import ImageFS


@dataclass(frozen=True)
class Want:
    """One path as its source has it. type: f file, d directory, l symlink; data: a file's sha256
    (hex) or a symlink's target."""

    type: str
    mode: int
    uid: int
    gid: int
    data: str
    source: str  # "package librocblas0 5.5.1+dfsg-7", "build context probes/load.py", ...


@dataclass
class Expected:
    paths: dict[str, Want]  # relative path ("usr/bin/python3.13") -> what it must be
    packages: dict[str, debs.DebContents]  # the packages installed above the base, as published
    all_packages: dict[str, str]  # name -> version: every package the image must have installed
    base_packages: dict[str, str]  # name -> version the base holds
    keep_archs: tuple[str, ...]  # the archs a prune step keeps (() when nothing is pruned)
    pruned: bool
    sources: list[debs.AptSource] = field(default_factory=list)  # where the packages come from
    removed: dict[str, str] = field(default_factory=dict)  # base paths the build removes -> why
    locked_debs: dict[str, str] = field(default_factory=dict)  # name=version -> the .deb's sha256 (matrix.lock)
    # each locked wheel's RECORD path in the image -> (the wheel, its site-packages, the rows it must hold)
    records: dict[str, tuple[wheels.Wheel, str, dict[str, str]]] = field(default_factory=dict)
    # the names a package's data.tar makes one file: each name -> the name its hard links point to
    links: dict[str, str] = field(default_factory=dict)

    def deb(self, name: str) -> debs.DebContents:
        """The .deb of any package the image holds (one of the base's is fetched when first asked)."""
        if name not in self.packages:
            version = self.all_packages[name]
            src, pool, sha = debs.locate(self.sources, {name: version}, self.locked_debs)[name]
            self.packages[name] = debs.contents(src, pool, sha, name, version)
        return self.packages[name]


def chain(plan: BuildPlan, key: str) -> list[TargetPlan]:
    """The target plans an image of key is built through, the root first."""
    out = [plan.by_key(key)]
    name = plan.matrix.targets[out[0].name].from_target
    while name:
        out.append(plan.image_for(name, out[0].variant))  # a variant is built on its parent's variant
        name = plan.matrix.targets[name].from_target
    return list(reversed(out))


def _copy_steps(tp: TargetPlan) -> list[tuple[str | None, list[str], str]]:
    """(from stage or None for the context, sources, destination) of each COPY of the final stage."""
    out = []
    for step in tp.steps:
        if not step.startswith("COPY "):
            continue
        words = shlex.split(step[5:])
        stage = None
        while words and words[0].startswith("--"):
            flag = words.pop(0)
            if flag.startswith("--from="):
                stage = flag[7:]
        out.append((stage, words[:-1], words[-1]))
    return out


def _context_copies(tp: TargetPlan) -> dict[str, Want]:
    """The paths the final stage's context COPYs make, as the build context (context_tar: 0644 files,
    0755 folders, owner root) holds them."""
    out: dict[str, Want] = {}
    for stage, sources, dest in _copy_steps(tp):
        if stage is not None:
            continue
        into_dir = dest.endswith("/") or len(sources) > 1
        dest_rel = dest.strip("/")
        for src in sources:
            src_rel = src.rstrip("/")
            below = {k: v for k, v in tp.files.items() if k.startswith(src_rel + "/")}
            if below:  # a folder: its contents go into dest
                for k, data in below.items():
                    rel = f"{dest_rel}/{k[len(src_rel) + 1 :]}"
                    out[rel] = Want("f", 0o644, 0, 0, hashlib.sha256(data).hexdigest(), f"build context {k}")
                    parent = rel.rpartition("/")[0]
                    while parent and parent != dest_rel and parent not in out:
                        out[parent] = Want("d", 0o755, 0, 0, "", f"build context {src_rel}/")
                        parent = parent.rpartition("/")[0]
            elif src_rel in tp.files:
                rel = f"{dest_rel}/{src_rel.rpartition('/')[2]}" if into_dir else dest_rel
                data = tp.files[src_rel]
                out[rel] = Want("f", 0o644, 0, 0, hashlib.sha256(data).hexdigest(), f"build context {src_rel}")
    return out


# -- what builder stages handed over, recorded when the image was built ---------------------------


def _record_path(tp: TargetPlan) -> Path:
    return user_cache("stage-outputs") / f"{tp.content_hash}.json"


def stage_destinations(tp: TargetPlan) -> list[str]:
    return [dest.strip("/") for stage, _, dest in _copy_steps(tp) if stage is not None]


def has_stage_record(tp: TargetPlan) -> bool:
    return _record_path(tp).is_file()


def record_stage_outputs(view: ImageFS, tp: TargetPlan) -> None:
    """Keeps, outside the image, every path the final stage's COPY --from steps put in the image
    just built (view: its filesystem): the builder stages' outputs a later check compares with."""
    dests = stage_destinations(tp)
    if not dests:
        return
    record = {rel: list(w) for rel, w in view.under(dests).items()}
    atomic_write(_record_path(tp), json.dumps({"target": tp.key, "paths": record}, sort_keys=True).encode())


def _stage_outputs(tp: TargetPlan) -> dict[str, Want]:
    dests = stage_destinations(tp)
    if not dests:
        return {}
    path = _record_path(tp)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise BuildError(
            f"no record of what {tp.key}'s builder stages handed over ({', '.join('/' + d for d in dests)}) is kept "
            f"on this host ({path}): those files cannot be told from changed ones. It is written when rocmforge "
            f"builds the target: build {tp.key} here"
        ) from None
    return {
        rel: Want(t, mode, uid, gid, data, f"builder stage output of {tp.key} (recorded at its build)")
        for rel, (t, mode, uid, gid, data) in doc["paths"].items()
    }


def _venv_pip(plan: BuildPlan, tp: TargetPlan, component: str, exp: Expected) -> wheels.Wheel | None:
    """The pip the venv's own ensurepip installs, when it comes from a locked Debian package
    (python3-pip-whl in the builder stage's image, on a stack whose venv is Debian's python3)."""
    stack = plan.matrix.stacks[tp.stack]
    if not stack.base.bootstrap or stack.python_bin != "/usr/bin/python3":
        return None
    pins = dict(plan.lock.base(tp.stack).packages or {})
    pins.update(lockfile.builder_image_pins(plan.lock, plan.matrix, tp.name, component)[0])
    if "python3-pip-whl" not in pins:
        return None
    version = pins["python3-pip-whl"]
    src, pool, sha = debs.locate(exp.sources, {"python3-pip-whl": version}, exp.locked_debs)["python3-pip-whl"]
    deb = debs.contents(src, pool, sha, "python3-pip-whl", version)
    return wheels.venv_pip(deb, lambda: debs.download(src, pool, sha))


def _locked_wheels(plan: BuildPlan, tps: list[TargetPlan], paths: dict[str, Want], exp: Expected) -> None:
    """Puts what the locked wheels of the chain's venvs install (and the venv's own pip, from its
    Debian package) into paths, in place of what the builder stage recorded for them: below a
    wheel's top-level paths only its files, what pip writes for it (judged by generated.py's rules)
    and byte-compiled files stay."""
    found = wheels.Installed()
    for tp in tps:
        for item in tp.fetches:
            if isinstance(item, WheelsFetch):
                locked = plan.lock.python.get(item.component) or {}
                pinned = [wheels.wheel(n, e, item.python) for n, e in sorted(locked.items())]
                own = _venv_pip(plan, tp, item.component, exp)  # it runs the install: its template
                if own is not None and "pip" not in locked:  # (a pip the lock pins replaces it)
                    pinned.append(own)
                made = wheels.installed(pinned, item.python, own.template if own else None)
                found.paths.update(made.paths)
                found.roots |= made.roots
                found.records.update(made.records)
    for rel in list(paths):
        below = any(rel == r or rel.startswith(r + "/") for r in found.roots)
        if below and rel not in found.paths and "/__pycache__" not in rel:
            del paths[rel]
    for rel, (kind, mode, sha, source) in found.paths.items():
        paths[rel] = Want(kind, mode, 0, 0, sha, source)
    exp.records = found.records


# -- packages -------------------------------------------------------------------------------------


def expected(plan: BuildPlan, key: str, keep_archs: tuple[str, ...], sources: list[debs.AptSource]) -> Expected:
    """What the image of plan target key must hold above its base, its packages from sources."""
    tps = chain(plan, key)
    top = tps[-1]
    stack = top.stack
    pkgs = expected_packages(plan.lock, plan.matrix, top.name)
    base_pkgs = dict(plan.lock.base(stack).packages or {})
    above = {n: v for n, v in pkgs.packages.items() if base_pkgs.get(n) != v}
    locked = dict(plan.lock.debs.get(stack, {}))
    located = debs.locate(sources, above, locked) if above else {}
    contents = {n: debs.contents(src, pool, sha, n, above[n]) for n, (src, pool, sha) in located.items()}
    paths: dict[str, Want] = {}
    links: dict[str, str] = {}
    for name, deb in sorted(contents.items()):
        src = f"package {name} {deb.version}"
        for rel, f in deb.files.items():
            if f.type == "h":
                target = deb.files.get(f.link)
                if target is None:
                    continue
                paths[rel] = Want("f", target.mode, target.uid, target.gid, target.sha256, src)
                links[rel] = links[f.link] = f.link
            elif f.type in "fdl":
                data = f.sha256 if f.type == "f" else f.link if f.type == "l" else ""
                if f.type == "d" and rel in paths:
                    continue  # a folder many packages share
                paths[rel] = Want(f.type, f.mode, f.uid, f.gid, data, src)
    for tp in tps:
        paths.update(_context_copies(tp))
        paths.update(_stage_outputs(tp))
    pruned = any(plan.matrix.targets[tp.name].prune_archs for tp in tps)
    removed = {}
    policy = plan.matrix.stacks[stack].apt_sources
    if policy is not None and not policy.keep:  # what aptsources.policy_script does to the base's lists
        lists = aptsources.LISTS_DIR.lstrip("/")
        removed = {f"{lists}/{n}": f"the stack's apt_sources drops {n}" for n in policy.drop}
        for name, line in policy.replace.items():
            written = hashlib.sha256((line + "\n").encode()).hexdigest()
            paths[f"{lists}/{name}"] = Want("f", 0o644, 0, 0, written, "the stack's apt_sources")
    exp = Expected(paths, contents, pkgs.packages, base_pkgs, keep_archs, pruned, sources, removed, locked, links=links)
    _locked_wheels(plan, tps, paths, exp)
    return exp
