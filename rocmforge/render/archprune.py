"""Keeping a target's per-arch GPU data files only for its archs. data/probes/perarch.py does the work
inside the build, in the RUN that installs the packages (so removed bytes never reach a layer),
and leaves one JSON record per target under PRUNE_DIR; the manifest, `list` and the report read
those records back."""

from __future__ import annotations

import json
from collections.abc import Iterable

PRUNE_DIR = "/opt/rocmforge/prune"
LABEL = "io.rocmforge.archs.pruned"
# perarch.py imports gfxnames.py's processor table: both travel.
PROBES = ("probes/perarch.py", "probes/gfxnames.py")
# Every record, one JSON document per line (an image built on a pruned target holds its parent's too).
READ_RECORDS = f'for f in {PRUNE_DIR}/*.json; do [ -f "$f" ] && cat "$f" && echo; done; true'


def record_path(target: str) -> str:
    """Where in the image the prune step writes target's record."""
    return f"{PRUNE_DIR}/{target}.json"


# Where perarch.py looks, and a superset of the folders it prunes (its data_dir_kind) as `find -path`
# patterns: an image without any such folder needs no Python for the step.
ROOTS = ("/usr/lib", "/usr/local/lib", "/usr/share", "/opt")
DATA_DIR_PATTERNS = (
    "*/rocblas/library",
    "*/rocblas/*/library",
    "*/hipblaslt/library",
    "*/hipblaslt/*/library",
    "*/miopen/db",
)


def command(target: str, archs: Iterable[str], python_bin: str) -> str:
    """The shell fragment the install RUN ends with (before apt's clean-up)."""
    keep = ",".join(archs)
    folders = " -o ".join(f"-path '{p}'" for p in DATA_DIR_PATTERNS)
    return (
        f'if [ -n "$(find {" ".join(ROOTS)} -type d \\( {folders} \\) -print -quit 2>/dev/null)" ]; then '
        f'{{ [ -x {python_bin} ] || {{ echo "pruning GPU files to {keep} needs {python_bin} in the image: '
        f'install python3, or set prune_archs: false on target {target}" >&2; exit 1; }}; }}'
        f" && {python_bin} -B {PRUNE_DIR}/perarch.py prune --keep {keep} --record {record_path(target)}; fi"
    )


def parse_records(text: str) -> list[dict]:
    """The prune records READ_RECORDS printed, one JSON document per line (other lines skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def summary(pruned: bool, records: list[dict]) -> dict:
    """What the manifest, `list` and the report say: pruned or not, to which archs, what it saved."""
    kept = [set(r.get("keep", [])) for r in records]
    return {
        "pruned": pruned,
        "archs": sorted(set.intersection(*kept)) if kept else [],  # what survived every prune step
        "removed_files": sum(r.get("removed_files", 0) for r in records),
        "removed_bytes": sum(r.get("removed_bytes", 0) for r in records),
    }


def describe(pruned: bool, summary: dict | None) -> str:
    """ "pruned, 1.06 GB saved", "pruned" (no manifest yet) or "not pruned"."""
    if not pruned:
        return "not pruned"
    saved = (summary or {}).get("removed_bytes")
    return f"pruned, {saved / 1e9:.2f} GB saved" if isinstance(saved, int) else "pruned"
