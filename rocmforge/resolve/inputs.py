"""The host-side inputs a build fetches, as the component kinds describe them (define.kinds:
GitSourceFetch, WheelsFetch): each fetched here at the version the lock pins, into build-context paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocmforge.define.kinds import FetchItem, GitSourceFetch, WheelsFetch
from rocmforge.host import fetch as fetching
from rocmforge.resolve.lockmodel import Lock


def fetch(item: FetchItem, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
    """Build-context-relative path → bytes; raises host.fetch.FetchError."""
    return _FETCHERS[type(item)](item, lock, work_dir, ca)


def _source_tree(item: GitSourceFetch, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
    """The tree at the commit, under sources/<component>/ with a .rocmforge-commit stamp."""
    tree = fetching.source_tree(item.url, item.commit, work_dir)
    return {f"sources/{item.component}/{rel}": data for rel, data in tree.items()}


def _wheels(item: WheelsFetch, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
    """The environment's locked wheels, under wheels/<component>/."""
    wheels = fetching.wheels_for(lock.python[item.component] or {}, item.python, work_dir, ca)
    return {f"wheels/{item.component}/{fname}": data for fname, data in wheels.items()}


_FETCHERS: dict[type, Callable[[Any, Lock, Path, Path | None], dict[str, bytes]]] = {
    GitSourceFetch: _source_tree,
    WheelsFetch: _wheels,
}
