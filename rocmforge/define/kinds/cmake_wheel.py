"""cmake-wheel: a Python package with HIP code, compiled by CMake from a git source for exactly the
target's archs in a builder stage; only its wheel leaves that stage (data/templates/kinds/cmake-wheel.j2)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from rocmforge.define.kinds.base import ComponentKind, ComponentPlan, LockContext, LockEntry, TargetUse
from rocmforge.define.kinds.git_source import GitSource, GitSourceFetch, GitSourceLock
from rocmforge.host.container import TrackedContainer

if TYPE_CHECKING:
    from rocmforge.resolve.lockmodel import Lock
    from rocmforge.shared.yamlsrc import SourceMap

HIP_SHORT_RE = re.compile(r"^([0-9]+)\.([0-9]+)")


def hip_short(rocm: str) -> str:
    """A stack's ROCm version as the key of built_library: major.minor ("5.7.0" -> "5.7")."""
    m = HIP_SHORT_RE.match(rocm)
    return f"{m.group(1)}.{m.group(2)}" if m else rocm


class CmakeWheel(ComponentKind):
    kind: Literal["cmake-wheel"]
    version: str = Field(min_length=1)
    source: GitSource
    package: str | None = None                 # its source folder (/src/<package>); else the component's name
    cmake_minimum: str | None = None           # checked before configuring, with a clear message
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    # The -D options that receive the target's archs (a ';' list).
    arch_defines: list[str] = Field(default_factory=lambda: ["CMAKE_HIP_ARCHITECTURES"])
    # The one library file the build must leave, per HIP major.minor of the stack: the exact name the
    # package's loader looks for on that HIP version (a loader that finds no file may fall back to a
    # CPU library without a word, so a glob would not do).
    built_library: dict[str, str] = Field(default_factory=dict)
    builder_apt: list[str] = Field(default_factory=list)   # apt packages its builder stage installs first (pinned in the stack)

    builds_wheel: ClassVar[bool] = True

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        for j, pkg in enumerate(self.builder_apt):
            if pkg not in use.stack.apt:
                raise src.error(("components", name, "builder_apt", j),
                                f"apt package {pkg!r} has no pinned version in stack {use.target.stack!r} "
                                f"(used by target {use.name!r})")
        if self.built_library and hip_short(use.stack.rocm) not in self.built_library:
            raise src.error(("components", name, "built_library"),
                            f"no library named for HIP {hip_short(use.stack.rocm)} (stack {use.target.stack!r}, "
                            f"target {use.name!r}): add the file the package's loader looks for on that version")

    def library_for(self, rocm: str) -> str | None:
        return self.built_library.get(hip_short(rocm))

    def label_version(self) -> str | None:
        return self.version

    def plan(self, name: str, lock: Lock, use: TargetUse) -> ComponentPlan:
        commit = self.source.pinned_commit(name, lock)
        if not commit:
            return ComponentPlan(template_vars={"commit": None, "library": self.library_for(use.stack.rocm)},
                                 unresolved_source=(self.source.unresolved_message(name),))
        return ComponentPlan(template_vars={"commit": commit, "library": self.library_for(use.stack.rocm)},
                             fetches=(GitSourceFetch(name, self.source.url, commit),))

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        return (GitSourceLock(name, self.source),) + ((CmakeToolLock(name, self),) if self.cmake_minimum else ())


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", v)[:3])


@dataclass(frozen=True, eq=False)
class CmakeToolLock:
    """At lock time, the CMake of a registry base whose builder stage brings none of its own: the
    fork's CMakeLists needs cmake_minimum, and finding out only when a build reaches its cmake step
    would be late. (Bootstrapped stacks pin cmake in their apt list; a builder target is an image
    built here, checked in its own build.)"""
    component: str
    spec: CmakeWheel

    def resolve(self, run: LockContext) -> None:
        minimum = self.spec.cmake_minimum
        if not minimum or "cmake" in self.spec.builder_apt:
            return
        for tname in run.names:
            t = run.matrix.targets[tname]
            stack = run.matrix.stacks[t.stack]
            if self.component not in t.components or t.builder or t.from_target or not stack.base.registry:
                continue
            try:
                image = run.base_image(t.stack)
            except RuntimeError:
                return   # the base's own failure is reported by its entry
            with TrackedContainer(run.client, image) as tc:
                r = tc.exec(["sh", "-c", "p=$(command -v cmake) && echo \"$p\" && cmake --version"])
            lines = r.stdout.split("\n") if r.rc == 0 else []
            found = next((ln.split()[-1] for ln in lines if ln.startswith("cmake version")), None)
            if found and _version_tuple(found) >= _version_tuple(minimum):
                continue
            have = f"CMake {found} at {lines[0]}" if found else "no cmake on PATH"
            run.out.failed.append(
                f"cmake {self.component}: stack {t.stack} (target {tname}): the base {image} has {have}; "
                f"the fork needs CMake >= {minimum}: pin a cmake >= {minimum} under stacks.{t.stack}.apt and add it "
                f"to components.{self.component}.builder_apt")
            return

    def check(self, run: LockContext) -> None:
        """Nothing pinned to compare: `lock` looks at the base itself."""
