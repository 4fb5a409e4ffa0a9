"""Bit-identical rebuilds on the real engine: two classic-builder builds of the same Dockerfile,
normalised, get the same image ID; injected nondeterminism is found and named."""

from __future__ import annotations

import contextlib
import time

import pytest

from rocmforge.assemble.image.diff import describe_difference, diff_images
from rocmforge.assemble.image.normalise import normalise_image
from rocmforge.define.matrix import load_matrix
from rocmforge.resolve import bootstrap
from tests.conftest import ROOT, build_image

pytestmark = pytest.mark.docker

EPOCH = 1764547200  # 2025-12-01T00:00:00Z
STACK = "debian13-rocm5.7"
JQ = "1.7.1-6+deb13u4"  # `apt-cache policy jq` in a container of the trixie base


def _quiet(_line: str) -> None:
    pass


@pytest.fixture(scope="module")
def created(docker_client):
    """Image IDs the tests made; removed at the end (only those that did not exist before)."""
    import docker.errors

    before = {img.id for img in docker_client.images.list(all=True)}
    ids: list[str] = []
    yield ids
    for image_id in reversed(ids):
        if image_id not in before:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(image_id, force=True)


@pytest.fixture(scope="module")
def base(docker_client, tmp_path_factory, created):
    """The bootstrapped base: the one present, else bootstrapped here (and removed afterwards)."""
    tags = [t for img in docker_client.images.list(name=f"rocmforge/base-{STACK}") for t in img.tags if ":recipe-" in t]
    if tags:
        return docker_client.images.get(sorted(tags)[0])
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    ref = bootstrap.ensure_base(docker_client, STACK, stack, tmp_path_factory.mktemp("bootstrap"), _quiet)
    img = docker_client.images.get(ref)
    created.append(img.id)
    return img


def build(client, dockerfile: str, created: list[str]) -> str:
    """A classic-builder build without cache; returns the image ID."""
    image_id = build_image(client, dockerfile, nocache=True)
    created.append(image_id)
    return image_id


def build_twice(client, dockerfile: str, created: list[str]) -> list[str]:
    first = build(client, dockerfile, created)
    time.sleep(1.5)  # so that every time stamp differs
    return [first, build(client, dockerfile, created)]


def normalise(client, ref: str, created: list[str], workdir, epoch: int = EPOCH) -> str:
    image_id = normalise_image(client, ref, epoch=epoch, tags=[], workdir=workdir, log=_quiet).image_id
    created.append(image_id)
    assert list(workdir.iterdir()) == []  # the rewritten layers are gone
    return image_id


def diff_ids(client, ref: str) -> list[str]:
    return client.api.inspect_image(ref)["RootFS"]["Layers"]


def test_two_builds_of_an_apt_install_normalise_to_one_image(docker_client, base, created, tmp_path):
    tag = base.tags[0]
    dockerfile = (
        f"FROM {tag}\n"
        "ARG SOURCE_DATE_EPOCH=1764547200\n"
        f"RUN apt-get update && apt-get install -y --no-install-recommends jq={JQ}\n"
    )
    raw = build_twice(docker_client, dockerfile, created)
    assert raw[0] != raw[1]
    assert diff_ids(docker_client, raw[0])[1] != diff_ids(docker_client, raw[1])[1]
    first = diff_images(docker_client, raw[0], raw[1])
    assert first["where"] == "layer" and first["index"] == 1 and "jq=" in first["created_by"]

    norm = [normalise(docker_client, r, created, tmp_path) for r in raw]
    assert norm[0] == norm[1]
    assert diff_ids(docker_client, norm[0]) == diff_ids(docker_client, norm[1])
    assert diff_ids(docker_client, norm[0])[0] == diff_ids(docker_client, tag)[0]  # base layer kept as is
    assert diff_images(docker_client, norm[0], norm[1]) is None

    attrs = docker_client.api.inspect_image(norm[0])
    assert attrs["Created"] == "2025-12-01T00:00:00Z" and attrs["Container"] == ""
    assert attrs["Config"]["Labels"] == base.attrs["Config"]["Labels"]
    script = (
        "jq --version; ls -A /var/lib/apt/lists; ls -A /var/log/apt; "
        "test -e /var/log/dpkg.log || echo no-dpkg-log; "
        "stat -c %Y /var/lib/dpkg/status /usr/bin/jq /usr/lib/x86_64-linux-gnu/libonig.so.5.4.0"
    )
    out = docker_client.containers.run(norm[0], ["bash", "-c", script], remove=True).decode().split()
    assert out[:4] == ["jq-1.7", "lock", "partial", "no-dpkg-log"]
    assert int(out[4]) == EPOCH  # written by the build: clamped to the epoch
    assert int(out[5]) == EPOCH  # jq's .deb is dated after the epoch: clamped
    assert int(out[6]) < EPOCH  # libonig's .deb is older: keeps its own time


def test_injected_nondeterminism_is_named(docker_client, base, created, tmp_path):
    dockerfile = f"FROM {base.tags[0]}\nRUN date +%s%N > /opt/stamp\n"
    raw = build_twice(docker_client, dockerfile, created)
    norm = [normalise(docker_client, r, created, tmp_path) for r in raw]
    assert norm[0] != norm[1]
    diff = diff_images(docker_client, norm[0], norm[1])
    assert diff["where"] == "layer" and diff["index"] == 1
    assert (diff["path"], diff["field"]) == ("/opt/stamp", "content")
    assert "date +%s%N > /opt/stamp" in diff["created_by"]
    assert len(diff["a"]) == len(diff["b"]) == 64 and diff["a"] != diff["b"]
    line = describe_difference(diff)
    assert line.startswith("layer 1 (RUN date +%s%N > /opt/stamp): /opt/stamp content differs (sha256 ")


def test_bootstrapped_base_round_trips(docker_client, base, tmp_path):
    # Its layer was written by GNU tar in the canonical form and its config dated 1970: nothing changes.
    assert (
        normalise_image(docker_client, base.tags[0], epoch=0, tags=[], workdir=tmp_path, log=_quiet).image_id == base.id
    )
    assert list(tmp_path.iterdir()) == []
