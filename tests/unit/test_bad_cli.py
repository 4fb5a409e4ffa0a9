"""Every command with a path it cannot use (tests/unit/bad_cli/cases.txt, read at a glance there):
one line on stderr, the expected exit code, no traceback, nothing written, and no engine needed to
refuse (DOCKER_HOST points at a socket that does not exist)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import copy_project, run_cli

CASES_FILE = Path(__file__).resolve().parent / "bad_cli" / "cases.txt"
DEAD_ENGINE = {
    "DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock",
    "PIP_CERT": "",
    "REQUESTS_CA_BUNDLE": "",
    "SSL_CERT_FILE": "",
    "ROCMFORGE_CACHE_REGISTRY": "",
    # a GitHub job with `id-token: write` has these: push --keyless is refused without them
    "ACTIONS_ID_TOKEN_REQUEST_URL": "",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "",
}


def read_cases() -> list:
    cases = []
    for number, line in enumerate(CASES_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        argv, sep, expect = line.partition("=>")
        assert sep, f"cases.txt:{number}: no '=>'"
        code, _, text = expect.strip().partition(" ")
        assert code.isdigit(), f"cases.txt:{number}: '=>' must be followed by an exit code"
        cases.append(pytest.param(shlex.split(argv), int(code), text.strip(), id=f"line{number}:{argv.strip()}"))
    return cases


def scratch(tmp: Path) -> dict[str, str]:
    """The folders and files the placeholders name, all under tmp ({r} apart: see read_only)."""
    places = {"p": tmp / "p", "b": tmp / "b", "l": tmp / "l", "file": tmp / "a-file", "dir": tmp / "a-folder"}
    for name in ("p", "b", "l"):
        places[name].mkdir()
        copy_project(places[name])
    for name in ("images", ".rocmforge", "published"):
        (places["b"] / name).write_text("a file where a folder belongs\n")
    (places["l"] / "matrix.lock").unlink()
    (places["l"] / "matrix.lock").mkdir()
    places["file"].write_text("a regular file\n")
    places["dir"].mkdir()
    return {f"{{{k}}}": str(v) for k, v in places.items()}


def mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode:
        if os.environ.get("CI"):
            pytest.fail(f"mount {' '.join(args)}: {proc.stderr.strip()}")
        pytest.skip(f"cannot mount here (needs root and CAP_SYS_ADMIN): {proc.stderr.strip()}")


@contextlib.contextmanager
def read_only(tmp: Path):
    """{r}: a project copy (with a summary.md) on a read-only mount, where even root cannot write."""
    source, ro = tmp.parent / f"{tmp.name}-rw", tmp / "r"
    source.mkdir()
    copy_project(source)
    (source / "summary.md").write_text("# an existing summary\n")
    ro.mkdir()
    mount("--bind", str(source), str(ro))
    try:
        mount("-o", "remount,bind,ro", str(ro))
        yield str(ro)
    finally:
        subprocess.run(["umount", str(ro)], check=True)
        shutil.rmtree(source)


def fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace(key, value)
    return text


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a folder)."""
    return {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


GLOBAL_VALUED = {"--matrix", "--state-dir", "--target", "--ca-bundle", "--cache-registry"}


def command_of(argv: list[str]) -> str:
    """The subcommand an argv runs, or '--target' for the bare `build.py --target X`."""
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        i += 2 if argv[i] in GLOBAL_VALUED else 1
    return argv[i] if i < len(argv) else "--target"


def test_every_command_is_walked():
    from rocmforge.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    walked = {command_of(c.values[0]) for c in read_cases()}
    missing = (set(sub.choices) | {"--target"}) - walked
    assert not missing, f"cases.txt has no case for: {sorted(missing)}"


@pytest.mark.parametrize("argv,code,text", read_cases())
def test_bad_path(tmp_path, argv, code, text):
    places = scratch(tmp_path)
    with contextlib.ExitStack() as stack:
        if any("{r}" in a for a in argv):
            places["{r}"] = stack.enter_context(read_only(tmp_path))
        argv = [fill(a, places) for a in argv]
        text = fill(text, places)
        if "--matrix" not in argv:
            argv = ["--matrix", f"{places['{p}']}/matrix.yaml"] + argv
        before = snapshot(tmp_path)
        proc = run_cli(*argv, cwd=tmp_path, env=DEAD_ENGINE)
        after = snapshot(tmp_path)
    shown = f"build.py {shlex.join(argv)}\nexit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert proc.returncode == code, shown
    if code:
        lines = proc.stderr.splitlines()
        # a usage error names the command it is about: `build.py list: error: ...`
        assert len(lines) == 1 and re.match(r"(build\.py( [a-z-]+)?: )?error: ", lines[0]), shown
        assert text in lines[0], shown
    assert after == before, f"something was written or removed\n{shown}"
    assert not any(Path("/proc").glob("rocmforge-*"))


def test_nothing_is_left_by_the_probe(tmp_path):
    """The writability probe makes and removes a folder: a refused or accepted check leaves no trace."""
    from rocmforge.workflow.project import writable_dir, writable_file

    writable_dir(tmp_path / "new" / "deeper", "--out")
    writable_file(tmp_path / "junit.xml", "--junit", replaced=False)
    assert list(tmp_path.iterdir()) == []
