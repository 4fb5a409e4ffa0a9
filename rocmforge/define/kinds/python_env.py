"""python-env: exact pip requirements installed into a venv in a builder stage, offline from wheels
whose hashes the lock records; on a torch image the lock also holds that torch family, resolved in a
container of the image (data/templates/kinds/python-env.j2)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rocmforge.define.kinds.base import (
    ComponentKind,
    ComponentLock,
    ComponentPlan,
    FetchItem,
    LockedWheel,
    LockEntry,
    TargetUse,
    check_builder_apt,
)
from rocmforge.shared import packagedata

if TYPE_CHECKING:
    from rocmforge.shared.yamlsrc import SourceMap

ENTRY_POINTS_SCRIPT = packagedata.SCRIPTS / "venv_entry_points.py"
PIP_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")


class PythonEnv(ComponentKind):
    kind: Literal["python-env"]
    requirements: dict[str, str] = Field(min_length=1)
    builder_apt: list[str] = Field(default_factory=list)  # apt packages its builder stage installs first

    def check(self, name: str, src: SourceMap) -> None:
        for req, ver in self.requirements.items():
            if not PIP_VERSION_RE.match(ver):
                raise src.error(
                    ("components", name, "requirements", req), f"{ver!r} is not an exact version (write e.g. '4.44.2')"
                )

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        if use.stack.python is None:  # its wheels are resolved and fetched for that CPython version
            raise src.error(
                ("stacks", use.target.stack),
                f"stack {use.target.stack!r} states no 'python:' version (e.g. '3.13'), which python-env "
                f"component {name!r} needs for its wheels (used by target {use.name!r})",
            )
        check_builder_apt(name, self.builder_apt, use, src)

    def plan(self, name: str, lock: ComponentLock, use: TargetUse) -> ComponentPlan:
        locked: Mapping[str, LockedWheel] = lock.wheels
        unresolved: list[str] = []
        fetches: tuple[FetchItem, ...] = ()
        if locked and all(k.lower() in locked and locked[k.lower()].version == v for k, v in self.requirements.items()):
            fetches = (WheelsFetch(name, use.stack.python_version),)
        else:
            locked = {}
            unresolved.append(f"python {name}: requirements are not locked with hashes")
        held = lock.held
        if not held and use.has_torch:
            unresolved.append(f"python {name}: the image's torch is not held by the lock")
        requirements, constraints = f"requirements/{name}.txt", f"constraints/{name}.txt"
        files = {requirements: self._requirements_text(locked).encode()}
        if held:
            files[constraints] = "".join(f"{k}=={v}\n" for k, v in sorted(held.packages.items())).encode()
        # On a torch image the base's console scripts (torchrun, ...) get venv twins: see venv_entry_points.py.
        entry_points = None
        if use.has_torch:
            entry_points = "tools/venv_entry_points.py"
            files[entry_points] = ENTRY_POINTS_SCRIPT.read_bytes()
        template_vars = {
            "locked": bool(locked),
            "requirements": requirements,
            "constraints": constraints if held else None,
            "torch_check": {"version": held.torch_version, "hip": held.torch_hip} if held else None,
            "entry_points": entry_points,
        }
        return ComponentPlan(template_vars=template_vars, files=files, fetches=fetches, unresolved=tuple(unresolved))

    def _requirements_text(self, locked: Mapping[str, LockedWheel]) -> str:
        if locked:  # the whole closure, each with its hashes: pip --require-hashes
            return "".join(
                f"{k}=={e.version}" + "".join(f" --hash=sha256:{h}" for h in e.sha256) + "\n"
                for k, e in sorted(locked.items())
            )
        return "".join(f"{k}=={v}\n" for k, v in sorted(self.requirements.items()))

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        return (PythonEnvLock(name, dict(self.requirements)),)


@dataclass(frozen=True)
class WheelsFetch(FetchItem):
    """The locked wheels of one environment, under wheels/<component>/."""

    python: str


@dataclass(frozen=True)
class PythonEnvLock(LockEntry):
    """The requirements' whole closure with hashes (python.<component>), resolved against the image's
    torch on a torch image (held.<component>); `lock --check` compares the matrix with it."""

    requirements: dict[str, str]
