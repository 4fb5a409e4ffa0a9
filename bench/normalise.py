#!/usr/bin/env python3
"""What a build costs beside what the target adds, printed as ratios against baselines run here:
 (a) a target adding one small file on hip-devel: our `build` against `docker save` of hip-devel
     (what normalising the whole image once cost at least; goal <= 0.5);
 (b) hip-python after a one-line requirements change: our `build` against `docker build` of the
     same rendered Dockerfile and context with the builder cache warm (goal <= 1.5);
 (c) (a) and (b) for a target on a registry base: hip-devel pushed to a local registry under an
     upstream-style name, our `build` against `docker save` of that base and against a warm
     `docker build`.
Needs the engine and Debian's docker-registry for (c); hip-devel, hip-runtime and hip-python are built
first where missing. Every run uses fresh scratch targets and removes what it made; each build's
normalise is printed in pieces from its log (where it read the layers, read and rewrite, load, the
bytes sent back).

--engine NAME (repeatable; `all` = every one): `host` is the engine DOCKER_HOST names; the others
are the engines of tests/engine_host.py, each started in a container on the host engine, the
targets built on it, the cases and their baselines run against it, and it is removed afterwards.
On the containerd store and podman the cases run twice: with the store visible (read directly)
and as a remote engine (the docker save fallback)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocmforge.assemble import buildstream, engine  # noqa: E402
from rocmforge.render.plan import load_plan  # noqa: E402
from rocmforge.resolve import lockfile  # noqa: E402
from rocmforge.workflow.pipeline import Pipeline  # noqa: E402
from rocmforge.workflow.project import Project  # noqa: E402
from tests import engine_host, local_registry, observed  # noqa: E402
from tests.conftest import copy_project  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
MARK = "COPY probes/ /opt/rocmforge/probes/"


def timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def cli(matrix: Path, *args: str, env: dict | None = None) -> float:
    return timed(
        [sys.executable, "build.py", "--matrix", str(matrix), "--state-dir", str(matrix.parent / "state"), *args], env
    )


def docker_save(ref: str) -> float:
    t0 = time.perf_counter()
    with subprocess.Popen([DOCKER, "save", ref], stdout=subprocess.PIPE) as proc:
        for _ in iter(lambda: proc.stdout.read(1 << 20), b""):
            pass
    return time.perf_counter() - t0


def scratch(tmp: Path, edit) -> Path:
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    edit(data)
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return matrix


def small_file_target(data: dict, name: str, **fields) -> None:
    data["targets"][name] = {
        "description": "one small file on its base",
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
        **fields,
    }


def inject(matrix: Path, name: str, step: str) -> None:
    tpl = matrix.parent / "templates" / "Dockerfile.j2"
    tpl.write_text(tpl.read_text().replace(MARK, MARK + f"\n{{% if name == '{name}' %}}{step}\n{{% endif %}}"))


def warm_docker_build(matrix: Path, target: str, change) -> float:
    """Builds the target's rendered context with plain `docker build` (cache warm), applies
    change(matrix) and times `docker build` of the changed context. Removes what it made."""
    client = observed.connect()  # the bench drives the engine itself, as a user would
    made: list[str] = []

    def context():  # the same files `build.py context` writes
        return buildstream.context_tar(Pipeline(Project(matrix, matrix.parent / "state")).context(target), None)

    def build(ctx) -> float:
        t0 = time.perf_counter()
        for chunk in client.api.build(fileobj=ctx, custom_context=True, rm=True, pull=False, decode=True):
            if "error" in chunk:
                raise SystemExit(f"docker build failed: {chunk['error']}")
            for line in chunk.get("stream", "").splitlines():
                if buildstream.STEP_IMAGE_RE.match(line):
                    made.append(line.split()[-1])
        return time.perf_counter() - t0

    try:
        build(context())
        change(matrix)
        return build(context())
    finally:
        engine.discard(client, made)


def one_line_requirements_change(matrix: Path) -> None:
    """numpy's line in the hashed requirements gains another accepted hash (never seen before, so
    no earlier run's cache applies): pip runs again."""
    lock_path = matrix.with_suffix(".lock")
    lock = lockfile.load(lock_path)
    lock.python["numpy-env"]["numpy"].sha256.append(uuid.uuid4().hex * 2)
    lock_path.write_text(lockfile.dump(lock))


def case_a(tmp: Path) -> tuple[float, float]:
    name = f"small-{uuid.uuid4().hex[:8]}"
    matrix = scratch(tmp, lambda d: small_file_target(d, name, stack="debian13-rocm5.7", from_target="hip-devel"))
    inject(matrix, name, f"RUN echo {name} > /opt/small")
    try:
        ours = cli(matrix, "build", "--target", name)
    finally:
        keep_log(matrix, name, tmp)
        cli(matrix, "clean", "--target", name)
    return ours, docker_save(load_plan(ROOT / "matrix.yaml").targets["hip-devel"].content_tag)


def keep_log(matrix: Path, name: str, tmp: Path) -> None:
    """The build log, kept where run_cases reads each build's pieces (clean removes the state's)."""
    log = matrix.parent / "state" / "logs" / f"{name}.log"
    if log.exists():
        (tmp / "kept" / "logs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, tmp / "kept" / "logs" / log.name)


def case_b(tmp: Path, home: bool) -> tuple[float, float]:
    """Both sides have built hip-python once before the change: ours the previous edit (the build
    cache a target keeps is the last build's), docker the unchanged context. home: the host's
    engine, whose readable hip-python tag is put back (the other engines are thrown away)."""
    from rocmforge.assemble import buildcache

    matrix = scratch(tmp, lambda d: None)
    tags = []
    try:
        for _ in range(2):
            one_line_requirements_change(matrix)
            tags.append(load_plan(matrix).targets["hip-python"].content_tag)
            ours = cli(matrix, "build", "--target", "hip-python")
    finally:
        for tag in tags:
            subprocess.run([DOCKER, "rmi", tag], capture_output=True)
        buildcache.forget(engine.connect(), matrix.parent / "state", "hip-python")
        if home:
            timed([sys.executable, "build.py", "build", "--target", "hip-python"])  # its readable tag back home
    baseline_dir = tmp / "baseline"
    baseline_dir.mkdir()
    return ours, warm_docker_build(scratch(baseline_dir, lambda d: None), "hip-python", one_line_requirements_change)


def case_c(tmp: Path, where: dict) -> tuple[float, float, float, float]:
    """where: serve()'s host and port, so the engine reaches the registry (an engine in a container
    reaches the host at its bridge gateway)."""
    from rocmforge.release import publish

    client = observed.connect()
    devel = load_plan(ROOT / "matrix.yaml").targets["hip-devel"].content_tag
    name, stack = f"small-{uuid.uuid4().hex[:8]}", f"registry-{uuid.uuid4().hex[:8]}"
    with local_registry.serve(**where) as host:
        repo, tag = f"{host}/bench/hip-devel", name
        client.images.get(devel).tag(repo, tag)
        digest = publish.push_one(client, repo, tag)  # the containerd store's stream names no digest
        client.images.remove(f"{repo}:{tag}")

        def edit(d):
            debian = d["stacks"]["debian13-rocm5.7"]
            d["stacks"][stack] = {
                "description": "hip-devel served by a registry",
                "os": "debian13",
                "rocm": debian["rocm"],
                "python": debian["python"],
                "base": {"registry": {"image": f"{host}/bench/hip-devel", "tag": tag, "digest": digest}},
                "apt_sources": {"keep": True},  # our own image: its lists answer
                "gpu_libraries": debian["gpu_libraries"],
            }
            small_file_target(d, name, stack=stack)

        matrix = scratch(tmp, edit)
        inject(matrix, name, f"RUN echo {name} > /opt/small")
        base_ref = f"{host}/bench/hip-devel@{digest}"
        try:
            ours = cli(matrix, "build", "--target", name)
            save = docker_save(base_ref)
            inject(matrix, name, f"RUN echo {uuid.uuid4().hex} > /opt/changed")  # ours, rebuilt with its cache warm
            rebuilt = cli(matrix, "build", "--target", name)
            baseline = tmp / "baseline"
            baseline.mkdir()
            other = scratch(baseline, edit)
            inject(other, name, f"RUN echo {name} > /opt/small")
            warm = warm_docker_build(
                other, name, lambda m: inject(m, name, f"RUN echo {uuid.uuid4().hex} > /opt/changed")
            )
        finally:
            keep_log(matrix, name, tmp)
            cli(matrix, "clean", "--target", name)
            subprocess.run([DOCKER, "rmi", base_ref], capture_output=True)
    return ours, save, rebuilt, warm


ENGINE_KEYS = ("DOCKER_HOST", engine_host.ENGINE_ROOT_ENV)


@contextlib.contextmanager
def pointed_at(env: dict | None):
    """Everything this process and its children do (engine.connect, the docker CLI, build.py) goes
    to the engine env names: the cases need no client or env passed around. None: as it was."""
    saved = {k: os.environ.get(k) for k in ENGINE_KEYS}
    if env is not None:
        for k in ENGINE_KEYS:  # an absent ROCMFORGE_ENGINE_ROOT is what makes an engine remote
            os.environ.pop(k, None)
        os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ensure_targets(cases: set[str], tmp: Path) -> str:
    """Builds on the current engine what the cases start from (a no-op where it is there)."""
    target = "hip-python" if "b" in cases else "hip-devel"  # hip-python's chain holds hip-devel
    took = cli(copy_project(tmp), "build", "--target", target)
    return f"{target} and its prerequisites present on this engine ({took:.0f} s to build or find)"


def run_cases(cases: set[str], tmp: Path, registry: dict) -> None:
    """The cases on the engine os.environ names; prints each row as soon as it is measured."""
    tmp.mkdir(parents=True)
    print(ensure_targets(cases, tmp / "targets"), flush=True)
    print(f"{'case':58} {'ours':>8} {'baseline':>9} {'ratio':>6} {'goal':>6}", flush=True)

    def row(text: str, ours: float, baseline: float, goal: str) -> None:
        print(f"{text:58} {ours:7.1f}s {baseline:8.1f}s {ours / baseline:6.2f} {goal:>6}", flush=True)

    if "a" in cases:
        row("(a) one small file on hip-devel vs docker save hip-devel", *case_a(tmp / "a"), "<=0.5")
    if "b" in cases:
        row(
            "(b) hip-python, one-line requirements change vs warm build", *case_b(tmp / "b", home=not registry), "<=1.5"
        )
    if "c" in cases:
        try:
            c_ours, c_save, c_rebuilt, c_docker = case_c(tmp / "c", registry)
            row("(c) one small file on a registry base vs docker save base", c_ours, c_save, "<=0.5")
            row("(c) on a registry base, one step changed vs warm build", c_rebuilt, c_docker, "<=1.5")
        except local_registry.RegistryUnavailable as exc:
            print(f"(c) skipped: {exc}")
        except (Exception, SystemExit) as exc:  # optional: a registry base on an engine in a container
            if not registry:
                raise
            print(f"(c) skipped on this engine (optional here), it failed: {str(exc)[-1500:]}")
    # each build's normalise in pieces: where it read the layers from (the fast path or the
    # fallback), the seconds to read and rewrite them and to load the result, the bytes sent back
    pieces = (
        r"(?:, ([\d,]+) bytes sent)? \(.*?read ([\d,]+ MB from the [\w ]+?); "
        r"read\+rewrite ([\d.]+s), load ([\d.]+s)"
    )
    for log in sorted(tmp.rglob("logs/*.log")):
        for sent, read, rewrite, load in re.findall(pieces, log.read_text(errors="replace")):
            back = f", {sent} bytes sent back" if sent else ""
            where = f"{log.relative_to(tmp).parts[0]}/{log.stem}"
            print(f"  {where}: read {read}, read+rewrite {rewrite}, load {load}{back}")
    sys.stdout.flush()


def bench_engine(name: str, cases: set[str], tmp: Path) -> None:
    if name == "host":
        print(f"== engine host: {engine.connect().described.describe()}", flush=True)
        run_cases(cases, tmp / "host", {})
        return
    host_client = observed.connect()  # before pointed_at: the inner engine runs on the host's
    with engine_host.running(host_client, name, workdir=tmp) as inner:
        registry = {"host": inner.gateway, "port": inner.registry_port}
        modes = [("store visible", inner.env())]
        if inner.containerd_snapshotter or engine_host.ENGINES[name].kind == "podman":  # then as a remote engine
            modes.append(("store not visible: the docker save fallback", inner.env(store_visible=False)))
        for i, (mode, env) in enumerate(modes):
            with pointed_at(env):
                print(
                    f"== engine {name}: {engine.connect().described.describe()}; {mode} "
                    f"({', '.join(f'{k}={v}' for k, v in env.items())})",
                    flush=True,
                )
                run_cases(cases, tmp / f"mode{i}", registry)


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        choices=("a", "b", "c"),
        action="append",
        help="run only these cases (repeatable); (a) needs only hip-devel",
    )
    names = ("host", *engine_host.ENGINES)
    parser.add_argument(
        "--engine",
        choices=(*names, "all"),
        action="append",
        help="run on this engine (repeatable; default host; all: every one)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each engine's scratch folder (matrices, state, build logs) and say where",
    )
    args = parser.parse_args()
    cases = set(args.only or ("a", "b", "c"))
    chosen = names if "all" in (args.engine or ()) else tuple(dict.fromkeys(args.engine or ("host",)))
    failed = []
    for name in chosen:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-normalise-{name}-"))
        started = time.perf_counter()
        try:
            bench_engine(name, cases, tmp)
        except (Exception, SystemExit) as exc:  # the other engines still run
            failed.append(name)
            print(f"!! engine {name} failed: {type(exc).__name__}: {exc}", flush=True)
        finally:
            if args.keep:
                print(f"-- kept {tmp}", flush=True)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"-- engine {name}: {time.perf_counter() - started:.0f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
