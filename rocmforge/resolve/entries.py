"""What `lock` and `lock --check` do for each kind of lock entry the component kinds describe
(define.kinds: GitSourceLock, CmakeToolLock, PythonEnvLock). The kinds say what to resolve; this
module resolves it, against the registry, a git remote, pip, or a container of the image built on."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rocmforge.define.kinds import CmakeToolLock, GitSourceLock, LockEntry, PythonEnvLock
from rocmforge.host import fetch
from rocmforge.host.container import TrackedContainer
from rocmforge.resolve import pylock
from rocmforge.resolve.lockmodel import GitEntry, HeldEntry, Lock, python_files

if TYPE_CHECKING:
    from rocmforge.define.schema import Stack, Target, TorchPin
    from rocmforge.host.engines import Engine


class MatrixView(Protocol):
    """The part of the matrix an entry reads (define.matrix.Matrix is one)."""

    @property
    def targets(self) -> Mapping[str, Target]: ...

    @property
    def stacks(self) -> Mapping[str, Stack]: ...

    def torch_of(self, name: str) -> TorchPin: ...


class LockOutcome(Protocol):
    """Where an entry reports: one line per entry resolved, failed here, or found stale."""

    @property
    def resolved(self) -> list[str]: ...

    @property
    def failed(self) -> list[str]: ...

    @property
    def problems(self) -> list[str]: ...


class LockContext(Protocol):
    """What an entry resolves and checks with; resolve.lock.LockRun provides it. Declared here:
    resolve.lock imports this module to run the entries."""

    @property
    def client(self) -> Engine: ...

    @property
    def matrix(self) -> MatrixView: ...

    @property
    def names(self) -> list[str]:
        """The targets the run covers, in build order."""
        ...

    @property
    def lock(self) -> Lock:
        """The lock being written (resolve) or read (check)."""
        ...

    @property
    def out(self) -> LockOutcome: ...

    @property
    def work(self) -> Path: ...

    @property
    def ca_bundle(self) -> Path | None: ...

    @property
    def log(self) -> Callable[[str], None]: ...

    def first_user(self, component: str) -> str: ...

    def base_image(self, stack_name: str) -> str: ...

    def builder_image_pins(self, target: str, component: str) -> tuple[list[tuple[str, str]], list[str]]: ...


def resolve(entry: LockEntry, run: LockContext) -> None:
    """Resolve one entry into run.lock, reporting to run.out."""
    _RUNNERS[type(entry)][0](entry, run)


def check(entry: LockEntry, run: LockContext) -> None:
    """Check one entry of run.lock again, reporting problems to run.out."""
    _RUNNERS[type(entry)][1](entry, run)


def _resolve_git(entry: GitSourceLock, run: LockContext) -> None:
    src, entries = entry.source, run.lock.git
    try:
        commit = fetch.ls_remote(src.url, src.ref)
    except fetch.FetchError as exc:
        entries.setdefault(entry.component, GitEntry(url=src.url, ref=src.ref, commit=None))
        run.out.failed.append(f"git {entry.component}: {exc}; entry left as it was")
        return
    entries[entry.component] = GitEntry(url=src.url, ref=src.ref, commit=commit)
    run.out.resolved.append(f"git {entry.component}: {src.ref} -> {commit}")


def _check_git(entry: GitSourceLock, run: LockContext) -> None:
    src, problems = entry.source, run.out.problems
    locked = run.lock.git.get(entry.component) or GitEntry()
    if not locked.commit:
        problems.append(f"git {entry.component}: {src.ref} is not resolved to a commit")
        return
    try:
        now = fetch.ls_remote(src.url, src.ref)
    except fetch.FetchError as exc:
        problems.append(f"git {entry.component}: cannot check here: {exc}")
        return
    if now != locked.commit:
        problems.append(f"git {entry.component}: {src.ref} moved: locked {locked.commit}, now {now}")


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", v)[:3])


def _resolve_cmake(entry: CmakeToolLock, run: LockContext) -> None:
    """Each registry base the component is built on must bring a CMake of at least `minimum`."""
    if "cmake" in entry.builder_apt:
        return
    for tname in run.names:
        t = run.matrix.targets[tname]
        stack = run.matrix.stacks[t.stack]
        if entry.component not in t.components or t.builder or t.from_target or not stack.base.registry:
            continue
        try:
            image = run.base_image(t.stack)
        except RuntimeError:
            return  # the base's own failure is reported by its entry
        with TrackedContainer(run.client, image) as tc:
            r = tc.exec(["sh", "-c", 'p=$(command -v cmake) && echo "$p" && cmake --version'])
        lines = r.stdout.split("\n") if r.rc == 0 else []
        found = next((ln.split()[-1] for ln in lines if ln.startswith("cmake version")), None)
        if found and _version_tuple(found) >= _version_tuple(entry.minimum):
            continue
        have = f"CMake {found} at {lines[0]}" if found else "no cmake on PATH"
        run.out.failed.append(
            f"cmake {entry.component}: stack {t.stack} (target {tname}): the base {image} has {have}; "
            f"the fork needs CMake >= {entry.minimum}: pin a cmake >= {entry.minimum} under stacks.{t.stack}.apt "
            f"and add it to components.{entry.component}.builder_apt"
        )
        return


def _check_nothing(entry: LockEntry, run: LockContext) -> None:
    """Nothing pinned to compare: `lock` looks at the base itself."""


def _resolve_python(entry: PythonEnvLock, run: LockContext) -> None:
    """Against the first target (in build order) that lists the environment."""
    name = entry.component
    tname = run.first_user(name)
    if run.matrix.torch_of(tname).version is not None:
        _resolve_python_on_image(entry, run, tname)
        return
    python = run.matrix.stacks[run.matrix.targets[tname].stack].python_version
    try:
        run.lock.python[name] = python_files(fetch.resolve_wheels(entry.requirements, python, run.work, run.ca_bundle))
    except fetch.FetchError as exc:
        run.out.failed.append(f"python {name}: {exc}")
        return
    run.out.resolved.append(f"python {name}: {len(run.lock.python[name] or {})} wheel(s) with hashes")


def _resolve_python_on_image(entry: PythonEnvLock, run: LockContext, tname: str) -> None:
    """On a torch image: resolved in a container of the image it builds on."""
    name, stack_name = entry.component, run.matrix.targets[tname].stack
    try:
        image = run.base_image(stack_name)
    except RuntimeError as exc:
        run.out.failed.append(f"python {name}: {exc}; entry left as it was")
        return
    pins, missing = run.builder_image_pins(tname, name)
    if missing:
        run.out.failed.append(
            f"python {name}: the apt closure of {', '.join(missing)} is not locked; entry left as it was"
        )
        return
    try:
        res = pylock.resolve(
            run.client,
            image,
            python_bin=run.matrix.stacks[stack_name].python_bin,
            requirements=entry.requirements,
            apt_pins=[f"{n}={v}" for n, v in pins],
            ca_bundle=run.ca_bundle,
            log=run.log,
            stack_name=stack_name,
        )
    except pylock.PythonLockError as exc:
        run.out.failed.append(f"python {name}: {exc}; entry left as it was")
        return
    run.lock.python[name] = python_files(res.wheels)
    held = run.lock.held[name] = HeldEntry.model_validate(res.held)
    run.out.resolved.append(
        f"python {name}: {len(res.wheels)} wheel(s) with hashes, resolved in {image} against its "
        f"torch {held.torch_version} (held: {', '.join(held.packages) or 'none'})"
    )


def _check_python(entry: PythonEnvLock, run: LockContext) -> None:
    locked = run.lock.python.get(entry.component) or {}
    for pkg, ver in sorted(entry.requirements.items()):
        if pkg not in locked:
            run.out.problems.append(f"python {entry.component}: {pkg} is not locked")
        elif locked[pkg].version != ver:
            run.out.problems.append(f"python {entry.component}: {pkg} matrix {ver} vs lock {locked[pkg].version}")


# One resolver and one checker per kind of entry; a kind that needs a new kind of pin adds its pair here.
_RUNNERS: dict[type, tuple[Callable[[Any, LockContext], None], Callable[[Any, LockContext], None]]] = {
    GitSourceLock: (_resolve_git, _check_git),
    CmakeToolLock: (_resolve_cmake, _check_nothing),
    PythonEnvLock: (_resolve_python, _check_python),
}
