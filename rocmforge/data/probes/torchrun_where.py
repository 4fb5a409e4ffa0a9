#!/usr/bin/env python3
"""Run as a one-process `torchrun` job (the console script, as a user types it): prints one JSON
line saying which interpreter torchrun started, the rank environment it set, and where
transformers and peft were imported from. The workload suite compares this with the image's venv.
Standalone: stdlib at module level; Python 3.8+."""

import json
import os
import sys


def main() -> int:
    out = {"executable": sys.executable, "prefix": sys.prefix,
           "rank": os.environ.get("RANK"), "world_size": os.environ.get("WORLD_SIZE"), "modules": {}}
    for name in ("transformers", "peft"):
        try:
            out["modules"][name] = __import__(name).__file__
        except Exception as exc:  # reported, and the suite fails on it
            out["modules"][name] = f"import failed: {type(exc).__name__}: {exc}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
