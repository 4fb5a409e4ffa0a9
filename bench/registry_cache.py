#!/usr/bin/env python3
"""The registry build cache: a cold build of the hip-python chain (hip-devel, hip-runtime,
hip-python) that pushes to a cache registry, then the same build on an engine that holds none of
those images (`clean`), served by the cache, and their ratio (goal <= 0.2). The targets are copies
under fresh names, so the user's own images are never touched; the bootstrapped base is shared and
kept (its layer is the only one shared). Needs the engine and Debian's docker-registry."""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.normalise import cli  # noqa: E402
from tests import local_registry  # noqa: E402
from tests.conftest import copy_project  # noqa: E402

CHAIN = ("hip-devel", "hip-runtime", "hip-python")


def renamed_chain(tmp: Path, suffix: str) -> Path:
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    for name in CHAIN:
        t = data["targets"].pop(name)
        for field in ("from_target", "builder"):
            if t.get(field) in CHAIN:
                t[field] = f"{t[field]}-{suffix}"
        # Another epoch: every file the chain adds gets other times, so no layer is shared with
        # the user's own hip-* images and the cache-hit build really moves every byte.
        t["source_date_epoch"] += 86400
        data["targets"][f"{name}-{suffix}"] = t
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = yaml.safe_load(matrix.with_suffix(".lock").read_text())
    for section in lock.values():  # per-target lock entries follow their target's new name
        if isinstance(section, dict):
            for key in list(section):
                head, _, rest = key.partition("/")
                if head in CHAIN:
                    section[f"{head}-{suffix}" + (f"/{rest}" if rest else "")] = section.pop(key)
    matrix.with_suffix(".lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    return matrix


def main() -> int:
    suffix = uuid.uuid4().hex[:6]
    top = f"hip-python-{suffix}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    try:
        with local_registry.serve() as host:
            matrix = renamed_chain(tmp, suffix)
            try:
                cold = cli(matrix, "build", "--target", top, "--cache-registry", host)
                for name in CHAIN:
                    cli(matrix, "clean", "--target", f"{name}-{suffix}")
                hit = cli(matrix, "build", "--target", top, "--cache-registry", host)
            finally:
                for name in CHAIN:
                    cli(matrix, "clean", "--target", f"{name}-{suffix}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'case':62} {'time':>8}")
    print(f"{'cold build of hip-devel -> hip-runtime -> hip-python, pushed':62} {cold:7.1f}s")
    print(f"{'the same after clean, from the cache (no build step)':62} {hit:7.1f}s")
    print(f"ratio cache hit / cold: {hit / cold:.2f} (goal <= 0.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
