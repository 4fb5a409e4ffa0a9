"""The builder cache a target keeps between builds, named so that `clean` can list and remove it.

The classic builder reuses a step when the image of that step still exists. Normalising replaces
the raw build with a canonical image whose layers are copies, so a kept cache costs the bytes the
target's steps added a second time. A target keeps it when those bytes are at most the budget
(ROCMFORGE_BUILD_CACHE_MAX, default 2 GB; 0 keeps none): the small targets people edit often
rebuild in seconds, while a multi-GB package layer is not stored twice. What is kept: the raw
image, tagged `rocmforge-cache/<target>:last`, and the step images of its builder stages,
recorded in `<state>/cache/<target>.json`. The next build of the target replaces both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.host.enginebase import EngineError
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import atomic_write
from rocmforge.shared.records import load_internal
from rocmforge.shared.statedir import StateDir

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

REPO = "rocmforge-cache"
_IMAGE_ID = re.compile(r"^(?:sha256:)?[0-9a-f]{12,64}$")
DEFAULT_MAX = 2 * 10**9


def require_free_disk(client: Engine, name: str, need_gb: int | None) -> None:
    """BuildError unless the engine has the disk the matrix says building name needs (runner.disk_gb)."""
    free = client.free_disk()
    if need_gb and free and free.free_bytes < need_gb * 10**9:
        raise BuildError(
            f"building {name} needs about {need_gb} GB free for the engine (matrix: runner.disk_gb of "
            f"its stack); {free.path} has {free.free_bytes / 1e9:.1f} GB. Free space "
            f"(`{program.command('clean')}`, `docker system prune`) or use a runner with more disk"
        )


def budget() -> int:
    """The most bytes a target's kept cache may cost (ROCMFORGE_BUILD_CACHE_MAX); UserError when it is no size."""
    raw = os.environ.get("ROCMFORGE_BUILD_CACHE_MAX", "")
    if not raw:
        return DEFAULT_MAX
    try:
        value = int(float(raw))
    except ValueError:
        value = -1
    if value < 0:
        raise UserError(
            f"ROCMFORGE_BUILD_CACHE_MAX={raw!r} is not a size in bytes (0 keeps no build cache)",
            field="ROCMFORGE_BUILD_CACHE_MAX",
        )
    return value


def _record(state: Path, target: str) -> Path:
    return StateDir(state).build_cache(target)


def recorded(state: Path, target: str) -> list[str]:
    """Step images the target's kept cache holds (short or full IDs). A record that is not one reads
    as no cache, with a warning: its images are then left for `clean`, never removed on its word,
    and the next build of the target writes a new record."""
    data = load_internal(
        _record(state, target),
        _record_problem,
        f"delete it; `{program.command('clean --target ' + target)}` removes what it kept",
    )
    return list(data["images"]) if data else []


def _record_problem(data: object) -> str | None:
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list) or not all(isinstance(i, str) and _IMAGE_ID.match(i) for i in images):
        return 'not a build-cache record (expected {"images": [image IDs]})'
    return None


def added_bytes(client: Engine, made: list[str]) -> int:
    """Bytes the build's steps added on top of the images they started from."""
    total = 0
    for short in set(made):
        try:
            img = client.inspect(short)
            if img.get("RepoTags") and not any(
                t.startswith(f"{REPO}/") or t.startswith("rocmforge-raw/") for t in img["RepoTags"]
            ):
                continue  # a base or prerequisite, not a step of this build
            parent = img.get("Parent")
            total += img.get("Size", 0) - (client.inspect(parent).get("Size", 0) if parent else 0)
        except EngineError:
            continue
    return total


def settle(client: Engine, state: Path, target: str, raw_tag: str, made: list[str]) -> bool:
    """After a successful build and normalisation: keep the build as the target's cache when it fits
    the budget, else discard it; the previous cache goes either way. True when kept."""
    with _settling(state, target):
        return _settle(client, state, target, raw_tag, made)


@contextlib.contextmanager
def _settling(state: Path, target: str) -> Iterator[None]:
    """Two builds of one target finishing together settle one after the other: the second must
    read the record the first wrote, or the first one's kept cache is never discarded."""
    lock = _record(state, target).with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _settle(client: Engine, state: Path, target: str, raw_tag: str, made: list[str]) -> bool:
    old = recorded(state, target)
    keep = 0 < (limit := budget()) and added_bytes(client, made) <= limit
    path = _record(state, target)
    if keep:
        client.tag(raw_tag, f"{REPO}/{target}:last")
        atomic_write(path, json.dumps({"images": made}).encode())
    _untag(client, raw_tag)
    if not keep:
        _untag(client, f"{REPO}/{target}:last")
        path.unlink(missing_ok=True)
        engine.discard(client, made)
    engine.discard(client, [i for i in old if i not in set(made)])
    return keep


def forget(client: Engine, state: Path, target: str) -> None:
    """Removes the target's kept cache (what `clean` does)."""
    _untag(client, f"{REPO}/{target}:last")
    engine.discard(client, recorded(state, target))
    _record(state, target).unlink(missing_ok=True)


def _untag(client: Engine, ref: str) -> None:
    try:
        client.untag(ref)
    except EngineError:  # never made, or already gone
        pass
