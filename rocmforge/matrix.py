"""matrix.yaml → typed, cross-checked Matrix. Pure: no engine, no network."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import yamlsrc
from .errors import UserError

GFX_RE = re.compile(r"^gfx(?:[0-9]{3}[0-9a-f]?|[0-9]{2}[0-9a-f]|[0-9]+-[0-9]+-generic|[0-9]+-generic)$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# Debian policy: package names are lower case alphanumerics plus + - . (at least two chars).
APT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
APT_VERSION_RE = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
PIP_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
SETTINGS_EXTS = (".json", ".yaml", ".yml")  # the formats render.py can write


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Gpu(Strict):
    name: str
    integrated: bool = False
    fp32_tflops: float | None = None
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

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST_RE.match(v):
            raise ValueError("must be 'sha256:' followed by 64 lower-case hex digits, or null until locked")
        return v

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
    def _one(self) -> "Base":
        if (self.bootstrap is None) == (self.registry is None):
            raise ValueError("a base is exactly one of 'bootstrap' (a debootstrap recipe) or 'registry' (image by digest)")
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
    pytorch: str | None = None           # the torch the base image ships (registry stacks)
    pytorch_build: Literal["rocm", "cpu"] = "rocm"
    base: Base
    apt: dict[str, str | None] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    # Where this stack keeps its GPU libraries (paths or globs), for the linkage and arch suites.
    gpu_libraries: list[str] = Field(default_factory=list)
    # The interpreter every Python step calls by path: images with several Pythons on PATH (a conda
    # env with torch beside a newer one without it) must not depend on PATH order.
    python_bin: str = "/usr/bin/python3"
    # Extra -D options for CMake builds of HIP code on this stack's layout (e.g. Debian's).
    cmake_args: dict[str, str] = Field(default_factory=dict)
    runner: Runner = Field(default_factory=Runner)


class GitSource(Strict):
    url: str
    ref: str
    commit: str | None = None

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is not None and not COMMIT_RE.match(v):
            raise ValueError("must be a 40-character lower-case commit hash, or null until locked")
        return v


class Component(Strict):
    description: str = ""
    kind: Literal["hip-program", "cmake-wheel", "python-env", "settings"]
    version: str | None = None
    source: GitSource | None = None
    program: str | None = None           # hip-program: file under probes/
    link: list[str] = Field(default_factory=list)
    builder_apt: list[str] = Field(default_factory=list)
    requirements: dict[str, str] = Field(default_factory=dict)
    files: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kind_fields(self) -> "Component":
        need = {"hip-program": ["program"], "cmake-wheel": ["source", "version"],
                "python-env": ["requirements"], "settings": ["files"]}[self.kind]
        for name in need:
            if not getattr(self, name):
                raise ValueError(f"a {self.kind} component needs '{name}'")
        return self


class Target(Strict):
    description: str = ""
    stack: str
    archs: list[str]
    source_date_epoch: int = Field(ge=0)
    version: str
    devel: bool = False
    from_target: str | None = None      # built on another target's image
    builder: str | None = None          # another target's image used as the builder stage
    apt: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # The torch this target's own packages bring (e.g. Debian's python3-torch); else its stack's.
    pytorch: str | None = None
    pytorch_build: Literal["rocm", "cpu"] | None = None
    runner: Runner | None = None        # else its stack's

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a target needs at least one GPU architecture (gfx name)")
        for a in v:
            if not GFX_RE.match(a):
                raise ValueError(f"{a!r} is not a gfx architecture name (e.g. gfx90a, gfx1100)")
        if len(set(v)) != len(v):
            raise ValueError("architectures repeat")
        return v


class Project(Strict):
    name: str
    vendor: str
    source: str = ""
    description: str = ""


class Matrix(Strict):
    schema_version: Literal[1] = Field(alias="schema")
    project: Project
    gpus: dict[str, Gpu]
    baselines: Baselines
    stacks: dict[str, Stack]
    components: dict[str, Component] = Field(default_factory=dict)
    targets: dict[str, Target]

    def order(self, names: list[str] | None = None) -> list[str]:
        """Targets in build order (dependencies first), restricted to names and their prerequisites."""
        seen: list[str] = []

        def visit(n: str) -> None:
            if n in seen:
                return
            for dep in self.deps(n):
                visit(dep)
            seen.append(n)

        for n in names if names is not None else sorted(self.targets):
            visit(n)
        return seen

    def torch_of(self, name: str) -> tuple[str | None, str]:
        """The torch version a target's image must carry (None: no torch) and its build (rocm or cpu)."""
        t = self.targets[name]
        stack = self.stacks[t.stack]
        while t is not None:
            if t.pytorch:
                return t.pytorch, t.pytorch_build or "rocm"
            t = self.targets[t.from_target] if t.from_target else None
        return stack.pytorch, stack.pytorch_build

    def runner_of(self, name: str) -> Runner:
        t = self.targets[name]
        return t.runner or self.stacks[t.stack].runner

    def level(self, name: str) -> int:
        """0 for a target with no prerequisites, else one more than its deepest prerequisite."""
        return max((self.level(d) + 1 for d in self.deps(name)), default=0)

    def deps(self, name: str) -> list[str]:
        t = self.targets[name]
        return [d for d in (t.builder, t.from_target) if d]


def _check_refs(m: Matrix, src: yamlsrc.SourceMap) -> None:
    """Checks that span sections; each raises with the line of the offending field."""
    if not m.targets:
        raise src.error(("targets",), "no targets: the matrix must define at least one (render would empty images/)")
    for name in m.targets:
        if not NAME_RE.match(name):
            raise src.error(("targets", name), "target names are lower-case letters, digits, '.', '_' and '-'")
    for sname, st in m.stacks.items():
        for pkg, ver in st.apt.items():
            if not APT_NAME_RE.match(pkg):
                raise src.error(("stacks", sname, "apt", pkg), f"{pkg!r} is not a Debian package name")
            if ver is None or str(ver).strip() == "":
                raise src.error(("stacks", sname, "apt", pkg), f"apt package {pkg!r} has no version: every package is pinned name=version")
            if not APT_VERSION_RE.match(str(ver)):
                raise src.error(("stacks", sname, "apt", pkg), f"{ver!r} is not a Debian version")
    for cname, comp in m.components.items():
        for req, ver in comp.requirements.items():
            if not PIP_VERSION_RE.match(ver):
                raise src.error(("components", cname, "requirements", req), f"{ver!r} is not an exact version (write e.g. '4.44.2')")
        for fname in comp.files:
            if not fname.endswith(SETTINGS_EXTS):
                raise src.error(("components", cname, "files", fname), f"settings file {fname!r} must end in {', '.join(SETTINGS_EXTS)}")
    for gname in m.gpus:
        if not GFX_RE.match(gname):
            raise src.error(("gpus", gname), f"{gname!r} is not a gfx architecture name")
    if m.baselines.gpu not in m.gpus:
        raise src.error(("baselines", "gpu"), f"unknown GPU {m.baselines.gpu!r} (not in 'gpus')")
    for tname, t in m.targets.items():
        if t.stack not in m.stacks:
            raise src.error(("targets", tname, "stack"), f"unknown stack {t.stack!r}; known: {', '.join(sorted(m.stacks))}")
        stack = m.stacks[t.stack]
        for key in ("from_target", "builder"):
            ref = getattr(t, key)
            if ref is None:
                continue
            if ref not in m.targets:
                raise src.error(("targets", tname, key), f"unknown target {ref!r}")
            if m.targets[ref].stack != t.stack:
                raise src.error(("targets", tname, key), f"target {ref!r} is on stack {m.targets[ref].stack!r}, not {t.stack!r}")
        if t.builder and not m.targets[t.builder].devel:
            raise src.error(("targets", tname, "builder"), f"builder target {t.builder!r} is not a devel image (devel: true)")
        for i, pkg in enumerate(t.apt):
            if pkg not in stack.apt:
                raise src.error(("targets", tname, "apt", i), f"apt package {pkg!r} has no pinned version in stack {t.stack!r} (add it under stacks.{t.stack}.apt)")
        for i, cname in enumerate(t.components):
            if cname not in m.components:
                raise src.error(("targets", tname, "components", i), f"unknown component {cname!r}")
            comp = m.components[cname]
            for j, pkg in enumerate(comp.builder_apt):
                if pkg not in stack.apt:
                    raise src.error(("components", cname, "builder_apt", j), f"apt package {pkg!r} has no pinned version in stack {t.stack!r} (used by target {tname!r})")
            if comp.kind == "hip-program" and not (t.builder or stack.base.registry):
                raise src.error(("targets", tname, "components", i), f"component {cname!r} compiles HIP code: the target needs a 'builder' devel target")
        if len(set(t.components)) != len(t.components):
            raise src.error(("targets", tname, "components"), "components repeat")
    # Cycles: walk dependencies with an explicit stack so the first cycle is named in full,
    # at the field (builder or from_target) that leaves the cycle's first target.
    for start in m.targets:
        path: list[str] = []
        via: list[str | None] = []

        def walk(n: str, key: str | None) -> None:
            if n in path:
                i = path.index(n)
                cycle = path[i:] + [n]
                raise src.error(("targets", path[i], (via + [key])[i + 1]), "dependency cycle: " + " -> ".join(cycle))
            path.append(n)
            via.append(key)
            t = m.targets[n]
            for k in ("builder", "from_target"):
                if getattr(t, k):
                    walk(getattr(t, k), k)
            path.pop()
            via.pop()

        walk(start, None)


def _pydantic_message(err: dict) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    msg = err.get("msg", "invalid value")
    got = err.get("input")
    if kind == "string_type" and isinstance(got, (int, float)) and not isinstance(got, bool):
        msg += f" (YAML read {got!r} as a number: quote it)"
    elif kind.endswith("_type") and (got is None or isinstance(got, (str, int, float, bool))) and len(repr(got)) <= 60:
        msg += f", not {got!r}"
    return msg.removeprefix("Value error, ")


def load_matrix(path: Path | str) -> Matrix:
    path = Path(path)
    data, src = yamlsrc.load(path)
    if not isinstance(data, dict):
        raise UserError("the matrix must be a mapping (schema, project, gpus, baselines, stacks, components, targets)", file=src.name, line=1)
    try:
        m = Matrix.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "int", "bool", "float", "list[str]", "dict[str,str]", "function-after[_one(), Base]", "[key]"))
                    and not str(p).startswith(("function-", "constrained-", "lax-", "union[")))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise src.error(loc, _pydantic_message(err) + more) from None
    _check_refs(m, src)
    return m
