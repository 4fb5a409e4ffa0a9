"""The image as users run it: its config (what `docker run IMAGE` starts from) is what the matrix
rendered, no variable steers ROCm or the loader unless the matrix declares it, and its Python runs
through the image's own entrypoint and environment.

The expected config is built the way the engine builds it, from what rocmforge knows on the host:
the base's config (the image of `from_target`, itself expected the same way; a bootstrapped base's
config, which rocmforge writes itself; a registry base's, the image matrix.lock pins by ID), then
the final stage of the rendered Dockerfile (ENV, LABEL, ENTRYPOINT, CMD, USER, WORKDIR, SHELL; an
instruction whose effect cannot be predicted here fails the check), then the labels the build adds
(io.rocmforge.content-hash, the plan's content hash). Env, Entrypoint, Cmd, User, WorkingDir,
Labels, Shell and the fields no rendered instruction sets (ExposedPorts, Volumes, Healthcheck,
StopSignal, OnBuild) must be equal; each difference names the field and both values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmforge.assemble.engine import build_labels
from rocmforge.data.suites.conftest import plan_for, registry_base_image
from rocmforge.data.suites.predicted_config import (
    EMPTY,
    config_differences,
    env_dict,
    expected_config,
    instruction_pairs,
    steering,
    undeclared_steering,
)
from rocmforge.host import imageid
from rocmforge.render.dockerfile import stage_steps
from rocmforge.resolve import bootstrap


@pytest.fixture(scope="module")
def plan(loaded_plan):
    return plan_for(loaded_plan, "cannot render the matrix the image is compared with")


def _base_config(client, plan, name: str, matrix_path: Path, variant=()) -> dict:
    """The config of the image a target's final stage starts from, as rocmforge knows it. A
    registry base is looked up by the image ID matrix.lock records (an image ID is the hash of its
    config, so this is exactly the pinned config), then by its locked digest."""
    tp, t = plan.image_for(name, variant), plan.matrix.targets[name]
    if t.from_target:
        return _expected(client, plan, t.from_target, matrix_path, variant)
    stack = plan.matrix.stacks[tp.stack]
    if stack.base.bootstrap:
        return json.loads(bootstrap.image_config("sha256:" + "0" * 64, tp.stack, stack))["config"]
    locked = plan.lock.base(tp.stack)
    refs = [locked.image_id, tp.registry_base and f"{tp.registry_base.image}@{tp.registry_base.digest}"]
    found = tp.registry_base and registry_base_image(
        client, tp.registry_base.image, tp.registry_base.digest, locked.image_id
    )
    if found:
        return client.inspect(found)["Config"] or {}
    pytest.fail(
        f"target {name}: its registry base {refs[1] or refs[0] or tp.stack} (pinned in matrix.lock) is not on this "
        "engine, so the config it gives the image cannot be known: pull it, or build the target here",
        pytrace=False,
    )


def _expected(client, plan, name: str, matrix_path: Path, variant=()) -> dict:
    tp = plan.image_for(name, variant)
    try:
        return expected_config(
            tp.files["Dockerfile"].decode(), _base_config(client, plan, name, matrix_path, variant), build_labels(tp)
        )
    except ValueError as exc:
        pytest.fail(f"images/{tp.key}/Dockerfile: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def expected(request, client, plan, target_name, target, variant):
    if target is None:
        pytest.skip("not applicable: image not from a matrix target, nothing rendered to compare its config with")
    return _expected(client, plan, target_name, Path(request.config.getoption("--matrix")), variant)


def _chain_names(matrix, name: str) -> list[str]:
    """The target and every target its image is built on (from_target), nearest first."""
    out = []
    while name:
        out.append(name)
        name = matrix.targets[name].from_target
    return out


@pytest.fixture(scope="module")
def declared_env(plan, matrix, target_name, target):
    """Variables the matrix declares for the image: its stacks' `env`, every ENV the rendered
    Dockerfiles of its chain set (stack env and component partials), and a bootstrapped base's."""
    names: dict[str, str] = {}
    for name in _chain_names(matrix, target_name):
        t = matrix.targets[name]
        names.update({k: f"stack {t.stack} env" for k in matrix.stacks[t.stack].env})
        for step in stage_steps(plan.targets[name].files["Dockerfile"].decode()):
            keyword, _, rest = step.partition(" ")
            if keyword.upper() == "ENV":
                names.update({k: f"images/{name}/Dockerfile" for k, _ in instruction_pairs("ENV", rest, {})})
        if not t.from_target and matrix.stacks[t.stack].base.bootstrap:
            stack = matrix.stacks[t.stack]
            base = json.loads(bootstrap.image_config("sha256:" + "0" * 64, t.stack, stack))["config"]
            names.update({k: f"the bootstrapped base of {t.stack}" for k in env_dict(base)})
    return names


# -- checks ----------------------------------------------------------------------------------------
def stored_config(client, image, expected: dict) -> dict:
    """The config as the engine shows it, with Shell from the stored config document when a Shell is
    rendered and the engine's view leaves the field out (podman's Docker-compatible API does; its
    image ID, the config's digest, is the same as Docker's, so the document holds it)."""
    have = dict(image.attrs.get("Config") or {})
    if "Shell" not in have and expected.get("Shell") not in EMPTY:
        stored = imageid.config_from_export(client.export(image.id), client.identity(image.id) or image.id)
        if stored is None:
            pytest.fail(
                f"the engine shows no Shell for {image.id[:19]} and its export holds no config document "
                "with that digest: the field cannot be checked",
                pytrace=False,
            )
        have["Shell"] = (stored.get("config") or {}).get("Shell")
    return have


def test_config_is_what_the_matrix_renders(client, image, expected, target_name, record_property):
    have = stored_config(client, image, expected)
    record_property(
        "figures",
        {
            "env": sorted(env_dict(have)),
            "entrypoint": have.get("Entrypoint"),
            "cmd": have.get("Cmd"),
            "user": have.get("User") or "",
            "workdir": have.get("WorkingDir") or "",
        },
    )
    diff = config_differences(expected, have)
    assert not diff, f"the image's config differs from what images/{target_name}/Dockerfile renders:\n  " + "\n  ".join(
        diff
    )


def test_no_undeclared_steering_variable(image, declared_env, target, record_property):
    if target is None:
        pytest.skip("not applicable: image not from a matrix target, so nothing is declared")
    env = env_dict(image.attrs.get("Config") or {})
    record_property("figures", {"steering_variables": sorted(k for k in env if steering(k))})
    bad = undeclared_steering(env, declared_env)
    assert not bad, "the image's Env sets variables that steer the GPU stack or the loader:\n  " + "\n  ".join(bad)


# Run as `docker run IMAGE python3 -c ...`: what the workload's python is, what it imports, and the
# environment a process really gets (an entrypoint script may export more than the config says).
PYTHON_PROBE = (
    "import json, os, sys\n"
    "out = {'executable': sys.executable, 'prefix': sys.prefix, 'env': dict(os.environ)}\n"
    "try:\n    import torch\n    out['torch'] = torch.__version__\n"
    "except ImportError as exc:\n    out['torch_error'] = f'{type(exc).__name__}: {exc}'\n"
    "print('ROCMFORGE-PYTHON ' + json.dumps(out))\n"
)
VENV = "/opt/rocmforge/venv"


def test_python_as_users_run_it(
    run_as_users, has_python, torch_expected, declared_components, matrix, image, request, record_property
):
    if not has_python:
        assert not torch_expected, f"torch {torch_expected[0]} is declared but the image has no python3"
        pytest.skip("not applicable: the image has no python3")
    what, r = run_as_users(["python3", "-c", PYTHON_PROBE])
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ROCMFORGE-PYTHON ")), None)
    assert r.rc == 0 and line, f"{what} did not run the image's python3 (exit {r.rc}): {r.output[-1500:]!r}"
    got = json.loads(line.split(" ", 1)[1])
    record_property("figures", {"python": got["executable"], "torch": got.get("torch")})
    problems = []
    if any(matrix.components[c].kind == "python-env" for c in declared_components) and got["prefix"] != VENV:
        problems.append(f"python3 is {got['executable']} (prefix {got['prefix']}), not the image's venv {VENV}")
    if torch_expected:
        info = request.getfixturevalue("torch_info")
        if "torch" not in got:
            problems.append(f"`import torch` fails: {got.get('torch_error')}")
        elif info and got["torch"] != info["version"]:
            problems.append(f"torch {got['torch']}, but {info['version']} where the suites exec python3")
    config_env = env_dict(image.attrs.get("Config") or {})
    # A steering variable the process gets other than the config states was set by the entrypoint:
    # the matrix declares none of that.
    added = {k: v for k, v in got["env"].items() if steering(k) and config_env.get(k) != v}
    problems += [
        f"the process gets {k}={v!r}, the config says {config_env.get(k, 'nothing')!r}: set by the "
        "image's entrypoint, not declared in the matrix"
        for k, v in sorted(added.items())
    ]
    assert not problems, f"{what}:\n  " + "\n  ".join(problems)
