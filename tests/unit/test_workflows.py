"""The CI workflow is valid for GitHub, and its job matrix is exactly what build.py lists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from rocmforge.define.matrix import load_matrix
from tests.conftest import ROOT, run_cli

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_github_schema(path):
    tool = shutil.which("check-jsonschema")
    assert tool, "check-jsonschema not installed (pip install -e '.[test]')"
    proc = subprocess.run(
        [tool, "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True
    )
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
    rows = json.loads(run_cli("list", "--json").stdout)
    assert outputs["targets"] == rows
    assert outputs["gpu_jobs"] == json.loads(run_cli("list", "--json", "--gpu-jobs").stdout)
    levels = sorted(k for k in outputs if k.startswith("level"))
    for key in levels:
        assert outputs[key] == [r for r in rows if r["level"] == int(key[5:])]
    # every target is in exactly one level job, and each after its prerequisites
    assert sorted(r["name"] for key in levels for r in outputs[key]) == sorted(r["name"] for r in rows)
    level_of = {r["name"]: r["level"] for r in rows}
    for r in rows:
        assert all(level_of[d] < r["level"] for d in r["deps"])


def _wf(name: str = "images.yml") -> dict:
    return yaml.safe_load((ROOT / ".github/workflows" / name).read_text())


def test_jobs_take_their_matrix_and_runners_from_the_plan_only():
    wf, level = _wf(), _wf("build-level.yml")
    rows = json.loads(run_cli("list", "--json").stdout)
    for n in range(max(r["level"] for r in rows) + 1):
        job = wf["jobs"][f"level{n}"]
        assert job["uses"] == "./.github/workflows/build-level.yml"
        assert job["with"]["targets"] == f"${{{{ needs.plan.outputs.level{n} }}}}"
        assert n == 0 or f"level{n - 1}" in job["needs"]
    image = level["jobs"]["image"]
    assert image["strategy"]["matrix"]["include"] == "${{ fromJSON(inputs.targets) }}"
    assert image["runs-on"] == "${{ matrix.runs_on }}"
    assert wf["jobs"]["gpu-suites"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.gpu_jobs) }}"
    assert wf["jobs"]["gpu-suites"]["runs-on"] == "${{ matrix.runs_on }}"
    text = "".join(p.read_text() for p in WORKFLOWS)
    for name in load_matrix(ROOT / "matrix.yaml").targets:
        assert name not in text, f"target {name} written by hand in a workflow"


def test_runners_and_disk_come_from_the_matrix():
    m = load_matrix(ROOT / "matrix.yaml")
    for r in json.loads(run_cli("list", "--json").stdout):
        runner = m.targets[r["name"]].runner or m.stacks[r["stack"]].runner
        assert (r["runs_on"], r["disk_gb"]) == (runner.labels, runner.disk_gb)
        if m.stacks[r["stack"]].base.registry is not None:  # AMD's 30-50 GB bases: never a hosted runner
            assert "ubuntu-24.04" not in r["runs_on"] and r["disk_gb"] >= 60
    step = next(s for s in _wf("build-level.yml")["jobs"]["image"]["steps"] if "build.py build" in s.get("run", ""))
    assert "--check-disk" in step["run"]


def test_cache_is_read_only_on_pull_requests():
    env = _wf("build-level.yml")["jobs"]["image"]["env"]
    assert env["ROCMFORGE_CACHE_REGISTRY"] == "${{ vars.ROCMFORGE_CACHE_REGISTRY }}"
    assert env["ROCMFORGE_CACHE_READONLY"] == "${{ github.event_name == 'pull_request' && '1' || '' }}"


def test_push_only_on_default_branch():
    for wf in (_wf(), _wf("build-level.yml")):
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


def test_the_default_branch_push_signs_keyless_with_githubs_oidc_token():
    """The publish step signs keyless, and the token it needs is granted by the caller (a called
    workflow gets no more than images.yml grants) and by build-level.yml itself."""
    for wf in (_wf(), _wf("build-level.yml")):
        assert wf["permissions"].get("id-token") == "write"
    pushes = [s for s in _wf("build-level.yml")["jobs"]["image"]["steps"] if "build.py push" in s.get("run", "")]
    assert pushes and all("--keyless" in s["run"] and "sudo -E" in s["run"] for s in pushes)
