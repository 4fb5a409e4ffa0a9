"""Can a planned target be built on this machine? Reads the host and (if reachable) the engine."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from rocmforge.host import engines

if TYPE_CHECKING:
    from rocmforge.render.plan import BuildPlan


def _local_images() -> set[str] | None:
    try:
        return engines.connect(timeout=5, check=False).tags()
    except Exception as exc:  # no engine: fall back to what the host alone tells
        # connect's own words name DOCKER_HOST's value and why; the blockers only say "not reachable"
        _ENGINE_PROBLEM["text"] = " ".join(str(exc).split()) or type(exc).__name__
        return None


# The engine's images, asked once per process (`list` asks for every target).
_LOCAL_IMAGES: dict[str, set[str] | None] = {}
# Why the engine could not be asked, when it could not: said once, not once per target.
_ENGINE_PROBLEM: dict[str, str] = {}


def engine_problem() -> str | None:
    """Why the engine did not answer buildability's question (where it looked, and why); None
    when it answered or was not asked."""
    return _ENGINE_PROBLEM.get("text")


def buildability(plan: BuildPlan, name: str) -> tuple[bool, list[str]]:
    """(whether the target can be built here, what stops it or one of its prerequisites, sorted)."""
    if "images" not in _LOCAL_IMAGES:
        _LOCAL_IMAGES["images"] = _local_images()
    images = _LOCAL_IMAGES["images"]
    blockers: list[str] = []
    for dep in plan.order([name]):
        tp = plan.targets[dep]
        blockers += [f"{dep}: {u}" for u in tp.unresolved if not u.startswith(tuple(f"{d}:" for d in tp.deps))]
        # A resolved registry base is pulled by digest when the build starts (through
        # ROCMFORGE_REGISTRY_MIRROR when set): whether that registry answers is known only by trying.
        if tp.bootstrap_stack and not tp.deps and shutil.which("debootstrap") is None:
            blockers.append(f"{dep}: debootstrap is not installed")
    if images is None:
        blockers.append("Docker engine not reachable")
    return (not blockers, sorted(set(blockers)))
