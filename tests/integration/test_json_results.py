"""The engine commands' --json against the shipped schema with their own keys (the unit tests see
them only as the error object an unreachable engine gives): build, test, manifest and clean
--dry-run on hip-runtime, as built by the module's fixture. Nothing is removed."""

from __future__ import annotations

import json

import pytest

from rocmforge.shared.packagedata import DATA
from tests.conftest import run_cli

jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.docker

SCHEMA = json.loads((DATA / "result.schema.json").read_text())
RESULT_ONLY = {**SCHEMA, "oneOf": [{"$ref": "#/$defs/result"}]}


@pytest.mark.parametrize(
    "argv,own_key",
    [
        (["build", "--target", "hip-runtime"], "targets"),
        (["test", "--target", "hip-runtime", "--suite", "contents"], "image_ok"),
        (["manifest", "--target", "hip-runtime"], "written"),
        (["clean", "--target", "hip-runtime", "--dry-run"], "items"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else v,
)
def test_an_engine_command_prints_its_result_with_its_own_keys(hip_runtime_built, argv, own_key):
    proc = run_cli(*argv, "--json")
    shown = json.loads(proc.stdout)
    assert (shown["command"], shown["exit_code"], shown["ok"]) == (argv[0], proc.returncode, proc.returncode == 0)
    assert own_key in shown, shown
    jsonschema.validate(shown, RESULT_ONLY)
