"""Registries we publish to, spoken to directly over the Docker Registry HTTP API v2 (stdlib urllib
only): `parse` a --registry argument, `manifest_digest` (which digest does a tag point to now?). A
stack's registry base (resolve a tag, pull a digest, mirrors) is host/registrybase.py."""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

# Docker's reference grammar for one path component; the namespace may have several.
REFERENCE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REGISTRY_RE = re.compile(
    rf"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::(?P<port>[0-9]+))?"
    rf"(?:/(?P<ns>{REFERENCE_COMPONENT}(?:/{REFERENCE_COMPONENT})*))?$"
)
# An image as `docker run` and `docker inspect` take it: [HOST[:PORT]/]NAME[:TAG][@DIGEST], or an ID.
IMAGE_RE = re.compile(
    rf"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{REFERENCE_COMPONENT}(?:/{REFERENCE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
    r"|^(?:sha256:)?[0-9a-f]{12,64}$"
)
# Without a namespace the images keep the name they have locally.
DEFAULT_NAMESPACE = "rocmforge"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        # Also accepted so that a tag overwritten by another tool (buildx, an OCI pusher) shows its real
        # digest instead of "unknown": otherwise the registry may refuse the request outright.
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass(frozen=True)
class Registry:
    host: str  # host[:port], exactly as the engine sees it in a reference
    namespace: str

    def repository(self, target: str) -> str:
        return f"{self.host}/{self.namespace}/{target}"


def image_reference(text: str, field: str) -> str:
    """An image reference the user gave, refused (before the engine is asked) when no engine would take it."""
    if not IMAGE_RE.match(text):
        raise UserError(
            f"{text!r} is not an image reference ([HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST], lower-case name) "
            "or an image ID",
            field=field,
        )
    return text


def parse(text: str) -> Registry:
    """The registry a --registry value names (HOST[:PORT][/NAMESPACE]); UserError when it names none."""
    m = REGISTRY_RE.match(text.strip())
    if not m:
        scheme, sep, rest = text.strip().partition("://")
        if sep and scheme.isalpha():  # a URL where the engine's own reference form is wanted
            raise UserError(
                f"{text!r} is a URL: give HOST[:PORT][/NAMESPACE] without {scheme}://, e.g. {rest or 'ghcr.io/ORG'!r}",
                field="--registry",
            )
        raise UserError(
            f"{text!r} is not HOST[:PORT][/NAMESPACE] (namespace: lower-case path components)", field="--registry"
        )
    host = m["host"] + (f":{m['port']}" if m["port"] else "")
    # The engine reads a first component without '.' or ':' (other than localhost) as a Docker Hub
    # user, so such a "registry" would silently push to Docker Hub instead.
    if "." not in m["host"] and not m["port"] and m["host"] != "localhost" and not m["host"].startswith("["):
        raise UserError(
            f"{text!r}: {m['host']!r} would be read as a Docker Hub namespace, not a registry host; "
            f"give a host with a dot or a port (e.g. {m['host']}:5000)",
            field="--registry",
        )
    return Registry(host=host, namespace=m["ns"] or DEFAULT_NAMESPACE)


def split_repository(repository: str) -> tuple[str, str]:
    """'host:port/ns/name' -> ('host:port', 'ns/name')."""
    host, _, name = repository.partition("/")
    return host, name


def insecure(client: Engine, host: str) -> bool:
    """Plain HTTP exactly where the engine would use it: its insecure-registries setting."""
    cfg = client.registry_config()
    index = (cfg.get("IndexConfigs") or {}).get(host)
    if index is not None:
        return not index.get("Secure", True)
    name = (host if host.endswith("]") else host.rsplit(":", 1)[0]).strip("[]")
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        try:
            addr = ipaddress.ip_address(socket.gethostbyname(name))
        except OSError:
            return False
    return any(addr in ipaddress.ip_network(cidr) for cidr in cfg.get("InsecureRegistryCIDRs") or [])


def manifest_digest(client: Engine, repository: str, tag: str, timeout: float = 30) -> str | None:
    """The Docker-Content-Digest the registry gives for repository:tag, or None if the tag is gone."""
    host, name = split_repository(repository)
    scheme = "http" if insecure(client, host) else "https"
    url = f"{scheme}://{host}/v2/{name}/manifests/{tag}"
    req = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            digest = resp.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        if exc.code == 401:
            raise BuildError(
                f"registry {host} wants authentication to read {name}:{tag}; "
                "rocmforge only reads registries that allow anonymous reads"
            ) from None
        raise BuildError(f"registry {host}: HEAD {url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BuildError(f"registry {host} is not reachable at {url}: {getattr(exc, 'reason', exc)}") from None
    except http.client.HTTPException as exc:
        raise _not_http(host, url, exc) from None
    if not digest:
        raise BuildError(f"registry {host}: {url} gave no Docker-Content-Digest header")
    return digest


MAX_DOCUMENT = 4 << 20  # a manifest or an image config; anything bigger is not one


def scheme(client: Engine, host: str) -> str:
    """The URL scheme the engine itself uses for host: http for an insecure registry, else https."""
    return "http" if insecure(client, host) else "https"


def get_document(
    client: Engine, repository: str, reference: str, *, blob: bool = False, timeout: float = 30
) -> tuple[str, bytes]:
    """A manifest (by tag or digest) or a blob (by digest) of repository, as (digest, bytes). Whatever
    is asked for by digest is checked against it, and a manifest's bytes against the digest the
    registry names: a cut-off or altered answer raises BuildError, it is never read."""
    host, name = split_repository(repository)
    url = f"{scheme(client, host)}://{host}/v2/{name}/{'blobs' if blob else 'manifests'}/{reference}"
    req = urllib.request.Request(url, headers={} if blob else {"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read(MAX_DOCUMENT + 1)
            named = resp.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise BuildError(f"registry {host} has no {name}{'@' if ':' in reference else ':'}{reference}") from None
        raise BuildError(f"registry {host}: GET {url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BuildError(f"registry {host} is not reachable at {url}: {getattr(exc, 'reason', exc)}") from None
    except http.client.HTTPException as exc:
        raise _not_http(host, url, exc) from None
    if len(data) > MAX_DOCUMENT:
        raise BuildError(f"registry {host}: {url} answered more than {MAX_DOCUMENT} bytes; not a manifest or config")
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    expected = reference if reference.startswith("sha256:") else named
    if expected != actual:
        raise BuildError(
            f"registry {host}: {url} answered bytes with digest {actual}, not {expected}: "
            "a cut-off or altered answer is not trusted"
        )
    return actual, data


def _not_http(host: str, url: str, exc: http.client.HTTPException) -> BuildError:
    """A garbled status line or headers, a cut-off chunked body (http.client's own errors, which are
    not OSErrors): the answer is refused like any other that cannot be read."""
    what = " ".join(str(exc).split())[:200] or type(exc).__name__
    return BuildError(
        f"registry {host}: {url} answered something that is not a well-formed HTTP response "
        f"({type(exc).__name__}: {what}); it is not trusted"
    )


def put_manifest(client: Engine, repository: str, tag: str, media_type: str, body: bytes, timeout: float = 30) -> str:
    """PUT a manifest the engine cannot push itself (an image index) under tag; returns its digest,
    refused unless the registry stored exactly these bytes."""
    host, name = split_repository(repository)
    url = f"{scheme(client, host)}://{host}/v2/{name}/manifests/{tag}"
    req = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": media_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            named = resp.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace").strip()
        raise BuildError(f"registry {host}: PUT {url} answered {exc.code} {exc.reason}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BuildError(f"registry {host} is not reachable at {url}: {getattr(exc, 'reason', exc)}") from None
    except http.client.HTTPException as exc:
        raise _not_http(host, url, exc) from None
    actual = "sha256:" + hashlib.sha256(body).hexdigest()
    if named is not None and named != actual:
        raise BuildError(f"registry {host}: stored {url} as {named}, not as the {actual} that was sent")
    return actual
