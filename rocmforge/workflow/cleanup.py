"""`clean`: what rocmforge left on the engine and in its state folder, found and removed."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.assemble import buildcache, engine, steplock
from rocmforge.shared.statedir import StateDir
from rocmforge.workflow.project import Project

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocmforge.host.engines import Engine


@dataclass(frozen=True)
class Leftover:
    kind: str  # container, image, leftover image, build cache, ...
    ref: str
    size: int


@dataclass
class Found:
    items: list[Leftover]
    waiting: int = 0  # untagged step images kept because another build may stand on them


def find(client: Engine, project: Project, names: list[str], all_targets: bool, alone: bool, dry_run: bool) -> Found:
    """What `clean` removes for names (every target's and stack's leftovers with all_targets), nothing removed yet."""
    plan = project.plan
    cached = {i[:12] for n in names for i in buildcache.recorded(project.state, n)}
    kept = {i[:12] for n in plan.targets for i in buildcache.recorded(project.state, n)}
    stacks = sorted(plan.matrix.stacks) if all_targets else []
    items = [Leftover(*f) for f in engine.leftovers(client, names, stacks, cached, kept)]
    if alone and not dry_run:
        items += [Leftover("leftover image", i, 0) for i in steplock.take_pending()]
    if alone:
        return Found(items)
    # Untagged step images may be what a running build stands on: they wait for the last build out.
    waiting = [f for f in items if f.kind == "leftover image"]
    return Found([f for f in items if f.kind != "leftover image"], len(waiting))


def remove(
    client: Engine, project: Project, found: Found, names: list[str], alone: bool, warn: Callable[[str], None]
) -> None:
    """Each item on its own: one that cannot be removed is reported and the rest still go."""
    for item in sorted(found.items, key=lambda f: f.kind != "container"):  # a container holds its image
        try:
            if item.kind == "container":
                client.remove_container(item.ref)
            elif item.ref.startswith("sha256:"):
                engine.discard(client, [item.ref])
            else:
                client.remove_image(item.ref)
        except Exception as exc:  # noqa: BLE001 - reported, and the rest still removed
            warn(f"could not remove {item.ref}: {exc}")
    for n in names:
        buildcache.forget(client, project.state, n)
    if alone:  # while another build runs, it may be writing there
        shutil.rmtree(StateDir(project.state).logs, ignore_errors=True)
        shutil.rmtree(StateDir(project.state).work, ignore_errors=True)
