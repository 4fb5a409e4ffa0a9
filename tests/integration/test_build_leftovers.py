"""Normalisation that costs what the target adds, and builds that leave nothing behind, on the real
engine: the base's layers pass through (the image starts with exactly the base's diff IDs), and
after a build, a verify-repro, a failed build and a build interrupted while building or while
normalising, the engine holds no image or container it did not hold before, except the target's
own normalised image."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from rocmforge.resolve import bootstrap
from rocmforge.define.matrix import load_matrix
from rocmforge.render.plan import load_plan
from tests.conftest import BUILD_PY, ROOT, copy_project, interruptible, run_cli

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"
MARK = "COPY probes/ /opt/rocmforge/probes/"


@pytest.fixture(scope="module")
def base(docker_client, tmp_path_factory):
    """The bootstrapped base, present before any snapshot is taken (it is shared, not a leftover)."""
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    return bootstrap.ensure_base(docker_client, STACK, stack, tmp_path_factory.mktemp("work"), lambda msg: None)


def project(tmp_path, steps: str):
    """A scratch project with one small target whose Dockerfile gains `steps` after the probes."""
    name = f"scratch-{uuid.uuid4().hex[:8]}"
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"][name] = {"description": "a scratch target", "stack": STACK, "version": "1",
                             "archs": ["gfx90a"], "source_date_epoch": 1764547200}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    tpl.write_text(tpl.read_text().replace(MARK, MARK + f"\n{{% if name == '{name}' %}}{steps}\n{{% endif %}}"))
    return matrix, tmp_path / "state", name


def engine_state(client) -> tuple[set[str], set[str]]:
    images = {img["Id"] for img in client.api.images(all=True)}
    containers = {c["Id"] for c in client.api.containers(all=True)}
    return images, containers


def assert_nothing_left(client, before, allowed: set[str] = frozenset(), grace: float = 30.0):
    """The engine may finish removing a cancelled build's container a moment after we hang up."""
    deadline = time.monotonic() + grace
    while True:
        images, containers = engine_state(client)
        extra_images, extra_containers = images - before[0] - set(allowed), containers - before[1]
        if not extra_images and not extra_containers:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: images {sorted(extra_images)}, containers {sorted(extra_containers)}")
        time.sleep(1)


def cache_images(client, state, name) -> set[str]:
    """Full IDs of the build cache the target kept: its `rocmforge-cache/<name>:last` image and the
    step images its record names, with their parents that no tag reaches."""
    from rocmforge.build import buildcache

    out = set()
    for ref in [f"rocmforge-cache/{name}:last", *buildcache.recorded(state, name)]:
        try:
            img = client.api.inspect_image(ref)
        except Exception:  # noqa: BLE001 - gone
            continue
        while img and not (img.get("RepoTags") and not any(t.startswith("rocmforge-cache/") for t in img["RepoTags"])):
            out.add(img["Id"])
            img = client.api.inspect_image(img["Parent"]) if img.get("Parent") else None
    return out


def test_build_and_verify_repro_pass_the_base_through_and_leave_nothing(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN head -c 1000000 /dev/zero > /opt/filler && ln /opt/filler /opt/hard "
                                            "&& rm /etc/issue")
    before = engine_state(docker_client)
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    tp = load_plan(matrix).targets[name]
    image = docker_client.api.inspect_image(tp.content_tag)
    base_layers = docker_client.api.inspect_image(base)["RootFS"]["Layers"]
    layers = image["RootFS"]["Layers"]
    assert layers[:len(base_layers)] == base_layers and len(layers) > len(base_layers)
    log = (state / "logs" / f"{name}.log").read_text()
    assert f"{len(base_layers)} layer(s) of the base {base} passed through" in log
    # Only what the target added was read: a few MB, not the 120 MB base.
    read_mb = int(log.split(" MB from the ")[0].rsplit("read ", 1)[1].replace(",", ""))
    assert read_mb < 20, log
    # A target adding 1 MB keeps its build cache, named, and listed by clean --dry-run.
    assert f"build cache kept as rocmforge-cache/{name}:last" in proc.stderr
    cache = cache_images(docker_client, state, name)
    assert cache
    try:
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "verify-repro", "--target", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert image["Id"] in proc.stdout
        assert_nothing_left(docker_client, before, {image["Id"]} | cache)
        assert not list((state / "work").glob("repro-*"))
        listing = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name, "--dry-run")
        assert f"would remove build cache: rocmforge-cache/{name}:last" in listing.stdout, listing.stdout
        assert engine_state(docker_client)[0] >= cache
    finally:
        run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert_nothing_left(docker_client, before)


def test_rebuild_reuses_the_cache_and_replaces_it(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one\nRUN echo {{ 'first' }} > /opt/two")
    before = engine_state(docker_client)
    try:
        assert run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name).returncode == 0
        first = docker_client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]
        first_cache = cache_images(docker_client, state, name)
        tpl = matrix.parent / "templates" / "Dockerfile.j2"
        tpl.write_text(tpl.read_text().replace("{{ 'first' }}", "second"))
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Using cache" in (state / "logs" / f"{name}.log").read_text()    # `touch /opt/one` was reused
        second = docker_client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]
        second_cache = cache_images(docker_client, state, name)
        assert first_cache - second_cache          # the first build's own steps went with it
        assert_nothing_left(docker_client, before, {first, second} | second_cache)
        # With no budget, nothing is kept and the old cache goes too.
        tpl.write_text(tpl.read_text().replace("> /opt/two", "> /opt/three"))
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name,
                       env={"ROCMFORGE_BUILD_CACHE_MAX": "0"})
        assert proc.returncode == 0 and "build cache kept" not in proc.stderr, proc.stderr[-3000:]
        third = docker_client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]
        assert_nothing_left(docker_client, before, {first, second, third})
    finally:
        for content in {t for img in docker_client.api.images(name=f"rocmforge/{name}") for t in img["RepoTags"]}:
            docker_client.api.remove_image(content)
        run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert_nothing_left(docker_client, before)


def test_failed_build_leaves_nothing(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one\nRUN touch /opt/two && false")
    before = engine_state(docker_client)
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "touch /opt/two && false" in proc.stderr
    assert_nothing_left(docker_client, before)


@pytest.mark.parametrize("phase, steps, signal_when", [
    ("build", "RUN touch /opt/one\nRUN echo {nonce} && sleep 120", "sleep 120"),
    # 500 MB of random bytes: normalising it takes seconds, long enough to be interrupted in it
    ("normalise", "RUN echo {nonce} && head -c 500000000 /dev/urandom > /opt/noise", "normalise sha256:"),
])
def test_interrupted_build_leaves_nothing(docker_client, base, tmp_path, phase, steps, signal_when):
    # A step no earlier run has made, so no builder cache can finish it before the interrupt.
    matrix, state, name = project(tmp_path, steps.replace("{nonce}", uuid.uuid4().hex))
    before = engine_state(docker_client)
    log = state / "logs" / f"{name}.log"
    proc = subprocess.Popen([sys.executable, str(BUILD_PY), "--matrix", str(matrix), "--state-dir", str(state),
                             "build", "--target", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"}, preexec_fn=interruptible)
    try:
        while signal_when not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, f"the build ended before the {phase} phase: {proc.communicate()}"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    tp = load_plan(matrix).targets[name]
    assert not docker_client.api.images(name=tp.content_tag.rsplit(":", 1)[0])
    assert_nothing_left(docker_client, before)
    assert not list((state / "work").glob("repro-*"))


def test_clean_dry_run_names_leftovers_and_clean_removes_them(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    before = engine_state(docker_client)
    # What a killed build (SIGKILL: no clean-up runs) leaves: its raw tag and its step image.
    raw = docker_client.api.build(fileobj=__import__("io").BytesIO(f"FROM {base}\nLABEL io.rocmforge.content-hash=x\n"
                                                                   "RUN touch /opt/left\n".encode()),
                                  tag=f"rocmforge-raw/{name}:killed", rm=True, decode=True)
    for _ in raw:
        pass
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"would remove leftover tag: rocmforge-raw/{name}:killed" in proc.stdout
    assert engine_state(docker_client)[0] - before[0]          # nothing removed yet
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert proc.returncode == 0, proc.stderr
    assert_nothing_left(docker_client, before)
