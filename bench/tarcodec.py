#!/usr/bin/env python3
"""The project's tar codec (rocmforge/assemble/image/tarcodec.py) beside the standard library's tarfile in
its streaming modes (`r|`, `w|`), printed as ratios tarfile / codec:
 (a) read: every entry of a layer and its data, hashed;
 (b) read+write: every entry copied into a GNU-format tar with times clamped and owner names
     dropped (what normalisation does to each layer, without its rules), output hashed;
 (c) byte identity: whether tarfile, through its public API, writes the bytes the codec writes
     for what normalisation must keep stable (image IDs depend on them): a layer as GNU tar
     writes it, a file with a security.capability xattr, long names, devices, numbers beyond
     octal, hard links, and Docker's 1 KiB empty layer.
The layer measured is the largest one of `docker save --image` (default: the first bootstrapped
base on the engine), else a generated one of --generated MB. Each timing is the best of --runs.
tarfile keeps its default stream buffer (10 KiB): a larger one is slower, since it copies what is
left of its buffer on every read."""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.assemble.image.tarcodec import BLOCK, REG, TarReader, TarWriter, looks_like_tar_header  # noqa: E402
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
EPOCH = 1764547200
HEADER_FIELDS = (
    (0, "name"),
    (100, "mode"),
    (108, "uid"),
    (116, "gid"),
    (124, "size"),
    (136, "mtime"),
    (148, "checksum"),
    (156, "type"),
    (157, "linkname"),
    (257, "magic"),
    (265, "uname"),
    (297, "gname"),
    (329, "devmajor"),
    (337, "devminor"),
    (345, "prefix"),
    (500, "padding"),
)


class HashSink:
    """Where the copies are written: hashed and counted, not stored."""

    def __init__(self):
        self.hash, self.size = hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return len(data)


def codec_read(src) -> None:
    h = hashlib.sha256()
    reader = TarReader(ChunkStream(src))
    for _ in reader:
        for piece in reader.data():
            h.update(piece)


def tarfile_read(src) -> None:
    h = hashlib.sha256()
    with tarfile.open(fileobj=src, mode="r|") as t:
        for m in t:
            if m.isreg():
                f = t.extractfile(m)
                while piece := f.read(CHUNK_SIZE):
                    h.update(piece)


def codec_copy(src, out) -> None:
    reader = TarReader(ChunkStream(src))
    w = TarWriter(out)
    for e in reader:
        w.add(
            replace(e, mode=e.mode & 0o7777, uname=b"", gname=b"", mtime=min(e.mtime, EPOCH)),
            reader.data() if e.type == REG else None,
        )
    w.close()


def tarfile_copy(src, out, fmt: int = tarfile.GNU_FORMAT) -> None:
    with tarfile.open(fileobj=src, mode="r|") as t, tarfile.open(fileobj=out, mode="w|", format=fmt) as w:
        for m in t:
            m.mtime, m.uname, m.gname = min(int(m.mtime), EPOCH), "", ""
            m.pax_headers = {k: v for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr.")}
            w.addfile(m, t.extractfile(m) if m.isreg() else None)


def best_of(runs: int, fn, path: Path) -> float:
    times = []
    for _ in range(runs):
        with open(path, "rb") as f:
            t0 = time.perf_counter()
            fn(f)
            times.append(time.perf_counter() - t0)
    return min(times)


def layer_of_image(ref: str, tmp: Path) -> Path:
    """The largest layer tar of `docker save ref`."""
    saved = tmp / "image.tar"
    subprocess.run([DOCKER, "save", "-o", str(saved), ref], check=True)
    with tarfile.open(saved) as t:
        m = max(
            (m for m in t.getmembers() if m.isfile() and not m.name.endswith((".json", "json", "VERSION"))),
            key=lambda m: m.size,
        )
        (tmp / "layer.tar").write_bytes(t.extractfile(m).read())
    saved.unlink()
    return tmp / "layer.tar"


def generated_layer(mb: int, tmp: Path) -> Path:
    """A layer shaped like a package install: directories, many small files and a few large ones,
    symlinks, hard links and long names, written in pax format as Docker's writer does."""
    rng = random.Random(0)
    path, total, n = tmp / "layer.tar", 0, 0
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        while total < mb * 10**6:
            d = tarfile.TarInfo(f"usr/lib/pkg{n:05d}" + ("-" + "x" * 100 if n % 50 == 0 else ""))
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, EPOCH + n
            t.addfile(d)
            for k in range(rng.randint(2, 12)):
                size = int(rng.lognormvariate(8, 2.5)) % (64 << 20)
                f = tarfile.TarInfo(f"{d.name}/file{k}.so")
                f.size, f.mode, f.mtime = size, 0o644, EPOCH + k
                t.addfile(f, io.BytesIO(rng.randbytes(size)))
                total += size
            link = tarfile.TarInfo(f"{d.name}/link")
            hard = n % 3
            link.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
            link.linkname = f"{d.name}/file0.so" if hard else "file0.so"
            t.addfile(link)
            n += 1
    return path


def image_default() -> str | None:
    refs = subprocess.run(
        [DOCKER, "images", "--format", "{{.Repository}}:{{.Tag}}", "rocmforge/base-*"], capture_output=True, text=True
    ).stdout.split()
    return sorted(refs)[0] if refs else None


def identity_cases() -> dict[str, bytes]:
    """Small layers, each holding one thing normalisation must write the same way every time."""

    def tar(*members) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for info, data in members:
                info.size = len(data or b"")
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()

    def ti(name, kind=tarfile.REGTYPE, **attrs):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = kind, 0o644, EPOCH - 5
        for k, v in attrs.items():
            setattr(info, k, v)
        return info

    cap = "\x01\x00\x00\x02\x00\x20\x00\x00" + "\x00" * 12
    return {
        "plain files and directories": tar((ti("etc", tarfile.DIRTYPE, mode=0o755), None), (ti("etc/a"), b"a\n")),
        "xattr (security.capability)": tar(
            (ti("usr/bin/ping", mode=0o755, pax_headers={"SCHILY.xattr.security.capability": cap}), b"ELF")
        ),
        "long name and long link target": tar(
            (ti("usr/share/" + "d" * 120 + "/f"), b"x"),
            (ti("usr/lib/l", tarfile.SYMTYPE, linkname="/" + "t" * 130), None),
        ),
        "devices and a fifo": tar(
            (ti("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3), None),
            (ti("dev/loop0", tarfile.BLKTYPE, devmajor=7), None),
            (ti("run/fifo", tarfile.FIFOTYPE), None),
        ),
        "uid beyond octal, mtime before 1970": tar((ti("big", uid=3_000_000, mtime=-1), b"x")),
        "hard link": tar(
            (ti("usr/bin/perl5"), b"ELF"), (ti("usr/bin/perl", tarfile.LNKTYPE, linkname="usr/bin/perl5"), None)
        ),
        "empty layer": bytes(2 * BLOCK),
    }


def first_difference(ours: bytes, theirs: bytes) -> str:
    if ours == theirs:
        return "identical"
    at = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    block = ours[at - at % BLOCK : at - at % BLOCK + BLOCK]
    where = f"byte {at}"
    if at < min(len(ours), len(theirs)) and block != bytes(BLOCK) and looks_like_tar_header(block):
        start, field = [(offset, name) for offset, name in HEADER_FIELDS if offset <= at % BLOCK][-1]
        end = next((offset for offset, _ in HEADER_FIELDS if offset > start), BLOCK)
        base = at - at % BLOCK
        where += (
            f", header field {field}: codec {ours[base + start : base + end].rstrip(bytes(1))!r}, "
            f"tarfile {theirs[base + start : base + end].rstrip(bytes(1))!r}"
        )
    return f"differs at {where} (codec {len(ours)} bytes, tarfile {len(theirs)})"


def copy_bytes(copy, data: bytes, **kw) -> bytes:
    out = io.BytesIO()
    copy(io.BytesIO(data), out, **kw)
    return out.getvalue()


def speed(layer: Path, runs: int) -> None:
    entries = sum(1 for _ in TarReader(ChunkStream(open(layer, "rb"))))
    mb = layer.stat().st_size / 1e6
    print(f"layer: {mb:,.1f} MB, {entries} entries; best of {runs}")
    rows = [
        ("read", codec_read, tarfile_read),
        ("read+write", lambda f: codec_copy(f, HashSink()), lambda f: tarfile_copy(f, HashSink())),
    ]
    for name, ours, theirs in rows:
        a, b = best_of(runs, ours, layer), best_of(runs, theirs, layer)
        print(
            f"  {name:<11} codec {a:6.2f} s ({mb / a:5.0f} MB/s)   tarfile {b:6.2f} s ({mb / b:5.0f} MB/s)   "
            f"tarfile / codec = {b / a:.2f}"
        )
    with open(layer, "rb") as f:
        data = f.read()
    ours = copy_bytes(codec_copy, data)
    print(f"  its copy, tarfile against codec: {first_difference(ours, copy_bytes(tarfile_copy, data))}")
    print(f"  its copy by the codec is the layer itself: {ours == data}")


def identity() -> None:
    print("byte identity, tarfile w| (GNU format unless said) against the codec:")
    for name, data in identity_cases().items():
        ours = copy_bytes(codec_copy, data)
        theirs = copy_bytes(tarfile_copy, data)
        print(f"  {name:<38} {first_difference(ours, theirs)}")
        if "xattr" in name:
            print(f"  {'':<38} the xattr kept by tarfile: {xattrs_of(theirs)}, by the codec: {xattrs_of(ours)}")
            pax = copy_bytes(tarfile_copy, data, fmt=tarfile.PAX_FORMAT)
            print(f"  {name + ', PAX format':<38} {first_difference(ours, pax)}")


def xattrs_of(data: bytes) -> bool:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return any(k.startswith("SCHILY.xattr.") for m in t.getmembers() for k in m.pax_headers)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", help="measure the largest layer of this image (default: a bootstrapped base)")
    ap.add_argument("--generated", type=int, metavar="MB", help="measure a generated layer of this size instead")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tarcodec-") as tmp:
        ref = None if args.generated else args.image or image_default()
        if ref:
            print(f"the largest layer of {ref}")
            layer = layer_of_image(ref, Path(tmp))
        else:
            print(f"a generated layer ({args.generated or 300} MB)")
            layer = generated_layer(args.generated or 300, Path(tmp))
        speed(layer, args.runs)
    identity()
    return 0


if __name__ == "__main__":
    sys.exit(main())
