"""The interpreter the in-image probes run on: the image's own Python version, taken from the .debs
the signed archive publishes (fetched and hash-checked on the host), copied into the suites'
container beside the probes, and called by absolute path with a cleared environment and no site
initialisation. A wrapper, .pth file or edited standard library in the image never runs in it.

Where no such .deb can be had (a registry stack's vendor packages), the probes run on the image's
own /usr/bin/python3 by absolute path, and the suites say so."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from dataclasses import dataclass

from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache
from rocmforge.verify.outside import debs

HOME = "/tmp/rocmforge-judge"  # in the container: a folder no image ships
_PARTS = ("python{v}-minimal", "libpython{v}-minimal", "libpython{v}-stdlib")
_SKIP = re.compile(r"^usr/share/(doc|man|lintian|binfmts)/|/test/|/idlelib/|/tkinter/")


@dataclass(frozen=True)
class Judge:
    python: tuple[str, ...]  # argv that stands for "python3" in a probe command
    tar: bytes  # put into the container's /tmp before any probe runs; b"" for none
    what: str  # for the report: where the interpreter came from
    sha256: str  # of tar


def _version(packages: dict[str, str]) -> str | None:
    found = sorted(m.group(1) for n in packages if (m := re.fullmatch(r"python(3\.\d+)-minimal", n)))
    return found[-1] if found else None


def _tree(raws: list[bytes]) -> bytes:
    """A tar of the three packages' files under rocmforge-judge/ (for put_archive into /tmp):
    absolute symlinks are left out, since they would reach into the image."""
    buf = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for raw in raws:
            members = debs.ar_members(raw)
            name = next(n for n in members if n.startswith("data.tar"))
            with debs.open_tar(name, members[name]) as tf:
                for m in tf:
                    rel = debs.rel_path(m.name)
                    if not rel or rel in seen or _SKIP.search(rel) or (m.issym() and m.linkname.startswith("/")):
                        continue
                    seen.add(rel)
                    m.name = f"rocmforge-judge/{rel}"
                    if m.islnk():
                        m.linkname = f"rocmforge-judge/{debs.rel_path(m.linkname)}"
                    m.uid = m.gid = 0
                    m.uname = m.gname = "root"
                    out.addfile(m, tf.extractfile(m) if m.isfile() else None)
    return buf.getvalue()


def for_image(suite: str | None, packages: dict[str, str], locked: dict[str, str] | None = None) -> Judge:
    """The judge for an image holding packages (name -> version) from Debian suite (None: the
    stack's packages do not come from Debian's archive alone: the image's own interpreter); locked:
    the .debs' hashes matrix.lock records (name=version -> sha256)."""
    version = _version(packages)
    fallback = Judge(("/usr/bin/python3", "-E", "-s", "-S"), b"", "the image's own /usr/bin/python3", "")
    if suite is None or version is None:
        return fallback
    names = {p.format(v=version): packages.get(p.format(v=version)) for p in _PARTS}
    if any(v is None for v in names.values()):
        return fallback
    located = debs.locate([debs.debian(suite)], {n: v for n, v in names.items() if v}, locked)
    key = hashlib.sha256("".join(sha for _, _, sha in located.values()).encode()).hexdigest()
    kept = user_cache("judge") / f"{key}.tar"
    try:
        tar = kept.read_bytes()
    except OSError:
        tar = _tree([debs.fetch(src, pool, sha).read_bytes() for src, pool, sha in located.values()])
        atomic_write(kept, tar)
    if f"rocmforge-judge/usr/bin/python{version}".encode() not in tar:
        raise BuildError(f"python{version}-minimal's .deb holds no usr/bin/python{version}")
    return Judge(
        (f"{HOME}/usr/bin/python{version}", "-E", "-s", "-S"),
        tar,
        f"python{version} {names[f'python{version}-minimal']} from Debian {suite}'s signed archive, "
        "copied in from the host",
        hashlib.sha256(tar).hexdigest(),
    )
