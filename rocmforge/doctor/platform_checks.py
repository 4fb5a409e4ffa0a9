"""Checks of the host's platform: shared memory for multi-GPU jobs (``shm``) and WSL2 (``wsl``).

Shared memory. RCCL moves data between the GPUs of one node through ``/dev/shm`` segments, and
PyTorch's data-loader workers hand batches over through it too; Docker gives a container its own
64 MB ``/dev/shm``, which such jobs overflow (RCCL: "Error while creating shared memory
segment"). Two ways out: ``--ipc=host`` (the host's ``/dev/shm``, shared with every process and
container that uses it) or ``--shm-size`` (a tmpfs of the container's own). `run` passes
``--shm-size``, sized by :func:`shm_for_run` from the GPUs and the host's memory, and not
``--ipc=host``: segments a crashed job leaves in the host's ``/dev/shm`` stay there until someone
removes them, and with ``--ipc=host`` they piled up until later jobs died for want of space
(issue 40); a container's own tmpfs goes away with the container, and it is sized for the job
instead of whatever the host's happens to be.

WSL2. Windows hands the GPU to WSL2 as ``/dev/dxg`` (the DirectX paravirtualisation device), not
as ``/dev/kfd`` and ``/dev/dri``: ROCm reaches it through a runtime built for that device
(AMD's ROCm for WSL, with the librocdxg bridge, github.com/ROCm/librocdxg, enabled with
``HSA_ENABLE_DXG_DETECTION=1``), and a container must get ``--device /dev/dxg`` and the WSL
libraries under ``/usr/lib/wsl``. The KFD checks do not apply there (:func:`wsl_skip`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Verdict

GIB = 1024**3
SHM_PER_GPU = 1 * GIB  # RCCL's buffers per peer plus a data loader's batches in flight, with room
SHM_FLOOR = 2 * GIB  # a one-GPU job's data loaders alone overflow Docker's 64 MB
DOCKER_DEFAULT_SHM = 64 * 1024**2
WSL_PATH = (
    "ROCm on WSL goes through /dev/dxg and AMD's WSL runtime (librocdxg, HSA_ENABLE_DXG_DETECTION=1) "
    "with the Windows Adrenalin driver, not amdgpu's /dev/kfd"
)


def is_wsl(d: Diagnosis) -> bool:
    """WSL2 without a KFD: /dev/dxg, no /dev/kfd, and WSL's kernel."""
    p = d.facts.platform
    return p.dxg and not d.kfd.exists and p.wsl


def wsl_skip(check: Callable[[Diagnosis], Verdict]) -> Callable[[Diagnosis], Verdict]:
    """Skip a KFD-based check on WSL2, whose GPU has no /dev/kfd to find."""

    @functools.wraps(check)
    def unless_wsl(d: Diagnosis) -> Verdict:
        if is_wsl(d):
            return Verdict(SKIPPED, f"not applicable on WSL2: {WSL_PATH}")
        return check(d)

    return unless_wsl


def gpu_count(d: Diagnosis) -> int:
    """The GPUs a job spreads over: the visible ones listed, else one per render node."""
    return len(d.visible) or len(d.render_nodes)


def shm_for_run(d: Diagnosis) -> int:
    """The --shm-size `run` passes: SHM_PER_GPU per GPU, at least SHM_FLOOR, and never more than
    half the host's memory (tmpfs's own default bound: a fuller one pushes the job into the OOM
    killer before RCCL sees an error)."""
    want = max(SHM_FLOOR, gpu_count(d) * SHM_PER_GPU)
    mem = d.facts.platform.mem_total_bytes
    return min(want, mem // 2) if mem else want


def size_flag(n: int) -> str:
    """Docker's size syntax, whole GiB when it is, else MiB."""
    return f"{n // GIB}g" if n % GIB == 0 else f"{n // 1024**2}m"


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def shm(d: Diagnosis) -> Verdict:
    """fail: the host's memory cannot back SHM_PER_GPU for each GPU (half of it is less), so a
    job over all of them runs out of shared memory. warn: the host's own ``/dev/shm`` is smaller
    than that (jobs run on the host or with ``--ipc=host`` share it; `run` does not), or its size
    could not be read. ok: what `run` passes (``--shm-size``) and why. skipped: a saved GPU list
    (not this host's GPUs)."""
    if d.from_file:
        return Verdict(SKIPPED, "not applicable: the saved GPU list is not this host's GPUs")
    n = gpu_count(d)
    p = d.facts.platform
    need = max(1, n) * SHM_PER_GPU
    passed = shm_for_run(d)
    run = f"run passes --shm-size={size_flag(passed)} (the container's own tmpfs, not --ipc=host)"
    gpus = f"{n} GPU(s)" if n else "no GPU found (sized for one)"
    if passed < need:
        return Verdict(
            FAIL,
            f"{gpus} need {_gib(need)} of shared memory for a job over all of them, but half of the "
            f"host's {_gib(p.mem_total_bytes or 0)} memory is {_gib(passed)}: RCCL stops with 'Error "
            f"while creating shared memory segment'; add memory or run on fewer GPUs. {run}",
        )
    if p.shm_bytes is None:
        return Verdict(WARN, f"could not read the size of /dev/shm ({p.shm_source or 'not read'}); {gpus}: {run}")
    if p.shm_bytes < need:
        return Verdict(
            WARN,
            f"the host's /dev/shm is {_gib(p.shm_bytes)} ({p.shm_source}), less than the "
            f"{_gib(need)} {gpus} need: jobs on the host or with --ipc=host share it and fail; {run}",
        )
    return Verdict(OK, f"{gpus}: {run}; the host's /dev/shm is {_gib(p.shm_bytes)} ({p.shm_source})")


def wsl(d: Diagnosis) -> Verdict:
    """fail: WSL2 with ``/dev/dxg`` and no ``/dev/kfd``: `run` passes KFD nodes the host does not
    have, so containers get no GPU; the WSL path is named. warn: ``/dev/dxg`` outside WSL or WSL
    with a KFD (unusual). ok: a native Linux host."""
    if d.from_file:
        return Verdict(SKIPPED, "not applicable: diagnosing a saved GPU list, not this host")
    p = d.facts.platform
    kernel = p.kernel_release or "unknown"
    if is_wsl(d):
        return Verdict(
            FAIL,
            f"WSL2 (kernel {kernel}): /dev/dxg but no /dev/kfd. {WSL_PATH}; a container needs "
            f"--device /dev/dxg and /usr/lib/wsl mounted, and rocmforge's images carry the KFD "
            f"runtime, so `run` gives them no GPU here. The KFD checks are skipped",
        )
    if p.dxg or p.wsl:
        seen = "/dev/dxg" if p.dxg else "a WSL kernel"
        return Verdict(
            WARN,
            f"{seen} ({kernel}) next to {'/dev/kfd' if d.kfd.exists else 'no /dev/dxg'}: the KFD "
            f"path is checked as on native Linux",
        )
    via = ", the GPU is reached through amdgpu's KFD" if d.kfd.exists else ""
    return Verdict(OK, f"native Linux (kernel {kernel}): no /dev/dxg{via}")
