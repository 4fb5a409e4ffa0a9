"""A second Debian mirror for tests: an HTTP server on the Docker bridge's gateway address (so both
this host and build containers reach it) that serves the archive by forwarding each request to
deb.debian.org. Its URL differs from the canonical one, as an air-gapped site's mirror would."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import shutil
import threading
import urllib.error
import urllib.request

UPSTREAM = "http://deb.debian.org"


class _Forward(http.server.BaseHTTPRequestHandler):
    requests: list[str]

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._forward(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward(send_body=False)

    def _forward(self, send_body: bool) -> None:
        self.server.requests.append(self.path)
        req = urllib.request.Request(UPSTREAM + self.path, method="GET" if send_body else "HEAD")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                self.send_response(resp.status)
                for key in ("Content-Type", "Content-Length", "Last-Modified", "ETag"):
                    if resp.headers.get(key):
                        self.send_header(key, resp.headers[key])
                self.end_headers()
                if send_body:
                    shutil.copyfileobj(resp, self.wfile, 1 << 20)
        except urllib.error.HTTPError as exc:
            self.send_response(exc.code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args) -> None:
        pass


def bridge_gateway(client) -> str:
    """The default bridge's gateway: what IPAM names, else the subnet's first address, which is the
    docker0 address the engine gives it (an engine that found docker0 already addressed, as a dockerd
    started again on the same host does, leaves Gateway out of the network's IPAM config)."""
    config = client.api.inspect_network("bridge")["IPAM"]["Config"][0]
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


@contextlib.contextmanager
def serve(client):
    """Yields (mirror URL, list of request paths served)."""
    server = http.server.ThreadingHTTPServer((bridge_gateway(client), 0), _Forward)
    server.requests = []
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/debian", server.requests
    finally:
        server.shutdown()
        server.server_close()
