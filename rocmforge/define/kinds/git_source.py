"""A git source pinned to a commit: its matrix model, its lock entry (the `ref` resolved to a
commit) and its fetch item (the tree at that commit, checked out on the host)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmforge.define.kinds.base import LockContext
from rocmforge.resolve.lockmodel import GitEntry, Lock
from rocmforge.define.schema import COMMIT_RE, Strict, null_or_matching
from rocmforge.host import fetch


class GitSource(Strict):
    url: str
    ref: str
    commit: str | None = None

    _commit = null_or_matching("commit", COMMIT_RE, "must be a 40-character lower-case commit hash, or null until locked")

    def pinned_commit(self, component: str, lock: Lock) -> str | None:
        """The matrix's own commit, else the one `build.py lock` resolved."""
        return self.commit or (lock.git.get(component) or GitEntry()).commit

    def unresolved_message(self, component: str) -> str:
        return (f"component {component}: git ref {self.ref!r} of {self.url} is not resolved to a commit "
                "(run `build.py lock`)")


@dataclass(frozen=True)
class GitSourceFetch:
    """The source tree at the commit, under sources/<component>/ with a .rocmforge-commit stamp."""
    component: str
    url: str
    commit: str

    def fetch(self, lock: Lock, work_dir: Path, ca: Path | None) -> dict[str, bytes]:
        tree = fetch.source_tree(self.url, self.commit, work_dir)
        return {f"sources/{self.component}/{rel}": data for rel, data in tree.items()}


@dataclass(frozen=True)
class GitSourceLock:
    component: str
    source: GitSource

    def resolve(self, run: LockContext) -> None:
        src, entries = self.source, run.lock.git
        try:
            commit = fetch.ls_remote(src.url, src.ref)
        except fetch.FetchError as exc:
            entries.setdefault(self.component, GitEntry(url=src.url, ref=src.ref, commit=None))
            run.out.failed.append(f"git {self.component}: {exc}; entry left as it was")
            return
        entries[self.component] = GitEntry(url=src.url, ref=src.ref, commit=commit)
        run.out.resolved.append(f"git {self.component}: {src.ref} -> {commit}")

    def check(self, run: LockContext) -> None:
        src, problems = self.source, run.out.problems
        entry = run.lock.git.get(self.component) or GitEntry()
        if not entry.commit:
            problems.append(f"git {self.component}: {src.ref} is not resolved to a commit")
            return
        try:
            now = fetch.ls_remote(src.url, src.ref)
        except fetch.FetchError as exc:
            problems.append(f"git {self.component}: cannot check here: {exc}")
            return
        if now != entry.commit:
            problems.append(f"git {self.component}: {src.ref} moved: locked {entry.commit}, now {now}")
