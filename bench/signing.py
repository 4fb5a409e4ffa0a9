#!/usr/bin/env python3
"""hip-runtime's push with and without --sign-key, each into an empty registry (so every layer
really travels), alternating, BENCH_ROUNDS times (default 2); prints the medians, their ratio and
that of the fastest runs (goal <= 1.1). The signed push includes the release record (written and
signed last); `push --refresh`, which signs only that record again, is timed on its own too.
The key pair is made by cosign; the suites run once into
a state folder of the bench's own. Needs the engine, Debian's docker-registry and hip-runtime built."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.normalise import cli  # noqa: E402
from rocmforge.release import cosign as cosigns  # noqa: E402
from tests import local_registry  # noqa: E402
from tests.conftest import copy_project  # noqa: E402

TARGET = "hip-runtime"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    try:
        matrix = copy_project(tmp)
        cli(matrix, "test", "--target", TARGET)
        os.environ[cosigns.PASSWORD_ENV] = "bench"
        cosign = cosigns.find()
        cosign.run(["generate-key-pair"], cwd=tmp)
        times: dict[str, list[float]] = {"plain": [], "signed": [], "refresh": []}
        for _ in range(ROUNDS):
            for kind, extra in (("plain", []), ("signed", ["--sign-key", str(tmp / "cosign.key")])):
                with local_registry.serve() as host:
                    times[kind].append(cli(matrix, "push", "--target", TARGET, "--registry", f"{host}/bench", *extra))
                    if extra:
                        refresh = [*extra, "--refresh"]
                        times["refresh"].append(
                            cli(matrix, "push", "--target", TARGET, "--registry", f"{host}/bench", *refresh)
                        )
        plain, signed = (statistics.median(times[k]) for k in ("plain", "signed"))
        print(f"{TARGET} push into an empty registry, {ROUNDS} round(s), {cosign.describe()}:")
        print(f"  plain  {plain:6.1f} s  {times['plain']}")
        print(f"  signed {signed:6.1f} s  {times['signed']}  (+{signed - plain:.1f} s)")
        print(f"  refresh {statistics.median(times['refresh']):5.1f} s  (the release record alone, signed again)")
        print(
            f"  ratio  {signed / plain:.3f} of the medians, {min(times['signed']) / min(times['plain']):.3f} of the "
            "fastest runs (goal <= 1.1; a shared engine's noise can exceed the difference)"
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
