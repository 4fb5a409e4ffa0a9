"""One gate for every command that builds a target or needs it built: an unresolved target is
refused with the same message and exit 2 (a line per missing pin, then once how to resolve them),
before the engine is asked (DOCKER_HOST points at a socket that does not exist, so reaching for
the engine would say so and exit 1)."""

from __future__ import annotations

import pytest

from rocmforge.render.plan import load_plan, require_resolved
from rocmforge.shared.errors import UserError
from tests.conftest import copy_project, run_cli

DEAD_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"}
# Registry-based targets: their base digests cannot be locked here, so matrix.lock leaves them unresolved.
REGISTRY_TARGETS = ("llama7b-train", "llama31-qlora-w7900", "llama7b-infer")
COMMANDS = {
    "build": ["build", "--target", "{t}"],
    "bare --target": ["--target", "{t}"],
    "verify-repro": ["verify-repro", "--target", "{t}"],
    "push": ["push", "--target", "{t}", "--registry", "127.0.0.1:9"],
    "test": ["test", "--target", "{t}"],
    "manifest": ["manifest", "--target", "{t}"],
}


def gate_message(tp) -> str:
    with pytest.raises(UserError) as caught:
        require_resolved(tp)
    return f"error: {caught.value}"


def refusals(matrix, target: str) -> dict[str, str]:
    """Each command's stderr for target, after checking its exit code and that nothing was written."""
    before = sorted(p.name for p in matrix.parent.iterdir())
    out = {}
    for name, argv in COMMANDS.items():
        proc = run_cli("--matrix", str(matrix), *[a.replace("{t}", target) for a in argv], env=DEAD_ENGINE)
        assert proc.returncode == 2, f"{name}: exit {proc.returncode}\n{proc.stderr}"
        out[name] = proc.stderr
    assert sorted(p.name for p in matrix.parent.iterdir()) == before, "a refused command wrote beside the matrix"
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("gate"))


@pytest.mark.parametrize("target", REGISTRY_TARGETS)
def test_every_building_command_refuses_an_unresolved_target_alike(project, target):
    tp = load_plan(project).targets[target]
    assert tp.unresolved, f"{target} is resolved in matrix.lock: this test needs an unresolved target"
    want = gate_message(tp)
    assert all(f"\n  - {u}\n" in want for u in tp.unresolved)
    assert want.count("build.py lock") == 1, want  # said once, not after every missing pin
    assert "ROCMFORGE_REGISTRY_MIRROR" in want and "ROCMFORGE_GIT_MIRRORS" in want, want
    for command, stderr in refusals(project, target).items():
        assert stderr == want + "\n", f"{command} refused {target} differently:\n{stderr}"


def test_the_gate_covers_bootstrapped_targets_too(tmp_path):
    """Without matrix.lock nothing is resolved: a Debian target whose prerequisites would otherwise be
    built first (hip-python needs hip-devel and hip-runtime) is refused before any of them."""
    matrix = copy_project(tmp_path)
    (tmp_path / "matrix.lock").unlink()
    tp = load_plan(matrix).targets["hip-python"]
    assert any(u.startswith("hip-runtime: ") for u in tp.unresolved), tp.unresolved
    want = gate_message(tp)
    for command, stderr in refusals(matrix, "hip-python").items():
        assert stderr == want + "\n", f"{command}:\n{stderr}"


def test_a_resolved_target_passes_the_gate(project):
    plan = load_plan(project)
    resolved = [tp for tp in plan.targets.values() if not tp.unresolved]
    assert resolved, "no resolved target in matrix.lock"
    for tp in resolved:
        require_resolved(tp)
