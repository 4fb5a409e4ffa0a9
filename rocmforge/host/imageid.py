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
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from rocmforge.host.ocilayout import blob_name, config_digest
from rocmforge.shared.files import user_cache
from rocmforge.shared.streams import ChunkStream


def cache_dir() -> Path:
    """The folder of the manifests rocmforge wrote, each under its sha256 hex digest."""
    return user_cache("manifests")


def digest_of(data: bytes) -> str:
    """The bytes' digest as OCI writes it: "sha256:<hex>"."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _export_tar(chunks: Iterator[bytes]) -> tarfile.TarFile:
    """The export as a tar read once, front to back."""
    # a stream ("r|") only ever calls read(); the stubs want seek, tell and write of every fileobj
    return tarfile.open(fileobj=ChunkStream(chunks), mode="r|")  # type: ignore[call-overload]


def _member_bytes(stream: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of a regular file's member (tarfile gives None only for the other kinds)."""
    return cast(IO[bytes], stream.extractfile(member)).read()


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


def from_cache(digest: str) -> str | None:
    """The config digest a manifest rocmforge wrote names (its bytes checked against the digest)."""
    try:
        blob = (cache_dir() / digest[7:]).read_bytes()
    except (OSError, ValueError):
        return None
    return config_digest({blob_name(digest): blob}, digest) if digest_of(blob) == digest else None


def from_export(chunks: Iterator[bytes], digest: str) -> str | None:
    """The config digest that manifest `digest` names, read from the image's export only as far as
    that manifest (the blobs come in digest order, so on average half of the export is read)."""
    small: dict[str, bytes] = {}
    try:
        stream = _export_tar(chunks)
        for member in stream:
            name = member.name.removeprefix("./")
            if member.isfile() and name.startswith("blobs/sha256/") and member.size < (4 << 20):
                small[name] = _member_bytes(stream, member)
                found = config_digest(small, digest)
                if found:
                    return found
        return None
    finally:
        close = getattr(chunks, "close", None)
        if close:
            close()


def config_from_export(chunks: Iterator[bytes], config_id: str) -> dict | None:
    """The image's config document as stored, read from its export up to the config blob (an OCI
    layout's blobs/sha256/<hex>, or a docker-archive's <hex>.json, as podman writes), its bytes
    checked against the digest; None when the export holds no such blob. For a field an engine's
    inspect leaves out (podman's Docker-compatible API drops Shell), this is the stored truth."""
    hexdigest = config_id.removeprefix("sha256:")
    try:
        stream = _export_tar(chunks)
        for member in stream:
            name = member.name.removeprefix("./")
            if member.isfile() and name in (f"blobs/sha256/{hexdigest}", f"{hexdigest}.json"):
                blob = _member_bytes(stream, member)
                return json.loads(blob) if digest_of(blob) == "sha256:" + hexdigest else None
        return None
    finally:
        close = getattr(chunks, "close", None)
        if close:
            close()
