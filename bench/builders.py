#!/usr/bin/env python3
"""BuildKit against the classic builder, side by side in one run (issue 55):
- a cold build (no builder cache) of each target named (default: hip-runtime and the seed target
  llama31-qlora-debian), every image of it: the main image and each variant. Each builder's no-cache
  build is `verify-repro --against-built --builder B`, so the same run also says whether either
  builder's image is the one `build` made (identical IDs). Printed: each builder's build seconds,
  normalisation seconds, and BuildKit / classic (goal <= 0.8 for the build);
- a one-step rebuild: `build --builder B` of a copy of the target under its own name with one
  more RUN step (a nonce), its other steps in each builder's cache; BuildKit / classic.
Needs the engine, the targets built (they are built first where missing: classic), and buildx where
the docker CLI finds it (`python3 -m tests.buildx` prints a DOCKER_CONFIG folder holding the pinned one;
pass it as DOCKER_CONFIG). Nothing it builds is kept, and no tag of the targets themselves is touched."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import copy_project  # noqa: E402

BUILDERS = ("classic", "buildkit")
STEP_TARGET = "bench-one-step"


def cli(*args: str, matrix: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    cmd = [sys.executable, str(ROOT / "build.py"), *(("--matrix", str(matrix)) if matrix else ()), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def cold(target: str) -> dict[str, dict]:
    """Each builder's verify-repro --against-built report of target."""
    out = {}
    for builder in BUILDERS:
        wall, proc = cli("verify-repro", "--target", target, "--against-built", "--builder", builder, "--json")
        if proc.returncode not in (0, 1) or not proc.stdout.strip():
            raise SystemExit(
                f"verify-repro {target} --builder {builder}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
            )
        report = json.loads(proc.stdout)
        images = [report, *report.get("variants", [])]
        out[builder] = {
            "wall_s": wall,
            "build_s": sum(t["build_s"] for r in images for t in r["timings"]),
            "normalise_s": sum(t["normalise_s"] for r in images for t in r["timings"]),
            "identical": report["identical"],
            "images": len(images),
        }
    return out


def step_project(root: Path, target: str) -> Path:
    """A project copy with STEP_TARGET: target's definition and lock under a name of its own, its
    main image only, so that nothing here touches target's own tags."""
    matrix = copy_project(root)
    data = yaml.safe_load(matrix.read_text())
    data["targets"][STEP_TARGET] = {k: v for k, v in data["targets"][target].items() if k != "variants"}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock_path = matrix.with_suffix(".lock")
    lock = yaml.safe_load(lock_path.read_text())
    for section in lock.values():
        if isinstance(section, dict) and target in section:
            section[STEP_TARGET] = section[target]
    lock_path.write_text(yaml.safe_dump(lock))
    return matrix


def one_step(target: str) -> dict[str, float]:
    """Seconds of `build` for a copy of the target with one more RUN step (a nonce: a new image each
    time), per builder; its other steps are the target's, in each builder's cache from the cold
    builds before."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="rocmforge-bench-builders-") as tmp:
        matrix = step_project(Path(tmp), target)
        tpl = Path(tmp) / "templates" / "Dockerfile.j2"
        original, marker = tpl.read_text(), "COPY probes/ /opt/rocmforge/probes/"
        try:
            for builder in BUILDERS:
                step = f"{{% if name == '{STEP_TARGET}' %}}RUN echo {uuid.uuid4().hex} > /opt/bench-step{{% endif %}}"
                tpl.write_text(original.replace(marker, f"{marker}\n{step}", 1))
                seconds, proc = cli("build", "--target", STEP_TARGET, "--builder", builder, matrix=matrix)
                if proc.returncode != 0:
                    raise SystemExit(f"one-step build {builder}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
                out[builder] = seconds
        finally:
            cli("clean", "--target", STEP_TARGET, matrix=matrix)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", default=["hip-runtime", "llama31-qlora-debian"])
    ap.add_argument("--step-target", default="hip-runtime", help="the target of the one-step rebuild")
    args = ap.parse_args()
    found = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit("no docker buildx: DOCKER_CONFIG=$(python3 -m tests.buildx) python3 bench/builders.py")
    print(f"buildx: {found.stdout.strip()}; DOCKER_CONFIG={os.environ.get('DOCKER_CONFIG', '(default)')}")
    for target in args.targets:
        _, built = cli("build", "--target", target)
        if built.returncode != 0:
            raise SystemExit(f"build {target}: exit {built.returncode}\n{built.stderr[-3000:]}")
        r = cold(target)
        c, b = r["classic"], r["buildkit"]
        print(
            f"cold {target} ({c['images']} images): classic build {c['build_s']:.1f} s + normalise "
            f"{c['normalise_s']:.1f} s (identical to the built image: {c['identical']}); buildkit build "
            f"{b['build_s']:.1f} s + normalise {b['normalise_s']:.1f} s (identical: {b['identical']}); "
            f"buildkit / classic: build {b['build_s'] / c['build_s']:.2f}, whole {b['wall_s'] / c['wall_s']:.2f}"
        )
    s = one_step(args.step_target)
    print(
        f"one-step rebuild of {args.step_target}: classic {s['classic']:.1f} s, buildkit {s['buildkit']:.1f} s; "
        f"buildkit / classic {s['buildkit'] / s['classic']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
