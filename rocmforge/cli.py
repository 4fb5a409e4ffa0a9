"""Command line: `python build.py [--matrix M] COMMAND ...`; `python build.py --target X` builds then tests."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import tempfile
from pathlib import Path

from . import aptmirror
from .errors import BuildError, UserError

COMMANDS = ("list", "render", "build", "test", "rocminfo", "archs")
CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other user error
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _build_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Options of a build, accepted before the subcommand (for the bare --target) and after `build`."""
    p.add_argument("--cache-registry", dest=f"{prefix}cache_registry", default=None,
                   help="HOST[:PORT][/NS]: pull targets by content tag from this registry instead of building "
                        "them, push what was built (default $ROCMFORGE_CACHE_REGISTRY; namespace rocmforge-cache)")
    p.add_argument("--cache-readonly", dest=f"{prefix}cache_readonly", action="store_true",
                   help="only pull from the cache registry (pull requests)")
    p.add_argument("--check-disk", dest=f"{prefix}check_disk", action="store_true",
                   help="before each build, fail unless the engine has the disk the matrix says it needs (runner.disk_gb)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="build.py", description="Build, verify and publish version-locked ROCm images from matrix.yaml.")
    p.add_argument("--matrix", default="matrix.yaml", help="the matrix file (default ./matrix.yaml)")
    p.add_argument("--state-dir", default=None, help="logs and caches (default .rocmforge/ beside the matrix)")
    p.add_argument("--target", help="shorthand: build TARGET (with prerequisites), then test it")
    p.add_argument("--ca-bundle", default=None, help="CA bundle for HTTPS behind a TLS-intercepting proxy "
                   "(default: $PIP_CERT, $REQUESTS_CA_BUNDLE or $SSL_CERT_FILE); used only in builder stages")
    _build_options(p)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    ls = sub.add_parser("list", help="targets with stack, archs, dependencies and buildability here")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--gpu-jobs", action="store_true",
                    help="with --json: one entry per (target, arch) with the self-hosted runner labels for its GPU suites")
    r = sub.add_parser("render", help="write images/<target>/ from matrix.yaml and templates/")
    r.add_argument("--out", default=None, help="output folder (default images/ beside the matrix)")
    r.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every stale, missing or extra file")
    b = sub.add_parser("build", help="build a target (and its prerequisites) on the Docker engine")
    b.add_argument("--target", required=True, dest="build_target")
    b.add_argument("--ca-bundle", default=None, dest="build_ca_bundle", help="as the global --ca-bundle")
    _build_options(b, "build_")
    t = sub.add_parser("test", help="run the verification suites inside a built image")
    t.add_argument("--target", dest="test_target", help="a built matrix target (with --image: the target whose "
                   "archs and pins the image is checked against)")
    t.add_argument("--image", help="any image reference (without --target its io.rocmforge.* labels give target and archs)")
    t.add_argument("--junit", help="write a JUnit XML report here")
    t.add_argument("--json", action="store_true", help="print the results as JSON")
    t.add_argument("--require-gpu", action="store_true", dest="require_gpu",
                   help="a GPU check that cannot see a GPU fails instead of being 'not GPU-verified' "
                        "(implied on a host with /dev/kfd; the CI GPU job passes it)")
    ri = sub.add_parser("rocminfo", help="parse a saved rocminfo output")
    ri.add_argument("file")
    ri.add_argument("--json", action="store_true")
    pu = sub.add_parser("push", help="push a target's image (only if that exact image passed its suites)")
    pu.add_argument("--target", required=True, dest="push_target")
    pu.add_argument("--registry", required=True, help="HOST[:PORT][/NAMESPACE]")
    pl = sub.add_parser("pull", help="pull a published target by digest and verify it")
    pl.add_argument("--target", required=True, dest="pull_target")
    dr = sub.add_parser("doctor", help="check this host for running ROCm containers")
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--rocminfo", help="diagnose a saved rocminfo output instead of this host's GPUs")
    rn = sub.add_parser("run", help="docker run a target with the flags ROCm needs")
    rn.add_argument("--target", required=True, dest="run_target")
    rn.add_argument("--dry-run", action="store_true", help="print the docker command, run nothing")
    rn.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (default: the image's command)")
    lk = sub.add_parser("lock", help="resolve digests, apt closures, wheel hashes and git commits into matrix.lock")
    lk.add_argument("--target", action="append", dest="lock_targets", help="only this target and its prerequisites (repeatable)")
    lk.add_argument("--check", action="store_true", help="write nothing; exit 1 listing every stale or unavailable pin")
    vr = sub.add_parser("verify-repro", help="build a target twice without cache and compare the image IDs")
    vr.add_argument("--target", required=True, dest="repro_target")
    vr.add_argument("--json", action="store_true")
    mf = sub.add_parser("manifest", help="write the manifest and CycloneDX SBOM of a built target")
    mf.add_argument("--target", required=True, dest="manifest_target")
    rp = sub.add_parser("report", help="the matrix report: every target against every suite, as a static HTML page")
    rp.add_argument("--out", dest="report_out", default=None, help="folder for index.html and report.json "
                    "(default .rocmforge/report/)")
    rp.add_argument("--json", action="store_true", help="print the report as JSON")
    rp.add_argument("--markdown", default=None, help="append a Markdown summary to this file (CI: $GITHUB_STEP_SUMMARY)")
    cl = sub.add_parser("clean", help="remove the images rocmforge built (all targets or one), what interrupted "
                        "builds left behind, and the logs")
    cl.add_argument("--target", dest="clean_target")
    cl.add_argument("--dry-run", dest="clean_dry_run", action="store_true", help="list what would be removed")
    ar = sub.add_parser("archs", help="list the GPU architectures compiled into files or folders")
    ar.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    ar.add_argument("--json", action="store_true")
    return p


class App:
    def __init__(self, args) -> None:
        from rich.console import Console

        self.args = args
        self.matrix_path = Path(args.matrix)
        self.root = self.matrix_path.resolve().parent
        self.state = Path(args.state_dir) if args.state_dir else self.root / ".rocmforge"
        self.out = Console()
        self.err = Console(stderr=True)
        self._plan = None
        self._cached: set[str] = set()     # targets this run took from the cache registry
        aptmirror.from_env()   # a bad mirror setting is refused before anything runs

    @property
    def lock_path(self) -> Path:
        return self.matrix_path.with_suffix(".lock")

    @property
    def plan(self):
        if self._plan is None:
            from .plan import load_plan

            self._plan = load_plan(self.matrix_path)
        return self._plan

    def target(self, name: str, flag: str = "--target"):
        if name not in self.plan.targets:
            raise UserError(f"unknown target {name!r}; known: {', '.join(sorted(self.plan.targets))}", field=flag)
        return self.plan.targets[name]

    def buildable_target(self, name: str):
        """A target a command will build or needs built: refused while unresolved, without the engine."""
        from .plan import require_resolved

        tp = self.target(name)
        require_resolved(tp)
        return tp

    def writable_state(self) -> None:
        writable_dir(self.state, "--state-dir")

    # -- list -----------------------------------------------------------------------------
    def cmd_list(self) -> int:
        from .hostcheck import buildability

        rows = []
        for name in self.plan.order():
            tp = self.plan.targets[name]
            t = self.plan.matrix.targets[name]
            ok, blockers = buildability(self.plan, name)
            torch, torch_build = self.plan.matrix.torch_of(name)
            rows.append({"name": name, "stack": tp.stack, "archs": list(tp.archs), "deps": list(tp.deps),
                         "devel": t.devel, "description": t.description, "buildable_here": ok,
                         "pytorch": torch, "pytorch_build": torch_build if torch else None,
                         "blockers": blockers, "content_tag": tp.content_tag, "tag": tp.readable_tag,
                         "level": self.plan.matrix.level(name), "runs_on": self.plan.matrix.runner_of(name).labels,
                         "disk_gb": self.plan.matrix.runner_of(name).disk_gb})
        if self.args.json and self.args.gpu_jobs:
            jobs = [{"target": r["name"], "arch": a, "runs_on": ["self-hosted", "linux", "rocm", a]}
                    for r in rows for a in r["archs"]]
            print(json.dumps(jobs, indent=2))
            return 0
        if self.args.json:
            print(json.dumps(rows, indent=2))
            return 0
        from rich.table import Table

        # Names are never cut: a user copies them. Other columns wrap (80 columns must stay readable).
        from rich import box

        table = Table(title=f"targets in {self.matrix_path}", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("target", "stack"):
            table.add_column(col, no_wrap=True)
        for col in ("archs", "torch", "here"):
            table.add_column(col, overflow="fold")
        for r in rows:
            torch = f"{r['pytorch']} {r['pytorch_build']}" if r["pytorch"] else "-"
            needs = "".join(f"\n  on {d}" for d in r["deps"])
            table.add_row(r["name"] + needs, r["stack"], " ".join(r["archs"]), torch,
                          "yes" if r["buildable_here"] else f"no ({len(r['blockers'])} below)")
        self.out.print(table)
        for r in rows:
            for b in r["blockers"]:
                self.out.print(f"  {b if b.startswith(r['name'] + ':') else r['name'] + ': ' + b}",
                               highlight=False, markup=False)
        return 0

    # -- render ---------------------------------------------------------------------------
    def cmd_render(self) -> int:
        from . import render

        out = Path(self.args.out) if self.args.out else self.root / "images"
        if self.args.check:
            problems = render.check(self.plan, out)
            for line in problems:
                print(line)
            if problems:
                print(f"{len(problems)} file(s) differ from the matrix; run `python build.py render`", file=sys.stderr)
                return 1
            print(f"{out}: up to date ({len(self.plan.targets)} targets)")
            return 0
        writable_dir(out, "--out")
        changes = render.write(self.plan, out)
        for line in changes:
            print(line)
        print(f"{out}: {len(changes)} change(s), {len(self.plan.targets)} targets")
        return 0

    # -- build ----------------------------------------------------------------------------
    def ca_bundle(self, explicit: str | None) -> Path | None:
        value, source = explicit, "--ca-bundle"
        if value is None:
            for var in CA_ENV:
                if os.environ.get(var):
                    value, source = os.environ[var], f"${var}"
                    break
        if not value:
            return None
        path = Path(value)
        if not path.is_file():
            raise UserError(f"CA bundle {value!r} is not a readable file", field=source)
        return path

    def build(self, name: str, ca_explicit: str | None) -> list[dict]:
        from concurrent.futures import ThreadPoolExecutor

        from . import bootstrap, buildcache, engine, regcache

        self.target(name)
        self.writable_state()
        tp = self.buildable_target(name)
        ca = self.ca_bundle(ca_explicit)
        buildcache.budget()      # a bad setting is refused before anything is built
        cache = regcache.from_options(self.build_option("cache_registry"), self.build_option("cache_readonly"))
        client = engine.connect()
        logs = self.state / "logs"
        results = []
        order = self.plan.order([name])
        if cache and not engine.image_id(client, tp.content_tag):   # a hit needs none of its prerequisites
            order = [name] if self.from_cache(client, cache, name) else order
        for dep in order:
            dp = self.plan.targets[dep]
            existing = engine.image_id(client, dp.content_tag)
            if not existing and cache and dep != name:
                existing = self.from_cache(client, cache, dep)
            if existing:
                repo, tag = dp.readable_tag.rsplit(":", 1)
                client.api.tag(existing, repo, tag)
                self.err.print(f"[green]up to date[/green] {dep}: {dp.content_tag} ({existing[7:19]})")
                results.append({"target": dep, "status": "from cache" if dep in self._cached else "up-to-date",
                                "image_id": existing})
                continue
            if self.build_option("check_disk"):
                self.check_disk(client, dep)
            if dp.bootstrap_stack:   # cheap when present; a removed base must come back before any FROM
                stack = self.plan.matrix.stacks[dp.bootstrap_stack]
                with self.err.status(f"bootstrapping base of {dp.bootstrap_stack}"):
                    bootstrap.ensure_base(client, dp.bootstrap_stack, stack, self.state / "work",
                                          lambda msg: _append(logs / f"base-{dp.bootstrap_stack}.log", msg))
            log_path = logs / f"{dep}.log"
            self.err.print(f"[bold]building[/bold] {dep} -> {dp.content_tag} (log: {log_path})", soft_wrap=True)
            with self.err.status(f"{dep}: starting") as status:
                def progress(step: str, _dep=dep, _status=status) -> None:
                    _status.update(f"{_dep}: {step[:100]}")
                    self.err.print(f"  {step[:160]}", highlight=False, markup=False, soft_wrap=True)

                extra = self.fetch_inputs(dp, ca)
                made: list[str] = []
                raw = engine.build(client, dp, log_path=log_path, ca_bundle=ca,
                                   progress=progress, extra_files=extra, made=made)
                try:
                    status.update(f"{dep}: normalising layers and config for a reproducible image ID")
                    image = self.normalise(client, dep, raw, [dp.content_tag, dp.readable_tag],
                                           progress=lambda msg, _dep=dep, _s=status: _s.update(f"{_dep}: {msg}"))
                except BaseException:
                    self.discard_raw(client, engine.raw_tag(dp),
                                     [m for m in made if m not in set(buildcache.recorded(self.state, dep))])
                    raise
                # Settling the cache (removing the previous one) and taking the inventory are independent.
                with ThreadPoolExecutor(max_workers=1) as pool:
                    settled = pool.submit(buildcache.settle, client, self.state, dep,
                                          engine.raw_tag(dp), made)
                    self.write_manifest(client, dep)
                    kept = settled.result()
            if cache and regcache.store(client, cache, dp, image, self.warn):
                self.err.print(f"  stored {dep} in the cache {cache.where.repository(dep)}", soft_wrap=True)
            self.err.print(f"[green]built[/green] {dep}: {image[7:19]} tags {dp.content_tag}, {dp.readable_tag}; "
                           f"manifest and SBOM in {self.state / 'artifacts' / dep}"
                           + (f"; build cache kept as {buildcache.REPO}/{dep}:last" if kept else ""), soft_wrap=True)
            results.append({"target": dep, "status": "built", "image_id": image})
        return results

    def build_option(self, name: str):
        return getattr(self.args, f"build_{name}", None) or getattr(self.args, name, None)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {message}", soft_wrap=True, highlight=False)

    def from_cache(self, client, cache, name: str) -> str | None:
        from . import engine, regcache, repro

        tp = self.plan.targets[name]
        epoch = repro.iso_time(self.plan.matrix.targets[name].source_date_epoch)
        with self.err.status(f"{name}: asking the cache {cache.where.host}"):
            image = regcache.fetch(client, cache, tp, engine.final_base(client, tp, fetch=False), epoch, self.warn)
        if image:
            self._cached.add(name)
            self.err.print(f"[green]from cache[/green] {name}: {cache.where.repository(name)}:content-"
                           f"{tp.content_hash[:12]}… ({image[7:19]}); no build step run", soft_wrap=True)
            self.write_manifest(client, name)
        return image

    def check_disk(self, client, name: str) -> None:
        from . import engine

        need = self.plan.matrix.runner_of(name).disk_gb
        free = engine.free_disk(client)
        if need and free and free[1] < need * 10**9:
            raise BuildError(f"building {name} needs about {need} GB free for the engine (matrix: runner.disk_gb of "
                             f"its stack); {free[0]} has {free[1] / 1e9:.1f} GB. Free space (`build.py clean`, "
                             "`docker system prune`) or use a runner with more disk")

    def cmd_build(self, name: str, ca: str | None) -> int:
        results = self.build(name, ca)
        from . import engine

        client = engine.connect()
        from rich.table import Table

        table = Table(title="build")
        table.add_column("target", no_wrap=True)
        for col in ("status", "image", "size"):
            table.add_column(col, no_wrap=True)
        for r in results:
            img = client.images.get(r["image_id"])
            table.add_row(r["target"], r["status"], r["image_id"][7:19], f"{img.attrs['Size'] / 1e9:.2f} GB")
        self.out.print(table)
        for r in results:      # whole references, one per line, to copy
            tp = self.plan.targets[r["target"]]
            self.out.print(f"{tp.content_tag}  {tp.readable_tag}", highlight=False, soft_wrap=True)
        return 0

    # -- test -----------------------------------------------------------------------------
    def cmd_test(self, target: str | None, image: str | None, junit: str | None, as_json: bool,
                 require_gpu: bool = False) -> int:
        from . import engine, verify

        if not target and not image:
            raise UserError("give --target TARGET or --image REF", field="test")
        if target:
            self.target(target)
        junit_path = Path(junit).resolve() if junit else None   # pytest runs in the checkout, not here
        if junit_path:
            writable_file(junit_path, "--junit", replaced=False)
        self.writable_state()
        if target and not image:    # its image exists only if it could be built
            self.buildable_target(target)
        client = engine.connect()
        by_target = bool(target and not image)
        if by_target:
            tp = self.target(target)
            image = tp.content_tag
            if engine.image_id(client, image) is None:
                raise UserError(f"target {target!r} is not built ({image} not found); run "
                                f"`python build.py build --target {target}` first", field="--target")
        elif engine.image_id(client, image) is None:
            raise UserError(f"image {image!r} not found on the engine", field="--image")
        with self.err.status(f"running suites in {image}"):
            report = verify.run_suites(client, image, target, self.matrix_path.resolve(),
                                       junit_path, require_gpu=require_gpu)
        stored = verify.record(self.state, report)
        if by_target:
            self.write_manifest(client, target)   # now with the suite results
        if as_json:
            print(json.dumps({k: v for k, v in report.items() if k != "log"}, indent=2))
        else:
            self.print_suites(report)
            self.err.print(f"results recorded: {stored}", soft_wrap=True)
        if not report["ok"] and not as_json:
            self.err.print("pytest output (tail):\n" + report["log"][-3000:], markup=False, highlight=False)
        return 0 if report["ok"] else 1

    def print_suites(self, report: dict) -> None:
        from rich.table import Table

        colour = {"passed": "green", "failed": "red", "not GPU-verified": "yellow", "not applicable": "dim"}
        table = Table(title=f"suites in {report['image']} ({report['image_id'][7:19]})")
        for col in ("suite", "result", "detail"):
            table.add_column(col, overflow="fold")
        for name, s in report["suites"].items():
            detail = s["detail"]
            if s["figures"]:
                detail += "\n" + json.dumps(s["figures"], sort_keys=True)
            table.add_row(name, f"[{colour.get(s['status'], 'white')}]{s['status']}[/]", detail)
        self.out.print(table)

    # -- parsers of saved outputs -------------------------------------------------------------
    def cmd_rocminfo(self, file: str, as_json: bool) -> int:
        from .inspect import rocminfo

        info = rocminfo.parse(rocminfo.read_saved(file))
        if as_json:
            print(json.dumps(info.to_json(), indent=2))
        else:
            print(rocminfo.format_table(info))
        return 0

    def cmd_archs(self, paths: list[str], as_json: bool) -> int:
        from .inspect import archs

        for p in paths:
            if not Path(p).exists():
                raise UserError("no such file or folder", file=p)
            try:
                why = archs.not_scannable(p)
            except OSError as exc:
                raise UserError(f"cannot read: {exc.strerror or exc}", file=p) from None
            if why:
                raise UserError(why, file=p)
        # A damaged file (cut short, corrupt, unreadable) is listed with what was found in it, and
        # the run ends with exit 2 naming it: its list of archs cannot be trusted to be complete.
        results = archs.scan_checked(paths)
        if as_json:
            print(json.dumps([r.to_json() for r in results], indent=2))
        else:
            for r in results:
                if r.archs or r.error:
                    print(f"{r.path}: {' '.join(r.archs) or '-'} ({r.kind}){'  ERROR: ' + r.error if r.error else ''}")
            if not any(r.archs for r in results):
                print("no GPU code found")
        damaged = [r for r in results if archs.damaged(r)]
        if damaged:
            more = f" (and {len(damaged) - 1} more damaged file(s), see their entries)" if len(damaged) > 1 else ""
            raise UserError(damaged[0].error + more, file=damaged[0].path)
        return 0


    # -- publish ------------------------------------------------------------------------------
    @property
    def record_dir(self) -> Path:
        return self.root / "published"

    def cmd_push(self, target: str, registry: str) -> int:
        from . import engine, publish

        self.target(target)
        writable_dir(self.record_dir, "publish records")
        self.buildable_target(target)
        client = engine.connect()
        with self.err.status(f"pushing {target} to {registry}"):
            rec = publish.push(client, self.plan, target, registry, state_dir=self.state, record_dir=self.record_dir)
        print(json.dumps(rec, indent=2, sort_keys=True))
        self.err.print(f"publish record: {self.record_dir / (target + '.json')}", soft_wrap=True)
        return 0

    def cmd_pull(self, target: str) -> int:
        from . import engine, publish

        publish.read_record(self.record_dir / f"{target}.json", target)   # a missing record needs no engine
        client = engine.connect()
        with self.err.status(f"pulling {target}"):
            rec = publish.pull(client, target, record_dir=self.record_dir)
        print(json.dumps(rec, indent=2, sort_keys=True))
        return 0


    def cmd_lock(self, targets: list[str] | None, check: bool, ca: str | None) -> int:
        from . import engine, lock, lockfile, render, report

        for t in targets or []:
            self.target(t)
        self.writable_state()
        if not check:
            writable_file(self.lock_path, None)
        old = lockfile.load(self.lock_path)
        m = self.plan.matrix
        client = engine.connect()
        work = self.state / "work"
        log = lambda msg: _append(self.state / "logs" / "lock.log", msg)  # noqa: E731
        if check:
            with self.err.status("checking matrix.lock against the matrix and the mirrors"):
                out = lock.check(client, m, old, targets=targets, work=work, log=log)
            report.save_check(self.state, "lock", {"targets": m.order(targets), "problems": list(out.problems)})
            for p in out.problems:
                print(f"stale: {p}")
            if out.problems:
                print(f"{len(out.problems)} stale or unavailable pin(s); fix matrix.yaml and run `python build.py lock`",
                      file=sys.stderr)
                return 1
            print(f"{self.lock_path.name}: every pin resolves ({', '.join(m.order(targets))})")
            return 0
        with self.err.status("resolving pins"):
            out = lock.resolve(client, m, old, targets=targets, work=work, ca_bundle=self.ca_bundle(ca), log=log)
        render._atomic_write(self.lock_path, lockfile.dump(out.lock).encode())
        for r in out.resolved:
            print(f"resolved: {r}")
        for f in out.failed:
            print(f"unresolved: {f}", file=sys.stderr)
        print(f"wrote {self.lock_path}; run `python build.py render` to apply it", file=sys.stderr)
        return 1 if out.failed else 0

    def fetch_inputs(self, tp, ca: Path | None) -> dict[str, bytes]:
        """Host-side inputs of a build: locked wheels and git sources, from the cache or fetched."""
        from . import fetch, lockfile

        lock = lockfile.load(self.lock_path)
        extra: dict[str, bytes] = {}
        try:
            for item in tp.fetches:
                if item[0] == "wheels":
                    _, comp, python = item
                    for fname, data in fetch.wheels_for(lock["python"][comp], python, self.state / "work", ca).items():
                        extra[f"wheels/{comp}/{fname}"] = data
                elif item[0] == "git":
                    _, comp, url, commit = item
                    for rel, data in fetch.source_tree(url, commit, self.state / "work").items():
                        extra[f"sources/{comp}/{rel}"] = data
        except fetch.FetchError as exc:
            raise BuildError(f"fetching the inputs of {tp.name} failed: {exc}") from None
        return extra

    def normalise(self, client, name: str, raw_ref: str, tags: list[str], progress=None) -> str:
        """Rewrite a classic-builder image so the same inputs give the same image ID."""
        from . import engine, repro

        epoch = self.plan.matrix.targets[name].source_date_epoch
        log = lambda msg: _append(self.state / "logs" / f"{name}.log", msg)  # noqa: E731
        return repro.normalise(client, raw_ref, epoch=epoch, tags=tags, workdir=self.state / "work", log=log,
                               base_ref=engine.final_base(client, self.plan.targets[name]), progress=progress)

    @staticmethod
    def discard_raw(client, raw_tag: str, made: list[str]) -> None:
        from . import engine

        try:
            client.api.remove_image(raw_tag, noprune=True)   # the tag; discard removes the images
        except Exception:  # noqa: BLE001 - never made, or already gone
            pass
        engine.discard(client, made)

    def cmd_verify_repro(self, name: str, as_json: bool, ca: str | None) -> int:
        import time

        from . import engine, repro

        self.target(name)
        self.writable_state()
        tp = self.buildable_target(name)    # before its prerequisites are built
        deps = self.plan.order([name])[:-1]
        for dep in deps:        # prerequisites are inputs: built (or up to date) once, as usual
            self.build(dep, ca)
        ca_path = self.ca_bundle(ca)
        client = engine.connect()
        ids, timings = [], []
        try:
            for run in ("a", "b"):
                tag = f"rocmforge-repro/{name}:{run}"
                started = time.monotonic()
                made: list[str] = []
                with self.err.status(f"verify-repro {name}: build {run} (no cache)") as status:
                    raw = engine.build(client, tp, log_path=self.state / "logs" / f"{name}.repro-{run}.log",
                                       ca_bundle=ca_path,
                                       progress=lambda step, _s=status: _s.update(f"build {run}: {step[:90]}"),
                                       extra_files=self.fetch_inputs(tp, ca_path), tag=tag + "-raw", nocache=True,
                                       made=made)
                    built = time.monotonic()
                    status.update(f"verify-repro {name}: normalising build {run}")
                    try:
                        ids.append(repro.normalise(
                            client, raw, epoch=self.plan.matrix.targets[name].source_date_epoch, tags=[tag],
                            workdir=self.state / "work", base_ref=engine.final_base(client, tp),
                            progress=lambda msg, _s=status, _r=run: _s.update(f"build {_r}: {msg}"),
                            log=lambda msg, _r=run: _append(self.state / "logs" / f"{name}.repro-{_r}.log", msg)))
                    finally:
                        self.discard_raw(client, tag + "-raw", made)
                timings.append({"build_s": round(built - started, 1), "normalise_s": round(time.monotonic() - built, 1)})
                self.err.print(f"build {run}: {ids[-1][7:19]} (build {timings[-1]['build_s']} s, "
                               f"normalise {timings[-1]['normalise_s']} s)")
                if run == "a":
                    time.sleep(1.5)   # the second build starts at a different second
            diff = None if ids[0] == ids[1] else repro.diff_images(client, ids[0], ids[1], self.state / "work")
        finally:
            for run in ("a", "b"):
                for suffix in ("", "-raw"):
                    try:
                        client.images.remove(f"rocmforge-repro/{name}:{run}{suffix}", force=True)
                    except Exception:  # not created or already removed
                        pass
        report = {"target": name, "identical": diff is None, "image_ids": ids, "timings": timings,
                  "difference": diff, "explanation": repro.describe(diff) if diff else None}
        from . import report as reports

        reports.save_check(self.state, f"repro-{name}", report)
        if as_json:
            print(json.dumps(report, indent=2, default=str))
        elif diff is None:
            print(f"identical: both builds of {name} gave {ids[0]}")
        else:
            print(f"DIFFERENT: {ids[0][7:19]} vs {ids[1][7:19]}: {report['explanation']}")
        return 0 if diff is None else 1

    def write_manifest(self, client, name: str) -> Path:
        from . import engine, lockfile, manifest, verify

        tp = self.target(name)
        image_id = client.images.get(tp.content_tag).id
        rec = verify.recorded(self.state, image_id)
        suites = {k: v["status"] for k, v in rec["suites"].items()} if rec else None
        inv = manifest.inventory(client, tp.content_tag)
        data = manifest.make_manifest(tp, image_id, inv, lockfile.load(self.lock_path), suites)
        data["source_revision"] = engine.git_revision(self.root) or None   # the checkout that last wrote it
        return manifest.write(self.state, data)

    def cmd_manifest(self, name: str) -> int:
        from . import engine

        self.target(name)
        self.writable_state()
        self.buildable_target(name)
        client = engine.connect()
        if engine.image_id(client, self.plan.targets[name].content_tag) is None:
            raise UserError(f"target {name!r} is not built; run `python build.py build --target {name}`", field="--target")
        folder = self.write_manifest(client, name)
        print(f"{folder / 'manifest.json'}\n{folder / 'sbom.cdx.json'}")
        return 0

    def cmd_clean(self, target: str | None, dry_run: bool = False) -> int:
        from . import engine, enginelock

        names = [target] if target else sorted(self.plan.targets)
        for n in names:
            self.target(n)
        if not dry_run:
            self.writable_state()
        client = engine.connect()
        with enginelock.exclusive() as alone:   # no build starts while we remove
            return self.clean(client, names, target, dry_run, alone)

    def clean(self, client, names: list[str], target: str | None, dry_run: bool, alone: bool) -> int:
        import shutil

        from . import buildcache, engine, enginelock

        cached = {i[:12] for n in names for i in buildcache.recorded(self.state, n)}
        kept = {i[:12] for n in self.plan.targets for i in buildcache.recorded(self.state, n)}
        found = engine.leftovers(client, names, [] if target else sorted(self.plan.matrix.stacks), cached, kept)
        if alone and not dry_run:
            found += [("leftover image", i, 0) for i in enginelock.take_pending()]
        elif not alone:
            # Untagged step images may be what a running build stands on: they wait for the last build out.
            waiting = [f for f in found if f[0] == "leftover image"]
            found = [f for f in found if f[0] != "leftover image"]
            if waiting:
                self.err.print(f"keeping {len(waiting)} untagged step image(s): another build is running on this engine")
        for kind, ref, size in found:
            print(f"{'would remove' if dry_run else 'remove'} {kind}: {ref} ({size / 1e9:.2f} GB)")
        if dry_run:
            print(f"{len(found)} item(s); nothing removed")
            return 0
        for kind, ref, _ in sorted(found, key=lambda f: f[0] != "container"):   # a container holds its image
            try:
                if kind == "container":
                    client.api.remove_container(ref, force=True)
                elif ref.startswith("sha256:"):
                    engine.discard(client, [ref])
                else:
                    client.api.remove_image(ref)
            except Exception as exc:  # noqa: BLE001 - one failure must not stop the rest; reported
                self.err.print(f"[yellow]could not remove {ref}: {exc}[/yellow]")
        for n in names:
            buildcache.forget(client, self.state, n)
        if not alone:   # a running build may be writing there
            print(f"removed {len(found)} item(s); the build logs are kept while another build runs")
            return 0
        shutil.rmtree(self.state / "logs", ignore_errors=True)
        shutil.rmtree(self.state / "work", ignore_errors=True)
        print(f"removed {len(found)} item(s) and the build logs")
        return 0

    def cmd_report(self, out: str | None, as_json: bool, markdown: str | None) -> int:
        from . import engine, lockfile, render, report

        out_dir = Path(out) if out else self.state / "report"
        writable_dir(out_dir, "--out" if out else "--state-dir")
        if markdown:
            writable_file(Path(markdown), "--markdown", replaced=False)
        try:
            client = engine.connect()
        except BuildError as exc:      # the page still shows the plan and the records, without images
            self.err.print(f"[yellow]warning:[/yellow] {exc}; images are shown as not built", soft_wrap=True)
            client = None
        rep = report.gather(self.plan, client, self.state, lockfile.load(self.lock_path), self.record_dir,
                            out_dir.resolve(), str(self.matrix_path))
        data = json.dumps(rep.to_json(), indent=2)
        try:
            for name, text in (("index.html", report.to_html(rep)), ("report.json", data + "\n")):
                render._atomic_write(out_dir / name, text.encode())
            if markdown:
                with open(markdown, "a", encoding="utf-8") as f:
                    f.write(report.to_markdown(rep))
        except OSError as exc:
            raise UserError(f"cannot write the report: {exc.strerror or exc} ({exc.filename or out_dir})",
                            field="--markdown" if markdown and exc.filename == markdown else "--out") from None
        if as_json:
            print(data)
        else:
            print(out_dir / "index.html")
        return 0

    # -- host -------------------------------------------------------------------------------
    def cmd_doctor(self, as_json: bool, rocminfo_file: str | None) -> int:
        from . import doctor

        report = doctor.run(plan=self.plan, rocminfo_file=rocminfo_file)
        print(json.dumps(report.to_json(), indent=2) if as_json else report.format_text())
        return report.exit_code

    def cmd_run(self, target: str, dry_run: bool, cmd: list[str]) -> int:
        import shutil
        import subprocess

        from . import doctor, engine, runcmd
        from .container import host_gpu_access

        tp = self.target(target)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        client = engine.connect()
        image = next((ref for ref in (tp.content_tag, tp.readable_tag) if engine.image_id(client, ref)), None)
        if image is None:
            raise UserError(f"target {target!r} is neither built nor pulled; run `python build.py build --target "
                            f"{target}` or `python build.py pull --target {target}`", field="--target")
        gpu = host_gpu_access()
        env = doctor.run(plan=self.plan, client=client).env_for(target) if gpu.present else {}
        docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
        argv = runcmd.docker_run_argv(image, gpu, env, cmd, interactive=sys.stdin.isatty() and sys.stdout.isatty(),
                                      docker=docker)
        if not gpu.present:
            print("note: no /dev/kfd on this host: the container runs WITHOUT a GPU", file=sys.stderr)
        if dry_run:
            print(runcmd.shell_line(["docker"] + argv[1:]))
            return 0
        return subprocess.call(argv)


def writable_dir(path: Path, field: str | None, shown: Path | None = None) -> None:
    """Refuse, before any work, a folder that cannot be made or written: a file in the way, /proc, a
    read-only mount. Root ignores permission bits, so only creating something there tells."""
    shown = shown or path
    existing = path.absolute()
    while not existing.exists():
        if existing.is_symlink():
            raise UserError(f"{existing} is a symbolic link to nothing", file=str(shown), field=field)
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{existing} is a file, not a folder", file=str(shown), field=field)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rocmforge-probe-", dir=existing))
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:     # a full disk is the machine's state, not a wrong path
            raise BuildError(f"{shown}: cannot create anything in {existing}: {exc.strerror}") from None
        raise UserError(f"cannot create anything in {existing}: {exc.strerror}", file=str(shown),
                        field=field) from None


def writable_file(path: Path, field: str | None, replaced: bool = True) -> None:
    """replaced: the file is written beside itself and renamed over (its folder must take new files);
    otherwise it is opened in place, and an existing one needs only to take appends."""
    if path.is_dir():
        raise UserError("is a folder, not a file", file=str(path), field=field)
    if replaced or not path.exists():
        writable_dir(path.parent, field, shown=path)
        return
    try:
        open(path, "ab").close()
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", file=str(path), field=field) from None


# Errors of the machine rather than of a path the user named: reported like a failed build (exit 1).
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE}


def os_error_exit(exc: OSError) -> int:
    """The last resort for an OSError no check foresaw: one line naming the path and the reason."""
    where = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{where} -> {exc.filename2}"
    reason = exc.strerror or str(exc) or type(exc).__name__
    line = f"{where}: {reason}" if where else reason
    print("error: " + " ".join(line.split()), file=sys.stderr)
    return 1 if exc.errno in MACHINE_ERRNOS or exc.filename is None else 2


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        app = App(args)
        if args.command == "list":
            return app.cmd_list()
        if args.command == "render":
            return app.cmd_render()
        if args.command == "build":
            return app.cmd_build(args.build_target, args.build_ca_bundle or args.ca_bundle)
        if args.command == "test":
            return app.cmd_test(args.test_target, args.image, args.junit, args.json, args.require_gpu)
        if args.command == "rocminfo":
            return app.cmd_rocminfo(args.file, args.json)
        if args.command == "push":
            return app.cmd_push(args.push_target, args.registry)
        if args.command == "pull":
            return app.cmd_pull(args.pull_target)
        if args.command == "doctor":
            return app.cmd_doctor(args.json, args.rocminfo)
        if args.command == "run":
            return app.cmd_run(args.run_target, args.dry_run, args.cmd)
        if args.command == "lock":
            return app.cmd_lock(args.lock_targets, args.check, args.ca_bundle)
        if args.command == "verify-repro":
            return app.cmd_verify_repro(args.repro_target, args.json, args.ca_bundle)
        if args.command == "manifest":
            return app.cmd_manifest(args.manifest_target)
        if args.command == "report":
            return app.cmd_report(args.report_out, args.json, args.markdown)
        if args.command == "clean":
            return app.cmd_clean(args.clean_target, args.clean_dry_run)
        if args.command == "archs":
            return app.cmd_archs(args.paths, args.json)
        if args.target:
            built = app.cmd_build(args.target, args.ca_bundle)
            return built or app.cmd_test(args.target, None, None, False)
        _parser().print_help()
        return 2
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:        # `build.py list --json | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except OSError as exc:         # requests' and most of docker's errors are OSErrors too
        return os_error_exit(exc)
    except Exception as exc:
        if not type(exc).__module__.startswith("docker."):
            raise              # a bug of ours: the traceback is what a report needs
        print("error: Docker engine: " + " ".join(str(exc).split()), file=sys.stderr)
        return 1
