"""Pure parser for `ldd` output."""

from __future__ import annotations

import re
from dataclasses import dataclass

# "libfoo.so.1 => /usr/lib/libfoo.so.1 (0x...)", "libbar.so.2 => not found",
# "linux-vdso.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)"
_ARROW = re.compile(r"^(\S+)\s+=>\s+(.*?)\s*(?:\((0x[0-9a-f]+)\))?$")
_BARE = re.compile(r"^(\S+)\s+\((0x[0-9a-f]+)\)$")


@dataclass(frozen=True)
class Dependency:
    name: str
    path: str | None
    status: str        # "found" | "not found" | "vdso"


@dataclass(frozen=True)
class LddResult:
    kind: str          # "dynamic" | "static" | "not dynamic" | "error"
    deps: tuple[Dependency, ...]
    message: str = ""

    @property
    def missing(self) -> list[str]:
        return [d.name for d in self.deps if d.status == "not found"]


def parse(text: str) -> LddResult:
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").splitlines() if ln.strip()]
    if any("statically linked" in ln for ln in lines):
        return LddResult("static", ())
    if any("not a dynamic executable" in ln for ln in lines):
        return LddResult("not dynamic", ())
    deps: list[Dependency] = []
    errors: list[str] = []
    for ln in lines:
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
    if not deps and errors:
        return LddResult("error", (), "; ".join(errors))
    return LddResult("dynamic", tuple(deps), "; ".join(errors))
