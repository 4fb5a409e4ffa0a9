#!/usr/bin/env python3
"""What a build costs beside what the target adds, printed as ratios against baselines run here:
 (a) a target adding one small file on hip-devel: our `build` against `docker save` of hip-devel
     (what normalising the whole image once cost at least; goal <= 0.5);
 (b) hip-python after a one-line requirements change: our `build` against `docker build` of the
     same rendered Dockerfile and context with the builder cache warm (goal <= 1.5);
 (c) (a) and (b) for a target on a registry base: hip-devel pushed to a local registry under an
     upstream-style name, our `build` against `docker save` of that base and against a warm
     `docker build`.
Needs the engine, hip-devel and hip-python built, and Debian's docker-registry for (c). Every run
uses fresh scratch targets and removes what it made."""

from __future__ import annotations

import io
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

from rocmforge.build import engine  # noqa: E402
from rocmforge.host import engineinfo
from rocmforge.resolve import lockfile
from rocmforge.workflow.pipeline import Pipeline  # noqa: E402
from rocmforge.render.plan import load_plan  # noqa: E402
from rocmforge.workflow.project import Project  # noqa: E402
from tests import local_registry  # noqa: E402
from tests.conftest import copy_project  # noqa: E402

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
MARK = "COPY probes/ /opt/rocmforge/probes/"


def timed(cmd: list[str], env: dict | None = None) -> float:
    import os

    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def cli(matrix: Path, *args: str, env: dict | None = None) -> float:
    return timed([sys.executable, "build.py", "--matrix", str(matrix), "--state-dir", str(matrix.parent / "state"),
                  *args], env)


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
    data["targets"][name] = {"description": "one small file on its base", "version": "1", "archs": ["gfx90a"],
                             "source_date_epoch": 1764547200, **fields}


def inject(matrix: Path, name: str, step: str) -> None:
    tpl = matrix.parent / "templates" / "Dockerfile.j2"
    tpl.write_text(tpl.read_text().replace(MARK, MARK + f"\n{{% if name == '{name}' %}}{step}\n{{% endif %}}"))


def warm_docker_build(matrix: Path, target: str, change) -> float:
    """Builds the target's rendered context with plain `docker build` (cache warm), applies
    change(matrix) and times `docker build` of the changed context. Removes what it made."""
    client = engine.connect()
    made: list[str] = []

    def context():   # the same files `build.py context` writes
        return engine.context_tar(Pipeline(Project(matrix, matrix.parent / "state")).context(target), None)

    def build(ctx) -> float:
        t0 = time.perf_counter()
        for chunk in client.api.build(fileobj=ctx, custom_context=True, rm=True, pull=False, decode=True):
            if "error" in chunk:
                raise SystemExit(f"docker build failed: {chunk['error']}")
            for line in chunk.get("stream", "").splitlines():
                if engine.STEP_IMAGE_RE.match(line):
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
        cli(matrix, "clean", "--target", name)
    return ours, docker_save(load_plan(ROOT / "matrix.yaml").targets["hip-devel"].content_tag)


def case_b(tmp: Path) -> tuple[float, float]:
    """Both sides have built hip-python once before the change: ours the previous edit (the build
    cache a target keeps is the last build's), docker the unchanged context."""
    from rocmforge.build import buildcache

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
        timed([sys.executable, "build.py", "build", "--target", "hip-python"])   # its readable tag back home
    baseline_dir = tmp / "baseline"
    baseline_dir.mkdir()
    return ours, warm_docker_build(scratch(baseline_dir, lambda d: None), "hip-python", one_line_requirements_change)


def case_c(tmp: Path) -> tuple[float, float, float, float]:
    client = engine.connect()
    devel = load_plan(ROOT / "matrix.yaml").targets["hip-devel"].content_tag
    name, stack = f"small-{uuid.uuid4().hex[:8]}", f"registry-{uuid.uuid4().hex[:8]}"
    with local_registry.serve() as host:
        repo, tag = f"{host}/bench/hip-devel", name
        client.images.get(devel).tag(repo, tag)
        digest = None
        for chunk in client.images.push(repo, tag, stream=True, decode=True):
            digest = (chunk.get("aux") or {}).get("Digest", digest)
        client.images.remove(f"{repo}:{tag}")

        def edit(d):
            debian = d["stacks"]["debian13-rocm5.7"]
            d["stacks"][stack] = {"description": "hip-devel served by a registry", "os": "debian13",
                                  "rocm": debian["rocm"], "python": debian["python"],
                                  "base": {"registry": {"image": f"{host}/bench/hip-devel", "tag": tag,
                                                        "digest": digest}},
                                  "gpu_libraries": debian["gpu_libraries"]}
            small_file_target(d, name, stack=stack)

        matrix = scratch(tmp, edit)
        inject(matrix, name, f"RUN echo {name} > /opt/small")
        base_ref = f"{host}/bench/hip-devel@{digest}"
        try:
            ours = cli(matrix, "build", "--target", name)
            save = docker_save(base_ref)
            inject(matrix, name, f"RUN echo {uuid.uuid4().hex} > /opt/changed")   # ours, rebuilt with its cache warm
            rebuilt = cli(matrix, "build", "--target", name)
            baseline = tmp / "baseline"
            baseline.mkdir()
            other = scratch(baseline, edit)
            inject(other, name, f"RUN echo {name} > /opt/small")
            warm = warm_docker_build(other, name, lambda m: inject(m, name, f"RUN echo {uuid.uuid4().hex} > /opt/changed"))
        finally:
            cli(matrix, "clean", "--target", name)
            subprocess.run([DOCKER, "rmi", base_ref], capture_output=True)
    return ours, save, rebuilt, warm


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("a", "b", "c"), action="append",
                        help="run only these cases (repeatable); (a) needs only hip-devel")
    cases = set(parser.parse_args().only or ("a", "b", "c"))
    print(f"engine: {engineinfo.of(engine.connect()).describe()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-normalise-"))
    a_ours = b_ours = c_ours = None
    try:
        if "a" in cases:
            a_ours, a_save = case_a(tmp / "a")
        if "b" in cases:
            b_ours, b_docker = case_b(tmp / "b")
        try:
            if "c" in cases:
                c_ours, c_save, c_rebuilt, c_docker = case_c(tmp / "c")
        except local_registry.RegistryUnavailable as exc:
            c_ours = None
            print(f"(c) skipped: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'case':58} {'ours':>8} {'baseline':>9} {'ratio':>6} {'goal':>6}")
    if a_ours is not None:
        print(f"{'(a) one small file on hip-devel vs docker save hip-devel':58} {a_ours:7.1f}s {a_save:8.1f}s "
              f"{a_ours / a_save:6.2f} {'<=0.5':>6}")
    if b_ours is not None:
        print(f"{'(b) hip-python, one-line requirements change vs warm build':58} {b_ours:7.1f}s {b_docker:8.1f}s "
              f"{b_ours / b_docker:6.2f} {'<=1.5':>6}")
    if c_ours is not None:
        print(f"{'(c) one small file on a registry base vs docker save base':58} {c_ours:7.1f}s {c_save:8.1f}s "
              f"{c_ours / c_save:6.2f} {'<=0.5':>6}")
        print(f"{'(c) on a registry base, one step changed vs warm build':58} {c_rebuilt:7.1f}s {c_docker:8.1f}s "
              f"{c_rebuilt / c_docker:6.2f} {'<=1.5':>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
