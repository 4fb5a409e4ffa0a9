#!/usr/bin/env python3
"""Suite wall time per image (`build.py test`), beside two baselines run on the same image in the
same call: starting and removing one bare container, and (with --baseline REV) the suites of
another revision of rocmforge, from a temporary git worktree, judging the very same image.
Goal (issue 38): the seed image's whole `build.py test` <= 60 s on a 2-core machine.
Needs the targets built (`python build.py build --target llama31-qlora-debian`).

    python bench/suites.py llama31-qlora-debian hip-runtime --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.render.plan import load_plan  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
GOAL_S = 60.0


def timed_suites(checkout: Path, image: str, target: str) -> tuple[float, dict, dict]:
    """(wall seconds, suite statuses, seconds per suite) of one `build.py test` from a checkout."""
    with tempfile.TemporaryDirectory(prefix="rocmforge-bench-") as state:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "build.py", "--state-dir", state, "test", "--image", image, "--target", target, "--json"],
            cwd=checkout,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return wall, {"error": f"exit {proc.returncode}: {proc.stderr[-300:]}"}, {}
    per_suite: dict[str, float] = {}
    for t in report.get("tests", []):
        per_suite[t["suite"]] = per_suite.get(t["suite"], 0.0) + (t.get("seconds") or 0.0)
    return wall, {k: v["status"] for k, v in report["suites"].items()}, per_suite


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", default=["llama31-qlora-debian", "hip-runtime"])
    ap.add_argument("--baseline", metavar="REV", help="also time this git revision's suites on the same images")
    args = ap.parse_args()
    plan = load_plan(ROOT / "matrix.yaml")
    with tempfile.TemporaryDirectory(prefix="rocmforge-bench-rev-") as tmp:
        base_checkout = None
        if args.baseline:
            base_checkout = Path(tmp) / "checkout"
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(base_checkout), args.baseline],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        try:
            for name in args.targets:
                ref = plan.targets[name].content_tag
                t0 = time.perf_counter()
                subprocess.run([DOCKER, "run", "--rm", "--entrypoint", "true", ref], check=True)
                bare = time.perf_counter() - t0
                wall, statuses, per_suite = timed_suites(ROOT, ref, name)
                print(
                    f"{name} ({ref}): suites {wall:.1f} s, {wall / GOAL_S:.2f} of the {GOAL_S:.0f} s goal; "
                    f"bare container start+remove {bare:.1f} s ({wall / bare:.1f}x)"
                )
                print(f"  statuses: {statuses}")
                print("  test time per suite: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(per_suite.items())))
                if base_checkout:
                    bwall, bstat, _ = timed_suites(base_checkout, ref, name)
                    print(
                        f"  baseline {args.baseline}: suites {bwall:.1f} s; this revision / baseline = "
                        f"{wall / bwall:.2f}x; baseline statuses: {bstat}"
                    )
        finally:
            if base_checkout:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(base_checkout)], cwd=ROOT, capture_output=True
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
