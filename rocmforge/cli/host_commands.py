"""Commands about the user's host: `doctor` (can it build and run the images) and `run` (the
target's image started as ROCm needs it, on the image this host's GPUs are covered by)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge import doctor as host_doctor
from rocmforge.assemble import engine
from rocmforge.cli import host_gpus, results, signals
from rocmforge.cli.invocation import Invocation
from rocmforge.doctor import pick
from rocmforge.host import dockerrun
from rocmforge.host import registry as registries
from rocmforge.host.container import GpuAccess, host_gpu_access
from rocmforge.render.plan import lock_needs
from rocmforge.shared import program
from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import TargetPlan


def doctor(inv: Invocation) -> int:
    """`doctor`: this host (or a saved or copied one) checked for building and running the images."""
    report = host_doctor.run(
        plan=inv.plan_if_any,
        rocminfo_file=inv.args.rocminfo,
        kfd_topology=inv.args.kfd_topology,
        host_root=host_gpus.host_root(inv),
    )
    if inv.args.json:  # exit 1 when a check fails: the result object says so as well
        return results.emit("doctor", report.exit_code, **report.to_json())
    print(report.format_text())
    return report.exit_code


def local_images(client: Engine, plans: Iterable[TargetPlan]) -> list[tuple[pick.Candidate, str]]:
    """The target's images this engine holds (built: content tag; pulled: readable tag), with sizes,
    each with its image ID."""
    out = []
    for tp in plans:
        found = ((r, engine.image_id(client, r)) for r in (tp.content_tag, tp.readable_tag))
        ref, image_id = next(((r, i) for r, i in found if i), (None, None))
        if ref is not None and image_id is not None:
            size = client.inspect(ref).get("Size")
            candidate = pick.Candidate(
                tp.variant or tp.archs, ref, size if isinstance(size, int) else None, variant=bool(tp.variant)
            )
            out.append((candidate, image_id))
    return out


def run(inv: Invocation) -> int:
    """`run`: the target's image that covers this host's GPUs (or the --image given) started as ROCm
    needs it, or its command printed."""
    target, given, cmd = inv.target_name(), getattr(inv.args, "image", None), inv.args.cmd
    if bool(target) == bool(given):
        raise UserError("give either --target TARGET or --image REF", field="run")
    if target:
        inv.project.target(target)
    else:
        registries.image_reference(str(given), "--image")
    if given and inv.args.arch is not None:
        raise UserError("--arch picks one of a target's images; --image names the image itself", field="--arch")
    host_gpus.check_arch(inv, target)
    host_root = host_gpus.host_root(inv)
    if host_root is not None and not inv.args.dry_run:
        raise UserError("a copied host's command can only be printed: add --dry-run", field="--host-root")
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    # A command to print for an image named by the user needs no engine; anything else does.
    client = engine.connect() if target or not inv.args.dry_run else None
    if given and client is not None and engine.image_id(client, given) is None:
        raise UserError(f"image {given!r} is not on the engine: `docker pull` it first", field="--image")
    held = _held(inv, client, target) if target else []
    gpu = host_gpu_access()
    env: dict[str, str] = {}
    access = host_doctor.RunAccess()
    job = host_gpus.read(inv, client, inv.plan if target else None, kfd_present=gpu.present or gpu.wsl, root=host_root)
    if job.report is not None:
        # A pruned image on GPUs it has no code for: stop here, not with hipErrorNoBinaryForGpu in the job.
        refusal = job.report.failed(f"coverage:{target}") if target else None
        if refusal:
            raise UserError(refusal, field="--target")
        access = job.report.access
        if host_root is not None:  # the copied host's nodes and groups, not this machine's
            gpu = GpuAccess(devices=access.devices, group_ids=access.group_ids)
        env = job.report.env_for(target) if gpu.present and target else {}
        # The user's own choice of GPUs goes to the job, and decides which GPUs the image must cover.
        if job.chosen is not None and gpu.present:
            env["HIP_VISIBLE_DEVICES"] = job.chosen
    if given:
        image = given
    else:
        candidates, image_ids = [c for c, _ in held], {c.ref: i for c, i in held}
        choice = host_gpus.chooser(job, inv.args.arch, str(target))(candidates)
        image = choice.image.ref
        inv.note(f"image: {choice.image.describe()}, {image_ids[image][7:19]}: {choice.reason}")
    docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
    argv = dockerrun.docker_run_argv(
        image,
        gpu,
        env,
        cmd,
        interactive=sys.stdin.isatty() and sys.stdout.isatty(),
        docker=docker,
        cdi_devices=access.cdi_devices,
        keep_groups=access.keep_groups,
        shm_size=access.shm_size,
    )
    where = "the copied host" if host_root else "this host"
    if gpu.wsl:
        inv.note(
            f"note: WSL2 on {where}: the container gets /dev/dxg and {dockerrun.WSL_LIBS}, but this image's ROCm "
            f"reaches the GPU only through AMD's WSL runtime (librocdxg); see `{program.command('doctor')}` (wsl)"
        )
    elif not gpu.present:
        inv.note(f"note: no /dev/kfd on {where}: the container runs WITHOUT a GPU")
    if inv.args.dry_run:
        print(
            dockerrun.dry_run_text(
                image,
                gpu,
                env,
                cmd,
                interactive=sys.stdin.isatty() and sys.stdout.isatty(),
                docker_cdi=access.docker_cdi_devices,
                podman_cdi=access.podman_cdi_devices,
                shm_size=access.shm_size,
            )
        )
        return 0
    return signals.run_passing_on(argv)


def _held(inv: Invocation, client: Engine | None, target: str) -> list[tuple[pick.Candidate, str]]:
    """The target's images on this engine; refused when there is none."""
    assert client is not None  # a target's images are looked up on the engine
    held = local_images(client, inv.plan.images_of(target))
    if not held:
        raise UserError(not_here(inv, target), field="--target")
    return held


def not_here(inv: Invocation, target: str) -> str:
    """What to do about a target with no image on this engine: only the steps that can work from
    here (issue 54: "build or pull", then pull's "push first", led nowhere for a target that cannot
    be built yet and was never published). pull needs a publish record, build resolved pins."""
    record = inv.project.record_dir / f"{target}.json"
    pull = f"`{program.command('pull --target ' + target)}` ({record} is its publish record)"
    head = f"target {target!r} is neither built nor pulled"
    unresolved = inv.plan.targets[target].unresolved
    if not unresolved:
        build = f"`{program.command('build --target ' + target)}`"
        return f"{head}; run {build}" + (f", or {pull}" if record.is_file() else "")
    if record.is_file():
        return f"{head}; run {pull}: it cannot be built here until its pins are resolved"
    return (
        f"{head}, and has no publish record to pull ({record}); it cannot be built until its pins "
        "are resolved:\n" + "".join(f"  - {u}\n" for u in unresolved) + lock_needs(target, unresolved)
    )
