#!/usr/bin/env python3
"""The outputs list of the wheel a cmake-wheel builder stage built, run there alone:

    wheel_outputs.py --component NAME --out FILE WHEEL

`# rocmforge-outputs <component> dist:<distribution>`, then one sha256sum line per file inside the
wheel by its path there. The runtime image keeps the list (/opt/rocmforge/outputs/), and the
contents suite (contents.py) checks the installed files against it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import zipfile

OUTPUTS_HEADER = "# rocmforge-outputs "


def wheel_list(component: str, wheel: str) -> str:
    """The outputs list of a built wheel: the sha256 of every file inside it, by its path there."""
    dist = os.path.basename(wheel).split("-")[0]
    lines = [f"{OUTPUTS_HEADER}{component} dist:{dist}"]
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if not name.endswith("/"):
                lines.append(f"{hashlib.sha256(zf.read(name)).hexdigest()}  {name}")
    return "\n".join(lines) + "\n"


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="wheel_outputs.py", description=__doc__.split("\n")[0])
    parser.add_argument("--component", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("wheels", nargs="+")
    args = parser.parse_args(argv)
    if len(args.wheels) != 1:
        print(f"wheel_outputs.py: expected the one wheel the stage built, got {' '.join(args.wheels)}",
              file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(wheel_list(args.component, args.wheels[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
