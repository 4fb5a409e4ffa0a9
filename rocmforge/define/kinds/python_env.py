"""python-env: exact pip requirements installed into a venv in a builder stage, offline from wheels
whose hashes the lock records; on a torch image the lock also holds that torch family, resolved in a
container of the image (data/templates/kinds/python-env.j2)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rocmforge.define.kinds.base import ComponentKind, ComponentPlan, LockContext, LockEntry, TargetUse
from rocmforge.resolve.lockmodel import HeldEntry, Lock, PythonFile, python_files
from rocmforge.host import fetch, pylock
from rocmforge.shared import packagedata

if TYPE_CHECKING:
    from rocmforge.shared.yamlsrc import SourceMap

ENTRY_POINTS_SCRIPT = packagedata.SCRIPTS / "venv_entry_points.py"
PIP_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")


class PythonEnv(ComponentKind):
    kind: Literal["python-env"]
    requirements: dict[str, str] = Field(min_length=1)
    builder_apt: list[str] = Field(default_factory=list)   # apt packages its builder stage installs first

    def check(self, name: str, src: SourceMap) -> None:
        for req, ver in self.requirements.items():
            if not PIP_VERSION_RE.match(ver):
                raise src.error(("components", name, "requirements", req),
                                f"{ver!r} is not an exact version (write e.g. '4.44.2')")

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        for j, pkg in enumerate(self.builder_apt):
            if pkg not in use.stack.apt:
                raise src.error(("components", name, "builder_apt", j),
                                f"apt package {pkg!r} has no pinned version in stack {use.target.stack!r} "
                                f"(used by target {use.name!r})")

    def plan(self, name: str, lock: Lock, use: TargetUse) -> ComponentPlan:
        locked = lock.python.get(name) or {}
        unresolved, fetches = [], ()
        if locked and all(k.lower() in locked and locked[k.lower()].version == v for k, v in self.requirements.items()):
            fetches = (WheelsFetch(name, use.stack.python),)
        else:
            locked = {}
            unresolved.append(f"python {name}: requirements are not locked with hashes (run `python build.py lock`)")
        held = lock.held.get(name)
        if not held and use.has_torch:
            unresolved.append(f"python {name}: the image's torch is not held by the lock (run `python build.py lock`)")
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
            "locked": bool(locked), "requirements": requirements, "constraints": constraints if held else None,
            "torch_check": {"version": held.torch_version, "hip": held.torch_hip} if held else None,
            "entry_points": entry_points,
        }
        return ComponentPlan(template_vars=template_vars, files=files, fetches=fetches, unresolved=tuple(unresolved))

    def _requirements_text(self, locked: dict[str, PythonFile]) -> str:
        if locked:   # the whole closure, each with its hashes: pip --require-hashes
            return "".join(f"{k}=={e.version}" + "".join(f" --hash=sha256:{h}" for h in e.sha256) + "\n"
                           for k, e in sorted(locked.items()))
        return "".join(f"{k}=={v}\n" for k, v in sorted(self.requirements.items()))

    def lock_entries(self, name: str) -> tuple[LockEntry, ...]:
        return (PythonEnvLock(name, self),)


@dataclass(frozen=True)
class WheelsFetch:
    """The locked wheels of one environment, under wheels/<component>/."""
    component: str
    python: str | None

    def fetch(self, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
        wheels = fetch.wheels_for(lock.python[self.component], self.python, work_dir, ca)
        return {f"wheels/{self.component}/{fname}": data for fname, data in wheels.items()}


@dataclass(frozen=True, eq=False)
class PythonEnvLock:
    component: str
    spec: PythonEnv

    def resolve(self, run: LockContext) -> None:
        """Against the first target (in build order) that lists the environment."""
        name = self.component
        tname = run.first_user(name)
        if run.matrix.torch_of(tname).version is not None:
            self._resolve_on_image(run, tname)
            return
        python = run.matrix.stacks[run.matrix.targets[tname].stack].python
        try:
            run.lock.python[name] = python_files(fetch.resolve_wheels(self.spec.requirements, python, run.work,
                                                                      run.ca_bundle))
        except fetch.FetchError as exc:
            run.out.failed.append(f"python {name}: {exc}")
            return
        run.out.resolved.append(f"python {name}: {len(run.lock.python[name])} wheel(s) with hashes")

    def _resolve_on_image(self, run: LockContext, tname: str) -> None:
        """On a torch image: resolved in a container of the image it builds on."""
        name, stack_name = self.component, run.matrix.targets[tname].stack
        try:
            image = run.base_image(stack_name)
        except RuntimeError as exc:
            run.out.failed.append(f"python {name}: {exc}; entry left as it was")
            return
        pins, missing = run.builder_image_pins(tname, name)
        if missing:
            run.out.failed.append(f"python {name}: the apt closure of {', '.join(missing)} is not locked; "
                                  "entry left as it was")
            return
        try:
            res = pylock.resolve(run.client, image, python_bin=run.matrix.stacks[stack_name].python_bin,
                                 requirements=self.spec.requirements, apt_pins=[f"{n}={v}" for n, v in pins],
                                 ca_bundle=run.ca_bundle, log=run.log, stack_name=stack_name)
        except pylock.PythonLockError as exc:
            run.out.failed.append(f"python {name}: {exc}; entry left as it was")
            return
        run.lock.python[name] = python_files(res.wheels)
        held = run.lock.held[name] = HeldEntry.model_validate(res.held)
        run.out.resolved.append(
            f"python {name}: {len(res.wheels)} wheel(s) with hashes, resolved in {image} against its "
            f"torch {held.torch_version} (held: {', '.join(held.packages) or 'none'})")

    def check(self, run: LockContext) -> None:
        locked = run.lock.python.get(self.component, {})
        for pkg, ver in sorted(self.spec.requirements.items()):
            if pkg not in locked:
                run.out.problems.append(f"python {self.component}: {pkg} is not locked")
            elif locked[pkg].version != ver:
                run.out.problems.append(f"python {self.component}: {pkg} matrix {ver} vs lock {locked[pkg].version}")
