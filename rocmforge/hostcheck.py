"""Can a planned target be built on this machine? Reads the host and (if reachable) the engine."""

from __future__ import annotations

import shutil


def _local_images() -> set[str] | None:
    try:
        import docker

        client = docker.from_env(timeout=5)
        return {t for img in client.images.list() for t in img.tags}
    except Exception:  # no engine: fall back to what the host alone tells
        return None


def buildability(plan, name: str, _cache: dict = {}) -> tuple[bool, list[str]]:
    if "images" not in _cache:
        _cache["images"] = _local_images()
    images = _cache["images"]
    blockers: list[str] = []
    for dep in plan.order([name]):
        tp = plan.targets[dep]
        blockers += [f"{dep}: {u}" for u in tp.unresolved if not u.startswith(tuple(f"{d}:" for d in tp.deps))]
        stack = plan.matrix.stacks[tp.stack]
        if stack.base.registry and not tp.unresolved:
            ref = f"{stack.base.registry.image}:{stack.base.registry.tag}"
            if images is None or not any(t.startswith(ref) for t in images):
                blockers.append(f"{dep}: base {ref} must be pulled from a registry")
        if tp.bootstrap_stack and not tp.deps and shutil.which("debootstrap") is None:
            blockers.append(f"{dep}: debootstrap is not installed")
    if images is None:
        blockers.append("Docker engine not reachable")
    return (not blockers, sorted(set(blockers)))
