"""The other-engines harness (tests/engine_host.py): each engine comes up in its container, the host's
docker SDK talks to it over the bind-mounted socket, a tiny docker-archive loads and is found by its
tag, and a registry the host serves on the bridge gateway is reachable from the engine."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import urllib.request
import uuid

import pytest

from tests import engine_host
from tests.engine_host import PREFIX

pytestmark = pytest.mark.docker

RUN = uuid.uuid4().hex[:8]
CREATED = "1970-01-01T00:00:00Z"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tiny_layer() -> bytes:
    """One small file, every header field fixed: the same bytes every run."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        data = b"rocmforge engine harness\n"
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tiny_config(layer: bytes) -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": {"Cmd": ["/hello.txt"], "Labels": {"io.rocmforge.enginetest.run": RUN}},
        "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        "history": [{"created": CREATED, "created_by": "engine harness test"}],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def tiny_archive(tag: str) -> tuple[bytes, str]:
    """(docker-archive bytes, config digest) of a one-layer image tagged TAG."""
    layer = tiny_layer()
    config = tiny_config(layer)
    config_digest = _sha(config)
    layer_path = f"{_sha(layer).split(':')[1]}/layer.tar"
    manifest = json.dumps(
        [{"Config": f"{config_digest.split(':')[1]}.json", "RepoTags": [tag], "Layers": [layer_path]}]
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (
            (f"{config_digest.split(':')[1]}.json", config),
            (layer_path, layer),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), config_digest


def push_tiny(registry: str, repository: str, tag: str) -> tuple[str, str]:
    """Push the tiny image over the registry API (plain HTTP); returns (manifest digest, config digest)."""
    layer = tiny_layer()
    blob = gzip.compress(layer, mtime=0)
    config = tiny_config(layer)
    for data in (blob, config):
        start = urllib.request.Request(f"http://{registry}/v2/{repository}/blobs/uploads/", method="POST")
        with urllib.request.urlopen(start, timeout=30) as resp:
            location = resp.headers["Location"]
        if location.startswith("/"):
            location = f"http://{registry}{location}"
        sep = "&" if "?" in location else "?"
        put = urllib.request.Request(
            f"{location}{sep}digest={_sha(data)}",
            data=data,
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(put, timeout=30) as resp:
            assert resp.status == 201, resp.status
    media = "application/vnd.docker.distribution.manifest.v2+json"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _sha(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(blob),
                    "digest": _sha(blob),
                }
            ],
        }
    ).encode()
    put = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        data=manifest,
        method="PUT",
        headers={"Content-Type": media},
    )
    with urllib.request.urlopen(put, timeout=30) as resp:
        assert resp.status == 201, resp.status
        return resp.headers["Docker-Content-Digest"], _sha(config)


@pytest.fixture(scope="module")
def sid_archive(docker_client, tmp_path_factory):
    """(tag, path of a `docker save` of it) of the harness's own sid base, from the host engine."""
    tag = engine_host.ensure_base(docker_client, tmp_path_factory.mktemp("sid-bootstrap"))
    path = tmp_path_factory.mktemp("sid-archive") / "sid.tar"
    with open(path, "wb") as f:
        for chunk in docker_client.images.get(tag).save(named=True):
            f.write(chunk)
    return tag, path


def test_engine_comes_up(other_engine):
    client = other_engine.client()
    try:
        assert client.ping()
        version = client.version()
        info = client.info()
    finally:
        client.close()
    print(other_engine.describe())
    print(f"{other_engine.name}: Driver={info.get('Driver')} DriverStatus={info.get('DriverStatus')}")
    assert version["Version"] == other_engine.server_version
    assert other_engine.server_version.split(".")[0] == engine_host.ENGINES[other_engine.name].major, version
    assert other_engine.packages, "the installed package versions are recorded"
    if other_engine.name == "docker28-overlay2":
        assert other_engine.driver == "overlay2" and not other_engine.containerd_snapshotter
    elif other_engine.name == "docker28-containerd":
        assert other_engine.containerd_snapshotter, info.get("DriverStatus")
    else:
        assert other_engine.driver == "overlay", info.get("Driver")
    assert other_engine.gateway and other_engine.registry_port
    assert other_engine.docker_host.startswith("unix:///")


def test_load_tiny_archive(other_engine):
    tag = f"{PREFIX}/tiny:{RUN}"
    data, config_digest = tiny_archive(tag)
    client = other_engine.client()
    try:
        client.images.load(data)
        image = client.images.get(tag)
        seen = image.attrs
    finally:
        client.close()
    print(
        f"{other_engine.name}: loaded {tag}: Id {image.id}, config digest {config_digest}, "
        f"tags {image.tags}, RepoDigests {seen.get('RepoDigests')}"
    )
    assert tag in image.tags or f"localhost/{tag}" in image.tags, image.tags
    if other_engine.name == "docker28-overlay2":
        assert image.id == config_digest


def test_pull_from_host_registry(other_engine):
    """A registry on the host's bridge address is reachable from the engine and treated as insecure."""
    from tests import local_registry

    try:
        with local_registry.serve(host=other_engine.gateway, port=other_engine.registry_port) as registry:
            assert registry == other_engine.registry_address
            repository = f"{PREFIX}/pulled"
            manifest_digest, config_digest = push_tiny(registry, repository, RUN)
            client = other_engine.client()
            try:
                image = client.images.pull(f"{registry}/{repository}", tag=RUN)
                found = client.images.get(f"{registry}/{repository}:{RUN}")
            finally:
                client.close()
    except local_registry.RegistryUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI requires it)")
        pytest.skip(str(exc))
    print(
        f"{other_engine.name}: pulled {registry}/{repository}:{RUN}: Id {found.id}, manifest {manifest_digest}, "
        f"config {config_digest}, RepoDigests {found.attrs.get('RepoDigests')}"
    )
    assert image.id == found.id
    assert any(d.endswith(manifest_digest) for d in found.attrs.get("RepoDigests") or []), found.attrs


def test_runs_containers_and_builds(other_engine, sid_archive):
    """What the project's builds need from an engine: a container runs (cgroups writable inside the
    engine's container), and a classic build's RUN step reaches the Debian archive (the engine's
    own network: iptables for Docker, nftables for podman's netavark)."""
    tag, path = sid_archive
    client = other_engine.client()
    try:
        with open(path, "rb") as f:
            client.images.load(f.read())
        out = client.containers.run(tag, ["sh", "-c", "cat /etc/debian_version; ulimit -n"], remove=True).decode()
        print(f"{other_engine.name}: container says {out.split()}")
        dockerfile = f"FROM {tag}\nRUN {engine_host.APT} update >/dev/null && echo apt-reached-the-archive\n"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile.encode()))
        buf.seek(0)
        log = []
        for chunk in client.api.build(
            fileobj=buf,
            custom_context=True,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            tag=f"{PREFIX}/probe:{RUN}",
        ):
            log.append(chunk.get("stream", "") or chunk.get("error", ""))
            assert "error" not in chunk, "".join(log)
    finally:
        client.close()
    assert out.split()[0].endswith("/sid"), out  # sid's debian_version reads NEXT/sid
    assert "apt-reached-the-archive" in "".join(log), "".join(log)
