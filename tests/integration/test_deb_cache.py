"""One download serves the build and the outside check (issue 51), on the real engine and a real
Debian mirror: apt in a build fetches its locked .debs through rocmforge's proxy (host.debproxy),
which keeps them in the cache the outside check reads; the image is the same with and without it,
on either builder, and records nothing of it; a build with a warm cache, and the outside check,
fetch no .deb upstream; an engine this host is not the gateway of gets direct builds, said once.

Upstream is tests/local_apt_mirror.py (a second mirror URL, as an air-gapped site's, in front of
deb.debian.org), set as ROCMFORGE_DEBIAN_MIRROR: every request that leaves this host passes it and
is counted there. Each test has an empty .deb cache of its own (XDG_CACHE_HOME)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import uuid

import pytest
import yaml

from rocmforge.host import debproxy
from tests import local_apt_mirror
from tests.conftest import copy_project, run_cli
from tests.integration.test_build_leftovers import base  # noqa: F401 (the fixture: the bootstrapped base)
from tests.integration.test_builders import buildkit_env  # noqa: F401 (the fixture: the pinned buildx)

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"
PACKAGE, VERSION = "netbase", "6.5"  # one small package the stack's lock has the .deb hash of


def _project(tmp_path):
    """A copy of the project with one target of its own that apt-installs PACKAGE."""
    name = f"debcache-{uuid.uuid4().hex[:8]}"
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["stacks"][STACK]["apt"][PACKAGE] = VERSION
    data["targets"][name] = {
        "description": "one apt package",
        "stack": STACK,
        "apt": [PACKAGE],
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = yaml.safe_load((tmp_path / "matrix.lock").read_text())
    lock["apt"][name] = {PACKAGE: VERSION}
    (tmp_path / "matrix.lock").write_text(yaml.safe_dump(lock))
    sha = lock["debs"][STACK][f"{PACKAGE}={VERSION}"]
    return matrix, tmp_path / "state", name, sha


class Run:
    """The CLI on one project, with one mirror, one .deb cache and one set of variables."""

    def __init__(self, matrix, state, mirror: str, cache, env: dict | None = None) -> None:
        self.matrix, self.state = matrix, state
        self.env = {"ROCMFORGE_DEBIAN_MIRROR": mirror, "XDG_CACHE_HOME": str(cache), **(env or {})}

    def __call__(self, *args: str, env: dict | None = None):
        proc = run_cli(
            "--matrix", str(self.matrix), "--state-dir", str(self.state), *args, env={**self.env, **(env or {})}
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        return proc

    def log(self, name: str) -> str:
        return (self.state / "logs" / f"{name}.log").read_text()


def pool_requests(served: list[str]) -> list[str]:
    return [p for p in served if "/pool/" in p]


def _image(docker_client, run: Run, name: str) -> str:
    rows = json.loads(run("list", "--json").stdout)
    return docker_client.images.get(next(r["content_tag"] for r in rows if r["name"] == name)).id


def _nothing_of(docker_client, image: str, gateway: str) -> None:
    """Neither the image's history nor its config names the proxy (or the argument that carries it)."""
    history = json.dumps(docker_client.api.history(image))
    config = json.dumps(docker_client.api.inspect_image(image))
    for text in (history, config):
        assert gateway not in text and "http_proxy" not in text.lower()


def test_one_download_for_the_build_the_rebuild_and_the_check(docker_client, base, tmp_path):  # noqa: F811
    matrix, state, name, sha = _project(tmp_path)
    cache = tmp_path / "cache"
    gateway = local_apt_mirror.bridge_gateway(docker_client)
    with local_apt_mirror.serve(docker_client) as (url, served):
        run = Run(matrix, state, url, cache)
        try:
            run("build", "--target", name, env={debproxy.ENV: "0"})
            direct = _image(docker_client, run, name)
            assert "direct, not through rocmforge's .deb cache: $ROCMFORGE_DEB_CACHE=0" in run.log(name)
            assert len(pool_requests(served)) == 1 and f"/{PACKAGE}_" in pool_requests(served)[0]
            assert not list(cache.glob("rocmforge/debs/*.deb")), "a direct build kept a .deb"
            run("clean", "--target", name)

            served.clear()
            run("build", "--target", name)
            log = run.log(name)
            assert log.count("rocmforge's .deb cache") == 1, log
            assert "through rocmforge's .deb cache" in log and "0 locked .debs from the cache, 1 fetched" in log
            assert pool_requests(served) and all(f"/{PACKAGE}_" in p for p in pool_requests(served))
            assert (cache / "rocmforge" / "debs" / f"{sha}.deb").is_file(), "the fetched .deb was not kept"
            assert _image(docker_client, run, name) == direct
            _nothing_of(docker_client, direct, gateway)

            # two builds without the engine's cache: apt runs twice more, every .deb from the cache
            served.clear()
            report = json.loads(run("verify-repro", "--target", name, "--json").stdout)
            assert report["image_ids"] == [direct, direct]
            assert pool_requests(served) == [], pool_requests(served)
            for i in ("a", "b"):
                assert "1 locked .debs from the cache, 0 fetched" in run.log(f"{name}.repro-{i}")

            # the outside check's own download of the package, from the same cache
            served.clear()
            check = (
                "from rocmforge.verify.outside import debs; "
                f"src, pool, sha = debs.locate([debs.debian('trixie')], {{'{PACKAGE}': '{VERSION}'}})['{PACKAGE}']; "
                f"print(len(debs.contents(src, pool, sha, '{PACKAGE}', '{VERSION}').files))"
            )
            proc = _python(check, run.env)
            assert proc.returncode == 0 and int(proc.stdout) > 0, proc.stderr
            assert pool_requests(served) == [], pool_requests(served)
        finally:
            run("clean", "--target", name)


def _python(code: str, env: dict):
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )


def test_buildkit_builds_the_same_image_through_the_cache(docker_client, base, buildkit_env, tmp_path):  # noqa: F811
    matrix, state, name, sha = _project(tmp_path)
    cache = tmp_path / "cache"
    gateway = local_apt_mirror.bridge_gateway(docker_client)
    with local_apt_mirror.serve(docker_client) as (url, served):
        run = Run(matrix, state, url, cache, {**buildkit_env, "ROCMFORGE_BUILDER": "buildkit"})
        try:
            run("build", "--target", name, env={debproxy.ENV: "0"})
            direct = _image(docker_client, run, name)
            run("clean", "--target", name)
            served.clear()
            report = json.loads(run("verify-repro", "--target", name, "--json").stdout)
            assert report["image_ids"] == [direct, direct]
            first, second = run.log(f"{name}.repro-a"), run.log(f"{name}.repro-b")
            assert "(buildkit builder)" in first and "0 locked .debs from the cache, 1 fetched" in first, first
            assert "1 locked .debs from the cache, 0 fetched" in second, second
            assert len(pool_requests(served)) == 1, served
            assert (cache / "rocmforge" / "debs" / f"{sha}.deb").is_file()
            run("build", "--target", name)
            _nothing_of(docker_client, _image(docker_client, run, name), gateway)
        finally:
            run("clean", "--target", name)


@contextlib.contextmanager
def tcp_to_engine(socket_path: str = "/var/run/docker.sock"):
    """The same engine reached over tcp://127.0.0.1 (as a remote engine is): a forwarder to its socket."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pump(src, dst) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(socket_path)
            for a, b in ((conn, engine), (engine, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_an_engine_not_behind_a_socket_here_builds_direct_and_says_so(docker_client, base, tmp_path):  # noqa: F811
    if os.environ.get("DOCKER_HOST", "unix://").split("://")[0] != "unix":
        pytest.skip("the engine is not on a unix socket here")
    path = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    matrix, state, name, _ = _project(tmp_path)
    cache = tmp_path / "cache"
    with local_apt_mirror.serve(docker_client) as (url, served), tcp_to_engine(path) as engine:
        run = Run(matrix, state, url, cache, {"DOCKER_HOST": engine})
        try:
            run("build", "--target", name)
            log = run.log(name)
            assert log.count("rocmforge's .deb cache") == 1, log
            assert "direct, not through rocmforge's .deb cache: the engine is not reached through a unix socket" in log
            assert len(pool_requests(served)) == 1, served
            assert not list(cache.glob("rocmforge/debs/*.deb"))
        finally:
            run("clean", "--target", name)


def test_a_mirror_that_does_not_answer_the_proxy_fails_as_it_does_direct(docker_client, base, tmp_path):  # noqa: F811
    """Through the cache apt gets the proxy's 502, not a refused connection: the message must still
    name the mirror, as a direct build's does, and nothing is kept."""
    matrix, state, name, _ = _project(tmp_path)
    dead = f"http://{local_apt_mirror.bridge_gateway(docker_client)}:9/debian"  # the gateway: through the proxy
    run = Run(matrix, state, dead, tmp_path / "cache")
    for setting in ("0", "1"):
        proc = run_cli(
            "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name,
            env={**run.env, debproxy.ENV: setting},
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert f"the Debian mirror {dead} ($ROCMFORGE_DEBIAN_MIRROR) did not answer" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        through = "fetches its .debs through rocmforge's .deb cache" in run.log(name)
        assert through == (setting == "1"), run.log(name)[:600]
    assert not list((tmp_path / "cache").glob("rocmforge/debs/*.deb"))
