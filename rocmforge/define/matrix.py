"""matrix.yaml → typed, cross-checked Matrix. Pure: no engine, no network."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from rocmforge.define.kinds import KIND_NAMES, Component, TargetUse, kinds_with_field
from rocmforge.define.schema import (
    APT_NAME_RE,
    APT_VERSION_RE,
    GFX_RE,
    NAME_RE,
    Baselines,
    Gpu,
    Project,
    Runner,
    Stack,
    Strict,
    Target,
    TorchPin,
)
from rocmforge.shared import yamlsrc
from rocmforge.shared.errors import UserError


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

    def torch_of(self, name: str) -> TorchPin:
        """The torch version a target's image must carry (None: no torch) and its build (rocm or cpu)."""
        t: Target | None = self.targets[name]
        stack = self.stacks[self.targets[name].stack]
        while t is not None:
            if t.pytorch:
                return TorchPin(t.pytorch, t.pytorch_build or "rocm")
            t = self.targets[t.from_target] if t.from_target else None
        return TorchPin(stack.pytorch, stack.pytorch_build)

    def prunes(self, name: str) -> bool:
        """Has a prune step run over the whole image: its own package step (which walks every GPU
        library folder, inherited ones too) or that of the image it is built on?"""
        t = self.targets[name]
        parent = t.from_target is not None and self.prunes(t.from_target)
        return t.prune_archs and (bool(t.apt) or parent)

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
    _check_stack_pins(m, src)
    for cname, comp in m.components.items():
        comp.check(cname, src)
    for gname in m.gpus:
        if not GFX_RE.match(gname):
            raise src.error(("gpus", gname), f"{gname!r} is not a gfx architecture name")
    if m.baselines.gpu not in m.gpus:
        raise src.error(("baselines", "gpu"), f"unknown GPU {m.baselines.gpu!r} (not in 'gpus')")
    for tname in m.targets:
        _check_target(m, tname, src)
    _check_cycles(m, src)
    for sname, st in m.stacks.items():
        if st.base.registry and st.apt_sources is None:
            raise src.error(
                ("stacks", sname, "base"),
                "a registry base needs 'apt_sources' beside it: what happens to "
                "the apt lists the image ships (keep: true, drop: [LIST], or replace: {LIST: 'deb URL SUITE "
                "COMPONENT'}); AMD's images have shipped lists whose hosts do not answer",
            )


def _check_stack_pins(m: Matrix, src: yamlsrc.SourceMap) -> None:
    for sname, st in m.stacks.items():
        if st.base.bootstrap and st.apt_sources is not None:
            raise src.error(
                ("stacks", sname, "apt_sources"),
                "a bootstrapped base has only the sources rocmforge writes: apt_sources is for registry bases",
            )
        for pkg, ver in st.apt.items():
            if not APT_NAME_RE.match(pkg):
                raise src.error(("stacks", sname, "apt", pkg), f"{pkg!r} is not a Debian package name")
            if ver is None or str(ver).strip() == "":
                raise src.error(
                    ("stacks", sname, "apt", pkg),
                    f"apt package {pkg!r} has no version: every package is pinned name=version",
                )
            if not APT_VERSION_RE.match(str(ver)):
                raise src.error(("stacks", sname, "apt", pkg), f"{ver!r} is not a Debian version")


def _check_target(m: Matrix, tname: str, src: yamlsrc.SourceMap) -> None:
    t = m.targets[tname]
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
            raise src.error(
                ("targets", tname, key), f"target {ref!r} is on stack {m.targets[ref].stack!r}, not {t.stack!r}"
            )
    if stack.gpu_archs is not None and set(t.archs) - set(stack.gpu_archs):
        odd = [a for a in t.archs if a not in stack.gpu_archs]
        raise src.error(
            ("targets", tname, "archs"),
            f"target {tname!r} declares {', '.join(odd)}, for which the "
            f"packages of stack {t.stack!r} ship no GPU code; they ship {', '.join(stack.gpu_archs)}",
        )
    parent = m.targets.get(t.from_target) if t.from_target else None
    if parent is not None and parent.prune_archs and set(t.archs) - set(parent.archs):
        odd = [a for a in t.archs if a not in parent.archs]
        raise src.error(
            ("targets", tname, "archs"),
            f"target {tname!r} declares {', '.join(odd)}, but it is built on "
            f"{t.from_target!r}, whose image keeps GPU files only for {', '.join(parent.archs)} "
            f"(add them there, or set prune_archs: false on {t.from_target!r})",
        )
    _check_variants(m, tname, src)
    if t.builder and not m.targets[t.builder].devel:
        raise src.error(
            ("targets", tname, "builder"), f"builder target {t.builder!r} is not a devel image (devel: true)"
        )
    for i, pkg in enumerate(t.apt):
        if pkg not in stack.apt:
            raise src.error(
                ("targets", tname, "apt", i),
                f"apt package {pkg!r} has no pinned version in stack {t.stack!r} (add it under stacks.{t.stack}.apt)",
            )
    for i, cname in enumerate(t.components):
        if cname not in m.components:
            raise src.error(("targets", tname, "components", i), f"unknown component {cname!r}")
        m.components[cname].check_in_target(cname, TargetUse(tname, i, t, stack), src)
    if len(set(t.components)) != len(t.components):
        raise src.error(("targets", tname, "components"), "components repeat")


def variant_suffix(archs: Iterable[str]) -> str:
    """What a variant adds to its target's name and readable tag: `-gfx1100`."""
    return "".join(f"-{a}" for a in archs)


def _check_variants(m: Matrix, tname: str, src: yamlsrc.SourceMap) -> None:
    t = m.targets[tname]
    for i, group in enumerate(t.variants):
        where, shown = ("targets", tname, "variants", i), f"variant [{', '.join(group)}] of target {tname!r}"
        odd = [a for a in group if a not in t.archs]
        if odd:
            raise src.error(
                where,
                f"{shown} names {', '.join(odd)}, which the target does not declare (its archs: {', '.join(t.archs)})",
            )
        if set(group) == set(t.archs):
            raise src.error(where, f"{shown} is the target's own archs: the main image already is that image")
        if not m.prunes(tname):
            raise src.error(
                where,
                f"target {tname!r} keeps every arch's GPU files (prune_archs: false, or no package "
                "step of its own or below it), so a variant would be the same image",
            )
        named = tname + variant_suffix(group)
        if named in m.targets:
            raise src.error(
                where, f"{shown} is named {named!r} (images/, tags, state files), which is another target's name"
            )
        parent = m.targets.get(t.from_target) if t.from_target else None
        if (
            parent is not None
            and t.from_target
            and m.prunes(t.from_target)
            and set(group) not in [set(g) for g in parent.variants]
        ):
            raise src.error(
                where,
                f"{shown} is built on the variant of the same archs of {t.from_target!r}, which "
                f"does not declare it (add [{', '.join(group)}] to its variants)",
            )


def _check_cycles(m: Matrix, src: yamlsrc.SourceMap) -> None:
    """Walks dependencies with an explicit stack so the first cycle is named in full, at the field
    (builder or from_target) that leaves the cycle's first target."""
    for start in m.targets:
        _walk_from(m, src, start)


def _walk_from(m: Matrix, src: yamlsrc.SourceMap, start: str) -> None:
    """Depth first from start, raising at the first cycle found."""
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


def _pydantic_message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind in ("missing", "union_tag_not_found"):
        return "required field is missing"
    if kind == "union_tag_invalid":
        *rest, last = (repr(k) for k in KIND_NAMES)
        return f"Input should be {', '.join(rest)} or {last}"
    msg = err.get("msg", "invalid value")
    got = err.get("input")
    if kind == "string_type" and isinstance(got, (int, float)) and not isinstance(got, bool):
        msg += f" (YAML read {got!r} as a number: quote it)"
    elif kind.endswith("_type") and (got is None or isinstance(got, (str, int, float, bool))) and len(repr(got)) <= 60:
        msg += f", not {got!r}"
    return msg.removeprefix("Value error, ")


def _component_error(loc: tuple, err: Mapping[str, Any]) -> tuple[tuple, str]:
    """pydantic places a component's errors under its kind (components.NAME.KIND.FIELD) and a bad or
    missing kind at the component: both are moved to the field the user wrote, and a field of
    another kind says which kind takes it."""
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return loc + ("kind",), _pydantic_message(err)
    kind = loc[2] if len(loc) >= 3 and loc[2] in KIND_NAMES else None
    if kind is None:
        return loc, _pydantic_message(err)
    loc = loc[:2] + loc[3:]
    owners = kinds_with_field(str(loc[2])) if err["type"] == "extra_forbidden" and len(loc) == 3 else []
    if owners:
        return loc, f"unknown field for a {kind} component ({loc[2]} belongs to {' and '.join(owners)} components)"
    return loc, _pydantic_message(err)


def load_matrix(path: Path | str) -> Matrix:
    """The checked Matrix of the matrix file at path. Raises UserError naming the file, line and field of
    the first problem (a missing or unreadable file, a wrong type or value, a name that refers to nothing)."""
    path = Path(path)
    data, src = yamlsrc.load(path)
    if not isinstance(data, dict):
        raise UserError(
            "the matrix must be a mapping (schema, project, gpus, baselines, stacks, components, targets)",
            file=src.name,
            line=1,
        )
    try:
        m = Matrix.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(
            p
            for p in err["loc"]
            if not (
                isinstance(p, str)
                and p
                in (
                    "str",
                    "int",
                    "bool",
                    "float",
                    "list[str]",
                    "dict[str,str]",
                    "function-after[_one(), Base]",
                    "[key]",
                )
            )
            and not str(p).startswith(("function-", "constrained-", "lax-", "union["))
        )
        loc, message = _component_error(loc, err) if loc[:1] == ("components",) else (loc, _pydantic_message(err))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise src.error(loc, message + more) from None
    _check_refs(m, src)
    return m
