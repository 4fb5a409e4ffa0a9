#!/usr/bin/env python3
"""Pruned against unpruned, side by side: for each target, the image size and the time of a
no-cache `docker build` of its own context, once from this checkout (prune_archs as the matrix
says) and once from a copy whose every target sets prune_archs: false, each on its own variant's
prerequisites (built first with build.py, untimed). Prints sizes, the size ratio and both build
times. Needs the engine; takes a no-cache build of each target twice.

    python3 bench/prune.py hip-runtime llama31-qlora-debian
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.assemble.buildable import buildability  # noqa: E402
from rocmforge.render.plan import load_plan  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
COPIED = ("matrix.yaml", "matrix.lock", "build.py", "rocmforge", "wheels")


def unpruned_copy(dest: Path) -> Path:
    """A project folder whose matrix is this one with prune_archs: false on every target."""
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    text = (dest / "matrix.yaml").read_text(encoding="utf-8")
    head, sep, targets = text.partition("\ntargets:\n")
    targets = re.sub(r"^(    archs: .*)$", r"\1\n    prune_archs: false", targets, flags=re.M)
    (dest / "matrix.yaml").write_text(head + sep + targets, encoding="utf-8")
    return dest


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} (in {cwd}) failed:\n{proc.stdout[-1500:]}{proc.stderr[-3000:]}")
    return proc


def measure(project: Path, state: Path, target: str, tag: str) -> tuple[int, float]:
    """(bytes, seconds) of a no-cache docker build of the target's context on built prerequisites."""
    build_py = [sys.executable, "build.py", "--state-dir", str(state)]
    plan = load_plan(project / "matrix.yaml")
    for dep in plan.targets[target].deps:
        run(build_py + ["build", "--target", dep], project)
    ctx = state / f"context-{target}"
    shutil.rmtree(ctx, ignore_errors=True)
    run(build_py + ["context", "--target", target, "--out", str(ctx)], project)
    t0 = time.perf_counter()
    run([DOCKER, "build", "--no-cache", "-q", "-t", tag, str(ctx)], project)
    seconds = time.perf_counter() - t0
    size = int(run([DOCKER, "image", "inspect", "-f", "{{.Size}}", tag], project).stdout.strip())
    return size, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    plan = load_plan(ROOT / "matrix.yaml")
    here = [n for n in plan.order() if buildability(plan, n)[0]]
    ap.add_argument(
        "targets", nargs="*", default=here, help=f"default: every target that builds here ({', '.join(here)})"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmforge-bench-prune-") as tmp:
        other = unpruned_copy(Path(tmp) / "unpruned")
        for target in args.targets:
            after, t_after = measure(ROOT, Path(tmp) / "state-pruned", target, f"rocmforge-bench/{target}:pruned")
            before, t_before = measure(
                other, Path(tmp) / "state-unpruned", target, f"rocmforge-bench/{target}:unpruned"
            )
            print(
                f"{target}: unpruned {before / 1e9:.2f} GB, pruned {after / 1e9:.2f} GB, ratio {after / before:.3f}; "
                f"no-cache build {t_before:.0f} s unpruned, {t_after:.0f} s pruned (ratio {t_after / t_before:.2f})",
                flush=True,
            )
            subprocess.run(
                [DOCKER, "rmi", f"rocmforge-bench/{target}:pruned", f"rocmforge-bench/{target}:unpruned"],
                capture_output=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
