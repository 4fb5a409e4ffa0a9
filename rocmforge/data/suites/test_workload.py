"""Workload: the seeds' LLM settings and workloads run with the image's own libraries.

probes/workload.py runs once in the container, with the image's interpreter, against the settings
the image ships in /opt/rocmforge/config: it loads seed 000's TrainingArguments and seed 004's
amp.json / config.yaml against the installed classes, trains a tiny random LLaMA (full, LoRA and
4-bit QLoRA with a paged optimizer) on synthetic tokens, and generates twice with the seed's
inference settings (batch size, beam width) from a fixed-weight model that counts: exactly
max_new_tokens new tokens per row, each the count's next, the same both times. Each of its checks is one test here: passed, failed (with the probe's
reason), not GPU-verified (a GPU-only check on a host without one) or not applicable."""

from __future__ import annotations

import json

import pytest

from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, not_gpu_verified, target_chain

CHECKS = ["settings/training_args.json", "settings/amp.json", "settings/config.yaml",
          "train", "lora", "qlora-4bit", "inference"]
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


@pytest.fixture(scope="module")
def workload_python(container, stack):
    """The image's interpreter: the rocmforge venv, else the stack's python_bin, else python3."""
    candidates = [VENV_PYTHON]
    if stack is not None and getattr(stack, "python_bin", None):
        candidates.append(stack.python_bin)
    for py in candidates:
        if container.exec(["test", "-x", py]).rc == 0:
            return py
    return "python3"


@pytest.fixture(scope="module")
def require_gpu(request, gpu, matrix, target_name, target, stack):
    """Whether a GPU check that cannot use a GPU must fail: --require-gpu, or /dev/kfd on the host
    and an image whose torch is a ROCm build."""
    if request.config.getoption("--require-gpu", default=False):
        return True
    torch_decl = declared_torch(matrix, target_name, target, stack)
    return bool(gpu.present and (torch_decl is None or torch_decl[1] != "cpu"))


@pytest.fixture(scope="module")
def workload(container, workload_python, matrix, target_name, target, stack, require_gpu):
    torch_decl = declared_torch(matrix, target_name, target, stack)
    r = container.exec([workload_python, "-c", "import torch; print(torch.__version__)"], timeout=300)
    if r.rc != 0:
        err = (r.stderr.strip() or r.stdout.strip()).splitlines()
        err = err[-1] if err else f"exit {r.rc}"
        if torch_decl:
            pytest.fail(f"target {target_name} declares torch {torch_decl[0]} but `import torch` fails in "
                        f"{workload_python}: {err}", pytrace=False)
        pytest.skip(f"not applicable: no torch in this image ({workload_python}: {err})")
    cmd = [workload_python, f"{PROBES_IN_CONTAINER}/workload.py", "--config-dir", CONFIG_DIR]
    if require_gpu:
        cmd.append("--require-gpu")
    for lib in expected_libraries(matrix, target_name, target):
        cmd += ["--expect", lib]
    r = container.exec(cmd, timeout=PROBE_TIMEOUT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        pytest.fail(f"workload probe printed no result (exit {r.rc}, {' '.join(cmd)}): {r.output[-3000:]}",
                    pytrace=False)
    try:
        data = json.loads(lines[-1])
    except ValueError as exc:
        pytest.fail(f"workload probe's last line is not JSON ({exc}): {lines[-1][:500]}", pytrace=False)
    if data.get("error"):
        pytest.fail(f"workload probe crashed: {data['error']}: {r.output[-3000:]}", pytrace=False)
    data["_rc"], data["_cmd"] = r.rc, " ".join(cmd)
    return data


@pytest.mark.parametrize("check", CHECKS)
def test_workload(workload, check, record_property):
    found = [c for c in workload["checks"] if c["name"] == check]
    if not found:
        pytest.fail(f"the workload probe reported no {check!r} check ({workload['_cmd']})", pytrace=False)
    c = found[0]
    figures = dict(c.get("figures") or {}, device=workload.get("device"))
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
    direct = container.exec([VENV_PYTHON, "-c", "import json, transformers, peft; "
                             "print(json.dumps({m.__name__: m.__file__ for m in (transformers, peft)}))"], timeout=300)
    if direct.rc != 0:
        pytest.skip(f"not applicable: the venv of {target_name} has no {' and '.join(TORCHRUN_LIBS)}: "
                    f"{(direct.stderr.strip().splitlines() or ['?'])[-1]}")
    which = container.exec(["sh", "-c", "command -v torchrun && head -n 1 \"$(command -v torchrun)\""])
    assert which.rc == 0, f"no torchrun on the image's PATH: {which.output[-500:]}"
    script, shebang = which.stdout.split("\n")[:2]
    interpreter = shebang.removeprefix("#!").split()[0] if shebang.startswith("#!") else ""
    helped = container.exec(["torchrun", "--help"], timeout=300)
    assert helped.rc == 0, f"torchrun ({script}) cannot start: {helped.output[-2000:]}"
    r = container.exec(["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=1",
                        f"{PROBES_IN_CONTAINER}/torchrun_where.py"], timeout=600)
    how = "torchrun --standalone, one process"
    if r.rc != 0 and NO_LIBUV in r.output:
        how = f"{interpreter} (torchrun's own interpreter) with RANK=0 WORLD_SIZE=1: this torch is {NO_LIBUV}"
        r = container.exec(["env", "RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", interpreter,
                            f"{PROBES_IN_CONTAINER}/torchrun_where.py"], timeout=600)
    record_property("figures", {"torchrun": script, "torchrun_interpreter": interpreter, "torchrun_job": how})
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.rc == 0 and lines, f"torchrun ({script}) failed, exit {r.rc}: {r.output[-3000:]}"
    job = json.loads(lines[-1])
    assert (job["rank"], job["world_size"]) == ("0", "1"), job
    assert job["prefix"] == "/opt/rocmforge/venv", (
        f"torchrun at {script} started {job['executable']} (prefix {job['prefix']}), not the venv's python")
    assert job["modules"] == json.loads(direct.stdout.strip().splitlines()[-1]), job["modules"]
