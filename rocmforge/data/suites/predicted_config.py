"""The config an image must have, predicted on the host the way the engine builds it: the base's
config, then the final stage of the rendered Dockerfile (ENV, LABEL, ENTRYPOINT, CMD, USER,
WORKDIR, SHELL), then the labels the build adds; and the variables that steer ROCm or the loader.
test_config.py compares an image with it."""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re

from rocmforge.render.dockerfile import stage_steps

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


def instruction_pairs(keyword: str, rest: str, scope: dict[str, str]) -> list[tuple[str, str]]:
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
    """The config after a final stage's instructions (render.dockerfile.stage_steps) on top of base's
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
            env.update(instruction_pairs(keyword, rest, scope))
        elif keyword == "LABEL":
            labels.update(instruction_pairs(keyword, rest, scope))
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


def undeclared_steering(env: dict[str, str], declared: dict[str, str]) -> list[str]:
    """The variables of env that steer ROCm or the loader and that the matrix does not declare."""
    return [
        f"{k}={v!r}: steers {steering(k)}; the matrix declares no {k} (neither a stack's env nor a component sets it)"
        for k, v in sorted(env.items())
        if steering(k) and k not in declared
    ]
