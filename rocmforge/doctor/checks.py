"""The doctor's checks, in the order the report lists them, and :func:`diagnose`, which runs them.

Each check is a pure function of a :class:`Diagnosis` returning a :class:`Verdict` (status,
detail, maybe a recommended environment); the table names it. A name with ``{target}`` is run
once per built target (sorted), its function then taking the target as a second argument.
"""

from __future__ import annotations

from collections.abc import Callable

from rocmforge.doctor import cdi, container_checks, driver, gpu_checks, host_checks, platform_checks
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import HostFacts
from rocmforge.doctor.findings import Report, RunAccess, Verdict

PER_TARGET = "{target}"

CHECKS: list[tuple[str, Callable[..., Verdict]]] = [
    ("engine", host_checks.engine),
    ("wsl", platform_checks.wsl),
    ("kfd", host_checks.kfd),
    ("render-nodes", host_checks.render_nodes),
    ("device-groups", host_checks.device_groups),
    ("rootless", container_checks.rootless_access),
    ("cdi", container_checks.cdi_spec),
    ("amdgpu-module", host_checks.amdgpu_module),
    ("driver", driver.driver),
    ("gpus", gpu_checks.gpus),
    ("integrated-gpus", gpu_checks.integrated_gpus),
    ("gfx-override", gpu_checks.gfx_override),
    ("coverage:" + PER_TARGET, gpu_checks.target_coverage),
    ("coverage", gpu_checks.overall_coverage),
    ("shm", platform_checks.shm),
    ("disk", host_checks.disk),
]


def diagnose(facts: HostFacts, *, from_file: bool = False) -> Report:
    """The checks and recommendations for these facts. ``from_file``: ``facts.rocminfo_text`` is
    a saved output (``--rocminfo FILE``), so this host's device nodes and module are not examined."""
    d = Diagnosis.of(facts, from_file=from_file)
    report = Report(diagnosis=d)
    for name, check in CHECKS:
        if PER_TARGET in name:
            for target in sorted(d.built):
                report.add(name.replace(PER_TARGET, target), check(d, target))
        else:
            report.add(name, check(d))
    report.access = run_access(d)
    return report


def run_access(d: Diagnosis) -> RunAccess:
    """What `run` passes for these facts (nothing for a saved rocminfo output: not this host)."""
    if d.from_file:
        return RunAccess()
    if platform_checks.is_wsl(d):
        shm = platform_checks.size_flag(platform_checks.shm_for_run(d))
        return RunAccess(devices=("/dev/dxg",), wsl=True, shm_size=shm)
    if not d.kfd.exists:
        return RunAccess()
    shm = platform_checks.size_flag(platform_checks.shm_for_run(d))
    nodes = [d.kfd, *d.render_nodes]
    mode = container_checks.engine_mode(d)
    gids = tuple(sorted({n.gid for n in nodes if n.gid} - {0}))
    return RunAccess(
        devices=tuple(n.path for n in nodes),
        group_ids=gids,
        cdi_devices=container_checks.cdi_names(d),
        keep_groups=bool(mode.rootless) and mode.engine == container_checks.rootless.PODMAN,
        shm_size=shm,
        docker_cdi_devices=_cdi_for(d, podman=False),
        podman_cdi_devices=_cdi_for(d, podman=True),
    )


def _cdi_for(d: Diagnosis, *, podman: bool) -> tuple[str, ...]:
    traits = d.facts.engine_traits
    dirs = traits.cdi_dirs if not podman and not traits.podman else None  # podman's info lists no Docker folders
    return cdi.run_devices(d.facts.cdi_specs, tuple(n.path for n in d.render_nodes), dirs, podman)
