"""Commands that describe, publish or run what is built: each calls one module and prints."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from rocmforge import doctor as host_doctor
from rocmforge.assemble import engine
from rocmforge.assemble.buildable import buildability
from rocmforge.cli import host_gpus, show, signals
from rocmforge.cli.invocation import Invocation
from rocmforge.doctor import pick
from rocmforge.host import dockerrun
from rocmforge.host.container import GpuAccess, host_gpu_access
from rocmforge.release import matrix_report as reports, publication, report_page
from rocmforge.render import tree as rendered_tree
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import atomic_write
from rocmforge.verify import manifest
from rocmforge.verify.readers import archs as arch_reader, rocminfo as rocminfo_reader
from rocmforge.workflow.project import writable_dir, writable_file


def list_targets(inv: Invocation) -> int:
    plan, m = inv.plan, inv.plan.matrix
    rows = []
    for name in plan.order():
        tp, t = plan.targets[name], m.targets[name]
        ok, blockers = buildability(plan, name)
        torch, torch_build = m.torch_of(name)
        rows.append({"name": name, "stack": tp.stack, "archs": list(tp.archs), "deps": list(tp.deps),
                     "devel": t.devel, "description": t.description, "buildable_here": ok,
                     "pytorch": torch, "pytorch_build": torch_build if torch else None,
                     "blockers": blockers, "content_tag": tp.content_tag, "tag": tp.readable_tag,
                     "level": m.level(name), "runs_on": m.runner_of(name).labels,
                     "disk_gb": m.runner_of(name).disk_gb, "pruned": m.prunes(name),
                     "prune": manifest.prune_summary(inv.project.state, name),
                     "signed": publication.signed(*publication.record(inv.project.record_dir, name)),
                     "variants": [{"archs": list(v.variant), "content_tag": v.content_tag, "tag": v.readable_tag,
                                   "prune": manifest.prune_summary(inv.project.state, v.key)}
                                  for v in plan.variants.get(name, ())]})
    if inv.args.json and inv.args.gpu_jobs:
        print(json.dumps([{"target": r["name"], "arch": a, "runs_on": ["self-hosted", "linux", "rocm", a]}
                          for r in rows for a in r["archs"]], indent=2))
    elif inv.args.json:
        print(json.dumps(rows, indent=2))
    else:
        show.targets_table(inv.out, f"targets in {inv.project.matrix_path}", rows)
    return 0


def render(inv: Invocation) -> int:
    plan = inv.plan
    out = Path(inv.args.out) if inv.args.out else inv.project.root / "images"
    if inv.args.check:
        problems = rendered_tree.check(plan, out)
        for line in problems:
            print(line)
        if problems:
            print(f"{len(problems)} file(s) differ from the matrix; run `python build.py render`", file=sys.stderr)
            return 1
        print(f"{out}: up to date ({len(plan.targets)} targets)")
        return 0
    writable_dir(out, "--out")
    changes = rendered_tree.write(plan, out)
    for line in changes:
        print(line)
    print(f"{out}: {len(changes)} change(s), {len(plan.targets)} targets")
    return 0


def rocminfo(inv: Invocation) -> int:
    info = rocminfo_reader.parse(rocminfo_reader.read_saved(inv.args.file))
    print(json.dumps(info.to_json(), indent=2) if inv.args.json else rocminfo_reader.format_table(info))
    return 0


def archs(inv: Invocation) -> int:
    paths = inv.args.paths
    for p in paths:
        if not Path(p).exists():
            raise UserError("no such file or folder", file=p)
        try:
            why = arch_reader.not_scannable(p)
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror or exc}", file=p) from None
        if why:
            raise UserError(why, file=p)
    # A damaged file (cut short, corrupt, unreadable) is listed with what was found in it, and
    # the run ends with exit 2 naming it: its list of archs cannot be trusted to be complete.
    results = arch_reader.scan_checked(paths)
    if inv.args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        for r in results:
            if r.archs or r.error:
                print(f"{r.path}: {' '.join(r.archs) or '-'} ({r.kind}){'  ERROR: ' + r.error if r.error else ''}")
        if not any(r.archs for r in results):
            print("no GPU code found")
    damaged = [r for r in results if arch_reader.damaged(r)]
    if damaged:
        more = f" (and {len(damaged) - 1} more damaged file(s), see their entries)" if len(damaged) > 1 else ""
        raise UserError(damaged[0].error + more, file=damaged[0].path)
    return 0


def report(inv: Invocation) -> int:
    project, args = inv.project, inv.args
    out_dir = Path(args.report_out) if args.report_out else project.state / "report"
    writable_dir(out_dir, "--out" if args.report_out else "--state-dir")
    if args.markdown:
        writable_file(Path(args.markdown), "--markdown", replaced=False)
    try:
        client = engine.connect()
    except BuildError as exc:      # the page still shows the plan and the records, without images
        inv.progress.warn(f"{exc}; images are shown as not built")
        client = None
    rep = reports.gather(inv.plan, client, project.state, project.lock(), project.record_dir,
                         out_dir.resolve(), str(project.matrix_path))
    data = json.dumps(rep.to_json(), indent=2)
    try:
        for name, text in (("index.html", report_page.to_html(rep)), ("report.json", data + "\n")):
            atomic_write(out_dir / name, text.encode())
        if args.markdown:
            with open(args.markdown, "a", encoding="utf-8") as f:
                f.write(report_page.to_markdown(rep))
    except OSError as exc:
        raise UserError(f"cannot write the report: {exc.strerror or exc} ({exc.filename or out_dir})",
                        field="--markdown" if args.markdown and exc.filename == args.markdown else "--out") from None
    print(data if args.json else out_dir / "index.html")
    return 0


def doctor(inv: Invocation) -> int:
    report = host_doctor.run(plan=inv.plan, rocminfo_file=inv.args.rocminfo, kfd_topology=inv.args.kfd_topology,
                             host_root=host_gpus.host_root(inv))
    print(json.dumps(report.to_json(), indent=2) if inv.args.json else report.format_text())
    return report.exit_code


def local_images(client, plans) -> list[pick.Candidate]:
    """The target's images this engine holds (built: content tag; pulled: readable tag), with sizes."""
    out = []
    for tp in plans:
        ref = next((r for r in (tp.content_tag, tp.readable_tag) if engine.image_id(client, r)), None)
        if ref is not None:
            size = client.inspect(ref).get("Size")
            out.append(pick.Candidate(tp.variant or tp.archs, ref, size if isinstance(size, int) else None,
                                      variant=bool(tp.variant)))
    return out


def run(inv: Invocation) -> int:
    target, cmd = inv.target_name(), inv.args.cmd
    inv.project.target(target)
    host_gpus.check_arch(inv)
    host_root = host_gpus.host_root(inv)
    if host_root is not None and not inv.args.dry_run:
        raise UserError("a copied host's command can only be printed: add --dry-run", field="--host-root")
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    client = engine.connect()
    candidates = local_images(client, inv.plan.images_of(target))
    if not candidates:
        raise UserError(f"target {target!r} is neither built nor pulled; run `python build.py build --target "
                        f"{target}` or `python build.py pull --target {target}`", field="--target")
    gpu = host_gpu_access()
    env: dict[str, str] = {}
    access = host_doctor.RunAccess()
    job = host_gpus.read(inv, client, inv.plan, kfd_present=gpu.present or gpu.wsl, root=host_root)
    if job.report is not None:
        # A pruned image on GPUs it has no code for: stop here, not with hipErrorNoBinaryForGpu in the job.
        refusal = job.report.failed(f"coverage:{target}")
        if refusal:
            raise UserError(refusal, field="--target")
        access = job.report.access
        if host_root is not None:   # the copied host's nodes and groups, not this machine's
            gpu = GpuAccess(devices=access.devices, group_ids=access.group_ids)
        env = job.report.env_for(target) if gpu.present else {}
        # The user's own choice of GPUs goes to the job, and decides which GPUs the image must cover.
        if job.chosen is not None and gpu.present:
            env["HIP_VISIBLE_DEVICES"] = job.chosen
    choice = host_gpus.chooser(job, inv.args.arch, target)(candidates)
    image = choice.image.ref
    print(f"image: {choice.image.describe()}, {engine.image_id(client, image)[7:19]}: {choice.reason}",
          file=sys.stderr)
    docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
    argv = dockerrun.docker_run_argv(image, gpu, env, cmd, interactive=sys.stdin.isatty() and sys.stdout.isatty(),
                                     docker=docker, cdi_devices=access.cdi_devices, keep_groups=access.keep_groups,
                                     shm_size=access.shm_size)
    where = "the copied host" if host_root else "this host"
    if gpu.wsl:
        print(f"note: WSL2 on {where}: the container gets /dev/dxg and {dockerrun.WSL_LIBS}, but this image's ROCm "
              "reaches the GPU only through AMD's WSL runtime (librocdxg); see `python build.py doctor` (wsl)",
              file=sys.stderr)
    elif not gpu.present:
        print(f"note: no /dev/kfd on {where}: the container runs WITHOUT a GPU", file=sys.stderr)
    if inv.args.dry_run:
        print(dockerrun.dry_run_text(image, gpu, env, cmd, interactive=sys.stdin.isatty() and sys.stdout.isatty(),
                                     docker_cdi=access.docker_cdi_devices, podman_cdi=access.podman_cdi_devices,
                                     shm_size=access.shm_size))
        return 0
    return signals.run_passing_on(argv)
