"""Writes the derived cases of this corpus: random bytes (fixed seeds) and real files cut short
(rocminfo outputs from tests/fixtures/rocminfo/, code objects and an executable from
tests/fixtures/archs/, and pieces of records). Hand-written cases and every `<case>.expect` are
plain files next to them, not made here.

    python tests/unit/bad_inputs/make_cases.py       # rewrite the derived cases
    python tests/unit/bad_inputs/make_cases.py --check   # exit 1 when a committed case differs

test_bad_input_files.py runs the --check side, so a committed case always matches this script.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures"
ROCMINFO = FIXTURES / "rocminfo" / "handwritten"
ARCHS = FIXTURES / "archs"


def noise(seed: int, size: int = 4096) -> bytes:
    return random.Random(seed).randbytes(size)


def lines(path: Path, count: int) -> bytes:
    """The first `count` lines of a file, as bytes (line ends kept)."""
    return b"".join(path.read_bytes().splitlines(keepends=True)[:count])


def half(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: len(data) // 2]


def cases() -> dict[str, bytes]:
    result_record = {
        "image_id": "sha256:" + "1" * 64,
        "target": "hip-runtime",
        "ok": True,
        "suites": {"linkage": {"status": "passed", "detail": "3 check(s)"}},
    }
    publish_record = {
        "content_hash": "c" * 64,
        "digest": "sha256:" + "d" * 64,
        "image_id": "sha256:" + "e" * 64,
        "registry": "127.0.0.1:5000",
        "repository": "127.0.0.1:5000/rocmforge/hip-runtime",
        "suites": {"linkage": "passed"},
        "tags": ["content-cccccccccccc", "debian13-rocm5.7"],
        "target": "hip-runtime",
    }
    return {
        # rocminfo: a whole run cut inside an agent, inside the system attributes, and a paste of
        # two runs whose second one is cut.
        "rocminfo/random-bytes.bin": noise(1),
        "rocminfo/truncated-mid-agent.txt": lines(ROCMINFO / "mi210.txt", 120),
        "rocminfo/truncated-in-system-attributes.txt": lines(ROCMINFO / "mi210.txt", 8),
        "rocminfo/truncated-second-run.txt": (ROCMINFO / "no-padding.txt").read_bytes()
        + b"$ rocminfo\n"
        + lines(ROCMINFO / "no-padding.txt", 60),
        "rocminfo/utf16-without-agents.txt": "HSA is fine\nnothing else here\n".encode("utf-16"),
        # a paste from a bug report (fence, CRLF) cut inside its agent, the fence closed after the cut
        "rocminfo/truncated-fenced-crlf-paste.txt": b"\r\n".join(
            (FIXTURES / "rocminfo" / "pasted" / "mi250-aiter-179.txt").read_bytes().splitlines()[:60] + [b"```", b""]
        ),
        # archs: real code objects, a standalone bundle and an executable (hipcc/clang output), cut.
        "archs/random-bytes.bin": noise(2),
        "archs/co-gfx942-100-bytes.hsaco": (ARCHS / "co_gfx942.hsaco").read_bytes()[:100],
        "archs/co-gfx942-half.hsaco": half(ARCHS / "co_gfx942.hsaco"),
        "archs/host-exe-100-bytes": (ARCHS / "multi_arch_exe").read_bytes()[:100],
        "archs/co-gfx1100-half.hsaco": half(ARCHS / "co_gfx1100.hsaco"),
        "archs/host-exe-first-4k": (ARCHS / "multi_arch_exe").read_bytes()[:4096],
        "archs/genco-bundle-half.hsaco": half(ARCHS / "genco_bundle.hsaco"),
        # matrix.lock
        "lock/random-bytes.lock": noise(3),
        # published/<target>.json
        "published/random-bytes.json": noise(4),
        "published/truncated.json": json.dumps(publish_record, indent=2).encode()[:200],
        # records rocmforge keeps for itself
        "results/random-bytes.json": noise(5, 1024),
        "results/truncated.json": json.dumps(result_record, indent=2).encode()[:120],
        "cache/random-bytes.json": noise(6, 1024),
        "checks/random-bytes.json": noise(7, 1024),
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for rel, data in cases().items():
        path = HERE / rel
        if check:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for rel in stale:
        print(f"stale: {rel} (run python {Path(__file__).relative_to(HERE.parents[2])})", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
