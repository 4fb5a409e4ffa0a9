"""Faults made real against the engine, and what rocmforge does about each:

- a wheel in the content-addressed cache corrupted on disk: caught by its sha256, never built
  with; fetched again, or the build is refused naming the file and both digests;
- the registry dying in the middle of a push: one error, no publish record, no temporary tag;
  once it is back, the same push completes;
- Ctrl-C (SIGINT to the process group, as a terminal sends it) while bootstrapping, while running
  the suites and while pushing, and SIGTERM while running the suites (to the group, as `timeout`
  sends it, or to the CLI alone, as `docker stop` does), while pushing and while locking: exit 130
  or 143, and no tag, container, process, temporary directory or mount is left (a build and a
  normalisation interrupted: tests/integration/test_build_leftovers.py);
- a full filesystem under the state directory: one line naming the path, nothing half-written,
  and the next run with room works;
- two builds of one target at once: both succeed with the same image ID, nothing left behind."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml

from rocmforge.host import fetch
from rocmforge.host.container import TEST_LABEL
from rocmforge.render.plan import load_plan
from rocmforge.resolve import lockfile
from rocmforge.resolve.lockmodel import PythonFile
from rocmforge.shared import processes
from rocmforge.verify import suites as suite_runs
from tests import local_registry
from tests.conftest import BUILD_PY, interruptible, run_cli
from tests.integration.conftest import _need
from tests.integration.test_build_leftovers import (
    STACK,
    assert_nothing_left,
    base,  # noqa: F401  (a fixture: the trixie base)
    cache_images,  # noqa: F401
    engine_state,
    project,
)

pytestmark = pytest.mark.docker


def cli_args(matrix: Path, state: Path, *args: str) -> list[str]:
    return [sys.executable, str(BUILD_PY), "--matrix", str(matrix), "--state-dir", str(state), *args]


def start(matrix: Path, state: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """The CLI in a session of its own, so a SIGINT to its group reaches it and its children as a
    terminal's Ctrl-C does."""
    return subprocess.Popen(
        cli_args(matrix, state, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        preexec_fn=interruptible,
    )


def interrupt_when(
    proc: subprocess.Popen, ready, what: str, sig: int = signal.SIGINT, group: bool = True
) -> tuple[int, str, str]:
    """Ctrl-C (or `sig`) once `ready()` holds; returns (exit code, stdout, stderr). group: to the
    process group, as a terminal, `timeout` and systemd send it; else to the CLI alone, as
    `docker stop` does to a container's first process."""
    try:
        while not ready():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"the command ended before {what}: exit {proc.returncode}\n{out}\n{err[-3000:]}")
            time.sleep(0.2)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


def group_gone(proc: subprocess.Popen, grace: float = 10.0) -> bool:
    """No process of the CLI's group (its children: the suites' pytest processes) outlives it."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def stopped_message(sig: int) -> str:
    return "interrupted" if sig == signal.SIGINT else f"interrupted by {signal.Signals(sig).name}"


def assert_one_error_line(err: str, *needles: str) -> None:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in err, err


def mounts_under(path: Path) -> list[str]:
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
    prefix = str(path.resolve())
    return [m for m in out.splitlines() if m == prefix or m.startswith(prefix + "/")]


def remove_tags(client, repo: str) -> None:
    for img in client.api.images(name=repo):
        for ref in img.get("RepoTags") or []:
            if ref.rsplit(":", 1)[0] == repo:
                client.api.remove_image(ref)


def built(client, matrix: Path, state: Path, name: str) -> str:
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return client.api.inspect_image(load_plan(matrix).targets[name].content_tag)["Id"]


def passed(state: Path, image_id: str, name: str, matrix: Path) -> None:
    """The suite record push requires, as `build.py test` writes it for an image that passed: judged
    against this target, its content hash, this matrix and its lock."""
    judged = suite_runs.judged_against(matrix, name, load_plan(matrix).targets[name].content_hash)
    suite_runs.record(
        state,
        suite_runs.SuitesReport.from_json(
            {
                "image": image_id,
                "image_id": image_id,
                "target": name,
                "pytest_exit": 0,
                "ok": True,
                "suites": {"linkage": {"status": "passed"}},
                "tests": [],
                **dataclasses.asdict(judged),
            }
        ),
    )


def forget(client, matrix: Path, state: Path, name: str) -> None:
    remove_tags(client, f"rocmforge/{name}")
    run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)


# -- 1. a corrupt wheel in the cache ------------------------------------------------------------
def tiny_wheel(folder: Path, name: str = "rftiny", version: str = "1.0") -> Path:
    """A minimal valid pure-Python wheel."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rocmforge-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for rel, data in files.items():
            z.writestr(rel, data)
        z.writestr(f"{info}/RECORD", "".join(f"{rel},,\n" for rel in files) + f"{info}/RECORD,,\n")
    return path


@pytest.fixture
def wheel_index(tmp_path):
    """A PEP 503 index on 127.0.0.1 serving one small wheel: (index URL, wheel path)."""
    root = tmp_path / "index"
    wheel = tiny_wheel(tmp_path)
    (root / "simple" / "rftiny").mkdir(parents=True)
    (root / "simple" / "rftiny" / wheel.name).write_bytes(wheel.read_bytes())
    (root / "simple" / "rftiny" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", wheel
    server.shutdown()


def test_corrupt_cached_wheel_is_fetched_again(tmp_path, wheel_index, monkeypatch):
    index, wheel = wheel_index
    monkeypatch.setenv("PIP_INDEX_URL", index)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    locked = {"rftiny": PythonFile(version="1.0", file=wheel.name, sha256=[digest])}
    work = tmp_path / "work"
    cached = fetch.cache_dir(work) / digest
    cached.write_bytes(wheel.read_bytes()[:-10] + b"0123456789")  # same size, other bytes
    assert fetch.wheels_for(locked, "3.13", work) == {wheel.name: wheel.read_bytes()}
    assert cached.read_bytes() == wheel.read_bytes()
    assert [p.name for p in cached.parent.iterdir()] == [digest]  # no temporary file left


def test_corrupt_cached_wheel_that_cannot_be_fetched_again_refuses_the_build(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    data = yaml.safe_load(matrix.read_text())
    data["targets"][name]["components"] = ["numpy-env"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock_path = matrix.parent / "matrix.lock"
    lock = lockfile.load(lock_path)
    lock.apt[f"{name}/numpy-env-build"] = lock.apt["hip-python/numpy-env-build"]
    lock_path.write_text(lockfile.dump(lock))
    assert not load_plan(matrix).targets[name].unresolved
    entry = lock.python["numpy-env"]["numpy"]
    digest = entry.sha256[0]
    cached = fetch.cache_dir(state / "work") / digest
    cached.write_bytes(b"not the wheel\n")
    actual = hashlib.sha256(b"not the wheel\n").hexdigest()
    before = engine_state(docker_client, name)
    # Nowhere to fetch it from again: a closed port on loopback, no retries.
    proc = run_cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "build",
        "--target",
        name,
        env={
            "PIP_INDEX_URL": f"http://127.0.0.1:{local_registry.free_port()}/simple",
            "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "2",
        },
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_one_error_line(proc.stderr, str(cached), f"sha256 {actual}", f"expected {digest}", f"numpy=={entry.version}")
    assert "Step 1/" not in proc.stderr and not (state / "logs" / f"{name}.log").exists()
    assert not cached.exists()
    assert_nothing_left(docker_client, before)


# -- 2. the registry dies during a push ---------------------------------------------------------
class Registry:
    """Debian's docker-registry on one loopback port and storage directory, stopped and started
    again on both (tests/local_registry.py picks a new of each per run)."""

    def __init__(self, root: Path) -> None:
        import shutil

        self.exe = shutil.which("docker-registry")
        if not self.exe:
            _need("docker-registry is not installed (apt-get install docker-registry)")
        self.root, self.port, self.proc = root, local_registry.free_port(), None
        self.storage = root / "storage"
        root.mkdir()
        (root / "config.yml").write_text(
            f"version: 0.1\nlog:\n  level: warn\nhttp:\n  addr: 127.0.0.1:{self.port}\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n"
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.root / "registry.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.exe, "serve", str(self.root / "config.yml")], stdout=log, stderr=subprocess.STDOUT
            )
        assert local_registry._ready(self.port, self.proc), (self.root / "registry.log").read_text()[-2000:]

    def crash(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def uploading(self) -> bool:
        return any(self.storage.glob("docker/registry/v2/repositories/**/_uploads/*"))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            processes.stop(self.proc)


@pytest.fixture
def registry(tmp_path):
    reg = Registry(tmp_path / "registry")
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def pushable(docker_client, base, tmp_path):
    """A built scratch target with a few MB of its own, recorded as passed: (matrix, state, name, image ID)."""
    matrix, state, name = project(tmp_path, f"RUN echo {uuid.uuid4().hex} && head -c 8000000 /dev/urandom > /opt/noise")
    image_id = built(docker_client, matrix, state, name)
    passed(state, image_id, name, matrix)
    yield matrix, state, name, image_id
    for img in docker_client.api.images():
        for ref in img.get("RepoTags") or []:
            if f"/rocmforge/{name}:" in ref:
                docker_client.api.remove_image(ref)
    forget(docker_client, matrix, state, name)


def registry_tags(client, registry_address: str, name: str) -> list[str]:
    return [
        ref
        for img in client.api.images()
        for ref in img.get("RepoTags") or []
        if ref.startswith(f"{registry_address}/") and f"/{name}:" in ref
    ]


def test_registry_dying_mid_push_leaves_no_record_and_a_rerun_completes(docker_client, registry, pushable):
    matrix, state, name, image_id = pushable
    record = matrix.parent / "published" / f"{name}.json"
    proc = start(matrix, state, "push", "--target", name, "--registry", registry.address)
    try:
        while not registry.uploading():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        registry.crash()
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out + err
    assert_one_error_line(err, f"push of {registry.address}/rocmforge/{name}:", "failed")
    assert not record.exists()
    assert registry_tags(docker_client, registry.address, name) == []
    registry.start()
    proc = run_cli(
        "--matrix", str(matrix), "--state-dir", str(state), "push", "--target", name, "--registry", registry.address
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = json.loads(record.read_text())
    assert written["image_id"] == image_id and written["digest"].startswith("sha256:")
    assert registry_tags(docker_client, registry.address, name) == []


# -- 3. Ctrl-C ----------------------------------------------------------------------------------
def test_interrupted_bootstrap_leaves_no_mount_directory_or_tag(docker_client, tmp_path):
    """A recipe no engine holds (an extra package), so debootstrap really runs; interrupted once
    its second stage has mounted /proc inside the new tree."""
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    data = yaml.safe_load(matrix.read_text())
    data["stacks"][STACK]["base"]["bootstrap"]["include"] = ["less"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    base_ref = load_plan(matrix).targets[name].files["Dockerfile"].decode().split("\nFROM ", 1)[1].split()[0]
    if docker_client.api.images(name=base_ref):
        docker_client.api.remove_image(base_ref)  # left by an earlier run stopped short of its clean-up
    before = engine_state(docker_client, name, base_ref)
    work = state / "work"
    work.mkdir(parents=True)
    rc, out, err = interrupt_when(
        start(matrix, state, "build", "--target", name), lambda: mounts_under(work), "debootstrap mounted anything"
    )
    assert rc == 130, out + err
    assert "interrupted" in err and "Traceback" not in err, err
    assert mounts_under(state) == []
    assert list(work.iterdir()) == []
    assert not docker_client.api.images(name=base_ref)
    assert_nothing_left(docker_client, before)


@pytest.fixture
def scratch_built(docker_client, base, tmp_path):
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    image_id = built(docker_client, matrix, state, name)
    yield matrix, state, name, image_id
    forget(docker_client, matrix, state, name)


@pytest.mark.parametrize(
    "sig, group",
    [
        (signal.SIGINT, True),
        (signal.SIGTERM, True),
        (signal.SIGTERM, False),  # the CLI alone: it must end its suite processes itself
    ],
    ids=["INT", "TERM-group", "TERM-cli-only"],
)
def test_interrupted_suites_leave_no_container_record_or_directory(docker_client, scratch_built, tmp_path, sig, group):
    matrix, state, name, image_id = scratch_built
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    before = engine_state(docker_client, name)

    def suite_container() -> bool:
        return any(c["ImageID"] == image_id for c in docker_client.api.containers(filters={"label": TEST_LABEL}))

    proc = start(matrix, state, "test", "--target", name, env={"TMPDIR": str(tmp)})
    rc, out, err = interrupt_when(proc, suite_container, "a suite started its container", sig, group)
    assert rc == 128 + sig, out + err
    assert err.strip().splitlines()[-1] == stopped_message(sig) and "Traceback" not in err, err
    assert group_gone(proc), "a suite process outlived the command"
    assert suite_runs.recorded(state, image_id) is None
    assert list(tmp.iterdir()) == []
    assert_nothing_left(docker_client, before)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_interrupted_push_leaves_no_record_or_temporary_tag(docker_client, registry, pushable, sig):
    matrix, state, name, _ = pushable
    rc, out, err = interrupt_when(
        start(matrix, state, "push", "--target", name, "--registry", registry.address),
        registry.uploading,
        "a layer upload began",
        sig,
    )
    assert rc == 128 + sig, out + err
    assert err.strip().splitlines()[-1] == stopped_message(sig) and "Traceback" not in err, err
    assert not (matrix.parent / "published" / f"{name}.json").exists()
    assert registry_tags(docker_client, registry.address, name) == []


def test_lock_stopped_by_sigterm_leaves_no_container_and_the_lock_as_it_was(docker_client, base, tmp_path):
    """The stack copied under a name of its own, its base tagged for it, so the lock's apt
    container (the base's, with fresh lists) is this test's own; stopped while it updates them."""
    matrix, state, name = project(tmp_path, "RUN touch /opt/one")
    stack = f"sig-{uuid.uuid4().hex[:8]}"
    data = yaml.safe_load(matrix.read_text())
    data["stacks"][stack] = data["stacks"][STACK]
    data["targets"][name]["stack"] = stack
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock_path = matrix.parent / "matrix.lock"
    lock = yaml.safe_load(lock_path.read_text())
    lock["bases"][stack] = lock["bases"][STACK]
    lock_path.write_text(yaml.safe_dump(lock))
    locked = lock_path.read_bytes()
    ref = base.replace(f"/base-{STACK}:", f"/base-{stack}:")
    docker_client.api.tag(base, *ref.rsplit(":", 1))
    try:
        before = engine_state(docker_client, stack)

        def apt_container() -> bool:
            return any(c["Image"] == ref for c in docker_client.api.containers(filters={"label": TEST_LABEL}))

        rc, out, err = interrupt_when(
            start(matrix, state, "lock", "--target", name),
            apt_container,
            "the apt container started",
            signal.SIGTERM,
            group=False,
        )
        assert rc == 143, out + err
        assert err.strip().splitlines()[-1] == "interrupted by SIGTERM" and "Traceback" not in err, err
        assert lock_path.read_bytes() == locked
        assert_nothing_left(docker_client, before)
    finally:
        docker_client.api.remove_image(ref)


# -- 4. a full filesystem -----------------------------------------------------------------------
@pytest.fixture
def small_state(tmp_path):
    """A 2 MB tmpfs as the state directory."""
    state = tmp_path / "full"
    state.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(state)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs: {proc.stderr}")
        pytest.skip(f"cannot mount a tmpfs (needs root): {proc.stderr.strip()}")
    yield state
    subprocess.run(["umount", "--lazy", str(state)], check=True)


def fill(state: Path) -> None:
    """Every byte of the filesystem taken."""
    fd = os.open(state / "ballast", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 512, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


def json_files_parse(state: Path) -> None:
    for path in state.rglob("*.json"):
        json.loads(path.read_text())


def test_full_state_directory_fails_cleanly_and_a_healthy_one_works(docker_client, base, tmp_path, small_state):
    noise = f"RUN echo {uuid.uuid4().hex} && head -c 4000000 /dev/urandom > /opt/noise"  # more than the 2 MB
    matrix, healthy, name = project(tmp_path, noise)
    before = engine_state(docker_client, name)
    content = load_plan(matrix).targets[name].content_tag
    try:
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(small_state), "build", "--target", name)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert_one_error_line(proc.stderr, "No space left on device", str(small_state))
        assert not docker_client.api.images(name=content.rsplit(":", 1)[0])
        assert_nothing_left(docker_client, before)
        json_files_parse(small_state)
        # The writers after a build: the manifest, the suite results, the report.
        image_id = built(docker_client, matrix, healthy, name)
        fill(small_state)
        for args in (["manifest", "--target", name], ["report"]):
            proc = run_cli("--matrix", str(matrix), "--state-dir", str(small_state), *args)
            assert proc.returncode != 0, (args, proc.stdout + proc.stderr)
            assert_one_error_line(proc.stderr, "No space left on device", str(small_state))
            json_files_parse(small_state)
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(small_state), "test", "--target", name, "--json")
        assert proc.returncode == 1 and "No space left on device" in proc.stderr, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        json_files_parse(small_state)
        assert suite_runs.recorded(small_state, image_id) is None
        # Room again: the same state directory works.
        (small_state / "ballast").unlink()
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(small_state), "manifest", "--target", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        forget(docker_client, matrix, healthy, name)


# -- 5. two builds at once ----------------------------------------------------------------------
def test_two_builds_of_one_target_at_once_agree_and_leave_nothing(docker_client, base, tmp_path):
    matrix, state, name = project(
        tmp_path, f"RUN echo {uuid.uuid4().hex} && seq 300000 > /opt/numbers\nRUN touch /opt/two"
    )
    before = engine_state(docker_client, name)
    try:
        procs = [start(matrix, state, "build", "--target", name) for _ in range(2)]
        outcomes = [(p.communicate(), p.returncode) for p in procs]
        for (out, err), rc in outcomes:
            assert rc == 0, out + err[-3000:]
        tp = load_plan(matrix).targets[name]
        image_id = docker_client.api.inspect_image(tp.content_tag)["Id"]
        for (out, _err), _ in outcomes:
            assert image_id[7:19] in out, out
        assert_nothing_left(docker_client, before, {image_id} | cache_images(docker_client, state, name))
        # only the index of the base's filesystem stays (kept for the next build on that base),
        # and in it only whole index files: no half-written temporary one
        assert [p.name for p in (state / "work").glob("*")] in ([], ["lower-index"])
        assert all(p.suffix == ".sqlite" for p in (state / "work").glob("lower-index/*"))
        assert not list((state / "work").glob("lower-index/.*"))
        json_files_parse(state)
    finally:
        forget(docker_client, matrix, state, name)
    assert_nothing_left(docker_client, before)


# -- 5b. `clean` while another build runs --------------------------------------------------------


def with_builder_stage(tmp_path, matrix: Path, first: str, second: str, before_copy: str = "") -> None:
    """Adds target `second` on top of `first`, with a builder stage (an untagged leaf image while
    and after it builds, carrying our labels) that its last stage copies from."""
    data = yaml.safe_load(matrix.read_text())
    data["targets"][second] = {**data["targets"][first], "from_target": first}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    text = tpl.read_text().replace(
        '{% import "partials/_common.j2" as common %}\n',
        '{% import "partials/_common.j2" as common %}\n'
        f"{{% if name == '{second}' %}}FROM {{{{ from_ref }}}} AS early\nRUN touch /opt/early\n{{% endif %}}\n",
    )
    tpl.write_text(
        text.replace(
            f"{{% if name == '{first}' %}}",
            f"{{% if name == '{second}' %}}{before_copy}COPY --from=early /opt/early /opt/early\n"
            f"{{% endif %}}{{% if name == '{first}' %}}",
        )
    )


def test_clean_while_another_build_runs_keeps_that_builds_step_images(docker_client, base, tmp_path):
    """A finished stage waits as an untagged image (carrying its base's labels) until a later
    stage copies from it; `clean` of an unrelated target must not take it from the running build."""
    matrix, state, first = project(tmp_path, "RUN touch /opt/first")
    second, other = first + "-on-top", first + "-other"
    data = yaml.safe_load(matrix.read_text())
    data["targets"][other] = dict(data["targets"][first])
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    with_builder_stage(tmp_path, matrix, first, second, before_copy="RUN sleep 8\n")
    try:
        built(docker_client, matrix, state, first)
        built(docker_client, matrix, state, other)
        log = state / "logs" / f"{second}.log"
        proc = start(matrix, state, "build", "--target", second)
        deadline = time.monotonic() + 600
        while not (log.exists() and "sleep 8" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1)  # the sleep step's container is running; the early stage is an idle image
        # another checkout's state dir: only the engine is shared
        cleaned = run_cli(
            "--matrix", str(matrix), "--state-dir", str(tmp_path / "other-state"), "clean", "--target", other
        )
        assert cleaned.returncode == 0, cleaned.stderr
        out, err = proc.communicate()
        assert proc.returncode == 0, out + err[-3000:]
        assert "another build is running" in cleaned.stderr, cleaned.stderr
    finally:
        for name in (second, first, other):
            forget(docker_client, matrix, state, name)


def test_clean_of_one_target_keeps_another_targets_build_cache(docker_client, base, tmp_path):
    matrix, state, first = project(tmp_path, f"RUN echo {uuid.uuid4().hex} > /opt/first")
    second = first + "-second"
    with_builder_stage(tmp_path, matrix, first, second)
    try:
        built(docker_client, matrix, state, first)
        built(docker_client, matrix, state, second)
        theirs = cache_images(docker_client, state, second)
        assert theirs, "the second target kept no build cache to protect"
        listed = run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", first, "--dry-run")
        assert not [i for i in theirs if i in listed.stdout], listed.stdout
        assert run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", first).returncode == 0
        assert all(docker_client.api.inspect_image(i) for i in theirs)
    finally:
        for name in (first, second):
            forget(docker_client, matrix, state, name)
