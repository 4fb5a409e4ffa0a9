"""The doctor's checks, in the order the report lists them, and :func:`diagnose`, which runs them.

Each check is a pure function of a :class:`Diagnosis` returning a :class:`Verdict` (status,
detail, maybe a recommended environment); the table names it. A name with ``{target}`` is run
once per built target (sorted), its function then taking the target as a second argument.
"""

from __future__ import annotations

from typing import Callable

from rocmforge.doctor import gpu_checks, host_checks
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import HostFacts
from rocmforge.doctor.findings import Report, Verdict

PER_TARGET = "{target}"

CHECKS: list[tuple[str, Callable[..., Verdict]]] = [
    ("engine", host_checks.engine),
    ("kfd", host_checks.kfd),
    ("render-nodes", host_checks.render_nodes),
    ("device-groups", host_checks.device_groups),
    ("amdgpu-module", host_checks.amdgpu_module),
    ("gpus", gpu_checks.gpus),
    ("integrated-gpus", gpu_checks.integrated_gpus),
    ("gfx-override", gpu_checks.gfx_override),
    ("coverage:" + PER_TARGET, gpu_checks.target_coverage),
    ("coverage", gpu_checks.overall_coverage),
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
    return report
