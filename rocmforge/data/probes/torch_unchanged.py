"""Fails a build whose Python environment replaced the image's own torch.

Run with the environment's interpreter after `pip install`: argv[1] is a JSON object
{"version": torch.__version__, "hip": torch.version.hip} as `build.py lock` found them in the base.
A dependency asking for another torch would otherwise pull a CUDA or CPU build from PyPI over the
ROCm one, silently."""

import json
import sys


def main() -> int:
    want = json.loads(sys.argv[1])
    try:
        import torch
    except Exception as exc:  # any import failure means the environment broke torch
        print(f"torch no longer imports after installing the environment: {exc}", file=sys.stderr)
        return 1
    have = {"version": torch.__version__, "hip": getattr(torch.version, "hip", None)}
    if have != want:
        print(f"the environment changed the image's torch: expected {want}, now {have} "
              f"(from {torch.__file__})", file=sys.stderr)
        return 1
    print(f"torch unchanged: {have['version']} (hip {have['hip']}) from {torch.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
