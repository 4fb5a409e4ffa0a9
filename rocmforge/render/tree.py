"""The committed images/ tree: every target's rendered files but the ones all contexts share;
`render` writes it and `render --check` compares it."""

from __future__ import annotations

from pathlib import Path

from rocmforge.render import bake
from rocmforge.render.plan import BuildPlan
from rocmforge.shared.files import atomic_write

# Every target's context holds the same probes/ and tools/ (the plan's files, hashed into the
# content tag); the repository keeps them once (probes/, rocmforge/data/scripts/venv_entry_points.py),
# and `build.py context` writes a whole context.
SHARED_PREFIXES = ("probes/", "tools/")


def expected_tree(plan: BuildPlan) -> dict[str, bytes]:
    """The committed images/ tree: each target's and each variant's (images/NAME-ARCHS/) rendered
    files, without the shared ones, and the bake file of them all (render.bake)."""
    tree = {
        f"{tp.key}/{rel}": data
        for name in plan.targets
        for tp in plan.images_of(name)
        for rel, data in tp.files.items()
        if not rel.startswith(SHARED_PREFIXES)
    }
    tree[bake.FILE] = bake.bake_file(plan)
    return tree


def _existing(out: Path) -> dict[str, Path]:
    if not out.is_dir():
        return {}
    return {p.relative_to(out).as_posix(): p for p in out.rglob("*") if p.is_file()}


def check(plan: BuildPlan, out: Path) -> list[str]:
    """Every stale, missing or extra file under out, as 'kind: path' lines."""
    want = expected_tree(plan)
    have = _existing(out)
    problems = []
    for rel in sorted(set(want) | set(have)):
        shown = (out / rel).as_posix()
        if rel not in have:
            problems.append(f"missing: {shown}")
        elif rel not in want:
            problems.append(f"extra: {shown}")
        elif have[rel].read_bytes() != want[rel]:
            problems.append(f"stale: {shown}")
    return problems


def write(plan: BuildPlan, out: Path) -> list[str]:
    """Write every rendered file (each replaced atomically) and remove extra ones; returns changes."""
    want = expected_tree(plan)
    have = _existing(out)
    changes = []
    for rel, data in sorted(want.items()):
        if rel in have and have[rel].read_bytes() == data:
            continue
        atomic_write(out / rel, data)
        changes.append(f"{'updated' if rel in have else 'created'}: {(out / rel).as_posix()}")
    for rel in sorted(set(have) - set(want)):
        have[rel].unlink()
        changes.append(f"removed: {(out / rel).as_posix()}")
    for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    return changes
