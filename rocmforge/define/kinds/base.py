"""What every component kind provides. A kind is one module under rocmforge/define/kinds/ holding its
matrix model, its checks, the plan it makes for one target from what the lock holds for it (template
variables, build-context files, what to fetch, what is unresolved) and what `lock` must resolve for
it; data/templates/kinds/<kind>.j2 is its partial. Kinds describe; the resolve stage runs what they
describe (resolve.entries, resolve.inputs). matrix.py, plan.py and the resolve stage call these hooks
and never test a kind's name, so a component of an existing kind is added in matrix.yaml alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rocmforge.define.schema import Strict

if TYPE_CHECKING:
    from rocmforge.define.schema import Stack, Target
    from rocmforge.shared.yamlsrc import SourceMap


@dataclass(frozen=True)
class FetchItem:
    """A host-side input of a build that a kind describes; resolve.inputs fetches it (or takes it
    from the cache) when the build starts."""

    component: str


@dataclass(frozen=True)
class LockEntry:
    """What `build.py lock` must resolve for a component, and `lock --check` check again, as the kind
    describes it; resolve.entries runs each kind of entry."""

    component: str


class LockedWheel(Protocol):
    """One wheel of an environment's locked closure (resolve.lockmodel.PythonFile is one)."""

    version: str
    sha256: list[str]


class HeldTorch(Protocol):
    """The torch family a torch image already has (resolve.lockmodel.HeldEntry is one)."""

    packages: dict[str, str]
    torch_version: str
    torch_hip: str | None


@dataclass(frozen=True)
class ComponentLock:
    """What matrix.lock holds for one component, as its kind's plan reads it; resolve.lockfile's
    component_lock makes it, so kinds never read the lock's file or model."""

    commit: str | None = None  # git.<component>
    wheels: Mapping[str, LockedWheel] = field(default_factory=dict)  # python.<component>
    held: HeldTorch | None = None  # held.<component>


@dataclass(frozen=True)
class ComponentPlan:
    """What one component brings to one target's build, given the lock."""

    template_vars: dict[str, Any] = field(default_factory=dict)  # for its partial, beside name, spec, stage
    files: dict[str, bytes] = field(default_factory=dict)  # added to the build context
    fetches: tuple[FetchItem, ...] = ()
    unresolved: tuple[str, ...] = ()
    # Listed after the base's and the builder's problems: the order rendered Dockerfiles carry.
    unresolved_source: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetUse:
    """One target that lists the component: what a kind's plan and checks may depend on."""

    name: str
    index: int  # the component's place in the target's `components`
    target: Target
    stack: Stack
    # The image carries torch (Python environments are held to it); None while the matrix is
    # checked, before its from_target chains are known to be sound.
    has_torch: bool | None = None


class ComponentKind(Strict):
    """The fields and hooks every kind shares; each kind adds `kind: Literal[...]` and its own fields."""

    description: str = ""
    # Its stage leaves wheels in /dist/, which every Python environment of the target installs.
    builds_wheel: ClassVar[bool] = False

    def check(self, name: str, src: SourceMap) -> None:
        """Checks of the component alone, beyond its types; each raises at the offending field."""

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        """Checks of the component as one target uses it."""

    def label_version(self) -> str | None:
        """The version the image's io.rocmforge.components label records, if any."""
        return None

    def plan(self, name: str, locked: ComponentLock, use: TargetUse) -> ComponentPlan:
        """What the component brings to one target's build, given what the lock holds for it."""
        return ComponentPlan()

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        """What `lock` resolves for the component (resolve.entries runs them)."""
        return ()


class WithoutBuilderApt(ComponentKind):
    """A kind whose stage installs no apt packages of its own (lockfile.apt_steps asks every component)."""

    builder_apt: ClassVar[tuple[str, ...]] = ()


def check_builder_apt(name: str, packages: Sequence[str], use: TargetUse, src: SourceMap) -> None:
    """Each apt package a component's builder stage installs must be pinned in the target's stack."""
    for j, pkg in enumerate(packages):
        if pkg not in use.stack.apt:
            raise src.error(
                ("components", name, "builder_apt", j),
                f"apt package {pkg!r} has no pinned version in stack {use.target.stack!r} "
                f"(used by target {use.name!r})",
            )
