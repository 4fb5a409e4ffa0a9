"""Every command's --json against the one shipped schema (rocmforge/data/result.schema.json, issue 54):
each command that needs no engine runs here for real, from the repository's matrix and the fixtures;
those that need one run with the engine unreachable, where their result is the error object, and
`test`'s result is checked with its engine calls replaced. The engine commands' own keys are
validated from real builds in tests/integration/test_json_results.py."""

from __future__ import annotations

import json

import pytest

from rocmforge.cli import build_commands, results
from rocmforge.cli.invocation import Invocation
from rocmforge.cli.parser import build_parser
from rocmforge.shared.packagedata import DATA
from rocmforge.verify import suites
from rocmforge.verify.suites import SuitesReport
from tests.conftest import ROOT, copy_project, run_cli

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads((DATA / "result.schema.json").read_text())
FIXTURES = ROOT / "tests" / "fixtures"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"}


def validate(shown, definition: str) -> None:
    """Valid against the whole schema and against the definition the command's output should take
    (oneOf: one and only one of them)."""
    jsonschema.validate(shown, SCHEMA)
    jsonschema.validate(shown, {**SCHEMA, "oneOf": [{"$ref": f"#/$defs/{definition}"}]})


def run_json(*argv: str, code: int = 0, env: dict | None = None):
    proc = run_cli(*argv, "--json", env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_every_result_command_is_in_the_schema_and_the_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert list(results.COMMANDS) == SCHEMA["$defs"]["result"]["properties"]["command"]["enum"]


@pytest.mark.parametrize("extra,definition", [((), "list"), (("--gpu-jobs",), "gpu_jobs")])
def test_list(tmp_path, extra, definition):
    shown = run_json("--state-dir", str(tmp_path), "list", *extra, env=NO_ENGINE)
    assert isinstance(shown, list) and shown
    validate(shown, definition)


def test_archs():
    shown = run_json("archs", str(FIXTURES / "archs"))
    assert any(row["archs"] for row in shown), shown
    validate(shown, "archs")


@pytest.mark.parametrize("sample", sorted((FIXTURES / "rocminfo").rglob("*.txt"))[:3], ids=lambda p: p.name)
def test_rocminfo(sample):
    shown = run_json("rocminfo", str(sample))
    assert (shown["command"], shown["ok"], shown["exit_code"]) == ("rocminfo", True, 0)
    validate(shown, "result")


def test_report_without_an_engine(tmp_path):
    shown = run_json("--state-dir", str(tmp_path), "report", "--out", str(tmp_path / "out"), env=NO_ENGINE)
    assert (shown["command"], shown["ok"]) == ("report", True)
    validate(shown, "result")
    # report.json keeps the report alone: the three keys belong to the command's output
    kept = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {k: v for k, v in shown.items() if k not in ("command", "ok", "exit_code")} == kept


def test_render_and_render_check(tmp_path):
    matrix = copy_project(tmp_path)
    validate(run_json("--matrix", str(matrix), "render"), "result")
    validate(run_json("--matrix", str(matrix), "render", "--check"), "result")


def test_context(tmp_path):
    out = tmp_path / "ctx"
    shown = run_json("--state-dir", str(tmp_path / "state"), "context", "--target", "hip-runtime", "--out", str(out))
    validate(shown, "result")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == shown["files"]


@pytest.mark.parametrize(
    "argv",
    [
        ["test", "--target", "hip-runtime"],
        ["manifest", "--target", "hip-runtime"],
        ["normalise", "--target", "hip-runtime"],
    ],
)
def test_an_engine_command_without_an_engine_prints_the_error_object(tmp_path, argv):
    shown = run_json("--state-dir", str(tmp_path), *argv, code=1, env=NO_ENGINE)
    assert (shown["command"], shown["ok"], shown["exit_code"]) == (argv[0], False, 1)
    assert "rocmforge-no-engine.sock" in shown["error"]
    validate(shown, "result")


def test_a_result_missing_its_own_keys_is_refused():
    """The schema is not a bag of anything: a test result without its report, a context without its
    files, list rows without names are each refused."""
    bad = [
        {"command": "test", "ok": True, "exit_code": 0},
        {"command": "context", "ok": True, "exit_code": 0, "target": "x", "out": "o", "tag": "t", "files": []},
        {"command": "manifest", "ok": True, "exit_code": 0, "written": [{"target": "x"}]},
        [{"stack": "debian"}],
    ]
    for each in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(each, SCHEMA)


def _report(image: str, ok: bool) -> SuitesReport:
    outcome = suites.SuiteOutcome.from_json({"status": "passed" if ok else "failed"})
    return SuitesReport(image, "sha256:" + "b" * 64, "hip-runtime", 0 if ok else 1, {"contents": outcome}, ok)


@pytest.mark.parametrize("main_ok,variant_ok", [(True, False), (False, True), (True, True)])
def test_test_json_ok_agrees_with_the_exit_code(monkeypatch, capsys, tmp_path, main_ok, variant_ok):
    """ok was the main image's alone: true while a variant failed and the command exited 1."""
    matrix = copy_project(tmp_path)
    args = build_parser().parse_args(
        ["--matrix", str(matrix), "--state-dir", str(tmp_path / "state"), "test", "--target", "hip-runtime", "--json"]
    )
    inv = Invocation(args)
    images = inv.plan.images_of("hip-runtime")
    assert len(images) > 1, "hip-runtime needs a variant for this test"
    verdicts = {tp.content_tag: main_ok if i == 0 else variant_ok for i, tp in enumerate(images)}
    monkeypatch.setattr(suites, "require_runner", lambda: None)
    monkeypatch.setattr(build_commands.engine, "connect", lambda: object())
    monkeypatch.setattr(build_commands, "require_built", lambda client, tp: "sha256:" + "a" * 64)
    monkeypatch.setattr(type(inv.project), "buildable_target", lambda self, name: None)
    monkeypatch.setattr(type(inv.pipeline), "test", lambda self, client, ref, *a, **k: _report(ref, verdicts[ref]))
    code = build_commands.test(inv)
    shown = json.loads(capsys.readouterr().out)
    assert code == (0 if main_ok and variant_ok else 1)
    assert (shown["ok"], shown["exit_code"]) == (code == 0, code)
    assert shown["image_ok"] is main_ok
    assert [v["ok"] for v in shown["variants"]] == [variant_ok] * (len(images) - 1)
    validate(shown, "result")
