"""A git source pinned to a commit: its matrix model, what `lock` resolves for it (the `ref` to a
commit) and what a build fetches (the tree at that commit, checked out on the host by resolve.inputs)."""

from __future__ import annotations

from dataclasses import dataclass

from rocmforge.define.kinds.base import ComponentLock, FetchItem, LockEntry
from rocmforge.define.schema import COMMIT_RE, Strict, null_or_matching


class GitSource(Strict):
    url: str
    ref: str
    commit: str | None = None

    _commit = null_or_matching(
        "commit", COMMIT_RE, "must be a 40-character lower-case commit hash, or null until locked"
    )

    def pinned_commit(self, locked: ComponentLock) -> str | None:
        """The matrix's own commit, else the one `build.py lock` resolved."""
        return self.commit or locked.commit

    def unresolved_message(self, component: str) -> str:
        return f"component {component}: git ref {self.ref!r} of {self.url} is not resolved to a commit"


@dataclass(frozen=True)
class GitSourceFetch(FetchItem):
    """The source tree at the commit, under sources/<component>/ with a .rocmforge-commit stamp."""

    url: str
    commit: str


@dataclass(frozen=True)
class GitSourceLock(LockEntry):
    """The ref resolved to a commit (git.<component>); `lock --check` asks whether the ref moved."""

    source: GitSource
