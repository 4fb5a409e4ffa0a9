"""Bit-identical rebuilds through the CLI: verify-repro on hip-runtime against its built image, by the
other builder, and an injected nondeterministic step that two no-cache builds must name."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
import yaml

from tests import buildx
from tests.conftest import ROOT, copy_project, run_cli

pytestmark = pytest.mark.docker


def test_hip_runtime_rebuilds_bit_identically_by_either_builder(docker_client, session_images, tmp_path):
    """The built image (the normal build of the original checkout by the classic builder, whenever
    this run or an earlier one made it) and a no-cache rebuild by BuildKit from a second checkout, at
    another time, are one image: the main image and every variant. Two independent builds by two
    builders (issue 55: either builder gives the same image; BuildKit writes history, layers and
    config its own way, and makes no step images), so a difference of either builder's own would
    show too. `verify-repro` without --against-built (two new builds) is run by
    test_injected_nondeterminism_is_named.

    Then the committed bake file builds the gfx1100 variant (its builder stage FROM hip-devel's
    content tag) from the context `context` writes, on BuildKit's cache of the rebuild, and
    `normalise` gives the same ID."""
    buildkit = {"DOCKER_CONFIG": str(buildx.install())}
    assert run_cli("build", "--target", "hip-runtime", "--builder", "classic").returncode == 0
    row = next(r for r in json.loads(run_cli("list", "--json").stdout) if r["name"] == "hip-runtime")
    # A second checkout whose files all carry other mtimes: checkouts must not matter.
    matrix = copy_project(tmp_path)
    for p in tmp_path.rglob("*"):
        if p.is_file():
            p.touch()
    state = tmp_path / "state"
    args = ("--matrix", str(matrix), "--state-dir", str(state))
    proc = run_cli(*args, "verify-repro", "--target", "hip-runtime", "--against-built", "--builder", "buildkit",
                   "--json", env=buildkit)  # fmt: skip
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report.get("explanation") or proc.stderr[-3000:]
    logs = sorted((state / "logs").glob("hip-runtime*.repro-*.log"))
    assert len(logs) == 3 and all("(buildkit builder)" in log.read_text().splitlines()[0] for log in logs), logs
    assert report["against"] == "built" and report["identical"]
    assert report["image_ids"] == [docker_client.images.get(row["content_tag"]).id] * 2
    assert [v["target"] for v in report["variants"]] == [f"hip-runtime-{'-'.join(v['archs'])}" for v in row["variants"]]
    for rebuilt, built in zip(report["variants"], row["variants"]):
        assert rebuilt["identical"] and rebuilt["against"] == "built"
        assert rebuilt["image_ids"] == [docker_client.images.get(built["content_tag"]).id] * 2

    key, bake_file = "hip-runtime-gfx1100", ROOT / "images" / "docker-bake.json"
    want = docker_client.images.get(next(v["content_tag"] for v in row["variants"] if v["archs"] == ["gfx1100"])).id
    target = json.loads(bake_file.read_text())["target"][key]
    proc = run_cli(*args, "context", "--target", key, "--out", str(tmp_path / target["context"]))
    assert proc.returncode == 0, proc.stderr
    try:
        baked = subprocess.run(
            ["docker", "buildx", "bake", "--file", str(bake_file), "--progress", "plain", key],
            cwd=tmp_path,  # where bake reads the target's context path from
            env={**os.environ, **buildkit},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert baked.returncode == 0, baked.stderr[-3000:]
        proc = run_cli(*args, "normalise", "--target", key)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert want in proc.stdout, (want, proc.stdout)
    finally:
        for ref in target["tags"]:
            try:
                docker_client.api.remove_image(ref, force=True)
            except Exception:  # noqa: BLE001 - taken by normalise, or never made
                pass


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
            # the nonce: a target of this run's own, never built before whatever the engine holds
            "COPY probes/ /opt/rocmforge/probes/\n{% if name == 'stamp' %}"
            f"RUN date +%s%N > /opt/stamp # {uuid.uuid4().hex}\n{{% endif %}}",
        )
    )
    # Nothing built yet to compare with: said before any build, with what to run.
    proc = run_cli("--matrix", str(matrix), "verify-repro", "--target", "stamp", "--against-built")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--against-built: nothing built to compare with" in proc.stderr and "build --target stamp" in proc.stderr
    proc = run_cli("--matrix", str(matrix), "verify-repro", "--target", "stamp", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert not report["identical"]
    diff = report["difference"]
    assert diff["where"] == "layer" and diff["path"].lstrip("/") == "opt/stamp" and diff["field"] == "content"
    assert "opt/stamp" in report["explanation"] and "date" in report["explanation"]
    # The built image against its rebuild: the same difference, named the same way.
    assert run_cli("--matrix", str(matrix), "build", "--target", "stamp").returncode == 0
    proc = run_cli("--matrix", str(matrix), "verify-repro", "--target", "stamp", "--against-built", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["against"] == "built" and not report["identical"]
    assert report["difference"]["path"].lstrip("/") == "opt/stamp", report["difference"]
