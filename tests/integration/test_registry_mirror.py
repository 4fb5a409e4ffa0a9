"""resolve/pull of a registry base through a pull-through mirror, against a real registry (Debian's
docker-registry on a private 127.0.0.1 port) holding a small stand-in pushed under the UPSTREAM name
rocm/pytorch (no registry is reachable from here, so the mirror is the only way such a base arrives)."""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest

from rocmforge.define.matrix import load_matrix
from rocmforge.host import registrybase as reg
from rocmforge.resolve import bases, bootstrap
from tests.conftest import ROOT, build_image
from tests.local_registry import free_port

pytestmark = pytest.mark.docker

STACK = "debian13-rocm5.7"
RUN = uuid.uuid4().hex[:8]  # every tag these tests create contains it, for the clean-up
TAG = f"standin-{RUN}"
V2 = "application/vnd.docker.distribution.manifest.v2+json"


def _forget(client, image_id: str) -> None:
    import docker.errors

    try:
        client.images.remove(image_id, force=True)
    except docker.errors.ImageNotFound:
        pass


@pytest.fixture(scope="module")
def standin(docker_client, local_registry, tmp_path_factory):
    """(image ID, pushed digest) of a tiny image pushed as LOCAL_REGISTRY/rocm/pytorch:standin-RUN."""
    import docker.errors

    created: list[str] = []
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    base = bases.bootstrap_ref(STACK, stack)
    try:
        docker_client.images.get(base)
    except docker.errors.ImageNotFound:
        base = bootstrap.ensure_base(
            docker_client, STACK, stack, tmp_path_factory.mktemp("bootstrap"), lambda *a, **k: None
        )
        created.append(docker_client.images.get(base).id)
    image_id = build_image(docker_client, f"FROM {base}\nLABEL io.rocmforge.test.standin={RUN}\n")
    created.insert(0, image_id)
    repository = f"{local_registry}/rocm/pytorch"
    try:
        docker_client.api.tag(image_id, repository, TAG)
        digest = None
        for chunk in docker_client.api.push(repository, tag=TAG, stream=True, decode=True):
            assert "error" not in chunk, chunk
            digest = (chunk.get("aux") or {}).get("Digest") or digest
        assert digest and digest.startswith("sha256:")
        # The tag stays: untagging the last tag of a repository also drops its RepoDigests entry.
        yield image_id, digest
    finally:
        for doomed in created:
            _forget(docker_client, doomed)
        for img in docker_client.images.list():
            refs = (img.attrs.get("RepoTags") or []) + (img.attrs.get("RepoDigests") or [])
            if any(TAG in r for r in refs):
                _forget(docker_client, img.id)


class _NoPull:
    """An engine that must not be asked to pull."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def find(self, ref):
        return self.engine.find(ref)

    def pull(self, *args, **kwargs):
        raise AssertionError(f"pull called: {args} {kwargs}")


def test_resolve_through_mirror(local_registry, standin):
    _, digest = standin
    got = reg.resolve("rocm/pytorch", TAG, mirror=local_registry)
    assert got == reg.Resolved(digest, None, V2, local_registry)
    # The same through the environment setting and by digest.
    mirror = reg.mirror_from_env({reg.MIRROR_ENV: local_registry})
    assert reg.resolve("docker.io/rocm/pytorch", digest, mirror=mirror).digest == digest


def test_pull_skipped_when_present(docker_client, local_registry, standin):
    image_id, digest = standin
    # The push recorded LOCAL_REGISTRY/rocm/pytorch@digest on the engine: nothing to download.
    ref = reg.pull(_NoPull(docker_client), "rocm/pytorch", digest, mirror=local_registry)
    assert ref == f"{local_registry}/rocm/pytorch@{digest}"
    assert docker_client.images.get(ref).id == image_id


def test_pull_through_mirror_then_build_from_it(docker_client, local_registry, standin):
    image_id, digest = standin
    _forget(docker_client, image_id)  # as on a machine that never had it

    ref = reg.pull(docker_client, "rocm/pytorch", digest, mirror=local_registry)

    assert ref == f"{local_registry}/rocm/pytorch@{digest}"
    img = docker_client.images.get(ref)
    assert img.id == image_id and ref in img.attrs["RepoDigests"]
    # The design point: FROM the mirror reference resolves locally in a classic build with pull=False...
    assert build_image(docker_client, f"FROM {ref}\n") == image_id
    # ...while the upstream name at the same digest is not known locally (the engine records only
    # the name it pulled), so a build FROM it would go to Docker Hub.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"FROM rocm/pytorch@{digest}\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    chunks = list(docker_client.api.build(fileobj=buf, custom_context=True, pull=False, rm=True, decode=True))
    assert any("error" in c for c in chunks), chunks


def test_mirror_on_unused_port(docker_client, standin):
    _, digest = standin
    mirror = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", TAG, mirror=mirror, timeout=10)
    assert mirror in str(err.value) and "connection refused" in str(err.value)
    with pytest.raises(reg.RegistryError) as err:
        reg.pull(docker_client, "rocm/pytorch", digest, mirror=mirror)
    assert mirror in str(err.value)
