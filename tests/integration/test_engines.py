"""One image identity on every engine users run: a small target (the bootstrapped Debian 13 base,
one small apt package, the probes) built, normalised and checked by its suites through the command
users type, on the host's engine and on each engine of tests/engine_host.py (Docker 28 with
overlay2, Docker 28 with the containerd image store, podman 5), gives one image ID: the config
digest. Under the containerd store rocmforge also reports the manifest digest that store shows."""

from __future__ import annotations

import json

import pytest
import yaml

from rocmforge import imageid

from tests.conftest import copy_project, run_cli

pytestmark = pytest.mark.docker

STACK = "debian13-rocm5.7"
TARGET = "engine-probe"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    matrix = copy_project(root)
    data = yaml.safe_load(matrix.read_text())
    data["stacks"][STACK]["apt"]["netbase"] = "6.5"
    data["targets"][TARGET] = {"description": "one small apt package on the bootstrapped base", "stack": STACK,
                               "apt": ["netbase"], "version": "1", "archs": ["gfx90a"],
                               "source_date_epoch": 1764547200}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = yaml.safe_load((root / "matrix.lock").read_text())
    lock["apt"][TARGET] = {"netbase": "6.5"}
    (root / "matrix.lock").write_text(yaml.safe_dump(lock))
    return matrix


def _content_tag(matrix) -> str:
    rows = json.loads(run_cli("--matrix", str(matrix), "list", "--json").stdout)
    return next(r["content_tag"] for r in rows if r["name"] == TARGET)


def _build(matrix, state, env=None):
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "--target", TARGET, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def host_identity(docker_client, project, tmp_path_factory):
    """The small target built on the host's engine: (image ID, diff IDs)."""
    _build(project, tmp_path_factory.mktemp("host-state"))
    tag = _content_tag(project)
    yield imageid.image_id(docker_client, tag), docker_client.api.inspect_image(tag)["RootFS"]["Layers"]
    for ref in (tag, tag.rsplit(":", 1)[0] + ":debian13-rocm5.7"):
        try:
            docker_client.api.remove_image(ref)
        except Exception:  # noqa: BLE001 - a readable tag another test made stays theirs
            pass


def test_a_small_target_is_one_image_on_every_engine(host_identity, other_engine, project, tmp_path):
    proc = _build(project, tmp_path / "state", env=other_engine.env())
    client = other_engine.client()
    tag = _content_tag(project)
    got = imageid.image_id(client, tag), client.api.inspect_image(tag)["RootFS"]["Layers"]
    print(f"{other_engine.describe()}: {got[0]} (host: {host_identity[0]})")
    assert got == host_identity
    shown = imageid.manifest_digest(client, tag)
    if other_engine.containerd_snapshotter:
        assert shown and shown != got[0]
        assert shown[7:19] in proc.stderr, "the manifest digest the store shows is not reported"
    else:
        assert shown is None
    assert got[0][7:19] in proc.stderr
