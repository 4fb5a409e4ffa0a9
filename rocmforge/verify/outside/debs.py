"""Debian packages as the archive publishes them, fetched and read on the host: the source an
image's packaged files are checked against, never the image's own /var/lib/dpkg.

A package is found in the suite's `Packages` index, which is trusted only through the suite's
`InRelease`, whose signature gpgv checks against the host's Debian archive keyring; the index's
own hash comes from that signed file, and each `.deb`'s SHA-256 from the index. What was
verified is kept in the user's cache (the `.deb`s by their SHA-256, the index entries used, and
each `.deb`'s file list), so a second check downloads nothing. The mirror is the one builds use
(ROCMFORGE_DEBIAN_MIRROR, else Debian's own archive).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rocmforge.host import aptmirror
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache

KEYRING = os.environ.get("ROCMFORGE_DEBIAN_KEYRING", "/usr/share/keyrings/debian-archive-keyring.gpg")
ARCHS = ("amd64", "all")
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


def cache_dir() -> Path:
    return user_cache("debs")


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:  # noqa: S310 - the archive's own http URLs
            return r.read()
    except OSError as exc:
        raise BuildError(f"cannot fetch {url}: {exc}") from None


@dataclass(frozen=True)
class AptSource:
    """One `deb URI SUITE COMPONENT...` line, with the keyrings (files on this host) that may sign
    its InRelease."""

    uri: str
    suite: str
    components: tuple[str, ...]
    keyrings: tuple[str, ...]

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.uri} {self.suite} {' '.join(self.components)}".encode()).hexdigest()[:16]

    def url(self, path: str) -> str:
        """path under the source, through ROCMFORGE_DEBIAN_MIRROR where the source is Debian's archive."""
        base = self.uri.rstrip("/")
        if base in (aptmirror.CANONICAL, aptmirror.CANONICAL.replace("http:", "https:")):
            base = aptmirror.effective().rstrip("/")
        return f"{base}/{path}"


def debian(suite: str) -> AptSource:
    """Debian's archive (main), signed by the host's Debian archive keyring: a bootstrapped stack's source."""
    return AptSource(aptmirror.CANONICAL, suite, ("main",), (KEYRING,))


def _verified_release(src: AptSource) -> str:
    """The source's InRelease text, once gpgv has checked its signature with the source's keyrings."""
    raw = _get(src.url(f"dists/{src.suite}/InRelease"))
    with tempfile.NamedTemporaryFile(suffix=".InRelease") as f:
        f.write(raw)
        f.flush()
        keyrings = [a for k in src.keyrings for a in ("--keyring", k)]
        r = subprocess.run(["gpgv", *keyrings, "--status-fd", "1", f.name], capture_output=True)
    status = r.stderr.decode(errors="replace") + r.stdout.decode(errors="replace")
    if "[GNUPG:] VALIDSIG" not in status:
        raise BuildError(
            f"the InRelease of {src.uri} {src.suite} has no valid signature by a key of {', '.join(src.keyrings)}"
        )
    # only the signed text is read: what comes before or after the signature block is ignored
    return raw.decode(errors="replace").split("\n\n", 1)[1].split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]


def _index_hash(release: str, name: str) -> str | None:
    section = release.split("\nSHA256:\n", 1)[-1]
    for line in section.splitlines():
        if not line.startswith(" "):
            break
        digest, _size, path = line.split()
        if path == name:
            return digest
    return None


def _stanzas(text: str, wanted: set[str]) -> dict[str, dict[str, str]]:
    """name=version=arch -> fields, for the stanzas of packages in wanted."""
    out = {}
    for block in text.split("\n\n"):
        if not block.startswith("Package: "):
            continue
        name = block[9 : block.index("\n")] if "\n" in block else block[9:]
        if name not in wanted:
            continue
        fields = {}
        for line in block.splitlines():
            if line and not line[0].isspace() and ": " in line:
                k, v = line.split(": ", 1)
                fields[k] = v
        out[f"{name}={fields.get('Version')}={fields.get('Architecture')}"] = fields
    return out


def _signed_index(src: AptSource, component: str, release: str) -> str:
    """The component's Packages index, checked against the hash the signed release gives."""
    for name, unpack in (("Packages.xz", lzma.decompress), ("Packages.gz", gzip.decompress)):
        index = f"{component}/binary-amd64/{name}"
        want = _index_hash(release, index)
        if want is None:
            continue
        raw = _get(src.url(f"dists/{src.suite}/{index}"))
        if hashlib.sha256(raw).hexdigest() != want:
            raise BuildError(f"{index} of {src.uri} {src.suite} does not match the hash its signed InRelease gives")
        return unpack(raw).decode(errors="replace")
    return ""


def _lookup(known: dict, name: str, version: str) -> dict | None:
    return next((known[k] for a in ARCHS if (k := f"{name}={version}={a}") in known), None)


def locate(sources: list[AptSource], packages: dict[str, str]) -> dict[str, tuple[AptSource, str, str]]:
    """name -> (source, pool path, sha256) of each package at its exact version in the signed
    indexes of sources; BuildError naming every one none of them lists."""
    found: dict[str, tuple[AptSource, str, str]] = {}
    missing = dict(packages)
    for src in sources:
        cache = cache_dir() / f"index-{src.key}.json"
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
        if any(_lookup(known, n, v) is None for n, v in missing.items()):
            release = _verified_release(src)
            for component in src.components:
                for k, fields in _stanzas(_signed_index(src, component, release), set(missing)).items():
                    known[k] = {"Filename": fields["Filename"], "SHA256": fields["SHA256"]}
            atomic_write(cache, json.dumps(known, sort_keys=True).encode())
        for name, version in list(missing.items()):
            hit = _lookup(known, name, version)
            if hit is not None:
                found[name] = (src, hit["Filename"], hit["SHA256"])
                del missing[name]
    if missing:
        raise BuildError(
            f"no source ({'; '.join(f'{s.uri} {s.suite}' for s in sources)}) lists "
            f"{', '.join(f'{n}={v}' for n, v in sorted(missing.items()))}: the packages the image must hold cannot "
            f"be fetched to check its files against (a Debian mirror that keeps them: {aptmirror.ENV})"
        )
    return found


def download(src: AptSource, pool_path: str, sha256: str) -> bytes:
    """The .deb's bytes, from the cache (a .deb kept by fetch) or the source, checked against sha256."""
    kept = cache_dir() / f"{sha256}.deb"
    if kept.is_file():
        return kept.read_bytes()
    raw = _get(src.url(pool_path))
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise BuildError(f"{src.url(pool_path)} does not have the SHA-256 the signed index gives")
    return raw


def fetch(src: AptSource, pool_path: str, sha256: str) -> Path:
    """The .deb kept in the cache (what the judge's interpreter is unpacked from), checked against sha256."""
    path = cache_dir() / f"{sha256}.deb"
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
    # only the file list is kept: the .debs of a ROCm stack are gigabytes, their lists megabytes
    deb = _read(download(src, pool_path, sha256), package, version, sha256)
    doc = {
        "files": {k: [v.type, v.mode, v.uid, v.gid, v.size, v.sha256, v.link, v.md5] for k, v in deb.files.items()},
        "control": {k: v.hex() for k, v in deb.control.items()},
    }
    atomic_write(listed, json.dumps(doc).encode())
    return deb
