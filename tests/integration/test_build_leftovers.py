"""Normalisation that costs what the target adds, and builds that leave nothing behind, on the real
engine: the base's layers pass through (the image starts with exactly the base's diff IDs), and
after a build, a verify-repro, a failed build and a build interrupted while building or while
normalising (by SIGINT, SIGTERM or SIGHUP), the engine holds no image or container of that build
that it did not hold before, except the target's own normalised image. Each check looks only at its
own build's objects, so that it holds while other builds use the same engine."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rocmforge.define.matrix import load_matrix
from rocmforge.render.plan import load_plan
from rocmforge.resolve import bootstrap
from tests.conftest import BUILD_PY, ROOT, copy_project, interruptible, run_cli

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"
MARK = "COPY probes/ /opt/rocmforge/probes/"
OWN_LABEL = "io.rocmforge.test.build"


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
    data["targets"][name] = {
        "description": "a scratch target",
        "stack": STACK,
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    # The label first: every step image the target adds then names the target in its history.
    tpl.write_text(
        tpl.read_text().replace(
            MARK, MARK + f"\n{{% if name == '{name}' %}}LABEL {OWN_LABEL}={name}\n{steps}\n{{% endif %}}"
        )
    )
    return matrix, tmp_path / "state", name


@dataclass(frozen=True)
class EngineState:
    """The engine's images and containers at one moment, and the marks that name one build's own."""

    images: frozenset[str]
    containers: frozenset[str]
    marks: tuple[str, ...]


def engine_state(client, *marks: str) -> EngineState:
    """marks: strings only this test's objects carry (its scratch target's name, which project()
    writes into a label of every step the target adds, so each step image's history carries it).
    Other builds may run on the same engine meanwhile: only objects that carry a mark are judged."""
    assert marks, "a leftover check needs the marks of its own build"
    return EngineState(
        frozenset(img["Id"] for img in client.api.images(all=True)),
        frozenset(c["Id"] for c in client.api.containers(all=True)),
        marks,
    )


def _marked(text: str, marks: tuple[str, ...]) -> bool:
    return any(m in text for m in marks)


def image_is_ours(client, image_id: str, marks: tuple[str, ...]) -> bool:
    """Its tags, labels or the history of every step under it name one of marks."""
    import docker.errors

    try:
        found = json.dumps(client.api.inspect_image(image_id)) + json.dumps(client.api.history(image_id))
    except docker.errors.NotFound:  # removed since it was listed
        return False
    return _marked(found, marks)


def container_is_ours(client, container_id: str, marks: tuple[str, ...]) -> bool:
    """Its command or labels name one of marks (a builder's container of our step), or its image is ours."""
    import docker.errors

    try:
        found = client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return False
    return _marked(json.dumps(found["Config"]), marks) or image_is_ours(client, found["Image"], marks)


def deferred() -> set[str]:
    """Short IDs of the step images builds left to the last build out: while another build runs on
    the engine, a build may not remove them (rocmforge.assemble.steplock), and that one removes them."""
    from rocmforge.assemble import steplock

    try:
        return set(json.loads(Path(str(steplock.engine_path()) + ".pending").read_text()))
    except (OSError, ValueError):
        return set()


def our_leftovers(client, before: EngineState, allowed: set[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(images, containers) that appeared since `before` and carry its marks, less `allowed` and
    less the step images handed to the last build out."""
    images = {img["Id"] for img in client.api.images(all=True)} - before.images - set(allowed)
    handed_over = deferred()
    images = {i for i in images if i.split(":")[-1][:12] not in handed_over}
    containers = {c["Id"] for c in client.api.containers(all=True)} - before.containers
    return (
        sorted(i for i in images if image_is_ours(client, i, before.marks)),
        sorted(c for c in containers if container_is_ours(client, c, before.marks)),
    )


def assert_nothing_left(client, before: EngineState, allowed: set[str] = frozenset(), grace: float = 30.0):
    """The engine may finish removing a cancelled build's container a moment after we hang up."""
    deadline = time.monotonic() + grace
    while True:
        images, containers = our_leftovers(client, before, allowed)
        if not images and not containers:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: images {images}, containers {containers}")
        time.sleep(1)


def cache_images(client, state, name) -> set[str]:
    """Full IDs of the build cache the target kept: its `rocmforge-cache/<name>:last` image and the
    step images its record names, with their parents that no tag reaches."""
    from rocmforge.assemble import buildcache

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
    matrix, state, name = project(
        tmp_path, "RUN head -c 1000000 /dev/zero > /opt/filler && ln /opt/filler /opt/hard && rm /etc/issue"
    )
    before = engine_state(docker_client, name)
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    tp = load_plan(matrix).targets[name]
    image = docker_client.api.inspect_image(tp.content_tag)
    base_layers = docker_client.api.inspect_image(base)["RootFS"]["Layers"]
    layers = image["RootFS"]["Layers"]
    assert layers[: len(base_layers)] == base_layers and len(layers) > len(base_layers)
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
        assert all(docker_client.api.inspect_image(i) for i in cache)
    finally:
        run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert_nothing_left(docker_client, before)


def test_rebuild_reuses_the_cache_and_replaces_it(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one\nRUN echo {{ 'first' }} > /opt/two")
    before = engine_state(docker_client, name)
    try:
        assert run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name).returncode == 0
        first = docker_client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]
        first_cache = cache_images(docker_client, state, name)
        tpl = matrix.parent / "templates" / "Dockerfile.j2"
        tpl.write_text(tpl.read_text().replace("{{ 'first' }}", "second"))
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Using cache" in (state / "logs" / f"{name}.log").read_text()  # `touch /opt/one` was reused
        second = docker_client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]
        second_cache = cache_images(docker_client, state, name)
        assert first_cache - second_cache  # the first build's own steps went with it
        assert_nothing_left(docker_client, before, {first, second} | second_cache)
        # With no budget, nothing is kept and the old cache goes too.
        tpl.write_text(tpl.read_text().replace("> /opt/two", "> /opt/three"))
        proc = run_cli(
            "--matrix",
            str(matrix),
            "--state-dir",
            str(state),
            "build",
            "--target",
            name,
            env={"ROCMFORGE_BUILD_CACHE_MAX": "0"},
        )
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
    before = engine_state(docker_client, name)
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "touch /opt/two && false" in proc.stderr
    assert_nothing_left(docker_client, before)


BUILD_STEPS = "RUN touch /opt/one\nRUN echo {nonce} && sleep 120"
# 500 MB of random bytes: normalising it takes seconds, long enough to be interrupted in it
NORMALISE_STEPS = "RUN echo {nonce} && head -c 500000000 /dev/urandom > /opt/noise"


@pytest.mark.parametrize(
    "phase, steps, signal_when, sig",
    [
        pytest.param("build", BUILD_STEPS, "sleep 120", signal.SIGINT, id="build-INT"),
        # CI cancelling the job, `timeout`, `docker stop`; the terminal closed
        pytest.param("build", BUILD_STEPS, "sleep 120", signal.SIGTERM, id="build-TERM"),
        pytest.param("build", BUILD_STEPS, "sleep 120", signal.SIGHUP, id="build-HUP"),
        pytest.param("normalise", NORMALISE_STEPS, "normalise sha256:", signal.SIGINT, id="normalise-INT"),
        pytest.param("normalise", NORMALISE_STEPS, "normalise sha256:", signal.SIGTERM, id="normalise-TERM"),
    ],
)
def test_interrupted_build_leaves_nothing(docker_client, base, tmp_path, phase, steps, signal_when, sig):
    # A step no earlier run has made, so no builder cache can finish it before the interrupt.
    matrix, state, name = project(tmp_path, steps.replace("{nonce}", uuid.uuid4().hex))
    before = engine_state(docker_client, name)
    log = state / "logs" / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, str(BUILD_PY), "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=interruptible,
    )
    try:
        while signal_when not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, f"the build ended before the {phase} phase: {proc.communicate()}"
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, out + err
    assert "interrupted" in err and "Traceback" not in err, err
    tp = load_plan(matrix).targets[name]
    assert not docker_client.api.images(name=tp.content_tag.rsplit(":", 1)[0])
    assert_nothing_left(docker_client, before)
    assert not list((state / "work").glob("repro-*"))


def test_the_leftover_check_sees_its_own_builds_objects_and_no_other(docker_client, base):
    """Another build's image and container are not ours; our own step images and container are,
    even untagged (the label names the build in each one's history)."""
    ours, theirs = f"scratch-{uuid.uuid4().hex[:8]}", f"scratch-{uuid.uuid4().hex[:8]}"
    before = engine_state(docker_client, ours)
    made, containers = [], []
    try:
        for build in (theirs, ours):
            dockerfile = f"FROM {base}\nLABEL {OWN_LABEL}={build}\nRUN echo {uuid.uuid4().hex} > /opt/step\n"
            image_id = [
                c["aux"]["ID"]
                for c in docker_client.api.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, decode=True)
                if "ID" in c.get("aux", {})
            ][-1]
            made.append(image_id)
            containers.append(docker_client.api.create_container(image_id, ["true"])["Id"])
        images, found = our_leftovers(docker_client, before)
        assert found == [containers[1]]
        assert made[1] in images and made[0] not in images
        assert len(images) == 2  # the RUN step's image and the LABEL step's under it
        with pytest.raises(pytest.fail.Exception, match="left behind"):
            assert_nothing_left(docker_client, before, grace=0)
        docker_client.api.remove_container(containers.pop(), force=True)
        assert_nothing_left(docker_client, before, set(images), grace=0)  # theirs are still there
    finally:
        for c in containers:
            docker_client.api.remove_container(c, force=True)
        for i in made:
            docker_client.api.remove_image(i, force=True)
    assert_nothing_left(docker_client, before, grace=5)


def test_clean_dry_run_names_leftovers_and_clean_removes_them(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    before = engine_state(docker_client, name)
    # What a killed build (SIGKILL: no clean-up runs) leaves: its raw tag and its step image.
    raw = docker_client.api.build(
        fileobj=__import__("io").BytesIO(
            f"FROM {base}\nLABEL io.rocmforge.content-hash=x {OWN_LABEL}={name}\nRUN touch /opt/left\n".encode()
        ),
        tag=f"rocmforge-raw/{name}:killed",
        rm=True,
        decode=True,
    )
    for _ in raw:
        pass
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"would remove leftover tag: rocmforge-raw/{name}:killed" in proc.stdout
    assert our_leftovers(docker_client, before)[0]  # nothing removed yet
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert proc.returncode == 0, proc.stderr
    assert_nothing_left(docker_client, before)


def test_a_second_build_of_the_same_image_waits_and_takes_the_first_ones(docker_client, base, tmp_path):
    """Two builds of one target side by side on one machine (two CI jobs on a runner): the second
    waits for the first and takes its image, running no build step of its own."""
    matrix, state, name = project(tmp_path, "RUN sleep 3 && echo built > /opt/once")
    first = subprocess.Popen(
        [sys.executable, str(BUILD_PY), "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert first.stderr is not None
    seen = []
    try:
        for line in first.stderr:  # the first one holds the claim once it says it is building
            seen.append(line)
            if line.startswith("building "):
                break
        second = run_cli("--matrix", str(matrix), "--state-dir", str(tmp_path / "state2"), "build", "--target", name)
        seen.extend(first.stderr)
        assert first.wait() == 0, "".join(seen)[-3000:]
        assert second.returncode == 0, second.stderr[-3000:]
        tp = load_plan(matrix).targets[name]
        assert f"waiting {name}: another process on this machine is building {tp.content_tag}" in second.stderr
        assert f"up to date {name}: {tp.content_tag}" in second.stderr and f"building {name}" not in second.stderr
        assert not (tmp_path / "state2" / "logs" / f"{name}.log").exists()
    finally:
        first.kill()
        run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
