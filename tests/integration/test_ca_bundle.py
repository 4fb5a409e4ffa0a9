"""--ca-bundle: HTTPS downloads work behind the intercepting proxy, and the bundle never reaches
the final image: not its bytes in any layer, not its path in any history entry or label."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from rocmforge.plan import load_plan

pytestmark = pytest.mark.docker
HOST_BUNDLE = Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")


def _unique_cert(tmp: Path) -> bytes:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN=rocmforge-ca-test-{uuid.uuid4().hex}", "-keyout", str(tmp / "k.pem"),
                    "-out", str(tmp / "c.pem")], check=True, capture_output=True)
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


def test_ca_bundle_used_in_builder_only(docker_client, session_images, tmp_path):
    assert HOST_BUNDLE.is_file(), f"no host CA bundle at {HOST_BUNDLE}"
    marker_cert = _unique_cert(tmp_path)
    bundle = tmp_path / "proxy-bundle-under-test.pem"
    bundle.write_bytes(HOST_BUNDLE.read_bytes() + marker_cert)
    # A fresh state dir: the locked wheels must really be downloaded (on the host, through the proxy).
    proc = run_cli("--state-dir", str(tmp_path / "state"), "build", "--target", "hip-python", "--ca-bundle", str(bundle))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert list((tmp_path / "state" / "work" / "cache" / "sha256").iterdir()), "no wheel was fetched"

    ref = load_plan(ROOT / "matrix.yaml").targets["hip-python"].content_tag
    rc = docker_client.containers.run(ref, ["python3", "-c", "import numpy; print(numpy.__version__)"], remove=True)
    assert rc.decode().strip() == "2.3.5"

    # One base64 line from the middle of the marker certificate identifies its bytes anywhere.
    needle = marker_cert.splitlines()[5]
    path_needles = [str(bundle).encode(), bundle.name.encode()]
    for name, data in _image_blobs(docker_client, ref):
        assert needle not in data, f"CA bundle bytes found in the final image: {name}"
        for p in path_needles:
            assert p not in data, f"CA bundle path found in the final image: {name}"
    history = json.dumps(docker_client.api.history(ref)).encode()
    labels = json.dumps(docker_client.images.get(ref).labels).encode()
    for p in path_needles + [needle]:
        assert p not in history and p not in labels
