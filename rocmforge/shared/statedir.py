"""The state folder (`--state-dir`, default .rocmforge/ beside the matrix): every path in it is
named here, so no module builds one of its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StateDir:
    root: Path

    @property
    def logs(self) -> Path:
        """Build, lock and base logs, one file per target or step (`clean` removes them)."""
        return self.root / "logs"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    @property
    def work(self) -> Path:
        """Scratch and download caches: fetched wheels and git trees, normalisation's files."""
        return self.root / "work"

    def artifacts(self, key: str) -> Path:
        """A target's (or variant's) manifest and SBOM."""
        return self.root / "artifacts" / key

    @property
    def results(self) -> Path:
        """The suites' results, one file per image ID."""
        return self.root / "results"

    def result(self, image_id: str) -> Path:
        return self.results / f"{image_id.split(':')[-1]}.json"

    def check(self, name: str) -> Path:
        """What `lock --check` (lock) or `verify-repro` (repro-<target>) last found."""
        return self.root / "checks" / f"{name}.json"

    def build_cache(self, target: str) -> Path:
        """The record of a target's kept build cache."""
        return self.root / "cache" / f"{target}.json"

    @property
    def report(self) -> Path:
        """`report`'s default output folder."""
        return self.root / "report"
