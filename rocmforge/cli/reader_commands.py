"""Commands that read saved host outputs without an engine: `rocminfo` (a saved rocminfo output)
and `archs` (the GPU architectures a binary, library or folder carries)."""

from __future__ import annotations

import json
from pathlib import Path

from rocmforge.cli import results
from rocmforge.cli.invocation import Invocation
from rocmforge.shared.errors import UserError
from rocmforge.verify.readers import archs as arch_reader
from rocmforge.verify.readers import rocminfo as rocminfo_reader


def rocminfo(inv: Invocation) -> int:
    """`rocminfo FILE`: a saved rocminfo output read as the doctor reads it."""
    info = rocminfo_reader.parse(rocminfo_reader.read_saved(inv.args.file))
    if inv.args.json:
        return results.emit("rocminfo", 0, **info.to_json())
    print(rocminfo_reader.format_table(info))
    return 0


def archs(inv: Invocation) -> int:
    """`archs PATH...`: the GPU architectures each binary, library or folder carries; a damaged file is exit 2."""
    paths = inv.args.paths
    for p in paths:
        if not Path(p).exists():
            raise UserError("no such file or folder", file=p)
        try:
            why = arch_reader.not_scannable(p)
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror or exc}", file=p) from None
        if why:
            raise UserError(why, file=p)
    # A damaged file (cut short, corrupt, unreadable) is listed with what was found in it, and
    # the run ends with exit 2 naming it: its list of archs cannot be trusted to be complete.
    found = arch_reader.scan_checked(paths)
    if inv.args.json:
        print(json.dumps([r.to_json() for r in found], indent=2))
    else:
        for r in found:
            if r.archs or r.error:
                print(f"{r.path}: {' '.join(r.archs) or '-'} ({r.kind}){'  ERROR: ' + r.error if r.error else ''}")
        if not any(r.archs for r in found):
            print("no GPU code found")
    damaged = [r for r in found if arch_reader.damaged(r)]
    if damaged:
        more = f" (and {len(damaged) - 1} more damaged file(s), see their entries)" if len(damaged) > 1 else ""
        raise UserError(damaged[0].error + more, file=damaged[0].path)
    return 0
