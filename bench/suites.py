#!/usr/bin/env python3
"""Suite wall time per image (`build.py test --target X`), beside a baseline of starting and
removing one bare container of the same image. Goal: <= 30 s per image on a 2-core machine.
Needs the targets built (`python build.py build --target hip-runtime`)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.render.plan import load_plan  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("targets", nargs="*", default=["hip-runtime", "hip-devel"])
    args = ap.parse_args()
    plan = load_plan(ROOT / "matrix.yaml")
    for name in args.targets:
        ref = plan.targets[name].content_tag
        t0 = time.perf_counter()
        subprocess.run([DOCKER, "run", "--rm", "--entrypoint", "true", ref], check=True)
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "build.py", "test", "--target", name, "--json"], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        statuses = {k: v["status"] for k, v in json.loads(proc.stdout)["suites"].items()} if proc.stdout else {}
        print(f"{name}: suites {wall:.1f} s (goal <= 30 s, {wall / 30:.2f} of budget); bare container "
              f"start+remove {bare:.1f} s, ratio {wall / bare:.1f}x; exit {proc.returncode}; {statuses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
