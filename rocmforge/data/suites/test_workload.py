"""Workload: the seeds' LLM settings and workloads run with the image's own libraries.

probes/workload.py runs once in the container, with the image's interpreter, against the settings
the image ships in /opt/rocmforge/config: it loads seed 000's TrainingArguments and seed 004's
amp.json / config.yaml against the installed classes, trains a tiny random LLaMA (full, LoRA and
4-bit QLoRA with a paged optimizer) on synthetic tokens, and generates twice with the seed's
inference settings (batch size, beam width) from a fixed-weight model that counts: exactly
max_new_tokens new tokens per row, each the count's next, the same both times. Each of its checks
is one test here: passed, failed (with the probe's reason), not GPU-verified (a GPU-only check on a
host without one) or not applicable.

The settings the probe loads are first held to the matrix: each file a `settings` component of the
target or of a target it is built on declares must be in the image where the rendered Dockerfile
copies it, and parse to exactly the matrix's values (a missing file is a failure, never the probe's
defaults)."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, not_gpu_verified, plan_for, target_chain
from rocmforge.host.container import IMAGE_PYTHON

CHECKS = [
    "settings/training_args.json",
    "settings/amp.json",
    "settings/config.yaml",
    "train",
    "lora",
    "qlora-4bit",
    "inference",
]
CONFIG_DIR = "/opt/rocmforge/config"
VENV_PYTHON = "/opt/rocmforge/venv/bin/python"
EXPECTABLE = ("transformers", "accelerate", "peft", "bitsandbytes")
PROBE_TIMEOUT = 900


def declared_torch(matrix, target_name, target, stack):
    """(version, build) of the torch the matrix declares for the image, or None."""
    if target is None:
        return None
    if hasattr(matrix, "torch_of"):
        version, build = matrix.torch_of(target_name)
        return (version, build) if version else None
    for t in target_chain(matrix, target_name):
        if getattr(t, "pytorch", None):
            return t.pytorch, getattr(t, "pytorch_build", None) or "rocm"
    if stack is not None and getattr(stack, "pytorch", None):
        return stack.pytorch, getattr(stack, "pytorch_build", "rocm")
    return None


def expected_libraries(matrix, target_name, target):
    """Libraries the image declares: a bitsandbytes-* component, python-env requirements."""
    if target is None:
        return []
    out = set()
    for t in target_chain(matrix, target_name):
        for cname in t.components:
            comp = matrix.components[cname]
            if cname.startswith("bitsandbytes"):
                out.add("bitsandbytes")
            reqs = {k.lower().replace("_", "-") for k in (getattr(comp, "requirements", None) or {})}
            out |= {lib for lib in EXPECTABLE if lib in reqs}
    return sorted(out)


# -- settings equal the matrix ------------------------------------------------------------------
# How a rendered Dockerfile puts a settings component into the image (kinds/settings.j2, or a
# partial that replaces it): `COPY [--flag ...] settings/<component>/[<file>] <destination>`.
SETTINGS_COPY = re.compile(
    r"^COPY\s+(?:--\S+\s+)*settings/(?P<component>[^/\s]+)/(?P<file>\S*)\s+(?P<dest>\S+)\s*$", re.M
)


@dataclass(frozen=True)
class SettingsFile:
    path: str  # where the image must hold it
    component: str
    target: str  # the target whose components name it
    name: str  # its name under the component's `files:`
    value: Any  # what it must parse to

    @property
    def field(self) -> str:
        return f"components.{self.component}.files.{self.name}"


def declared_settings(plan, target_name: str) -> tuple[list[SettingsFile], list[str]]:
    """The settings files the image must hold, and one problem per settings component that no
    rendered Dockerfile copies into it. Base targets first and COPY lines in order: a later copy to
    the same path wins, as it does in the image's layers. Only a final stage reaches the image."""
    m, names, name = plan.matrix, [], target_name
    while name:
        names.append(name)
        name = m.targets[name].from_target
    found: dict[str, SettingsFile] = {}
    uncopied = []
    for name in reversed(names):
        dockerfile = plan.targets[name].files.get("Dockerfile", b"").decode()
        final = dockerfile[max((mo.start() for mo in re.finditer(r"^FROM\s", dockerfile, re.M)), default=0) :]
        copies = list(SETTINGS_COPY.finditer(final))
        for cname in m.targets[name].components:
            comp = m.components[cname]
            if comp.kind == "settings" and not any(mo["component"] == cname for mo in copies):
                uncopied.append(
                    f"component {cname} of target {name} declares {', '.join(comp.files)}, but the final "
                    f"stage of images/{name}/Dockerfile copies no settings/{cname}/ into the image"
                )
        for mo in copies:
            comp = m.components.get(mo["component"])
            if comp is None or comp.kind != "settings":
                continue
            for fname, value in comp.files.items():
                if mo["file"] not in ("", fname):
                    continue
                dest = mo["dest"]
                path = posixpath.join(dest, fname) if not mo["file"] or dest.endswith("/") else dest
                found[posixpath.normpath(path)] = SettingsFile(
                    posixpath.normpath(path), mo["component"], name, fname, value
                )
    return list(found.values()), uncopied


def parse_settings(name: str, data: bytes) -> Any:
    """A settings file's content the way its format reads it; ValueError naming the line."""
    text = data.decode("utf-8")
    if name.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(
            f"not YAML: {getattr(exc, 'problem', None) or exc}" + (f" at line {mark.line + 1}" if mark else "")
        ) from None


def _kind(value: Any) -> str:
    # bool before int: True == 1 in Python, yet `true` and `1` are different settings.
    for kind, types in (
        ("bool", bool),
        ("int", int),
        ("float", float),
        ("str", str),
        ("null", type(None)),
        ("list", list),
        ("mapping", dict),
    ):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _key(path: tuple) -> str:
    if not path:
        return "the whole file"
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else _show(part)
            out += f".{shown}" if out else shown
    return out


def settings_differences(want: Any, got: Any, path: tuple = ()) -> list[str]:
    """Every place where the parsed file differs from the matrix: key path, both values."""
    if _kind(want) != _kind(got):
        return [
            f"{_key(path)} is {_show(got)} ({_kind(got)}) in the image, {_show(want)} ({_kind(want)}) in the matrix"
        ]
    if isinstance(want, dict):
        out = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{_key(path + (k,))} is missing in the image, {_show(v)} in the matrix")
            else:
                out += settings_differences(v, got[k], path + (k,))
        out += [
            f"{_key(path + (k,))} is {_show(v)} in the image, absent from the matrix"
            for k, v in got.items()
            if k not in want
        ]
        return out
    if isinstance(want, list):
        if len(want) != len(got):
            return [
                f"{_key(path)} is {_show(got)} in the image ({len(got)} items), {_show(want)} in the matrix "
                f"({len(want)} items)"
            ]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in settings_differences(w, g, path + (i,))]
    return [] if want == got else [f"{_key(path)} is {_show(got)} in the image, {_show(want)} in the matrix"]


@pytest.fixture(scope="module")
def settings_files(request, loaded_plan, target_name, target):
    """(declared settings files, components no Dockerfile copies), or None for an image of no target."""
    if target is None:
        return None
    matrix_path = Path(request.config.getoption("--matrix"))
    why = f"cannot render {matrix_path} to find where target {target_name}'s settings go"
    return declared_settings(plan_for(loaded_plan, why), target_name)


def test_settings_equal_the_matrix(request, container, settings_files, target_name, record_property):
    """Each declared settings file is in the image and parses to exactly the matrix's values."""
    matrix_name = Path(request.config.getoption("--matrix")).name
    if settings_files is None:
        pytest.skip(f"not applicable: the image is of no target of {matrix_name} ({target_name or 'no target given'})")
    files, problems = settings_files[0], list(settings_files[1])
    if not files and not problems:
        pytest.skip(
            f"not applicable: target {target_name} and the targets it is built on declare no settings component"
        )
    for f in files:
        where = f"{f.path} (component {f.component} of target {f.target}, {matrix_name} {f.field})"
        try:
            data = container.read_file(f.path)
            if data is None:
                problems.append(f"{where}: missing from the image")
                continue
            got = parse_settings(f.name, data)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        problems += [f"{where}: {d}" for d in settings_differences(f.value, got)]
    record_property("figures", {"settings_files": sorted(f.path for f in files)})
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def workload_python(container, stack):
    """The image's interpreter: the rocmforge venv, else the stack's python_bin, else python3."""
    candidates = [VENV_PYTHON]
    if stack is not None and getattr(stack, "python_bin", None):
        candidates.append(stack.python_bin)
    for py in candidates:
        if container.exec(["test", "-x", py]).rc == 0:
            return py
    return IMAGE_PYTHON


@pytest.fixture(scope="module")
def require_gpu(request, gpu, matrix, target_name, target, stack):
    """Whether a GPU check that cannot use a GPU must fail: --require-gpu, or /dev/kfd on the host
    and an image whose torch is a ROCm build."""
    if request.config.getoption("--require-gpu", default=False):
        return True
    torch_decl = declared_torch(matrix, target_name, target, stack)
    return bool(gpu.present and (torch_decl is None or torch_decl[1] != "cpu"))


@pytest.fixture(scope="module")
def workload(container, workload_python, matrix, target_name, target, stack, require_gpu, settings_files):
    torch_decl = declared_torch(matrix, target_name, target, stack)
    r = container.exec([workload_python, "-c", "import torch; print(torch.__version__)"], timeout=300)
    if r.rc != 0:
        err = (r.stderr.strip() or r.stdout.strip()).splitlines()
        err = err[-1] if err else f"exit {r.rc}"
        if torch_decl:
            pytest.fail(
                f"target {target_name} declares torch {torch_decl[0]} but `import torch` fails in "
                f"{workload_python}: {err}",
                pytrace=False,
            )
        pytest.skip(f"not applicable: no torch in this image ({workload_python}: {err})")
    # The probe reads the settings where the rendered Dockerfile put them, when that is one folder.
    folders = {posixpath.dirname(f.path) for f in (settings_files or ([], []))[0]}
    config_dir = folders.pop() if len(folders) == 1 else CONFIG_DIR
    cmd = [workload_python, f"{PROBES_IN_CONTAINER}/workload.py", "--config-dir", config_dir]
    if require_gpu:
        cmd.append("--require-gpu")
    for lib in expected_libraries(matrix, target_name, target):
        cmd += ["--expect", lib]
    r = container.exec(cmd, timeout=PROBE_TIMEOUT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        pytest.fail(
            f"workload probe printed no result (exit {r.rc}, {' '.join(cmd)}): {r.output[-3000:]}", pytrace=False
        )
    try:
        data = json.loads(lines[-1])
    except ValueError as exc:
        pytest.fail(f"workload probe's last line is not JSON ({exc}): {lines[-1][:500]}", pytrace=False)
    if data.get("error"):
        pytest.fail(f"workload probe crashed: {data['error']}: {r.output[-3000:]}", pytrace=False)
    data["_rc"], data["_cmd"] = r.rc, " ".join(cmd)
    data["_python"] = (
        f"{container.image_python if workload_python == IMAGE_PYTHON else workload_python} (the image's own)"
    )
    return data


@pytest.mark.parametrize("check", CHECKS)
def test_workload(workload, check, record_property, settings_files):
    found = [c for c in workload["checks"] if c["name"] == check]
    if not found:
        pytest.fail(f"the workload probe reported no {check!r} check ({workload['_cmd']})", pytrace=False)
    c = found[0]
    # The workload runs on the image's own Python: that interpreter is what is under test here.
    figures = dict(c.get("figures") or {}, device=workload.get("device"), python=workload["_python"])
    if workload.get("overrides"):
        figures["overrides"] = workload["overrides"]
    record_property("figures", figures)
    status, detail = c["status"], c.get("detail", "")
    if status == "passed":
        return
    if status == "failed":
        pytest.fail(f"{check}: {detail}", pytrace=False)
    if status == "not GPU-verified":
        not_gpu_verified(detail)
    if status == "not applicable":
        # A file the matrix declares cannot be "not applicable": its absence is what broke.
        declared = [f for f in (settings_files or ([], []))[0] if check == f"settings/{f.name}"]
        if declared:
            pytest.fail(
                f"{check}: {detail}, yet component {declared[0].component} declares it at {declared[0].path}",
                pytrace=False,
            )
        pytest.skip(f"not applicable: {detail}")
    pytest.fail(f"{check}: unknown status {status!r}: {detail}", pytrace=False)


TORCHRUN_LIBS = ("transformers", "peft")


NO_LIBUV = "built without libuv support"


def test_torchrun_job_runs_in_the_venv(container, target_name, record_property):
    """`torchrun` as a user types it (the console script found on the image's PATH, not `python -m
    torch.distributed.run`) starts a one-process job in the image's venv, which imports transformers
    and peft from exactly where the venv's python does. A base's torchrun would run the base's
    interpreter, which does not see the venv's packages.

    A torch built without libuv (Debian's) cannot start any torchrun rendezvous: its c10d and static
    rendezvous stores ask for libuv whatever USE_LIBUV says. There the job is started the way the
    script itself starts: by the interpreter its first line names, with torchrun's rank variables;
    the figures say so."""
    if container.exec(["test", "-x", VENV_PYTHON]).rc != 0:
        pytest.skip(f"not applicable: {target_name} has no Python environment ({VENV_PYTHON})")
    direct = container.exec(
        [
            VENV_PYTHON,
            "-c",
            "import json, transformers, peft; "
            "print(json.dumps({m.__name__: m.__file__ for m in (transformers, peft)}))",
        ],
        timeout=300,
    )
    if direct.rc != 0:
        pytest.skip(
            f"not applicable: the venv of {target_name} has no {' and '.join(TORCHRUN_LIBS)}: "
            f"{(direct.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    which = container.exec(["sh", "-c", 'command -v torchrun && head -n 1 "$(command -v torchrun)"'])
    assert which.rc == 0, f"no torchrun on the image's PATH: {which.output[-500:]}"
    script, shebang = which.stdout.split("\n")[:2]
    interpreter = shebang.removeprefix("#!").split()[0] if shebang.startswith("#!") else ""
    helped = container.exec(["torchrun", "--help"], timeout=300)
    assert helped.rc == 0, f"torchrun ({script}) cannot start: {helped.output[-2000:]}"
    r = container.exec(
        ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=1", f"{PROBES_IN_CONTAINER}/torchrun_where.py"],
        timeout=600,
    )
    how = "torchrun --standalone, one process"
    if r.rc != 0 and NO_LIBUV in r.output:
        how = f"{interpreter} (torchrun's own interpreter) with RANK=0 WORLD_SIZE=1: this torch is {NO_LIBUV}"
        r = container.exec(
            ["env", "RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", interpreter, f"{PROBES_IN_CONTAINER}/torchrun_where.py"],
            timeout=600,
        )
    record_property("figures", {"torchrun": script, "torchrun_interpreter": interpreter, "torchrun_job": how})
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.rc == 0 and lines, f"torchrun ({script}) failed, exit {r.rc}: {r.output[-3000:]}"
    job = json.loads(lines[-1])
    assert (job["rank"], job["world_size"]) == ("0", "1"), job
    assert job["prefix"] == "/opt/rocmforge/venv", (
        f"torchrun at {script} started {job['executable']} (prefix {job['prefix']}), not the venv's python"
    )
    assert job["modules"] == json.loads(direct.stdout.strip().splitlines()[-1]), job["modules"]
