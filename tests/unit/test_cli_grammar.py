"""The command line as a newcomer meets it: global options anywhere on the line, the matrix found
without --matrix, help that names things (metavars, a help line per option, an example per
command), completion scripts, the program's own name in help and hints, and the --json result
object of the commands that act."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from rocmforge import cli
from rocmforge.cli import results
from rocmforge.cli.help_text import EXAMPLES
from rocmforge.cli.invocation import MATRIX_ENV, find_matrix
from rocmforge.cli.parser import build_parser
from rocmforge.shared import program
from rocmforge.shared.packagedata import DATA
from tests.conftest import ROOT, copy_project, run_cli


@pytest.fixture(autouse=True)
def started_as_build_py():
    """main() remembers the program's name for hints: put back what every other test expects."""
    yield
    program.started_as("build.py")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize(
    "argv",
    [
        ["--matrix", "m.yaml", "--state-dir", "s", "list", "--json"],
        ["list", "--matrix", "m.yaml", "--state-dir", "s", "--json"],
        ["--matrix", "m.yaml", "list", "--json", "--state-dir", "s"],
        ["--state-dir", "s", "list", "--json", "--matrix", "m.yaml"],
    ],
)
def test_global_options_before_or_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert (args.matrix, args.state_dir, args.json, args.command) == ("m.yaml", "s", True, "list")


def test_a_global_option_after_the_command_wins_and_one_left_out_keeps_its_default():
    parser = build_parser()
    assert parser.parse_args(["--matrix", "a.yaml", "doctor", "--matrix", "b.yaml"]).matrix == "b.yaml"
    args = parser.parse_args(["doctor"])
    assert (args.matrix, args.state_dir, args.quiet, args.progress) == (None, None, False, "auto")
    args = parser.parse_args(["build", "--target", "t", "-q", "--progress", "plain"])
    assert (args.quiet, args.progress) == (True, "plain")


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_modes_and_quiet_change_what_stderr_shows(capsys, quiet):
    """--progress plain: each status once, as a line a log keeps; tty: a status line redrawn in
    place (terminal codes); auto on a pipe (as here): no status line at all; --quiet: nothing."""
    from rocmforge.cli.invocation import Invocation

    shown = {}
    for mode in ("plain", "tty", "auto"):
        inv = Invocation(build_parser().parse_args(["doctor", "--progress", mode, *(["-q"] if quiet else [])]))
        with inv.progress.status("building hip-runtime"):
            pass
        inv.progress.line("hip-runtime built")
        shown[mode] = capsys.readouterr().err
    if quiet:
        assert shown == {"plain": "", "tty": "", "auto": ""}
        return
    assert shown["plain"] == "building hip-runtime ...\nhip-runtime built\n"
    assert "\x1b[" in shown["tty"] and "building hip-runtime" in shown["tty"] and "..." not in shown["tty"]
    assert shown["auto"] == "hip-runtime built\n"


def test_list_with_matrix_after_the_command_runs(tmp_path):
    proc = run_cli("list", "--json", "--matrix", str(ROOT / "matrix.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hip-runtime" in {r["name"] for r in json.loads(proc.stdout)}


def test_the_matrix_is_the_option_then_the_variable_then_the_nearest_above(tmp_path, monkeypatch):
    deep = tmp_path / "checkout" / "images" / "hip-runtime"
    deep.mkdir(parents=True)
    (tmp_path / "checkout" / "matrix.yaml").write_text("{}\n")
    monkeypatch.delenv(MATRIX_ENV, raising=False)
    assert find_matrix(None, cwd=deep) == tmp_path / "checkout" / "matrix.yaml"
    assert find_matrix(None, cwd=tmp_path / "checkout") == type(tmp_path)("matrix.yaml")
    if not any((p / "matrix.yaml").is_file() for p in tmp_path.parents):
        assert find_matrix(None, cwd=tmp_path) is None
    monkeypatch.setenv(MATRIX_ENV, "/elsewhere/matrix.yaml")
    assert str(find_matrix(None, cwd=deep)) == "/elsewhere/matrix.yaml"
    assert str(find_matrix("given.yaml", cwd=deep)) == "given.yaml"


def test_list_finds_the_matrix_from_a_subfolder_and_from_the_variable(tmp_path):
    matrix = copy_project(tmp_path / "checkout")
    sub = tmp_path / "checkout" / "deeper" / "still"
    sub.mkdir(parents=True)
    env = {MATRIX_ENV: ""}
    proc = run_cli("list", "--json", cwd=sub, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "hip-runtime" in {r["name"] for r in json.loads(proc.stdout)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_cli("list", "--json", cwd=elsewhere, env={MATRIX_ENV: str(matrix)})
    assert proc.returncode == 0, proc.stderr
    assert "hip-runtime" in {r["name"] for r in json.loads(proc.stdout)}


def test_a_command_that_reads_the_matrix_says_how_to_name_one(tmp_path):
    proc = run_cli("list", cwd=tmp_path, env={MATRIX_ENV: ""})
    if any((p / "matrix.yaml").is_file() for p in tmp_path.parents):
        pytest.skip("a matrix.yaml above the temporary folder")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: list: no matrix.yaml in {tmp_path} or any folder above it: "
        "give --matrix FILE or set $ROCMFORGE_MATRIX\n"
    )


def test_commands_that_need_no_matrix_run_without_one(tmp_path):
    if any((p / "matrix.yaml").is_file() for p in tmp_path.parents):
        pytest.skip("a matrix.yaml above the temporary folder")
    env = {MATRIX_ENV: "", "DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"}
    proc = run_cli("doctor", "--json", cwd=tmp_path, env=env)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)
    proc = run_cli("run", "--image", "rocm/dev-ubuntu-22.04:6.1", "--dry-run", "--", "rocminfo", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "rocm/dev-ubuntu-22.04:6.1 rocminfo" in proc.stdout
    proc = run_cli("completion", "bash", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("archs", str(ROOT / "tests" / "fixtures" / "archs" / "co_gfx1100.hsaco"), cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "gfx1100" in proc.stdout, proc.stderr


def _every_parser():
    parser = build_parser()
    return [("", parser)] + list(subparsers(parser).items())


def test_every_option_has_help_and_a_metavar_a_user_would_write():
    for name, p in _every_parser():
        text = p.format_help()
        for leaked in ("CMD_TARGET", "BUILD_CA_BUNDLE", "REPORT_OUT", "LOCK_TARGETS", "FILE_OR_DIR", "STATE_DIR"):
            assert leaked not in text, f"{name or 'top'}: {leaked} in its help"
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"{name or 'top'}: {action.dest} has no help"
            if action.option_strings and action.nargs != 0 and action.choices is None:
                metavar = action.metavar or action.dest.upper()
                assert metavar != action.dest.upper() or "_" not in metavar, f"{name}: {action.dest} -> {metavar}"


def test_every_command_has_an_example_and_the_globals():
    for name, p in subparsers(build_parser()).items():
        assert name in EXAMPLES, name
        text = p.format_help()
        assert f"\n  build.py {name} " in "\n" + text.split("\nexample:\n", 1)[1], text
        assert "--matrix FILE" in text and "--state-dir DIR" in text and "--progress" in text, name


def test_every_command_that_acts_or_judges_takes_json():
    """The commands whose result the schema describes, each with --json and its help (issue 54:
    push printed a record with no --json, doctor its own shape)."""
    schema = json.loads((DATA / "result.schema.json").read_text())
    enum = schema["$defs"]["result"]["properties"]["command"]["enum"]
    parsers = subparsers(build_parser())
    for name in [*enum, "list", "archs"]:  # list and archs: the schema's two arrays
        option = next((a for a in parsers[name]._actions if "--json" in a.option_strings), None)
        assert option is not None and option.help, f"{name}: no --json"
    assert set(enum) >= {"build", "lock", "pull", "push", "clean", "doctor", "test", "manifest", "context", "normalise"}
    assert list(results.COMMANDS) == enum


@pytest.mark.parametrize("width", [80, 120])
def test_help_fits_the_terminal_and_its_examples_still_paste(monkeypatch, width):
    """At 80 columns the hand-written examples and notes once ran to 95 and 131 characters. Now
    every help line fits, prose wraps between words, and an example too wide for the terminal
    wraps with a shell continuation: joined again, it is the command help_text wrote."""
    monkeypatch.setenv("COLUMNS", str(width))
    for name, p in _every_parser():
        lines = p.format_help().splitlines()
        assert max(len(line) for line in lines) <= width, (name, [ln for ln in lines if len(ln) > width])
        shown = "\n".join(lines).replace(" \\\n      ", " ")  # a wrapped command joined again
        if name:
            for example in EXAMPLES[name].replace("%(prog)s", f"build.py {name}").split("\n"):
                assert example.strip() in shown, (name, example)


def test_the_help_layout_wraps_prose_at_words_and_commands_with_a_continuation():
    from rocmforge.cli.helpformat import fit

    text = "examples:\n  # a comment that is long\n  prog run --a b --c d\nkey: one two three:\n  four five six"
    assert fit(text, 14, "prog") == [
        "examples:",
        "  # a comment",
        "  # that is",
        "  # long",
        "  prog run \\",
        "      --a b \\",
        "      --c d",
        "key: one two",
        "  three: four",
        "  five six",
    ]
    assert fit(text, 200, "prog") == [
        "examples:",
        "  # a comment that is long",
        "  prog run --a b --c d",
        "key: one two three: four five six",
    ]


def test_completion_scripts_name_every_command(capsys):
    commands = set(subparsers(build_parser()))
    for shell in ("bash", "zsh"):
        assert cli.main(["completion", shell], argv0="/usr/local/bin/rocmforge") == 0
        script = capsys.readouterr().out
        assert "rocmforge" in script
        missing = [c for c in commands if c not in script]
        assert not missing, f"{shell}: {missing}"


def test_the_program_names_itself_as_started(capsys):
    assert cli.main([], argv0="/home/u/.local/bin/rocmforge") == 0  # bare: the help, not an error
    out = capsys.readouterr().out
    assert out.startswith("usage: rocmforge ") and "build.py" not in out
    with pytest.raises(SystemExit) as stop:
        cli.main(["list", "--help"], argv0="rocmforge")
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rocmforge list ") and "example:\n  rocmforge list " in out
    assert cli.main([], argv0="/checkout/build.py") == 0
    assert capsys.readouterr().out.startswith("usage: build.py ")


def test_hints_name_the_program_as_started(capsys, tmp_path):
    matrix = copy_project(tmp_path)
    code = cli.main(["--matrix", str(matrix), "build", "--target", "llama7b-train"], argv0="/usr/bin/rocmforge")
    err = capsys.readouterr().err
    assert code == 2
    assert "`rocmforge lock --target llama7b-train`" in err and "build.py" not in err, err
    code = cli.main(["--matrix", str(matrix), "build", "--target", "llama7b-train"], argv0="build.py")
    assert "`python build.py lock --target llama7b-train`" in capsys.readouterr().err


def test_version_names_the_commit(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"], argv0="rocmforge")
    assert stop.value.code == 0
    assert re.fullmatch(r"rocmforge \d+\.\d+\.\d+\S* \(commit ([0-9a-f]{40}|unknown)\)\n", capsys.readouterr().out)


def test_options_without_a_command_are_a_usage_error():
    proc = run_cli("--matrix", str(ROOT / "matrix.yaml"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "give a COMMAND or --target TARGET" in proc.stderr


SAMPLES = [
    {
        "targets": [
            {
                "target": "hip-runtime",
                "status": "up-to-date",
                "image_id": "sha256:" + "a" * 64,
                "engine_id": "sha256:" + "a" * 64,
                "size_bytes": 123,
                "elapsed_s": 0.2,
                "content_tag": "rocmforge/hip-runtime:content-abc",
                "tag": "rocmforge/hip-runtime:debian13-rocm5.7",
            }
        ],
        "elapsed_s": 0.3,
    },
    {"check": True, "targets": ["hip-devel"], "problems": []},
    {"check": False, "resolved": ["base x"], "unresolved": [], "wrote": None},
    {"pulled": {"target": "hip-runtime"}},
    {"dry_run": True, "items": [{"kind": "image", "ref": "r", "size_bytes": 1}], "logs_removed": False},
    {"pushed": {"target": "hip-runtime", "digest": "sha256:" + "b" * 64}},
    {
        "checks": [{"name": "kfd", "status": "fail", "detail": "no /dev/kfd"}],
        "recommendations": [{"env": {"HIP_VISIBLE_DEVICES": "0"}, "reason": "skip the iGPU"}],
    },
    {"check": True, "out": "images", "changes": ["stale: images/hip-runtime/Dockerfile"]},
    {
        "ref": "registry.example/team/hip-runtime:x",
        "digest": "sha256:" + "c" * 64,
        "config_digest": "sha256:" + "d" * 64,
        "signatures": 1,
        "test_result": {},
        "release": {"serial": 1},
    },
    {"ref": "registry.example/team/hip-runtime:x", "index": "sha256:" + "e" * 64, "images": [], "release": {}},
    {"target": "hip-runtime", "identical": True, "image_ids": ["sha256:" + "a" * 64] * 2, "against": "build"},
]
COMMANDS = ["build", "lock", "lock", "pull", "clean", "push", "doctor", "render", "verify", "verify", "verify-repro"]


@pytest.mark.parametrize("command,fields", list(zip(COMMANDS, SAMPLES, strict=True)))
def test_json_results_follow_the_shipped_schema(capsys, command, fields):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DATA / "result.schema.json").read_text())
    assert results.emit(command, 0, **fields) == 0
    shown = json.loads(capsys.readouterr().out)
    assert list(shown)[:3] == ["command", "ok", "exit_code"] and shown["ok"] is True
    jsonschema.validate(shown, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in shown.items() if k not in ("command", "ok", "exit_code")}, schema)


def test_render_json_says_what_it_wrote_and_what_check_found(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DATA / "result.schema.json").read_text())
    matrix = copy_project(tmp_path)
    wrote = run_cli("--matrix", str(matrix), "render", "--json")
    assert wrote.returncode == 0, wrote.stderr
    shown = json.loads(wrote.stdout)
    jsonschema.validate(shown, schema)
    assert shown["check"] is False and shown["changes"], shown
    dockerfile = tmp_path / "images" / "hip-runtime" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited by hand\n")
    checked = run_cli("--matrix", str(matrix), "render", "--check", "--json")
    assert checked.returncode == 1, checked.stderr
    shown = json.loads(checked.stdout)
    jsonschema.validate(shown, schema)
    assert (shown["ok"], shown["exit_code"], shown["check"]) == (False, 1, True)
    assert any("hip-runtime/Dockerfile" in c for c in shown["changes"]), shown


@pytest.mark.parametrize(
    "argv",
    [["build", "--target", "hip-runtime"], ["clean", "--dry-run"], ["verify", "127.0.0.1:5999/t/hip-runtime:x"]],
)
def test_a_command_that_stops_on_exit_1_still_prints_its_result_object(argv, tmp_path):
    """--json with the engine unreachable (exit 1): the object with ok false and the error, not an
    empty stdout a script cannot parse; none of the command's own keys are claimed."""
    jsonschema = pytest.importorskip("jsonschema")
    env = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"}
    if argv[0] == "verify":  # the signer's key is read before the engine is asked
        (tmp_path / "cosign.pub").write_text("-----BEGIN PUBLIC KEY-----\n")
        argv = [*argv, "--key", str(tmp_path / "cosign.pub")]
    proc = run_cli("--matrix", str(ROOT / "matrix.yaml"), "--state-dir", str(tmp_path), *argv, "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    shown = json.loads(proc.stdout)
    assert (shown["command"], shown["ok"], shown["exit_code"]) == (argv[0], False, 1)
    assert "DOCKER_HOST=unix:///nonexistent/rocmforge-no-engine.sock" in shown["error"]
    assert shown["error"] in proc.stderr  # the same words as the error line
    jsonschema.validate(shown, json.loads((DATA / "result.schema.json").read_text()))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**shown, "ok": True}, json.loads((DATA / "result.schema.json").read_text()))


def test_a_machine_oserror_under_json_prints_the_result_object(monkeypatch, capsys, tmp_path):
    """A full disk (or any OSError of the machine, exit 1) mid-command: the error line on stderr and,
    under --json, the result object with that line, as any other exit-1 stop."""
    import errno

    from rocmforge import cli
    from rocmforge.cli import project_commands

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "images"))

    monkeypatch.setattr(project_commands, "render", full)
    assert cli.main(["--matrix", str(ROOT / "matrix.yaml"), "render", "--json"]) == 1
    out, err = capsys.readouterr()
    shown = json.loads(out)
    assert (shown["command"], shown["ok"], shown["exit_code"]) == ("render", False, 1)
    assert shown["error"] == f"{tmp_path / 'images'}: No space left on device" and shown["error"] in err


def test_an_engine_that_does_not_answer_is_named_with_docker_host(tmp_path):
    env = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"}
    proc = run_cli("--matrix", str(ROOT / "matrix.yaml"), "clean", "--dry-run", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == (
        "error: cannot reach the Docker engine at DOCKER_HOST=unix:///nonexistent/rocmforge-no-engine.sock: "
        "no socket there; start the engine there, or point DOCKER_HOST at a running engine's socket\n"
    )


def test_the_result_of_lock_says_wrote_only_when_it_wrote(monkeypatch, capsys, tmp_path):
    from rocmforge.resolve import lockfile
    from rocmforge.resolve.lock import Outcome
    from rocmforge.workflow import locking

    matrix = copy_project(tmp_path)
    lock = lockfile.load(matrix.with_suffix(".lock"))
    before = matrix.with_suffix(".lock").read_bytes()
    monkeypatch.setattr(locking.engine, "connect", lambda: None)
    monkeypatch.setattr(
        locking.pins, "resolve", lambda *a, **k: Outcome(lock=lock, failed=["base x: DNS lookup failed"])
    )
    assert cli.main(["--matrix", str(matrix), "lock"]) == 1
    err = capsys.readouterr().err
    assert "wrote" not in err and "unchanged" in err and "render" not in err, err
    assert "could not be resolved here" in err and "ROCMFORGE_REGISTRY_MIRROR" in err
    assert "`python build.py lock`" not in err, err  # no advice that loops back
    assert matrix.with_suffix(".lock").read_bytes() == before
    assert cli.main(["--matrix", str(matrix), "lock", "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["wrote"] is None and shown["unresolved"] == ["base x: DNS lookup failed"]


def test_lock_check_json_lists_the_problems(monkeypatch, capsys, tmp_path):
    from rocmforge.resolve import lockfile
    from rocmforge.resolve.lock import Outcome
    from rocmforge.workflow import locking

    matrix = copy_project(tmp_path)
    stale = Outcome(lock=lockfile.load(matrix.with_suffix(".lock")), problems=["base x: digest gone"])
    monkeypatch.setattr(locking, "check", lambda *a, **k: stale)
    assert cli.main(["lock", "--check", "--json", "--target", "hip-devel", "--matrix", str(matrix)]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown == {
        "command": "lock",
        "ok": False,
        "exit_code": 1,
        "check": True,
        "targets": ["hip-devel"],
        "problems": ["base x: digest gone"],
    }
