#!/usr/bin/env python3
"""Core-loop benchmarks, printed as ratios against a baseline run side by side.

(a) an up-to-date `build.py build --target hip-runtime` against `docker build` of the same
    rendered Dockerfile with a full cache (goal: ratio <= 0.5);
(b) the size of hip-runtime against hip-devel (goal: ratio <= 0.6).
Needs a running engine and hip-runtime built once (`python build.py build --target hip-runtime`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.render.plan import load_plan  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


def timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        cmd,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    plan = load_plan(ROOT / "matrix.yaml")
    rt, dv = plan.targets["hip-runtime"], plan.targets["hip-devel"]

    ours_cmd = [sys.executable, "build.py", "build", "--target", "hip-runtime"]
    theirs_cmd = [DOCKER, "build", "-q", "-t", "rocmforge-bench/hip-runtime:docker-build", "images/hip-runtime"]
    classic = {"DOCKER_BUILDKIT": "0"}
    timed(ours_cmd)  # makes sure the target is built and up to date
    timed(theirs_cmd, classic)  # fills docker build's cache for this context
    ours = [timed(ours_cmd) for _ in range(args.runs)]
    theirs = [timed(theirs_cmd, classic) for _ in range(args.runs)]
    subprocess.run([DOCKER, "rmi", "rocmforge-bench/hip-runtime:docker-build"], capture_output=True)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(
        f"(a) up-to-date build, hip-runtime, median of {args.runs}: build.py {o:.2f} s, "
        f"docker build (full cache) {t:.2f} s, ratio {o / t:.2f} (goal <= 0.5)"
    )

    def size(ref: str) -> int:
        out = subprocess.run(
            [DOCKER, "image", "inspect", "-f", "{{.Size}}", ref], capture_output=True, text=True, check=True
        )
        return int(out.stdout.strip())

    r, d = size(rt.content_tag), size(dv.content_tag)
    print(f"(b) image size: hip-runtime {r / 1e9:.2f} GB, hip-devel {d / 1e9:.2f} GB, ratio {r / d:.2f} (goal <= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
