"""podman's overlay storage read without podman: a storage tree laid out as containers/storage
writes it (layers.json, tar-split records, diff folders, the config as an image's big-data item),
made here from real tars, is read back byte for byte; anything that is not what it claims to be
is None, never a guess."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from rocmforge.host.podmanstore import LAYER_TYPE, PodmanStore
from tests.unit.test_contentstore import _sha as sha
from tests.unit.test_contentstore import _tar as layer_tar


def tar_split(raw: bytes) -> bytes:
    """tar-split's records of a tar: its raw bytes (headers, padding, the end) as segments, each
    file's content as an entry that names it."""
    lines, done = [], 0
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for m in tar.getmembers():
            lines.append({"type": 2, "payload": base64.b64encode(raw[done : m.offset_data]).decode()})
            lines.append({"type": 1, "name": m.name, "size": m.size})
            done = m.offset_data + m.size
    lines.append({"type": 2, "payload": base64.b64encode(raw[done:]).decode()})
    return gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode())


def write_storage(root: Path, layers: list[dict[str, bytes]]) -> tuple[str, list[str]]:
    """A storage with one image of these layers; returns (image ID, diff IDs)."""
    entries, parent, diff_ids = [], None, []
    for i, files in enumerate(layers):
        raw, layer_id = layer_tar(files), f"{i:064x}"
        diff = root / "overlay" / layer_id / "diff"
        for name, data in files.items():
            (diff / name).parent.mkdir(parents=True, exist_ok=True)
            (diff / name).write_bytes(data)
        (root / "overlay-layers").mkdir(parents=True, exist_ok=True)
        (root / "overlay-layers" / f"{layer_id}.tar-split.gz").write_bytes(tar_split(raw))
        entries.append(
            {"id": layer_id, "diff-digest": sha(raw), "diff-size": len(raw), **({"parent": parent} if parent else {})}
        )
        diff_ids.append(sha(raw))
        parent = layer_id
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(entries))
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    image_id = sha(config)
    folder = root / "overlay-images" / image_id[7:]
    folder.mkdir(parents=True)
    (folder / ("=" + base64.b64encode(image_id.encode()).decode())).write_bytes(config)
    (root / "overlay-images" / "images.json").write_text(json.dumps([{"id": image_id[7:], "layer": parent}]))
    return image_id, diff_ids


LAYERS = [{"etc/os-release": b"ID=debian\n", "usr/bin/tool": b"\x7fELF" * 300}, {"opt/rocmforge/marker": b"added\n"}]


@pytest.fixture
def storage(tmp_path):
    return tmp_path, *write_storage(tmp_path, LAYERS)


def test_each_layer_is_rebuilt_byte_for_byte_and_described(storage):
    root, image_id, diff_ids = storage
    store = PodmanStore.of(root, "overlay")
    assert store is not None and store.describe() == "podman storage"
    assert sha(store.config(image_id)) == image_id
    for i, diff_id in enumerate(diff_ids):
        layer = store.layer(diff_ids, i)
        data = b"".join(layer.chunks())
        assert (sha(data), len(data)) == (diff_id, layer.size)
    assert [d["digest"] for d in store.manifest["layers"]] == diff_ids
    assert {d["mediaType"] for d in store.manifest["layers"]} == {LAYER_TYPE}


def test_another_driver_or_no_storage_is_none(tmp_path, storage):
    root, _, _ = storage
    assert PodmanStore.of(root, "vfs") is None
    assert PodmanStore.of(None, "overlay") is None
    assert PodmanStore.of(tmp_path / "nothing", "overlay") is None


def test_what_is_not_what_it_claims_is_none(storage):
    root, image_id, diff_ids = storage
    store = PodmanStore.of(root, "overlay")
    assert store.config("sha256:" + "0" * 64) is None  # no such image
    cfg = next((root / "overlay-images" / image_id[7:]).iterdir())
    cfg.write_bytes(cfg.read_bytes() + b" ")  # a config that is not its digest
    assert store.config(image_id) is None


def test_a_chain_that_is_not_the_configs_layers_is_none(storage):
    root, image_id, diff_ids = storage
    layers = json.loads((root / "overlay-layers" / "layers.json").read_text())
    layers[0]["diff-digest"] = "sha256:" + "1" * 64
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(layers))
    assert PodmanStore.of(root, "overlay").config(image_id) is None


def test_a_layer_without_records_or_of_another_diff_id_is_none(storage):
    root, image_id, diff_ids = storage
    store = PodmanStore.of(root, "overlay")
    assert store.config(image_id) is not None
    assert store.layer(diff_ids[:1] + ["sha256:" + "2" * 64], 1) is None
    (root / "overlay-layers" / f"{1:064x}.tar-split.gz").unlink()
    assert store.layer(diff_ids, 1) is None
