"""The containerd content store read as files: a manifest, config and layer blobs laid out as
containerd writes them (blobs/sha256/<hex>), each trusted only for what its digest says."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from rocmforge.host.contentstore import CONTENT, ContentStore, candidates

GZ = "application/vnd.docker.image.rootfs.diff.tar.gzip"
RAW = "application/vnd.oci.image.layer.v1.tar"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _put(blobs: Path, data: bytes) -> str:
    digest = _sha(data)
    (blobs / digest[7:]).write_bytes(data)
    return digest


def _image(
    root: Path, layers: list[tuple[bytes, str]], manifest_type: str = "application/vnd.oci.image.manifest.v1+json"
):
    """(image ID, diff IDs): each layer (its tar, media type) stored as that type says."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    descs, diff_ids = [], []
    for tar, media in layers:
        blob = gzip.compress(tar[: len(tar) // 2]) + gzip.compress(tar[len(tar) // 2 :]) if media == GZ else tar
        descs.append({"mediaType": media, "digest": _put(blobs, blob), "size": len(blob)})
        diff_ids.append(_sha(tar))
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _put(blobs, config),
                "size": len(config),
            },
            "layers": descs,
        }
    ).encode()
    return _put(blobs, manifest), diff_ids


def _read(layer) -> bytes:
    return b"".join(layer.chunks())


def test_layers_come_back_as_their_diff_ids_say(tmp_path):
    engine_root = tmp_path / "docker"
    root = candidates(engine_root)[0]
    big = _tar({"opt/big": bytes(range(256)) * 5000, "etc/x": b"x"})
    image_id, diff_ids = _image(root, [(big, GZ), (_tar({"a": b"a"}), RAW)])
    store = ContentStore.of(engine_root, image_id)
    assert store is not None and root == engine_root / "containerd" / "daemon" / CONTENT
    assert json.loads(store.config(image_id))["rootfs"]["diff_ids"] == diff_ids
    gz, raw = store.layer(diff_ids, 0), store.layer(diff_ids, 1)
    assert gz.tar_size is None and raw.tar_size == raw.size  # a gzip blob's tar length is known at its end
    for layer, diff_id in ((gz, diff_ids[0]), (raw, diff_ids[1])):
        assert _sha(_read(layer)) == diff_id  # two gzip members read as one stream


def test_nothing_is_taken_that_is_not_what_its_digest_says(tmp_path):
    engine_root = tmp_path / "docker"
    root = candidates(engine_root)[0]
    image_id, diff_ids = _image(root, [(_tar({"a": b"a"}), GZ)])
    assert ContentStore.of(tmp_path / "elsewhere", image_id) is None  # not this engine's store
    store = ContentStore.of(engine_root, image_id)
    blob = (
        root
        / "blobs"
        / "sha256"
        / json.loads((root / "blobs" / "sha256" / image_id[7:]).read_bytes())["layers"][0]["digest"][7:]
    )
    blob.write_bytes(blob.read_bytes() + b"\0")  # its size no longer the manifest's
    assert store.config(image_id) is not None and store.layer(diff_ids, 0) is None
    assert store.layer(diff_ids + ["sha256:" + "0" * 64], 0) is None  # a config naming other layers
    manifest = root / "blobs" / "sha256" / image_id[7:]
    manifest.write_bytes(manifest.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
    assert store.config(image_id) is None and ContentStore.of(engine_root, image_id) is None  # altered


def test_a_multi_platform_image_is_left_to_docker_save(tmp_path):
    engine_root = tmp_path / "docker"
    image_id, _ = _image(
        candidates(engine_root)[0], [(_tar({"a": b"a"}), GZ)], manifest_type="application/vnd.oci.image.index.v1+json"
    )
    assert ContentStore.of(engine_root, image_id).config(image_id) is None
