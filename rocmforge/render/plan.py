"""Matrix → BuildPlan: build order, rendered contexts, content hashes, tags and labels. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rocmforge.define.kinds import ComponentPlan, FetchItem, TargetUse
from rocmforge.define.matrix import Matrix, load_matrix, variant_suffix
from rocmforge.render import archprune, dockerfile
from rocmforge.render.contexts import BaseArg, Renderer, TargetInputs
from rocmforge.render.dockerfile import TrailingLabels
from rocmforge.resolve import bases, lockfile
from rocmforge.resolve.lockmodel import Lock
from rocmforge.shared import program
from rocmforge.shared.errors import UserError
from rocmforge.shared.files import iso_utc

UNRESOLVED = "UNRESOLVED"


class PinnedImage(NamedTuple):
    """A registry image by its locked digest."""

    image: str
    digest: str


@dataclass(frozen=True)
class TargetPlan:
    name: str
    stack: str
    archs: tuple[str, ...]
    deps: tuple[str, ...]
    files: dict[str, bytes]  # rendered build context, relative path → bytes
    content_hash: str
    labels: dict[str, str]
    unresolved: tuple[str, ...]  # why the build must be refused, empty when buildable
    bootstrap_stack: str | None  # stack whose bootstrapped base this target needs
    fetches: tuple[FetchItem, ...] = ()  # host-side inputs added to the context at build time
    registry_base: PinnedImage | None = None  # pulled before the build; FROM names it through BASE_ARG
    variant: tuple[str, ...] = ()  # a variant's archs; () for the target's main (all-archs) image
    # Read from the rendered Dockerfile once, when the plan is made (a project's own template may
    # start its last stage elsewhere than the plan's base): what the last stage's FROM names ("" for
    # none), the instructions the image's own history records, and its trailing LABELs, which a build
    # sends as one LABEL line (None: the Dockerfile is built as it is).
    final_from: str = ""
    steps: tuple[str, ...] = ()
    trailing_labels: TrailingLabels | None = None

    @property
    def content_tag(self) -> str:
        return f"{bases.IMAGE_NAMESPACE}/{self.name}:content-{self.content_hash[:12]}"

    @property
    def readable_tag(self) -> str:
        return f"{bases.IMAGE_NAMESPACE}/{self.name}:{self.stack}{variant_suffix(self.variant)}"

    @property
    def key(self) -> str:
        """The target's name, or `name-gfx1100` for a variant: what the images/ tree, the state
        folder (logs, artifacts, build cache) and reports name it by."""
        return self.name + variant_suffix(self.variant)


@dataclass
class BuildPlan:
    matrix: Matrix
    # matrix.lock as read once for the command; every later stage takes it from here (a plan made
    # without one: the empty lock, every pin unresolved)
    lock: Lock = field(default_factory=lockfile.empty)
    targets: dict[str, TargetPlan] = field(default_factory=dict)
    variants: dict[str, tuple[TargetPlan, ...]] = field(default_factory=dict)  # by target, in matrix order

    def order(self, names: list[str] | None = None) -> list[str]:
        return self.matrix.order(names)

    def variant(self, name: str, archs: Iterable[str]) -> TargetPlan:
        """The variant of name whose archs are exactly archs (in any order)."""
        return next(v for v in self.variants.get(name, ()) if set(v.variant) == set(archs))

    def image_for(self, name: str, variant: tuple[str, ...] = ()) -> TargetPlan:
        """What an image of name's variant (archs; () for the main image) is made from: that
        variant where name declares it, else name's main image (a target that prunes nothing
        has no variants; its variants' children are built on its main image)."""
        found = [v for v in self.variants.get(name, ()) if variant and set(v.variant) == set(variant)]
        return found[0] if found else self.targets[name]

    def by_key(self, key: str) -> TargetPlan:
        """A target's main image by its name, or a variant by its key (hip-runtime-gfx1100)."""
        return self.targets.get(key) or next(v for vs in self.variants.values() for v in vs if v.key == key)

    def images_of(self, name: str) -> tuple[TargetPlan, ...]:
        """A target's main image first, then its variants."""
        return (self.targets[name],) + self.variants.get(name, ())

    def variants_needed(self, name: str) -> list[TargetPlan]:
        """Every variant a build of name makes beside its main image, prerequisites first: a variant
        built on another target is built on that target's variant of the same archs."""
        out: list[TargetPlan] = []
        for v in self.variants.get(name, ()):
            chain, t = [v], self.matrix.targets[name]
            while t.from_target and self.matrix.prunes(t.from_target):
                chain.append(self.variant(t.from_target, v.variant))
                t = self.matrix.targets[t.from_target]
            out += [c for c in reversed(chain) if c not in out]
        return out


# Bump when the way an image is made from its context changes (builder flags, labels added at build
# time, normalisation): images built the old way are then no longer up to date.
BUILD_FORMAT = 4


def content_hash(files: dict[str, bytes]) -> str:
    """The sha256 of a build context (path -> bytes) and BUILD_FORMAT, that the content tag is made of:
    the same files give the same hash."""
    h = hashlib.sha256(f"rocmforge-build-format-{BUILD_FORMAT}\0".encode())
    for path in sorted(files):
        data = files[path]
        h.update(f"{path}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def make_plan(m: Matrix, root: Path, lock: Lock | None = None) -> BuildPlan:
    """root is the matrix file's folder (a templates/ or probes/ there replaces the package's);
    lock is matrix.lock's content."""
    lock = lock if lock is not None else lockfile.empty()
    renderer = Renderer(root)
    plan = BuildPlan(m, lock)
    steps = lockfile.apt_steps(m)
    for name in m.order():
        plan.targets[name] = _target_plan(plan, m, name, lock, renderer, steps)
        plan.variants[name] = tuple(
            _target_plan(plan, m, name, lock, renderer, steps, tuple(group)) for group in m.targets[name].variants
        )
    return plan


def _target_plan(
    plan: BuildPlan,
    m: Matrix,
    name: str,
    lock: Lock,
    renderer: Renderer,
    steps: list[lockfile.AptStep],
    variant: tuple[str, ...] = (),
) -> TargetPlan:
    if variant:
        # The same target rendered for fewer archs: its lock entries, settings and labels stay the
        # target's own; what it is built on is the parent's variant of the same archs.
        t = m.targets[name].model_copy(update={"archs": list(variant)})
        m = m.model_copy(update={"targets": {**m.targets, name: t}})
    t = m.targets[name]
    unresolved: list[str] = []
    pins_by_step: dict[str, list] = {}
    for step in steps:
        if step.key == name or step.key.startswith(name + "/"):
            pins, stale = lockfile.apt_pins_for(lock, m, step)
            pins_by_step[step.key] = pins
            if stale:
                unresolved.append(stale)
    components = _component_plans(m, name, lock)
    unresolved += [u for cp in components.values() for u in cp.unresolved]
    base = _base_of(plan, m, name, lock, variant)
    unresolved += base.unresolved
    builder_ref = None
    if t.builder:
        dep = plan.targets[t.builder]
        builder_ref = dep.content_tag
        unresolved += [f"{t.builder}: {u}" for u in dep.unresolved]
    unresolved += [u for cp in components.values() for u in cp.unresolved_source]
    labels = _labels(m, name, base.name, base.digest)
    files = renderer.render_target(
        m,
        name,
        TargetInputs(
            from_ref=base.from_ref,
            builder_ref=builder_ref,
            base_arg=base.base_arg,
            labels=labels,
            unresolved=unresolved,
            pins_by_step=pins_by_step,
            components=components,
        ),
    )
    text = files["Dockerfile"].decode()
    return TargetPlan(
        name=name,
        stack=t.stack,
        archs=tuple(t.archs),
        deps=tuple(m.deps(name)),
        files=files,
        content_hash=content_hash(files),
        labels=labels,
        unresolved=tuple(unresolved),
        bootstrap_stack=base.bootstrap_stack,
        fetches=tuple(f for cp in components.values() for f in cp.fetches),
        registry_base=base.registry_base,
        variant=variant,
        final_from=dockerfile.final_from(text),
        steps=tuple(dockerfile.stage_steps(text)),
        trailing_labels=dockerfile.trailing_labels(text),
    )


def _component_plans(m: Matrix, name: str, lock: Lock) -> dict[str, ComponentPlan]:
    """What each of a target's components brings to its build, in the target's order."""
    t = m.targets[name]
    stack = m.stacks[t.stack]
    has_torch = m.torch_of(name).version is not None
    return {
        cname: m.components[cname].plan(
            cname, lockfile.component_lock(lock, cname), TargetUse(name, i, t, stack, has_torch)
        )
        for i, cname in enumerate(t.components)
    }


@dataclass(frozen=True)
class _Base:
    """What a target is built FROM, as its Dockerfile and labels name it."""

    from_ref: str
    name: str  # org.opencontainers.image.base.name
    digest: str  # "" where the base is a local image
    unresolved: tuple[str, ...] = ()
    bootstrap_stack: str | None = None
    registry_base: PinnedImage | None = None
    base_arg: BaseArg | None = None


def _base_of(plan: BuildPlan, m: Matrix, name: str, lock: Lock, variant: tuple[str, ...] = ()) -> _Base:
    t = m.targets[name]
    stack = m.stacks[t.stack]
    if t.from_target:
        dep = (
            plan.variant(t.from_target, variant) if variant and m.prunes(t.from_target) else plan.targets[t.from_target]
        )
        return _Base(
            dep.content_tag,
            dep.content_tag,
            "",
            tuple(f"{t.from_target}: {u}" for u in dep.unresolved),
            bootstrap_stack=dep.bootstrap_stack,
        )
    if stack.base.bootstrap:
        ref = bases.bootstrap_ref(t.stack, stack)
        return _Base(ref, ref, "", bootstrap_stack=t.stack)
    locked_digest = lock.base(t.stack).digest
    from_ref, ok = bases.registry_ref(stack, locked_digest)
    reg = stack.base.from_registry
    base_name, base_digest = f"{reg.image}:{reg.tag}", reg.digest or locked_digest or ""
    if not ok:
        return _Base(
            from_ref,
            base_name,
            base_digest,
            (f"base image {reg.image}:{reg.tag} has no digest",),
        )
    stale = lockfile.apt_sources_stale(lock, m, t.stack)
    if stale:
        return _Base(from_ref, base_name, base_digest, (stale,))
    # FROM names the base through a build argument whose default is the upstream reference:
    # a build through a registry mirror passes the mirror's reference for the same digest.
    return _Base(
        "${" + bases.BASE_ARG + "}",
        base_name,
        base_digest,
        registry_base=PinnedImage(reg.image, base_digest),
        base_arg=BaseArg(bases.BASE_ARG, from_ref),
    )


def _labels(m: Matrix, name: str, base_name: str, base_digest: str) -> dict[str, str]:
    t = m.targets[name]
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.description": t.description,
        "org.opencontainers.image.version": t.version,
        "org.opencontainers.image.created": iso_utc(t.source_date_epoch),
        "org.opencontainers.image.vendor": m.project.vendor,
        "org.opencontainers.image.base.name": base_name,
        "io.rocmforge.target": name,
        "io.rocmforge.stack": t.stack,
        "io.rocmforge.rocm": m.stacks[t.stack].rocm,
        "io.rocmforge.archs": ",".join(t.archs),
        archprune.LABEL: "true" if m.prunes(name) else "false",
    }
    versions = {c: m.components[c].label_version() for c in t.components}
    versions = {c: v for c, v in versions.items() if v}
    if versions:
        labels["io.rocmforge.components"] = ",".join(f"{k}={v}" for k, v in sorted(versions.items()))
    if base_digest:
        labels["org.opencontainers.image.base.digest"] = base_digest
    if m.project.source:
        labels["org.opencontainers.image.source"] = m.project.source
    return labels


def require_resolved(tp: TargetPlan, field: str = "--target") -> None:
    """The one gate of every command that builds, or needs a build of, a target: a target whose pins are
    unresolved renders `@sha256:UNRESOLVED` on purpose, so it is refused here, before the engine is asked."""
    if tp.unresolved:
        raise UserError(
            f"target {tp.name!r} cannot be built until its pins are resolved:\n"
            + "".join(f"  - {u}\n" for u in tp.unresolved)
            + lock_needs(tp.name, tp.unresolved),
            field=field,
        )


def lock_needs(name: str, unresolved: Iterable[str]) -> str:
    """How to resolve what a target lacks and what that takes, said once (not after each reason):
    lock itself is what resolves them, so the advice names what lock needs, never lock again."""
    needs = ["the Docker engine (lock resolves apt and pip inside the base images)"]
    registry = next((u for u in unresolved if u.startswith("base image ") and u.endswith(" has no digest")), None)
    if registry is not None:
        image = registry.removeprefix("base image ").removesuffix(" has no digest").rsplit(":", 1)[0]
        needs.append(f"the registry of {image}, or a mirror of it: ROCMFORGE_REGISTRY_MIRROR=HOST[:PORT]")
    needs.append("the package indexes its apt sources and pip name")
    needs.append('the git hosts of its git sources, or mirrors: ROCMFORGE_GIT_MIRRORS="UPSTREAM=MIRROR ..."')
    return f"`{program.command('lock --target ' + name)}` resolves them into matrix.lock; it needs:" + "".join(
        f"\n  - {n}" for n in needs
    )


def load_plan(matrix_path: Path | str) -> BuildPlan:
    """The plan for a matrix file and the matrix.lock beside it."""
    matrix_path = Path(matrix_path)
    return make_plan(
        load_matrix(matrix_path), matrix_path.resolve().parent, lockfile.load(matrix_path.with_suffix(".lock"))
    )
