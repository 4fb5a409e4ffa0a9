"""Matrix → BuildPlan: build order, rendered contexts, content hashes, tags and labels. Pure."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from . import bases, lockfile
from .errors import UserError
from .matrix import Matrix
from .render import Renderer

UNRESOLVED = "UNRESOLVED"


@dataclass(frozen=True)
class TargetPlan:
    name: str
    stack: str
    archs: tuple[str, ...]
    deps: tuple[str, ...]
    files: dict[str, bytes]             # rendered build context, relative path → bytes
    content_hash: str
    labels: dict[str, str]
    unresolved: tuple[str, ...]         # why the build must be refused, empty when buildable
    bootstrap_stack: str | None         # stack whose bootstrapped base this target needs
    fetches: tuple = ()                 # host-side inputs added to the context at build time
    registry_base: tuple[str, str] | None = None   # (image, digest) pulled before the build, FROM through BASE_ARG

    @property
    def content_tag(self) -> str:
        return f"{bases.IMAGE_NAMESPACE}/{self.name}:content-{self.content_hash[:12]}"

    @property
    def readable_tag(self) -> str:
        return f"{bases.IMAGE_NAMESPACE}/{self.name}:{self.stack}"


@dataclass
class BuildPlan:
    matrix: Matrix
    targets: dict[str, TargetPlan] = field(default_factory=dict)

    def order(self, names: list[str] | None = None) -> list[str]:
        return self.matrix.order(names)


def iso_utc(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# Bump when the way an image is made from its context changes (builder flags, labels added at build
# time, normalisation): images built the old way are then no longer up to date.
BUILD_FORMAT = 3


def content_hash(files: dict[str, bytes]) -> str:
    h = hashlib.sha256(f"rocmforge-build-format-{BUILD_FORMAT}\0".encode())
    for path in sorted(files):
        data = files[path]
        h.update(f"{path}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def make_plan(m: Matrix, root: Path, lock: dict | None = None) -> BuildPlan:
    """root holds templates/ and probes/ (the matrix file's folder); lock is matrix.lock's content."""
    lock = lock if lock is not None else lockfile.empty()
    renderer = Renderer(root)
    plan = BuildPlan(m)
    steps = lockfile.apt_steps(m)
    for name in m.order():
        t = m.targets[name]
        stack = m.stacks[t.stack]
        unresolved: list[str] = []
        pins_by_step: dict[str, list] = {}
        for step in steps:
            if step.key == name or step.key.startswith(name + "/"):
                pins, stale = lockfile.apt_pins_for(lock, m, step)
                pins_by_step[step.key] = pins
                if stale:
                    unresolved.append(stale)
        python_locks, python_holds, git_commits, fetches = {}, {}, {}, []
        has_torch = m.torch_of(name)[0] is not None
        for cname in t.components:
            comp = m.components[cname]
            if comp.kind == "python-env":
                locked = lock["python"].get(cname) or {}
                if all(locked.get(k.lower(), {}).get("version") == v for k, v in comp.requirements.items()) and locked:
                    python_locks[cname] = locked
                    fetches.append(("wheels", cname, stack.python))
                else:
                    unresolved.append(f"python {cname}: requirements are not locked with hashes (run `python build.py lock`)")
                held = lock.get("held", {}).get(cname)
                if held:
                    python_holds[cname] = held
                elif has_torch:
                    unresolved.append(f"python {cname}: the image's torch is not held by the lock "
                                      "(run `python build.py lock`)")
            if comp.source:
                commit = comp.source.commit or (lock["git"].get(cname) or {}).get("commit")
                if commit:
                    git_commits[cname] = commit
                    fetches.append(("git", cname, comp.source.url, commit))
        bootstrap_stack, registry_base, base_arg = None, None, None
        if t.from_target:
            dep = plan.targets[t.from_target]
            from_ref, base_name, base_digest = dep.content_tag, dep.content_tag, ""
            unresolved += [f"{t.from_target}: {u}" for u in dep.unresolved]
            bootstrap_stack = dep.bootstrap_stack
        elif stack.base.bootstrap:
            from_ref = bases.bootstrap_ref(t.stack, stack)
            base_name, base_digest = from_ref, ""
            bootstrap_stack = t.stack
        else:
            locked_digest = (lock["bases"].get(t.stack) or {}).get("digest")
            from_ref, ok = bases.registry_ref(stack, locked_digest)
            reg = stack.base.registry
            base_name, base_digest = f"{reg.image}:{reg.tag}", reg.digest or locked_digest or ""
            if ok:
                # FROM names the base through a build argument whose default is the upstream reference:
                # a build through a registry mirror passes the mirror's reference for the same digest.
                registry_base = (reg.image, reg.digest or locked_digest)
                base_arg, from_ref = (bases.BASE_ARG, from_ref), "${" + bases.BASE_ARG + "}"
            else:
                unresolved.append(f"base image {reg.image}:{reg.tag} has no digest (run `build.py lock` where the registry is reachable)")
        builder_ref = None
        if t.builder:
            dep = plan.targets[t.builder]
            builder_ref = dep.content_tag
            unresolved += [f"{t.builder}: {u}" for u in dep.unresolved]
        for cname in t.components:
            src = m.components[cname].source
            if src and cname not in git_commits:
                unresolved.append(f"component {cname}: git ref {src.ref!r} of {src.url} is not resolved to a commit (run `build.py lock`)")
        versions = {c: m.components[c].version for c in t.components if m.components[c].version}
        labels = {
            "org.opencontainers.image.title": name,
            "org.opencontainers.image.description": t.description,
            "org.opencontainers.image.version": t.version,
            "org.opencontainers.image.created": iso_utc(t.source_date_epoch),
            "org.opencontainers.image.vendor": m.project.vendor,
            "org.opencontainers.image.base.name": base_name,
            "io.rocmforge.target": name,
            "io.rocmforge.stack": t.stack,
            "io.rocmforge.rocm": stack.rocm,
            "io.rocmforge.archs": ",".join(t.archs),
        }
        if versions:
            labels["io.rocmforge.components"] = ",".join(f"{k}={v}" for k, v in sorted(versions.items()))
        if base_digest:
            labels["org.opencontainers.image.base.digest"] = base_digest
        if m.project.source:
            labels["org.opencontainers.image.source"] = m.project.source
        files = renderer.render_target(m, name, from_ref=from_ref, builder_ref=builder_ref, labels=labels,
                                       unresolved=unresolved, pins_by_step=pins_by_step,
                                       python_locks=python_locks, git_commits=git_commits,
                                       python_holds=python_holds, base_arg=base_arg)
        plan.targets[name] = TargetPlan(
            name=name, stack=t.stack, archs=tuple(t.archs), deps=tuple(m.deps(name)), files=files,
            content_hash=content_hash(files), labels=labels, unresolved=tuple(unresolved),
            bootstrap_stack=bootstrap_stack, fetches=tuple(fetches), registry_base=registry_base)
    return plan


def require_resolved(tp: TargetPlan, field: str = "--target") -> None:
    """The one gate of every command that builds, or needs a build of, a target: a target whose pins are
    unresolved renders `@sha256:UNRESOLVED` on purpose, so it is refused here, before the engine is asked."""
    if tp.unresolved:
        raise UserError(f"target {tp.name!r} cannot be built until its pins are resolved: "
                        + "; ".join(tp.unresolved), field=field)


def load_plan(matrix_path: Path | str) -> BuildPlan:
    """The plan for a matrix file and the matrix.lock beside it (templates/ and probes/ beside it too)."""
    from .matrix import load_matrix

    matrix_path = Path(matrix_path)
    return make_plan(load_matrix(matrix_path), matrix_path.resolve().parent,
                     lockfile.load(matrix_path.with_suffix(".lock")))
