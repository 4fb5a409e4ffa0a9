"""One download for the build and the outside check: while a build runs, apt in its containers
fetches through a small HTTP proxy in this process, which serves each locked `.deb` from the cache
the outside check reads (host.debarchive.cache_dir: `<sha256>.deb`), and keeps what it fetches
upstream once its bytes have the SHA-256 matrix.lock records, so the check after the build (and the
next build) downloads nothing.

The proxy reaches apt through Docker's predefined build argument `http_proxy`: both builders pass it
to RUN steps without it being declared, and neither records it in the image's history or config,
so the image is the same with and without it (BuildKit leaves it out of its cache key too; the
classic builder writes `|0` before a RUN's command in its step cache once any build argument is
given, which the normaliser's history never shows). Only a `.deb` under the Debian archive's (or
ROCMFORGE_DEBIAN_MIRROR's) `pool/` whose name and version the lock knows is served or kept;
every other request (InRelease, indexes, an unlocked `.deb`, another host) is passed through
untouched. The proxy listens only on the engine's bridge gateway, and only when that is an address
of this host: a remote engine's build containers could not reach it, so those builds go direct."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.server
import ipaddress
import os
import socket
import struct
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host import aptmirror, debarchive
from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from rocmforge.host.enginebase import Engine

ENV = "ROCMFORGE_DEB_CACHE"
ARG = "http_proxy"  # one of Docker's predefined build arguments: no ARG line, no history entry
CHUNK = 1 << 20
# Headers apt's requests carry that the upstream answer depends on; hop-by-hop ones stay here.
FORWARDED = ("Range", "If-Range", "If-Modified-Since", "If-None-Match", "Accept", "Cache-Control", "User-Agent")
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
}


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether builds fetch their .debs through the cache ($ROCMFORGE_DEB_CACHE: 1, the default, or
    0). Any other value is a UserError naming the variable."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if value in ("", "1"):
        return True
    if value == "0":
        return False
    why = f"{value!r} is not 0 or 1 (0: builds fetch their .debs direct, not through the cache)"
    raise UserError(why, field=f"${ENV}")


def deb_of(url: str) -> tuple[str, str] | None:
    """(package, version without epoch) of a pool URL's `.deb` (`pool/.../NAME_VERSION_ARCH.deb`,
    as apt asks for it: percent-encoded); None for any other URL."""
    path = urllib.parse.urlsplit(url).path
    if "/pool/" not in path or not path.endswith(".deb"):
        return None
    parts = urllib.parse.unquote(path.rsplit("/", 1)[-1])[: -len(".deb")].split("_")
    return (parts[0], parts[1]) if len(parts) == 3 and all(parts) else None


def by_file_name(locked: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """(package, version without epoch) -> sha256 of matrix.lock's debs entries (`name=version`).
    Pool file names drop the epoch: two locked versions that differ only in it name no file here."""
    out: dict[tuple[str, str], str] = {}
    clashes: set[tuple[str, str]] = set()
    for key, sha in locked.items():
        name, _, version = key.partition("=")
        k = (name, version.split(":", 1)[-1])
        if k in out and out[k] != sha:
            clashes.add(k)
        out[k] = sha
    return {k: v for k, v in out.items() if k not in clashes}


def archive_hosts(environ: Mapping[str, str] | None = None) -> set[str]:
    """host[:port] of the Debian archive apt's sources name and of the mirror that replaces it."""
    return {urllib.parse.urlsplit(u).netloc.lower() for u in (aptmirror.CANONICAL, aptmirror.effective(environ))}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Counts:
    """What the proxy did during one build (the build log's last lines, and the tests' evidence)."""

    served: list[str] = field(default_factory=list)  # locked .debs from the cache
    kept: list[str] = field(default_factory=list)  # locked .debs fetched upstream, hash checked, kept
    not_kept: list[str] = field(default_factory=list)  # locked .debs fetched whose hash was another
    passed: list[str] = field(default_factory=list)  # everything else, forwarded untouched
    failed: list[str] = field(default_factory=list)  # "URL: why" of what upstream did not answer
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, url: str) -> None:
        with self.lock:
            getattr(self, kind).append(url)

    def summary(self) -> str:
        return (
            f"{len(self.served)} locked .debs from the cache, {len(self.kept)} fetched upstream and kept, "
            f"{len(self.not_kept)} fetched but not kept (not the locked SHA-256), {len(self.passed)} other "
            "requests passed through"
        )


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: apt sends a build's requests over a few connections
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.server.proxy.handle(self, body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self.server.proxy.handle(self, body=False)

    def log_message(self, *args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    proxy: Proxy

    def handle_error(self, request, client_address) -> None:
        pass  # a client gone mid-answer (a build stopped): apt's own output says what failed


class Proxy:
    """The proxy's rules; listen() runs it."""

    def __init__(self, locked: Mapping[str, str], cache: Path, hosts: set[str]) -> None:
        self.wanted = by_file_name(locked)
        self.cache = cache
        self.hosts = hosts
        self.counts = Counts()
        # the proxy runs on the host: forwarding to its loopback would let any container reach the
        # host's own loopback services, which it cannot reach by itself
        self.refuse_loopback = True
        self._loopback: dict[str, bool] = {}  # host -> resolves to loopback, asked once per build

    def handle(self, h: _Handler, *, body: bool) -> None:
        url = h.path
        if not url.startswith("http://"):
            return self._answer(h, 400, b"rocmforge's .deb cache is a proxy: ask it for http:// URLs\n")
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if self.refuse_loopback and host not in self._loopback:
            self._loopback[host] = _loopback(host)
        if self.refuse_loopback and self._loopback[host]:
            return self._answer(h, 403, b"rocmforge's .deb cache forwards nothing to this host's loopback\n")
        key = deb_of(url) if parts.netloc.lower() in self.hosts else None
        sha = self.wanted.get(key) if key else None
        if sha is None or h.headers.get("Range"):
            self.counts.add("passed", url)
            return self._forward(h, url, body, keep=None)
        kept = debarchive.kept_deb(sha, self.cache)
        if kept.is_file() and sha256_of(kept) == sha:
            self.counts.add("served", url)
            size = kept.stat().st_size
            h.send_response(200)
            h.send_header("Content-Type", "application/vnd.debian.binary-package")
            h.send_header("Content-Length", str(size))
            h.end_headers()
            if body:
                with open(kept, "rb") as f:
                    while chunk := f.read(CHUNK):
                        h.wfile.write(chunk)
            return None
        if not body:
            self.counts.add("passed", url)
        return self._forward(h, url, body, keep=sha if body else None)

    @staticmethod
    def _answer(h: _Handler, code: int, text: bytes) -> None:
        h.send_response(code)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(text)))
        h.end_headers()
        h.wfile.write(text)

    def _forward(self, h: _Handler, url: str, body: bool, keep: str | None) -> None:
        """The upstream answer, relayed; with keep (a locked sha256), a 200's bytes are also hashed
        and kept in the cache when they have it."""
        req = urllib.request.Request(url, method="GET" if body else "HEAD")
        for name in FORWARDED:
            if h.headers.get(name):
                req.add_header(name, h.headers[name])
        try:
            resp = urllib.request.urlopen(req, timeout=120)  # noqa: S310 - http URLs of apt's own requests
        except urllib.error.HTTPError as exc:  # 304, 404, …: the answer apt gets direct
            resp = exc
        except OSError as exc:  # the build then fails as it would direct: the mirror did not answer
            self.counts.add("failed", f"{url}: {exc}")
            return self._answer(h, 502, f"rocmforge's .deb cache could not fetch {url}: {exc}\n".encode())
        with resp:
            status = resp.status if hasattr(resp, "status") else resp.code
            length = resp.headers.get("Content-Length")
            data = b"" if length is not None or not body else resp.read()
            h.send_response(status)
            for k, v in resp.headers.items():
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                    h.send_header(k, v)
            h.send_header("Content-Length", length if length is not None else str(len(data)))
            h.end_headers()
            if not body:
                return None
            if length is None:
                h.wfile.write(data)
                return None
            if keep is None or status != 200:
                while chunk := resp.read(CHUNK):
                    h.wfile.write(chunk)
                return None
            self._relay_and_keep(h, resp, url, keep)
        return None

    def _relay_and_keep(self, h: _Handler, resp, url: str, sha: str) -> None:
        self.cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.cache, prefix=".tmp-", suffix="~")
        try:
            digest, last = hashlib.sha256(), b""
            with os.fdopen(fd, "wb") as f:
                while chunk := resp.read(CHUNK):
                    digest.update(chunk)
                    f.write(chunk)
                    h.wfile.write(last)
                    last = chunk
            if digest.hexdigest() == sha:
                os.chmod(tmp, 0o644)
                os.replace(tmp, debarchive.kept_deb(sha, self.cache))
                self.counts.add("kept", url)
            else:  # apt refuses it by the signed index's hash too; the cache never holds it
                os.unlink(tmp)
                self.counts.add("not_kept", url)
            # the last bytes only once it is kept: when apt has the file, so has the cache
            h.wfile.write(last)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False  # the fetch fails on its own, with the resolver's reason
    return any(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def interface_address(name: str) -> str | None:
    """The IPv4 address of this host's interface name (SIOCGIFADDR); None when it has none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def gateway(engine: Engine) -> tuple[str | None, str]:
    """(address, "") where build containers reach this host: the engine's default bridge gateway,
    when the engine is behind a unix socket here and the bridge's interface on this host holds that
    address; else (None, why not). An engine elsewhere (tcp, ssh, Docker in a container) has a
    bridge of its own, whose gateway is not this process's."""
    local = engine.on_local_socket()
    return reachable(local, engine.bridge() if local else None)


def reachable(
    local: bool, bridge: tuple[str, str] | None, address_of: Callable[[str], str | None] = interface_address
) -> tuple[str | None, str]:
    """gateway's decision from what the engine says (behind a unix socket here; its bridge's
    gateway and interface) and this host's address of that interface."""
    if not local:
        return None, "the engine is not reached through a unix socket of this host"
    if bridge is None:
        return None, "the engine has no default bridge network"
    address, iface = bridge
    if address_of(iface) != address:
        return None, f"its bridge gateway {address} is not the address of this host's {iface}"
    return address, ""


@dataclass
class Serving:
    """What a build is given: the build argument (none when it goes direct) and what to log."""

    buildargs: dict[str, str]
    note: str  # one line for the build log: through the cache, or direct and why
    counts: Counts | None = None


@contextlib.contextmanager
def serving(engine: Engine, locked: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Iterator[Serving]:
    """The proxy for one build, on the engine's bridge gateway, for the lock's .debs of the
    target's stack; direct (no build argument) when it is turned off, the stack locks no .deb
    hashes, the archive is https or build containers could not reach this host."""

    def direct(why: str) -> Serving:
        return Serving({}, f"# apt fetches its .debs direct, not through rocmforge's .deb cache: {why}")

    if not enabled(environ):
        yield direct(f"${ENV}=0")
        return
    if not locked:
        yield direct("the stack has no locked .deb hashes (matrix.lock's debs)")
        return
    archive = aptmirror.effective(environ)
    if not archive.startswith("http://"):
        yield direct("the Debian archive is reached over https, for which apt uses no http proxy")
        return
    if _loopback(urllib.parse.urlsplit(archive).hostname or ""):
        # a build container's loopback is its own: through the proxy it would be this host's
        yield direct(f"the Debian mirror {archive} is a loopback address")
        return
    address, why = gateway(engine)
    if address is None:
        yield direct(why)
        return
    proxy = Proxy(locked, debarchive.cache_dir(), archive_hosts(environ))
    try:
        server = listen(proxy, address)
    except OSError as exc:
        yield direct(f"cannot listen on {address} ({exc.strerror or exc})")
        return
    url = f"http://{address}:{server.server_address[1]}"
    try:
        yield Serving(
            {ARG: url},
            f"# apt fetches its .debs through rocmforge's .deb cache ({proxy.cache}) at {url}, "
            f"{len(proxy.wanted)} locked; ${ENV}=0 turns it off",
            proxy.counts,
        )
    finally:
        server.shutdown()
        server.server_close()


def listen(proxy: Proxy, address: str) -> http.server.ThreadingHTTPServer:
    """proxy, answering on address (a free port) from a thread of its own until shutdown()."""
    server = _Server((address, 0), _Handler)
    server.proxy = proxy
    threading.Thread(target=server.serve_forever, daemon=True, name="rocmforge-debcache").start()
    return server
