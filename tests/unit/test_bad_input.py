"""Bad input: every malformed matrix (and a broken template) gets one clear message naming the
file, line and field, exit code 2, no traceback, and nothing written.

Each tests/unit/bad_matrices/NN-name.yaml is a small, otherwise valid matrix with exactly one defect;
its leading comments declare what the error must say:

    # expect-line: 85              the 1-based line the message names (matrix.yaml:85:)
    # expect-field: targets.x.y    optional: a substring of the field part (absent for YAML syntax errors)
    # expect-message: ...          a substring of the message

tests/unit/bad_templates/<case>/ holds templates laid out as under templates/ (kinds/<kind>.j2,
partials/<name>.j2) that replace the real ones, and an expect.txt (expect-file, expect-line,
expect-message) for the error on the real matrix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmforge.shared.packagedata import PROBES, TEMPLATES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_PY = ROOT / "build.py"
BAD_MATRICES = sorted((HERE / "bad_matrices").glob("*.yaml"))
BAD_TEMPLATES = sorted(p for p in (HERE / "bad_templates").iterdir() if p.is_dir())
SENTINEL = "KEEP-ME.txt"
SENTINEL_BYTES = b"rendering a bad matrix must not touch this folder\n"


def parse_expect(lines: list[str], comments: bool = True) -> dict[str, str]:
    """`# expect-KEY: value` lines: a case's leading comments, or (comments=False) expect.txt's lines."""
    out: dict[str, str] = {}
    for line in lines:
        if comments and not line.startswith("#"):
            break
        key, sep, value = line.lstrip("# ").partition(":")
        if sep and key.startswith("expect-"):
            out[key.removeprefix("expect-")] = value.strip()
    return out


def case_expect(path: Path) -> dict[str, str]:
    exp = parse_expect(path.read_text(encoding="utf-8").splitlines())
    assert "line" in exp and exp["line"].isdigit(), f"{path.name}: needs '# expect-line: N'"
    assert exp.get("message"), f"{path.name}: needs '# expect-message: ...'"
    return exp


def project(tmp_path: Path, matrix: Path) -> Path:
    """tmp_path laid out like the project: matrix.yaml, templates/, probes/ and an images/ with a sentinel."""
    shutil.copyfile(matrix, tmp_path / "matrix.yaml")
    shutil.copytree(TEMPLATES, tmp_path / "templates")
    shutil.copytree(PROBES, tmp_path / "probes")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / SENTINEL).write_bytes(SENTINEL_BYTES)
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BUILD_PY), "--matrix", str(tmp_path / "matrix.yaml"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


def assert_one_error(proc: subprocess.CompletedProcess, where: str, field: str | None, message: str) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == 2, f"exit {proc.returncode}\n{out}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one message line on stderr, got:\n{proc.stderr}"
    msg = lines[0]
    assert msg.startswith("error: "), msg
    assert where in msg, f"{where!r} not in {msg!r}"
    # The field sits between the position and the message: 'file:line: field: message'.
    after = msg.split(where, 1)[1]
    if field:
        assert field in after.split(": ", 1)[0], f"field {field!r} not in {msg!r}"
    assert message in after, f"message {message!r} not in {msg!r}"
    return msg


def test_corpus_is_big_enough():
    assert len(BAD_MATRICES) >= 18
    assert BAD_TEMPLATES


@pytest.mark.parametrize("case", BAD_MATRICES, ids=lambda p: p.stem)
def test_bad_matrix_render(case: Path, tmp_path: Path):
    exp = case_expect(case)
    root = project(tmp_path, case)
    before = snapshot(root / "images")
    proc = run_cli(root, "render", "--out", str(root / "images"))
    assert_one_error(proc, f"matrix.yaml:{exp['line']}: ", exp.get("field"), exp["message"])
    assert snapshot(root / "images") == before == {SENTINEL: SENTINEL_BYTES}
    assert not (root / ".rocmforge").exists()


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in BAD_MATRICES
        if c.stem.split("-", 1)[1]
        in ("yaml-syntax-error", "duplicate-target", "dependency-cycle", "settings-bad-extension")
    ],
    ids=lambda p: p.stem,
)
def test_bad_matrix_list_json(case: Path, tmp_path: Path):
    exp = case_expect(case)
    root = project(tmp_path, case)
    proc = run_cli(root, "list", "--json")
    assert_one_error(proc, f"matrix.yaml:{exp['line']}: ", exp.get("field"), exp["message"])
    assert proc.stdout == ""
    assert snapshot(root / "images") == {SENTINEL: SENTINEL_BYTES}


@pytest.mark.parametrize("case", BAD_TEMPLATES, ids=lambda p: p.name)
def test_bad_template_render(case: Path, tmp_path: Path):
    exp = parse_expect((case / "expect.txt").read_text(encoding="utf-8").splitlines(), comments=False)
    root = project(tmp_path, ROOT / "matrix.yaml")
    overrides = sorted(case.rglob("*.j2"))
    assert overrides, f"{case}: no template to override"
    for template in overrides:
        real = root / "templates" / template.relative_to(case)
        assert real.is_file(), f"{template.relative_to(case)} overrides no real template"
        shutil.copyfile(template, real)
    before = snapshot(root / "images")
    proc = run_cli(root, "render", "--out", str(root / "images"))
    assert_one_error(proc, f"{exp['file']}:{exp['line']}: ", exp.get("field"), exp["message"])
    assert snapshot(root / "images") == before


def test_real_matrix_loads(tmp_path: Path):
    root = project(tmp_path, ROOT / "matrix.yaml")
    proc = run_cli(root, "list", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_skeleton_is_valid(tmp_path: Path):
    """The cases share one small skeleton; undoing one case's defect must give a matrix that renders."""
    case = next(c for c in BAD_MATRICES if c.stem.endswith("invalid-gfx"))
    fixed = case.read_text(encoding="utf-8").replace("[gfx90a, mi210]", "[gfx90a]")
    (tmp_path / "fixed.yaml").write_text(fixed, encoding="utf-8")
    root = project(tmp_path, tmp_path / "fixed.yaml")
    proc = run_cli(root, "render", "--out", str(root / "images"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "images" / "hip-runtime" / "Dockerfile").is_file()
