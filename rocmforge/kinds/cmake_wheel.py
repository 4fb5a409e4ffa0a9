"""cmake-wheel: a Python package with HIP code, compiled by CMake from a git source for exactly the
target's archs in a builder stage; only its wheel leaves that stage (templates/kinds/cmake-wheel.j2)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import ComponentPlan, LockEntry, TargetUse, WithoutBuilderApt
from .git_source import GitSource, GitSourceFetch, GitSourceLock


class CmakeWheel(WithoutBuilderApt):
    kind: Literal["cmake-wheel"]
    version: str = Field(min_length=1)
    source: GitSource
    package: str | None = None                 # its source folder (/src/<package>); else the component's name
    cmake_minimum: str | None = None           # checked before configuring, with a clear message
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    # The -D options that receive the target's archs (a ';' list).
    arch_defines: list[str] = Field(default_factory=lambda: ["CMAKE_HIP_ARCHITECTURES"])
    built_files: list[str] = Field(default_factory=list)   # globs under the source that the build must leave

    builds_wheel: ClassVar[bool] = True

    def label_version(self) -> str | None:
        return self.version

    def plan(self, name: str, lock: dict, use: TargetUse) -> ComponentPlan:
        commit = self.source.pinned_commit(name, lock)
        if not commit:
            return ComponentPlan(template_vars={"commit": None},
                                 unresolved_source=(self.source.unresolved_message(name),))
        return ComponentPlan(template_vars={"commit": commit},
                             fetches=(GitSourceFetch(name, self.source.url, commit),))

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        return (GitSourceLock(name, self.source),)
