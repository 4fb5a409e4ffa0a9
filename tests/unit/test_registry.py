"""rocmforge.host.registrybase against hand-written responses in Docker Hub's shapes (tests/fixtures/registry,
see its README), served by a tiny http.server on 127.0.0.1 so the real urllib code path runs."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rocmforge.host import registrybase as reg
from rocmforge.shared.errors import UserError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "registry"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
V2_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sha(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class FakeRegistry:
    """Serves manifests at /v2/<repo>/manifests/<ref> like Docker Hub: 401 + WWW-Authenticate until
    the request carries the token from /token (when auth=True). Records every request."""

    def __init__(self, auth: bool = True, token_file: str = "token.json") -> None:
        self.manifests: dict[str, tuple[str, bytes, str | None]] = {}  # path -> (type, body, header digest)
        self.requests: list[tuple[str, dict]] = []
        self.auth = auth
        self.token_body = fixture(token_file)
        self.token = json.loads(fixture("token.json"))["token"]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                owner.requests.append((self.path, dict(self.headers)))
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/token":
                    return self._send(200, "application/json", owner.token_body)
                entry = owner.manifests.get(url.path)
                if owner.auth and self.headers.get("Authorization") != f"Bearer {owner.token}":
                    challenge = (
                        fixture("www-authenticate-rocm-pytorch.txt")
                        .decode()
                        .replace("https://auth.docker.io/token", f"http://127.0.0.1:{owner.port}/token")
                    )
                    return self._send(
                        401,
                        "application/json",
                        b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
                        {"WWW-Authenticate": challenge},
                    )
                if entry is None:
                    return self._send(
                        404,
                        "application/json",
                        b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}',
                    )
                media, body, digest = entry
                self._send(200, media, body, {"Docker-Content-Digest": digest} if digest else {})

            def _send(self, status, media, body, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def add(self, repo: str, ref: str, media: str, body: bytes, digest: str | None = "computed") -> str:
        self.manifests[f"/v2/{repo}/manifests/{ref}"] = (media, body, sha(body) if digest == "computed" else digest)
        return sha(body)


@pytest.fixture
def hub():
    r = FakeRegistry()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


# -- names --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, host, repo",
    [
        ("rocm/pytorch", "registry-1.docker.io", "rocm/pytorch"),
        ("rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0", "registry-1.docker.io", "rocm/pytorch"),
        ("ubuntu", "registry-1.docker.io", "library/ubuntu"),
        ("ubuntu@sha256:" + "a" * 64, "registry-1.docker.io", "library/ubuntu"),
        ("docker.io/rocm/pytorch", "registry-1.docker.io", "rocm/pytorch"),
        ("docker.io/ubuntu", "registry-1.docker.io", "library/ubuntu"),
        ("index.docker.io/rocm/dev-ubuntu-22.04", "registry-1.docker.io", "rocm/dev-ubuntu-22.04"),
        ("127.0.0.1:5000/rocm/pytorch:x", "127.0.0.1:5000", "rocm/pytorch"),
        ("localhost/x", "localhost", "x"),
        ("ghcr.io/rocm/therock/a", "ghcr.io", "rocm/therock/a"),
    ],
)
def test_parse_image(name, host, repo):
    assert reg.parse_image(name) == (host, repo)


@pytest.mark.parametrize("name", ["Rocm/PyTorch", "", "rocm//pytorch"])
def test_parse_image_refused(name):
    with pytest.raises(UserError):
        reg.parse_image(name)


@pytest.mark.parametrize(
    "text, host, prefix, scheme",
    [
        ("127.0.0.1:5000", "127.0.0.1:5000", "", "http"),
        ("localhost:5000/hub", "localhost:5000", "hub", "http"),
        ("127.3.4.5:80", "127.3.4.5:80", "", "http"),
        ("mirror.example.org", "mirror.example.org", "", "https"),
        ("harbor.example.org/dockerhub-proxy/", "harbor.example.org", "dockerhub-proxy", "https"),
        ("http://10.0.0.2:5000/a/b", "10.0.0.2:5000", "a/b", "http"),
        ("https://127.0.0.1:5000", "127.0.0.1:5000", "", "https"),
    ],
)
def test_parse_mirror(text, host, prefix, scheme):
    assert reg.parse_mirror(text) == reg.Mirror(host, prefix, scheme)


@pytest.mark.parametrize("text", ["ftp://x.org", "a b", "x.org/Upper", "http://"])
def test_parse_mirror_refused(text):
    with pytest.raises(UserError) as err:
        reg.parse_mirror(text)
    assert err.value.field == reg.MIRROR_ENV


def test_mirror_from_env():
    assert reg.mirror_from_env({}) is None
    assert reg.mirror_from_env({reg.MIRROR_ENV: "  "}) is None
    assert reg.mirror_from_env({reg.MIRROR_ENV: "127.0.0.1:5000"}) == reg.Mirror("127.0.0.1:5000", "", "http")


@pytest.mark.parametrize(
    "image, mirror, expected",
    [
        ("rocm/pytorch:T", "127.0.0.1:5000", "127.0.0.1:5000/rocm/pytorch:T"),
        ("rocm/pytorch:T@sha256:" + "b" * 64, "127.0.0.1:5000", "127.0.0.1:5000/rocm/pytorch:T@sha256:" + "b" * 64),
        (
            "docker.io/rocm/pytorch@sha256:" + "b" * 64,
            "m.example.org/hub",
            "m.example.org/hub/rocm/pytorch@sha256:" + "b" * 64,
        ),
        ("ubuntu:24.04", "https://m.example.org:8443", "m.example.org:8443/library/ubuntu:24.04"),
        ("rocm/pytorch:T", None, "rocm/pytorch:T"),
        # Like Docker's registry-mirrors, only Docker Hub names are mirrored.
        ("ghcr.io/x/y:T", "127.0.0.1:5000", "ghcr.io/x/y:T"),
    ],
)
def test_via_mirror(image, mirror, expected):
    assert reg.via_mirror(image, mirror) == expected


def test_parse_challenge():
    scheme, params = reg.parse_challenge(fixture("www-authenticate-rocm-pytorch.txt").decode())
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:rocm/pytorch:pull",
    }


# -- resolve ------------------------------------------------------------------------------------
def test_token_flow_and_digest_from_header(hub):
    body = fixture("manifest-v2.json")
    digest = hub.add("rocm/pytorch", "latest", V2_TYPE, body)

    got = reg.resolve("rocm/pytorch", "latest", mirror=hub.host)

    assert got == reg.Resolved(digest, None, V2_TYPE, hub.host)
    (first, h1), (token_req, _), (retry, h2) = hub.requests
    assert first == retry == "/v2/rocm/pytorch/manifests/latest"
    assert "Authorization" not in h1 and h2["Authorization"] == f"Bearer {hub.token}"
    for media in (INDEX_TYPE, LIST_TYPE, V2_TYPE, "application/vnd.oci.image.manifest.v1+json"):
        assert media in h1["Accept"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(token_req).query)
    assert query == {"scope": ["repository:rocm/pytorch:pull"], "service": ["registry.docker.io"]}


def test_access_token_field_is_enough(hub):
    data = json.loads(fixture("token.json"))
    hub.token_body = json.dumps({"access_token": data["access_token"], "expires_in": 300}).encode()
    digest = hub.add("rocm/pytorch", "latest", V2_TYPE, fixture("manifest-v2.json"))
    assert reg.resolve("rocm/pytorch", "latest", mirror=hub.host).digest == digest


def test_manifest_list_picks_linux_amd64(hub):
    index = hub.add("rocm/pytorch", "multi", LIST_TYPE, fixture("manifest-list.json"))
    got = reg.resolve("rocm/pytorch", "multi", mirror=hub.host)
    assert got == reg.Resolved("sha256:" + "1" * 64, index, LIST_TYPE, hub.host)


def test_oci_index_skips_attestations(hub):
    index = hub.add("rocm/pytorch", "oci", INDEX_TYPE, fixture("oci-index.json"))
    assert reg.resolve("rocm/pytorch", "oci", mirror=hub.host) == reg.Resolved(
        "sha256:" + "3" * 64, index, INDEX_TYPE, hub.host
    )
    assert (
        reg.resolve("rocm/pytorch", "oci", mirror=hub.host, platform=("linux", "arm64")).digest == "sha256:" + "4" * 64
    )


def test_index_without_the_platform(hub):
    hub.add("rocm/pytorch", "oci", INDEX_TYPE, fixture("oci-index.json"))
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "oci", mirror=hub.host, platform=("linux", "ppc64le"))
    assert "linux/ppc64le" in str(err.value) and "linux/amd64, linux/arm64, unknown/unknown" in str(err.value)


def test_by_digest_and_mirror_prefix(hub):
    body = fixture("manifest-v2.json")
    digest = hub.add("hub/library/ubuntu", sha(body), V2_TYPE, body)
    assert reg.resolve("ubuntu", digest, mirror=f"{hub.host}/hub").digest == digest
    assert hub.requests[-1][0] == f"/v2/hub/library/ubuntu/manifests/{digest}"


def test_no_digest_header_uses_the_body(hub):
    body = fixture("manifest-v2.json")
    hub.add("rocm/pytorch", "latest", V2_TYPE, body, digest=None)
    assert reg.resolve("rocm/pytorch", "latest", mirror=hub.host).digest == sha(body)


def test_direct_registry_name_without_mirror(hub):
    hub.auth = False
    digest = hub.add("team/base", "1", V2_TYPE, fixture("manifest-v2.json"))
    assert reg.resolve(f"{hub.host}/team/base", "1") == reg.Resolved(digest, None, V2_TYPE, hub.host)


def test_digest_mismatch(hub):
    hub.add("rocm/pytorch", "latest", V2_TYPE, fixture("manifest-v2.json"), digest="sha256:" + "0" * 64)
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "latest", mirror=hub.host)
    message = str(err.value)
    assert "digest mismatch" in message and "sha256:" + "0" * 64 in message and hub.host in message


def test_tag_not_found_names_host(hub):
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "no-such-tag", mirror=hub.host)
    message = str(err.value)
    assert hub.host in message and "rocm/pytorch:no-such-tag" in message and "tag not found" in message


def test_401_even_with_token(hub):
    hub.token = "something-else"  # the registry never accepts the token it handed out
    hub.add("rocm/pytorch", "latest", V2_TYPE, fixture("manifest-v2.json"))
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "latest", mirror=hub.host)
    assert "401" in str(err.value) and hub.host in str(err.value)
    assert len(hub.requests) == 3  # retried once, no more


def test_bad_json(hub):
    hub.auth = False
    hub.add("rocm/pytorch", "latest", V2_TYPE, b"<html>proxy error</html>")
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "latest", mirror=hub.host)
    assert "not JSON" in str(err.value) and hub.host in str(err.value)


def test_token_answer_without_token(hub):
    hub.token_body = b'{"details":"nope"}'
    hub.add("rocm/pytorch", "latest", V2_TYPE, fixture("manifest-v2.json"))
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("rocm/pytorch", "latest", mirror=hub.host)
    assert "no token" in str(err.value) and hub.host in str(err.value)


def test_connection_refused_names_host_and_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(reg.RegistryError) as err:
            reg.resolve("rocm/pytorch", "latest", mirror=f"127.0.0.1:{port}", timeout=5)
    assert f"127.0.0.1:{port}" in str(err.value) and "connection refused" in str(err.value)


def test_timeout_names_host():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts the connection, never answers
        host = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(reg.RegistryError) as err:
            reg.resolve("rocm/pytorch", "latest", mirror=host, timeout=0.5)
    assert host in str(err.value) and "timeout" in str(err.value)


def test_dns_failure_names_host():
    with pytest.raises(reg.RegistryError) as err:
        reg.resolve("registry.invalid/rocm/pytorch", "latest", timeout=5)
    assert "registry.invalid" in str(err.value) and "DNS" in str(err.value)


@pytest.mark.parametrize("tag", ["", "sha256:short", "a tag"])
def test_bad_tag_refused(tag):
    with pytest.raises(UserError):
        reg.resolve("rocm/pytorch", tag, mirror="127.0.0.1:1")


def test_cache_registry_option_and_environment(monkeypatch):
    from rocmforge.shared.errors import UserError
    from rocmforge.workflow import registry_cache

    monkeypatch.delenv(registry_cache.ENV, raising=False)
    monkeypatch.delenv(registry_cache.READONLY_ENV, raising=False)
    assert registry_cache.from_options(None) is None
    cache = registry_cache.from_options("127.0.0.1:5000")
    assert (cache.where.host, cache.where.namespace, cache.readonly) == ("127.0.0.1:5000", "rocmforge-cache", False)
    assert registry_cache.from_options("registry.example.org/team/cache").where.namespace == "team/cache"
    monkeypatch.setenv(registry_cache.ENV, "cache.example.org:443")
    monkeypatch.setenv(registry_cache.READONLY_ENV, "1")
    cache = registry_cache.from_options(None)
    assert cache.where.host == "cache.example.org:443" and cache.readonly
    with pytest.raises(UserError) as err:
        registry_cache.from_options("cache")  # would be read as a Docker Hub namespace
    assert err.value.field == "--cache-registry"


def test_a_registry_base_is_held_under_its_own_name_or_any_mirror_s():
    """What the outside check and the suites both look a pinned registry base up by (registrybase.held)."""
    digest = "sha256:" + "d" * 64

    class Engine:
        def __init__(self, shown, images):
            self.shown, self.images = shown, images

        def shown_id(self, ref):
            return self.shown.get(ref)

        def list_images(self):
            return self.images

    mirrored = [{"Id": "sha256:1", "RepoDigests": [f"127.0.0.1:5000/rocm/pytorch@{digest}"]}]
    assert reg.held(Engine({f"rocm/pytorch@{digest}": "sha256:1"}, []), "rocm/pytorch", digest) == (
        f"rocm/pytorch@{digest}"
    )
    assert reg.held(Engine({}, mirrored), "rocm/pytorch", digest) == f"127.0.0.1:5000/rocm/pytorch@{digest}"
    assert reg.held(Engine({}, [{"Id": "sha256:2", "RepoDigests": ["x@sha256:" + "e" * 64]}]), "x", digest) is None
