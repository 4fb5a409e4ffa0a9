"""scripts/with-engine on a stock Debian sid host (python3, git, ca-certificates only; a container
in which an engine can run, tests/engine_host.py), with the containerd image store switched on in
/etc/docker/daemon.json before any engine exists, as Docker's own instructions leave a user today:
it installs both the daemon (docker.io) and the `docker` command (docker-cli, which sid's
docker.io only Recommends), starts dockerd, runs the command against that store, and leaves no
daemon running. A daemon that never comes up: the last lines of its log, exit 1, none left."""

from __future__ import annotations

import json

import pytest

from tests import engine_host
from tests.integration.test_stock_host import _ca_bundle, _copy_checkout

pytestmark = pytest.mark.docker

CONTAINERD_STORE = {"features": {"containerd-snapshotter": True}}
PROBE = (
    'docker info --format "{{.Driver}} {{json .DriverStatus}}" && command -v python3 && '
    'python3 build.py doctor --json > /tmp/doctor.json; echo "doctor exit $?"'
)


def _sh(container, script: str, env: dict | None = None) -> tuple[int, str]:
    rc, out = container.exec_run(["bash", "-c", script], environment=env, workdir="/src", demux=False)
    return rc, out.decode(errors="replace")


def _daemons(container) -> str:
    # no procps on a minimal system: the kernel's own list
    return _sh(
        container, 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = dockerd ] && echo "$p"; done; true'
    )[1].strip()


@pytest.fixture(scope="module")
def stock_sid(docker_client, tmp_path_factory):
    src = tmp_path_factory.mktemp("with-engine-src")
    _copy_checkout(src)
    binds = {str(src): {"bind": "/src", "mode": "rw"}}
    env = {}
    ca = _ca_bundle()
    if ca:  # PyPI through the intercepting proxy (WORLD.md); never part of the checkout
        binds[str(ca)] = {"bind": "/etc/ssl/certs/rocmforge-host-ca.crt", "mode": "ro"}
        env = {v: "/etc/ssl/certs/rocmforge-host-ca.crt" for v in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")}
    with engine_host.stock_host(docker_client, binds, env, workdir=tmp_path_factory.mktemp("stock-boot")) as c:
        yield c


def test_with_engine_on_stock_sid_with_the_containerd_store(stock_sid):
    assert _sh(stock_sid, "command -v docker dockerd || true")[1].strip() == ""  # nothing installed yet
    rc, _ = _sh(stock_sid, f"mkdir -p /etc/docker && echo '{json.dumps(CONTAINERD_STORE)}' > /etc/docker/daemon.json")
    assert rc == 0
    rc, out = _sh(stock_sid, f"ROCMFORGE_BROWSER=none scripts/with-engine bash -c '{PROBE}'")
    assert rc == 0, out[-4000:]
    assert "io.containerd.snapshotter.v1" in out, out[-3000:]
    assert "/src/.venv/bin/python3" in out
    assert "doctor exit" in out
    doctor = json.loads(_sh(stock_sid, "cat /tmp/doctor.json")[1])
    engine_check = next(c for c in doctor["checks"] if c["name"] == "engine")
    assert "containerd image store" in engine_check["detail"], engine_check
    assert _sh(stock_sid, "command -v docker dockerd")[0] == 0
    assert _daemons(stock_sid) == "", "with-engine left the dockerd it started running"


def test_a_daemon_that_never_comes_up_is_reported_and_not_left_running(stock_sid):
    rc, _ = _sh(
        stock_sid, """mkdir -p /etc/docker && echo '{"storage-driver": "no-such-driver"}' > /etc/docker/daemon.json"""
    )
    assert rc == 0
    try:
        rc, out = _sh(stock_sid, "ROCMFORGE_BROWSER=none scripts/with-engine true")
        assert rc == 1, out[-3000:]
        assert "dockerd did not come up" in out
        assert "no-such-driver" in out, "the daemon's own reason (its log's last lines) is not shown"
        assert "Traceback" not in out
        assert _daemons(stock_sid) == ""
    finally:
        _sh(stock_sid, "rm -f /etc/docker/daemon.json")
