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

import fnmatch
import json
import posixpath
import re
from pathlib import Path

import pytest

from rocmforge.assemble.engine import build_labels
from rocmforge.assemble.image.history import stage_steps
from rocmforge.data.suites.conftest import plan_for, registry_base_image
from rocmforge.host import imageid
from rocmforge.resolve import bootstrap

FIELDS = (
    "Env",
    "Entrypoint",
    "Cmd",
    "User",
    "WorkingDir",
    "Labels",
    "Shell",
    "ExposedPorts",
    "Volumes",
    "Healthcheck",
    "StopSignal",
    "OnBuild",
)
EMPTY = (None, "", [], {})  # the engine shows an unset field as any of these
HASH_LABEL = "io.rocmforge.content-hash"
STALE = " (the image was built from other inputs than this checkout renders: rebuild it, or test this checkout's image)"
DEFAULT_SHELL = ["/bin/sh", "-c"]
# Instructions with no effect on the config (ARG only feeds substitution).
NO_CONFIG = ("RUN", "COPY", "ADD", "ARG")
# Instructions that change the config in ways this module does not model: the check fails rather
# than guess (no template renders them today).
UNMODELLED = ("EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "ONBUILD", "MAINTAINER")

# Variables that steer the ROCm runtime, its libraries, torch or the loader: set in an image they
# change what every program in it does, on every host, so each must be declared in the matrix
# (a stack's `env`, or what a declared component's partial renders, e.g. PATH, PIP_CONSTRAINT).
# (name or glob, what it steers)
STEERING = (
    ("HIP_VISIBLE_DEVICES", "which GPUs HIP programs see (an iGPU mix is the host's business: `run` sets it)"),
    ("ROCR_VISIBLE_DEVICES", "which GPUs the ROCr runtime exposes"),
    ("CUDA_VISIBLE_DEVICES", "which GPUs HIP programs see (HIP honours it too)"),
    ("GPU_DEVICE_ORDINAL", "which GPUs HIP and OpenCL programs see"),
    ("GPU_*", "the HIP runtime's queues and memory (GPU_MAX_HW_QUEUES, GPU_MAX_HEAP_SIZE, ...)"),
    ("HSA_OVERRIDE_GFX_VERSION", "code built for one ISA run on another GPU"),
    ("HSA_*", "the ROCr runtime (XNACK, SDMA, queues, the code object ISA)"),
    ("HIP_*", "the HIP runtime and tools (HIP_PATH, HIP_PLATFORM, HIP_LAUNCH_BLOCKING, ...)"),
    ("HIPCC_*", "hipcc's compile and link flags"),
    ("AMD_*", "the HIP runtime's logging, serialisation and dispatch (AMD_LOG_LEVEL, AMD_SERIALIZE_KERNEL)"),
    ("ROC_*", "the HIP runtime's device support (ROC_ENABLE_PRE_VEGA, ...)"),
    ("ROCBLAS_*", "rocBLAS: its Tensile library folder, logging, atomics"),
    ("TENSILE_*", "Tensile's solution selection and code object folder"),
    ("HIPBLASLT_*", "hipBLASLt: its library folder and solution selection"),
    ("MIOPEN_*", "MIOpen: find mode, database folders, disabled solvers"),
    ("RCCL_*", "RCCL's transports and algorithms"),
    ("NCCL_*", "RCCL's transports and algorithms (RCCL reads NCCL_* too)"),
    ("ROCM_PATH", "where ROCm tools and libraries are looked for"),
    ("ROCM_HOME", "where torch extensions and tools look for ROCm"),
    (
        "LD_*",
        "the loader: which copy of a library is picked (LD_LIBRARY_PATH), what is loaded into "
        "every program (LD_PRELOAD, LD_AUDIT), how symbols bind",
    ),
    ("PYTHONPATH", "which Python modules (which torch) import"),
    ("PYTHONHOME", "which Python standard library is used"),
    ("PYTORCH_ROCM_ARCH", "the GPU archs torch extensions are compiled for"),
    ("PYTORCH_*", "torch's ROCm kernels and allocator (PYTORCH_ROCM_FLASH_ATTENTION, PYTORCH_HIP_ALLOC_CONF)"),
    ("TORCH_*", "torch's BLAS choices on ROCm (TORCH_BLAS_PREFER_HIPBLASLT, TF32 overrides)"),
    ("BNB_*", "which library bitsandbytes loads (BNB_CUDA_VERSION)"),
)


def steering(name: str) -> str | None:
    """Why a variable steers the GPU stack or the loader (STEERING), or None."""
    return next((why for pattern, why in STEERING if fnmatch.fnmatchcase(name, pattern)), None)


# -- the config the engine makes from a Dockerfile's final stage ----------------------------------
_VAR = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")


def _expand(text: str, scope: dict[str, str]) -> str:
    def one(m):
        name = m.group(1) or m.group(4)
        value = scope.get(name, "")
        if m.group(2) == "-":
            return value or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if value else ""
        return value

    return _VAR.sub(one, text)


def words(text: str, scope: dict[str, str]) -> list[str]:
    """An instruction's arguments as the builder splits them: whitespace outside quotes separates,
    quotes are removed, $VAR and ${VAR} are substituted from scope except inside single quotes; a
    backslash escapes any character outside quotes, only `"`, `$` and itself inside double quotes
    (a rendered \\u0027 stays as it is), nothing inside single quotes."""
    out, cur, quote, started, i = [], [], None, False, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and (quote is None or (quote == '"' and text[i + 1] in '"$\\')):
            cur.append(text[i + 1])
            i, started = i + 2, True
            continue
        if quote:
            if ch == quote:
                quote = None
            elif ch == "$" and quote == '"':
                m = _VAR.match(text, i)
                if m:
                    cur.append(_expand(m.group(0), scope))
                    i = m.end()
                    continue
                cur.append(ch)
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote, started = ch, True
        elif ch.isspace():
            if started:
                out.append("".join(cur))
            cur, started = [], False
        elif ch == "$" and _VAR.match(text, i):
            m = _VAR.match(text, i)
            cur.append(_expand(m.group(0), scope))
            i, started = m.end(), True
            continue
        else:
            cur.append(ch)
            started = True
        i += 1
    if quote:
        raise ValueError(f"unterminated {quote} quote in {text!r}")
    if started:
        out.append("".join(cur))
    return out


def _pairs(keyword: str, rest: str, scope: dict[str, str]) -> list[tuple[str, str]]:
    """ENV/LABEL arguments: key=value pairs, or ENV's old `key value` form."""
    if keyword == "ENV" and "=" not in rest.split(None, 1)[0]:
        key, _, value = rest.partition(" ")
        return [(key, " ".join(words(value, scope)))]
    out = []
    for w in words(rest, scope):
        if "=" not in w:
            raise ValueError(f"{keyword} {rest!r}: {w!r} is not key=value")
        out.append(tuple(w.split("=", 1)))
    return out


def _command(rest: str, shell: list[str]) -> list[str]:
    """ENTRYPOINT/CMD: the JSON (exec) form as it is, the shell form run by the stage's SHELL."""
    if rest.lstrip().startswith("["):
        try:
            return [str(x) for x in json.loads(rest)]
        except ValueError:
            pass  # the builder runs an invalid JSON array through the shell too
    return list(shell) + [rest]


def apply_stage(base: dict, steps: list[str]) -> dict:
    """The config after a final stage's instructions (history.stage_steps) on top of base's
    config. Raises ValueError for an instruction this cannot model."""
    cfg = {k: v for k, v in base.items() if k in FIELDS}
    env = dict(e.split("=", 1) if "=" in e else (e, "") for e in cfg.get("Env") or [])
    labels = dict(cfg.get("Labels") or {})
    args: dict[str, str] = {}
    cmd_set = False
    for step in steps:
        keyword, _, rest = step.partition(" ")
        keyword = keyword.upper()
        scope = {**args, **env}  # every substitution of one instruction sees the values before it
        if keyword == "ARG":
            name, _, default = rest.strip().partition("=")
            args[name] = " ".join(words(default, scope))
        elif keyword in NO_CONFIG:
            continue
        elif keyword == "ENV":
            env.update(_pairs(keyword, rest, scope))
        elif keyword == "LABEL":
            labels.update(_pairs(keyword, rest, scope))
        elif keyword == "SHELL":
            cfg["Shell"] = json.loads(rest)
        elif keyword == "ENTRYPOINT":
            cfg["Entrypoint"] = _command(rest, cfg.get("Shell") or DEFAULT_SHELL)
            if not cmd_set:  # an ENTRYPOINT drops the CMD it inherits
                cfg["Cmd"] = None
        elif keyword == "CMD":
            cfg["Cmd"], cmd_set = _command(rest, cfg.get("Shell") or DEFAULT_SHELL), True
        elif keyword == "USER":
            cfg["User"] = " ".join(words(rest, scope))
        elif keyword == "WORKDIR":
            cfg["WorkingDir"] = posixpath.join(cfg.get("WorkingDir") or "/", " ".join(words(rest, scope)))
        else:
            raise ValueError(
                f"the final stage has `{step[:80]}`: its effect on the config is not modelled "
                f"here ({', '.join(UNMODELLED)} are not)"
            )
    cfg["Env"] = [f"{k}={v}" for k, v in env.items()]
    cfg["Labels"] = labels
    return cfg


def expected_config(dockerfile: str, base: dict, added_labels: dict[str, str]) -> dict:
    cfg = apply_stage(base, stage_steps(dockerfile))
    cfg["Labels"] = {**cfg["Labels"], **added_labels}
    return cfg


def env_dict(cfg: dict) -> dict[str, str]:
    return dict(e.split("=", 1) if "=" in e else (e, "") for e in cfg.get("Env") or [])


def config_differences(want: dict, have: dict) -> list[str]:
    """Each field (Env and Labels by key) that differs, naming both values."""
    out = []
    for name in FIELDS:
        if name in ("Env", "Labels"):
            w, h = (env_dict(want), env_dict(have)) if name == "Env" else (want.get(name) or {}, have.get(name) or {})
            for key in sorted(set(w) | set(h)):
                if w.get(key) != h.get(key):
                    out.append(
                        f"{name} {key}: the image has {_shown(h, key)}, the matrix renders {_shown(w, key)}"
                        + (STALE if name == "Labels" and key == HASH_LABEL else "")
                    )
            continue
        w, h = want.get(name), have.get(name)
        if (w in EMPTY and h in EMPTY) or w == h:
            continue
        out.append(f"{name}: the image has {_json(h)}, the matrix renders {_json(w)}")
    return out


def _shown(d: dict, key: str) -> str:
    return json.dumps(d[key]) if key in d else "none"


def _json(v) -> str:
    return "none" if v in EMPTY else json.dumps(v)


# -- fixtures --------------------------------------------------------------------------------------
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
                names.update({k: f"images/{name}/Dockerfile" for k, _ in _pairs("ENV", rest, {})})
        if not t.from_target and matrix.stacks[t.stack].base.bootstrap:
            stack = matrix.stacks[t.stack]
            base = json.loads(bootstrap.image_config("sha256:" + "0" * 64, t.stack, stack))["config"]
            names.update({k: f"the bootstrapped base of {t.stack}" for k in env_dict(base)})
    return names


def undeclared_steering(env: dict[str, str], declared: dict[str, str]) -> list[str]:
    return [
        f"{k}={v!r}: steers {steering(k)}; the matrix declares no {k} (neither a stack's env nor a component sets it)"
        for k, v in sorted(env.items())
        if steering(k) and k not in declared
    ]


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
