"""The tables `list` and `test` print, read as a person would at 80 and 120 columns: every line
fits, no column comes one word a line, a suite is one row with a short reason, and its figures are
printed below the table only when asked (-v), never as JSON in a cell."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from rocmforge.cli import show
from rocmforge.cli.parser import build_parser
from rocmforge.render.plan import load_plan
from rocmforge.verify.suites import SuitesReport
from rocmforge.workflow.pipeline import BuiltTarget
from tests.conftest import ROOT, run_cli
from tests.screen import too_wide, word_per_line_runs

WIDTHS = (80, 120)
NGV = "no /dev/kfd on this host (no AMD GPU or amdgpu driver not loaded); rocminfo reports the driver not loaded"
FOLDERS = {"/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library": {"per_arch_files": {"gfx1100": 2}}}


def check(suite: str, test: str, outcome: str, detail: str = "", **figures) -> dict:
    return {"suite": suite, "test": test, "phase": "call", "outcome": outcome, "detail": detail, "figures": figures}


def report() -> SuitesReport:
    """A hip-runtime run on a host without a GPU, with one failure, shaped as `test` records it."""
    tests = [
        check("archs", "test_per_arch_files", "passed", pruned=True, folders=FOLDERS),
        check("archs", "test_declared_archs_are_covered", "passed", declared=["gfx1100"], gpu_libraries=4),
        check("rocminfo", "test_gpu_agents_match_target", "skipped", f"not GPU-verified: {NGV}"),
        check(
            "linkage",
            "test_libraries_load",
            "failed",
            "librocblas.so.0 not found (needed by /usr/bin/gemm-smoke)",
            libraries_loaded=4,
        ),
    ]
    suites = {
        "archs": {
            "status": "passed",
            "detail": "2 check(s)",
            "passed": 2,
            "figures": {"pruned": True, "folders": FOLDERS, "declared": ["gfx1100"], "gpu_libraries": 4},
        },
        "rocminfo": {"status": "not GPU-verified", "detail": NGV, "not_gpu_verified": 1},
        "linkage": {
            "status": "failed",
            "failed": 1,
            "detail": "test_libraries_load: librocblas.so.0 not found (needed by /usr/bin/gemm-smoke)",
        },
        "workload": {
            "status": "not applicable",
            "detail": "not applicable: target hip-runtime and the targets it is built on declare no settings component",
        },
        "pytest": {"status": "failed", "detail": "pytest exited 3 although no suite failed:\nINTERNALERROR> boom"},
    }
    return SuitesReport.from_json(
        {
            "image": "rocmforge/hip-runtime:content-03db0e537c1d",
            "image_id": "sha256:" + "1f4c58ef775b" * 5 + "abcd",
            "target": "hip-runtime",
            "ok": False,
            "suites": suites,
            "tests": tests,
        }
    )


def printed(width: int, draw) -> list[str]:
    out = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    draw(out)
    return [line.rstrip() for line in out.export_text().splitlines()]


@pytest.mark.parametrize("width", WIDTHS)
def test_suites_table_is_a_row_per_suite_with_a_short_reason(width):
    lines = printed(width, lambda out: show.suites_table(out, report()))
    print("\n".join(lines))
    assert not too_wide(lines, width) and not word_per_line_runs(lines)
    rows = [i for i, ln in enumerate(lines) if ln[1:].split(" ")[0] in report().suites]
    assert [lines[i].split()[0] for i in rows] == list(report().suites), "a row per suite, in order"
    for name, status in (("archs", "passed"), ("rocminfo", "not GPU-verified"), ("linkage", "failed")):
        assert status in next(lines[i] for i in rows if lines[i].split()[0] == name)
    assert max(b - a for a, b in zip(rows, rows[1:])) <= 2, "a reason takes two lines at most"
    text = "\n".join(lines)
    assert "{" not in text and "per_arch_files" not in text, "figures belong below the table, with -v"
    assert "INTERNALERROR" not in text, "a reason's later lines are left to -v"
    assert "not applicable: target" not in text, "a reason does not repeat its status"
    assert lines[-1] == "whole reasons and each check's figures: -v (or --json)"


@pytest.mark.parametrize("width", WIDTHS)
def test_verbose_prints_each_checks_figures_below_the_table(width):
    lines = printed(width, lambda out: show.suites_table(out, report(), verbose=True))
    print("\n".join(lines))
    assert not too_wide(lines, width) and not word_per_line_runs(lines)
    text = "\n".join(lines)
    table_end = text.index("\n\n")
    assert "per_arch_files" not in text[:table_end]
    below = text[table_end:]
    assert "archs: passed, 2 check(s)" in below
    assert "  passed    test_per_arch_files" in below
    assert "/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library:" in below and "gfx1100: 2" in below
    assert "declared: gfx1100" in below
    assert "  failed    test_libraries_load: librocblas.so.0 not found" in below
    assert NGV in " ".join(below.split()), "the whole reason, which the table cut"
    assert "INTERNALERROR> boom" in below, "a suite without checks: its whole reason"
    assert "workload: not applicable\n  target hip-runtime and the targets" in below
    assert "{" not in below, "figures as key: value lines, not JSON"


def test_short_reason_keeps_whole_clauses():
    assert show.short_reason("6 check(s)", "passed", 90) == "6 check(s)"
    assert show.short_reason(NGV, "not GPU-verified", 90) == NGV.split(";")[0] + " …"
    assert show.short_reason("not applicable: no torch", "not applicable", 90) == "no torch"
    assert show.short_reason("x" * 30 + " " + "y" * 80, "failed", 60) == "x" * 30 + " …"
    assert show.short_reason("first\nsecond", "failed", 60) == "first …"


def test_figure_lines_nest_mappings_and_join_plain_lists():
    figures = {"b": {"c": [1, 2], "d": {}}, "a": "", "e": [{"f": None}], "g": "text"}
    assert show.figure_lines(figures) == [
        (0, 'a: ""'),
        (0, "b:"),
        (1, "c: 1, 2"),
        (1, "d: {}"),
        (0, "e:"),
        (1, "f: null"),
        (0, "g: text"),
    ]


@pytest.fixture(scope="module")
def targets() -> list[dict]:
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("width", WIDTHS)
def test_list_fits_without_a_word_per_line(targets, width):
    lines = printed(width, lambda out: show.targets_table(out, "targets in matrix.yaml", targets))
    print("\n".join(lines))
    assert not too_wide(lines, width)
    assert not word_per_line_runs(lines), "a column wraps one word a line"
    runtime = next(ln for ln in lines if ln.startswith(" hip-runtime "))
    assert "debian13-rocm5.7" in runtime and "gfx90a,gfx1100" in runtime and runtime.rstrip().endswith("yes")
    assert any("variant gfx1100" in ln for ln in lines)
    blocked = next(ln for ln in lines if ln.startswith(" llama7b-train "))
    assert blocked.rstrip().endswith("no (4)")
    assert "not buildable here:" in lines
    # every blocker's words whole (an image reference to copy was folded at 80 columns once)
    after = lines[lines.index("not buildable here:") :]
    for r in targets:
        for word in (w for b in r["blockers"] for w in b.removeprefix(r["name"] + ": ").split()):
            assert any(word in ln.split() for ln in after), f"{word!r} is cut at {width} columns"
    assert (" torch " in lines[2]) == (width >= show.WIDE), "torch is a column when there is room for it"
    assert any("torch 2.14.1 cpu" in ln or "2.14.1 cpu" in ln for ln in lines)


def test_a_table_of_short_reasons_keeps_its_title_whole():
    passing = report()
    passing.suites = {"archs": passing.suites["archs"]}
    lines = printed(80, lambda out: show.suites_table(out, passing))
    assert lines[0].strip() == "suites in rocmforge/hip-runtime:content-03db0e537c1d (1f4c58ef775b)"


def test_a_path_too_long_for_any_line_is_not_a_line_too_wide():
    path = "/work/.rocmforge/results/" + "a5" * 32 + ".json"
    assert too_wide([f"results recorded: {path}", "x " * 41], 80) == ["x " * 41]


@pytest.mark.parametrize("width", WIDTHS)
def test_build_table_fits(width):
    plan = load_plan(ROOT / "matrix.yaml")
    results = [
        BuiltTarget(key, status, "sha256:" + "ab" * 32, 6_860_000_000, engine)
        for key, status, engine in (
            ("hip64-devel", "up-to-date", ""),
            ("llama31-qlora-debian-gfx1100", "from cache", "sha256:" + "cd" * 32),
        )
    ]
    lines = printed(width, lambda out: show.build_table(out, plan, results))
    print("\n".join(lines))
    assert not too_wide(lines, width) and not word_per_line_runs(lines)
    row = next(line for line in lines if line.startswith(" llama31-qlora-debian-gfx1100 "))
    assert "from cache" in row and "abababababab" in row and row.endswith("6.86 GB")
    assert "cdcdcdcdcdcd" in "\n".join(lines), "the engine's own ID, where it differs"
    assert plan.by_key("hip64-devel").content_tag in "\n".join(lines), "whole references below, to copy"


@pytest.mark.parametrize(
    "argv, dest",
    [
        (["test", "--target", "hip-runtime", "-v"], "test_verbose"),
        (["test", "--target", "hip-runtime", "--verbose"], "test_verbose"),
        (["--target", "hip-runtime", "-v"], "verbose"),
    ],
)
def test_verbose_is_an_option_of_test_and_of_the_bare_target(argv, dest):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) is True
    assert build_parser().parse_args(argv[:-1]).__dict__.get(dest) is False
