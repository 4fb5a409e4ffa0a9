"""Layer rewriting (rocmforge.assemble.image.layers) on synthetic layer tars: what is dropped, blanked,
clamped and re-sorted, and that the result is the same bytes whatever the build's run."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rocmforge.assemble.image.layers import normalise_layer
from rocmforge.assemble.image.tarcodec import BLOCK, GNU_MAGIC, RECORD
from rocmforge.resolve import bootstrap
from tests.unit.image_samples import EMPTY_LAYER, EPOCH, LATER, OLD, build_layer, tar_bytes, ti


def rewrite(data: bytes, tmp_path: Path, name="out.tar", epoch=EPOCH):
    """Normalises data as a layer file, checks both diff IDs; returns (result, output, log lines)."""
    logs = []
    src = tmp_path / (name + ".in")
    src.write_bytes(data)
    with open(src, "rb") as f:
        res = normalise_layer(f, tmp_path / name, epoch=epoch, log=logs.append)
    out = (tmp_path / name).read_bytes()
    assert res.diff_id == "sha256:" + hashlib.sha256(out).hexdigest()
    assert res.source_diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
    return res, out, logs


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: m for m in t.getmembers()}


def names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.getnames()


def content(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.extractfile(name).read()


def test_mtimes_clamped_owners_numeric(tmp_path):
    data = tar_bytes(
        [
            (ti("opt", tarfile.DIRTYPE, mtime=LATER, mode=0o755), None),
            (ti("opt/old", mtime=OLD, uid=1000, gid=1000, uname="alice", gname="staff"), b"old\n"),
            (ti("opt/new", mtime=LATER, pax={"atime": "1.5", "ctime": "2.5", "mtime": f"{LATER}.75"}), b"new\n"),
        ]
    )
    res, out, _ = rewrite(data, tmp_path)
    m = members(out)
    assert m["opt/old"].mtime == OLD
    assert m["opt/new"].mtime == EPOCH and m["opt"].mtime == EPOCH
    assert (m["opt/old"].uid, m["opt/old"].gid, m["opt/old"].uname, m["opt/old"].gname) == (1000, 1000, "", "")
    assert all(not x.pax_headers for x in m.values())  # no atime/ctime records
    assert res.clamped == 2
    # Every header block is a GNU one (tarfile reports its own default format when reading, so
    # the magic bytes are what tells).
    headers = [
        out[o : o + BLOCK] for o in range(0, len(out), BLOCK) if out[o + 257 : o + 265] in (GNU_MAGIC, b"ustar\x0000")
    ]
    assert headers and all(h[257:265] == GNU_MAGIC for h in headers)
    assert len(out) % RECORD == 0


def test_dropped_and_blanked_paths(tmp_path):
    res, out, _ = rewrite(build_layer("one"), tmp_path)
    got = set(names(out))
    for gone in (
        "tmp/build-one",
        "var/cache/apt/pkgcache.bin",
        "var/cache/ldconfig/aux-cache",
        "var/lib/apt/lists/deb.debian.org_debian_dists_trixie_InRelease",
        "var/lib/dpkg/status-old",
        "var/log/dpkg.log",
    ):
        assert gone not in got, gone
    for kept in (
        "tmp",
        "var/log",
        "var/log/wtmp",
        "var/lib/apt/lists/lock",
        "var/lib/apt/lists/partial",
        "var/cache/ldconfig",
        "var/lib/dpkg/status",
        "opt/tool",
    ):
        assert kept in got, kept
    assert content(out, "etc/machine-id") == b""
    assert members(out)["var/log/wtmp"].gid == 43
    assert res.blanked == ["etc/machine-id"]
    assert len(res.dropped) == 6


def test_more_drop_rules(tmp_path):
    data = tar_bytes(
        [
            (ti("root", tarfile.DIRTYPE, mode=0o700), None),
            (ti("root/.cache", tarfile.DIRTYPE, mode=0o755), None),
            (ti("root/.cache/pip", tarfile.DIRTYPE, mode=0o755), None),
            (ti("root/.cache/pip/selfcheck.json"), b"{}"),
            (ti("root/.profile"), b"# profile\n"),
            (ti("var/cache/debconf/config.dat"), b"Name: x\n"),
            (ti("var/cache/debconf/config.dat-old"), b"Name: y\n"),
            (ti("var/cache/apt/archives/jq.deb", mtime=OLD), b"!<arch>\n"),
            (ti("var/lib/apt/lists/auxfiles", tarfile.DIRTYPE), None),
            (ti("var/lib/apt/lists/partial/x.part"), b"x"),
        ]
    )
    _, out, _ = rewrite(data, tmp_path)
    assert names(out) == [
        "root",
        "root/.cache",
        "root/.profile",
        "var/cache/apt/archives/jq.deb",
        "var/cache/debconf/config.dat",
    ]


def test_whiteouts_kept_exactly_and_opaque_dirs_sorted(tmp_path):
    data = tar_bytes(
        [  # Docker's order: the marker follows its dir
            (ti("root", tarfile.DIRTYPE, mode=0o700), None),
            (ti("root/.wh..wh..opq", mtime=0, mode=0o755), b""),
            (ti("root/-x"), b""),
            (ti("root/.a"), b"a"),
            (ti("tmp", tarfile.DIRTYPE, mode=0o1777), None),
            (ti("tmp/.wh.stale"), b""),
            (ti("usr/bin/.wh.tail", mode=0o600), b""),
            (ti("var/log/.wh.old.log", mode=0o600), b""),
            (ti("var/lib/apt/lists/.wh.deb.debian.org_Packages"), b""),
        ]
    )
    res, out, _ = rewrite(data, tmp_path)
    assert res.resorted
    assert names(out) == [
        "root",
        "root/-x",
        "root/.a",
        "root/.wh..wh..opq",
        "tmp",
        "tmp/.wh.stale",
        "usr/bin/.wh.tail",
        "var/lib/apt/lists/.wh.deb.debian.org_Packages",
        "var/log/.wh.old.log",
    ]
    assert members(out)["usr/bin/.wh.tail"].mode == 0o600


def test_links_devices_and_fifos_survive(tmp_path):
    long_target = "usr/lib/" + "x" * 120
    data = tar_bytes(
        [
            (ti("dev", tarfile.DIRTYPE, mode=0o755), None),
            (ti("dev/null", tarfile.CHRTYPE, mode=0o666, dev=(1, 3)), None),
            (ti("dev/loop0", tarfile.BLKTYPE, mode=0o660, dev=(7, 0)), None),
            (ti("run/fifo", tarfile.FIFOTYPE, mode=0o644), None),
            (ti("usr/bin/perl5.40", mode=0o755), b"ELF perl"),
            (ti("usr/bin/perl", tarfile.LNKTYPE, mode=0o755, linkname="usr/bin/perl5.40"), None),
            (ti("usr/bin/sh", tarfile.SYMTYPE, mode=0o777, linkname="dash"), None),
            (ti("usr/lib/long", tarfile.SYMTYPE, mode=0o777, linkname=long_target), None),
        ]
    )
    _, out, _ = rewrite(data, tmp_path)
    m = members(out)
    assert m["dev/null"].ischr() and (m["dev/null"].devmajor, m["dev/null"].devminor) == (1, 3)
    assert m["dev/loop0"].isblk() and m["dev/loop0"].devmajor == 7
    assert m["run/fifo"].isfifo()
    # sorted, "perl" comes first: it takes the data and perl5.40 becomes the link (as GNU tar does)
    assert m["usr/bin/perl5.40"].islnk() and m["usr/bin/perl5.40"].linkname == "usr/bin/perl"
    assert m["usr/bin/sh"].issym() and m["usr/bin/sh"].linkname == "dash"
    assert m["usr/lib/long"].linkname == long_target
    assert content(out, "usr/bin/perl") == b"ELF perl"


def test_resorting_moves_data_to_the_first_hard_link(tmp_path):
    # Go's writer archives the first name it walks; a rename (whiteout) can make the link sort first.
    data = tar_bytes(
        [
            (ti("z", tarfile.DIRTYPE, mode=0o755), None),
            (ti("z/data", mode=0o755), b"payload"),
            (ti("a", tarfile.DIRTYPE, mode=0o755), None),
            (ti("a/link", tarfile.LNKTYPE, mode=0o755, linkname="z/data"), None),
            (ti("a/link2", tarfile.LNKTYPE, mode=0o755, linkname="z/data"), None),
        ]
    )
    res, out, _ = rewrite(data, tmp_path)
    assert res.resorted and names(out) == ["a", "a/link", "a/link2", "z", "z/data"]
    m = members(out)
    assert m["a/link"].isfile() and m["a/link2"].linkname == "a/link" and m["z/data"].linkname == "a/link"
    dest = tmp_path / "x"
    with tarfile.open(fileobj=io.BytesIO(out)) as t:
        t.extractall(dest, filter="fully_trusted")
    assert (dest / "z/data").read_bytes() == b"payload"
    assert os.stat(dest / "z/data").st_ino == os.stat(dest / "a/link").st_ino


def test_hard_link_to_a_dropped_file_is_dropped(tmp_path):
    data = tar_bytes(
        [
            (ti("tmp/x"), b"scratch"),
            (ti("usr/share/x", tarfile.LNKTYPE, linkname="tmp/x"), None),
            (ti("usr/share/y"), b"y"),
        ]
    )
    res, out, logs = rewrite(data, tmp_path)
    assert names(out) == ["usr/share/y"]
    assert "usr/share/x" in res.dropped and any("usr/share/x" in line for line in logs)


def test_xattrs_kept_in_a_pax_header(tmp_path):
    cap = "\x01\x00\x00\x02\x00\x20\x00\x00"
    data = tar_bytes(
        [(ti("usr/bin/ping", mode=0o755, pax={"SCHILY.xattr.security.capability": cap, "atime": "5"}), b"ELF")]
    )
    _, out, _ = rewrite(data, tmp_path)
    m = members(out)["usr/bin/ping"]
    assert m.pax_headers == {"SCHILY.xattr.security.capability": cap}
    assert content(out, "usr/bin/ping") == b"ELF"


def test_ustar_prefix_and_gnu_long_names_are_read(tmp_path):
    deep = "usr/share/" + "d" * 90 + "/" + "f" * 60
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        _, out, _ = rewrite(tar_bytes([(ti(deep), b"deep")], fmt=fmt), tmp_path, name=f"{fmt}.tar")
        assert names(out) == [deep] and content(out, deep) == b"deep"


def test_empty_layer_is_dockers_empty_layer(tmp_path):
    res, out, _ = rewrite(bytes(1024), tmp_path)
    assert out == bytes(1024) and res.diff_id == EMPTY_LAYER
    res, out, _ = rewrite(tar_bytes([(ti("tmp/only"), b"x")]), tmp_path, name="b.tar")
    assert res.diff_id == EMPTY_LAYER


def test_nondeterministic_builds_give_identical_bytes(tmp_path):
    a = build_layer("one")
    b = build_layer("two-longer", order_seed=1, unames=("", ""))
    assert a != b
    ra, out_a, _ = rewrite(a, tmp_path, "a.tar")
    rb, out_b, _ = rewrite(b, tmp_path, "b.tar")
    assert out_a == out_b and ra.diff_id == rb.diff_id
    assert rb.resorted


def test_a_normalised_layer_is_a_fixed_point(tmp_path):
    _, once, _ = rewrite(build_layer("one"), tmp_path, "once.tar")
    res, twice, _ = rewrite(once, tmp_path, "twice.tar")
    assert once == twice and res.unchanged


def pyc(flags: int, mtime: int, body: bytes = b"\xe3code") -> bytes:
    return b"\xf3\r\r\n" + flags.to_bytes(4, "little") + mtime.to_bytes(4, "little") + (6).to_bytes(4, "little") + body


def test_timestamp_pycs_compiled_during_the_build_follow_their_clamped_source(tmp_path):
    """compileall without SOURCE_DATE_EPOCH records the source's build-time mtime in the pyc: two
    builds differ, and once the source is clamped the pyc would be stale. Its header is clamped too."""
    outs = []
    for k, t in enumerate((LATER, LATER + 99)):
        data = tar_bytes(
            [
                (ti("opt/m/m.py", mtime=t), b"x = 1\n"),
                (ti("opt/m/__pycache__/m.cpython-313.pyc", mtime=t), pyc(0, t)),
                (ti("usr/lib/python3/dist-packages/__pycache__/deb.cpython-313.pyc", mtime=OLD), pyc(0, OLD)),
                (ti("usr/lib/python3/__pycache__/h.cpython-313.pyc", mtime=t), pyc(3, 0, b"\x01" * 8)),
            ]
        )
        res, out, _ = rewrite(data, tmp_path, f"p{k}.tar")
        assert res.pycs_clamped == 1
        outs.append(out)
    assert outs[0] == outs[1]
    assert content(outs[0], "opt/m/__pycache__/m.cpython-313.pyc") == pyc(0, EPOCH)
    assert members(outs[0])["opt/m/m.py"].mtime == EPOCH
    assert content(outs[0], "usr/lib/python3/dist-packages/__pycache__/deb.cpython-313.pyc") == pyc(0, OLD)
    assert content(outs[0], "usr/lib/python3/__pycache__/h.cpython-313.pyc") == pyc(3, 0, b"\x01" * 8)


def _gnu_tar() -> bool:
    tar = shutil.which("tar")
    return bool(tar) and "GNU tar" in subprocess.run([tar, "--version"], capture_output=True, text=True).stdout


@pytest.mark.skipif(not _gnu_tar(), reason="needs GNU tar (what bootstrap.layer_tar runs)")
def test_bootstrap_layers_round_trip_byte_for_byte(tmp_path):
    """The bootstrapped base is written by GNU tar: rewriting it must change nothing, whatever the
    epoch, so its diff ID (and, at epoch 0, its image ID) survives normalisation."""
    root = tmp_path / "rootfs"
    for rel, data in {
        "etc/os-release": b"ID=debian\n",
        "etc/machine-id": b"",
        "usr/bin/perl5.40.1": b"\x7fELF",
        "var/log/wtmp": b"",
        "var/lib/apt/lists/lock": b"",
        "usr/share/doc/" + "p" * 95 + "/changelog.gz": b"gz",
        "usr/lib/x86_64-linux-gnu/" + "q" * 80 + ".so.1": b"\x7fELF so",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "var/lib/apt/lists/partial").mkdir()
    (root / "tmp").mkdir(mode=0o1777)
    os.link(root / "usr/bin/perl5.40.1", root / "usr/bin/perl")
    os.symlink("usr/bin", root / "bin")
    os.symlink("/usr/lib/x86_64-linux-gnu/" + "q" * 80 + ".so.1" + "/" + "r" * 30, root / "usr/lib/long-link")
    os.mkfifo(root / "usr/fifo")
    if os.geteuid() == 0:
        os.mknod(root / "usr/null", 0o666 | 0o020000, os.makedev(1, 3))
    layer = tmp_path / "layer.tar"
    diff_id = bootstrap.layer_tar(root, layer)
    data = layer.read_bytes()
    for epoch in (0, EPOCH):
        res, out, _ = rewrite(data, tmp_path, f"e{epoch}.tar", epoch=epoch)
        assert out == data and res.diff_id == diff_id and res.unchanged
