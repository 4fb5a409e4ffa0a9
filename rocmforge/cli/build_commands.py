"""Commands that build, check or clean images: each parses nothing, calls the pipeline and prints."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rocmforge.assemble import engine, steplock
from rocmforge.assemble.engine import require_built
from rocmforge.cli import results, show
from rocmforge.cli.invocation import Invocation
from rocmforge.define.matrix import variant_suffix
from rocmforge.host import registry as registries
from rocmforge.render.dockerfile import COPIED_DIR_MTIME, copied_dirs
from rocmforge.shared import program
from rocmforge.shared.errors import UserError
from rocmforge.shared.files import atomic_write
from rocmforge.verify import suites
from rocmforge.workflow import baked, cleanup, locking
from rocmforge.workflow.project import writable_dir, writable_file
from rocmforge.workflow.repro_check import verify_repro as run


def build_and_test(inv: Invocation) -> int:
    """`build.py --target X`: the main job (a bare `build.py` prints the usage instead: cli.main)."""
    suites.require_runner()  # not after minutes of building
    return build(inv) or test(inv)


def build(inv: Invocation) -> int:
    """`build --target T` (and a bare `build.py --target T`): T and its chain built, then a table of what was done."""
    name = inv.required_target()
    started = time.monotonic()
    built = inv.pipeline.build(name)
    if getattr(inv.args, "json", False):
        rows = []
        for r in built:
            tp = inv.plan.by_key(r.target)
            rows.append(
                {
                    "target": r.target,
                    "status": r.status,
                    "image_id": r.image_id,
                    "engine_id": r.engine_id,
                    "size_bytes": r.size,
                    "elapsed_s": r.elapsed_s,
                    "content_tag": tp.content_tag,
                    "tag": tp.readable_tag,
                }
            )
        return results.emit("build", 0, targets=rows, elapsed_s=round(time.monotonic() - started, 1))
    show.build_table(inv.out, inv.plan, built)
    for r in built:
        print(f"{r.target}: {r.status} in {r.elapsed_s:.1f} s")
    return 0


def test(inv: Invocation) -> int:
    """`test`: the suites against the target's images (main and variants) or one --image; exit 1 when any fails."""
    args, project = inv.args, inv.project
    target, image = inv.target_name(), getattr(args, "image", None)
    if not target and not image:
        raise UserError("give --target TARGET or --image REF", field="test")
    if target:
        project.target(target)
    if image:
        registries.image_reference(image, "--image")
    junit = Path(args.junit).resolve() if getattr(args, "junit", None) else None  # pytest runs in the checkout
    if junit:
        writable_file(junit, "--junit", replaced=False)
    project.writable_state()
    suites.require_runner()
    if target and not image:  # its image exists only if it could be built
        project.buildable_target(target)
    client = engine.connect()
    # A target's test covers its main image and every variant its build makes.
    if image:
        image_id = engine.image_id(client, image)
        if image_id is None:
            raise UserError(f"image {image!r} not found on the engine", field="--image")
        # An image given by reference that is one of the target's own gets the suites in its manifest.
        own = (
            next((tp for tp in inv.plan.images_of(target) if engine.image_id(client, tp.content_tag) == image_id), None)
            if target
            else None
        )
        runs = [(image, image_id, own)]
    else:
        runs = [(tp.content_tag, require_built(client, tp), tp) for tp in inv.plan.images_of(target)]
    require_gpu = bool(getattr(args, "require_gpu", False))
    only = tuple(getattr(args, "suites", None) or ())
    reports = []
    for ref, image_id, tp in runs:
        own_junit = junit
        if junit and tp is not None and tp.variant:
            own_junit = junit.with_name(f"{junit.stem}{variant_suffix(tp.variant)}{junit.suffix}")
        reports.append(
            inv.pipeline.test(client, ref, image_id, target, own_junit, require_gpu=require_gpu, own=tp, only=only)
        )
    report, *variants = reports
    code = 0 if all(r.ok for r in reports) else 1
    if getattr(args, "json", False):
        # The main image's report, its own verdict as image_ok; ok judges the variants too, as the exit code does.
        main = report.to_json()
        main["image_ok"] = main.pop("ok")
        if variants:
            main["variants"] = [v.to_json() for v in variants]
        return results.emit("test", code, **main)
    else:
        # `test -v` or the bare `--target X -v`
        verbose = bool(getattr(args, "test_verbose", False) or getattr(args, "verbose", False))
        for each in reports:
            show.suites_table(inv.out, each, verbose=verbose)
            if only:
                inv.progress.line(f"results not recorded: only {', '.join(only)} ran (push needs every suite)")
            else:
                path = suites.results_path(project.state, each.image_id)
                inv.progress.line(f"results recorded: {path}", markup=False)
            if not each.ok:
                inv.progress.line("pytest output (tail):\n" + each.log[-3000:], markup=False)
    return code


def verify_repro(inv: Invocation) -> int:
    """`verify-repro`: the target built twice without cache, a second apart (or once, against the
    built image); exit 1 when the image IDs differ."""
    name = inv.required_target()
    result = run(inv.pipeline, name, against_built=inv.args.against_built)
    if inv.args.json:
        return results.emit("verify-repro", 0 if result.identical else 1, **result.to_json())
    for each in [result] + result.variants:
        a, b = each.image_ids
        both = "the built image and its rebuild" if each.against == "built" else "both builds"
        print(
            f"identical: {both} of {each.target} gave {a}"
            if a == b
            else f"DIFFERENT: {each.target}: {a[7:19]} vs {b[7:19]}: {each.explanation}"
        )
    return 0 if result.identical else 1


def manifest(inv: Invocation) -> int:
    """`manifest`: the manifest and SBOM of the target's built images, written again."""
    name = inv.required_target()
    inv.project.target(name)
    inv.project.writable_state()
    tp = inv.project.buildable_target(name)
    client = engine.connect()
    require_built(client, tp)
    written = []
    for each in inv.plan.images_of(name):
        image_id = engine.image_id(client, each.content_tag)
        if image_id is None:
            continue  # a variant not built: its manifest comes with its build
        folder = inv.pipeline.write_manifest(client, each, image_id)
        paths = {"manifest": str(folder / "manifest.json"), "sbom": str(folder / "sbom.cdx.json")}
        written.append({"target": each.key, "image_id": image_id, **paths})
        if not getattr(inv.args, "json", False):
            print(f"{paths['manifest']}\n{paths['sbom']}")
    if getattr(inv.args, "json", False):
        return results.emit("manifest", 0, written=written)
    return 0


def context(inv: Invocation) -> int:
    """The folder `docker build` takes by hand: the rendered files, the probes and the fetched inputs."""
    name = inv.required_target()
    out = Path(inv.args.out)
    tp = inv.project.buildable_image(name)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            "must be an empty folder or not exist yet (nothing is overwritten)", file=str(out), field="--out"
        )
    writable_dir(out, "--out")
    inv.project.writable_state()  # fetched inputs are cached there
    files = inv.pipeline.context(name)
    for rel, data in sorted(files.items()):
        atomic_write(out / rel, data)
    # The times rocmforge's own context carries (assemble.buildstream.context_tar: 0, a later time for
    # a folder a COPY takes): BuildKit's cache keys ignore file times, so a hand build with the
    # checkout's times would hand a later rocmforge build COPY layers with those times (another image ID).
    copied = copied_dirs(files["Dockerfile"].decode(), files)
    for path in sorted(out.rglob("*"), reverse=True):
        when = COPIED_DIR_MTIME if path.relative_to(out).as_posix() in copied else 0
        os.utime(path, (when, when))
    os.utime(out, (0, 0))
    if getattr(inv.args, "json", False):
        return results.emit("context", 0, target=name, out=str(out), tag=tp.readable_tag, files=sorted(files))
    print(f"{out}: {len(files)} files; build it with: docker build -t {tp.readable_tag} {out}")
    return 0


def normalise(inv: Invocation) -> int:
    """`normalise --target KEY`: the image a bake build made, as rocmforge's own build makes it."""
    key = inv.required_target()
    tp = inv.project.buildable_image(key)
    inv.project.writable_state()
    client = engine.connect()
    with inv.progress.status(f"{key}: normalising layers and config for a reproducible image ID"):
        done = baked.normalise(inv.pipeline, client, tp, inv.args.image)
    if getattr(inv.args, "json", False):
        return results.emit(
            "normalise",
            0,
            target=key,
            source=done.source,
            pulled=done.pulled,
            image_id=done.image_id,
            content_tag=tp.content_tag,
            tag=tp.readable_tag,
        )
    how = "pulled and normalised" if done.pulled else "normalised"
    print(f"{key}: {done.source} {how}: {done.image_id}; tags {tp.content_tag}, {tp.readable_tag}")
    return 0


def lock(inv: Invocation) -> int:
    """`lock` writes matrix.lock; `lock --check` lists every stale or unavailable pin (exit 1 when any)."""
    project, args = inv.project, inv.args
    as_json = getattr(args, "json", False)
    if args.check:
        out = locking.check(project, args.lock_targets, inv.progress)
        code = 1 if out.problems else 0
        if as_json:
            targets = inv.plan.order(args.lock_targets)
            return results.emit("lock", code, check=True, targets=targets, problems=list(out.problems))
        for p in out.problems:
            print(f"stale: {p}")
        if out.problems:
            print(
                f"{len(out.problems)} stale or unavailable pin(s); change matrix.yaml where it asks for "
                f"what is gone, then run `{program.command('lock')}` to resolve the rest again",
                file=sys.stderr,
            )
            return 1
        print(f"{project.lock_path.name}: every pin resolves ({', '.join(inv.plan.order(args.lock_targets))})")
        return 0
    out = locking.resolve(project, args.lock_targets, getattr(args, "ca_bundle", None), inv.progress)
    code = 1 if out.failed else 0
    if as_json:
        wrote = str(project.lock_path) if out.written else None
        return results.emit("lock", code, check=False, resolved=out.resolved, unresolved=out.failed, wrote=wrote)
    for r in out.resolved:
        print(f"resolved: {r}")
    for f in out.failed:
        print(f"unresolved: {f}", file=sys.stderr)
    if out.written:
        inv.note(f"wrote {project.lock_path}; run `{program.command('render')}` to apply it to images/")
    else:
        inv.note(f"{project.lock_path}: unchanged")
    if out.failed:
        print(
            f"{len(out.failed)} pin(s) could not be resolved here. lock needs the Docker engine, the base "
            "images' registry (or ROCMFORGE_REGISTRY_MIRROR=HOST[:PORT]), the package indexes and the git "
            'hosts (or ROCMFORGE_GIT_MIRRORS="UPSTREAM=MIRROR ...")',
            file=sys.stderr,
        )
    return code


def clean(inv: Invocation) -> int:
    """`clean`: the images rocmforge built (one target's or all), what interrupted builds left, and the logs."""
    project, target, dry_run = inv.project, inv.target_name(), inv.args.clean_dry_run
    names = [target] if target else sorted(inv.plan.targets)
    for n in names:
        project.target(n)
    if not dry_run:
        project.writable_state()
    client = engine.connect()
    with steplock.exclusive() as alone:  # no build starts while we remove
        found = cleanup.find(client, project, names, all_targets=not target, alone=alone, dry_run=dry_run)
        if found.waiting:
            inv.progress.line(
                f"keeping {found.waiting} untagged step image(s): another build is running on this engine"
            )
        items = [{"kind": i.kind, "ref": i.ref, "size_bytes": i.size} for i in found.items]
        as_json = getattr(inv.args, "json", False)
        if not as_json:
            for item in found.items:
                print(f"{'would remove' if dry_run else 'remove'} {item.kind}: {item.ref} ({item.size / 1e9:.2f} GB)")
        if dry_run:
            if as_json:
                return results.emit("clean", 0, dry_run=True, items=items, logs_removed=False)
            print(f"{len(found.items)} item(s); nothing removed")
            return 0
        cleanup.remove(client, project, found, names, alone, lambda msg: inv.progress.line(f"[yellow]{msg}[/yellow]"))
    if getattr(inv.args, "json", False):
        return results.emit("clean", 0, dry_run=False, items=items, logs_removed=bool(alone))
    if alone:
        print(f"removed {len(found.items)} item(s) and the build logs")
    else:
        print(f"removed {len(found.items)} item(s); the build logs are kept while another build runs")
    return 0
