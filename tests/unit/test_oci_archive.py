"""OCI image layouts (`docker save` with the containerd image store) normalised without an engine:
the same image as its docker-archive, whether its layer blobs are gzip, zstd or plain tars, with
or without manifest.json, in any member order; bad blobs are refused with one clear error."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import random
import sys
import tarfile

import pytest

from rocmforge.assemble.image import ImageArchiveError
from rocmforge.assemble.image.archive import archive_chunks, read_manifest, walk_archive
from rocmforge.assemble.image.blobs import GZIP, ZSTD_MAGIC, Codec, decoded_chunks, feed_buffering, zstd_codec
from rocmforge.assemble.image.rewrite import rewrite_archive
from rocmforge.shared.streams import CHUNK_SIZE
from tests.unit.image_samples import (
    EPOCH,
    build_layer,
    docker_config,
    image_ids_read_in_chunks,
    save_archive,
    tar_bytes,
    ti,
)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
STAMP = "aaaa"


def _zstd_compress(data: bytes) -> bytes:
    try:
        from compression import zstd

        return zstd.compress(data)
    except ImportError:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)


COMPRESSIONS = {
    "gzip": (lambda x: gzip.compress(x, mtime=0), TAR_GZIP),
    "zstd": (_zstd_compress, "application/vnd.oci.image.layer.v1.tar+zstd"),
    "oci-tar": (lambda x: x, "application/vnd.oci.image.layer.v1.tar"),
    "docker-tar": (lambda x: x, "application/vnd.docker.image.rootfs.diff.tar"),
}


def sample_layers() -> list[bytes]:
    base = tar_bytes(
        [(ti("etc", tarfile.DIRTYPE, mtime=0, mode=0o755, uname="", gname=""), None)], fmt=tarfile.GNU_FORMAT
    )
    return [base, build_layer(STAMP, order_seed=1), bytes(1024), bytes(1024)]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _member(blob: bytes) -> str:
    return f"blobs/sha256/{_digest(blob)[7:]}"


def _desc(media_type: str, data: bytes, **extra) -> dict:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data), **extra}


def oci_archive(
    layers: list[bytes],
    *,
    compression="gzip",
    manifest_json=True,
    nested=True,
    arm64_saved=False,
    blobs: dict[int, bytes] | None = None,
    order="docker",
) -> bytes:
    """An OCI layout as Docker 29's `docker save` writes one: index.json -> the image's index ->
    a linux/amd64 manifest (beside an attestation and a linux/arm64 one whose blob is not saved,
    unless arm64_saved) -> config and layer blobs. blobs replaces layer blobs by layer index.
    order: "docker" (blobs, then the index files), or "shuffled" with the config last."""
    compress, media_type = COMPRESSIONS[compression]
    cfg = json.dumps(docker_config(STAMP, [_digest(x) for x in layers])).encode()
    layer_blobs = [(blobs or {}).get(i) or compress(x) for i, x in enumerate(layers)]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": _desc("application/vnd.oci.image.config.v1+json", cfg),
            "layers": [_desc(media_type, b) for b in layer_blobs],
        }
    ).encode()
    arm_cfg = json.dumps({**json.loads(cfg), "architecture": "arm64"}).encode()
    arm_manifest = json.dumps(
        {**json.loads(manifest), "config": _desc("application/vnd.oci.image.config.v1+json", arm_cfg)}
    ).encode()
    attestation = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
    amd64 = _desc(OCI_MANIFEST, manifest, platform={"architecture": "amd64", "os": "linux"})
    image_index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                _desc(OCI_MANIFEST, arm_manifest, platform={"architecture": "arm64", "os": "linux"}),
                amd64,
                _desc(
                    OCI_MANIFEST,
                    attestation,
                    platform={"architecture": "unknown", "os": "unknown"},
                    annotations={"vnd.docker.reference.type": "attestation-manifest"},
                ),
            ],
        }
    ).encode()
    top = _desc(OCI_INDEX, image_index, annotations={"io.containerd.image.name": "docker.io/library/x:1"})
    files = {_member(b): b for b in [*layer_blobs, manifest, image_index, attestation]}
    files[_member(cfg)] = cfg
    if arm64_saved:
        files.update({_member(b): b for b in (arm_manifest, arm_cfg)})
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [top if nested else amd64]}).encode()
    files["oci-layout"] = b'{"imageLayoutVersion":"1.0.0"}'
    if manifest_json:
        files["manifest.json"] = json.dumps(
            [{"Config": _member(cfg), "RepoTags": ["x:1"], "Layers": [_member(b) for b in layer_blobs]}]
        ).encode()
    names = sorted(files)
    if order == "shuffled":
        random.Random(5).shuffle(names)
        names.sort(key=lambda n: files[n] == cfg)
    items = [(ti("blobs", tarfile.DIRTYPE, mode=0o755), None), (ti("blobs/sha256", tarfile.DIRTYPE, mode=0o755), None)]
    return tar_bytes(items + [(ti(n), files[n]) for n in names])


def normalised(archive: bytes, work) -> tuple[str, list[str], bytes]:
    work.mkdir()
    rw = rewrite_archive(io.BytesIO(archive), work, epoch=EPOCH, log=lambda m: None)
    return rw.image_id, [r.diff_id for r in rw.results], b"".join(archive_chunks(rw, ["x:1"]))


def _has_zstd() -> bool:
    return zstd_codec() is not None


@pytest.mark.parametrize(
    "shape",
    [
        {"compression": "gzip"},
        {"compression": "oci-tar"},
        {"compression": "docker-tar"},
        {"compression": "gzip", "manifest_json": False},
        {"compression": "gzip", "manifest_json": False, "nested": False},
        {"compression": "gzip", "manifest_json": False, "arm64_saved": True},
        {"compression": "gzip", "order": "shuffled"},
        {"compression": "oci-tar", "order": "shuffled", "manifest_json": False},
        pytest.param(
            {"compression": "zstd"},
            marks=pytest.mark.skipif(not _has_zstd(), reason="no zstd decoder (see the missing-decoder test)"),
        ),
    ],
    ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()),
)
def test_an_oci_layout_normalises_to_the_image_of_its_docker_archive(tmp_path, shape):
    layers = sample_layers()
    want = normalised(save_archive(layers, STAMP), tmp_path / "docker")
    assert normalised(oci_archive(layers, **shape), tmp_path / "oci") == want


def test_an_oci_layout_read_from_chunks_of_any_size(tmp_path):
    arch = oci_archive([tar_bytes([(ti("a"), b"a" * 3000)]), bytes(1024)], manifest_json=False)
    assert len(image_ids_read_in_chunks(arch, tmp_path)) == 1


def test_walking_hashes_uncompressed_tars_and_keeps_its_place_whatever_a_layer_reader_reads():
    layers = sample_layers()
    arch = oci_archive(layers, manifest_json=False, order="shuffled")
    _, _, digests = walk_archive(io.BytesIO(arch), lambda name, win: (win.drain(), win.digest())[1])
    assert sorted(digests.values()) == sorted({_digest(x) for x in layers})
    small, links, heads = walk_archive(io.BytesIO(arch), lambda name, win: win.read(100))
    config, _, names = read_manifest(small, links)
    assert config["rootfs"]["diff_ids"] == [_digest(x) for x in layers]
    assert [heads[n] for n in names] == [x[:100] for x in layers]


def test_concatenated_gzip_members_are_one_layer(tmp_path):
    layers = sample_layers()
    split = gzip.compress(layers[1][:1500], mtime=0) + gzip.compress(layers[1][1500:], mtime=0)
    assert normalised(oci_archive(layers, blobs={1: split}), tmp_path / "a") == normalised(
        oci_archive(layers), tmp_path / "b"
    )


def _refused(archive: bytes, tmp_path) -> str:
    with pytest.raises(ImageArchiveError) as exc:
        rewrite_archive(io.BytesIO(archive), tmp_path, epoch=EPOCH, log=lambda m: None)
    return str(exc.value)


def test_a_gzip_blob_of_another_tar_fails_the_diff_id_check(tmp_path):
    layers = sample_layers()
    other = gzip.compress(build_layer("bbbb"), mtime=0)
    message = _refused(oci_archive(layers, blobs={1: other}), tmp_path)
    assert f"layer 1 ({_member(other)}) hashes to {_digest(build_layer('bbbb'))}" in message
    assert f"the config says {_digest(layers[1])}" in message


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda b: b[: len(b) // 2], "ends early (a truncated blob)"),
        (lambda b: b[:-4], "ends early (a truncated blob)"),
        (lambda b: b[:40] + bytes(b ^ 0xFF for b in b[40:60]) + b[60:], "is not valid gzip"),
    ],
)
def test_a_damaged_gzip_blob_is_refused_clearly(tmp_path, damage, says):
    layers = sample_layers()
    bad = damage(gzip.compress(layers[1], mtime=0))
    message = _refused(oci_archive(layers, blobs={1: bad}), tmp_path)
    assert message.startswith(f"layer {_member(bad)}") and says in message


def test_a_zstd_layer_without_a_decoder_says_what_to_install(tmp_path, monkeypatch):
    for module in ("compression", "compression.zstd", "zstandard"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    layers = sample_layers()
    blob = ZSTD_MAGIC + bytes(200)
    message = _refused(oci_archive(layers, blobs={1: blob}), tmp_path)
    assert message.startswith(f"layer {_member(blob)} is zstd-compressed")
    assert "install the python package zstandard" in message


def test_a_blob_of_unknown_compression_is_named(tmp_path):
    layers = sample_layers()
    blob = b"BZh91AY&SY" + bytes(2000)
    message = _refused(oci_archive(layers, blobs={1: blob}), tmp_path)
    assert message == (f"layer {_member(blob)} of the image archive is not a tar, nor a gzip- or zstd-compressed one")


def test_an_index_of_two_images_is_refused(tmp_path):
    arch = tarfile.open(fileobj=io.BytesIO(oci_archive(sample_layers(), manifest_json=False)))
    files = {m.name: arch.extractfile(m).read() for m in arch.getmembers() if m.isfile()}
    index = json.loads(files["index.json"])
    index["manifests"] *= 2
    files["index.json"] = json.dumps(index).encode()
    message = _refused(tar_bytes([(ti(n), d) for n, d in files.items()]), tmp_path)
    assert message.startswith("the OCI index lists 2 images")


def test_decompressed_chunks_stay_bounded():
    zeros = bytes(24 << 20)
    chunks = list(decoded_chunks(iter([gzip.compress(zeros)]), GZIP, "blob"))
    assert max(map(len, chunks)) <= CHUNK_SIZE and b"".join(chunks) == zeros


def test_a_decoder_that_buffers_its_input_is_drained():
    """compression.zstd (Python 3.14) has lzma's interface: lzma stands in for it here."""
    xz = Codec("xz", lzma.LZMADecompressor, feed_buffering, (lzma.LZMAError,))
    data = bytes(6 << 20) + b"end"
    blob = lzma.compress(data) + lzma.compress(b"+more")
    pieces = (blob[i : i + 999] for i in range(0, len(blob), 999))
    chunks = list(decoded_chunks(pieces, xz, "blob"))
    assert max(map(len, chunks)) <= CHUNK_SIZE and b"".join(chunks) == data + b"+more"
    with pytest.raises(ImageArchiveError, match="ends early"):
        list(decoded_chunks(iter([blob[:-10]]), xz, "blob"))


@pytest.mark.skipif(not _has_zstd(), reason="no zstd decoder")
def test_zstd_frames_decode_across_feeds():
    data = bytes(3 << 20) + bytes(range(256)) * 100
    blob = _zstd_compress(data) + _zstd_compress(b"tail")
    chunks = list(decoded_chunks(iter([blob[:1000], blob[1000:]]), zstd_codec(), "blob"))
    assert b"".join(chunks) == data + b"tail"
    with pytest.raises(ImageArchiveError, match="ends early"):
        list(decoded_chunks(iter([blob[: len(blob) // 2]]), zstd_codec(), "blob"))
    with pytest.raises(ImageArchiveError, match="not valid zstd"):
        list(decoded_chunks(iter([blob[:4] + b"\xff" * 50]), zstd_codec(), "blob"))


def test_zlib_errors_never_escape():
    with pytest.raises(ImageArchiveError, match="not valid gzip"):
        list(decoded_chunks(iter([b"\x1f\x8b\x08" + bytes(100)]), GZIP, "blob"))
