"""Debian packages as the archive publishes them, fetched and read on the host: the source an
image's packaged files are checked against, never the image's own /var/lib/dpkg.

A package is found in its suite's signed index (host.debarchive: InRelease checked with gpgv, the
Packages index by the hash it gives, each `.deb`'s SHA-256 from that index, and the same hash as
matrix.lock records it). What was verified is kept in the user's cache (the `.deb`s by their
SHA-256, the index entries used, and each `.deb`'s file list), so a second check downloads nothing;
nor does a first check after a build on this host, whose apt fetched the `.deb`s into the same cache
(host.debproxy).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from rocmforge.host.debarchive import AptSource, cache_dir, debian, get, kept_deb, locate
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write

__all__ = ["AptSource", "cache_dir", "debian", "locate"]  # where the outside check finds the archive

FORMAT = 2  # bump when what a cached file list holds changes


@dataclass(frozen=True)
class DebFile:
    """One entry of a .deb's data.tar: what dpkg unpacks at that path."""

    type: str  # "f" file, "d" directory, "l" symlink, "h" hard link (target in link), "c"/"b"/"p" special
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str  # a file's content; "" otherwise
    link: str  # a symlink's or hard link's target
    md5: str = ""  # a file's content, as dpkg's status records conffiles


@dataclass(frozen=True)
class DebContents:
    package: str
    version: str
    sha256: str  # of the .deb
    files: dict[str, DebFile]  # path without the leading "./" or "/": "usr/bin/python3.13"
    control: dict[str, bytes]  # control.tar's members (md5sums, conffiles, postinst, control, ...)


def download(src: AptSource, pool_path: str, sha256: str) -> bytes:
    """The .deb's bytes, from the cache (a .deb kept by fetch) or the source, checked against sha256."""
    kept = kept_deb(sha256)
    if kept.is_file():
        return kept.read_bytes()
    raw = get(src.url(pool_path))
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise BuildError(f"{src.url(pool_path)} does not have the SHA-256 the signed index gives")
    return raw


def fetch(src: AptSource, pool_path: str, sha256: str) -> Path:
    """The .deb kept in the cache (what the judge's interpreter is unpacked from), checked against sha256."""
    path = kept_deb(sha256)
    if not path.is_file():
        atomic_write(path, download(src, pool_path, sha256))
    return path


def ar_members(data: bytes) -> dict[str, bytes]:
    if not data.startswith(b"!<arch>\n"):
        raise BuildError("not a Debian package (no ar header)")
    out, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        out[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    return out


def open_tar(member: str, data: bytes) -> tarfile.TarFile:
    if member.endswith(".zst"):
        data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:*")


def rel_path(name: str) -> str:
    return "" if name in (".", "./") else name.removeprefix("./").removeprefix("/").rstrip("/")


def _read(raw: bytes, package: str, version: str, sha256: str) -> DebContents:
    members = ar_members(raw)
    data_name = next(n for n in members if n.startswith("data.tar"))
    control_name = next(n for n in members if n.startswith("control.tar"))
    files: dict[str, DebFile] = {}
    with open_tar(data_name, members[data_name]) as tf:
        for m in tf:
            rel = rel_path(m.name)
            if not rel:
                continue
            digest = md5 = ""
            if m.isfile():
                f = tf.extractfile(m)
                h, h5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - dpkg's own conffile hash
                while f is not None and (chunk := f.read(1 << 20)):
                    h.update(chunk)
                    h5.update(chunk)
                digest, md5 = h.hexdigest(), h5.hexdigest()
            kind = "f" if m.isfile() else "d" if m.isdir() else "l" if m.issym() else "h" if m.islnk() else "c"
            link = rel_path(m.linkname) if m.islnk() else m.linkname
            files[rel] = DebFile(kind, m.mode & 0o7777, m.uid, m.gid, m.size, digest, link, md5)
    control: dict[str, bytes] = {}
    with open_tar(control_name, members[control_name]) as tf:
        for m in tf:
            if m.isfile():
                f = tf.extractfile(m)
                control[rel_path(m.name)] = f.read() if f else b""
    return DebContents(package, version, sha256, files, control)


def contents(src: AptSource, pool_path: str, sha256: str, package: str, version: str) -> DebContents:
    """The .deb's file list and control files, from the cache or read from the fetched .deb."""
    listed = cache_dir() / f"{sha256}.v{FORMAT}.json"
    try:
        d = json.loads(listed.read_text())
        return DebContents(
            package,
            version,
            sha256,
            {k: DebFile(*v) for k, v in d["files"].items()},
            {k: bytes.fromhex(v) for k, v in d["control"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    # the check keeps only the file list (the .debs of a ROCm stack are gigabytes, their lists
    # megabytes); a build through host.debproxy has kept the .deb itself, which download() reads
    deb = _read(download(src, pool_path, sha256), package, version, sha256)
    doc = {
        "files": {k: [v.type, v.mode, v.uid, v.gid, v.size, v.sha256, v.link, v.md5] for k, v in deb.files.items()},
        "control": {k: v.hex() for k, v in deb.control.items()},
    }
    atomic_write(listed, json.dumps(doc).encode())
    return deb
