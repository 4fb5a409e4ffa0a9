"""The `docker save` fallback on an engine that takes an OCI layout without the layers it holds
(podman): the export names each layer by its diff ID (`<diff ID>.tar`), so the base's layers are
hashed as they pass and never written out again, the layout names them by diff ID and size, and
only the added layers are sent back; and a store this process can read only in part falls back to
that export, saying why. The real engine is test_engines.py's; here the archive is podman's layout,
written with the standard library."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from rocmforge.assemble.image import ociload
from rocmforge.assemble.image.rewrite import rewrite_archive
from rocmforge.shared.errors import ImageArchiveError
from tests.unit.image_samples import EPOCH, docker_config, tar_bytes, ti
from tests.unit.test_layer_against_lower import BASE, gnu


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


STEP = gnu([(ti("opt", tarfile.DIRTYPE, mode=0o755), None), (ti("opt/small"), b"small\n")])


def podman_archive(layers: list[bytes], *, wrong_base: bytes | None = None) -> bytes:
    """A docker-archive as podman 5 writes one: each layer `<diff ID hex>.tar`, then the config,
    manifest.json last. wrong_base: other bytes under the first layer's name."""
    ids = [digest(x) for x in layers]
    cfg = json.dumps(docker_config("p" * 4, ids)).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    members = [
        (ti(f"{d[7:]}.tar"), wrong_base if i == 0 and wrong_base else x) for i, (d, x) in enumerate(zip(ids, layers))
    ]
    manifest = [{"Config": cfg_name, "RepoTags": ["x:1"], "Layers": [f"{d[7:]}.tar" for d in ids]}]
    members += [(ti(cfg_name), cfg), (ti("manifest.json"), json.dumps(manifest).encode())]
    return tar_bytes(members)


def rewrite(tmp_path, name: str, archive: bytes, logs: list, *, keep_inherited: bool = False):
    work = tmp_path / name
    work.mkdir()
    return rewrite_archive(
        io.BytesIO(archive),
        work,
        epoch=EPOCH,
        log=logs.append,
        inherited=1,
        keep_inherited=keep_inherited,
        index_dir=tmp_path / "lower-index",
        diff_ids=[digest(BASE), digest(STEP)],
    )


def test_the_base_is_hashed_not_rewritten_and_the_layout_names_it_without_sending_it(tmp_path):
    logs: list[str] = []
    first = rewrite(tmp_path, "first", podman_archive([BASE, STEP]), logs)  # no index yet: the base is read
    assert not any("hashed only" in m for m in logs)
    logs.clear()
    rw = rewrite(tmp_path, "second", podman_archive([BASE, STEP]), logs)
    assert rw.image_id == first.image_id
    assert any(f"layer {digest(BASE)[7:19]}: the base's, hashed only" in m for m in logs), logs
    assert [p for p in (tmp_path / "second").iterdir()] == [rw.layers[1][1]]  # the added layer's file only
    assert rw.layers[0][1] is None
    assert rw.source_layers and rw.source_layers[0] == {
        "mediaType": ociload.LAYER_TYPE,
        "digest": digest(BASE),
        "size": len(BASE),
    }
    layout = b"".join(ociload.layout_chunks(rw, ociload.manifest(rw, rw.source_layers), None))
    names = tarfile.open(fileobj=io.BytesIO(layout)).getnames()
    assert f"blobs/sha256/{digest(BASE)[7:]}" not in names and f"blobs/sha256/{rw.layers[1][0][7:]}" in names
    assert len(layout) < len(BASE)


def test_a_base_member_that_is_not_what_its_name_says_is_refused(tmp_path):
    rewrite(tmp_path, "first", podman_archive([BASE, STEP]), [])  # the index, cached
    with pytest.raises(ImageArchiveError, match="hashes to"):
        rewrite(tmp_path, "second", podman_archive([BASE, STEP], wrong_base=BASE + bytes(512)), [])


def test_an_engine_that_loads_whole_archives_keeps_the_base_as_read(tmp_path):
    rewrite(tmp_path, "first", podman_archive([BASE, STEP]), [])
    logs: list[str] = []
    rw = rewrite(tmp_path, "second", podman_archive([BASE, STEP]), logs, keep_inherited=True)
    assert not any("hashed only" in m for m in logs)
    assert rw.layers[0][1] is not None


class _Unreadable:
    """A layer of the store whose files this process may not open."""

    def __init__(self, diff_id: str, size: int):
        self.diff_id, self.size, self.tar_size = diff_id, size, size

    def chunks(self):
        raise PermissionError(13, "Permission denied", "/storage/overlay/abc/diff/root/.bashrc")
        yield b""


class _Store:
    manifest: dict = {}

    def __init__(self, config: bytes):
        self.raw = config

    def describe(self) -> str:
        return "podman storage"

    def config(self, image_id: str) -> bytes:
        return self.raw

    def layer(self, diff_ids: list[str], index: int):
        return _Unreadable(diff_ids[index], 1024)


class _Podman:
    loads_added_layers_only, loads_partial_layouts = False, True

    def __init__(self, archive: bytes, config: bytes):
        self.archive, self.store = archive, _Store(config)

    def layer_reader(self, image_id: str):
        return self.store

    def export(self, ref: str):
        yield self.archive


def test_a_store_readable_only_in_part_falls_back_to_the_export_and_says_why(tmp_path):
    from rocmforge.assemble.image import normalise
    from rocmforge.assemble.image.rewrite import ReadMeter

    archive = podman_archive([BASE, STEP])
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        config = next(
            t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".json") and "manifest" not in m.name
        )
    logs: list[str] = []
    rw, source = normalise._rewrite(
        _Podman(archive, config),
        "x:1",
        {"Id": digest(config), "Size": len(archive), "RootFS": {"Layers": [digest(BASE), digest(STEP)]}},
        tmp_path,
        epoch=EPOCH,
        inherited=1,
        log=logs.append,
        meter=ReadMeter(0, None),
        index_dir=tmp_path / "lower-index",
        steps=None,
        merged=0,
    )
    assert source == "docker save"
    assert any("Permission denied" in m and "/root/.bashrc" in m and "with docker save" in m for m in logs), logs
    assert rw.layers[0][1] is None and rw.source_layers  # still loaded without the base's layers
