"""The GPUs a target's image must cover, for `run` and `pull`: this host's (when it has /dev/kfd),
a saved rocminfo output or KFD topology, or a host copied under --host-root; then the ones the job
will use (HIP_VISIBLE_DEVICES, else the doctor's iGPU advice)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge import doctor as host_doctor
from rocmforge.define.schema import GFX_RE
from rocmforge.doctor import pick
from rocmforge.doctor.diagnosis import Gpu
from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from rocmforge.cli.invocation import Invocation
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan


def host_root(inv: Invocation) -> str | None:
    """--host-root DIR, refused before anything is read when it is not a folder."""
    root = inv.args.host_root
    if root is None:
        return None
    if not Path(root).is_dir():
        why = "not a folder" if Path(root).exists() else "no such folder"
        raise UserError(
            f"{why}: {root} (a copied host: DIR/dev-stat.txt, DIR/proc, DIR/sys, DIR/etc)", field="--host-root"
        )
    return str(Path(root).resolve())


def check_arch(inv: Invocation, target: str | None = None) -> None:
    """Refuse an --arch that is not a gfx name, before anything is read; with a target, also one
    that none of its planned images carries (the plan says so without asking the engine)."""
    arch = inv.args.arch
    if arch is not None and not GFX_RE.match(arch):
        raise UserError(f"{arch!r} is not a gfx architecture name (e.g. gfx90a, gfx1100)", field="--arch")
    if arch is not None and target is not None:
        carried = sorted({a for tp in inv.plan.images_of(target) for a in (tp.variant or tp.archs)})
        if arch not in carried:
            shown = ", ".join(carried)
            raise UserError(f"no image of {target} carries {arch}; its images carry {shown}", field="--arch")


@dataclass
class JobGpus:
    report: host_doctor.Report | None  # None: no GPU facts at all (no /dev/kfd, nothing saved)
    gpus: tuple[Gpu, ...] = ()
    why: str = "no /dev/kfd on this host"
    chosen: str | None = None  # the user's HIP_VISIBLE_DEVICES, passed on to the job


def read(
    inv: Invocation, client: Engine | None, plan: BuildPlan | None, *, kfd_present: bool, root: str | None
) -> JobGpus:
    """The GPUs a job on this host (or the saved or copied one the options name) would get (client
    None: the doctor asks the engine of the environment, if it answers)."""
    saved = inv.args.rocminfo is not None or inv.args.kfd_topology is not None
    if not (kfd_present or saved or root is not None):
        return JobGpus(None)
    report = host_doctor.run(
        plan=plan, client=client, rocminfo_file=inv.args.rocminfo, kfd_topology=inv.args.kfd_topology, host_root=root
    )
    chosen = os.environ.get("HIP_VISIBLE_DEVICES") if root is None else None
    gpus, why = pick.job_gpus(report.diagnosis, chosen)
    return JobGpus(report, gpus, why, chosen)


def chooser(job: JobGpus, arch: str | None, label: str):
    """pick.choose over candidates, a refusal (no image covers the GPUs) as one error, exit 1."""

    def choose(candidates: list[pick.Candidate]) -> pick.Choice:
        try:
            return pick.choose(candidates, job.gpus, job.why, arch)
        except pick.NoImage as exc:
            raise BuildError(f"{label}: {exc}") from None

    return choose
