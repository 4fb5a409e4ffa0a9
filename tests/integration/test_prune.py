"""hip-runtime as built: its GPU files are only gfx90a's and gfx1100's, the removed bytes are in no
layer, and the manifest says what was saved (the rules themselves: tests/unit/test_perarch.py;
the coverage proof: the archs suite)."""

from __future__ import annotations

import json

import pytest

from rocmforge.render import archprune
from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, run_cli, sh

pytestmark = pytest.mark.docker
LIBRARY = "/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library"


def test_hip_runtime_keeps_only_its_archs_and_no_layer_holds_the_rest(docker_client):
    build = run_cli("build", "--target", "hip-runtime")
    assert build.returncode == 0, build.stderr[-2000:]
    tp = load_plan(ROOT / "matrix.yaml").targets["hip-runtime"]
    image = docker_client.images.get(tp.content_tag)
    assert image.labels[archprune.LABEL] == "true"
    # Read through sh() (wait, then logs): a streamed run() can lose a short final line on some engines.
    rc, listing = sh(docker_client, tp.content_tag, f"ls {LIBRARY}")
    assert rc == 0, listing
    assert sorted(listing.split()) == [
        "Kernels.so-000-gfx1100.hsaco",
        "Kernels.so-000-gfx90a-xnack+.hsaco",
        "Kernels.so-000-gfx90a-xnack-.hsaco",
        "TensileLibrary.dat",
        "TensileLibrary_gfx1100.co",
        "TensileLibrary_gfx90a.co",
    ]
    rc, out = sh(docker_client, tp.content_tag, f"cat {archprune.record_path('hip-runtime')}")
    assert rc == 0, out
    record = json.loads(out)
    assert record["keep"] == ["gfx1100", "gfx90a"] and record["dirs"][LIBRARY]["removed_files"] == 15
    # librocblas0 alone installs more than the whole image weighs: the removed files reached no layer.
    rc, out = sh(docker_client, tp.content_tag, "dpkg-query -W -f '${Installed-Size}\\n' librocblas0")
    assert rc == 0 and out.strip().isdigit(), out
    installed_kb = int(out)
    size = docker_client.api.inspect_image(tp.content_tag)["Size"]
    assert size < installed_kb * 1024, (size, installed_kb)
    manifest = run_cli("manifest", "--target", "hip-runtime")
    assert manifest.returncode == 0, manifest.stderr[-2000:]
    written = json.loads((ROOT / ".rocmforge" / "artifacts" / "hip-runtime" / "manifest.json").read_text())
    assert written["prune"] == {
        "pruned": True,
        "archs": ["gfx1100", "gfx90a"],
        "removed_files": record["removed_files"],
        "removed_bytes": record["removed_bytes"],
    }
    assert "pruned, 1.06 GB saved" in run_cli("list").stdout
