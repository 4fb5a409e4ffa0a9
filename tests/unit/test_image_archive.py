"""Docker-archives normalised without an engine (rocmforge.assemble.image.rewrite.rewrite_archive):
two builds' archives give one image, read from chunks of any size; corrupt ones are refused."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from rocmforge.assemble.image import ImageArchiveError
from rocmforge.assemble.image.archive import archive_chunks
from rocmforge.assemble.image.rewrite import rewrite_archive
from tests.unit.image_samples import (
    EMPTY_LAYER,
    EPOCH,
    build_layer,
    image_ids_read_in_chunks,
    save_archive,
    tar_bytes,
    ti,
)


def read_archive(chunks) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_archives_of_two_builds_normalise_to_the_same_image(tmp_path):
    base = tar_bytes(
        [(ti("etc", tarfile.DIRTYPE, mtime=0, mode=0o755, uname="", gname=""), None)], fmt=tarfile.GNU_FORMAT
    )
    outs, ids = [], []
    for k, (stamp, seed) in enumerate((("aaaa", 0), ("bbbbbbbb", 1))):
        arch = save_archive([base, build_layer(stamp, order_seed=seed), bytes(1024), bytes(1024)], stamp)
        work = tmp_path / f"w{k}"
        work.mkdir()
        rw = rewrite_archive(io.BytesIO(arch), work, epoch=EPOCH, log=lambda m: None)
        ids.append(rw.image_id)
        outs.append(b"".join(archive_chunks(rw, ["rocmforge/x:content-1", "rocmforge/x:stack"])))
        assert rw.image_id == "sha256:" + hashlib.sha256(rw.config).hexdigest()
    assert ids[0] == ids[1] and outs[0] == outs[1]
    files = read_archive([outs[0]])
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == ["rocmforge/x:content-1", "rocmforge/x:stack"]
    assert manifest["Config"] == ids[0][7:] + ".json"
    cfg = json.loads(files[manifest["Config"]])
    assert len(manifest["Layers"]) == 4 and manifest["Layers"][2] == manifest["Layers"][3]
    for path, diff_id in zip(manifest["Layers"], cfg["rootfs"]["diff_ids"]):
        assert "sha256:" + hashlib.sha256(files[path]).hexdigest() == diff_id
    assert cfg["rootfs"]["diff_ids"][0] == "sha256:" + hashlib.sha256(base).hexdigest()
    assert cfg["rootfs"]["diff_ids"][2] == EMPTY_LAYER


def test_archive_read_from_chunks_of_any_size(tmp_path):
    assert len(image_ids_read_in_chunks(save_archive([tar_bytes([(ti("a"), b"a" * 3000)])], "cc"), tmp_path)) == 1


def test_corrupt_archive_is_refused(tmp_path):
    with pytest.raises(ImageArchiveError):
        rewrite_archive(io.BytesIO(b"not a tar" * 100), tmp_path, epoch=EPOCH, log=lambda m: None)
