"""The bake file (issue 55): `render` writes images/docker-bake.json, `docker buildx bake` builds a
target from it on the engine's BuildKit (through the pinned buildx: tests/buildx.py), and
`normalise --target` turns that image into the one rocmforge's own build gives: the same image ID,
also when the bake runs on a second engine (Docker 28's BuildKit, in a container as the engine tests
run it), reached over TCP on 127.0.0.1 through a docker context, as a user reaches a remote builder:
`docker context create`, then DOCKER_CONTEXT for buildx and rocmforge alike."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rocmforge.render.plan import load_plan
from tests import local_registry
from tests.conftest import run_cli
from tests.integration.test_build_leftovers import (
    assert_nothing_left,
    base,  # noqa: F401 (the fixture: the bootstrapped base)
    engine_state,
    project,
)
from tests.integration.test_builders import SCRATCH_STEPS, build_ids, buildkit_env, clean  # noqa: F401 (fixture)

pytestmark = pytest.mark.docker


def render_and_bake(cli: tuple[str, ...], root: Path, name: str, env: dict[str, str]) -> dict:
    """`render`, the key's context where the bake file names it, then `docker buildx bake` of the key
    on the engine env names; the bake file's target for the key."""
    proc = run_cli(*cli, "render")
    assert proc.returncode == 0, proc.stderr
    target = json.loads((root / "images" / "docker-bake.json").read_text())["target"][name]
    proc = run_cli(*cli, "context", "--target", name, "--out", str(root / target["context"]))
    assert proc.returncode == 0, proc.stderr
    # bake reads the file's paths from the folder it runs in: the project's
    baked = subprocess.run(
        ["docker", "buildx", "bake", "--file", "images/docker-bake.json", "--progress", "plain", name],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert baked.returncode == 0, baked.stderr[-3000:]
    return target


def test_a_bake_build_normalises_to_the_image_rocmforge_builds(docker_client, base, buildkit_env, tmp_path):
    matrix, state, name = project(tmp_path, SCRATCH_STEPS)
    root = matrix.parent
    tp = load_plan(matrix).targets[name]
    bake_tag = f"rocmforge-bake/{name}:content-{tp.content_hash[:12]}"
    before = engine_state(docker_client, name)
    cli = ("--matrix", str(matrix), "--state-dir", str(state))
    try:
        own = build_ids(docker_client, matrix, state, name, "classic")[name]
        clean(docker_client, matrix, state, name)
        assert docker_client.identity(tp.content_tag) is None

        target = render_and_bake(cli, root, name, buildkit_env)
        assert target["tags"] == [bake_tag] and target["labels"] == {"io.rocmforge.content-hash": tp.content_hash}
        raw = docker_client.identity(bake_tag)
        assert raw and raw != own  # BuildKit's own image: its times, its history

        proc = run_cli(*cli, "normalise", "--target", name)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        print(proc.stdout)
        assert docker_client.identity(tp.content_tag) == own, (own, proc.stdout)
        assert docker_client.identity(tp.readable_tag) == own
        assert own in proc.stdout
        assert docker_client.identity(bake_tag) is None  # taken: the raw image is gone with its tag
        assert (state / "artifacts" / name / "manifest.json").is_file()

        # an image that is no build of the target's current context (here its base) is refused
        proc = run_cli(*cli, "normalise", "--target", name, "--image", tp.final_from)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{tp.final_from} is not a build of {name}'s current context" in proc.stderr
    finally:
        clean(docker_client, matrix, state, name)
        try:
            docker_client.api.remove_image(bake_tag, force=True)
        except Exception:  # noqa: BLE001 - taken by normalise, or never made
            pass
    assert_nothing_left(docker_client, before)


def remote_context(config: Path, buildx_config: str, tcp_host: str) -> dict[str, str]:
    """A docker config folder of the test's own with buildx and a context `rf-remote` for tcp_host,
    made by the docker CLI; the environment that picks it (DOCKER_HOST empty: it would win)."""
    config.mkdir()
    (config / "cli-plugins").symlink_to(Path(buildx_config) / "cli-plugins")
    env = {**os.environ, "DOCKER_CONFIG": str(config)}
    env.pop("DOCKER_HOST", None)
    made = subprocess.run(
        ["docker", "context", "create", "rf-remote", "--docker", f"host={tcp_host}"], env=env, capture_output=True
    )
    assert made.returncode == 0, made.stderr
    return {"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "rf-remote", "DOCKER_HOST": ""}


@pytest.mark.parametrize("other_engine", ["docker28-overlay2"], indirect=True)
def test_a_bake_build_on_a_second_engine_normalises_to_the_image_rocmforge_builds(
    docker_client, base, buildkit_env, other_engine, tmp_path
):
    """The bake file on another engine's BuildKit (Docker 28's, newer than the host's 0.8), reached
    over TCP through a docker context, as a remote builder is: rocmforge's build, the bake and the
    normalisation all go there (the engine's store is not visible here: `docker save` is read). The
    baked image goes to a staging registry and leaves the engine; `normalise --image` pulls it back
    from there, and the image normalised is the host's ID."""
    matrix, state, name = project(tmp_path, SCRATCH_STEPS)
    root, tp = matrix.parent, load_plan(matrix).targets[name]
    cli = ("--matrix", str(matrix), "--state-dir", str(state))
    engine = remote_context(tmp_path / "docker-config", buildkit_env["DOCKER_CONFIG"], other_engine.tcp_host)
    client = other_engine.client()
    try:
        own = build_ids(docker_client, matrix, state, name, "classic")[name]
        # rocmforge's build there first (it brings the bootstrapped base the Dockerfile starts FROM)
        assert run_cli(*cli, "build", "--target", name, env=engine).returncode == 0
        assert client.identity(tp.content_tag) == own
        assert run_cli(*cli, "clean", "--target", name, env=engine).returncode == 0
        assert client.identity(tp.content_tag) is None

        target = render_and_bake(cli, root, name, engine)
        baked = target["tags"][0]
        assert client.identity(baked) not in (None, own)
        assert docker_client.identity(baked) is None  # built there, not here

        # The builder pushes to a registry and keeps nothing; rocmforge takes the image from there.
        with local_registry.serve(host=other_engine.gateway, port=other_engine.registry_port) as registry:
            staged = f"{registry}/staging/{name}"
            client.tag(baked, f"{staged}:baked")
            assert all("error" not in msg for msg in client.push(staged, "baked")), "push to staging failed"
            for ref in (baked, f"{staged}:baked"):
                client.untag(ref)
            assert client.identity(f"{staged}:baked") is None
            proc = run_cli(*cli, "normalise", "--target", name, "--image", f"{staged}:baked", env=engine)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        print(f"{other_engine.describe()} over {other_engine.tcp_host}: {proc.stdout}")
        assert client.identity(tp.content_tag) == own and own in proc.stdout
    finally:
        run_cli(*cli, "clean", "--target", name, env=engine)
        clean(docker_client, matrix, state, name)
