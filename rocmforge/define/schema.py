"""The matrix's plain models (GPUs, stacks, targets, bases) and the patterns their fields match.
Imports nothing of the project, so component kinds and every later stage can name these types
without reaching matrix.py (which holds the Matrix itself, its cross-checks and the loader)."""

from __future__ import annotations

import re
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class TorchPin(NamedTuple):
    """The torch a target's image must carry (version None: none) and its build."""

    version: str | None
    build: str  # rocm or cpu


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def null_or_matching(field: str, pattern: re.Pattern, message: str) -> Any:
    """A validator of a pin that `build.py lock` may fill in: null, or a value matching pattern."""

    def check(cls, value: str | None) -> str | None:
        if value is not None and not pattern.match(value):
            raise ValueError(message)
        return value

    return field_validator(field)(check)


GFX_RE = re.compile(r"^gfx(?:[0-9]{3}[0-9a-f]?|[0-9]{2}[0-9a-f]|[0-9]+-[0-9]+-generic|[0-9]+-generic)$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# Debian policy: package names are lower case alphanumerics plus + - . (at least two chars).
APT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
APT_VERSION_RE = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")


class Gpu(Strict):
    name: str
    integrated: bool = False
    fp32_tflops: float | None = None
    fp32_matrix_tflops: float | None = None  # FP32 on matrix cores (CDNA), where SGEMM can run
    fp16_tflops: float | None = None
    bf16_tflops: float | None = None
    hbm_tbps: float | None = None
    notes: str = ""


class Baselines(Strict):
    """The seed's acceptance figures, which belong to one reference GPU."""

    gpu: str
    fp32_tflops: float
    fp16_tflops: float
    hbm_tbps: float


class BootstrapBase(Strict):
    suite: str
    variant: Literal["minbase", "buildd", "fakechroot"] = "minbase"
    include: list[str] = Field(default_factory=list)
    # The suite is served as a frozen snapshot whose Release file is past its Valid-Until date:
    # the base then carries an apt setting that accepts it (as for any snapshot archive).
    snapshot: bool = False


class RegistryBase(Strict):
    image: str
    tag: str
    digest: str | None = None

    _digest = null_or_matching(
        "digest", DIGEST_RE, "must be 'sha256:' followed by 64 lower-case hex digits, or null until locked"
    )

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if v == "latest":
            raise ValueError("'latest' is not a pin")
        return v


class Base(Strict):
    bootstrap: BootstrapBase | None = None
    registry: RegistryBase | None = None

    @model_validator(mode="after")
    def _one(self) -> Base:
        if (self.bootstrap is None) == (self.registry is None):
            raise ValueError(
                "a base is exactly one of 'bootstrap' (a debootstrap recipe) or 'registry' (image by digest)"
            )
        return self

    @property
    def from_registry(self) -> RegistryBase:
        """The registry base, for code that has found this is one (the validator makes it exactly one)."""
        if self.registry is None:
            raise ValueError("the base is bootstrapped, not a registry image")
        return self.registry

    @property
    def from_bootstrap(self) -> BootstrapBase:
        """The debootstrap recipe, for code that has found this base is bootstrapped."""
        if self.bootstrap is None:
            raise ValueError("the base is a registry image, not bootstrapped")
        return self.bootstrap


LIST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.list$")
# One one-line source: deb [options] URL SUITE COMPONENT...; no quotes (it is written by printf '...').
SOURCE_LINE_RE = re.compile(r"^deb (\[[^\]'\"]*\] )?https?://[^\s'\"]+ [^\s'\"]+( [^\s'\"]+)+$")


class AptSources(Strict):
    """What happens to the apt lists a registry base ships in /etc/apt/sources.list.d before any
    apt step: kept as they are, named lists dropped, or named lists replaced by one pinned line."""

    keep: bool = False
    drop: list[str] = Field(default_factory=list)
    replace: dict[str, str] = Field(default_factory=dict)  # list file -> its one source line

    @model_validator(mode="after")
    def _one_choice(self) -> AptSources:
        if self.keep == bool(self.drop or self.replace):
            raise ValueError("say either 'keep: true' or which lists to 'drop' and/or 'replace'")
        for name in [*self.drop, *self.replace]:
            if not LIST_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a file name in /etc/apt/sources.list.d (e.g. rocm.list)")
        both = sorted(set(self.drop) & set(self.replace))
        if both:
            raise ValueError(f"{both[0]} is both dropped and replaced")
        for name, line in self.replace.items():
            if not SOURCE_LINE_RE.match(line):
                raise ValueError(
                    f"replace {name}: {line!r} is not one source line "
                    "('deb [options] https://HOST/PATH SUITE COMPONENT', no quotes)"
                )
            if re.search(r"/latest(/|\s|$)", line):
                raise ValueError(
                    f"replace {name}: {line!r} names a moving 'latest' path; pin the version "
                    "(e.g. https://repo.radeon.com/rocm/apt/5.7)"
                )
        return self


class Runner(Strict):
    """Where CI builds a stack's targets: runner labels, and the free disk a build needs (GB)."""

    labels: list[str] = Field(default_factory=lambda: ["ubuntu-24.04"], min_length=1)
    disk_gb: int | None = Field(default=None, ge=1)


class Stack(Strict):
    description: str = ""
    os: str
    rocm: str
    python: str | None = None
    pytorch: str | None = None  # the torch the base image ships (registry stacks)
    pytorch_build: Literal["rocm", "cpu"] = "rocm"
    base: Base
    apt: dict[str, str | None] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    # Where this stack keeps its GPU libraries (paths or globs), for the linkage and arch suites.
    gpu_libraries: list[str] = Field(default_factory=list)
    # The interpreter every Python step calls by path: images with several Pythons on PATH (a conda
    # env with torch beside a newer one without it) must not depend on PATH order.
    python_bin: str = "/usr/bin/python3"
    # A registry base's own apt lists (AMD's images ship vendor lists whose hosts may be dead):
    # every registry stack states what happens to them; a bootstrapped base has only ours.
    apt_sources: AptSources | None = None
    # Extra -D options for CMake builds of HIP code on this stack's layout (e.g. Debian's).
    cmake_args: dict[str, str] = Field(default_factory=dict)

    def pinned(self, package: str) -> str:
        """An apt package's pinned version (the matrix check refuses a package without one)."""
        version = self.apt[package]
        if version is None:
            raise ValueError(f"apt package {package} has no version")
        return version

    @property
    def python_version(self) -> str:
        """The stack's CPython version, for code that needs one (a python-env's stack must state it)."""
        if self.python is None:
            raise ValueError("the stack states no python version")
        return self.python

    runner: Runner = Field(default_factory=Runner)
    # The archs every GPU library of the stack ships code for (read off the packages' files); a
    # target declaring another is refused. Unset where the packages cannot be read here.
    gpu_archs: list[str] | None = None

    @field_validator("gpu_archs")
    @classmethod
    def _gpu_archs(cls, v: list[str] | None) -> list[str] | None:
        for a in v or ():
            if not GFX_RE.match(a):
                raise ValueError(f"{a!r} is not a gfx architecture name (e.g. gfx90a, gfx1100)")
        return v


class Target(Strict):
    description: str = ""
    stack: str
    archs: list[str]
    source_date_epoch: int = Field(ge=0)
    version: str
    devel: bool = False
    from_target: str | None = None  # built on another target's image
    builder: str | None = None  # another target's image used as the builder stage
    apt: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # The torch this target's own packages bring (e.g. Debian's python3-torch); else its stack's.
    pytorch: str | None = None
    pytorch_build: Literal["rocm", "cpu"] | None = None
    runner: Runner | None = None  # else its stack's
    # Keep per-arch GPU data files (Tensile code objects and catalogues, MIOpen databases) only
    # for archs; false for an image meant to run on any GPU the packages support.
    prune_archs: bool = True
    # Arch groups, each built as its own image pruned to them, beside the all-archs main image:
    # a host pulls the smallest one that covers its GPUs.
    variants: list[list[str]] = Field(default_factory=list)

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a target needs at least one GPU architecture (gfx name)")
        _gfx_names(v)
        return v

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: list[list[str]]) -> list[list[str]]:
        for group in v:
            if not group:
                raise ValueError("a variant needs at least one GPU architecture")
            _gfx_names(group)
        if len({frozenset(g) for g in v}) != len(v):
            raise ValueError("variants repeat")
        return v


def _gfx_names(v: list[str]) -> None:
    for a in v:
        if not GFX_RE.match(a):
            raise ValueError(f"{a!r} is not a gfx architecture name (e.g. gfx90a, gfx1100)")
    if len(set(v)) != len(v):
        raise ValueError("architectures repeat")


class Project(Strict):
    name: str
    vendor: str
    source: str = ""
    description: str = ""
