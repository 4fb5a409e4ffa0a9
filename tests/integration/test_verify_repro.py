"""Bit-identical rebuilds through the CLI: verify-repro on hip-runtime, and an injected
nondeterministic step that must be named."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import copy_project, run_cli

pytestmark = pytest.mark.docker


def test_hip_runtime_rebuilds_bit_identically(docker_client, session_images, tmp_path):
    # A second checkout whose files all carry other mtimes: checkouts must not matter.
    matrix = copy_project(tmp_path)
    for p in tmp_path.rglob("*"):
        if p.is_file():
            p.touch()
    proc = run_cli("--matrix", str(matrix), "verify-repro", "--target", "hip-runtime", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report.get("explanation") or proc.stderr[-3000:]
    assert report["identical"] and report["image_ids"][0] == report["image_ids"][1]
    # and the normal build of the same inputs, from the original checkout, is that very image
    assert run_cli("build", "--target", "hip-runtime").returncode == 0
    plan_tag = json.loads(run_cli("list", "--json").stdout)
    row = next(r for r in plan_tag if r["name"] == "hip-runtime")
    assert docker_client.images.get(row["content_tag"]).id == report["image_ids"][0]
    # Every variant, rebuilt twice, is the variant `build` made.
    assert [v["target"] for v in report["variants"]] == [f"hip-runtime-{'-'.join(v['archs'])}" for v in row["variants"]]
    for rebuilt, built in zip(report["variants"], row["variants"]):
        assert rebuilt["identical"] and rebuilt["image_ids"][0] == rebuilt["image_ids"][1]
        assert docker_client.images.get(built["content_tag"]).id == rebuilt["image_ids"][0]


def test_injected_nondeterminism_is_named(docker_client, session_images, tmp_path):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"]["stamp"] = {
        "description": "writes the build time",
        "stack": "debian13-rocm5.7",
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    tpl.write_text(
        tpl.read_text().replace(
            "COPY probes/ /opt/rocmforge/probes/",
            "COPY probes/ /opt/rocmforge/probes/\n{% if name == 'stamp' %}RUN date +%s%N > /opt/stamp\n{% endif %}",
        )
    )
    proc = run_cli("--matrix", str(matrix), "verify-repro", "--target", "stamp", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert not report["identical"]
    diff = report["difference"]
    assert diff["where"] == "layer" and diff["path"].lstrip("/") == "opt/stamp" and diff["field"] == "content"
    assert "opt/stamp" in report["explanation"] and "date" in report["explanation"]
