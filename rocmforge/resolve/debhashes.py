"""matrix.lock's debs section: the SHA-256 of every .deb the lock pins on a bootstrapped stack (its
base's packages and each apt step's closure), as the signed index of the stack's Debian suite gives
it (host.debarchive). The outside check takes a .deb only when the index still gives that hash.

A registry stack's packages come from the apt sources its base ships, which are read from the
base's layers when an image is checked: their hashes are not recorded here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmforge.host import debarchive
from rocmforge.resolve import lockfile
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from rocmforge.define.matrix import Matrix
    from rocmforge.resolve.lockmodel import Lock


def pinned(lock: Lock, m: Matrix, stack: str) -> set[tuple[str, str]]:
    """(name, version) of every package the lock pins on stack: its base's and its apt steps'."""
    out = set((lock.base(stack).packages or {}).items())
    for step in lockfile.apt_steps(m):
        if step.stack == stack:
            out |= set(lock.apt.get(step.key, {}).items())
    return out


def _from_index(suite: str, packages: set[tuple[str, str]], locked: dict[str, str]) -> dict[str, str]:
    """deb key -> sha256 of packages in the suite's signed index (BuildError: one is not listed,
    or the index gives another hash than locked)."""
    found: dict[str, str] = {}
    rounds: list[dict[str, str]] = []
    for name, version in sorted(packages):  # one name at two versions (the base's, a step's): two rounds
        slot = next((r for r in rounds if name not in r), None)
        if slot is None:
            rounds.append(slot := {})
        slot[name] = version
    for wanted in rounds:
        located = debarchive.locate([debarchive.debian(suite)], wanted, locked)
        found.update({debarchive.deb_key(n, wanted[n]): sha for n, (_, _, sha) in located.items()})
    return dict(sorted(found.items()))


def _bootstrapped(m: Matrix, stacks: list[str]) -> list[tuple[str, str]]:
    return [(s, b.suite) for s in stacks if (b := m.stacks[s].base.bootstrap)]


def resolve(lock: Lock, m: Matrix, stacks: list[str]) -> tuple[list[str], list[str]]:
    """Records the hashes of what the lock pins on each bootstrapped stack among stacks. A hash
    already recorded must still be the index's (an archive that changed a .deb at a pinned version
    is reported); a stack whose suite cannot be read keeps its entry as it was. Returns what was
    resolved and what failed, a line each."""
    resolved: list[str] = []
    failed: list[str] = []
    for stack, suite in _bootstrapped(m, stacks):
        wanted = pinned(lock, m, stack)
        try:
            lock.debs[stack] = _from_index(suite, wanted, lock.debs.get(stack, {}))
        except BuildError as exc:
            failed.append(f"debs {stack}: {exc}; entry left as it was")
            continue
        resolved.append(f"debs {stack}: {len(wanted)} .deb hashes from {suite}'s signed index")
    return resolved, failed


def check(lock: Lock, m: Matrix, stacks: list[str]) -> list[str]:
    """The problems: a pinned package with no hash, or one the signed index no longer gives."""
    problems: list[str] = []
    for stack, suite in _bootstrapped(m, stacks):
        locked = lock.debs.get(stack, {})
        wanted = pinned(lock, m, stack)
        missing = sorted(debarchive.deb_key(n, v) for n, v in wanted if debarchive.deb_key(n, v) not in locked)
        if missing:
            problems.append(
                f"debs {stack}: no .deb hash for {', '.join(missing[:5])}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                + " (run `python build.py lock`)"
            )
        try:
            _from_index(suite, wanted, locked)
        except BuildError as exc:
            problems.append(f"debs {stack}: {exc}")
    return problems
