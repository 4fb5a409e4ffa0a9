"""A registry-based stack, end to end, with Debian's docker-registry on 127.0.0.1 standing in for
Docker Hub through the registry-mirror setting: `lock` resolves the digest, the apt closure and
the Python closure against the stand-in's own torch; the target builds FROM that digest and its
suites (the workload among them) pass. The stand-in is a small image made here like AMD's: the
HIP runtime, a GPU library (hipRAND/rocRAND), rocminfo and a preinstalled torch (Debian's ROCm 6.4 and torch, on the bootstrapped
Debian unstable base), pushed under the upstream name `rocm/pytorch:<tag>`."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from rocmforge import bootstrap, lockfile
from rocmforge.matrix import load_matrix
from rocmforge.plan import load_plan
from tests.conftest import ROOT, build_image, copy_project, run_cli

pytestmark = pytest.mark.docker
NONCE = uuid.uuid4().hex[:8]
STACK, TARGET = "standin-rocm6.4", f"standin-qlora-{NONCE}"


def _push(client, image_id: str, repo: str, tag: str) -> str:
    client.images.get(image_id).tag(repo, tag)
    digest = None
    for chunk in client.images.push(repo, tag, stream=True, decode=True):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest", digest)
    assert digest, "the push reported no digest"
    return digest


STANDIN_PACKAGES = ["libamdhip64-6", "libhiprand1", "rocminfo", "python3-torch", "python3-transformers", "python3-accelerate",
                    "python3-venv"]


@pytest.fixture(scope="module")
def standin(docker_client, local_registry, tmp_path_factory):
    """(upstream tag, digest) of the stand-in in the local registry; every image removed afterwards."""
    stack = load_matrix(ROOT / "matrix.yaml").stacks["debian-sid-rocm6.4"]
    base = bootstrap.ensure_base(docker_client, "debian-sid-rocm6.4", stack, tmp_path_factory.mktemp("work"),
                                 lambda msg: None)
    image_id = build_image(docker_client, f"FROM {base}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive "
                           f"apt-get install -y --no-install-recommends {' '.join(STANDIN_PACKAGES)} "
                           "&& rm -rf /var/lib/apt/lists/*\n")
    tag = f"standin-{NONCE}"
    repo = f"{local_registry}/rocm/pytorch"
    try:
        yield tag, _push(docker_client, image_id, repo, tag)
    finally:
        for ref in (f"{repo}:{tag}", image_id):
            try:
                docker_client.images.remove(ref, force=True)
            except Exception:  # already gone
                pass


@pytest.fixture(scope="module")
def project(tmp_path_factory, standin):
    tmp = tmp_path_factory.mktemp("registry-stack")
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    sid = data["stacks"]["debian-sid-rocm6.4"]
    data["stacks"][STACK] = {
        "description": "stand-in for rocm/pytorch: Debian's ROCm 6.4 and torch, served by a local registry",
        "os": "debian-sid", "rocm": sid["rocm"], "python": sid["python"], "pytorch": "2.14.1",
        "pytorch_build": "cpu",
        "base": {"registry": {"image": "rocm/pytorch", "tag": standin[0], "digest": None}},
        "apt": {"python3-sentencepiece": "0.2.2-1+b2"},
        "gpu_libraries": [p for p in sid["gpu_libraries"] if any(k in p for k in ("amdhip64", "hsa-runtime", "hiprand"))],
    }
    data["targets"][TARGET] = {
        "description": "seed 000's QLoRA environment on a registry base", "stack": STACK, "version": "1.0.0",
        "archs": ["gfx90a", "gfx1100"], "source_date_epoch": 1793318400, "apt": ["python3-sentencepiece"],
        "components": ["llama31-qlora-debian-env", "llama31-qlora-debian-settings"],
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix, tmp / "state"


@pytest.fixture(scope="module")
def mirror_env(local_registry):
    return {"ROCMFORGE_REGISTRY_MIRROR": local_registry}


@pytest.fixture(scope="module")
def locked(project, mirror_env, standin, local_registry):
    matrix, state = project
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "lock", "--target", TARGET, env=mirror_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return proc, lockfile.load(matrix.with_suffix(".lock"))


def test_lock_resolves_the_registry_stack_completely(locked, standin, local_registry):
    proc, lock = locked
    tag, digest = standin
    assert f"resolved: base {STACK}: rocm/pytorch:{tag} -> {digest} through {local_registry}" in proc.stdout
    # The lock keeps the upstream name; the mirror is how it was reached, not what it is.
    assert lock["bases"][STACK] == {"kind": "registry", "image": f"rocm/pytorch:{tag}", "digest": digest}
    assert lock["apt"][TARGET]["python3-sentencepiece"] == "0.2.2-1+b2"
    assert lock["python"]["llama31-qlora-debian-env"]["peft"]["version"] == "0.21.2"
    held = lock["held"]["llama31-qlora-debian-env"]
    assert held["torch_version"].startswith("2.14.1") and held["torch_hip"] is None
    assert held["packages"]["torch"] == held["torch_version"]
    assert local_registry not in matrix_text(locked)


def matrix_text(locked) -> str:
    return lockfile.dump(locked[1])


def test_rendered_dockerfile_names_the_upstream_by_digest(project, locked, standin, local_registry):
    matrix, _ = project
    tp = load_plan(matrix).targets[TARGET]
    assert not tp.unresolved, tp.unresolved
    text = tp.files["Dockerfile"].decode()
    assert f"ARG ROCMFORGE_BASE=rocm/pytorch:{standin[0]}@{standin[1]}" in text
    assert "FROM ${ROCMFORGE_BASE}" in text and local_registry not in text


def test_build_through_the_mirror_and_suites_pass(docker_client, project, locked, mirror_env, standin,
                                                  local_registry):
    matrix, state = project
    tp = load_plan(matrix).targets[TARGET]
    try:
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "--target", TARGET, env=mirror_env)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        image = docker_client.images.get(tp.content_tag)
        labels = image.labels
        assert labels["org.opencontainers.image.base.name"] == f"rocm/pytorch:{standin[0]}"
        assert labels["org.opencontainers.image.base.digest"] == standin[1]
        history = json.dumps(image.history()) + json.dumps(image.attrs["Config"])
        assert local_registry not in history and local_registry not in json.dumps(labels)
        report = json.loads((next((state / "results").glob("*.json"))).read_text())
        suites = report["suites"]
        assert suites["workload"]["status"] in ("passed", "not GPU-verified"), suites["workload"]
        assert not [n for n, s in suites.items() if s["status"] == "failed"], suites
        # The base's layers pass through normalisation untouched: the base pulled by digest is
        # stored once and shared, and the image's layers start with exactly its diff IDs.
        base_layers = docker_client.api.inspect_image(f"{local_registry}/rocm/pytorch@{standin[1]}")["RootFS"]["Layers"]
        assert image.attrs["RootFS"]["Layers"][:len(base_layers)] == base_layers
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "verify-repro", "--target", TARGET,
                       env=mirror_env)
        assert proc.returncode == 0 and f"identical: both builds of {TARGET} gave {image.id}" in proc.stdout, \
            proc.stdout + proc.stderr[-3000:]
        # The torch the base shipped is the torch the image has.
        out = docker_client.containers.run(image.id, ["/opt/rocmforge/venv/bin/python", "-c",
                                                      "import torch; print(torch.__version__)"], remove=True)
        assert out.decode().strip() == locked[1]["held"]["llama31-qlora-debian-env"]["torch_version"]
    finally:
        for ref in (tp.content_tag, tp.readable_tag):
            try:
                docker_client.images.remove(ref)
            except Exception:  # not built
                pass
