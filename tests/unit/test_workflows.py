"""The CI workflow is valid for GitHub, and its job matrix is exactly what build.py lists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from rocmforge.matrix import load_matrix

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_github_schema(path):
    tool = shutil.which("check-jsonschema")
    assert tool, "check-jsonschema not installed (pip install -e '.[test]')"
    proc = subprocess.run([tool, "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _plan_outputs() -> dict[str, object]:
    wf = yaml.safe_load((ROOT / ".github/workflows/images.yml").read_text())
    script = next(s["run"] for s in wf["jobs"]["plan"]["steps"] if s.get("id") == "plan")
    out = {}
    for line in script.splitlines():
        m = re.match(r'echo "(\w+)=\$\((.*)\)" >> "\$GITHUB_OUTPUT"', line.strip())
        if m:
            proc = subprocess.run(["bash", "-c", m.group(2)], cwd=ROOT, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            assert "\n" not in proc.stdout.strip(), "a step output must be one line"
            out[m.group(1)] = json.loads(proc.stdout)
    return out


def test_plan_job_matrix_equals_list_json():
    assert shutil.which("jq"), "jq not installed"
    outputs = _plan_outputs()
    assert outputs["targets"] == json.loads(run_cli("list", "--json").stdout)
    assert outputs["gpu_jobs"] == json.loads(run_cli("list", "--json", "--gpu-jobs").stdout)


def test_jobs_take_their_matrix_from_the_plan_only():
    text = (ROOT / ".github/workflows/images.yml").read_text()
    wf = yaml.safe_load(text)
    assert wf["jobs"]["image"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.targets) }}"
    assert wf["jobs"]["gpu-suites"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.gpu_jobs) }}"
    assert wf["jobs"]["gpu-suites"]["runs-on"] == "${{ matrix.runs_on }}"
    for name in load_matrix(ROOT / "matrix.yaml").targets:
        assert name not in text, f"target {name} written by hand in the workflow"


def test_push_only_on_default_branch():
    wf = yaml.safe_load((ROOT / ".github/workflows/images.yml").read_text())
    for job in wf["jobs"].values():
        for step in job.get("steps", []):
            if "build.py push" in step.get("run", ""):
                assert "default_branch" in step.get("if", "")


def test_gpu_jobs_use_arch_labels():
    jobs = json.loads(run_cli("list", "--json", "--gpu-jobs").stdout)
    m = load_matrix(ROOT / "matrix.yaml")
    assert {(j["target"], j["arch"]) for j in jobs} == {(t, a) for t, spec in m.targets.items() for a in spec.archs}
    for j in jobs:
        assert j["runs_on"][:3] == ["self-hosted", "linux", "rocm"] and j["runs_on"][3] == j["arch"]
