"""What every component kind provides. A kind is one module under rocmforge/define/kinds/ holding its
matrix model, the plan it makes for one target from the lock (template variables, build-context
files, fetch items, what is unresolved), its lock entries and its checks; data/templates/kinds/<kind>.j2
is its partial. matrix.py, plan.py, render.py and lock.py call these hooks and never test a kind's
name, so a component of an existing kind is added in matrix.yaml alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol

from rocmforge.define.schema import Strict

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.resolve.lockmodel import Lock
    from rocmforge.define.schema import Stack, Target, TorchPin
    from rocmforge.shared.yamlsrc import SourceMap


class FetchItem(Protocol):
    """A host-side input of a build, fetched (or taken from the cache) when the build starts."""

    def fetch(self, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
        """Build-context-relative path → bytes; raises fetch.FetchError."""
        ...


class MatrixView(Protocol):
    """The part of the matrix a lock entry reads (define.matrix.Matrix is one)."""
    targets: Mapping[str, Target]
    stacks: Mapping[str, Stack]
    components: Mapping[str, Any]

    def torch_of(self, name: str) -> TorchPin: ...


class LockOutcome(Protocol):
    """Where a lock entry reports: one line per entry resolved, failed here, or found stale."""
    resolved: list[str]
    failed: list[str]
    problems: list[str]


class LockContext(Protocol):
    """What a component's lock entries resolve and check with; resolve.lock.LockRun provides it.
    Declared here so that kinds name it without importing the resolve stage, which imports them."""
    client: Engine
    matrix: MatrixView
    names: list[str]            # the targets the run covers, in build order
    lock: Lock                  # the lock being written (resolve) or read (check)
    out: LockOutcome
    work: Path
    ca_bundle: Path | None
    log: Callable[[str], None]

    def first_user(self, component: str) -> str: ...

    def base_image(self, stack_name: str) -> str: ...

    def builder_image_pins(self, target: str, component: str) -> tuple[list[tuple[str, str]], list[str]]: ...


class LockEntry(Protocol):
    """What `build.py lock` resolves for a component, and what `lock --check` checks again."""

    def resolve(self, run: LockContext) -> None: ...

    def check(self, run: LockContext) -> None: ...


@dataclass(frozen=True)
class ComponentPlan:
    """What one component brings to one target's build, given the lock."""
    template_vars: dict[str, Any] = field(default_factory=dict)   # for its partial, beside name, spec, stage
    files: dict[str, bytes] = field(default_factory=dict)         # added to the build context
    fetches: tuple[FetchItem, ...] = ()
    unresolved: tuple[str, ...] = ()
    # Listed after the base's and the builder's problems: the order rendered Dockerfiles carry.
    unresolved_source: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetUse:
    """One target that lists the component: what a kind's plan and checks may depend on."""
    name: str
    index: int                     # the component's place in the target's `components`
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

    def plan(self, name: str, lock: Lock, use: TargetUse) -> ComponentPlan:
        return ComponentPlan()

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        return ()


class WithoutBuilderApt(ComponentKind):
    """A kind whose stage installs no apt packages of its own (lockfile.apt_steps asks every component)."""
    builder_apt: ClassVar[tuple[str, ...]] = ()
