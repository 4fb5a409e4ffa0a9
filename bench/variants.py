#!/usr/bin/env python3
"""Each per-arch variant beside its target's all-archs image: builds the target (main image and
variants, through build.py: up to date when already built) and prints each image's size and its
ratio to the main image (goal for hip-runtime's gfx1100 variant: at most 0.8). Needs the engine.

    python3 bench/variants.py hip-runtime
    python3 bench/variants.py            # every target that declares variants
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.assemble import engine  # noqa: E402
from rocmforge.render.plan import load_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*")
    args = ap.parse_args()
    plan = load_plan(ROOT / "matrix.yaml")
    names = args.targets or [n for n in plan.order() if plan.variants.get(n)]
    client = engine.connect()
    print(f"{'image':<28} {'archs':<18} {'size GB':>8} {'x main':>7}  image ID")
    for name in names:
        if not plan.variants.get(name):
            sys.exit(f"{name} declares no variants")
        proc = subprocess.run(
            [sys.executable, str(ROOT / "build.py"), "build", "--target", name], capture_output=True, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"build of {name} failed:\n{proc.stderr[-3000:]}")
        main_size = None
        for tp in plan.images_of(name):
            info = client.inspect(tp.content_tag)
            size = info["Size"]
            main_size = main_size or size
            print(
                f"{tp.key:<28} {','.join(tp.archs):<18} {size / 1e9:>8.3f} {size / main_size:>7.2f}  {info['Id'][7:19]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
