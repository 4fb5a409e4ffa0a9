"""Either builder gives the same image (issue 55): a target built with `--builder classic` (the
engine's own builder, through its API) and with `--builder buildkit` (BuildKit inside the engine,
through the pinned buildx: tests/buildx.py) normalises to one image ID. BuildKit writes its history,
its layers and its config its own way and makes no step images; none of that may reach the image
ID, and a BuildKit build leaves nothing behind either. Each test builds a target (or a tag) of its
own name, so that it shares nothing with builds that run on the same engine meanwhile.

Here a scratch target with every kind of step BuildKit records otherwise carries the proof, with
BuildKit's failures and interrupts. hip-runtime with its variants (a real ROCm target: a builder
stage on hip-devel, a COPY --from it, the per-arch pruning) is rebuilt by BuildKit against the
classic builder's images in tests/integration/test_verify_repro.py, where that rebuild is also the
check that those images are reproducible; Docker 28's BuildKit on either store is
tests/integration/test_engines.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rocmforge.render.plan import load_plan
from tests import buildx
from tests.conftest import BUILD_PY, interruptible, run_cli
from tests.integration.test_build_leftovers import (
    assert_nothing_left,
    base,  # noqa: F401 (the fixture: the bootstrapped base)
    cache_images,
    engine_state,
    project,
)

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"

# Steps BuildKit records otherwise than the classic builder: a WORKDIR that makes its folder, a RUN
# that changes nothing, a symlink, a deletion, a COPY into the working directory, ENV and USER.
SCRATCH_STEPS = "\n".join(
    [
        "WORKDIR /opt/rocmforge/work",
        "RUN true",
        "RUN mkdir -p /opt/x && printf 'hi\\n' > /opt/x/y && ln -s y /opt/x/z && rm /etc/issue",
        "COPY probes/archs.py probes/gfxnames.py ./",
        "ENV SCRATCH_STEP=1",
        "USER root",
    ]
)


@pytest.fixture(scope="module")
def buildkit_env():
    """The environment of a BuildKit build: DOCKER_CONFIG naming the pinned buildx's folder."""
    return {"DOCKER_CONFIG": str(buildx.install())}


def build_ids(
    docker_client, matrix, state, name: str, builder: str | None, env: dict | None = None, expect: str | None = None
) -> dict[str, str]:
    """Builds name (and its variants) with builder (None: no --builder, the default, which must pick
    expect); each image's ID by its key."""
    chosen = ("--builder", builder) if builder else ()
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name, *chosen, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    log = (state / "logs" / f"{name}.log").read_text()
    assert f"({builder or expect} builder)" in log.splitlines()[0]
    plan = load_plan(matrix)
    return {tp.key: docker_client.identity(tp.content_tag) for tp in plan.images_of(name)}


def clean(docker_client, matrix, state, name: str) -> None:
    """`clean --target name`, and the build cache its variants kept (`clean` leaves that)."""
    from rocmforge.assemble import buildcache

    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for tp in load_plan(matrix).images_of(name):
        if tp.variant:
            buildcache.forget(docker_client.engine, state, tp.key)


def test_a_scratch_target_is_one_image_from_either_builder(docker_client, base, buildkit_env, tmp_path):
    matrix, state, name = project(tmp_path, SCRATCH_STEPS)
    before = engine_state(docker_client, name)
    try:
        classic = build_ids(docker_client, matrix, state, name, "classic")
        clean(docker_client, matrix, state, name)
        assert_nothing_left(docker_client, before)
        # No --builder: the default (auto) takes BuildKit where buildx is found, as a user's build does.
        as_users_do = {**buildkit_env, "ROCMFORGE_BUILDER": "", "DOCKER_BUILDKIT": ""}
        kit = build_ids(docker_client, matrix, state, name, None, as_users_do, expect="buildkit")
        print(f"classic {classic}\nbuildkit {kit}")
        assert kit == classic
        # BuildKit makes no step images: its raw image is the build cache it keeps, and nothing else stays.
        image = docker_client.identity(load_plan(matrix).targets[name].content_tag)
        assert_nothing_left(docker_client, before, {image} | cache_images(docker_client, state, name))
    finally:
        clean(docker_client, matrix, state, name)
    assert_nothing_left(docker_client, before)


def test_a_failed_buildkit_build_says_where_and_leaves_nothing(docker_client, base, buildkit_env, tmp_path):
    matrix, state, name = project(tmp_path, "RUN echo about to fail && exit 3")
    before = engine_state(docker_client, name)
    proc = run_cli(
        "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name, "--builder", "buildkit",
        env=buildkit_env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"build of {name} failed at Step" in proc.stderr and "exit 3" in proc.stderr.replace("code: 3", "exit 3")
    assert "about to fail" in (state / "logs" / f"{name}.log").read_text()
    assert_nothing_left(docker_client, before)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_buildkit_build_stops_its_step_and_leaves_nothing(
    docker_client, base, buildkit_env, tmp_path, sig
):
    """SIGINT reaches buildx too (one process group), SIGTERM only rocmforge, which stops buildx: either
    way the step's process ends (BuildKit cancels the build) and no image or tag stays."""
    nonce = f"120.{uuid.uuid4().int % 10**9:09d}"  # sleep's own argument: bash may exec sleep in its place
    matrix, state, name = project(tmp_path, f"RUN echo start && sleep {nonce}")
    before = engine_state(docker_client, name)
    log = state / "logs" / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, str(BUILD_PY), "--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name,
         "--builder", "buildkit"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", **buildkit_env},
        preexec_fn=interruptible,
        start_new_session=True,  # a process group of its own, as a terminal's job
    )  # fmt: skip
    try:
        # The step runs, and buildx has told rocmforge so: BuildKit's progress reaches buildx after
        # the step has started, and under load the line can come seconds after the process.
        while not (running(nonce) and log.exists() and f"sleep {nonce}" in log.read_text()):
            assert proc.poll() is None, f"the build ended before its step ran: {proc.communicate()}"
            time.sleep(0.2)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, out + err
    assert "interrupted" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 60
    while running(nonce):
        assert time.monotonic() < deadline, "the interrupted step still runs"
        time.sleep(1)
    assert f"sleep {nonce}" in log.read_text()  # the interrupted build's log is kept, not emptied
    tp = load_plan(matrix).targets[name]
    assert not docker_client.api.images(name=tp.content_tag.rsplit(":", 1)[0])
    assert_nothing_left(docker_client, before)


def running(nonce: str) -> bool:
    """A process on this host runs `sleep nonce` (BuildKit's runc runs a step's processes here too)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == b"sleep\0" + nonce.encode() + b"\0":
                return True
        except OSError:  # gone meanwhile
            continue
    return False
