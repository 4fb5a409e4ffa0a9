"""`build.py doctor`: can this host build rocmforge images and run them on its AMD GPUs?

Two halves, so the rules can be tested without a GPU: :func:`gather` (:mod:`.facts`) reads the
host into :class:`HostFacts`; :func:`diagnose` (:mod:`.checks`) runs the table of checks over them
(:mod:`.host_checks`: engine, device nodes, module, disk; :mod:`.gpu_checks`: the GPUs against
the built targets, with :mod:`.gfx`'s coverage rules; :mod:`.container_checks`: rootless engines
and CDI; :mod:`.driver`: the amdgpu driver against the images' ROCm; :mod:`.platform_checks`:
/dev/shm and WSL2, from :mod:`.platform`'s facts) into a :class:`Report` (:mod:`.findings`).

Statuses. ``fail`` means containers built here will not get a usable GPU on this host (or nothing
can be built or run at all); ``warn`` means they can, but something needs the user's attention
or a setting; ``skipped`` means the check does not apply (``--rocminfo FILE`` diagnoses someone
else's GPUs, so this host's device nodes and kernel module are not examined) or lacks its input.
The exit code is 0 when no check is ``fail``. Each check function's docstring says when it fails
or warns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmforge.doctor.checks import CHECKS, diagnose
from rocmforge.doctor.facts import (
    HostFacts,
    NodeFacts,
    built_targets_from_labels,
    built_targets_from_plan,
    connect_engine,
    gather,
    image_details_from_plan,
    image_rocminfo_runner,
    pruned_targets_from_labels,
)
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Check, Recommendation, Report, RunAccess, Verdict
from rocmforge.doctor.gfx import GFX_OVERRIDES, hsa_override_version
from rocmforge.doctor.gpu_checks import SEED_ERROR
from rocmforge.doctor.host_checks import LOW_DISK_BYTES
from rocmforge.render.archprune import LABEL
from rocmforge.verify.readers import kfd, rocminfo

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan

__all__ = [
    "CHECKS",
    "FAIL",
    "GFX_OVERRIDES",
    "LOW_DISK_BYTES",
    "OK",
    "SEED_ERROR",
    "SKIPPED",
    "WARN",
    "Check",
    "HostFacts",
    "NodeFacts",
    "Recommendation",
    "Report",
    "RunAccess",
    "Verdict",
    "built_targets_from_labels",
    "built_targets_from_plan",
    "diagnose",
    "gather",
    "hsa_override_version",
    "image_rocminfo_runner",
    "run",
]


def _reachable_client() -> Engine | None:
    try:
        return connect_engine()
    except Exception:  # gather reports why
        return None


def run(
    *,
    plan: BuildPlan | None = None,
    rocminfo_file: str | None = None,
    client: Engine | None = None,
    kfd_topology: str | None = None,
    host_root: str | None = None,
) -> Report:
    """`build.py doctor`: gather, then diagnose. With a plan, the built targets are the plan's
    targets whose content tag exists, and rocminfo (when the host has none) runs in the first of
    them; without one, the engine's io.rocmforge.* labelled images are used. host_root: a copied
    host's folder (:mod:`.hostroot`), read instead of this one."""
    if rocminfo_file is not None:
        rocminfo.read_saved(rocminfo_file)  # a file that is no rocminfo output is refused before the engine is asked
    if kfd_topology is not None:
        kfd.read_saved_topology(kfd_topology)
    if client is None:
        client = _reachable_client()
    built = runner = images = None
    pruned: frozenset[str] = frozenset()
    if client is not None and plan is not None:
        try:
            built = built_targets_from_plan(client, plan)
        except Exception:  # engine trouble: gather falls back to the labels
            built = None
        pruned = frozenset(n for n in built or () if plan.targets[n].labels.get(LABEL) == "true")
        images = image_details_from_plan(client, plan, built or {})
        first_built = next((name for name in plan.order() if built and name in built), None)
        if first_built is not None:
            runner = image_rocminfo_runner(client, plan.targets[first_built].content_tag)
    elif client is not None:
        try:
            pruned = pruned_targets_from_labels(client)
        except Exception:  # engine trouble: gather reports it
            pruned = frozenset()
    facts = gather(
        client=client,
        built_targets=built,
        rocminfo_runner=runner,
        rocminfo_file=rocminfo_file,
        kfd_topology=kfd_topology,
        pruned_targets=pruned,
        host_root=host_root,
        images=images,
    )
    return diagnose(facts, from_file=rocminfo_file is not None or kfd_topology is not None)
