#!/usr/bin/env python3
"""Lock and reproducibility costs, printed beside baselines:
- `lock --check --target hip-python` against a bare `apt-get update` in the same base (the floor
  of any mirror query);
- `verify-repro --target hip-runtime` against the two no-cache builds inside it, and the share of
  the rebuild time spent in normalisation.
Needs the engine and hip-devel built."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.render.plan import load_plan  # noqa: E402
from rocmforge.resolve import bases  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def main() -> int:
    plan = load_plan(ROOT / "matrix.yaml")
    base = bases.bootstrap_ref("debian13-rocm5.7", plan.matrix.stacks["debian13-rocm5.7"])
    check_s, proc = timed([sys.executable, "build.py", "lock", "--check", "--target", "hip-python"])
    floor_s, _ = timed([DOCKER, "run", "--rm", base, "apt-get", "update", "-qq"])
    print(
        f"lock --check (hip-devel, hip-runtime, hip-python): {check_s:.1f} s, exit {proc.returncode}; "
        f"one apt-get update in the base: {floor_s:.1f} s; ratio {check_s / floor_s:.1f}x"
    )
    total_s, proc = timed([sys.executable, "build.py", "verify-repro", "--target", "hip-runtime", "--json"])
    report = json.loads(proc.stdout)
    build_s = sum(t["build_s"] for t in report["timings"])
    norm_s = sum(t["normalise_s"] for t in report["timings"])
    print(
        f"verify-repro hip-runtime: {total_s:.1f} s, identical={report['identical']}; the two no-cache builds "
        f"{build_s:.1f} s, normalisation {norm_s:.1f} s = {norm_s / (build_s + norm_s):.0%} of the rebuild time; "
        f"verify-repro / raw builds = {total_s / build_s:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
