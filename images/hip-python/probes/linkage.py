#!/usr/bin/env python3
"""Linkage probe, run inside an image in one exec: find every ELF object under the given paths
(files, folders or globs), tell x86-64 host objects from AMD GPU code objects by e_machine, and
run ldd on the host ones. Prints one JSON object: {path: {"kind": "host"|"gpu", "ldd": ..., "rc": n}}.

By hand on a GPU host:  python3 /opt/rocmforge/probes/linkage.py /opt/rocm/lib /opt/rocmforge/bin
"""

import glob
import json
import os
import subprocess
import sys

EM_X86_64, EM_AMDGPU = 62, 224


def elf_machine(path):
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def walk(paths):
    seen = set()
    for pattern in paths:
        for top in sorted(glob.glob(pattern)) or []:
            candidates = [top] if not os.path.isdir(top) else sorted(
                os.path.join(d, f) for d, _, files in os.walk(top) for f in files)
            for p in candidates:
                real = os.path.realpath(p)
                if real in seen or not os.path.isfile(real):
                    continue
                seen.add(real)
                yield real


def main(argv):
    result = {}
    for path in walk(argv):
        machine = elf_machine(path)
        if machine == EM_AMDGPU:
            result[path] = {"kind": "gpu"}
        elif machine == EM_X86_64:
            proc = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            result[path] = {"kind": "host", "ldd": proc.stdout, "rc": proc.returncode}
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
