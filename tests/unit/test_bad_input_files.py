"""Every command that reads a file, given a file that is not what it expects: the real CLI (or, for
records only rocmforge itself reads, the function that reads them) on each case of the corpus in
tests/unit/bad_inputs/.

The corpus: tests/unit/bad_inputs/<kind>/<case> is an input file, and <case>.expect beside it
says what must happen. Binary inputs cannot carry comment headers, so every case, text or not,
has the sidecar; its lines are

    expect-message: ...    a substring of the one message (required)
    expect-line: N         the message names <file>:N: (optional)
    expect-field: a.b      the field part of the message, after <file>[:N]: (optional)
    expect-exit: N         the exit code (optional, default 2)
    expect-entry: ...      archs only: a substring of the file's own entry ("error" in --json)

Derived cases (random bytes with fixed seeds, real files cut short) are written by
bad_inputs/make_cases.py and committed; test_derived_cases_are_current checks they match it.

How each kind is used, and what is checked:

* rocminfo/: `rocminfo FILE`, `rocminfo FILE --json`, `doctor --rocminfo FILE` and
  `doctor --json --rocminfo FILE`: exit 2, one `error: FILE[:LINE]: message` line, no stdout.
* archs/: `archs FILE` and `archs FILE --json`. A file that cannot hold GPU code (empty, text,
  random bytes) is refused before any output; a damaged file (expect-entry: cut short, corrupt)
  is listed with what was found and its entry says why, and the command exits 2 naming it. In a
  folder, a damaged file makes the scan exit 2 the same way; a file that is simply not a GPU file
  is not listed (a folder holds all sorts of files).
* lock/: the case is the project's matrix.lock; `list --json` and `lock --check`.
* published/: the case is published/hip-runtime.json; `pull --target hip-runtime`.
* results/, cache/, checks/: records rocmforge writes for itself (suite results by image ID, a
  target's build-cache record, the `lock --check` record). A bad one is never trusted: it reads
  as absent (not tested / no kept cache / not checked), with one `warning: FILE[:LINE]: ...;
  ignored; <what to do>` line; the command goes on (expect-exit: 0). checks/ runs the real
  `report --json`; results/ and cache/ call suite_runs.recorded and buildcache.recorded, which
  `push`, `test`, `manifest`, `build` and `clean` use.

Commands run with DOCKER_HOST at a dead socket: each refusal comes before the engine is asked.
"Nothing written": the scratch project's whole tree is the same before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BUILD_PY, copy_project

HERE = Path(__file__).resolve().parent
BAD = HERE / "bad_inputs"
KINDS = ("rocminfo", "archs", "lock", "published", "results", "cache", "checks")
GOOD_CODE_OBJECT = HERE.parent / "fixtures" / "archs" / "co_gfx942.hsaco"
DEAD_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock", "COLUMNS": "200"}
IMAGE_ID = "sha256:" + "1" * 64  # the image the results/ cases are recorded for


def cases(kind: str) -> list:
    return [pytest.param(p, id=p.name) for p in sorted((BAD / kind).iterdir()) if p.is_file() and p.suffix != ".expect"]


def expect(case: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(f"{case}.expect").read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("expect-"):
            out[key.removeprefix("expect-")] = value.strip()
    assert out.get("message"), f"{case}.expect: needs 'expect-message: ...'"
    return out


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BUILD_PY), "--matrix", str(cwd / "matrix.yaml"), *args],
        cwd=cwd,
        env={**os.environ, **DEAD_ENGINE},
        capture_output=True,
        text=True,
        timeout=300,
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return copy_project(tmp_path_factory.mktemp("pristine")).parent


@pytest.fixture
def project(pristine, tmp_path) -> Path:
    root = tmp_path / "p"
    shutil.copytree(pristine, root)
    return root


def place(case: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(case, dst)
    return dst


def where(path: Path, exp: dict) -> str:
    return f"{path}:{exp['line']}: " if "line" in exp else f"{path}: "


def assert_refused(proc: subprocess.CompletedProcess, path: Path, exp: dict, *, stdout_empty: bool = True) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == int(exp.get("exit", 2)), f"exit {proc.returncode}\n{out}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one message line on stderr, got:\n{proc.stderr}"
    msg = lines[0]
    head = "error: " + where(path, exp)
    assert msg.startswith(head), f"{msg!r} does not start with {head!r}"
    rest = msg[len(head) :]
    if "field" in exp:
        assert rest.startswith(exp["field"] + ": "), f"field {exp['field']!r} not in {msg!r}"
    assert exp["message"] in rest, f"message {exp['message']!r} not in {msg!r}"
    if stdout_empty:
        assert proc.stdout == "", proc.stdout
    return msg


def assert_warned(stderr: str, path: Path, exp: dict) -> None:
    mine = [line for line in stderr.splitlines() if str(path) in line]
    assert len(mine) == 1, f"expected one warning naming {path}, got:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    assert mine[0].startswith("warning: " + where(path, exp)), mine[0]
    assert exp["message"] in mine[0] and "; ignored" in mine[0], mine[0]


# -- the corpus itself ---------------------------------------------------------------------------
def test_corpus_is_complete():
    assert sorted(p.name for p in BAD.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(KINDS)
    for kind in KINDS:
        inputs = [p for p in (BAD / kind).iterdir() if p.suffix != ".expect"]
        sidecars = list((BAD / kind).glob("*.expect"))
        assert inputs, kind
        assert {p.name for p in inputs} == {p.name.removesuffix(".expect") for p in sidecars}, kind
        for p in inputs:
            assert p.stat().st_size <= 8192, f"{p}: keep corpus files to a few kB"
            expect(p)


def test_derived_cases_are_current():
    proc = subprocess.run([sys.executable, str(BAD / "make_cases.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# -- rocminfo and doctor --rocminfo --------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ("rocminfo", "{f}"),
        ("rocminfo", "{f}", "--json"),
        ("doctor", "--rocminfo", "{f}"),
        ("doctor", "--json", "--rocminfo", "{f}"),
    ],
    ids=["rocminfo", "rocminfo-json", "doctor", "doctor-json"],
)
@pytest.mark.parametrize("case", cases("rocminfo"))
def test_rocminfo_input(case: Path, argv: tuple, project: Path):
    exp = expect(case)
    path = place(case, project / "input" / case.name)
    before = snapshot(project)
    proc = run(project, *(a.format(f=path) for a in argv))
    assert_refused(proc, path, exp)
    assert snapshot(project) == before


# -- archs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize("case", cases("archs"))
def test_archs_input(case: Path, as_json: bool, project: Path):
    exp = expect(case)
    path = place(case, project / "input" / case.name)
    before = snapshot(project)
    proc = run(project, "archs", str(path), *(["--json"] if as_json else []))
    assert_refused(proc, path, exp, stdout_empty="entry" not in exp)
    if "entry" in exp:
        if as_json:
            (entry,) = json.loads(proc.stdout)
            assert entry["path"] == str(path) and exp["entry"] in entry["error"], entry
        else:
            assert f"{path}: " in proc.stdout and exp["entry"] in proc.stdout, proc.stdout
    assert snapshot(project) == before


@pytest.mark.parametrize("case", cases("archs"))
def test_archs_folder_with_the_input(case: Path, project: Path):
    exp = expect(case)
    folder = project / "input"
    path = place(case, folder / case.name)
    shutil.copyfile(GOOD_CODE_OBJECT, folder / "good.hsaco")
    proc = run(project, "archs", str(folder), "--json")
    entries = {e["path"]: e for e in json.loads(proc.stdout)}
    assert entries[str(folder / "good.hsaco")]["archs"] == ["gfx942"]
    if "entry" in exp:
        assert_refused(proc, path, exp, stdout_empty=False)
        assert exp["entry"] in entries[str(path)]["error"]
    else:  # not a GPU file: a folder may hold it; it is not listed as one
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert entries[str(path)]["archs"] == []


# -- matrix.lock -----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [("list", "--json"), ("lock", "--check")], ids=["list", "lock-check"])
@pytest.mark.parametrize("case", cases("lock"))
def test_lock_input(case: Path, argv: tuple, project: Path):
    exp = expect(case)
    path = place(case, project / "matrix.lock")
    before = snapshot(project)
    proc = run(project, *argv)
    assert_refused(proc, path, exp)
    assert snapshot(project) == before


# -- published/<target>.json -----------------------------------------------------------------------
@pytest.mark.parametrize("case", cases("published"))
def test_publish_record_input(case: Path, project: Path):
    exp = expect(case)
    path = place(case, project / "published" / "hip-runtime.json")
    before = snapshot(project)
    proc = run(project, "pull", "--target", "hip-runtime")
    assert_refused(proc, path, exp)
    assert snapshot(project) == before


# -- records rocmforge keeps for itself --------------------------------------------------------------
@pytest.mark.parametrize("case", cases("checks"))
def test_lock_check_record_is_ignored_by_the_report(case: Path, project: Path):
    exp = expect(case)
    state = project / ".rocmforge"
    path = place(case, state / "checks" / "lock.json")
    proc = run(project, "report", "--json", "--out", str(project / "out"))
    assert proc.returncode == int(exp.get("exit", 2)), proc.stdout + proc.stderr
    assert_warned(proc.stderr, path, exp)
    rows = json.loads(proc.stdout)["targets"]
    assert rows and all(r["drift"] is None and r["drift_checked"] is None for r in rows)
    assert path.read_bytes() == case.read_bytes(), "the record is left for the user to delete"


@pytest.mark.parametrize("case", cases("results"))
def test_results_record_is_not_trusted(case: Path, tmp_path: Path, capsys):
    from rocmforge.shared import records
    from rocmforge.verify import suites as suite_runs

    exp = expect(case)
    path = place(case, tmp_path / "results" / f"{IMAGE_ID.split(':')[1]}.json")
    records._warned.clear()
    assert suite_runs.recorded(tmp_path, IMAGE_ID) is None  # "never tested": nothing is published on it
    assert_warned(capsys.readouterr().err, path, exp)
    assert path.read_bytes() == case.read_bytes()


@pytest.mark.parametrize("case", cases("cache"))
def test_build_cache_record_is_not_trusted(case: Path, tmp_path: Path, capsys):
    from rocmforge.assemble import buildcache
    from rocmforge.shared import records

    exp = expect(case)
    path = place(case, tmp_path / "cache" / "hip-runtime.json")
    records._warned.clear()
    assert buildcache.recorded(tmp_path, "hip-runtime") == []  # no image is removed on its word
    assert_warned(capsys.readouterr().err, path, exp)
    assert path.read_bytes() == case.read_bytes()
