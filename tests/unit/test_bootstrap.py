"""The bootstrap provider's pure parts: normalisation and a config/archive that give a stable ID."""

from __future__ import annotations

import os
import tarfile

from rocmforge.define.matrix import load_matrix
from rocmforge.resolve import bootstrap
from tests.conftest import ROOT

STACK = load_matrix(ROOT / "matrix.yaml").stacks["debian13-rocm5.7"]


def _fake_rootfs(root, stamp):
    day = 20000 + stamp[-1]  # debootstrap dates each shadow entry by the day it ran
    for rel, data in {
        "etc/shadow": b"root:*:%d:0:99999:7:::\n_apt:!:%d::::::\n" % (day, day),
        "etc/shadow-": b"root:*:%d:0:99999:7:::\n" % day,
        "etc/apt/sources.list": b"deb http://mirror-%s.example/debian trixie main\n" % stamp,
        "etc/os-release": b"ID=debian\n",
        "etc/resolv.conf": b"nameserver 10.0.0.1\n",
        "etc/hostname": b"builder-42\n",
        "var/log/dpkg.log": stamp,
        "var/cache/ldconfig/aux-cache": stamp,
        "var/lib/apt/lists/x_Packages": stamp,
        "usr/bin/tool": b"#!/bin/sh\n",
    }.items():
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
        bootstrap.settle_rootfs(root, "trixie")
        assert (root / "etc/resolv.conf").read_bytes() == b""
        assert not (root / "var/log/dpkg.log").exists()
        assert not (root / "var/lib/apt/lists/x_Packages").exists()
        assert (root / "var/lib/apt/lists/partial").is_dir()
        assert (root / "etc/shadow").read_bytes() == b"root:*::0:99999:7:::\n_apt:!:::::::\n"
        assert (root / "etc/apt/sources.list").read_bytes() == b"deb http://deb.debian.org/debian trixie main\n"
        ids.append(bootstrap.layer_tar(root, tmp_path / f"l{i}.tar"))
    assert ids[0] == ids[1]
    with tarfile.open(tmp_path / "l0.tar") as t:
        assert {m.mtime for m in t.getmembers()} == {0}
        assert {(m.uid, m.gid) for m in t.getmembers()} == {(0, 0)}


def _debootstrap_as(root, version):
    """What each debootstrap version writes differently (seen with 1.0.128, 1.0.141, 1.0.145
    bootstrapping trixie minbase on Debian 12 and in a sid container)."""
    _fake_rootfs(root, b"run-one")
    fstab = {"1.0.128": "# UNCONFIGURED FSTAB FOR BASE SYSTEM\n"}.get(
        version,
        "# UNCONFIGURED FSTAB FOR BASE SYSTEM\n#\n"
        "# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n",
    )
    (root / "etc/fstab").write_text(fstab)
    (root / "run/lock").mkdir(parents=True)
    if version == "1.0.128":
        (root / "run/mount").mkdir()
    for rel in ("etc/hostname", "etc/resolv.conf"):  # copied from the host, with the host's mode
        (root / rel).chmod(0o755 if version == "1.0.128" else 0o644)


def test_the_base_does_not_depend_on_the_host_s_debootstrap(tmp_path):
    ids = set()
    for version in ("1.0.128", "1.0.141", "1.0.145"):
        root = tmp_path / version
        _debootstrap_as(root, version)
        bootstrap.settle_rootfs(root, "trixie")
        assert (root / "run/lock").is_dir() and not (root / "run/mount").exists()
        assert (root / "etc/hostname").stat().st_mode & 0o777 == 0o644
        ids.add(bootstrap.layer_tar(root, tmp_path / f"{version}.tar"))
    assert len(ids) == 1


def test_a_file_a_package_puts_under_run_is_kept(tmp_path):
    root = tmp_path / "r"
    _debootstrap_as(root, "1.0.145")
    (root / "run/pkg").mkdir()
    (root / "run/pkg/state").write_text("x")
    bootstrap.settle_rootfs(root, "trixie")
    assert (root / "run/pkg/state").read_text() == "x"


ARCHIVE_SCRIPT = """
import sys
from pathlib import Path
from rocmforge.resolve import bootstrap
from rocmforge.define.matrix import load_matrix
root, out = Path(sys.argv[1]), Path(sys.argv[2])
stack = load_matrix(sys.argv[3]).stacks["debian13-rocm5.7"]
bootstrap.settle_rootfs(root, "trixie")
diff = bootstrap.layer_tar(root, out.with_suffix(".layer"))
cfg = bootstrap.image_config(diff, "debian13-rocm5.7", stack)
print(bootstrap.write_archive(out.with_suffix(".layer"), diff, cfg, "rocmforge/base-x:recipe-1", out))
"""


def _members(path):
    with tarfile.open(path) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]


def test_two_bootstraps_give_identical_archives(tmp_path):
    """Two root filesystems made at different times (different log contents and mtimes), each
    normalised and packed by its own process: the docker-load archives hold the same files with
    the same bytes (config, manifest, layer), so `docker load` gives the same image ID. (The outer
    tar's own headers carry the layer file's mtime, which docker load ignores.)"""
    import subprocess
    import sys

    ids, archives = [], []
    for i, stamp in enumerate((b"first-run-at-10:00", b"second-run-at-11:30")):
        root = tmp_path / f"r{i}"
        _fake_rootfs(root, stamp)
        out = tmp_path / f"archive{i}.tar"
        proc = subprocess.run(
            [sys.executable, "-c", ARCHIVE_SCRIPT, str(root), str(out), str(ROOT / "matrix.yaml")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip())
        archives.append(_members(out))
    assert ids[0] and ids[0] == ids[1]
    assert [n for n, _ in archives[0]] == [n for n, _ in archives[1]] and len(archives[0]) == 3
    assert archives[0] == archives[1]
    assert (tmp_path / "archive0.layer").read_bytes() == (tmp_path / "archive1.layer").read_bytes()
    with tarfile.open(tmp_path / "archive0.tar") as t:
        config = next(m for m in t.getmembers() if m.name.endswith(".json") and m.name != "manifest.json")
        assert b'"created":"1970-01-01T00:00:00Z"' in t.extractfile(config).read()
