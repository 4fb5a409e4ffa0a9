"""A stack's registry base, asked of the registry directly over the Docker Registry HTTP API v2 (stdlib
urllib only): `parse_image` (Docker Hub normalisation), the pull-through mirror setting
(`ROCMFORGE_REGISTRY_MIRROR`, `mirror_from_env`, `via_mirror`), `resolve` (tag -> the linux/amd64
manifest digest that FROM pins, anonymous bearer-token flow included) and `pull` (make that digest
present on the engine, through the mirror when set). Names in the lock, labels and manifest stay the
upstream ones; only the reference the engine pulls and builds FROM names the mirror."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import TYPE_CHECKING

from rocmforge.host.enginebase import EngineError
from rocmforge.host.registry import MANIFEST_TYPES, REFERENCE_COMPONENT, REGISTRY_RE, insecure
from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

DOCKER_HUB = "registry-1.docker.io"  # where the engine really fetches "docker.io" names
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
MIRROR_ENV = "ROCMFORGE_REGISTRY_MIRROR"
INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
IMAGE_MANIFEST_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPO_RE = re.compile(rf"^{REFERENCE_COMPONENT}(?:/{REFERENCE_COMPONENT})*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class RegistryError(BuildError):
    """A registry question could not be answered; the one-line message names the host tried and why."""


@dataclass(frozen=True)
class Resolved:
    digest: str  # the image manifest to pin in FROM (the platform's, for an index)
    index_digest: str | None  # the tag's index / manifest list, when it is multi-arch
    media_type: str  # media type of what the tag points to
    host_tried: str  # host[:port] that answered (the mirror's, when one was used)


@dataclass(frozen=True)
class Mirror:
    """A pull-through mirror of Docker Hub: `rocm/pytorch:T` is fetched as `host/[prefix/]rocm/pytorch:T`."""

    host: str  # host[:port], as in an engine reference
    prefix: str  # "" or "a/b"
    scheme: str  # "http" or "https"

    @property
    def name(self) -> str:
        return self.host + (f"/{self.prefix}" if self.prefix else "")


def _split_ref(ref: str) -> tuple[str, str]:
    """'name[:tag][@digest]' -> ('name', ':tag@digest' as written, possibly '')."""
    name, at, digest = ref.partition("@")
    suffix = at + digest
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, suffix = name[:colon], name[colon:] + suffix
    return name, suffix


def parse_image(name: str) -> tuple[str, str]:
    """('host[:port]', 'repository') for an image name, with Docker Hub's normalisation:
    'rocm/pytorch' -> ('registry-1.docker.io', 'rocm/pytorch'); 'ubuntu' -> (…, 'library/ubuntu');
    'docker.io/x/y' -> (…, 'x/y'); 'host:port/x/y' keeps its host. A tag or digest is ignored."""
    bare, _ = _split_ref(name.strip())
    first, slash, rest = bare.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        host, repo = first, rest
    else:
        host, repo = "docker.io", bare
    if host.lower() in _HUB_ALIASES:
        host = DOCKER_HUB
        if "/" not in repo:
            repo = f"library/{repo}"
    if not _REPO_RE.match(repo):
        raise UserError(f"{name!r} is not an image name (lower-case path components, e.g. rocm/pytorch)")
    return host, repo


def _is_local(host: str) -> bool:
    name = (host if host.endswith("]") else host.rsplit(":", 1)[0]).strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_mirror(text: str) -> Mirror:
    """'[http://|https://]HOST[:PORT][/PREFIX]'; loopback hosts default to http, others to https."""
    value = text.strip()
    scheme = None
    for s in ("http", "https"):
        if value.lower().startswith(s + "://"):
            scheme, value = s, value[len(s) + 3 :]
    value = value.rstrip("/")
    m = REGISTRY_RE.match(value)
    if not m:
        raise UserError(
            f"{text!r} is not [http://|https://]HOST[:PORT][/PREFIX] (prefix: lower-case path components)",
            field=MIRROR_ENV,
        )
    host = m["host"] + (f":{m['port']}" if m["port"] else "")
    return Mirror(host=host, prefix=m["ns"] or "", scheme=scheme or ("http" if _is_local(host) else "https"))


def mirror_from_env(environ: Mapping[str, str] | None = None) -> Mirror | None:
    """The mirror named by ROCMFORGE_REGISTRY_MIRROR, or None when it is unset or empty."""
    text = (os.environ if environ is None else environ).get(MIRROR_ENV, "").strip()
    return parse_mirror(text) if text else None


def _as_mirror(mirror: Mirror | str | None) -> Mirror | None:
    return parse_mirror(mirror) if isinstance(mirror, str) else mirror


def _through(host: str, repo: str, mirror: Mirror | None) -> tuple[str, str, str]:
    """(scheme, host, repository path) where the manifest of host/repo is fetched from. As with
    Docker's registry-mirrors, only Docker Hub names go through the mirror."""
    if mirror is not None and host == DOCKER_HUB:
        return mirror.scheme, mirror.host, (f"{mirror.prefix}/{repo}" if mirror.prefix else repo)
    return ("http" if _is_local(host) else "https"), host, repo


def via_mirror(image: str, mirror: Mirror | str | None) -> str:
    """The reference the engine pulls for an upstream reference (tag and/or digest kept):
    'rocm/pytorch:T' -> '127.0.0.1:5000/rocm/pytorch:T', 'ubuntu@sha256:…' -> 'M/library/ubuntu@sha256:…'.
    Without a mirror, or for a name not on Docker Hub, the reference is returned unchanged."""
    mirror = _as_mirror(mirror)
    bare, suffix = _split_ref(image.strip())
    host, repo = parse_image(bare)
    if mirror is None or host != DOCKER_HUB:
        return image.strip()
    _, mhost, path = _through(host, repo, mirror)
    return f"{mhost}/{path}{suffix}"


# -- HTTP -------------------------------------------------------------------------------------------
def _why(exc: BaseException, timeout: float) -> str:
    """A short reason for a failed request."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return f"DNS lookup failed ({reason.strerror or reason})"
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return f"no answer within {timeout:g} s (timeout)"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({getattr(reason, 'reason', None) or reason}); is it plain http? give http:// explicitly"
    if isinstance(reason, ConnectionResetError):
        return "connection reset"
    return str(reason) or type(reason).__name__


def _request(url: str, host: str, *, headers: dict, timeout: float) -> tuple[int, Message[str, str], bytes]:
    """GET url; returns (status, headers, body) for any HTTP answer, RegistryError when there is none.
    The headers are looked up by name in any case, as HTTP's are."""
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read() if exc.fp else b""
        return exc.code, exc.headers, body
    except (urllib.error.URLError, OSError) as exc:
        raise RegistryError(f"registry {host}: GET {url}: {_why(exc, timeout)}") from None


_CHALLENGE_RE = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def parse_challenge(value: str) -> tuple[str, dict[str, str]]:
    """'Bearer realm="…",service="…",scope="…"' -> ('bearer', {realm, service, scope})."""
    scheme, _, params = value.strip().partition(" ")
    return scheme.lower(), {k.lower(): (q if q or not b else b) for k, q, b in _CHALLENGE_RE.findall(params)}


def _token(challenge: str, host: str, repo: str, timeout: float) -> str:
    scheme, params = parse_challenge(challenge)
    if scheme != "bearer" or not params.get("realm"):
        raise RegistryError(
            f"registry {host}: 401 asks for {scheme or 'unknown'} authentication "
            f"({challenge!r}); only anonymous bearer tokens are supported"
        )
    query = {"scope": params.get("scope") or f"repository:{repo}:pull"}
    if params.get("service"):
        query["service"] = params["service"]
    realm = params["realm"]
    url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
    auth_host = urllib.parse.urlsplit(realm).netloc or realm
    status, _, body = _request(url, auth_host, headers={}, timeout=timeout)
    if status != 200:
        raise RegistryError(f"token service {auth_host} (for registry {host}) answered {status} to {url}")
    try:
        data = json.loads(body)
        token = data.get("token") or data.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise RegistryError(
            f"token service {auth_host} (for registry {host}): no token or access_token in its answer to {url}"
        )
    return token


def _pick(index: dict, platform: tuple[str, str], what: str) -> str:
    os_, arch = platform
    found = []
    for entry in index.get("manifests") or []:
        p = entry.get("platform") or {}
        found.append(f"{p.get('os')}/{p.get('architecture')}" + (f"/{p['variant']}" if p.get("variant") else ""))
        if p.get("os") == os_ and p.get("architecture") == arch and _DIGEST_RE.match(str(entry.get("digest"))):
            return entry["digest"]
    raise RegistryError(f"{what} has no {os_}/{arch} manifest (it has: {', '.join(found) or 'none'})")


def resolve(
    image: str,
    tag: str,
    *,
    mirror: Mirror | str | None = None,
    platform: tuple[str, str] = ("linux", "amd64"),
    timeout: float = 30,
) -> Resolved:
    """The manifest digest that `image:tag` pins for `platform`, asked of the registry (or of the
    mirror, for a Docker Hub name). `tag` may also be a digest (sha256:…). For a multi-arch index or
    manifest list the platform's manifest digest is returned, with the index digest beside it."""
    mirror = _as_mirror(mirror)
    up_host, repo = parse_image(image)
    scheme, host, path = _through(up_host, repo, mirror)
    by_digest = tag.startswith("sha256:")
    if not (_DIGEST_RE.match(tag) if by_digest else _TAG_RE.match(tag)):
        raise UserError(f"{tag!r} is not a tag or sha256 digest (of {image})")
    url = f"{scheme}://{host}/v2/{path}/manifests/{tag}"
    what = f"{host}/{path}{'@' if by_digest else ':'}{tag}"
    headers = {"Accept": MANIFEST_TYPES}
    status, head, body = _request(url, host, headers=headers, timeout=timeout)
    if status == 401:
        challenge = head.get("WWW-Authenticate") or ""
        headers["Authorization"] = "Bearer " + _token(challenge, host, path, timeout)
        status, head, body = _request(url, host, headers=headers, timeout=timeout)
        if status == 401:
            raise RegistryError(
                f"registry {host}: 401 for {what} even with an anonymous token "
                "(private repository, or a mirror that needs credentials)"
            )
    if status == 404:
        raise RegistryError(f"registry {host}: {what}: {'digest' if by_digest else 'tag'} not found (404)")
    if status != 200:
        raise RegistryError(f"registry {host}: GET {url} answered {status}")
    actual = "sha256:" + hashlib.sha256(body).hexdigest()
    digest = head.get("Docker-Content-Digest") or actual
    if digest != actual or (by_digest and tag != actual):
        raise RegistryError(
            f"registry {host}: {what}: digest mismatch: header says "
            f"{head.get('Docker-Content-Digest') or tag}, the body's sha256 is {actual}"
        )
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise RegistryError(f"registry {host}: {what}: manifest is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"registry {host}: {what}: manifest is not a JSON object")
    media = (head.get("Content-Type") or "").split(";")[0].strip()
    if media not in INDEX_TYPES | IMAGE_MANIFEST_TYPES:
        media = doc.get("mediaType") or (
            "application/vnd.oci.image.index.v1+json"
            if "manifests" in doc
            else "application/vnd.oci.image.manifest.v1+json"
            if "layers" in doc
            else media
        )
    if media in INDEX_TYPES:
        return Resolved(_pick(doc, platform, what), digest, media, host)
    if media in IMAGE_MANIFEST_TYPES:
        return Resolved(digest, None, media, host)
    raise RegistryError(f"registry {host}: {what}: unsupported manifest type {media or 'unknown'!r}")


# -- the engine -------------------------------------------------------------------------------------
def _familiar(host: str, repo: str) -> str:
    """The name the engine shows for host/repo (Docker Hub without host, official images bare)."""
    if host == DOCKER_HUB:
        return repo[len("library/") :] if repo.startswith("library/") else repo
    return f"{host}/{repo}"


def held(client: Engine, image: str, digest: str) -> str | None:
    """A reference the engine answers for the registry image pinned by digest, or None when it does
    not hold it. A manifest digest names the same image under any repository, so one pulled through
    a registry mirror (stored under the mirror's name) is found by its digest alone."""
    if client.shown_id(f"{image}@{digest}"):
        return f"{image}@{digest}"
    for img in client.list_images():
        named = [d for d in img.get("RepoDigests") or () if d.endswith("@" + digest)]
        if named:
            return named[0]
    return None


def pull(
    client: Engine, image: str, digest: str, *, mirror: Mirror | str | None = None, fetch: bool = True
) -> str | None:
    """Make image@digest present on the engine (through the mirror for a Docker Hub name when one is
    set) and return the local reference a Dockerfile FROM can use with pull=False, e.g.
    '127.0.0.1:5000/rocm/pytorch@sha256:…' or 'rocm/pytorch@sha256:…'. Skips the pull when that
    reference is already present; checks the engine's RepoDigests record the digest."""
    mirror = _as_mirror(mirror)
    if not _DIGEST_RE.match(digest):
        raise UserError(f"{digest!r} is not a sha256 digest (of {image})")
    up_host, repo = parse_image(image)
    _, host, path = _through(up_host, repo, mirror)
    name = _familiar(host, path) if host == up_host else f"{host}/{path}"
    ref = f"{name}@{digest}"

    def present() -> bool:
        img = client.find(ref)
        return img is not None and ref in (img.get("RepoDigests") or [])

    if present():
        return ref
    if not fetch:
        return None
    if mirror is not None and host == mirror.host and mirror.scheme == "http" and not insecure(client, host):
        raise RegistryError(
            f"mirror {host} is plain http but the engine would use https for it: add "
            f'"{host}" to "insecure-registries" in /etc/docker/daemon.json'
        )
    try:
        for chunk in client.pull(name, digest):
            if "error" in chunk:
                raise RegistryError(f"registry {host}: pulling {ref}: {chunk['error']}")
    except EngineError as exc:
        raise RegistryError(f"registry {host}: pulling {ref}: {exc}") from None
    if not present():
        raise RegistryError(f"pulled {ref}, but the engine does not record that digest for it")
    return ref
