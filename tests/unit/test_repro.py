"""repro's pure parts on synthetic layers and docker-archives: no engine."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rocmforge import bootstrap, repro

EPOCH = 1764547200                   # 2025-12-01T00:00:00Z
LATER = EPOCH + 86400 * 3            # "during the build"
OLD = 1700000000                     # a file from a .deb
EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"   # 1024 zero bytes


def tar_bytes(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    """members: (TarInfo, data or None) in archive order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def ti(name, kind=tarfile.REGTYPE, *, mtime=LATER, mode=0o644, uid=0, gid=0, uname="root", gname="root",
       linkname="", pax=None, dev=(0, 0)):
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode, info.uid, info.gid = kind, mtime, mode, uid, gid
    info.uname, info.gname, info.linkname = uname, gname, linkname
    info.devmajor, info.devminor = dev
    if pax:
        info.pax_headers = dict(pax)
    return info


def rewrite(data: bytes, tmp_path: Path, name="out.tar", epoch=EPOCH):
    logs = []
    src = tmp_path / (name + ".in")
    src.write_bytes(data)
    with open(src, "rb") as f:
        res = repro.normalise_layer(f, tmp_path / name, epoch=epoch, log=logs.append)
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


def build_layer(stamp: str, *, order_seed=0, unames=("root", "root")) -> bytes:
    """A layer as the classic builder writes one: the same files each time, with run-specific
    times, owner names, pax atime/ctime, logs, caches, lists and temporary files."""
    t = LATER + order_seed * 7
    pax = {"atime": str(t + 1), "ctime": str(t + 2)}
    u, g = unames
    items = [
        (ti("etc", tarfile.DIRTYPE, mtime=t, mode=0o755, uname=u, gname=g), None),
        (ti("etc/machine-id", mtime=t, uname=u, gname=g), f"{stamp}\n".encode()),
        (ti("opt", tarfile.DIRTYPE, mtime=t, mode=0o755, uname=u, gname=g, pax=pax), None),
        (ti("opt/tool", mtime=OLD, mode=0o755, uname=u, gname=g, pax=pax), b"#!/bin/sh\necho tool\n"),
        (ti("opt/new.conf", mtime=t, uname=u, gname=g), b"setting=1\n"),
        (ti("tmp", tarfile.DIRTYPE, mtime=t, mode=0o1777, uname=u, gname=g), None),
        (ti(f"tmp/build-{stamp}", mtime=t, uname=u, gname=g), stamp.encode()),
        (ti("var", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/cache", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/cache/apt", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/cache/apt/pkgcache.bin", mtime=t), stamp.encode() * 3),
        (ti("var/cache/ldconfig", tarfile.DIRTYPE, mtime=t, mode=0o700), None),
        (ti("var/cache/ldconfig/aux-cache", mtime=t), stamp.encode()),
        (ti("var/lib", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/lib/apt", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/lib/apt/lists", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/lib/apt/lists/lock", mtime=t, mode=0o640), b""),
        (ti("var/lib/apt/lists/partial", tarfile.DIRTYPE, mtime=t, mode=0o700), None),
        (ti("var/lib/apt/lists/deb.debian.org_debian_dists_trixie_InRelease", mtime=t), stamp.encode()),
        (ti("var/lib/dpkg", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/lib/dpkg/status", mtime=t), b"Package: tool\n"),
        (ti("var/lib/dpkg/status-old", mtime=t), stamp.encode()),
        (ti("var/log", tarfile.DIRTYPE, mtime=t, mode=0o755), None),
        (ti("var/log/dpkg.log", mtime=t), f"{stamp} install tool\n".encode()),
        (ti("var/log/wtmp", mtime=t, mode=0o664, gid=43), b""),
    ]
    if order_seed:                        # a different (unsorted) archive order
        items = items[:3] + list(reversed(items[3:]))
    return tar_bytes(items)


# --- layers ---------------------------------------------------------------------------------------

def test_mtimes_clamped_owners_numeric(tmp_path):
    data = tar_bytes([
        (ti("opt", tarfile.DIRTYPE, mtime=LATER, mode=0o755), None),
        (ti("opt/old", mtime=OLD, uid=1000, gid=1000, uname="alice", gname="staff"), b"old\n"),
        (ti("opt/new", mtime=LATER, pax={"atime": "1.5", "ctime": "2.5", "mtime": f"{LATER}.75"}), b"new\n"),
    ])
    res, out, _ = rewrite(data, tmp_path)
    m = members(out)
    assert m["opt/old"].mtime == OLD
    assert m["opt/new"].mtime == EPOCH and m["opt"].mtime == EPOCH
    assert (m["opt/old"].uid, m["opt/old"].gid, m["opt/old"].uname, m["opt/old"].gname) == (1000, 1000, "", "")
    assert all(not x.pax_headers for x in m.values())          # no atime/ctime records
    assert res.clamped == 2
    # Every header block is a GNU one (tarfile reports its own default format when reading, so
    # the magic bytes are what tells).
    headers = [out[o:o + repro.BLOCK] for o in range(0, len(out), repro.BLOCK)
               if out[o + 257:o + 265] in (repro.GNU_MAGIC, b"ustar\x0000")]
    assert headers and all(h[257:265] == repro.GNU_MAGIC for h in headers)
    assert len(out) % repro.RECORD == 0


def test_dropped_and_blanked_paths(tmp_path):
    res, out, _ = rewrite(build_layer("one"), tmp_path)
    got = set(names(out))
    for gone in ("tmp/build-one", "var/cache/apt/pkgcache.bin", "var/cache/ldconfig/aux-cache",
                 "var/lib/apt/lists/deb.debian.org_debian_dists_trixie_InRelease", "var/lib/dpkg/status-old",
                 "var/log/dpkg.log"):
        assert gone not in got, gone
    for kept in ("tmp", "var/log", "var/log/wtmp", "var/lib/apt/lists/lock", "var/lib/apt/lists/partial",
                 "var/cache/ldconfig", "var/lib/dpkg/status", "opt/tool"):
        assert kept in got, kept
    assert content(out, "etc/machine-id") == b""
    assert members(out)["var/log/wtmp"].gid == 43
    assert res.blanked == ["etc/machine-id"]
    assert len(res.dropped) == 6


def test_more_drop_rules(tmp_path):
    data = tar_bytes([
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
    ])
    _, out, _ = rewrite(data, tmp_path)
    assert names(out) == ["root", "root/.cache", "root/.profile", "var/cache/apt/archives/jq.deb",
                          "var/cache/debconf/config.dat"]


def test_whiteouts_kept_exactly_and_opaque_dirs_sorted(tmp_path):
    data = tar_bytes([                                        # Docker's order: the marker follows its dir
        (ti("root", tarfile.DIRTYPE, mode=0o700), None),
        (ti("root/.wh..wh..opq", mtime=0, mode=0o755), b""),
        (ti("root/-x"), b""),
        (ti("root/.a"), b"a"),
        (ti("tmp", tarfile.DIRTYPE, mode=0o1777), None),
        (ti("tmp/.wh.stale"), b""),
        (ti("usr/bin/.wh.tail", mode=0o600), b""),
        (ti("var/log/.wh.old.log", mode=0o600), b""),
        (ti("var/lib/apt/lists/.wh.deb.debian.org_Packages"), b""),
    ])
    res, out, _ = rewrite(data, tmp_path)
    assert res.resorted
    assert names(out) == ["root", "root/-x", "root/.a", "root/.wh..wh..opq", "tmp", "tmp/.wh.stale",
                          "usr/bin/.wh.tail", "var/lib/apt/lists/.wh.deb.debian.org_Packages",
                          "var/log/.wh.old.log"]
    assert members(out)["usr/bin/.wh.tail"].mode == 0o600


def test_links_devices_and_fifos_survive(tmp_path):
    long_target = "usr/lib/" + "x" * 120
    data = tar_bytes([
        (ti("dev", tarfile.DIRTYPE, mode=0o755), None),
        (ti("dev/null", tarfile.CHRTYPE, mode=0o666, dev=(1, 3)), None),
        (ti("dev/loop0", tarfile.BLKTYPE, mode=0o660, dev=(7, 0)), None),
        (ti("run/fifo", tarfile.FIFOTYPE, mode=0o644), None),
        (ti("usr/bin/perl5.40", mode=0o755), b"ELF perl"),
        (ti("usr/bin/perl", tarfile.LNKTYPE, mode=0o755, linkname="usr/bin/perl5.40"), None),
        (ti("usr/bin/sh", tarfile.SYMTYPE, mode=0o777, linkname="dash"), None),
        (ti("usr/lib/long", tarfile.SYMTYPE, mode=0o777, linkname=long_target), None),
    ])
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
    data = tar_bytes([
        (ti("z", tarfile.DIRTYPE, mode=0o755), None),
        (ti("z/data", mode=0o755), b"payload"),
        (ti("a", tarfile.DIRTYPE, mode=0o755), None),
        (ti("a/link", tarfile.LNKTYPE, mode=0o755, linkname="z/data"), None),
        (ti("a/link2", tarfile.LNKTYPE, mode=0o755, linkname="z/data"), None),
    ])
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
    data = tar_bytes([
        (ti("tmp/x"), b"scratch"),
        (ti("usr/share/x", tarfile.LNKTYPE, linkname="tmp/x"), None),
        (ti("usr/share/y"), b"y"),
    ])
    res, out, logs = rewrite(data, tmp_path)
    assert names(out) == ["usr/share/y"]
    assert "usr/share/x" in res.dropped and any("usr/share/x" in line for line in logs)


def test_xattrs_kept_in_a_pax_header(tmp_path):
    cap = "\x01\x00\x00\x02\x00\x20\x00\x00"
    data = tar_bytes([(ti("usr/bin/ping", mode=0o755, pax={"SCHILY.xattr.security.capability": cap,
                                                           "atime": "5"}), b"ELF")])
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
        data = tar_bytes([
            (ti("opt/m/m.py", mtime=t), b"x = 1\n"),
            (ti("opt/m/__pycache__/m.cpython-313.pyc", mtime=t), pyc(0, t)),
            (ti("usr/lib/python3/dist-packages/__pycache__/deb.cpython-313.pyc", mtime=OLD), pyc(0, OLD)),
            (ti("usr/lib/python3/__pycache__/h.cpython-313.pyc", mtime=t), pyc(3, 0, b"\x01" * 8)),
        ])
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
    for rel, data in {"etc/os-release": b"ID=debian\n", "etc/machine-id": b"",
                      "usr/bin/perl5.40.1": b"\x7fELF", "var/log/wtmp": b"", "var/lib/apt/lists/lock": b"",
                      "usr/share/doc/" + "p" * 95 + "/changelog.gz": b"gz",
                      "usr/lib/x86_64-linux-gnu/" + "q" * 80 + ".so.1": b"\x7fELF so"}.items():
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


def test_field_encoding_out_of_octal_range():
    assert repro._field(0o7777777, 8) == b"7777777\x00"
    big = repro._field(1 << 40, 12)
    assert big[0] == 0x80 and repro._num(big) == 1 << 40
    neg = repro._field(-5, 12)
    assert repro._num(neg) == -5
    e = repro.Entry(name=b"big", type=repro.REG, uid=3_000_000, mtime=-1, size=0)
    data = repro.encode_header(e) + bytes(1024)
    (got,) = list(repro._TarReader(repro._Stream(io.BytesIO(data))))
    assert (got.uid, got.mtime) == (3_000_000, -1)


# --- configs and archives -------------------------------------------------------------------------

def docker_config(stamp: str, diff_ids: list[str]) -> dict:
    cc = {"Hostname": stamp[:12], "Domainname": "", "User": "", "AttachStdin": False, "Tty": False,
          "Env": ["PATH=/usr/bin:/bin"], "Cmd": ["bash"], "Image": f"sha256:{stamp * 4}", "Volumes": None,
          "WorkingDir": "", "Entrypoint": None, "OnBuild": None, "Labels": {"org.opencontainers.image.title": "x"}}
    return {"architecture": "amd64", "os": "linux", "config": cc, "container": stamp * 4,
            "container_config": {**cc, "Cmd": ["/bin/sh", "-c", "#(nop) LABEL x"]},
            "created": f"2026-11-29T18:50:{len(stamp):02d}.116973618Z", "docker_version": "20.10.24+dfsg1",
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "rocmforge bootstrap: debootstrap"},
                        {"created": f"2026-11-29T18:50:{len(stamp):02d}.8Z", "created_by": "/bin/sh -c #(nop)  ARG A=1",
                         "empty_layer": True},
                        {"created": f"2026-11-29T18:51:{len(stamp):02d}.1Z", "created_by": "|1 A=1 /bin/sh -c make"}],
            "rootfs": {"type": "layers", "diff_ids": diff_ids}}


def test_config_is_canonical_with_epoch_times():
    a, b = (repro.normalise_config(docker_config(stamp, ["sha256:old"]), ["sha256:new"], epoch=EPOCH)
            for stamp in ("aaaa", "bbbbbbbb"))
    assert a == b                                    # only times, containers and host names differed
    normalised = a
    cfg = json.loads(normalised)
    assert normalised == json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    assert cfg["created"] == "2025-12-01T00:00:00Z"
    assert {h["created"] for h in cfg["history"]} == {"2025-12-01T00:00:00Z"}
    assert cfg["history"][1] == {"created": "2025-12-01T00:00:00Z", "created_by": "/bin/sh -c #(nop)  ARG A=1",
                                 "empty_layer": True}
    assert not {"container", "container_config", "docker_version"} & cfg.keys()
    assert cfg["config"] == {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["bash"],
                             "Labels": {"org.opencontainers.image.title": "x"}}
    assert cfg["rootfs"] == {"type": "layers", "diff_ids": ["sha256:new"]}


def test_bootstrap_config_round_trips():
    from rocmforge.bases import canonical_json

    cfg = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
           "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["bash"], "Labels": {"io.rocmforge.base": "s"}},
           "rootfs": {"type": "layers", "diff_ids": ["sha256:abc"]},
           "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "rocmforge bootstrap: x"}]}
    assert repro.normalise_config(cfg, ["sha256:abc"], epoch=0) == canonical_json(cfg)


def save_archive(layers: list[bytes], stamp: str, *, tag="x:1") -> bytes:
    """A docker-archive laid out as Engine 20.10's `docker save` writes it (v1 dirs, sorted names,
    a repeated layer as a symlink)."""
    diff_ids = ["sha256:" + hashlib.sha256(x).hexdigest() for x in layers]
    cfg = json.dumps(docker_config(stamp, diff_ids)).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    dirs, seen, files = [], {}, {}
    for i, (layer, d) in enumerate(zip(layers, diff_ids)):
        v1 = hashlib.sha256(f"{stamp}{i}".encode()).hexdigest()
        dirs.append(v1)
        files[f"{v1}/VERSION"] = b"1.0"
        files[f"{v1}/json"] = json.dumps({"id": v1}).encode()
        files[f"{v1}/layer.tar"] = ("link", f"../{seen[d]}/layer.tar") if d in seen else layer
        seen.setdefault(d, v1)
    files[cfg_name] = cfg
    files["manifest.json"] = json.dumps([{"Config": cfg_name, "RepoTags": [tag],
                                          "Layers": [f"{v}/layer.tar" for v in dirs]}]).encode()
    files["repositories"] = b"{}"
    items = []
    for v in sorted(dirs):
        items.append((ti(v, tarfile.DIRTYPE, mode=0o755), None))
    for name in sorted(files):
        data = files[name]
        if isinstance(data, tuple):
            items.append((ti(name, tarfile.SYMTYPE, linkname=data[1]), None))
        else:
            items.append((ti(name), data))
    items.sort(key=lambda x: x[0].name)
    return tar_bytes(items)


def read_archive(chunks) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_archives_of_two_builds_normalise_to_the_same_image(tmp_path):
    base = tar_bytes([(ti("etc", tarfile.DIRTYPE, mtime=0, mode=0o755, uname="", gname=""), None)],
                     fmt=tarfile.GNU_FORMAT)
    outs, ids = [], []
    for k, (stamp, seed) in enumerate((("aaaa", 0), ("bbbbbbbb", 1))):
        arch = save_archive([base, build_layer(stamp, order_seed=seed), bytes(1024), bytes(1024)], stamp)
        work = tmp_path / f"w{k}"
        work.mkdir()
        rw = repro.rewrite_archive(io.BytesIO(arch), work, epoch=EPOCH, log=lambda m: None)
        ids.append(rw.image_id)
        outs.append(b"".join(repro.archive_chunks(rw, ["rocmforge/x:content-1", "rocmforge/x:stack"])))
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
    arch = save_archive([tar_bytes([(ti("a"), b"a" * 3000)])], "cc")
    ids = set()
    for size in (1, 7, 512, 1 << 20):
        work = tmp_path / str(size)
        work.mkdir()
        chunks = (arch[i:i + size] for i in range(0, len(arch), size))
        ids.add(repro.rewrite_archive(chunks, work, epoch=EPOCH, log=lambda m: None).image_id)
    assert len(ids) == 1


def test_corrupt_archive_is_refused(tmp_path):
    with pytest.raises(repro.ReproError):
        repro.rewrite_archive(io.BytesIO(b"not a tar" * 100), tmp_path, epoch=EPOCH, log=lambda m: None)


# --- diffs ----------------------------------------------------------------------------------------

def test_compare_layers_names_the_first_difference():
    def summary(data):
        return repro.summarise_layer(repro._Stream(io.BytesIO(data)))

    a = tar_bytes([(ti("opt", tarfile.DIRTYPE), None), (ti("opt/stamp", mtime=EPOCH), b"1764547200123\n"),
                   (ti("opt/z", mode=0o644), b"z")])
    b = tar_bytes([(ti("opt", tarfile.DIRTYPE), None), (ti("opt/stamp", mtime=EPOCH), b"1764547200999\n"),
                   (ti("opt/z", mode=0o600), b"z")])
    d = repro.compare_layers(summary(a), summary(b))
    assert d == {"path": "/opt/stamp", "field": "content", "a": hashlib.sha256(b"1764547200123\n").hexdigest(),
                 "b": hashlib.sha256(b"1764547200999\n").hexdigest()}
    c = tar_bytes([(ti("opt", tarfile.DIRTYPE), None), (ti("opt/z", mode=0o600), b"z")])
    assert repro.compare_layers(summary(a), summary(c))["field"] == "presence"
    assert repro.compare_layers(summary(c), summary(b)) == {"path": "/opt/stamp", "field": "presence",
                                                            "a": False, "b": True}
    assert repro.compare_layers(summary(a), summary(a)) is None


def test_compare_configs_gives_a_json_path():
    a = {"config": {"Labels": {"org.opencontainers.image.created": "x"}, "Env": ["A=1", "B=2"]}}
    b = {"config": {"Labels": {"org.opencontainers.image.created": "y"}, "Env": ["A=1", "B=3"]}}
    assert repro.compare_configs(a, b) == {"where": "config", "field": "config.Env[1]", "a": "B=2", "b": "B=3"}
    b["config"]["Env"] = a["config"]["Env"]
    assert repro.compare_configs(a, b)["field"] == 'config.Labels["org.opencontainers.image.created"]'


def test_describe():
    line = repro.describe({"where": "layer", "index": 4, "created_by": "/bin/sh -c date > /opt/stamp",
                           "path": "/opt/stamp", "field": "content", "a": "1a2b" + "0" * 60, "b": "9f8e" + "1" * 60})
    assert line == ("layer 4 (RUN date > /opt/stamp): /opt/stamp content differs "
                    "(sha256 1a2b00000000… vs 9f8e11111111…)")
    line = repro.describe({"where": "layer", "index": 1,
                           "created_by": "|1 SOURCE_DATE_EPOCH=1764547200 /bin/bash -o pipefail -c apt-get update",
                           "path": "/etc", "field": "mtime", "a": EPOCH, "b": EPOCH + 1})
    assert line == "layer 1 (RUN apt-get update): /etc mtime differs (2025-12-01T00:00:00Z vs 2025-12-01T00:00:01Z)"
    line = repro.describe({"where": "layer", "index": 2, "created_by": "/bin/sh -c #(nop) COPY file:abc in /x ",
                           "path": "/x", "field": "presence", "a": False, "b": True})
    assert line == "layer 2 (COPY file:abc in /x): /x exists only in the second image"
    assert repro.describe({"where": "layer", "index": 0, "created_by": None, "path": "/a", "field": "mode",
                           "a": "0644", "b": "0600"}) == "layer 0: /a mode differs (0644 vs 0600)"
    assert repro.describe({"where": "config", "field": "config.Env[1]", "a": "B=2", "b": "B=3"}) == \
        "config config.Env[1] differs (B=2 vs B=3)"
    assert repro.describe(None) == "the images are identical"


def test_copy_source_checksums_in_history_become_layer_content():
    """The classic builder's `COPY dir:<sum>` includes file mtimes; two builds of identical layers
    must get identical history, named by the layer's diff ID instead."""
    def cfg(sum_):
        return {"architecture": "amd64", "os": "linux", "history": [
            {"created_by": "bootstrap"},
            {"created_by": "/bin/sh -c #(nop)  ENV A=1", "empty_layer": True},
            {"created_by": f"/bin/bash -o pipefail -c #(nop) COPY dir:{sum_} in /opt/rocmforge/venv "}]}
    diff_ids = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    a = repro.normalise_config(cfg("a" * 64), diff_ids, epoch=0)
    b = repro.normalise_config(cfg("b" * 64), diff_ids, epoch=0)
    assert a == b
    assert f"COPY dir:{'2' * 64} in /opt/rocmforge/venv" in a.decode()
    # a different layer content still gives a different config
    assert repro.normalise_config(cfg("a" * 64), [diff_ids[0], "sha256:" + "3" * 64], epoch=0) != a


def test_chain_ids_name_layers_as_the_engine_does():
    # Observed on Docker 20.10: the base's layer plus one `RUN echo hi > /hello` layer is stored
    # under layerdb/sha256/e113f00a… (chain ID = sha256 of "<parent chain ID> <diff ID>").
    from rocmforge.layerstore import chain_ids

    base = "sha256:fe6236ade2f00c765c62fa88411c9a91014aaaca2ccc2cde9d5bafda12a6f310"
    top = "sha256:04d068e3294d8d5e38a31a4e5feab5a752d01e0d2c7f9e24963eadc4c5fe3420"
    assert chain_ids([base, top]) == [base, "sha256:e113f00a450c34e5baef9231cd8ad9f8f6f82107633a6a51e37bee1426ebc87b"]


def test_build_cache_budget_from_the_environment(monkeypatch):
    from rocmforge import buildcache
    from rocmforge.errors import UserError

    monkeypatch.delenv("ROCMFORGE_BUILD_CACHE_MAX", raising=False)
    assert buildcache.budget() == 2 * 10**9
    monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", "0")
    assert buildcache.budget() == 0
    monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", "5e8")
    assert buildcache.budget() == 500_000_000
    for bad in ("lots", "-1"):
        monkeypatch.setenv("ROCMFORGE_BUILD_CACHE_MAX", bad)
        with pytest.raises(UserError, match="ROCMFORGE_BUILD_CACHE_MAX"):
            buildcache.budget()
