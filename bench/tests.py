#!/usr/bin/env python3
"""What the test suite's time goes to (issue 53: tests and CI in 40 minutes on a cold 2-core
machine): runs the README's test command (`python3 -m pytest`, or the selection and options given
after `--`) with `--junitxml`, then prints the 30 slowest tests and the time per test file, slowest
first, so that each change's cost can be read off. `--from FILE` only reads a junit xml written
before (CI keeps one in ci-artifacts/). A test's time is pytest's: set-up, call and tear-down, so a
module-scoped fixture's build is charged to the first test that asks for it.

    scripts/with-engine python3 bench/tests.py                      # the whole README command
    scripts/python-env python3 bench/tests.py -- tests/unit -q      # a selection
    python3 bench/tests.py --from ci-artifacts/tests.xml --top 50
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    """One test case of a junit xml: its file, its pytest id, seconds and outcome."""

    file: str
    name: str
    seconds: float
    outcome: str


def _file_of(classname: str, attrib_file: str | None) -> str:
    """The test's file: pytest's junit `file` attribute when written (junit_family=legacy), else
    from the classname (`tests.unit.test_x.TestY` -> tests/unit/test_x.py)."""
    if attrib_file:
        return attrib_file
    parts = classname.split(".")
    # A class inside the module (capitalised, by pytest's naming) is not part of the path.
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py"


def read_cases(xml: Path) -> list[Case]:
    """Every testcase of a junit xml (one <testsuite> or <testsuites> of them)."""
    cases = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        outcome = "passed"
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                break
        file = _file_of(tc.get("classname", ""), tc.get("file"))
        cases.append(Case(file, f"{file}::{tc.get('name', '?')}", float(tc.get("time") or 0.0), outcome))
    return cases


def wall_seconds(xml: Path) -> float:
    """The run's own time as pytest recorded it (its <testsuite>'s), start-up and collection included."""
    return sum(float(ts.get("time") or 0.0) for ts in ET.parse(xml).getroot().iter("testsuite"))


def _clock(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}:{rest:05.2f}" if minutes else f"{rest:.2f}s"


def table(cases: list[Case], top: int = 30, wall: float | None = None) -> str:
    """The slowest `top` tests and every file's total, each slowest first, as plain text; `wall` is
    the run's own time (with several workers the tests' sum is larger)."""
    total = sum(c.seconds for c in cases)
    lines = [f"{len(cases)} tests: {_clock(total)} summed over the tests" + (f", {_clock(wall)} wall" if wall else "")]
    counts: dict[str, int] = defaultdict(int)
    for c in cases:
        counts[c.outcome] += 1
    lines.append("  " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())))
    lines.append("")
    lines.append(f"The {min(top, len(cases))} slowest tests:")
    for c in sorted(cases, key=lambda c: -c.seconds)[:top]:
        mark = "" if c.outcome == "passed" else f"  [{c.outcome}]"
        lines.append(f"  {_clock(c.seconds):>9}  {c.name}{mark}")
    per_file: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        per_file[c.file].append(c)
    lines.append("")
    lines.append("Time per test file:")
    for file, group in sorted(per_file.items(), key=lambda kv: -sum(c.seconds for c in kv[1])):
        seconds = sum(c.seconds for c in group)
        share = 100 * seconds / total if total else 0.0
        lines.append(f"  {_clock(seconds):>9}  {share:5.1f}%  {len(group):4d} tests  {file}")
    return "\n".join(lines)


def run_pytest(pytest_args: list[str], xml: Path) -> int:
    """The README's test command (with the given selection and options) writing `xml`; its exit code."""
    cmd = [sys.executable, "-m", "pytest", f"--junitxml={xml}", *pytest_args]
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", type=Path, metavar="FILE", help="read this junit xml; run nothing")
    ap.add_argument("--junitxml", type=Path, metavar="FILE", help="where the run writes its junit xml (kept)")
    ap.add_argument("--top", type=int, default=30, help="how many of the slowest tests to list (30)")
    ap.add_argument("pytest_args", nargs="*", help="after --: pytest's selection and options")
    args = ap.parse_args(argv)
    if args.source:
        if args.pytest_args or args.junitxml:
            ap.error("--from reads a junit xml; it runs no tests")
        try:
            print(table(read_cases(args.source), args.top, wall_seconds(args.source)))
        except (OSError, ET.ParseError) as exc:
            print(f"{args.source}: {exc}", file=sys.stderr)
            return 1
        return 0
    with tempfile.TemporaryDirectory(prefix="rocmforge-bench-tests-") as tmp:
        xml = args.junitxml or Path(tmp) / "tests.xml"
        rc = run_pytest(args.pytest_args, xml.resolve())
        if not xml.exists():
            print(f"pytest wrote no {xml} (exit {rc})", file=sys.stderr)
            return rc or 1
        print()
        print(table(read_cases(xml), args.top, wall_seconds(xml)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
