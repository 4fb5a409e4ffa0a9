"""The dpkg packages an image of a target must hold, from matrix.lock alone, and how an image's
installed set differs from them. Pure: the suites read the installed set inside the container
and compare it here, so a package removed from the image is still expected.

What the lock holds per target:
- a bootstrapped base (Debian): `bases.<stack>.packages`, every package debootstrap installed
  (the base is built here, so its whole set is known and locked);
- a registry base (AMD's rocm/pytorch): `bases.<stack>.packages` too, read by `build.py lock` from
  the image pulled by its digest (a digest's contents never change, so what it holds is known);
  a lock written before that holds only the digest, and then the installed set must contain the
  locked closure while what else the base brings cannot be judged (reported, not failed);
- `apt.<target>`: what that target's `apt-get install` adds on top of the image it starts from
  (the closure `build.py lock` resolved, at exact versions). An image carries the steps of its
  own target and of every target it is built on (from_target); builder stages (`<target>/<c>-build`
  and `builder:` targets) never reach it."""

from __future__ import annotations

from dataclasses import dataclass

from rocmforge.define.matrix import Matrix
from rocmforge.resolve.lockmodel import Lock


@dataclass(frozen=True)
class ExpectedPackages:
    packages: dict[str, str]  # name -> exact version the image must have installed
    base_locked: bool  # False when the lock holds no package list for the base
    unlocked_steps: tuple[str, ...]  # apt steps of the chain the lock has no closure for
    sources: dict[str, str]  # name -> where the expectation comes from ("base x", "apt y")


def expected_packages(lock: Lock, m: Matrix, target: str) -> ExpectedPackages:
    """The packages (name -> version) target's image must hold: its base's locked set plus the locked apt
    closures of it and every target it is built on (later steps win), and the steps the lock has no closure for."""
    chain = []
    name: str | None = target
    while name:
        chain.append(name)
        name = m.targets[name].from_target
    chain.reverse()  # base first: later steps override earlier versions
    stack = m.targets[target].stack
    base_pkgs = lock.base(stack).packages
    packages = dict(base_pkgs or {})
    sources = {n: f"base {stack}" for n in packages}
    unlocked = []
    for step in chain:
        if not m.targets[step].apt:
            continue
        closure = lock.apt.get(step)
        if closure is None:
            unlocked.append(step)
            continue
        packages.update(closure)
        sources.update({n: f"apt {step}" for n in closure})
    return ExpectedPackages(dict(sorted(packages.items())), base_pkgs is not None, tuple(unlocked), sources)


@dataclass(frozen=True)
class PackageDiff:
    missing: list[str]  # "name=version (source)": in the lock, not installed
    wrong: list[str]  # "name: lock V, installed W (source)"
    extra: list[str]  # "name=version": installed, in no locked step (judged only with a locked base)

    def __bool__(self) -> bool:
        return bool(self.missing or self.wrong or self.extra)

    def lines(self) -> list[str]:
        return (
            [f"missing (in the lock's closure, not installed): {m}" for m in self.missing]
            + [f"wrong version: {w}" for w in self.wrong]
            + [f"extra (installed, not in the lock's closure): {e}" for e in self.extra]
        )


def compare(expected: ExpectedPackages, installed: dict[str, str]) -> PackageDiff:
    """installed: name -> version of the packages dpkg reports fully installed ("ii")."""
    missing = [f"{n}={v} ({expected.sources[n]})" for n, v in expected.packages.items() if n not in installed]
    wrong = [
        f"{n}: lock {v}, installed {installed[n]} ({expected.sources[n]})"
        for n, v in expected.packages.items()
        if n in installed and installed[n] != v
    ]
    extra = [f"{n}={v}" for n, v in sorted(installed.items()) if expected.base_locked and n not in expected.packages]
    return PackageDiff(missing, wrong, extra)


# What dpkg holds, with each package's state: parse_dpkg_status reads its output.
DPKG_STATUS = ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\n"]


def parse_dpkg_status(text: str) -> dict[str, str]:
    """`dpkg-query -W -f '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'` → {name: version} of the
    packages fully installed ("ii"); removed ones kept only for their conffiles ("rc") are not."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].strip() == "ii" and parts[2]:
            out[parts[1].split(":")[0]] = parts[2]
    return dict(sorted(out.items()))
