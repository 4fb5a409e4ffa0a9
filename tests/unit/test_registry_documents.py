"""host.registry.get_document, what `verify` reads the image's manifest and config with: an answer
whose bytes do not match their digest (cut off, altered) is refused, never parsed."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rocmforge.host import registry as reg
from rocmforge.shared.errors import BuildError

MANIFEST = b'{"schemaVersion": 2, "config": {"digest": "sha256:abc"}}'
CONFIG = b'{"config": {"Labels": {"io.rocmforge.target": "t"}}}'


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class LoopbackEngine:
    """What `insecure` asks the engine: 127.0.0.0/8 is plain HTTP, as Docker's default says."""

    def registry_config(self):
        return {"InsecureRegistryCIDRs": ["127.0.0.0/8"], "IndexConfigs": {}}


@pytest.fixture
def server():
    answers: dict[str, tuple[bytes, str | None]] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            if self.path not in answers:
                self.send_response(404)
                self.end_headers()
                return
            body, named = answers[self.path]
            self.send_response(200)
            if named:
                self.send_header("Docker-Content-Digest", named)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", answers
    httpd.shutdown()


def test_a_manifest_and_a_blob_that_match_their_digests_are_read(server):
    host, answers = server
    answers["/v2/ns/t/manifests/v1"] = (MANIFEST, digest(MANIFEST))
    answers[f"/v2/ns/t/blobs/{digest(CONFIG)}"] = (CONFIG, None)
    assert reg.get_document(LoopbackEngine(), f"{host}/ns/t", "v1") == (digest(MANIFEST), MANIFEST)
    assert reg.get_document(LoopbackEngine(), f"{host}/ns/t", digest(CONFIG), blob=True)[1] == CONFIG


@pytest.mark.parametrize(
    "served, named, asked",
    [
        (MANIFEST[:-5], digest(MANIFEST), "v1"),  # cut off: the named digest does not match
        (MANIFEST.replace(b"abc", b"abd"), digest(MANIFEST), "v1"),  # altered
        (MANIFEST[:-5], None, digest(MANIFEST)),  # asked by digest, a shorter answer
        (MANIFEST, None, "v1"),  # by tag, and no digest named at all
    ],
)
def test_an_answer_that_does_not_match_its_digest_is_refused(server, served, named, asked):
    host, answers = server
    answers[f"/v2/ns/t/manifests/{asked}"] = (served, named)
    with pytest.raises(BuildError, match="not trusted"):
        reg.get_document(LoopbackEngine(), f"{host}/ns/t", asked)


def test_a_missing_document_names_the_reference(server):
    host, _ = server
    with pytest.raises(BuildError, match="has no ns/t:v9"):
        reg.get_document(LoopbackEngine(), f"{host}/ns/t", "v9")


@pytest.fixture
def garbling_server():
    """Answers every request with a status line that is not HTTP."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 2\x00\xff garbled\r\n\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_an_answer_that_is_not_http_is_refused_not_a_traceback(garbling_server):
    with pytest.raises(BuildError, match="not a well-formed HTTP response"):
        reg.get_document(LoopbackEngine(), f"{garbling_server}/ns/t", "v1")
    with pytest.raises(BuildError, match="not a well-formed HTTP response"):
        reg.manifest_digest(LoopbackEngine(), f"{garbling_server}/ns/t", "v1")
