"""Debian archives' signed indexes, read on the host: a suite's `InRelease`, trusted only once
gpgv checks its signature against the keyrings of its source (for Debian's own archive, the host's
Debian archive keyring), the `Packages` index it gives the hash of, and each package's pool path
and `.deb` SHA-256 from that index. What `build.py lock` records as a .deb's hash and what the
outside check downloads against. The entries used are kept in the user's cache; the mirror is the
one builds use (ROCMFORGE_DEBIAN_MIRROR, else Debian's own archive)."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import subprocess
import tempfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmforge.host import aptmirror
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache

KEYRING = os.environ.get("ROCMFORGE_DEBIAN_KEYRING", "/usr/share/keyrings/debian-archive-keyring.gpg")
ARCHS = ("amd64", "all")


def cache_dir() -> Path:
    return user_cache("debs")


def kept_deb(sha256: str, cache: Path | None = None) -> Path:
    """Where the cache (default: the user's) keeps the .deb of that SHA-256: the one name the build's
    .deb proxy and the outside check share."""
    return (cache or cache_dir()) / f"{sha256}.deb"


def get(url: str) -> bytes:
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
    raw = get(src.url(f"dists/{src.suite}/InRelease"))
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
        raw = get(src.url(f"dists/{src.suite}/{index}"))
        if hashlib.sha256(raw).hexdigest() != want:
            raise BuildError(f"{index} of {src.uri} {src.suite} does not match the hash its signed InRelease gives")
        return unpack(raw).decode(errors="replace")
    return ""


def _lookup(known: dict, name: str, version: str) -> dict | None:
    return next((known[k] for a in ARCHS if (k := f"{name}={version}={a}") in known), None)


def locate(
    sources: list[AptSource], packages: dict[str, str], locked: Mapping[str, str] | None = None
) -> dict[str, tuple[AptSource, str, str]]:
    """name -> (source, pool path, sha256) of each package at its exact version in the signed
    indexes of sources; BuildError naming every one none of them lists, and every one whose index
    hash is not the one locked gives it (deb_key -> sha256: matrix.lock's debs section)."""
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
    moved = [
        f"{n}={packages[n]} (index {sha[:12]}, lock {want[:12]})"
        for n, (_, _, sha) in sorted(found.items())
        if (want := (locked or {}).get(deb_key(n, packages[n]))) and want != sha
    ]
    if moved:
        raise BuildError(
            f"the signed index gives another .deb than matrix.lock records for {', '.join(moved)}: the archive "
            "changed what it serves at a locked version, or the lock was edited; nothing is fetched"
        )
    return found


def deb_key(name: str, version: str) -> str:
    """A package's key in matrix.lock's debs section: name=version, as apt-get install names it."""
    return f"{name}={version}"
