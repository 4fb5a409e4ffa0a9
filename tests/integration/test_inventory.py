"""The manifest's inventory on the real engine: taken in a container the first time, the base's
when the build added nothing the inventory reads, and never the base's when it did (a broken copy
of the base's package database must show in the manifest)."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from rocmforge.render.plan import load_plan
from tests.conftest import copy_project, dpkg_versions, run_cli

pytestmark = pytest.mark.docker

STACK = "debian13-rocm5.7"
MARK = "COPY probes/ /opt/rocmforge/probes/"
PROBE = "rocmforge-inventory-probe"
FAKE_PACKAGE = (
    f"RUN printf 'Package: {PROBE}\\nStatus: install ok installed\\nVersion: 1.0-test\\n"
    "Architecture: all\\nMaintainer: nobody\\nDescription: a package only the dpkg database knows\\n\\n' "
    ">> /var/lib/dpkg/status"
)


@pytest.fixture()
def project(tmp_path):
    """Scratch targets on the bootstrapped base, each adding its own steps, and a user cache of
    their own (so the first build takes the container whatever earlier runs kept)."""
    tag = uuid.uuid4().hex[:8]
    steps = {
        f"inv-plain-{tag}": f"RUN echo {uuid.uuid4().hex} > /opt/plain",
        f"inv-again-{tag}": f"RUN echo {uuid.uuid4().hex} > /opt/again",
        f"inv-dpkg-{tag}": FAKE_PACKAGE,
        f"inv-env-{tag}": f"ENV PYTHONPATH=/opt/elsewhere\nRUN echo {tag} > /opt/moved",
    }
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    for name in steps:
        data["targets"][name] = {
            "description": "a scratch target",
            "stack": STACK,
            "version": "1",
            "archs": ["gfx90a"],
            "source_date_epoch": 1764547200,
        }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    blocks = "".join(f"\n{{% if name == '{name}' %}}{step}\n{{% endif %}}" for name, step in steps.items())
    tpl.write_text(tpl.read_text().replace(MARK, MARK + blocks))
    env = {"XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    yield matrix, tmp_path / "state", list(steps), env
    for name in steps:
        run_cli("--matrix", str(matrix), "--state-dir", str(tmp_path / "state"), "clean", "--target", name, env=env)


def build(matrix, state, name, env) -> tuple[dict, str]:
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [
        line for line in (state / "logs" / f"{name}.log").read_text().splitlines() if line.startswith("inventory of")
    ]
    return json.loads((state / "artifacts" / name / "manifest.json").read_text()), "\n".join(said)


def test_the_inventory_is_the_bases_only_when_nothing_it_reads_was_added(docker_client, project):
    matrix, state, (plain, again, dpkg, env_changed), env = project
    plan = load_plan(matrix)

    def real(name):
        return dpkg_versions(docker_client, plan.targets[name].content_tag)

    first, said = build(matrix, state, plain, env)
    assert "taken in a container (kept for its base" in said, said
    assert first["dpkg"] == real(plain)

    second, said = build(matrix, state, again, env)
    assert "its base's" in said and "change nothing it reads" in said, said
    assert second["dpkg"] == real(again) == first["dpkg"]

    broken, said = build(matrix, state, dpkg, env)
    assert "taken in a container (the build added var/lib/dpkg/status" in said, said
    assert broken["dpkg"] == real(dpkg)
    assert broken["dpkg"][PROBE] == "1.0-test" and PROBE not in first["dpkg"]

    moved, said = build(matrix, state, env_changed, env)
    assert "differ from its base's" in said, said
    assert moved["dpkg"] == real(env_changed)
