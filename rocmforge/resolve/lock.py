"""`build.py lock` and `lock --check`: resolve what the matrix leaves open, inside real base
containers (apt), on the host (pip, git). Entries that need a network this machine lacks fail
with a clear message and keep their previous lock value."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.define.kinds import LockEntry
from rocmforge.define.matrix import Matrix
from rocmforge.host import aptmirror, aptsources, registrybase
from rocmforge.host.container import TrackedContainer, remove_session_leftovers
from rocmforge.resolve import bases, bootstrap, debhashes, entries, lockfile
from rocmforge.resolve.image_packages import DPKG_STATUS, parse_dpkg_status
from rocmforge.resolve.lockmodel import SECTIONS, BaseEntry, Lock
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from rocmforge.define.schema import Stack
    from rocmforge.host.container import ExecResult
    from rocmforge.host.engines import Engine

INST_RE = re.compile(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ")


@dataclass
class Outcome:
    lock: Lock
    resolved: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # unresolvable here: message per entry
    problems: list[str] = field(default_factory=list)  # --check: stale or unavailable pins
    written: bool = False  # matrix.lock was changed on disk (workflow.locking writes it)


@dataclass
class LockRun:
    """What the lock entries the kinds describe are resolved and checked with (resolve.entries)."""

    client: Any
    matrix: Matrix
    names: list[str]  # the targets this run covers, in build order
    lock: Lock  # the lock being written (resolve) or read (check)
    out: Outcome
    work: Path
    ca_bundle: Path | None
    log: Callable[[str], None]

    def first_user(self, component: str) -> str:
        """The first target (in build order) that lists the component."""
        return next(n for n in self.names if component in self.matrix.targets[n].components)

    def base_image(self, stack_name: str) -> str:
        return base_image(self.client, self.matrix, stack_name, self.lock, self.work, self.log)

    def builder_image_pins(self, target: str, component: str) -> tuple[list[tuple[str, str]], list[str]]:
        return lockfile.builder_image_pins(self.lock, self.matrix, target, component)


class AptSession:
    """One container of a stack's base with fresh apt lists, reused for every query. A registry
    base first gets the stack's apt_sources applied, as every apt step of its build does."""

    def __init__(self, client: Engine, image: str, stack_name: str, stack: Stack) -> None:
        tc = TrackedContainer(client, image)
        try:
            self.tc = tc.start()
            r = self._update(stack)
        except BaseException:
            # Stopped (Ctrl-C, SIGTERM) before the caller holds the session, whose clean-up would
            # close it: its container, created or started, goes here.
            remove_session_leftovers(client, tc.session)
            raise
        if r.rc != 0:
            self.close()
            why = aptsources.failure_message(
                stack_name, r.output, mirror=aptmirror.from_env() if stack.base.bootstrap else None
            )
            if why is None and stack.base.bootstrap and aptmirror.unreachable_hint(r.output):
                why = aptmirror.unreachable_message(aptmirror.from_env())
            if why:  # every entry of the stack would fail alike: stop with one message
                raise BuildError(f"lock: {why}")
            raise RuntimeError(f"apt-get update failed in {image}: {r.output[-500:]}")

    def _update(self, stack: Stack) -> ExecResult:
        self.lists: list[str] = []
        if stack.base.bootstrap:
            setup_env, self.env = aptmirror.container_env()
            return self.tc.exec(f"{aptmirror.SETUP} && {aptmirror.UPDATE} -qq", timeout=600, env=setup_env)
        self.env = {}
        found = self.tc.exec(["sh", "-c", f"ls -1 {aptsources.LISTS_DIR} 2>/dev/null"])
        self.lists = sorted(n for n in found.stdout.split() if n.endswith(".list"))
        return self.tc.exec(["sh", "-c", aptsources.checked_update(stack.apt_sources)], timeout=600)

    def simulate(self, pins: list[str]) -> dict[str, str]:
        """Packages (name → version) that `apt-get install --no-install-recommends PINS` would install."""
        if not pins:
            return {}
        r = self.tc.exec(
            ["apt-get", "install", "-s", "-y", "--no-install-recommends", *pins], timeout=600, env=self.env
        )
        if r.rc != 0:
            raise RuntimeError(_apt_error(r.output))
        return {m.group(1).split(":")[0]: m.group(2) for m in map(INST_RE.match, r.stdout.splitlines()) if m}

    def available(self, names: list[str]) -> dict[str, list[str]]:
        r = self.tc.exec(["apt-cache", "madison", *names], timeout=300, env=self.env)
        out: dict[str, list[str]] = {n: [] for n in names}
        for line in r.stdout.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 2 and parts[0] in out and parts[1] not in out[parts[0]]:
                out[parts[0]].append(parts[1])
        return out

    def installed(self) -> dict[str, str]:
        """The packages dpkg holds installed, read as every other reader of an image's set reads it
        (packages removed but for their conffiles are not installed)."""
        return parse_dpkg_status(self.tc.exec(DPKG_STATUS).stdout)

    def close(self) -> None:
        self.tc.remove()


def _apt_error(output: str) -> str:
    errs = [ln for ln in output.splitlines() if ln.startswith("E:")]
    return "; ".join(errs) or output.strip()[-300:]


def base_image(client: Engine, m: Matrix, stack_name: str, lock: Lock, work: Path, log: Callable[[str], None]) -> str:
    """A local reference of the stack's base: bootstrapped here, or pulled by its locked digest
    (through the registry mirror when one is set). Raises RuntimeError saying why not."""
    stack = m.stacks[stack_name]
    if stack.base.bootstrap:
        return bootstrap.ensure_base(client, stack_name, stack, work, log)

    reg = stack.base.from_registry
    digest = reg.digest or lock.base(stack_name).digest
    if not digest:
        raise RuntimeError(f"the {stack_name} base {reg.image}:{reg.tag} has no digest yet")
    try:
        pulled = registrybase.pull(client, reg.image, digest, mirror=registrybase.mirror_from_env())
    except registrybase.RegistryError as exc:
        raise RuntimeError(f"cannot pull the {stack_name} base: {exc}") from None
    if pulled is None:  # pull() answers None only when told not to fetch
        raise RuntimeError(f"the {stack_name} base {reg.image}@{digest} is not on the engine")
    return pulled


def _apt_session(
    client: Engine, m: Matrix, stack_name: str, sessions: dict, work: Path, log: Callable[[str], None], lock: Lock
):
    """An apt session in the stack's base, or the reason there is none (a string)."""
    if stack_name not in sessions:
        try:
            sessions[stack_name] = AptSession(
                client, base_image(client, m, stack_name, lock, work, log), stack_name, m.stacks[stack_name]
            )
        except RuntimeError as exc:
            sessions[stack_name] = str(exc)
    return sessions[stack_name]


def _resolve_digest(stack_name: str, stack: Stack, lock: Lock, out: Outcome) -> bool:
    """The base's digest into the lock; False when it could not be resolved (reported)."""
    reg = stack.base.from_registry
    entry = BaseEntry(
        kind="registry",
        image=f"{reg.image}:{reg.tag}",
        digest=reg.digest,
        apt_sources=aptsources.record(stack.apt_sources),
    )
    if reg.digest:
        lock.bases[stack_name] = entry
        out.resolved.append(f"base {stack_name}: {reg.digest} (from matrix.yaml)")
        return True
    mirror = registrybase.mirror_from_env()
    try:
        found = registrybase.resolve(reg.image, reg.tag, mirror=mirror)
    except registrybase.RegistryError as exc:
        lock.bases.setdefault(stack_name, entry)
        out.failed.append(f"base {stack_name}: {reg.image}:{reg.tag}: {exc}; entry left as it was")
        return False
    entry.digest = found.digest
    if found.index_digest:
        entry.index_digest = found.index_digest
    lock.bases[stack_name] = entry
    via = f" through {found.host_tried}" if mirror else ""
    out.resolved.append(f"base {stack_name}: {reg.image}:{reg.tag} -> {found.digest}{via}")
    return True


def _record_base_packages(
    client: Engine, m: Matrix, stack_name: str, lock: Lock, out: Outcome, work: Path, log: Callable[[str], None]
) -> None:
    """The dpkg set of a registry base pulled by its digest, into bases.<stack>.packages: the suites
    expect exactly it plus the locked apt steps (rocmforge.resolve.image_packages). Read before any apt
    update, so a dead vendor list does not stand in the way."""
    entry = lock.bases[stack_name]
    try:
        image = base_image(client, m, stack_name, lock, work, log)
    except RuntimeError as exc:
        out.failed.append(f"base {stack_name}: packages: {exc}")
        return
    with TrackedContainer(client, image) as tc:  # stopped between create and start: swept there
        r = tc.exec(DPKG_STATUS, timeout=300)
    if r.rc != 0:
        out.failed.append(f"base {stack_name}: packages: dpkg-query failed in {image}: {r.output.strip()[-300:]}")
        return
    entry.packages = parse_dpkg_status(r.stdout)
    out.resolved.append(f"base {stack_name}: {len(entry.packages)} dpkg packages")


def _session_failed(session: AptSession | str) -> str | None:
    return session if isinstance(session, str) else None


def resolve(
    client: Engine,
    m: Matrix,
    old: Lock,
    *,
    targets: list[str] | None,
    work: Path,
    ca_bundle: Path | None = None,
    log: Callable[[str], None] = print,
) -> Outcome:
    """Resolves the bases, apt closures and component pins of targets (every target when None) into a copy
    of old. What cannot be resolved is listed in the Outcome's failed and keeps its old entry: it is not raised."""
    lock = old.model_copy(update={s: dict(getattr(old, s)) for s in SECTIONS})
    out = Outcome(lock)
    names = m.order(targets) if targets else m.order()
    stacks = sorted({m.targets[n].stack for n in names})
    sessions: dict = {}
    try:
        for sname in stacks:
            stack = m.stacks[sname]
            if stack.base.registry:
                if _resolve_digest(sname, stack, lock, out):
                    _record_base_packages(client, m, sname, lock, out, work, log)
                continue
            session = _apt_session(client, m, sname, sessions, work, log, lock)
            if _session_failed(session):
                out.failed.append(f"base {sname}: {session}")
                continue
            image_id = client.identity(bases.bootstrap_ref(sname, stack))
            lock.bases[sname] = BaseEntry(
                kind="bootstrap",
                recipe=bases.recipe_hash(stack),
                image_id=image_id,
                packages=dict(sorted(session.installed().items())),
            )
            out.resolved.append(f"base {sname}: recipe {bases.recipe_hash(stack)[:12]} -> {(image_id or 'none')[:19]}")
        for step in lockfile.apt_steps(m):
            if step.key.split("/")[0] not in names:
                continue
            session = _apt_session(client, m, step.stack, sessions, work, log, lock)
            if _session_failed(session):
                out.failed.append(f"apt {step.key}: {session}; entry left as it was")
                continue
            if session.lists and step.stack in lock.bases:  # what the base shipped, beside what is done to it
                lock.bases[step.stack].apt_lists_found = session.lists
            pins = m.stacks[step.stack].apt
            try:
                before = session.simulate([f"{n}={pins[n]}" for n in step.before])
                after = session.simulate([f"{n}={pins[n]}" for n in step.before + step.names])
            except RuntimeError as exc:
                out.failed.append(f"apt {step.key}: {exc}")
                continue
            closure = {n: v for n, v in after.items() if before.get(n) != v}
            lock.apt[step.key] = dict(sorted(closure.items()))
            out.resolved.append(f"apt {step.key}: {len(closure)} packages")
    finally:
        for p in sessions.values():
            if isinstance(p, AptSession):
                p.close()
    resolved, failed = debhashes.resolve(lock, m, stacks)
    out.resolved += resolved
    out.failed += failed
    run = LockRun(client, m, names, lock, out, work, ca_bundle, log)
    for entry in _lock_entries(m, names):
        entries.resolve(entry, run)
    return out


def _lock_entries(m: Matrix, names: list[str]) -> list[LockEntry]:
    """The lock entries of every component the targets use, by component name."""
    return [
        entry
        for cname, comp in sorted(m.components.items())
        if any(cname in m.targets[n].components for n in names)
        for entry in comp.lock_entries(cname)
    ]


def check(
    client: Engine, m: Matrix, lock: Lock, *, targets: list[str] | None, work: Path, log: Callable[[str], None] = print
) -> Outcome:
    """Every stale or unresolvable pin at once; builds nothing."""
    out = Outcome(lock)
    names = m.order(targets) if targets else m.order()
    sessions: dict = {}
    base_packages: dict[str, dict | None] = {}
    try:
        for sname in sorted({m.targets[n].stack for n in names}):
            session = _apt_session(client, m, sname, sessions, work, log, lock)
            base_packages[sname] = None if _session_failed(session) else session.installed()
        for step in lockfile.apt_steps(m):
            if step.key.split("/")[0] not in names:
                continue
            _, stale = lockfile.apt_pins_for(lock, m, step)
            if stale:
                out.problems.append(stale)
            session = _apt_session(client, m, step.stack, sessions, work, log, lock)
            if _session_failed(session):
                out.problems.append(f"apt {step.key}: cannot check: {session}")
                continue
            # Both the matrix's pins and the locked closure must exist in the mirror.
            wanted = {(n, m.stacks[step.stack].apt[n]) for n in step.names}
            wanted |= set(lock.apt.get(step.key, {}).items())
            avail = session.available(sorted({n for n, _ in wanted}))
            for n, v in sorted(wanted):
                if v not in avail[n]:
                    have = ", ".join(avail[n]) or "none"
                    out.problems.append(f"apt {step.key}: {n}={v} is not in the mirror (it has: {have})")
    finally:
        for p in sessions.values():
            if isinstance(p, AptSession):
                p.close()
    for sname in sorted({m.targets[n].stack for n in names}):
        stack = m.stacks[sname]
        base_entry = lock.bases.get(sname)
        if stack.base.registry:
            if not (stack.base.registry.digest or lock.base(sname).digest):
                out.problems.append(
                    f"base {sname}: no digest for {stack.base.registry.image}:{stack.base.registry.tag}"
                )
            stale = lockfile.apt_sources_stale(lock, m, sname)
            if stale:
                out.problems.append(stale)
        elif not base_entry or base_entry.recipe != bases.recipe_hash(stack):
            out.problems.append(
                f"base {sname}: bootstrap recipe changed since the lock (run `{program.command('lock')}`)"
            )
        elif base_packages.get(sname) is not None:
            installed = base_packages[sname] or {}
            moved = [
                f"{n} lock {v}, now {installed.get(n, 'absent')}"
                for n, v in sorted((base_entry.packages or {}).items())
                if installed.get(n) != v
            ]
            if moved:
                out.problems.append(f"base {sname}: the bootstrapped base differs from the lock: " + "; ".join(moved))
    out.problems += debhashes.check(lock, m, sorted({m.targets[n].stack for n in names}))
    run = LockRun(client, m, names, lock, out, work, None, log)
    for lock_entry in _lock_entries(m, names):
        entries.check(lock_entry, run)
    return out
