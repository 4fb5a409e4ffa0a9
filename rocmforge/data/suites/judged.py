"""What the suites' probes run on, chosen from outside the image: the probe files as the host holds
them (hashed here), the interpreter copied in (rocmforge/verify/outside/judge), and the image's own
Python by absolute path for the checks whose subject it is (torch, the workload)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rocmforge.host.container import TrackedContainer
from rocmforge.resolve.image_packages import expected_packages
from rocmforge.shared import packagedata
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.verify.outside.judge import Judge, for_image

PROBES_IN_CONTAINER = "/tmp/rocmforge-probes"


def probe_container(request, client, image_ref: str, gpu, judge: Judge | None = None) -> TrackedContainer:
    """A container of image_ref that the session removes, with the probes copied in (and, given a
    judge, its interpreter: every probe command's "python3" runs on it)."""
    tc = TrackedContainer(client, image_ref, gpu=gpu)
    if request.config.getoption("--session-id"):
        tc.session = request.config.getoption("--session-id")
    if judge is not None:
        tc.probe_python, tc.setup_tar = judge.python, judge.tar
    tc.start()
    request.addfinalizer(tc.remove)
    tc.put_tree(PROBES_IN_CONTAINER.removeprefix("/tmp/"), probe_files(request.config.getoption("--matrix")))
    return tc


def judge_for(loaded_plan, matrix, target_name: str | None, target) -> Judge:
    """The judge for an image of target (the image's own /usr/bin/python3 when the target is not
    known or its stack's packages are not Debian's)."""
    suite = None
    packages: dict[str, str] = {}
    locked: dict[str, str] = {}
    if target is not None and not isinstance(loaded_plan, UserError):
        boot = matrix.stacks[target.stack].base.bootstrap
        suite = boot.suite if boot else None
        packages = expected_packages(loaded_plan.lock, matrix, target_name).packages
        locked = loaded_plan.lock.debs.get(target.stack, {})
    try:
        return for_image(suite, packages, locked)
    except BuildError as exc:
        pytest.fail(f"the probes' interpreter cannot be had from outside the image: {exc}", pytrace=False)


def image_python_path(attrs: dict, container) -> str:
    """The image's own python3 by absolute path: the first folder of its configured PATH that holds
    one, looked up through the engine's archive API (no program in the image chooses)."""
    env = (attrs.get("Config") or {}).get("Env") or []
    path = next((e[5:] for e in env if e.startswith("PATH=")), "/usr/local/bin:/usr/bin:/bin")
    for folder in path.split(":"):
        if folder.startswith("/") and container.exists(f"{folder.rstrip('/')}/python3"):
            return f"{folder.rstrip('/')}/python3"
    return "/usr/bin/python3"


def probe_files(matrix_path: str) -> dict[str, bytes]:
    """The probes as the host holds them (a project's own probes/ beside its matrix, else the
    package's): these bytes are what runs, and probes_sha256 names them in the report."""
    probes = packagedata.folder(Path(matrix_path).resolve().parent, "probes")
    return {p.name: p.read_bytes() for p in sorted(probes.iterdir()) if p.is_file()}


def probes_sha256(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        h.update(f"{name}\0{len(data)}\0".encode() + data)
    return h.hexdigest()
