"""Commands that describe the project: its targets (`list`), its rendered files (`render`) and
what is built and published (`report`). Each calls one module and prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rocmforge.assemble import engine
from rocmforge.assemble.buildable import buildability, engine_problem
from rocmforge.cli import results, show
from rocmforge.cli.invocation import Invocation
from rocmforge.release import matrix_report as reports
from rocmforge.release import publication, report_page
from rocmforge.render import tree as rendered_tree
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import atomic_write
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import manifest
from rocmforge.workflow.project import writable_dir, writable_file


def list_targets(inv: Invocation) -> int:
    """`list`: every target with its stack, archs, torch and whether it builds here (--json: as data)."""
    plan, m = inv.plan, inv.plan.matrix
    rows = []
    for name in plan.order():
        tp, t = plan.targets[name], m.targets[name]
        ok, blockers = buildability(plan, name)
        torch, torch_build = m.torch_of(name)
        rows.append(
            {
                "name": name,
                "stack": tp.stack,
                "archs": list(tp.archs),
                "deps": list(tp.deps),
                "devel": t.devel,
                "description": t.description,
                "buildable_here": ok,
                "pytorch": torch,
                "pytorch_build": torch_build if torch else None,
                "blockers": blockers,
                "content_tag": tp.content_tag,
                "tag": tp.readable_tag,
                "level": m.level(name),
                "runs_on": m.runner_of(name).labels,
                "disk_gb": m.runner_of(name).disk_gb,
                "pruned": m.prunes(name),
                "prune": manifest.prune_summary(inv.project.state, name),
                "signed": publication.signed(*publication.record(inv.project.record_dir, name)),
                "variants": [
                    {
                        "archs": list(v.variant),
                        "content_tag": v.content_tag,
                        "tag": v.readable_tag,
                        "prune": manifest.prune_summary(inv.project.state, v.key),
                    }
                    for v in plan.variants.get(name, ())
                ],
            }
        )
    if inv.args.json and inv.args.gpu_jobs:
        print(
            json.dumps(
                [
                    {"target": r["name"], "arch": a, "runs_on": ["self-hosted", "linux", "rocm", a]}
                    for r in rows
                    for a in r["archs"]
                ],
                indent=2,
            )
        )
    elif inv.args.json:
        print(json.dumps(rows, indent=2))
    else:
        show.targets_table(inv.out, f"targets in {inv.project.matrix_path}", rows)
    problem = engine_problem()
    if problem:  # on stderr, once, under the table or the JSON: which engine, and the reason
        inv.note(f"note: {problem}")
    return 0


def render(inv: Invocation) -> int:
    """`render` writes images/ from the matrix; `render --check` lists the files that differ (exit 1)."""
    plan = inv.plan
    out = Path(inv.args.out) if inv.args.out else inv.project.root / "images"
    as_json = getattr(inv.args, "json", False)
    if inv.args.check:
        problems = rendered_tree.check(plan, out)
        if as_json:
            return results.emit("render", 1 if problems else 0, check=True, out=str(out), changes=problems)
        for line in problems:
            print(line)
        if problems:
            print(f"{len(problems)} file(s) differ from the matrix; run `{program.command('render')}`", file=sys.stderr)
            return 1
        print(f"{out}: up to date ({len(plan.targets)} targets)")
        return 0
    writable_dir(out, "--out")
    changes = rendered_tree.write(plan, out)
    if as_json:
        return results.emit("render", 0, check=False, out=str(out), changes=changes)
    for line in changes:
        print(line)
    print(f"{out}: {len(changes)} change(s), {len(plan.targets)} targets")
    return 0


def report(inv: Invocation) -> int:
    """`report`: the matrix report (HTML and JSON, --markdown appends a summary) of every target."""
    project, args = inv.project, inv.args
    out_dir = Path(args.report_out) if args.report_out else StateDir(project.state).report
    writable_dir(out_dir, "--out" if args.report_out else "--state-dir")
    if args.markdown:
        writable_file(Path(args.markdown), "--markdown", replaced=False)
    try:
        client = engine.connect()
    except BuildError as exc:  # the page still shows the plan and the records, without images
        inv.progress.warn(f"{exc}; images are shown as not built")
        client = None
    rep = reports.gather(
        inv.plan, client, project.state, project.lock(), project.record_dir, out_dir.resolve(), str(project.matrix_path)
    )
    data = json.dumps(rep.to_json(), indent=2)
    try:
        for name, text in (("index.html", report_page.to_html(rep)), ("report.json", data + "\n")):
            atomic_write(out_dir / name, text.encode())
        if args.markdown:
            with open(args.markdown, "a", encoding="utf-8") as f:
                f.write(report_page.to_markdown(rep))
    except OSError as exc:
        raise UserError(
            f"cannot write the report: {exc.strerror or exc} ({exc.filename or out_dir})",
            field="--markdown" if args.markdown and exc.filename == args.markdown else "--out",
        ) from None
    if args.json:  # report.json's keys after the three every result starts with
        return results.emit("report", 0, **rep.to_json())
    print(out_dir / "index.html")
    return 0
