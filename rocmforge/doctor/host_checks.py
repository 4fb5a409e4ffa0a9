"""Checks of the host itself: the Docker engine, the GPU device nodes and their groups, the amdgpu
kernel module, and disk space. With ``--rocminfo FILE`` the GPUs diagnosed are someone else's, so
the device-node and module checks are skipped (:func:`host_only`); on WSL2 there is no KFD to
find, so they are skipped too (:func:`.platform_checks.wsl_skip`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import NodeFacts
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Verdict
from rocmforge.doctor.platform_checks import wsl_skip

LOW_DISK_BYTES = 60 * 10**9  # ROCm images are 3-50 GB each; a build also keeps its builder image


def host_only(check: Callable[[Diagnosis], Verdict]) -> Callable[[Diagnosis], Verdict]:
    """Skip the check when the rocminfo output is a saved file: this host's GPUs are not diagnosed."""

    @functools.wraps(check)
    def on_this_host(d: Diagnosis) -> Verdict:
        if d.from_file:
            saved = "rocminfo output" if d.facts.rocminfo_text is not None else "GPU list"
            return Verdict(SKIPPED, f"not applicable: diagnosing the saved {saved} {d.source}, not this host's GPUs")
        return check(d)

    return on_this_host


def _owner(n: NodeFacts) -> str:
    if n.gid is None:
        return ""
    return f"group {n.group} (GID {n.gid})" if n.group else f"GID {n.gid}"


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def engine(d: Diagnosis) -> Verdict:
    """fail: the Docker engine is unreachable (nothing can be built, tested or run)."""
    if d.facts.engine_version and d.facts.engine_problem:
        return Verdict(FAIL, d.facts.engine_problem)
    if d.facts.engine_version:
        return Verdict(OK, f"{d.facts.engine_description or 'Docker Engine ' + d.facts.engine_version} reachable")
    error = d.facts.engine_error or ""
    if error.startswith("cannot reach the Docker engine at "):  # connect's message: where, why, what to do
        where_why, _, todo = error.rpartition("; ")  # the advice follows the last "; " (engine_errors)
        return Verdict(FAIL, f"{where_why}: nothing can be built or run; {todo}")
    why = f" ({error})" if error else ""
    return Verdict(
        FAIL, f"Docker engine not reachable{why}: nothing can be built or run; start dockerd or set DOCKER_HOST"
    )


@host_only
@wsl_skip
def kfd(d: Diagnosis) -> Verdict:
    """fail: no ``/dev/kfd``, so containers run without a GPU. warn: present but not read/write
    for this user: host tools such as rocminfo fail, containers still get it (``--device`` plus
    ``--group-add <GID>``: the daemon opens it)."""
    node = d.kfd
    if not node.exists:
        return Verdict(
            FAIL,
            f"no AMD GPU device nodes: containers will run without a GPU "
            f"({node.path} is missing: no AMD GPU, or the amdgpu driver is not loaded)",
        )
    if node.readable_writable:
        return Verdict(OK, f"{node.path} present, read/write, owned by {_owner(node) or 'an unknown group'}")
    return Verdict(
        WARN,
        f"{node.path} present but not read/write for this user: host tools (rocminfo) fail "
        f"with 'Unable to open /dev/kfd read-write'; add the user to {_owner(node) or 'its group'}. "
        f"Containers still get it through --device and --group-add",
    )


@host_only
@wsl_skip
def render_nodes(d: Diagnosis) -> Verdict:
    """fail: ``/dev/kfd`` but no ``/dev/dri/renderD*`` (HIP cannot open the GPU). warn: render
    nodes without ``/dev/kfd`` (another vendor's GPU), or not read/write for this user.
    skipped: neither exists (the kfd check fails for it already)."""
    renders = d.render_nodes
    if not renders:
        if d.kfd.exists:
            return Verdict(
                FAIL,
                "/dev/kfd exists but there is no /dev/dri/renderD* node: HIP cannot open the GPU, "
                "containers will run without one",
            )
        return Verdict(SKIPPED, "no /dev/dri/renderD* node either (see kfd)")
    names = ", ".join(f"{n.path} ({_owner(n) or 'unknown group'})" for n in renders)
    denied = [n.path for n in renders if not n.readable_writable]
    if not d.kfd.exists:
        return Verdict(
            WARN, f"{names}, but no /dev/kfd: these belong to another vendor's GPU, or the amdgpu KFD is missing"
        )
    if denied:
        return Verdict(
            WARN,
            f"{names}; not read/write for this user: {', '.join(denied)} (host tools fail; "
            f"containers get them through --group-add)",
        )
    return Verdict(OK, f"{names}, read/write")


@host_only
@wsl_skip
def device_groups(d: Diagnosis) -> Verdict:
    """ok: the ``docker run`` flags that pass the nodes and their owning groups (numeric GIDs)."""
    nodes = ([d.kfd] if d.kfd.exists else []) + list(d.render_nodes)
    if not nodes:
        return Verdict(SKIPPED, "no GPU device nodes, so no groups to add")
    gids = sorted({n.gid for n in nodes if n.gid} - {0})
    devices = " ".join(f"--device {n.path}" for n in nodes)
    if not gids:
        return Verdict(OK, f"the nodes belong to the root group: docker run {devices} needs no --group-add")
    named = {n.gid: n.group for n in nodes if n.gid and n.group}
    who = ", ".join(f"{g} ({named[g]})" if g in named else str(g) for g in gids)
    flags = " ".join(f"--group-add {g}" for g in gids)
    return Verdict(
        OK, f"owning GIDs {who}: docker run {devices} {flags} (numeric, since the image's group names differ)"
    )


@host_only
@wsl_skip
def amdgpu_module(d: Diagnosis) -> Verdict:
    """fail: not loaded and no ``/dev/kfd`` (kept apart from the kfd check because it names the
    fix). warn: not loaded although ``/dev/kfd`` exists, or it could not be told."""
    loaded = d.facts.amdgpu_module
    if loaded is True:
        return Verdict(OK, "amdgpu kernel module loaded")
    if loaded is None:
        return Verdict(
            WARN,
            "could not tell whether the amdgpu module is loaded (neither /sys/module nor /proc/modules is readable)",
        )
    if d.kfd.exists:
        return Verdict(
            WARN,
            "amdgpu is not listed in /sys/module or /proc/modules, yet /dev/kfd exists (a /dev "
            "bind-mounted from elsewhere?)",
        )
    return Verdict(
        FAIL, "amdgpu kernel module not loaded: install the AMD GPU driver (amdgpu-dkms) or `modprobe amdgpu`"
    )


def disk(d: Diagnosis) -> Verdict:
    """warn: less than :data:`LOW_DISK_BYTES` free under Docker's data root (ROCm images are
    3-50 GB each, and a build needs its builder images too), or it could not be measured."""
    free, where = d.facts.free_disk_bytes, d.facts.disk_path
    if free is None:
        return Verdict(WARN, f"could not measure the free space under {where}")
    if free < LOW_DISK_BYTES:
        return Verdict(
            WARN,
            f"only {_gb(free)} free under {where} (Docker's data root): ROCm images are 3-50 GB "
            f"each; keep at least {_gb(LOW_DISK_BYTES)} free",
        )
    return Verdict(OK, f"{_gb(free)} free under {where}")
