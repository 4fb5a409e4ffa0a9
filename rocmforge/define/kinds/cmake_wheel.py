"""cmake-wheel: a Python package with HIP code, compiled by CMake from a git source for exactly the
target's archs in a builder stage; only its wheel leaves that stage (data/templates/kinds/cmake-wheel.j2)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from rocmforge.define.kinds.base import (
    ComponentKind,
    ComponentLock,
    ComponentPlan,
    LockEntry,
    TargetUse,
    check_builder_apt,
)
from rocmforge.define.kinds.git_source import GitSource, GitSourceFetch, GitSourceLock

if TYPE_CHECKING:
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
    package: str | None = None  # its source folder (/src/<package>); else the component's name
    cmake_minimum: str | None = None  # checked before configuring, with a clear message
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    # The -D options that receive the target's archs (a ';' list).
    arch_defines: list[str] = Field(default_factory=lambda: ["CMAKE_HIP_ARCHITECTURES"])
    # The one library file the build must leave, per HIP major.minor of the stack: the exact name the
    # package's loader looks for on that HIP version (a loader that finds no file may fall back to a
    # CPU library without a word, so a glob would not do).
    built_library: dict[str, str] = Field(default_factory=dict)
    builder_apt: list[str] = Field(
        default_factory=list
    )  # apt packages its builder stage installs first (pinned in the stack)

    builds_wheel: ClassVar[bool] = True

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        check_builder_apt(name, self.builder_apt, use, src)
        if self.built_library and hip_short(use.stack.rocm) not in self.built_library:
            raise src.error(
                ("components", name, "built_library"),
                f"no library named for HIP {hip_short(use.stack.rocm)} (stack {use.target.stack!r}, "
                f"target {use.name!r}): add the file the package's loader looks for on that version",
            )

    def library_for(self, rocm: str) -> str | None:
        return self.built_library.get(hip_short(rocm))

    def label_version(self) -> str | None:
        return self.version

    def plan(self, name: str, locked: ComponentLock, use: TargetUse) -> ComponentPlan:
        commit = self.source.pinned_commit(locked)
        if not commit:
            return ComponentPlan(
                template_vars={"commit": None, "library": self.library_for(use.stack.rocm)},
                unresolved_source=(self.source.unresolved_message(name),),
            )
        return ComponentPlan(
            template_vars={"commit": commit, "library": self.library_for(use.stack.rocm)},
            fetches=(GitSourceFetch(name, self.source.url, commit),),
        )

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        cmake = (CmakeToolLock(name, self.cmake_minimum, tuple(self.builder_apt)),) if self.cmake_minimum else ()
        return (GitSourceLock(name, self.source), *cmake)


@dataclass(frozen=True)
class CmakeToolLock(LockEntry):
    """At lock time, the CMake of a registry base whose builder stage brings none of its own: the
    fork's CMakeLists needs `minimum`, and finding out only when a build reaches its cmake step
    would be late. (Bootstrapped stacks pin cmake in their apt list; a builder target is an image
    built here, checked in its own build.)"""

    minimum: str
    builder_apt: tuple[str, ...]
