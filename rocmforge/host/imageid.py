"""What rocmforge calls an image's identity, the same on every engine: its config digest (the image
ID that Docker's classic store and podman show) with its ordered diff IDs. Docker's containerd
image store shows the manifest digest as the ID instead; the config digest is then read from the
manifest, which names it: from the manifests rocmforge wrote and loaded (kept in a small cache,
checked against their digest on every read), else from the image's export."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host import engineinfo
from rocmforge.host.ocilayout import blob_name, config_digest
from rocmforge.shared.files import user_cache
from rocmforge.shared.streams import ChunkStream

if TYPE_CHECKING:
    from docker import DockerClient

def cache_dir() -> Path:
    return user_cache("manifests")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def remember(blob: bytes) -> str:
    """Keeps a manifest or index rocmforge wrote; returns its digest. A cache that cannot be
    written only costs an export later."""
    digest = digest_of(blob)
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, d / digest[7:])
    except OSError:
        pass
    return digest


def _from_cache(digest: str) -> str | None:
    """The config digest a manifest rocmforge wrote names (its bytes checked against the digest)."""
    try:
        blob = (cache_dir() / digest[7:]).read_bytes()
    except (OSError, ValueError):
        return None
    return config_digest({blob_name(digest): blob}, digest) if digest_of(blob) == digest else None


def _from_export(client: DockerClient, ref: str, digest: str) -> str | None:
    """Reads the image's export only as far as its manifest, which names the config (the blobs
    come in digest order, so on average half of the export is read)."""
    small: dict[str, bytes] = {}
    chunks = client.api.get_image(ref)
    try:
        stream = tarfile.open(fileobj=ChunkStream(chunks), mode="r|")
        for member in stream:
            name = member.name.removeprefix("./")
            if member.isfile() and name.startswith("blobs/sha256/") and member.size < (4 << 20):
                small[name] = stream.extractfile(member).read()
                found = config_digest(small, digest)
                if found:
                    return found
        return None
    finally:
        close = getattr(chunks, "close", None)
        if close:
            close()


def config_from_export(client: DockerClient, ref: str, config_id: str) -> dict | None:
    """The image's config document as stored, read from its export up to the config blob (an OCI
    layout's blobs/sha256/<hex>, or a docker-archive's <hex>.json, as podman writes), its bytes
    checked against the digest; None when the export holds no such blob. For a field an engine's
    inspect leaves out (podman's Docker-compatible API drops Shell), this is the stored truth."""
    hexdigest = config_id.removeprefix("sha256:")
    chunks = client.api.get_image(ref)
    try:
        stream = tarfile.open(fileobj=ChunkStream(chunks), mode="r|")
        for member in stream:
            name = member.name.removeprefix("./")
            if member.isfile() and name in (f"blobs/sha256/{hexdigest}", f"{hexdigest}.json"):
                blob = stream.extractfile(member).read()
                return json.loads(blob) if digest_of(blob) == "sha256:" + hexdigest else None
        return None
    finally:
        close = getattr(chunks, "close", None)
        if close:
            close()


def image_id(client: DockerClient, ref: str) -> str | None:
    """The image's config digest, whatever the store; None when ref names no image."""
    import docker.errors  # docker-py (0.17 s) loads at the first engine call

    try:
        shown = client.api.inspect_image(ref)["Id"]
    except docker.errors.ImageNotFound:
        return None
    if engineinfo.of(client).store != engineinfo.CONTAINERD:
        return shown
    return _from_cache(shown) or _from_export(client, ref, shown) or shown


def manifest_digest(client: DockerClient, ref: str) -> str | None:
    """What the containerd image store shows as the image ID (the manifest digest); None elsewhere."""
    import docker.errors  # docker-py (0.17 s) loads at the first engine call

    if engineinfo.of(client).store != engineinfo.CONTAINERD:
        return None
    try:
        return client.api.inspect_image(ref)["Id"]
    except docker.errors.ImageNotFound:
        return None
