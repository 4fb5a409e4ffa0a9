"""The bootstrap provider's pure parts: normalisation and a config/archive that give a stable ID."""

from __future__ import annotations

import os
import tarfile

from tests.conftest import ROOT
from rocmforge import bootstrap
from rocmforge.matrix import load_matrix

STACK = load_matrix(ROOT / "matrix.yaml").stacks["debian13-rocm5.7"]


def _fake_rootfs(root, stamp):
    for rel, data in {"etc/os-release": b"ID=debian\n", "etc/resolv.conf": b"nameserver 10.0.0.1\n",
                      "etc/hostname": b"builder-42\n", "var/log/dpkg.log": stamp,
                      "var/cache/ldconfig/aux-cache": stamp, "var/lib/apt/lists/x_Packages": stamp,
                      "usr/bin/tool": b"#!/bin/sh\n"}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (int.from_bytes(stamp[:3], "big"),) * 2)
    (root / "var/lib/apt/lists/partial").mkdir()


def test_normalised_layers_are_identical_and_scrubbed(tmp_path):
    ids = []
    for i, stamp in enumerate((b"run-one", b"run-two")):
        root = tmp_path / f"r{i}"
        _fake_rootfs(root, stamp)
        bootstrap.normalise(root)
        assert (root / "etc/resolv.conf").read_bytes() == b""
        assert not (root / "var/log/dpkg.log").exists()
        assert not (root / "var/lib/apt/lists/x_Packages").exists()
        assert (root / "var/lib/apt/lists/partial").is_dir()
        ids.append(bootstrap.layer_tar(root, tmp_path / f"l{i}.tar"))
    assert ids[0] == ids[1]
    with tarfile.open(tmp_path / "l0.tar") as t:
        assert {m.mtime for m in t.getmembers()} == {0}
        assert {(m.uid, m.gid) for m in t.getmembers()} == {(0, 0)}


def test_config_and_archive_give_a_stable_image_id(tmp_path):
    root = tmp_path / "r"
    _fake_rootfs(root, b"x")
    bootstrap.normalise(root)
    diff = bootstrap.layer_tar(root, tmp_path / "layer.tar")
    cfg = bootstrap.image_config(diff, "debian13-rocm5.7", STACK)
    a = bootstrap.write_archive(tmp_path / "layer.tar", diff, cfg, "rocmforge/base-x:recipe-1", tmp_path / "a.tar")
    b = bootstrap.write_archive(tmp_path / "layer.tar", diff, bootstrap.image_config(diff, "debian13-rocm5.7", STACK),
                                "rocmforge/base-x:recipe-1", tmp_path / "b.tar")
    assert a == b
    assert b'"created":"1970-01-01T00:00:00Z"' in cfg
