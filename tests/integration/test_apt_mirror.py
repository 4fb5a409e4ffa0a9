"""One Debian mirror setting (ROCMFORGE_DEBIAN_MIRROR) for every apt access, on the real engine:
debootstrap, a build's apt step, `lock` and `lock --check` all go through it; the same pins
through another mirror give the same image ID; a mirror that does not answer gives bounded
retries, one message naming it, old tags and the lock untouched and nothing left behind.

"Another mirror" is tests/local_apt_mirror.py: a different URL serving the same archive."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import local_apt_mirror
from tests.conftest import copy_project, run_cli
from tests.integration.test_build_leftovers import assert_nothing_left, engine_state

pytestmark = pytest.mark.docker

DEAD = "http://127.0.0.1:9/debian"  # nothing listens on port 9, on the host or in a container
STACK = "debian13-rocm5.7"


def _scratch(tmp_path, include: list[str] | None = None):
    """The project with two small targets: `mirror-probe` (one tiny apt package on the shared
    bootstrapped base) and, when include is given, `boot-probe` on a stack of its own recipe."""
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["stacks"][STACK]["apt"]["netbase"] = "6.5"
    common = {"version": "1", "archs": ["gfx90a"], "source_date_epoch": 1764547200}
    data["targets"]["mirror-probe"] = {"description": "one apt package", "stack": STACK, "apt": ["netbase"], **common}
    if include:
        stack = json.loads(json.dumps(data["stacks"][STACK]))
        stack["base"]["bootstrap"]["include"] = include
        stack["apt"] = {}
        data["stacks"]["mirror-test-stack"] = stack
        data["targets"]["boot-probe"] = {
            "description": "a bootstrapped base alone",
            "stack": "mirror-test-stack",
            **common,
        }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = yaml.safe_load((tmp_path / "matrix.lock").read_text())
    lock["apt"]["mirror-probe"] = {"netbase": "6.5"}
    if include:
        lock["bases"]["mirror-test-stack"] = lock["bases"][STACK]
    (tmp_path / "matrix.lock").write_text(yaml.safe_dump(lock))
    return matrix


def _cli(matrix, state, *args, mirror: str | None = None, env: dict | None = None):
    env = {"ROCMFORGE_DEBIAN_MIRROR": mirror or "", **(env or {})}
    return run_cli("--matrix", str(matrix), "--state-dir", str(state), *args, env=env)


def _content_tag(matrix, name: str) -> str:
    rows = json.loads(run_cli("--matrix", str(matrix), "list", "--json").stdout)
    return next(r["content_tag"] for r in rows if r["name"] == name)


def test_apt_step_through_another_mirror_gives_the_same_image(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path)
    state = tmp_path / "state"
    built = _cli(matrix, state, "build", "--target", "mirror-probe")
    assert built.returncode == 0, built.stderr[-3000:]
    want = docker_client.images.get(_content_tag(matrix, "mirror-probe")).id
    manifest = state / "artifacts" / "mirror-probe" / "manifest.json"
    assert json.loads(manifest.read_text())["apt_mirror"] == "http://deb.debian.org/debian"
    with local_apt_mirror.serve(docker_client) as (url, served):
        # an empty .deb cache: a .deb kept there by an earlier build would not be fetched (mirrors.md)
        empty = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
        proc = _cli(matrix, state, "verify-repro", "--target", "mirror-probe", "--json", mirror=url, env=empty)
        assert _cli(matrix, state, "manifest", "--target", "mirror-probe", mirror=url).returncode == 0
    assert json.loads(manifest.read_text())["apt_mirror"] == url
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report.get("explanation") or proc.stderr[-3000:]
    assert report["image_ids"] == [want, want]
    assert any("/pool/main/n/netbase/" in p for p in served), "the package did not come through the mirror"
    history = " ".join(h["CreatedBy"] for h in docker_client.api.history(want))
    assert url not in history and "127.0.0.1" not in history


def test_dead_mirror_during_an_apt_step(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path)
    state = tmp_path / "state"
    assert _cli(matrix, state, "build", "--target", "mirror-probe").returncode == 0
    tag = _content_tag(matrix, "mirror-probe")
    before = docker_client.images.get(tag).id
    engine_before = engine_state(docker_client, "mirror-probe", DEAD)
    proc = _cli(matrix, state, "verify-repro", "--target", "mirror-probe", mirror=DEAD)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"the Debian mirror {DEAD} ($ROCMFORGE_DEBIAN_MIRROR) did not answer" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert docker_client.images.get(tag).id == before
    assert_nothing_left(docker_client, engine_before)  # other targets' caches are not ours


def test_dead_mirror_during_bootstrap(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path, include=["netbase", "less"])
    state = tmp_path / "state"
    proc = _cli(matrix, state, "build", "--target", "boot-probe", mirror=DEAD)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"debootstrap of trixie: the Debian mirror {DEAD} ($ROCMFORGE_DEBIAN_MIRROR) did not answer" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "recipe-" not in " ".join(
        t for i in docker_client.images.list("rocmforge/base-mirror-test-stack") for t in i.tags
    )
    assert not list((state / "work").glob("bootstrap-*"))


def test_dead_mirror_during_lock(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path)
    state = tmp_path / "state"
    lock_bytes = (tmp_path / "matrix.lock").read_bytes()
    assert _cli(matrix, state, "build", "--target", "mirror-probe").returncode == 0  # the base is there
    engine_before = engine_state(docker_client, "mirror-probe", DEAD)
    for args in (["lock", "--check"], ["lock"]):
        proc = _cli(matrix, state, *args, "--target", "mirror-probe", mirror=DEAD)
        assert proc.returncode == 1, proc.stderr[-2000:]
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and DEAD in errors[0] and "did not answer" in errors[0], proc.stderr[-2000:]
        assert (tmp_path / "matrix.lock").read_bytes() == lock_bytes
    assert_nothing_left(docker_client, engine_before)  # other targets' caches are not ours


def test_lock_check_goes_through_the_mirror(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path)
    state = tmp_path / "state"
    with local_apt_mirror.serve(docker_client) as (url, served):
        proc = _cli(matrix, state, "lock", "--check", "--target", "mirror-probe", mirror=url)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert any(p.endswith("/InRelease") for p in served), "lock --check did not read the mirror"


def test_bootstrap_through_another_mirror_gives_the_same_base(docker_client, session_images, tmp_path):
    matrix = _scratch(tmp_path, include=["netbase"])
    state = tmp_path / "state"
    ids = []
    with local_apt_mirror.serve(docker_client) as (url, served):
        for mirror in (None, url):
            assert _cli(matrix, state, "clean", "--target", "boot-probe").returncode == 0
            _remove_base(docker_client)
            proc = _cli(matrix, state, "build", "--target", "boot-probe", mirror=mirror)
            assert proc.returncode == 0, proc.stderr[-3000:]
            base = docker_client.images.list("rocmforge/base-mirror-test-stack")
            ids.append((base[0].id, docker_client.images.get(_content_tag(matrix, "boot-probe")).id))
    assert any("/pool/main/" in p for p in served), "debootstrap did not go through the mirror"
    assert ids[0] == ids[1]
    shadow = docker_client.containers.run(ids[1][0], ["cat", "/etc/shadow"], remove=True).decode()
    assert all(line.split(":")[2] == "" for line in shadow.splitlines()), shadow
    assert _cli(matrix, state, "clean", "--target", "boot-probe").returncode == 0
    _remove_base(docker_client)


def _remove_base(client) -> None:
    for image in client.images.list("rocmforge/base-mirror-test-stack"):
        for tag in image.tags:
            client.images.remove(tag)


def test_a_bad_mirror_setting_is_refused(tmp_path):
    matrix = _scratch(tmp_path)
    for args in (["build", "--target", "mirror-probe"], ["lock", "--check", "--target", "mirror-probe"]):
        proc = _cli(matrix, tmp_path / "state", *args, mirror="deb.debian.org debian")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "$ROCMFORGE_DEBIAN_MIRROR" in proc.stderr, proc.stderr
