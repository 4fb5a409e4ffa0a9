"""Sample layer tars and docker-archives for the tests of rocmforge.assemble.image, written with the
standard library's tarfile (so that the code under test reads what another writer wrote)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

EPOCH = 1764547200  # 2025-12-01T00:00:00Z
LATER = EPOCH + 86400 * 3  # "during the build"
OLD = 1700000000  # a file from a .deb
EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"  # 1024 zero bytes


def tar_bytes(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    """members: (TarInfo, data or None) in archive order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def ti(
    name,
    kind=tarfile.REGTYPE,
    *,
    mtime=LATER,
    mode=0o644,
    uid=0,
    gid=0,
    uname="root",
    gname="root",
    linkname="",
    pax=None,
    dev=(0, 0),
):
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode, info.uid, info.gid = kind, mtime, mode, uid, gid
    info.uname, info.gname, info.linkname = uname, gname, linkname
    info.devmajor, info.devminor = dev
    if pax:
        info.pax_headers = dict(pax)
    return info


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
    if order_seed:  # a different (unsorted) archive order
        items = items[:3] + list(reversed(items[3:]))
    return tar_bytes(items)


def docker_config(stamp: str, diff_ids: list[str]) -> dict:
    cc = {
        "Hostname": stamp[:12],
        "Domainname": "",
        "User": "",
        "AttachStdin": False,
        "Tty": False,
        "Env": ["PATH=/usr/bin:/bin"],
        "Cmd": ["bash"],
        "Image": f"sha256:{stamp * 4}",
        "Volumes": None,
        "WorkingDir": "",
        "Entrypoint": None,
        "OnBuild": None,
        "Labels": {"org.opencontainers.image.title": "x"},
    }
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": cc,
        "container": stamp * 4,
        "container_config": {**cc, "Cmd": ["/bin/sh", "-c", "#(nop) LABEL x"]},
        "created": f"2026-11-29T18:50:{len(stamp):02d}.116973618Z",
        "docker_version": "20.10.24+dfsg1",
        "history": [
            {"created": "1970-01-01T00:00:00Z", "created_by": "rocmforge bootstrap: debootstrap"},
            {
                "created": f"2026-11-29T18:50:{len(stamp):02d}.8Z",
                "created_by": "/bin/sh -c #(nop)  ARG A=1",
                "empty_layer": True,
            },
            {"created": f"2026-11-29T18:51:{len(stamp):02d}.1Z", "created_by": "|1 A=1 /bin/sh -c make"},
        ],
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }


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
    files["manifest.json"] = json.dumps(
        [{"Config": cfg_name, "RepoTags": [tag], "Layers": [f"{v}/layer.tar" for v in dirs]}]
    ).encode()
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


def image_ids_read_in_chunks(archive: bytes, tmp_path) -> set[str]:
    """The image IDs rewrite_archive gives for archive read in chunks of several sizes (one, when
    the reader keeps its place across chunk bounds)."""
    from rocmforge.assemble.image.rewrite import rewrite_archive

    ids = set()
    for size in (1, 7, 512, 1 << 20):
        work = tmp_path / str(size)
        work.mkdir()
        chunks = (archive[i : i + size] for i in range(0, len(archive), size))
        ids.add(rewrite_archive(chunks, work, epoch=EPOCH, log=lambda m: None).image_id)
    return ids
