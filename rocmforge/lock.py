"""`build.py lock` and `lock --check`: resolve what the matrix leaves open, inside real base
containers (apt), on the host (pip, git). Entries that need a network this machine lacks fail
with a clear message and keep their previous lock value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import bases, fetch, lockfile
from .matrix import Matrix

INST_RE = re.compile(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ")


@dataclass
class Outcome:
    lock: dict
    resolved: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # unresolvable here: message per entry
    problems: list[str] = field(default_factory=list)   # --check: stale or unavailable pins


class AptProbe:
    """One container of a stack's base with fresh apt lists, reused for every query."""

    def __init__(self, client, image: str) -> None:
        from .container import TrackedContainer

        self.tc = TrackedContainer(client, image).start()
        r = self.tc.exec("apt-get update -qq", timeout=600)
        if r.rc != 0:
            self.close()
            raise RuntimeError(f"apt-get update failed in {image}: {r.output[-500:]}")

    def simulate(self, pins: list[str]) -> dict[str, str]:
        """Packages (name → version) that `apt-get install --no-install-recommends PINS` would install."""
        if not pins:
            return {}
        r = self.tc.exec(["apt-get", "install", "-s", "-y", "--no-install-recommends", *pins], timeout=600)
        if r.rc != 0:
            raise RuntimeError(_apt_error(r.output))
        return {m.group(1).split(":")[0]: m.group(2) for m in map(INST_RE.match, r.stdout.splitlines()) if m}

    def available(self, names: list[str]) -> dict[str, list[str]]:
        r = self.tc.exec(["apt-cache", "madison", *names], timeout=300)
        out: dict[str, list[str]] = {n: [] for n in names}
        for line in r.stdout.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 2 and parts[0] in out and parts[1] not in out[parts[0]]:
                out[parts[0]].append(parts[1])
        return out

    def installed(self) -> dict[str, str]:
        r = self.tc.exec(["dpkg-query", "-W", "-f", "${Package}=${Version}\\n"])
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    def close(self) -> None:
        self.tc.remove()


def _apt_error(output: str) -> str:
    errs = [ln for ln in output.splitlines() if ln.startswith("E:")]
    return "; ".join(errs) or output.strip()[-300:]


def _stack_probe(client, m: Matrix, stack_name: str, probes: dict, work, log):
    if stack_name not in probes:
        stack = m.stacks[stack_name]
        if stack.base.registry:
            probes[stack_name] = None
        else:
            from . import bootstrap

            ref = bootstrap.ensure_base(client, stack_name, stack, work, log)
            probes[stack_name] = AptProbe(client, ref)
    return probes[stack_name]


def resolve(client, m: Matrix, old: dict, *, targets: list[str] | None, work, ca_bundle=None,
            log=print) -> Outcome:
    lock = {s: dict(old.get(s, {})) for s in lockfile.SECTIONS}
    lock["schema"] = 1
    out = Outcome(lock)
    names = m.order(targets) if targets else m.order()
    stacks = sorted({m.targets[n].stack for n in names})
    probes: dict = {}
    try:
        for sname in stacks:
            stack = m.stacks[sname]
            if stack.base.registry:
                reg = stack.base.registry
                entry = {"kind": "registry", "image": f"{reg.image}:{reg.tag}", "digest": reg.digest}
                if reg.digest:
                    lock["bases"][sname] = entry
                    out.resolved.append(f"base {sname}: {reg.digest} (from matrix.yaml)")
                else:
                    lock["bases"].setdefault(sname, entry)
                    out.failed.append(f"base {sname}: {reg.image}:{reg.tag} -> digest needs the registry, which "
                                      "is not reachable from here; entry left as it was")
                continue
            probe = _stack_probe(client, m, sname, probes, work, log)
            image_id = client.images.get(bases.bootstrap_ref(sname, stack)).id
            lock["bases"][sname] = {"kind": "bootstrap", "recipe": bases.recipe_hash(stack), "image_id": image_id,
                                    "packages": dict(sorted(probe.installed().items()))}
            out.resolved.append(f"base {sname}: recipe {bases.recipe_hash(stack)[:12]} -> {image_id[:19]}")
        for step in lockfile.apt_steps(m):
            if step.key.split("/")[0] not in names:
                continue
            probe = _stack_probe(client, m, step.stack, probes, work, log)
            if probe is None:
                out.failed.append(f"apt {step.key}: needs the {step.stack} base image, which cannot be pulled here; "
                                  "entry left as it was")
                continue
            pins = m.stacks[step.stack].apt
            try:
                before = probe.simulate([f"{n}={pins[n]}" for n in step.before])
                after = probe.simulate([f"{n}={pins[n]}" for n in step.before + step.names])
            except RuntimeError as exc:
                out.failed.append(f"apt {step.key}: {exc}")
                continue
            closure = {n: v for n, v in after.items() if before.get(n) != v}
            lock["apt"][step.key] = dict(sorted(closure.items()))
            out.resolved.append(f"apt {step.key}: {len(closure)} packages")
    finally:
        for p in probes.values():
            if p is not None:
                p.close()
    for cname, comp in sorted(m.components.items()):
        if not any(cname in m.targets[n].components for n in names):
            continue
        if comp.kind == "python-env":
            stack = m.stacks[next(m.targets[n].stack for n in names if cname in m.targets[n].components)]
            if stack.pytorch:
                out.failed.append(f"python {cname}: resolving against {stack.base.registry.image}'s preinstalled "
                                  "torch needs that image, which cannot be pulled here; entry left as it was")
                continue
            try:
                lock["python"][cname] = fetch.resolve_wheels(comp.requirements, stack.python, work, ca_bundle)
                out.resolved.append(f"python {cname}: {len(lock['python'][cname])} wheel(s) with hashes")
            except fetch.FetchError as exc:
                out.failed.append(f"python {cname}: {exc}")
        if comp.source:
            src = comp.source
            try:
                commit = fetch.ls_remote(src.url, src.ref)
                lock["git"][cname] = {"url": src.url, "ref": src.ref, "commit": commit}
                out.resolved.append(f"git {cname}: {src.ref} -> {commit}")
            except fetch.FetchError as exc:
                lock["git"].setdefault(cname, {"url": src.url, "ref": src.ref, "commit": None})
                out.failed.append(f"git {cname}: {exc}; entry left as it was")
    return out


def check(client, m: Matrix, lock: dict, *, targets: list[str] | None, work, log=print) -> Outcome:
    """Every stale or unresolvable pin at once; builds nothing."""
    out = Outcome(lock)
    names = m.order(targets) if targets else m.order()
    probes: dict = {}
    base_packages: dict[str, dict | None] = {}
    try:
        for sname in sorted({m.targets[n].stack for n in names}):
            probe = _stack_probe(client, m, sname, probes, work, log)
            base_packages[sname] = probe.installed() if probe is not None else None
        for step in lockfile.apt_steps(m):
            if step.key.split("/")[0] not in names:
                continue
            _, stale = lockfile.apt_pins_for(lock, m, step)
            if stale:
                out.problems.append(stale)
            probe = _stack_probe(client, m, step.stack, probes, work, log)
            if probe is None:
                out.problems.append(f"apt {step.key}: cannot check here (the {step.stack} base cannot be pulled)")
                continue
            # Both the matrix's pins and the locked closure must exist in the mirror.
            wanted = {(n, m.stacks[step.stack].apt[n]) for n in step.names}
            wanted |= set(lock["apt"].get(step.key, {}).items())
            avail = probe.available(sorted({n for n, _ in wanted}))
            for n, v in sorted(wanted):
                if v not in avail[n]:
                    have = ", ".join(avail[n]) or "none"
                    out.problems.append(f"apt {step.key}: {n}={v} is not in the mirror (it has: {have})")
    finally:
        for p in probes.values():
            if p is not None:
                p.close()
    for sname in sorted({m.targets[n].stack for n in names}):
        stack = m.stacks[sname]
        entry = lock["bases"].get(sname)
        if stack.base.registry:
            if not stack.base.registry.digest:
                out.problems.append(f"base {sname}: no digest for {stack.base.registry.image}:{stack.base.registry.tag}")
        elif not entry or entry.get("recipe") != bases.recipe_hash(stack):
            out.problems.append(f"base {sname}: bootstrap recipe changed since the lock (run `python build.py lock`)")
        elif base_packages.get(sname) is not None:
            have = base_packages[sname]
            moved = [f"{n} lock {v}, now {have.get(n, 'absent')}" for n, v in sorted(entry.get("packages", {}).items())
                     if have.get(n) != v]
            if moved:
                out.problems.append(f"base {sname}: the bootstrapped base differs from the lock: " + "; ".join(moved))
    for cname, comp in sorted(m.components.items()):
        if not any(cname in m.targets[n].components for n in names):
            continue
        if comp.kind == "python-env":
            locked = lock["python"].get(cname, {})
            for pkg, ver in sorted(comp.requirements.items()):
                if pkg not in locked:
                    out.problems.append(f"python {cname}: {pkg} is not locked")
                elif locked[pkg]["version"] != ver:
                    out.problems.append(f"python {cname}: {pkg} matrix {ver} vs lock {locked[pkg]['version']}")
        if comp.source:
            entry = lock["git"].get(cname) or {}
            if not entry.get("commit"):
                out.problems.append(f"git {cname}: {comp.source.ref} is not resolved to a commit")
                continue
            try:
                now = fetch.ls_remote(comp.source.url, comp.source.ref)
                if now != entry["commit"]:
                    out.problems.append(f"git {cname}: {comp.source.ref} moved: locked {entry['commit']}, now {now}")
            except fetch.FetchError as exc:
                out.problems.append(f"git {cname}: cannot check here: {exc}")
    return out
