"""Tables the commands print. Names are never cut (a user copies them); other columns wrap."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from rocmforge.render.archprune import describe
from rocmforge.verify.suites import SuiteStatus

if TYPE_CHECKING:
    from rich.console import Console

    from rocmforge.render.plan import BuildPlan
    from rocmforge.verify.suites import SuitesReport
    from rocmforge.workflow.pipeline import BuiltTarget


def targets_table(out: Console, title: str, rows: list[dict]) -> None:
    """`list`'s table, then each target's blockers on a line of their own."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)  # 80 columns must stay readable
    for col in ("target", "stack"):
        table.add_column(col, no_wrap=True)
    for col in ("archs", "torch", "here"):
        table.add_column(col, overflow="fold")
    for r in rows:
        torch = f"{r['pytorch']} {r['pytorch_build']}" if r["pytorch"] else "-"
        needs = "".join(f"\n  on {d}" for d in r["deps"])
        variants = "".join(f"\nvariant {' '.join(v['archs'])}" for v in r.get("variants", []))
        table.add_row(
            r["name"] + needs,
            r["stack"],
            " ".join(r["archs"]) + f"\n{describe(r['pruned'], r['prune'])}{variants}",
            torch,
            "yes" if r["buildable_here"] else f"no ({len(r['blockers'])} below)",
        )
    out.print(table)
    for r in rows:
        for b in r["blockers"]:
            out.print(
                f"  {b if b.startswith(r['name'] + ':') else r['name'] + ': ' + b}", highlight=False, markup=False
            )


def build_table(out: Console, plan: BuildPlan, results: list[BuiltTarget]) -> None:
    """The build's rows as the pipeline found them (no engine asked again), then the references to copy."""
    table = Table(title="build")
    table.add_column("target", no_wrap=True)
    for col in ("status", "image", "size"):
        table.add_column(col, no_wrap=True)
    for r in results:
        shown = "" if r.engine_id in ("", r.image_id) else f" (engine: {r.engine_id[7:19]})"  # a manifest digest
        size = f"{r.size / 1e9:.2f} GB" if r.size is not None else "?"
        table.add_row(r.target, r.status, r.image_id[7:19] + shown, size)
    out.print(table)
    for r in results:  # whole references, one per line, to copy
        tp = plan.by_key(r.target)
        out.print(f"{tp.content_tag}  {tp.readable_tag}", highlight=False, soft_wrap=True)


def suites_table(out: Console, report: SuitesReport) -> None:
    """One suites report as a table: a line per suite with its status and detail."""
    colour = {
        SuiteStatus.PASSED: "green",
        SuiteStatus.FAILED: "red",
        SuiteStatus.NOT_GPU_VERIFIED: "yellow",
        SuiteStatus.NOT_APPLICABLE: "dim",
    }
    table = Table(title=f"suites in {report.image} ({report.image_id[7:19]})")
    for col in ("suite", "result", "detail"):
        table.add_column(col, overflow="fold")
    for name, s in report.suites.items():
        detail = s.detail + ("\n" + json.dumps(s.figures, sort_keys=True) if s.figures else "")
        table.add_row(name, f"[{colour.get(s.status, 'white')}]{s.status}[/]", detail)
    out.print(table)
