"""Reading the layers a build added from the engine's own store gives, byte for byte, what
`docker save` gives: each layer hashes to its diff ID, and the normalised image is the same
whichever way its layers were read. The layer holds what tar-split must get right: a whiteout, an
opaque directory, hard links, symlinks, an empty file, a file larger than one read."""

from __future__ import annotations

import hashlib

import pytest

from rocmforge.assemble.image.normalise import normalise_image
from rocmforge.define.matrix import load_matrix
from rocmforge.host.layerstore import LayerStore
from rocmforge.resolve import bootstrap
from tests.conftest import ROOT, build_image

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"
STEPS = (
    "RUN rm /etc/issue && rm -rf /etc/cron.daily && mkdir -p /etc/cron.daily && touch /etc/cron.daily/new "
    "&& head -c 3000000 /dev/urandom > /opt/big && ln /opt/big /opt/big-link && ln -s big /opt/big-sym "
    "&& touch /opt/empty && mkdir -p '/opt/a dir/with ünïcode' && echo x > '/opt/a dir/with ünïcode/f'"
)


@pytest.fixture(scope="module")
def image(docker_client, tmp_path_factory):
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    base = bootstrap.ensure_base(docker_client, STACK, stack, tmp_path_factory.mktemp("work"), lambda msg: None)
    image_id = build_image(docker_client, f"FROM {base}\n{STEPS}\n")
    yield base, image_id
    docker_client.images.remove(image_id, force=True)


def test_store_layers_hash_to_their_diff_ids(docker_client, image):
    _, image_id = image
    store = docker_client.layer_reader(image_id)
    if not isinstance(store, LayerStore):
        pytest.skip(
            "the engine's store is not readable here (remote engine or another storage driver): "
            "normalisation falls back to docker save, covered by test_repro"
        )
    diff_ids = docker_client.api.inspect_image(image_id)["RootFS"]["Layers"]
    assert store.config(image_id) is not None
    for i, diff_id in enumerate(diff_ids):
        layer = store.layer(diff_ids, i)
        h, n = hashlib.sha256(), 0
        for chunk in layer.chunks():
            h.update(chunk)
            n += len(chunk)
        assert ("sha256:" + h.hexdigest(), n) == (diff_id, layer.size)
    assert store.layer(diff_ids[:1] + ["sha256:" + "0" * 64], 1) is None  # not in the store: None, no guess


def test_store_and_docker_save_normalise_alike(docker_client, image, tmp_path, monkeypatch):
    base, image_id = image
    via_store = normalise_image(
        docker_client, image_id, epoch=0, tags=[], workdir=tmp_path, base_ref=base, log=lambda msg: None
    ).image_id
    docker_client.images.remove(via_store)
    monkeypatch.setattr(type(docker_client.engine), "layer_reader", lambda self, image_id: None)
    lines: list[str] = []
    via_save = normalise_image(
        docker_client, image_id, epoch=0, tags=[], workdir=tmp_path, base_ref=base, log=lines.append
    ).image_id
    try:
        assert via_save == via_store
        assert any("from the docker save" in line for line in lines)
    finally:
        docker_client.images.remove(via_save)


def test_the_lower_index_is_kept_in_the_users_cache_for_every_state_folder(docker_client, image, tmp_path, monkeypatch):
    """The index of the base's files is keyed by the base's chain ID, so it lives in the user's cache:
    a second checkout or --state-dir (another workdir) reads only what the build added."""
    base, image_id = image
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for folder in ("first-state", "second-state"):
        lines: list[str] = []
        made = normalise_image(
            docker_client, image_id, epoch=0, tags=[], workdir=tmp_path / folder, base_ref=base, log=lines.append
        ).image_id
        docker_client.images.remove(made)
        # logged only when the base's layers were read to build the index
        built_index = [ln for ln in lines if "lower index of" in ln]
        if folder == "first-state":
            assert built_index and str(cache / "rocmforge" / "lower-index") in built_index[0], lines
        else:
            assert built_index == [], lines
        assert not (tmp_path / folder / "lower-index").exists()
    assert list((cache / "rocmforge" / "lower-index").glob("*.sqlite"))
