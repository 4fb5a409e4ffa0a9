"""The registry build cache against the real engine and Debian's docker-registry on 127.0.0.1:
build and push, remove every local image of the targets, build again with no build step run and
the same image IDs; a tampered entry refused and rebuilt; a dead cache registry falls back to a
local build; read-only never pushes."""

from __future__ import annotations

import io
import uuid

import docker.errors
import pytest
import yaml

from rocmforge.assemble import engine
from rocmforge.define.matrix import load_matrix
from rocmforge.host import registry
from rocmforge.render.plan import load_plan
from rocmforge.resolve import bootstrap
from tests.conftest import ROOT, copy_project, run_cli
from tests.local_registry import free_port

pytestmark = pytest.mark.docker
STACK = "debian13-rocm5.7"
NONCE = uuid.uuid4().hex[:8]
LOWER, UPPER = f"cache-lower-{NONCE}", f"cache-upper-{NONCE}"


@pytest.fixture(scope="module")
def project(docker_client, tmp_path_factory):
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    bootstrap.ensure_base(docker_client, STACK, stack, tmp_path_factory.mktemp("work"), lambda msg: None)
    tmp = tmp_path_factory.mktemp("cache-project")
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    common = {"stack": STACK, "version": "1", "archs": ["gfx90a"], "source_date_epoch": 1764547200}
    data["targets"][LOWER] = {"description": "a prerequisite", **common}
    data["targets"][UPPER] = {"description": "built on the prerequisite", "from_target": LOWER, **common}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp / "templates" / "Dockerfile.j2"
    mark = "COPY probes/ /opt/rocmforge/probes/"
    tpl.write_text(tpl.read_text().replace(mark, mark + "\nRUN echo {{ name }} > /opt/name"))
    yield matrix, tmp / "state", load_plan(matrix)
    for name in (LOWER, UPPER):
        run_cli("--matrix", str(matrix), "--state-dir", str(tmp / "state"), "clean", "--target", name)


def build(project, *extra: str, env: dict | None = None):
    matrix, state, _ = project
    return run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", UPPER, *extra, env=env)


def forget_local(docker_client, project) -> None:
    """Every local image of the two targets goes (their tags, build cache and step images)."""
    matrix, state, _ = project
    for name in (UPPER, LOWER):
        assert run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name).returncode == 0
    assert not docker_client.api.images(name=f"rocmforge/{UPPER}")
    assert not docker_client.api.images(name=f"rocmforge/{LOWER}")


def test_cache_hit_after_clean_runs_no_build_step(docker_client, project, local_registry):
    _, state, plan = project
    proc = build(project, "--cache-registry", local_registry)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = {n: engine.image_id(docker_client, plan.targets[n].content_tag) for n in (LOWER, UPPER)}
    for n in (LOWER, UPPER):
        assert f"stored {n} in the cache {local_registry}/rocmforge-cache/{n}" in proc.stderr
        digest = registry.manifest_digest(
            docker_client, f"{local_registry}/rocmforge-cache/{n}", f"content-{plan.targets[n].content_hash}"
        )
        assert digest
    forget_local(docker_client, project)
    # clean keeps the logs while another build runs on this engine (the other test lane's, a
    # user's): the first build's log goes here, so that its absence below proves no step ran
    (state / "logs" / f"{UPPER}.log").unlink(missing_ok=True)
    proc = build(project, "--cache-registry", local_registry)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"from cache {UPPER}" in proc.stderr and "building" not in proc.stderr
    assert not (state / "logs" / f"{UPPER}.log").exists()  # no build ran
    assert engine.image_id(docker_client, plan.targets[UPPER].content_tag) == ids[UPPER]
    assert engine.image_id(docker_client, plan.targets[UPPER].readable_tag) == ids[UPPER]
    # A hit needs none of its prerequisites: the lower target was not even pulled.
    assert engine.image_id(docker_client, plan.targets[LOWER].content_tag) is None
    # and the prerequisite resolves the same way when it is what is asked for
    matrix, state, _ = project
    proc = run_cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "build",
        "--target",
        LOWER,
        "--cache-registry",
        local_registry,
    )
    assert f"from cache {LOWER}" in proc.stderr, proc.stderr[-3000:]
    assert engine.image_id(docker_client, plan.targets[LOWER].content_tag) == ids[LOWER]


def test_tampered_entry_is_refused_and_rebuilt(docker_client, project, local_registry):
    _, _, plan = project
    assert build(project, "--cache-registry", local_registry).returncode == 0
    good = engine.image_id(docker_client, plan.targets[UPPER].content_tag)
    # Someone pushes another image under the upper target's cache tag.
    repo, tag = f"{local_registry}/rocmforge-cache/{UPPER}", f"content-{plan.targets[UPPER].content_hash}"
    for _ in docker_client.api.build(
        fileobj=io.BytesIO(f"FROM {plan.targets[LOWER].content_tag}\nRUN touch /opt/evil\n".encode()),
        tag=f"{repo}:{tag}",
        rm=True,
        decode=True,
    ):
        pass
    evil_digest = None
    for chunk in docker_client.api.push(repo, tag=tag, stream=True, decode=True):
        evil_digest = (chunk.get("aux") or {}).get("Digest", evil_digest)
    assert evil_digest and registry.manifest_digest(docker_client, repo, tag) == evil_digest
    evil = engine.image_id(docker_client, f"{repo}:{tag}")
    docker_client.api.remove_image(f"{repo}:{tag}")
    forget_local(docker_client, project)
    proc = build(project, "--cache-registry", local_registry)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"cache entry {repo}:{tag}" in proc.stderr and "refused" in proc.stderr
    assert f"building {UPPER}" in proc.stderr
    assert engine.image_id(docker_client, plan.targets[UPPER].content_tag) == good
    with pytest.raises(docker.errors.NotFound):
        docker_client.api.inspect_image(evil)  # the refused image was not kept
    # The rebuilt image was pushed over the bad entry: the next machine gets the right one.
    assert registry.manifest_digest(docker_client, repo, tag) not in (None, evil_digest)
    forget_local(docker_client, project)
    proc = build(project, "--cache-registry", local_registry)
    assert f"from cache {UPPER}" in proc.stderr, proc.stderr[-3000:]
    assert engine.image_id(docker_client, plan.targets[UPPER].content_tag) == good


def test_dead_cache_registry_falls_back_to_a_local_build(docker_client, project):
    _, _, plan = project
    forget_local(docker_client, project)
    dead = f"127.0.0.1:{free_port()}"
    proc = build(project, "--cache-registry", dead)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"cache {dead} not usable" in proc.stderr
    assert "could not store" in proc.stderr
    assert engine.image_id(docker_client, plan.targets[UPPER].content_tag)


def test_readonly_cache_never_pushes(docker_client, project, local_registry, tmp_path):
    matrix, state, _ = project
    name = f"cache-readonly-{NONCE}"
    data = yaml.safe_load(matrix.read_text())
    data["targets"][name] = {**data["targets"][LOWER], "description": "never pushed"}
    other = tmp_path / "matrix.yaml"
    for sub in ("templates", "probes"):
        (tmp_path / sub).symlink_to(matrix.parent / sub)
    (tmp_path / "matrix.lock").write_text(matrix.with_suffix(".lock").read_text())
    other.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        proc = run_cli(
            "--matrix",
            str(other),
            "--state-dir",
            str(state),
            "build",
            "--target",
            name,
            env={"ROCMFORGE_CACHE_REGISTRY": local_registry, "ROCMFORGE_CACHE_READONLY": "1"},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        tp = load_plan(other).targets[name]
        assert (
            registry.manifest_digest(
                docker_client, f"{local_registry}/rocmforge-cache/{name}", f"content-{tp.content_hash}"
            )
            is None
        )
    finally:
        run_cli("--matrix", str(other), "--state-dir", str(state), "clean", "--target", name)


def test_bad_cache_registry_is_a_user_error(project):
    proc = build(project, "--cache-registry", "not a registry")
    assert proc.returncode == 2 and "--cache-registry" in proc.stderr and "Traceback" not in proc.stderr
