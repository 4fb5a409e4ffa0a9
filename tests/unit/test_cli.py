from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

import rocmforge.cli.project_commands  # noqa: F401  (the last-resort tests patch it; alone, nothing else imports it)
from rocmforge.define.matrix import load_matrix
from tests.conftest import ROOT, run_cli


def test_list_json_covers_every_target_in_build_order():
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    m = load_matrix(ROOT / "matrix.yaml")
    assert [r["name"] for r in rows] == m.order()
    by = {r["name"]: r for r in rows}
    assert by["hip-runtime"]["deps"] == ["hip-devel"]
    assert by["hip-python"]["deps"] == ["hip-runtime"]
    assert by["llama31-qlora-w7900"]["archs"] == ["gfx1100"]
    assert by["llama7b-train"]["buildable_here"] is False
    assert any("no digest" in b for b in by["llama7b-train"]["blockers"])
    for r in rows:
        assert set(r) >= {"name", "stack", "archs", "deps", "buildable_here", "blockers"}


def test_list_table():
    proc = run_cli("list")
    assert proc.returncode == 0
    assert "hip-runtime" in proc.stdout and "llama31-qlora-w7900" in proc.stdout


def test_list_names_the_engine_it_could_not_reach_once():
    """Without an engine every target says "Docker engine not reachable"; which engine (DOCKER_HOST's
    value) and why is said once, on stderr, in connect's own words (issue 54)."""
    proc = run_cli("list", env={"DOCKER_HOST": "tcp://127.0.0.1:1"})
    assert proc.returncode == 0, proc.stderr
    assert "Docker engine not reachable" in proc.stdout
    assert proc.stderr.count("DOCKER_HOST=tcp://127.0.0.1:1: connection refused") == 1, proc.stderr


def test_unknown_target_is_a_user_error():
    proc = run_cli("build", "--target", "no-such-target")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --target: unknown target 'no-such-target'")
    assert "Traceback" not in proc.stderr


def test_unknown_option_is_a_user_error():
    proc = run_cli("render", "--frobnicate")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_missing_matrix_file():
    proc = run_cli("--matrix", "/nonexistent/matrix.yaml", "list")
    assert proc.returncode == 2
    assert "/nonexistent/matrix.yaml: file not found" in proc.stderr


def test_missing_ca_bundle_is_a_user_error():
    proc = run_cli("build", "--target", "hip-runtime", "--ca-bundle", "/nonexistent/ca.pem")
    assert proc.returncode == 2
    assert "--ca-bundle" in proc.stderr and "/nonexistent/ca.pem" in proc.stderr


def test_makefile_recipes_are_one_build_py_call():
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipes = [ln for ln in lines if ln.startswith("\t")]
    assert recipes
    for r in recipes:
        assert r.strip().startswith("$(PYTHON) build.py "), r
    targets = {
        ln.split(":")[0]
        for ln in lines
        if ln and not ln.startswith(("\t", "#", ".", " ")) and ":" in ln and "=" not in ln
    }
    assert {"build", "test", "render", "lint", "push", "clean"} <= targets


def test_report_to_an_unwritable_folder_is_a_user_error(tmp_path):
    proc = run_cli("--state-dir", str(tmp_path), "report", "--out", "/proc/rocmforge-report")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: /proc/rocmforge-report: --out: cannot create anything in /proc")
    assert "Traceback" not in proc.stderr


def test_list_table_keeps_names_whole_at_80_columns():
    proc = run_cli("list", env={"COLUMNS": "80"})
    assert proc.returncode == 0
    table = proc.stdout.split("\n\n  ")[0]
    for name in load_matrix(ROOT / "matrix.yaml").targets:
        assert name in table, f"{name} is cut in the 80-column table"
    assert max(len(line) for line in table.splitlines()) <= 80


@pytest.mark.parametrize(
    "exc,code,line",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/var/x/layer.tar"),
            1,
            "error: /var/x/layer.tar: No space left on device",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/q"), 1, "error: /q: Disk quota exceeded"),
        (PermissionError(errno.EACCES, "Permission denied", "/etc/x"), 2, "error: /etc/x: Permission denied"),
        (
            OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"),
            2,
            "error: /a -> /b: Invalid cross-device link",
        ),
        (ConnectionError("connection\nrefused"), 1, "error: connection refused"),
    ],
)
def test_last_resort_for_os_errors_is_one_line(monkeypatch, capsys, exc, code, line):
    """A bad path no early check foresaw exits 2; the machine failing (full disk, network) exits 1."""
    from rocmforge import cli

    def fail(inv):
        raise exc

    monkeypatch.setattr(cli.project_commands, "list_targets", fail)
    assert cli.main(["--matrix", str(ROOT / "matrix.yaml"), "list"]) == code
    assert capsys.readouterr().err == line + "\n"


def test_last_resort_for_docker_errors_and_bugs(monkeypatch, capsys):
    import docker.errors

    from rocmforge import cli

    raised = []
    monkeypatch.setattr(cli.project_commands, "list_targets", lambda inv: (_ for _ in ()).throw(raised[-1]))
    raised.append(docker.errors.ContainerError("c1", 3, "true", "img", b"line one\nline two"))
    assert cli.main(["--matrix", str(ROOT / "matrix.yaml"), "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Docker engine at ") and err.count("\n") == 1
    raised.append(ZeroDivisionError("a bug of ours"))
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        cli.main(["--matrix", str(ROOT / "matrix.yaml"), "list"])


def test_list_says_which_images_keep_only_their_archs_gpu_files():
    rows = {r["name"]: r for r in json.loads(run_cli("list", "--json").stdout)}
    assert rows["hip-runtime"]["pruned"] is True and rows["llama31-qlora-debian"]["pruned"] is True
    # no package step of its own on an AMD base: nothing prunes its base's GPU files
    assert rows["llama31-qlora-w7900"]["pruned"] is False
    assert "pruned" in run_cli("list").stdout


def test_every_subcommand_names_a_function_that_exists():
    """The parser names each command's function as text (it is imported when the command runs), so a
    misspelt name would only fail when someone typed that command: here every one is looked up."""
    import argparse
    import importlib

    from rocmforge.cli.grammar import Command
    from rocmforge.cli.parser import build_parser

    parser = build_parser()
    commands = [parser.get_default("run")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands += [sub.get_default("run") for sub in action.choices.values()]
    assert len(commands) > 15 and all(isinstance(c, Command) for c in commands)
    for c in commands:
        assert callable(getattr(importlib.import_module(f"rocmforge.cli.{c.module}"), c.function, None)), c


@pytest.mark.parametrize("argv", [["test", "--target", "hip-runtime"], ["--target", "hip-runtime"]])
def test_suites_without_pytest_testinfra_are_refused_before_the_engine_or_a_build(argv, tmp_path):
    """An install without the suites' runner (pip --no-deps) once failed every suite with "pytest
    produced no results", after the build: now one line names what is missing and how to add it,
    before the engine (which points nowhere here) is asked anything."""
    hide = "import sys; sys.modules['testinfra'] = None; from rocmforge.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", hide, *argv, "--state-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "DOCKER_HOST": "tcp://127.0.0.1:1"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pytest-testinfra" in proc.stderr and "-m pip install" in proc.stderr, proc.stderr
    assert "Docker engine" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_suites_runner_is_a_dependency_of_the_installed_command():
    """`pipx install .` must give `test` what it runs: the requirements require_runner names are
    the package's own dependencies, not only its test extras."""
    import tomllib

    from rocmforge.verify.suites import RUNNER_MODULES, missing_runner

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(RUNNER_MODULES.values()) <= set(deps)
    assert missing_runner(lambda module: None) == list(RUNNER_MODULES.values())
    assert missing_runner(lambda module: object()) == []


def test_run_without_an_image_names_only_steps_that_can_work(tmp_path):
    """`run` once said "build or pull" for any target with no image; pull then said "push first",
    and neither can work for a target whose pins are unresolved and that was never published."""
    from types import SimpleNamespace

    from rocmforge.cli.host_commands import not_here
    from rocmforge.render.plan import load_plan

    inv = SimpleNamespace(project=SimpleNamespace(record_dir=tmp_path), plan=load_plan(ROOT / "matrix.yaml"))
    assert inv.plan.targets["llama7b-train"].unresolved and not inv.plan.targets["hip-runtime"].unresolved
    offline = not_here(inv, "llama7b-train")  # type: ignore[arg-type]
    assert "pull --target" not in offline and "build --target" not in offline, offline
    assert "lock --target llama7b-train" in offline and "ROCMFORGE_REGISTRY_MIRROR" in offline, offline
    assert "pull --target" not in not_here(inv, "hip-runtime")  # type: ignore[arg-type]
    (tmp_path / "llama7b-train.json").write_text("{}")
    (tmp_path / "hip-runtime.json").write_text("{}")
    assert "pull --target llama7b-train" in not_here(inv, "llama7b-train")  # type: ignore[arg-type]
    both = not_here(inv, "hip-runtime")  # type: ignore[arg-type]
    assert "build --target hip-runtime" in both and "pull --target hip-runtime" in both, both
