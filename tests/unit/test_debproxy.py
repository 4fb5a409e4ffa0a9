"""host.debproxy's rules, with no engine: which URLs are a locked .deb, the setting, and the proxy
itself in front of a small upstream server on this host (what it serves from the cache, keeps,
refuses to keep and passes through, counted). The real engine and mirror: tests/integration/test_deb_cache.py."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
import urllib.error
import urllib.request

import pytest

from rocmforge.host import debproxy
from rocmforge.shared.errors import UserError

POOL = "/debian/pool/main/n/netbase/netbase_6.5_all.deb"
GOOD = b"!<arch>\nthe locked bytes\n"
SHA = hashlib.sha256(GOOD).hexdigest()


def test_a_pool_url_names_its_package_and_version_without_epoch():
    assert debproxy.deb_of("http://deb.debian.org/debian" + POOL) == ("netbase", "6.5")
    url = "http://m.example/debian/pool/main/l/llvm-toolchain-17/libllvm17t64_17.0.6-22%2bb2_amd64.deb"
    assert debproxy.deb_of(url) == ("libllvm17t64", "17.0.6-22+b2")
    assert debproxy.deb_of("http://deb.debian.org/debian/dists/trixie/InRelease") is None
    assert debproxy.deb_of("http://deb.debian.org/debian/pool/main/n/netbase/netbase_6.5.dsc") is None
    assert debproxy.deb_of("http://deb.debian.org/debian/pool/main/x/x/odd-name.deb") is None


def test_lock_keys_lose_their_epoch_and_a_clash_names_no_file():
    locked = {"netbase=6.5": "a" * 64, "libpci3=1:3.13.0-2": "b" * 64, "x=1:2": "c" * 64, "x=2:2": "d" * 64}
    assert debproxy.by_file_name(locked) == {("netbase", "6.5"): "a" * 64, ("libpci3", "3.13.0-2"): "b" * 64}


@pytest.mark.parametrize(("value", "on"), [("", True), ("1", True), (" 0 ", False)])
def test_the_setting(value, on):
    assert debproxy.enabled({debproxy.ENV: value}) is on


def test_a_bad_setting_names_the_variable():
    with pytest.raises(UserError) as exc:
        debproxy.enabled({debproxy.ENV: "off"})
    assert exc.value.field == "$ROCMFORGE_DEB_CACHE" and "'off' is not 0 or 1" in str(exc.value)


def test_the_cli_refuses_a_bad_setting_before_anything_runs():
    from tests.conftest import run_cli

    proc = run_cli("list", env={debproxy.ENV: "yes"})
    assert proc.returncode == 2, proc.stderr
    assert "$ROCMFORGE_DEB_CACHE" in proc.stderr and "'yes' is not 0 or 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_archive_hosts_are_the_canonical_one_and_the_mirror():
    assert debproxy.archive_hosts({}) == {"deb.debian.org"}
    env = {"ROCMFORGE_DEBIAN_MIRROR": "http://Mirror.Example:8080/debian"}
    assert debproxy.archive_hosts(env) == {"deb.debian.org", "mirror.example:8080"}


def test_this_hosts_loopback_has_an_address_and_no_interface_has_none():
    assert debproxy.interface_address("lo") == "127.0.0.1"
    assert debproxy.interface_address("no-such-if0") is None


@pytest.mark.parametrize(
    ("local", "bridge", "here", "why"),
    [
        (True, ("172.17.0.1", "docker0"), "172.17.0.1", ""),
        (False, ("172.17.0.1", "docker0"), "172.17.0.1", "not reached through a unix socket"),
        (True, None, "172.17.0.1", "no default bridge"),
        # Docker in a container, its socket shared: its docker0 is not this host's
        (True, ("172.18.0.1", "docker0"), "172.17.0.1", "gateway 172.18.0.1 is not the address of this host's docker0"),
        (True, ("10.88.0.1", "podman0"), None, "not the address of this host's podman0"),
    ],
)
def test_builds_go_through_the_cache_only_where_containers_reach_this_host(local, bridge, here, why):
    address, said = debproxy.reachable(local, bridge, lambda iface: here if iface == "docker0" else None)
    if why:
        assert address is None and why in said, said
    else:
        assert (address, said) == (bridge[0], "")


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        self.server.asked.append(self.path)
        body = self.server.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def upstream(files: dict[str, bytes]):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    server.files, server.asked = files, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def proxied(tmp_path, host: str, locked: dict[str, str], *, archive: bool = True):
    proxy = debproxy.Proxy(locked, tmp_path / "debs", {host} if archive else {"deb.debian.org"})
    proxy.refuse_loopback = False  # the upstream here is on loopback
    server = debproxy.listen(proxy, "127.0.0.1")
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{server.server_address[1]}"})
    )
    try:
        yield proxy, lambda url: opener.open(url, timeout=30).read()
    finally:
        server.shutdown()
        server.server_close()


def test_a_locked_deb_is_fetched_once_kept_and_then_served_from_the_cache(tmp_path):
    with upstream({POOL: GOOD}) as (host, up), proxied(tmp_path, host, {"netbase=6.5": SHA}) as (proxy, get):
        assert get(f"http://{host}{POOL}") == GOOD
        assert (tmp_path / "debs" / f"{SHA}.deb").read_bytes() == GOOD
        assert get(f"http://{host}{POOL}") == GOOD
        assert up.asked == [POOL]
        assert (len(proxy.counts.kept), len(proxy.counts.served)) == (1, 1)


def test_a_cached_file_without_the_locked_hash_is_fetched_again(tmp_path):
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs" / f"{SHA}.deb").write_bytes(b"edited")
    with upstream({POOL: GOOD}) as (host, up), proxied(tmp_path, host, {"netbase=6.5": SHA}) as (proxy, get):
        assert get(f"http://{host}{POOL}") == GOOD
        assert up.asked == [POOL] and proxy.counts.served == []
        assert (tmp_path / "debs" / f"{SHA}.deb").read_bytes() == GOOD


def test_other_bytes_than_the_locked_ones_pass_but_are_not_kept(tmp_path):
    with upstream({POOL: b"something else"}) as (host, _), proxied(tmp_path, host, {"netbase=6.5": SHA}) as (p, get):
        assert get(f"http://{host}{POOL}") == b"something else"  # apt refuses them by the signed index
        assert not (tmp_path / "debs" / f"{SHA}.deb").exists()
        assert len(p.counts.not_kept) == 1 and not list((tmp_path / "debs").iterdir())


@pytest.mark.parametrize("archive", [True, False])
def test_an_unlocked_deb_or_another_hosts_passes_through_untouched(tmp_path, archive):
    locked = {"netbase=6.4": SHA} if archive else {"netbase=6.5": SHA}
    with upstream({POOL: GOOD}) as (host, up), proxied(tmp_path, host, locked, archive=archive) as (proxy, get):
        assert get(f"http://{host}{POOL}") == GOOD
        assert get(f"http://{host}{POOL}") == GOOD
        assert up.asked == [POOL, POOL] and len(proxy.counts.passed) == 2
        assert not (tmp_path / "debs").exists()


def test_indexes_and_missing_files_pass_with_their_status(tmp_path):
    index = "/debian/dists/trixie/InRelease"
    with upstream({index: b"signed"}) as (host, _), proxied(tmp_path, host, {"netbase=6.5": SHA}) as (_p, get):
        assert get(f"http://{host}{index}") == b"signed"
        with pytest.raises(urllib.error.HTTPError) as exc:
            get(f"http://{host}/debian/dists/none/InRelease")
        assert exc.value.code == 404


def test_the_hosts_loopback_is_not_forwarded_to(tmp_path):
    with upstream({POOL: GOOD}) as (host, up), proxied(tmp_path, host, {}) as (proxy, get):
        proxy.refuse_loopback = True
        with pytest.raises(urllib.error.HTTPError) as exc:
            get(f"http://{host}{POOL}")
        assert exc.value.code == 403 and up.asked == []
