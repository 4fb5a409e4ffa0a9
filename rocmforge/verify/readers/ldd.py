"""Pure parser for `ldd` and `ldd -r` output. `ldd -r` also performs the relocations, so it names
undefined symbols ("undefined symbol: hipFoo, version hip_4.2\t(/path/librocblas.so.4)") and
symbol-version errors ("version `hip_4.2' not found (required by ...)"), which plain ldd lists
only as a message while the dependency still looks found."""

from __future__ import annotations

import re
from dataclasses import dataclass

# "libfoo.so.1 => /usr/lib/libfoo.so.1 (0x...)", "libbar.so.2 => not found",
# "linux-vdso.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)"
_ARROW = re.compile(r"^(\S+)\s+=>\s+(.*?)\s*(?:\((0x[0-9a-f]+)\))?$")
_BARE = re.compile(r"^(\S+)\s+\((0x[0-9a-f]+)\)$")
# "undefined symbol: hipFoo, version hip_4.2\t(/usr/lib/librocblas.so.4)" (ldd -r)
_UNDEFINED = re.compile(r"^undefined symbol:\s+([^\s,]+)(?:,\s+version\s+(\S+))?\s+\((.+)\)$")
# "/x/librocblas.so.4: /x/libamdhip64.so.6: version `hip_4.2' not found (required by /x/librocblas.so.4)"
_VERSION = re.compile(r"^(?:(\S+):\s+)?(\S+):\s+version `([^']+)' not found \(required by (.+)\)$")
# Warnings that do not stop a load.
_HARMLESS = ("no version information available",)


@dataclass(frozen=True)
class Dependency:
    name: str
    path: str | None
    status: str  # "found" | "not found" | "vdso"


@dataclass(frozen=True)
class Undefined:
    symbol: str
    version: str | None
    file: str  # the object that needs the symbol

    def __str__(self) -> str:
        return f"{self.file}: undefined symbol {self.symbol}" + (f" (version {self.version})" if self.version else "")


@dataclass(frozen=True)
class VersionError:
    library: str  # the library that lacks the version
    version: str
    required_by: str

    def __str__(self) -> str:
        return f"{self.required_by}: needs version {self.version} of {self.library}, which does not define it"


@dataclass(frozen=True)
class LddResult:
    kind: str  # "dynamic" | "static" | "not dynamic" | "error"
    deps: tuple[Dependency, ...]
    message: str = ""
    undefined: tuple[Undefined, ...] = ()
    version_errors: tuple[VersionError, ...] = ()

    @property
    def missing(self) -> list[str]:
        return [d.name for d in self.deps if d.status == "not found"]

    @property
    def problems(self) -> list[str]:
        """Everything that stops a load, one line each, naming the file and the library or symbol."""
        return (
            [f"{m} not found" for m in self.missing]
            + [str(v) for v in self.version_errors]
            + [str(u) for u in self.undefined]
            + ([self.message] if self.kind == "error" else [])
        )


def parse(text: str) -> LddResult:
    """What `ldd` or `ldd -r` printed: the kind of file, its dependencies and what stops it loading."""
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").splitlines() if ln.strip()]
    if any("not a dynamic executable" in ln for ln in lines):
        return LddResult("not dynamic", ())
    static = any("statically linked" in ln for ln in lines)
    deps: list[Dependency] = []
    undefined: list[Undefined] = []
    versions: list[VersionError] = []
    errors: list[str] = []
    for ln in lines:
        if "statically linked" in ln or any(h in ln for h in _HARMLESS):
            continue
        m = _UNDEFINED.match(ln)
        if m:
            undefined.append(Undefined(m.group(1), m.group(2), m.group(3)))
            continue
        m = _VERSION.match(ln)
        if m:
            versions.append(VersionError(m.group(2), m.group(3), m.group(4)))
            continue
        m = _ARROW.match(ln)
        if m:
            name, target = m.group(1), m.group(2)
            if target == "not found":
                deps.append(Dependency(name, None, "not found"))
            else:
                deps.append(Dependency(name, target or None, "found" if target else "vdso"))
            continue
        m = _BARE.match(ln)
        if m:
            name = m.group(1)
            vdso = "vdso" in name
            deps.append(Dependency(name, None if vdso else name, "vdso" if vdso else "found"))
            continue
        errors.append(ln)
    if static:
        return LddResult("static", (), "; ".join(errors), undefined=tuple(undefined), version_errors=tuple(versions))
    if not deps and errors and not undefined and not versions:
        return LddResult("error", (), "; ".join(errors))
    return LddResult(
        "dynamic", tuple(deps), "; ".join(errors), undefined=tuple(undefined), version_errors=tuple(versions)
    )
