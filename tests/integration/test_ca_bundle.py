"""--ca-bundle: HTTPS downloads work behind the intercepting proxy, and the bundle never reaches
the final image: not its bytes in any layer, not its path in any history entry or label.

Both ways a bundle is used are exercised from cold, whatever the engine already holds: each test
builds its own target (a uniquely named copy of hip-python in a copy of the matrix, with its own
tags and state dir), so nothing is "up to date" and the engine's other images are not touched.
- locked wheels: fetched on the host through the proxy with the bundle (build.py);
- an unlocked environment: the template's builder-stage branch (`COPY build-ca/`, pip reads the
  bundle inside the build)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml

from rocmforge.define.matrix import load_matrix
from rocmforge.render.plan import make_plan
from rocmforge.resolve import lockfile
from tests.conftest import copy_project, run_cli

pytestmark = pytest.mark.docker
HOST_BUNDLE = Path(
    os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
)


def _unique_cert(tmp: Path) -> bytes:
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN=rocmforge-ca-test-{uuid.uuid4().hex}",
            "-keyout",
            str(tmp / "k.pem"),
            "-out",
            str(tmp / "c.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return (tmp / "c.pem").read_bytes()


def _image_blobs(client, ref: str):
    """(name, bytes) for every file in every layer, plus the config and manifest."""
    raw = b"".join(client.images.get(ref).save(named=True))
    with tarfile.open(fileobj=io.BytesIO(raw)) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for m in layer.getmembers():
                        yield f"{member.name}:{m.name}", m.name.encode()
                        if m.isfile():
                            yield f"{member.name}:{m.name}", layer.extractfile(m).read()
            else:
                yield member.name, data


@pytest.fixture
def bundle(tmp_path):
    assert HOST_BUNDLE.is_file(), f"no host CA bundle at {HOST_BUNDLE}"
    marker = _unique_cert(tmp_path)
    path = tmp_path / "proxy-bundle-under-test.pem"
    path.write_bytes(HOST_BUNDLE.read_bytes() + marker)
    return path, marker


def _own_target(tmp_path, *, locked: bool):
    """A copy of the project whose matrix adds `ca-test-<id>`: hip-python under another name (own
    tags: rocmforge/ca-test-<id>:...), its lock entries copied; without its Python lock when
    locked is False."""
    matrix = copy_project(tmp_path / "project")
    name = f"ca-test-{uuid.uuid4().hex[:10]}"
    data = yaml.safe_load(matrix.read_text())
    data["targets"][name] = {**data["targets"]["hip-python"], "description": "CA bundle test"}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock_path = matrix.parent / "matrix.lock"
    lock = lockfile.load(lock_path)
    for key in [k for k in lock.apt if k == "hip-python" or k.startswith("hip-python/")]:
        lock.apt[name + key[len("hip-python") :]] = lock.apt[key]
    if not locked:
        lock.python.pop("numpy-env")
    lock_path.write_text(lockfile.dump(lock))
    plan = make_plan(load_matrix(matrix), matrix.parent, lockfile.load(lock_path))
    return matrix, name, plan.targets[name]


@pytest.fixture
def own_images(docker_client):
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:
            pass


def _assert_bundle_absent(client, ref: str, bundle: Path, marker: bytes) -> None:
    # One base64 line from the middle of the marker certificate identifies its bytes anywhere.
    needle = marker.splitlines()[5]
    path_needles = [str(bundle).encode(), bundle.name.encode()]
    for name, data in _image_blobs(client, ref):
        assert needle not in data, f"CA bundle bytes found in the final image: {name}"
        for p in path_needles:
            assert p not in data, f"CA bundle path found in the final image: {name}"
    history = json.dumps(client.api.history(ref)).encode()
    labels = json.dumps(client.images.get(ref).labels).encode()
    for p in path_needles + [needle]:
        assert p not in history and p not in labels


def test_ca_bundle_fetches_locked_wheels_on_the_host(docker_client, hip_runtime_built, bundle, own_images, tmp_path):
    path, marker = bundle
    matrix, name, tp = _own_target(tmp_path, locked=True)
    own_images += [tp.content_tag, tp.readable_tag]
    assert not tp.unresolved, tp.unresolved
    state = tmp_path / "state"
    proc = run_cli(
        "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name, "--ca-bundle", str(path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert f"building {name}" in proc.stderr, "nothing was built: the test did not take the cold path"
    assert list((state / "work" / "cache" / "sha256").iterdir()), "no wheel was fetched"
    out = docker_client.containers.run(
        tp.content_tag, ["python3", "-c", "import numpy; print(numpy.__version__)"], remove=True
    )
    assert out.decode().strip() == "2.3.5"
    _assert_bundle_absent(docker_client, tp.content_tag, path, marker)


def test_ca_bundle_read_in_the_builder_stage_only(docker_client, hip_runtime_built, bundle, own_images, tmp_path):
    from rocmforge.assemble import engine

    path, marker = bundle
    _matrix, name, tp = _own_target(tmp_path, locked=False)
    dockerfile = tp.files["Dockerfile"].decode()
    # The template's one branch that hands the bundle to a builder stage.
    assert "COPY build-ca/ /tmp/build-ca/" in dockerfile and "PIP_CERT=/tmp/build-ca/ca.pem" in dockerfile
    final_stage = dockerfile[dockerfile.rindex("\nFROM ") :]
    assert "build-ca" not in final_stage, "the final stage must not read the CA bundle"
    ref = f"rocmforge-test/{name}:raw"
    own_images.append(ref)
    # build.py refuses an unlocked target; the engine layer builds it so the branch really runs.
    engine.build(
        docker_client, tp, log_path=tmp_path / "build.log", ca_bundle=path, progress=lambda step: None, tag=ref
    )
    log = (tmp_path / "build.log").read_text()
    assert "numpy-2.3.5" in log, log[-3000:]  # downloaded inside the build, through the proxy
    out = docker_client.containers.run(ref, ["python3", "-c", "import numpy; print(numpy.__version__)"], remove=True)
    assert out.decode().strip() == "2.3.5"
    _assert_bundle_absent(docker_client, ref, path, marker)
