"""The cosign tools image: for hosts whose distribution packages no cosign (Debian 12, Ubuntu 22.04).

Debian's cosign package is one Go binary that needs only the C library. The image holds exactly the
files of the pinned .debs, cosign and libc6 (rocmforge/data/tools/cosign.json: version, pool path,
size and sha256 from trixie's Packages index), Debian's merged-/usr links and an empty /tmp, as one
layer with sorted names, mtime 0 and owner 0, under a config we write with a fixed creation time.
So the same pin gives the same image ID on every host, with no
base image and no debootstrap: a host that only pulls and verifies can make it. It is tagged
rocmforge/tools-cosign:recipe-<hash of the pin> and made once."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host import aptmirror
from rocmforge.resolve import bases
from rocmforge.resolve.bootstrap import EPOCH0, write_archive
from rocmforge.shared.errors import BuildError
from rocmforge.shared.packagedata import DATA

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

PIN_FILE = DATA / "tools" / "cosign.json"
# Bumped when the way the image is laid out changes, so an old image is never taken for a new one.
LAYOUT = 1
DEB_KEYS = ("package", "version", "filename", "size", "sha256")
# What debootstrap's merged /usr makes and no package ships: the binary's interpreter is /lib64/...
MERGED_USR = {"lib": "usr/lib", "lib64": "usr/lib64", "bin": "usr/bin", "sbin": "usr/sbin"}


@dataclass(frozen=True)
class Deb:
    package: str
    version: str
    filename: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Pin:
    tool: str
    suite: str
    binary: str
    debs: tuple[Deb, ...]

    @property
    def recipe(self) -> str:
        text = json.dumps(
            {
                "layout": LAYOUT,
                "tool": self.tool,
                "suite": self.suite,
                "binary": self.binary,
                "packages": [d.__dict__ for d in self.debs],
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def ref(self) -> str:
        return f"{bases.IMAGE_NAMESPACE}/tools-{self.tool}:recipe-{self.recipe[:12]}"

    @property
    def version(self) -> str:
        """The tool's Debian version, e.g. '2.5.0-2+b5'."""
        return next(d.version for d in self.debs if d.package == self.tool)

    @property
    def upstream_version(self) -> str:
        """'2.5.0-2+b5' -> '2.5.0': what the binary itself reports."""
        return self.version.split(":")[-1].rsplit("-", 1)[0]


def load_pin(path: Path = PIN_FILE) -> Pin:
    """The pin the package ships; a damaged one is a bug of the installation, not of the user."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        debs = tuple(Deb(**{k: d[k] for k in DEB_KEYS}) for d in data["packages"])
        pin = Pin(tool=data["tool"], suite=data["suite"], binary=data["binary"], debs=debs)
        _ = pin.version  # the tool's own package must be among them (StopIteration otherwise)
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        raise BuildError(f"{path}: not a usable tools pin ({exc!r}); reinstall rocmforge") from None
    return pin


def ensure(client: Engine, pin: Pin | None = None, log: Callable[[str], None] = lambda msg: None) -> str:
    """The tools image's reference, made from the pinned .deb when the engine has no image under it."""
    pin = pin or load_pin()
    if client.find(pin.ref) is not None:
        return pin.ref
    with tempfile.TemporaryDirectory(prefix="rocmforge-tools-") as tmp:
        debs = [fetch_deb(d, Path(tmp) / f"{d.package}.deb", log) for d in pin.debs]
        archive = Path(tmp) / "image.tar"
        image_id = write_image(pin, debs, archive)
        with open(archive, "rb") as f:
            client.load(f)
    log(f"tools image {pin.ref}: loaded {image_id}")
    return pin.ref


def fetch_deb(pin: Deb, out: Path, log: Callable[[str], None] = lambda msg: None, pause: float = 2.0) -> Path:
    """The pinned .deb from the Debian archive (ROCMFORGE_DEBIAN_MIRROR applies). Plain HTTP is
    fine: nothing is used unless its size and sha256 are the pinned ones."""
    url = f"{aptmirror.effective()}/{pin.filename}"
    why = ""
    for attempt in range(1, aptmirror.RETRIES + 1):
        log(f"fetching {url}")
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(out, "wb") as f:
                h, size = hashlib.sha256(), 0
                for block in iter(lambda: resp.read(1 << 20), b""):
                    h.update(block)
                    size += len(block)
                    f.write(block)
        except urllib.error.HTTPError as exc:
            raise BuildError(
                f"{url} answered {exc.code} {exc.reason}: the archive no longer has "
                f"{pin.package} {pin.version}; update {PIN_FILE.name}"
            ) from None
        except OSError as exc:
            why = str(getattr(exc, "reason", exc))
            time.sleep(pause * attempt if attempt < aptmirror.RETRIES else 0)
            continue
        if size != pin.size or h.hexdigest() != pin.sha256:
            raise BuildError(
                f"{url}: got {size} bytes with sha256 {h.hexdigest()}, but the pin says {pin.size} "
                f"bytes with sha256 {pin.sha256}; refusing it"
            )
        return out
    raise BuildError(f"cannot fetch {url} ({why}): " + aptmirror.unreachable_message(aptmirror.from_env()))


def deb_data(deb: Path) -> bytes:
    """The uncompressed data.tar of a .deb (an ar archive: 8-byte magic, then 60-byte headers)."""
    raw = deb.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise BuildError(f"{deb}: not a Debian package")
    pos = 8
    while pos + 60 <= len(raw):
        header = raw[pos : pos + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        body = raw[pos + 60 : pos + 60 + size]
        if name == "data.tar.xz":
            return lzma.decompress(body)
        if name == "data.tar":
            return body
        pos += 60 + size + (size % 2)
    raise BuildError(f"{deb}: no data.tar.xz member (only xz-compressed packages are read)")


def layer_bytes(pin: Pin, debs: list[Path]) -> bytes:
    """The packages' files, every header canonical, the merged-/usr links and /tmp (cosign writes its
    temporary files there)."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    for deb in debs:
        with tarfile.open(fileobj=io.BytesIO(deb_data(deb))) as src:
            for info in src.getmembers():
                name = info.name.removeprefix("./").rstrip("/")
                content = src.extractfile(info) if info.isfile() else None
                if name:
                    members[name] = (info, content.read() if content else None)
    if pin.binary not in members or members[pin.binary][1] is None:
        raise BuildError(f"the {pin.tool} package {pin.version} has no file {pin.binary}")
    for link, target in MERGED_USR.items():
        info = tarfile.TarInfo(link)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        members[link] = (info, None)
    tmp = tarfile.TarInfo("tmp")
    tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
    members["tmp"] = (tmp, None)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            info, data = members[name]
            fixed = tarfile.TarInfo(name)
            fixed.type, fixed.mode, fixed.linkname = info.type, info.mode, info.linkname
            fixed.mtime, fixed.uid, fixed.gid, fixed.uname, fixed.gname = 0, 0, 0, "", ""
            fixed.size = len(data) if data is not None else 0
            tar.addfile(fixed, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def image_config(pin: Pin, diff_id: str) -> bytes:
    """The tools image's config (canonical JSON): the tool as entrypoint, the pin in its labels and history
    and a fixed creation time, so the image ID depends on the pin alone."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH0,
        "config": {
            "Entrypoint": [f"/{pin.binary}"],
            "Env": ["PATH=/usr/bin", "HOME=/tmp"],
            "Labels": {
                "io.rocmforge.tool": pin.tool,
                "io.rocmforge.tool.version": pin.version,
                "io.rocmforge.recipe": pin.recipe,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [
            {
                "created": EPOCH0,
                "created_by": f"rocmforge tools: Debian {pin.suite} "
                + ", ".join(f"{d.package} {d.version} (sha256 {d.sha256})" for d in pin.debs),
            }
        ],
    }
    return bases.canonical_json(config)


def write_image(pin: Pin, debs: list[Path], archive: Path) -> str:
    """The docker-archive of the tools image; returns its image ID (a function of the pin alone)."""
    layer = archive.with_name("layer.tar")
    data = layer_bytes(pin, debs)
    layer.write_bytes(data)
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        return write_archive(layer, diff_id, image_config(pin, diff_id), pin.ref, archive)
    finally:
        layer.unlink()
