"""Tables the commands print, readable at 80 columns: names are never cut (a user copies them),
a cell holds a few short lines, and what does not fit a cell (a check's figures, whole reasons)
is printed below the table on request (`test -v`) or given whole by --json."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich import box
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rocmforge.render.archprune import describe
from rocmforge.verify.suites import SuiteStatus

if TYPE_CHECKING:
    from rich.console import Console

    from rocmforge.render.plan import BuildPlan
    from rocmforge.verify.suites import SuitesReport
    from rocmforge.workflow.pipeline import BuiltTarget

# Below this many columns `list` gives torch a line in the stack cell instead of a column of its own.
WIDE = 100
# The suites table's suite and result columns and the gaps between its columns, in characters.
REASON_OFFSET = len("contents") + len("not GPU-verified") + 6
STATUS_STYLE = {
    SuiteStatus.PASSED: "green",
    SuiteStatus.FAILED: "bold red",
    SuiteStatus.NOT_GPU_VERIFIED: "yellow",
    SuiteStatus.NOT_APPLICABLE: "dim",
}
OUTCOME_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}  # a check's, as pytest says it


def _archs_cell(r: dict) -> str:
    """The archs as one comma-joined word (never a word a line), prune state, then one line per variant."""
    variants = "".join(f"\nvariant {','.join(v['archs'])}" for v in r.get("variants", []))
    return f"{','.join(r['archs'])}\n{describe(r['pruned'], r['prune'])}{variants}"


def targets_table(out: Console, title: str, rows: list[dict]) -> None:
    """`list`'s table, then the blockers of each target that cannot be built here."""
    wide = out.width >= WIDE
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("target", no_wrap=True)
    table.add_column("stack", no_wrap=True)
    table.add_column("archs", min_width=len("gfx90a,gfx1100"))
    if wide:
        table.add_column("torch")
    table.add_column("here", no_wrap=True)
    for r in rows:
        torch = f"{r['pytorch']} {r['pytorch_build']}" if r["pytorch"] else "-"
        needs = "".join(f"\n  on {d}" for d in r["deps"])
        here = "yes" if r["buildable_here"] else f"no ({len(r['blockers'])})"
        stack = r["stack"] if wide or not r["pytorch"] else f"{r['stack']}\ntorch {torch}"
        cells = [r["name"] + needs, stack, _archs_cell(r)] + ([torch] if wide else []) + [here]
        table.add_row(*cells)
    out.print(table)
    blocked = [r for r in rows if r["blockers"]]
    if not blocked:
        return
    # Each target on a line of its own, its blockers indented below it: a column beside the names
    # left 56 of 80 columns and folded an image reference in the middle; here a blocker wraps
    # between words and a reference stays whole to copy.
    out.print("not buildable here:", highlight=False)
    for r in blocked:
        out.print(Padding(Text(r["name"]), (0, 0, 0, 2), expand=False))
        for b in r["blockers"]:
            out.print(Padding(Text(b.removeprefix(r["name"] + ": ")), (0, 0, 0, 4), expand=False))


def build_table(out: Console, plan: BuildPlan, results: list[BuiltTarget]) -> None:
    """The build's rows as the pipeline found them (no engine asked again), then the references to copy."""
    table = Table(title="build", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("target", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("image")  # the engine's own ID, where it differs, wraps under the image ID
    table.add_column("size", no_wrap=True)
    for r in results:
        shown = "" if r.engine_id in ("", r.image_id) else f" (engine: {r.engine_id[7:19]})"  # a manifest digest
        size = f"{r.size / 1e9:.2f} GB" if r.size is not None else "?"
        table.add_row(r.target, r.status, r.image_id[7:19] + shown, size)
    out.print(table)
    # Whole references, never folded, to copy: a pair a line, or two lines each where a pair is too wide.
    pairs = [(plan.by_key(r.target).content_tag, plan.by_key(r.target).readable_tag) for r in results]
    apart = "\n  " if any(len(a) + 2 + len(b) > out.width for a, b in pairs) else "  "
    for content_tag, readable_tag in pairs:
        out.print(f"{content_tag}{apart}{readable_tag}", highlight=False, soft_wrap=True)


def short_reason(detail: str, status: str, limit: int) -> str:
    """A suite's reason as its table cell shows it: the first line without the status it repeats,
    cut after whole clauses ("; ") or else words, with "…" where something was left out."""
    first, _, rest = detail.strip().removeprefix(f"{status}: ").partition("\n")
    if len(first) <= limit:
        return first + (" …" if rest.strip() else "")
    kept = ""
    for clause in first.split("; "):
        if len(kept) + len(clause) + 2 > limit:
            break
        kept = f"{kept}; {clause}" if kept else clause
    if not kept:
        kept = first[: limit - 2].rsplit(" ", 1)[0]
    return kept + " …"


def suites_table(out: Console, report: SuitesReport, verbose: bool = False) -> None:
    """One suites report: a row per suite with its status and a short reason; with verbose, each
    suite's checks, whole reasons and figures below the table."""
    title = f"suites in {report.image} ({report.image_id[7:19]})"
    # As wide as its title: a table of short reasons would otherwise fold the image reference.
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, min_width=min(len(title), out.width))
    table.add_column("suite", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("reason", ratio=1)
    # About two lines of the reason column: a word-wrapped reason may take a third.
    limit = max(2 * (out.width - REASON_OFFSET) - 10, 40)
    cut = False
    for name, s in report.suites.items():
        reason = short_reason(s.detail, str(s.status), limit)
        cut = cut or reason.endswith(" …")
        table.add_row(name, Text(str(s.status), style=STATUS_STYLE.get(s.status, "")), Text(reason))
    out.print(table)
    if verbose:
        suite_details(out, report)
    elif cut or any(s.figures for s in report.suites.values()):
        out.print("whole reasons and each check's figures: -v (or --json)", style="dim", highlight=False)


def figure_lines(figures: dict, depth: int = 0) -> list[tuple[int, str]]:
    """A check's figures as (depth, "key: value") lines: a mapping nests a level deeper, a list of
    plain values is one comma-joined value, strings are shown bare and other values as JSON."""
    lines: list[tuple[int, str]] = []
    for key, value in sorted(figures.items()):
        if isinstance(value, dict) and value:
            lines.append((depth, f"{key}:"))
            lines += figure_lines(value, depth + 1)
        elif isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
            lines.append((depth, f"{key}:"))
            for n, item in enumerate(value, 1):
                lines += figure_lines(item if isinstance(item, dict) else {f"[{n}]": item}, depth + 1)
        elif isinstance(value, list):
            lines.append((depth, f"{key}: {', '.join(_plain(v) for v in value) or '[]'}"))
        else:
            lines.append((depth, f"{key}: {_plain(value)}"))
    return lines


def _plain(value: object) -> str:
    return value if isinstance(value, str) and value else json.dumps(value)


def _checks_of(report: SuitesReport, suite: str) -> list[dict]:
    # A check skipped or failed in its setup has no call row: its setup row says what became of it.
    return [
        t for t in report.tests if t.get("suite") == suite and (t.get("phase") == "call" or t["outcome"] != "passed")
    ]


def _indented(out: Console, text: Text | str, indent: int) -> None:
    """A line whose wrapped rest stays under its own indent."""
    out.print(Padding(text if isinstance(text, Text) else Text(text), (0, 0, 0, indent)), highlight=False)


def suite_details(out: Console, report: SuitesReport) -> None:
    """What `test -v` adds below the table: per suite, each check's outcome, its whole reason and
    the figures it measured (a suite with no per-check rows kept: its whole reason and merged figures)."""
    for name, s in report.suites.items():
        out.print()
        head = Text(f"{name}: ", style="bold")
        head.append(str(s.status), style=STATUS_STYLE.get(s.status, ""))
        checks = _checks_of(report, name)
        reason = s.detail.strip().removeprefix(f"{s.status}: ")
        if s.status == SuiteStatus.PASSED and "\n" not in reason:
            head.append(f", {reason}")
        out.print(head, highlight=False)
        if not checks and s.status != SuiteStatus.PASSED and reason:
            _indented(out, reason, 2)
        for t in checks:
            # The outcome in a column of its own: a wrapped reason stays right of it.
            line = Table.grid(padding=(0, 2, 0, 0))
            line.add_column(width=len("skipped "), no_wrap=True)
            line.add_column()
            outcome = Text(t["outcome"], style=OUTCOME_STYLE.get(t["outcome"], ""))
            line.add_row(outcome, Text(t["test"] + (f": {t['detail']}" if t.get("detail") else "")))
            out.print(Padding(line, (0, 0, 0, 2)))
            for depth, text in figure_lines(t.get("figures") or {}):
                _indented(out, text, 12 + 2 * depth)
        if not checks:
            for depth, text in figure_lines(s.figures):
                _indented(out, text, 4 + 2 * depth)
