"""`list` and `test` as a person sees them in an 80-column terminal: each command runs in a tmux
pane 80 columns wide (Debian's tmux, a private server), and the pane's text, its terminal-wrapped
lines joined again, must have no line wider than 80, no column that comes one word a line, and the
words a reader looks for. `test` runs against hip-runtime's main image (hip_runtime_built), once
as it prints by default and once with -v."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rocmforge.host.container import host_gpu_access
from rocmforge.render.plan import load_plan
from rocmforge.verify.suites import suites_present
from tests.conftest import BUILD_PY, ROOT
from tests.integration.conftest import _need
from tests.screen import too_wide, word_per_line_runs

pytestmark = pytest.mark.docker
WIDTH = 80
NO_GPU = not host_gpu_access().present
ARTIFACTS = Path(os.environ.get("ROCMFORGE_TEST_ARTIFACTS") or ROOT / ".rocmforge" / "test-artifacts")
RUNTIME = load_plan(ROOT / "matrix.yaml").targets["hip-runtime"].content_tag


def in_tmux(tmp_path: Path, name: str, *args: str, timeout: int = 1800) -> list[str]:
    """The lines `build.py ARGS` leaves in an 80-column tmux pane, from the top of its history,
    each line the terminal wrapped joined again (so a line printed too wide shows as one); kept
    as terminal-NAME.txt with the test artifacts."""
    tmux = shutil.which("tmux") or _need("tmux is not installed (apt-get install tmux)")
    server = [tmux, "-L", f"rocmforge-{uuid.uuid4().hex[:8]}", "-f", str(tmp_path / "tmux.conf")]
    (tmp_path / "tmux.conf").write_text("set -g history-limit 50000\n")
    done = f"done-{uuid.uuid4().hex[:8]}"
    # The terminal's own width decides, never a COLUMNS the test run inherited.
    command = (
        f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES {shlex.quote(sys.executable)} "
        f'{shlex.quote(str(BUILD_PY))} {shlex.join(args)}; echo "[exit $?]"; {shlex.join(server)} wait-for -S {done}; '
        "sleep 600"
    )
    subprocess.run([*server, "new-session", "-d", "-x", str(WIDTH), "-y", "50", command], check=True)
    try:
        subprocess.run([*server, "wait-for", done], check=True, timeout=timeout)
        shown = subprocess.run(
            [*server, "capture-pane", "-p", "-J", "-S", "-", "-E", "-"], check=True, capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True)
    lines = [line.rstrip() for line in shown.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"terminal-{name}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return lines


def readable(lines: list[str]) -> None:
    assert lines and lines[-1] in ("[exit 0]", "[exit 1]"), lines[-5:]
    assert not too_wide(lines, WIDTH), f"wider than {WIDTH} columns: {too_wide(lines, WIDTH)}"
    assert not word_per_line_runs(lines), f"a column wraps one word a line: {word_per_line_runs(lines)}"


def test_list_at_80_columns(tmp_path):
    lines = in_tmux(tmp_path, "list", "list")
    readable(lines)
    assert lines[-1] == "[exit 0]"
    runtime = next(line for line in lines if line.startswith(" hip-runtime "))
    assert "gfx90a,gfx1100" in runtime and runtime.endswith("yes")
    assert any(line.startswith(" llama7b-train ") and line.endswith("no (4)") for line in lines)
    assert "not buildable here:" in lines


@pytest.fixture(scope="module")
def suites_shown(hip_runtime_built, tmp_path_factory) -> list[str]:
    """`test` of hip-runtime's main image, as an 80-column terminal shows it."""
    return in_tmux(tmp_path_factory.mktemp("tmux"), "test", "test", "--target", "hip-runtime", "--image", RUNTIME)


def test_suites_table_at_80_columns(suites_shown):
    lines = suites_shown
    readable(lines)
    assert lines[-1] == "[exit 0]"
    assert any(line.strip().startswith("suites in rocmforge/hip-runtime:") for line in lines)
    suites = suites_present()
    rows = {line.split()[0]: line for line in lines if line[1:].split(" ")[0] in suites}
    assert list(rows) == suites, "a row per suite"
    for suite in ("linkage", "archs", "versions"):
        assert " passed " in rows[suite] + " ", rows[suite]
    if NO_GPU:
        assert "not GPU-verified" in rows["gemm"] and "not GPU-verified" in rows["rocminfo"]
    assert not any("{" in line for line in lines), "no JSON in the table"
    assert "whole reasons and each check's figures: -v (or --json)" in lines


def test_suite_details_at_80_columns_with_verbose(hip_runtime_built, tmp_path):
    lines = in_tmux(
        tmp_path,
        "test-verbose",
        "test",
        "--target",
        "hip-runtime",
        "--image",
        RUNTIME,
        "-v",
        "--suite",
        "archs",
        "--suite",
        "linkage",
    )
    readable(lines)
    assert lines[-1] == "[exit 0]"
    assert "archs: passed, 2 check(s)" in lines and "linkage: passed, 3 check(s)" in lines
    assert any(line.startswith("  passed    test_declared_archs_are_covered") for line in lines)
    assert any(line.strip().startswith("expected_gpu_files: ") for line in lines), "a check's figures"
    assert not any("{" in line for line in lines), "figures as key: value lines, not JSON"
