"""An AMD-shaped registry stack, end to end, with Debian's docker-registry on 127.0.0.1 standing in
for Docker Hub through the registry-mirror setting. (This folds in the earlier registry-stack test:
the same path — `lock` resolves the digest, the apt closure and the Python closure against the
base's own torch; the target builds FROM that digest; every suite, the workload among them, passes —
now on a base shaped like AMD's rocm/pytorch.)

The stand-in is small and made here from Debian pieces (sid's HIP runtime, hipRAND, rocminfo, CPU
torch, transformers, accelerate) with what AMD's images have: torch's Python at
/opt/conda/envs/py_3.14/bin/python and another Python without torch earlier on PATH
(/opt/conda/bin/python), ROCm under /opt/rocm-6.4.3 with the /opt/rocm link, hipconfig and
.info/version, a torch that reports `+git<sha>` with a `torchrun` console script in the conda
env's bin, root in WORKDIR /var/lib/jenkins, and a vendor list /etc/apt/sources.list.d/rocm.list
whose host (under the reserved .invalid TLD) never answers. It carries no ROCm development packages
(hipcc, hipBLASLt, hipCUB), so bitsandbytes cannot compile on it and is not part of the target."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from rocmforge.define.matrix import load_matrix
from rocmforge.render.plan import load_plan
from rocmforge.resolve import bootstrap, lockfile
from tests.conftest import ROOT, build_image, copy_project, run_cli

pytestmark = pytest.mark.docker
NONCE = uuid.uuid4().hex[:8]
STACK, TARGET = "amd-standin-rocm6.4", f"amd-standin-qlora-{NONCE}"
CONDA_PY = "/opt/conda/envs/py_3.14/bin/python"
DEAD_HOST = "rocm-apt.invalid"
TORCH_LOCAL = "+git1a2b3c4"
STANDIN_PACKAGES = [
    "libamdhip64-6",
    "libhiprand1",
    "rocminfo",
    "python3-torch",
    "python3-transformers",
    "python3-accelerate",
    "python3-venv",
]
STANDIN_LIBS = ["libamdhip64.so.6", "libhsa-runtime64.so.1", "libhiprand.so.1"]

# Each RUN says which AMD trait it reproduces; the Debian pieces stay where Debian installs them.
STANDIN = f"""\
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
{" ".join(STANDIN_PACKAGES)} && rm -rf /var/lib/apt/lists/*
# /opt/rocm-X.Y.Z with the /opt/rocm link, hipconfig on PATH and .info/version
RUN mkdir -p /opt/rocm-6.4.3/bin /opt/rocm-6.4.3/lib /opt/rocm-6.4.3/.info \
 && echo 6.4.3-standin > /opt/rocm-6.4.3/.info/version \
 && printf '#!/bin/sh\\n[ "$1" = --version ] && echo 6.4.43484 || echo HIP_PLATFORM=amd\\n' > /opt/rocm-6.4.3/bin/hipconfig \
 && chmod 755 /opt/rocm-6.4.3/bin/hipconfig \
 && for l in {" ".join(STANDIN_LIBS)}; do ln -s /usr/lib/x86_64-linux-gnu/$l* /opt/rocm-6.4.3/lib/; done \
 && ln -s rocm-6.4.3 /opt/rocm
# torch's Python in a conda env, a Python without torch at /opt/conda/bin; torch reports +git<sha>
# and, like AMD's wheels, declares torchrun, whose script lives in the env's bin
# (the env is a venv over Debian's Python, so that its prefix is a real one, as a conda env's is)
RUN python3 -m venv --without-pip /opt/conda \
 && python3 -m venv --without-pip --system-site-packages /opt/conda/envs/py_3.14 \
 && d=$(ls -d /usr/lib/python3/dist-packages/torch-*-info | head -n 1) && m=$d/METADATA && {{ [ -f $m ] || m=$d/PKG-INFO; }} \
 && v=$(sed -n 's/^Version: //p' $m) && v=${{v%%+*}} \
 && sed -i "s/^Version: .*/Version: $v{TORCH_LOCAL}/" $m \
 && sed -i "s/^__version__\\(: *str\\)\\? *= .*/__version__ = '$v{TORCH_LOCAL}'/" /usr/lib/python3/dist-packages/torch/version.py \
 && {CONDA_PY} -c "import importlib.metadata as m, torch; assert torch.__version__ == m.version('torch') == '$v{TORCH_LOCAL}'" \
 && {{ grep -q '^torchrun' $d/entry_points.txt 2>/dev/null \
       || printf '[console_scripts]\\ntorchrun = torch.distributed.run:main\\n' >> $d/entry_points.txt; }} \
 && {{ [ "$d" = "${{d%/*}}/torch-$v{TORCH_LOCAL}.${{d##*.}}" ] || mv "$d" "${{d%/*}}/torch-$v{TORCH_LOCAL}.${{d##*.}}"; }} \\
 && printf '#!{CONDA_PY}\\nimport sys\\nfrom torch.distributed.run import main\\nsys.exit(main())\\n' \
      > /opt/conda/envs/py_3.14/bin/torchrun && chmod 755 /opt/conda/envs/py_3.14/bin/torchrun
# a vendor list whose host does not answer
RUN echo 'deb [arch=amd64 trusted=yes] http://{DEAD_HOST}/rocm/apt/6.4.3 sid main' > /etc/apt/sources.list.d/rocm.list
ENV PATH=/opt/conda/bin:/opt/conda/envs/py_3.14/bin:/opt/rocm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /var/lib/jenkins
"""  # noqa: E501


def _push(client, image_id: str, repo: str, tag: str) -> str:
    client.images.get(image_id).tag(repo, tag)
    digest = None
    for chunk in client.images.push(repo, tag, stream=True, decode=True):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest", digest)
    assert digest, "the push reported no digest"
    return digest


@pytest.fixture(scope="module")
def standin(docker_client, local_registry, tmp_path_factory):
    """(upstream tag, digest) of the stand-in in the local registry; every image removed afterwards."""
    stack = load_matrix(ROOT / "matrix.yaml").stacks["debian-sid-rocm6.4"]
    base = bootstrap.ensure_base(
        docker_client, "debian-sid-rocm6.4", stack, tmp_path_factory.mktemp("work"), lambda msg: None
    )
    image_id = build_image(docker_client, f"FROM {base}\n" + STANDIN)
    tag = f"rocm6.4.3_standin_py3.14_{NONCE}"
    repo = f"{local_registry}/rocm/pytorch"
    try:
        yield tag, _push(docker_client, image_id, repo, tag)
    finally:
        for ref in (f"{repo}:{tag}", image_id):
            try:
                docker_client.images.remove(ref, force=True)
            except Exception:  # already gone
                pass


SEED_COMPONENTS = [
    "llama31-qlora-debian-env",
    "llama31-qlora-debian-settings",
    "llama7b-train-settings",
    "llama7b-infer-settings",
]


def _write_project(tmp, standin, apt_sources: dict, python_bin: str = CONDA_PY, components=tuple(SEED_COMPONENTS)):
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    sid = data["stacks"]["debian-sid-rocm6.4"]
    data["stacks"][STACK] = {
        "description": "AMD-shaped stand-in for rocm/pytorch: Debian's ROCm 6.4 and torch, served by a local registry",
        "os": "debian-sid",
        "rocm": sid["rocm"],
        "python": sid["python"],
        "pytorch": "2.14.1",
        "pytorch_build": "cpu",
        "python_bin": python_bin,
        "base": {"registry": {"image": "rocm/pytorch", "tag": standin[0], "digest": None}},
        "apt_sources": apt_sources,
        "apt": {"python3-sentencepiece": "0.2.2-1+b2"},
        "gpu_libraries": ["/opt/rocm/lib"],
        "env": {"ROCM_PATH": "/opt/rocm"},
    }
    data["targets"][TARGET] = {
        "description": "seed 000's QLoRA environment and the seeds' settings on an AMD-shaped registry base",
        "stack": STACK,
        "version": "1.0.0",
        "archs": ["gfx90a", "gfx1100"],
        "source_date_epoch": 1793318400,
        "apt": ["python3-sentencepiece"],
        "components": list(components),
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix, tmp / "state"


@pytest.fixture(scope="module")
def mirror_env(local_registry):
    return {"ROCMFORGE_REGISTRY_MIRROR": local_registry}


@pytest.fixture(scope="module")
def project(tmp_path_factory, standin):
    return _write_project(tmp_path_factory.mktemp("amd-standin"), standin, {"drop": ["rocm.list"]})


def _lock_refused(matrix, state, mirror_env):
    """Runs lock; returns (process, output, lock before, lock after)."""
    before = lockfile.load(matrix.with_suffix(".lock"))
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "lock", "--target", TARGET, env=mirror_env)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    return proc, out, before, lockfile.load(matrix.with_suffix(".lock"))


def test_lock_names_the_dead_vendor_list_and_its_host(tmp_path, standin, mirror_env):
    matrix, state = _write_project(tmp_path, standin, {"keep": True})
    proc, out, before, after = _lock_refused(matrix, state, mirror_env)
    assert proc.returncode == 1, out
    assert after == before, "a lock stopped by a dead source changed matrix.lock"
    assert "/etc/apt/sources.list.d/rocm.list" in proc.stderr and f"host {DEAD_HOST}" in proc.stderr, out
    assert f"stacks.{STACK}.apt_sources" in proc.stderr and "drop: [rocm.list]" in proc.stderr, out
    # The Debian archive answered: neither it nor the Debian mirror setting is blamed.
    assert "ROCMFORGE_DEBIAN_MIRROR" not in proc.stderr and "Debian archive" not in proc.stderr, out


def test_lock_names_a_python_bin_the_base_lacks(tmp_path, standin, mirror_env):
    matrix, state = _write_project(
        tmp_path, standin, {"drop": ["rocm.list"]}, python_bin="/opt/conda/envs/py_3.9/bin/python"
    )
    proc, out, before, after = _lock_refused(matrix, state, mirror_env)
    assert proc.returncode == 1, out
    env = "llama31-qlora-debian-env"  # its entries are left as they were
    assert (after.python.get(env), after.held.get(env)) == (before.python.get(env), before.held.get(env))
    assert f"stacks.{STACK}.python_bin" in proc.stderr and "/opt/conda/envs/py_3.9/bin/python" in proc.stderr, out
    assert CONDA_PY in proc.stderr, out  # what the base does have


def test_lock_names_a_base_without_cmake_for_the_fork(tmp_path, standin, mirror_env):
    # The stand-in has no CMake (AMD's focal images have had only focal's 3.16): the fork needs 3.22.1.
    matrix, state = _write_project(tmp_path, standin, {"drop": ["rocm.list"]}, components=["bitsandbytes-hip"])
    proc, out, before, after = _lock_refused(matrix, state, mirror_env)
    assert proc.returncode == 1, out
    assert after.git == before.git or "git bitsandbytes-hip" in proc.stdout, out
    assert (
        f"cmake bitsandbytes-hip: stack {STACK} (target {TARGET})" in proc.stderr and "no cmake on PATH" in proc.stderr
    ), out
    assert "needs CMake >= 3.22.1" in proc.stderr and "components.bitsandbytes-hip.builder_apt" in proc.stderr, out


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
    # The lock keeps the upstream name (the mirror is how it was reached, not what it is) and
    # records what was done to the base's own apt lists and which lists it shipped.
    # and the base's own dpkg set, which the suites expect the image to hold.
    base = lock.bases[STACK].model_dump(exclude_unset=True)
    packages = base.pop("packages")
    assert base == {
        "kind": "registry",
        "image": f"rocm/pytorch:{tag}",
        "digest": digest,
        "apt_sources": {"drop": ["rocm.list"]},
        "apt_lists_found": ["rocm.list"],
    }
    assert set(STANDIN_PACKAGES) <= set(packages) and "python3-sentencepiece" not in packages, sorted(packages)
    assert f"base {STACK}: {len(packages)} dpkg packages" in proc.stdout
    assert lock.apt[TARGET]["python3-sentencepiece"] == "0.2.2-1+b2"
    assert lock.python["llama31-qlora-debian-env"]["peft"].version == "0.21.2"
    held = lock.held["llama31-qlora-debian-env"]
    assert held.torch_version.startswith("2.14.1") and held.torch_version.endswith(TORCH_LOCAL)
    assert held.torch_hip is None and held.packages["torch"] == held.torch_version
    assert local_registry not in lockfile.dump(lock)


def test_rendered_dockerfile_names_the_upstream_by_digest_and_its_apt_sources(project, locked, standin, local_registry):
    matrix, _ = project
    tp = load_plan(matrix).targets[TARGET]
    assert not tp.unresolved, tp.unresolved
    text = tp.files["Dockerfile"].decode()
    assert f"ARG ROCMFORGE_BASE=rocm/pytorch:{standin[0]}@{standin[1]}" in text
    assert "FROM ${ROCMFORGE_BASE}" in text and local_registry not in text
    assert f"# apt sources (stacks.{STACK}.apt_sources): drop rocm.list" in text
    assert text.count("rm -f /etc/apt/sources.list.d/rocm.list") == 1  # the runtime stage's one apt step
    assert f"{CONDA_PY} -m venv --system-site-packages /opt/rocmforge/venv" in text


def test_build_names_the_dead_vendor_list_and_its_host(docker_client, tmp_path, locked, standin, mirror_env):
    """A lock made where the list answered, a build where it does not (here: the stack keeps the
    list): the build stops at its apt step naming the list and the host, and tags nothing."""
    matrix, state = _write_project(tmp_path, standin, {"keep": True})
    lock = locked[1].model_copy(update={"bases": dict(locked[1].bases)})
    lock.bases[STACK] = lock.bases[STACK].model_copy(update={"apt_sources": {"keep": True}})
    matrix.with_suffix(".lock").write_text(lockfile.dump(lock))
    tp = load_plan(matrix).targets[TARGET]
    assert not tp.unresolved, tp.unresolved
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", TARGET, env=mirror_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert "/etc/apt/sources.list.d/rocm.list" in proc.stderr and f"host {DEAD_HOST}" in proc.stderr, out
    assert f"stacks.{STACK}.apt_sources" in proc.stderr and "ROCMFORGE_DEBIAN_MIRROR" not in proc.stderr, out
    assert not docker_client.images.list(name=tp.content_tag.split(":")[0]), "a failed build left a tag"


def test_build_through_the_mirror_and_suites_pass(docker_client, project, locked, mirror_env, standin, local_registry):
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
        assert set(suites) >= {"workload", "linkage"}, suites
        assert suites["workload"]["status"] in ("passed", "not GPU-verified"), suites["workload"]
        assert not [n for n, s in suites.items() if s["status"] == "failed"], suites
        manifest = json.loads(next((state / "artifacts" / TARGET).glob("*manifest*.json")).read_text())
        assert manifest["base"]["apt_sources"] == {"drop": ["rocm.list"]}, manifest["base"]
        # The base's layers pass through normalisation untouched: the base pulled by digest is
        # stored once and shared, and the image's layers start with exactly its diff IDs.
        base_layers = docker_client.api.inspect_image(f"{local_registry}/rocm/pytorch@{standin[1]}")["RootFS"]["Layers"]
        assert image.attrs["RootFS"]["Layers"][: len(base_layers)] == base_layers
        # Every entry point a user types runs the venv's interpreter; the dead list is gone.
        probe = "import sys, transformers, peft; print(sys.prefix, transformers.__file__, peft.__file__)"
        out = docker_client.containers.run(
            image.id,
            [
                "bash",
                "-c",
                (
                    'set -e; for c in python pip torchrun accelerate; do p=$(command -v $c); echo "$c $p '
                    '$(head -c 200 $p | head -n 1)"; done; '
                    "test ! -e /etc/apt/sources.list.d/rocm.list && echo no-rocm-list; "
                    f"python -c '{probe}'; pwd"
                ),
            ],
            remove=True,
        ).decode()
        lines = out.splitlines()
        for cmd in ("python", "pip", "torchrun", "accelerate"):
            line = next(ln for ln in lines if ln.startswith(cmd + " "))
            assert line.split()[1] == f"/opt/rocmforge/venv/bin/{cmd}", out
            if cmd != "python":
                assert "#!/opt/rocmforge/venv/bin/python" in line, out
        assert "no-rocm-list" in lines and lines[-1] == "/var/lib/jenkins", out
        assert lines[-2].startswith("/opt/rocmforge/venv "), out
        # a no-cache rebuild (the base pulled through the mirror again) is the image just built
        args = ("--matrix", str(matrix), "--state-dir", str(state), "verify-repro", "--target", TARGET)
        proc = run_cli(*args, "--against-built", env=mirror_env)
        said = f"identical: the built image and its rebuild of {TARGET} gave {image.id}"
        assert proc.returncode == 0 and said in proc.stdout, proc.stdout + proc.stderr[-3000:]
        # The torch the base shipped is the torch the image has.
        out = docker_client.containers.run(
            image.id, ["/opt/rocmforge/venv/bin/python", "-c", "import torch; print(torch.__version__)"], remove=True
        )
        assert out.decode().strip() == locked[1].held["llama31-qlora-debian-env"].torch_version
    finally:
        for ref in (tp.content_tag, tp.readable_tag):
            try:
                docker_client.images.remove(ref)
            except Exception:  # not built
                pass
